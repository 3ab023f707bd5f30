//! The request body as the gateway reads it: timed (a longest gap between two pieces, and a
//! whole), and charged to the memory budget as it arrives, so that a client trickling a body
//! at one byte a second, or thirty clients each parking 10 MiB, cost a bounded time and a
//! bounded amount of memory.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::body_budget::BodyLease;
use crate::error::ClientBodyError;

type BoxError = Box<dyn StdError + Send + Sync>;

struct Timers {
    gap: Pin<Box<Sleep>>,
    total: Pin<Box<Sleep>>,
}

/// A request body with its timeouts and its memory charge.
pub(crate) struct IngressBody<B> {
    inner: B,
    lease: Arc<BodyLease>,
    /// Bytes charged so far (a declared length is charged up front).
    charged: u64,
    received: u64,
    started: Instant,
    body_idle: Duration,
    body: Duration,
    /// Made only when the body is not there at once: most bodies arrive with their head.
    timers: Option<Timers>,
}

impl<B> IngressBody<B> {
    /// `prepaid`: bytes already charged to `lease` for this body. `started`: when the request
    /// head arrived (the whole body's clock starts there).
    pub(crate) fn new(
        inner: B,
        lease: Arc<BodyLease>,
        prepaid: u64,
        started: Instant,
        body_idle: Duration,
        body: Duration,
    ) -> Self {
        IngressBody {
            inner,
            lease,
            charged: prepaid,
            received: 0,
            started,
            body_idle,
            body,
            timers: None,
        }
    }
}

impl<B> Body for IngressBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.received += d.len() as u64;
                    if this.received > this.charged {
                        let more = this.received - this.charged;
                        if let Err(e) = this.lease.charge(more) {
                            return Poll::Ready(Some(Err(Box::new(ClientBodyError::from(e)))));
                        }
                        this.charged = this.received;
                    }
                    if let Some(t) = &mut this.timers {
                        t.gap.as_mut().reset(Instant::now() + this.body_idle);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let (body_idle, body, started) = (this.body_idle, this.body, this.started);
                let t = this.timers.get_or_insert_with(|| Timers {
                    gap: Box::pin(tokio::time::sleep(body_idle)),
                    total: Box::pin(tokio::time::sleep_until(started + body)),
                });
                if t.total.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(Box::new(ClientBodyError::Total(body)))));
                }
                if t.gap.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(Box::new(ClientBodyError::Idle(body_idle)))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body_budget::BodyBudget;
    use http_body_util::{BodyExt, StreamBody};

    /// One-byte frames, one every `every`.
    fn trickle(
        n: usize,
        every: Duration,
    ) -> StreamBody<impl futures_util::Stream<Item = Result<Frame<Bytes>, BoxError>>> {
        StreamBody::new(futures_util::stream::unfold(0, move |i| async move {
            if i == n {
                return None;
            }
            tokio::time::sleep(every).await;
            Some((Ok(Frame::data(Bytes::from_static(b"x"))), i + 1))
        }))
    }

    fn body<B>(inner: B, budget: u64) -> (IngressBody<B>, Arc<BodyBudget>) {
        let b = BodyBudget::new(budget);
        let lease = BodyLease::new(b.clone());
        let body = IngressBody::new(
            inner,
            lease,
            0,
            Instant::now(),
            Duration::from_secs(2),
            Duration::from_secs(10),
        );
        (body, b)
    }

    fn kind(e: BoxError) -> String {
        e.downcast::<ClientBodyError>().unwrap().to_string()
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_is_cut_at_the_total_and_a_stall_at_the_gap() {
        // One byte a second: never a 2 s gap, but not done within 10 s.
        let (b, _) = body(Box::pin(trickle(100, Duration::from_secs(1))), 1 << 20);
        let start = Instant::now();
        let e = b.collect().await.unwrap_err();
        assert_eq!(kind(e), "the request body was not complete within 10s");
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        // A stall: 3 s between pieces.
        let (b, _) = body(Box::pin(trickle(3, Duration::from_secs(3))), 1 << 20);
        let e = b.collect().await.unwrap_err();
        assert_eq!(kind(e), "no request body bytes for 2s");
        // A body that keeps pace is read whole, and charged.
        let (b, budget) = body(Box::pin(trickle(5, Duration::from_secs(1))), 1 << 20);
        let lease = b.lease.clone();
        assert_eq!(b.collect().await.unwrap().to_bytes().len(), 5);
        assert_eq!((lease.held(), budget.used()), (5, 5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_past_the_budget_fails_and_takes_nothing_more() {
        let (b, budget) = body(Box::pin(trickle(5, Duration::from_millis(1))), 3);
        let e = b.collect().await.unwrap_err();
        assert!(kind(e).contains("memory budget (3 bytes)"));
        assert_eq!(budget.used(), 0, "the lease went with the body");
    }
}
