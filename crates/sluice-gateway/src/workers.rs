//! Threads that serve client connections (`server.workers`, opt-in): each runs a
//! single-threaded tokio runtime, and a connection lives on one of them from its accept to its
//! close, with the upstream exchanges of its requests (as nginx's worker processes and
//! HAProxy's threads do). New connections go to the thread with the fewest.
//!
//! What it buys over tokio's multi-threaded scheduler, where any thread runs any task: no
//! task moves between threads, so a saturated gateway does more calls per CPU. What it costs:
//! a connection can only run on its own thread, so when other processes hold the CPUs, or a
//! request of the same thread is CPU-heavy (a large translation), its calls wait where the
//! shared scheduler would have run them elsewhere. Both measured in docs/BENCHMARKS.md
//! ("Connections pinned to worker threads"); the shared scheduler stays the default.
//!
//! The accept loop, the admin plane and the background tasks stay on the runtime that
//! started the gateway; [`Workers`] only take accepted connections.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// A set of connection-serving threads; stopped and joined when dropped (after the gateway
/// that used them has shut down: a connection still on a thread then is dropped with it).
#[derive(Debug)]
pub struct Workers {
    threads: Vec<Worker>,
}

#[derive(Debug)]
struct Worker {
    handle: Handle,
    /// Live connections on this thread.
    conns: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A connection counted on its worker until dropped.
pub(crate) struct Load(Arc<AtomicUsize>);

impl Drop for Load {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Workers {
    /// Starts `n` threads (at least one), named `sluice-worker-N`.
    ///
    /// # Errors
    /// The OS refused a thread or the runtime's I/O driver (the threads already started are
    /// stopped).
    pub fn start(n: usize) -> std::io::Result<Workers> {
        let mut threads = Vec::with_capacity(n.max(1));
        for i in 0..n.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = rt.handle().clone();
            let (stop, stopped) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("sluice-worker-{i}"))
                .spawn(move || {
                    sluice_upstream::home::set(i + 1);
                    rt.block_on(async {
                        let _ = stopped.await;
                    });
                })?;
            threads.push(Worker {
                handle,
                conns: Arc::new(AtomicUsize::new(0)),
                stop: Some(stop),
                thread: Some(thread),
            });
        }
        Ok(Workers { threads })
    }

    /// How many threads.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    /// Never: [`Workers::start`] starts at least one.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// The live client connections on each thread, in thread order.
    pub fn connections(&self) -> Vec<usize> {
        self.threads
            .iter()
            .map(|w| w.conns.load(Ordering::Relaxed))
            .collect()
    }

    /// The thread with the fewest live connections, and the count of the new one on it.
    pub(crate) fn pick(&self) -> (&Handle, Load) {
        let w = self
            .threads
            .iter()
            .min_by_key(|w| w.conns.load(Ordering::Relaxed))
            .expect("at least one worker");
        w.conns.fetch_add(1, Ordering::Relaxed);
        (&w.handle, Load(w.conns.clone()))
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.threads {
            if let Some(stop) = w.stop.take() {
                let _ = stop.send(());
            }
        }
        for w in &mut self.threads {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}
