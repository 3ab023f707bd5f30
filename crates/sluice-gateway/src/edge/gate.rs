//! A side future polled only after it asked to be.
//!
//! `tokio::select!` polls every branch each time its task wakes. A client connection's task
//! wakes for every read and write of every request, while what watches over the connection
//! (the watchdog, the drain signal, the goodbye timer) wakes it about never; selected side by
//! side, each small call paid for polling those every time (a `Notify`'s lock, two timers'
//! checks: ~2 K instructions a call). [`Gated`] gives the side future a waker of its own and
//! polls it only after that waker fired.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;

/// `fut`, polled by [`Gated::poll_gated`] only when its own waker fired since its last poll
/// (and on the first call, so that it can register its wakers).
pub(crate) struct Gated<F> {
    fut: F,
    gate: Arc<Gate>,
    waker: Waker,
}

/// What the side future's waker sets, and the task it wakes.
struct Gate {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if let Some(w) = self.task.lock().as_ref() {
            w.wake_by_ref();
        }
    }
}

impl<F: Future + Unpin> Gated<F> {
    /// Gates `fut`.
    pub(crate) fn new(fut: F) -> Self {
        let gate = Arc::new(Gate {
            woken: AtomicBool::new(true),
            task: Mutex::new(None),
        });
        let waker = Waker::from(gate.clone());
        Gated { fut, gate, waker }
    }

    /// Polls the side future if its waker fired since its last poll; `Pending` otherwise.
    /// The calling task is woken when it fires.
    pub(crate) fn poll_gated(&mut self, cx: &mut Context<'_>) -> Poll<F::Output> {
        {
            // Before the flag is read: a wake that comes after the read then finds the task.
            let mut task = self.gate.task.lock();
            if !task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        if !self.gate.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        Pin::new(&mut self.fut).poll(&mut Context::from_waker(&self.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    /// Counts its polls; ready once `ready` is set (and its waker called).
    struct Probe {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<Mutex<Option<Waker>>>,
    }

    impl Future for Probe {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn the_side_is_polled_once_and_then_only_when_it_woke() {
        let polls = Arc::new(AtomicUsize::new(0));
        let ready = Arc::new(AtomicBool::new(false));
        let waker = Arc::new(Mutex::new(None));
        let mut side = Gated::new(Probe {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: waker.clone(),
        });
        // The main future wakes its task ten times; the side is polled on the first only.
        let mut main_wakes = 0;
        let waker2 = waker.clone();
        let ready2 = ready.clone();
        let out = std::future::poll_fn(|cx| {
            if let Poll::Ready(()) = side.poll_gated(cx) {
                return Poll::Ready("side");
            }
            main_wakes += 1;
            if main_wakes == 10 {
                // The side's own event: its waker fires, from another task.
                let (w, r) = (waker2.clone(), ready2.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    r.store(true, Ordering::SeqCst);
                    if let Some(w) = w.lock().take() {
                        w.wake();
                    }
                });
            } else if main_wakes < 10 {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        })
        .await;
        assert_eq!(out, "side");
        assert_eq!(main_wakes, 10);
        // Once to register, once after its waker fired: not once per wake of the task.
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }
}
