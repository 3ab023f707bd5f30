//! The task that drives a resumable stream's relay, whoever reads it (see `resume`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::Body;
use tokio::time::{Instant, Sleep};

use super::SseRelay;
use crate::resume::{Registry, Stream};

/// Frames taken in one poll before the task yields to the others on its thread.
const FRAMES_PER_POLL: u32 = 64;

/// Starts the task that drives `relay` into `stream`'s log, then keeps the log for `keep`
/// after the generation ends and removes it from `registry`.
pub(crate) fn spawn(relay: Box<SseRelay>, stream: Arc<Stream>, registry: Arc<Registry>) {
    tokio::spawn(Pump {
        relay: Some(relay),
        stream,
        registry,
        seq: 0,
        sleep: None,
    });
}

struct Pump {
    /// `None` once the generation has ended: then the log lingers for a reconnect.
    relay: Option<Box<SseRelay>>,
    stream: Arc<Stream>,
    registry: Arc<Registry>,
    /// The next event's number.
    seq: u64,
    /// The keep deadline being waited for (detached, or lingering after the end).
    sleep: Option<(Instant, Pin<Box<Sleep>>)>,
}

impl Pump {
    /// Sets the timer to `at` (a no-op when it is set there) and polls it.
    fn wait_until(&mut self, at: Instant, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.sleep {
            Some((t, s)) if *t == at => s.as_mut().poll(cx),
            _ => {
                let mut s = Box::pin(tokio::time::sleep_until(at));
                let p = s.as_mut().poll(cx);
                self.sleep = Some((at, s));
                p
            }
        }
    }

    /// One event into the log with its id line.
    fn push_event(&mut self, event: &[u8]) {
        let mut b = BytesMut::with_capacity(event.len() + 48);
        b.extend_from_slice(b"id: ");
        b.extend_from_slice(&self.stream.id);
        b.extend_from_slice(b"-");
        b.extend_from_slice(itoa::Buffer::new().format(self.seq).as_bytes());
        b.extend_from_slice(b"\n");
        b.extend_from_slice(event);
        let b = b.freeze();
        self.stream
            .mirror(sluice_state::LogEntry::Event(self.seq, b.clone()));
        self.seq += 1;
        self.stream.push(b);
    }

    /// What the relay sent, an event to a log entry (so an id, and a Responses stream's
    /// `starting_after`, name one event): a failure is two (`error`, `response.failed`).
    fn push_events(&mut self, data: &[u8]) {
        let mut rest = data;
        while !rest.is_empty() {
            let end = event_end(rest);
            self.push_event(&rest[..end]);
            rest = &rest[end..];
        }
    }

    /// Ends the generation here (cancelled, or no reader for `keep`): the relay cancels the
    /// upstream (never drains it) and settles its record, and the log gets its last event, in
    /// the client's API as any failure of the stream.
    fn stop(&mut self, code: &str, message: &str) {
        let ev = match self.relay.take() {
            Some(mut relay) => relay.abandon(code, message),
            None => Bytes::new(),
        };
        self.push_events(&ev);
        self.stream.end();
        self.stream.mirror(sluice_state::LogEntry::End(self.seq));
    }
}

impl Future for Pump {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut frames = 0;
        loop {
            if this.relay.is_none() {
                // Ended: the log stays for reconnects for `keep`, then goes.
                let ended_at = this
                    .stream
                    .inner
                    .lock()
                    .ended_at
                    .unwrap_or_else(Instant::now);
                let until = ended_at + this.stream.keep;
                if this.wait_until(until, cx).is_pending() {
                    return Poll::Pending;
                }
                this.registry.remove(&this.stream);
                return Poll::Ready(());
            }
            let detached_until = {
                let mut g = this.stream.inner.lock();
                g.set_pump(cx.waker());
                if g.cancelled {
                    drop(g);
                    this.stop("cancelled", "the response was cancelled");
                    continue;
                }
                if g.full(this.stream.max_bytes) {
                    // A reader has not read what the log holds: wait for it (it wakes us).
                    return Poll::Pending;
                }
                match g.detached_at {
                    Some(t) if !g.has_readers() && !this.stream.background => {
                        Some(t + this.stream.keep)
                    }
                    _ => None,
                }
            };
            if let Some(until) = detached_until {
                if this.wait_until(until, cx).is_ready() {
                    this.stop(
                        "stream_abandoned",
                        "no client read this stream for its `keep`; the generation was stopped",
                    );
                    continue;
                }
            }
            let Some(relay) = this.relay.as_mut() else {
                continue;
            };
            match Pin::new(relay.as_mut()).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        if comment_only(&data) {
                            this.stream.ping(data);
                        } else {
                            this.push_events(&data);
                        }
                    }
                    frames += 1;
                    if frames >= FRAMES_PER_POLL {
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                }
                Poll::Ready(None) => {
                    this.relay = None;
                    this.stream.end();
                    this.stream.mirror(sluice_state::LogEntry::End(this.seq));
                }
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(never))) => match never {},
            }
        }
    }
}

/// The length of the first event in `b`: through its blank line, or all of `b` when it has
/// none before its end.
fn event_end(b: &[u8]) -> usize {
    b.windows(2)
        .position(|w| w == b"\n\n")
        .map_or(b.len(), |i| i + 2)
}

/// Whether a block the relay sent is only comments (a heartbeat, an upstream's `: ping`):
/// those keep a connection alive and are not events to number.
fn comment_only(b: &Bytes) -> bool {
    b.split(|&c| c == b'\n')
        .all(|line| line.is_empty() || line == b"\r" || line[0] == b':')
}

#[cfg(test)]
mod tests {
    use super::{comment_only, event_end};
    use bytes::Bytes;

    #[test]
    fn heartbeats_are_comments_and_events_with_comments_are_events() {
        assert!(comment_only(&Bytes::from_static(b": ping\n\n")));
        assert!(comment_only(&Bytes::from_static(b":x\r\n\r\n")));
        assert!(!comment_only(&Bytes::from_static(b": c\ndata: {}\n\n")));
        assert!(!comment_only(&Bytes::from_static(b"data: [DONE]\n\n")));
    }

    #[test]
    fn a_block_of_two_events_is_two_entries() {
        let b = b"event: error\ndata: {}\n\nevent: response.failed\ndata: {}\n\n";
        let first = event_end(b);
        assert_eq!(&b[..first], b"event: error\ndata: {}\n\n");
        assert_eq!(first + event_end(&b[first..]), b.len());
        assert_eq!(event_end(b"data: x"), 7);
    }
}
