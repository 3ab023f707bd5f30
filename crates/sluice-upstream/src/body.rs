//! The response body handed to the gateway: HTTP/1.1 (our codec's [`h1::H1Body`]) or HTTP/2
//! (`h2::RecvStream`) behind one `http_body::Body`, carrying the connection lease so that the
//! end of the body, or its drop, is what frees (or discards) the connection.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use crate::error::{self, BodyError};
use crate::shard::InFlight;
use crate::timing::PhaseTimings;
use crate::{h1, h2};

/// The body of an upstream response.
///
/// Backpressure: data is read from the upstream only as fast as this body is polled. On
/// HTTP/2 each chunk's flow-control capacity is released when `poll_frame` returns it, so a
/// consumer that stops polling stops the upstream after one stream window; on HTTP/1.1 the
/// socket is simply not read.
///
/// Cancellation: dropping the body before its end cancels the upstream request: HTTP/2 sends
/// RST_STREAM(CANCEL) and keeps the connection for other streams; HTTP/1.1 closes the
/// connection (HTTP/1.1 has no other way to abort) and never reuses it. Reading the body to
/// its end returns an HTTP/1.1 connection to the keep-alive pool.
pub struct ResponseBody {
    kind: Kind,
    timings: PhaseTimings,
    /// The start of `send`, which `last_byte` counts from.
    started: Instant,
    // Dropped with the body: the request counts as in flight until then.
    _in_flight: InFlight,
}

enum Kind {
    H1(h1::H1Body),
    H2(H2Body),
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proto = match self.kind {
            Kind::H1(_) => "http/1.1",
            Kind::H2(_) => "h2",
        };
        f.debug_struct("ResponseBody")
            .field("protocol", &proto)
            .field("end_stream", &self.is_end_stream())
            .field("timings", &self.timings)
            .finish()
    }
}

impl ResponseBody {
    pub(crate) fn h1(
        body: h1::H1Body,
        in_flight: InFlight,
        (timings, started): (PhaseTimings, Instant),
    ) -> Self {
        ResponseBody {
            kind: Kind::H1(body),
            timings,
            started,
            _in_flight: in_flight,
        }
    }

    pub(crate) fn h2(
        body: ::h2::RecvStream,
        stream: h2::StreamGuard,
        lease: h2::StreamLease,
        in_flight: InFlight,
        (timings, started): (PhaseTimings, Instant),
    ) -> Self {
        ResponseBody {
            kind: Kind::H2(H2Body {
                body,
                data_done: false,
                stream: Some((stream, lease)),
            }),
            timings,
            started,
            _in_flight: in_flight,
        }
    }

    /// This request's phase timings: the same as in the response's extensions, plus
    /// [`PhaseTimings::last_byte`] once `poll_frame` has returned the body's end (its
    /// trailers, or `None`). A body that failed, or was dropped early, has no last byte.
    pub fn timings(&self) -> PhaseTimings {
        self.timings
    }

    /// Reads at most `cap` bytes of the body (an error body, a token endpoint's answer): what
    /// is past them is dropped with the body, which cancels the rest upstream. A body error
    /// ends the read: the bytes before it, and the error.
    ///
    /// # Errors
    /// The bytes read so far and the [`BodyError`] that cut the body.
    pub async fn read_capped(mut self, cap: usize) -> Result<Bytes, (Bytes, BodyError)> {
        use http_body_util::BodyExt;
        let mut buf = bytes::BytesMut::new();
        while let Some(frame) = self.frame().await {
            let frame = match frame {
                Ok(f) => f,
                Err(e) => return Err((buf.freeze(), e)),
            };
            if let Ok(d) = frame.into_data() {
                let room = cap.saturating_sub(buf.len());
                buf.extend_from_slice(&d[..d.len().min(room)]);
                if buf.len() >= cap {
                    break;
                }
            }
        }
        Ok(buf.freeze())
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let polled = match &mut this.kind {
            Kind::H1(b) => b.poll_frame(cx),
            Kind::H2(b) => b.poll_frame(cx),
        };
        // Trailers are the last frame of a body; `None` ends one without trailers.
        let ended = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(frame))) => frame.is_trailers(),
            _ => false,
        };
        if ended && this.timings.last_byte.is_none() {
            let end = match &this.kind {
                Kind::H1(b) => b.ended_at(),
                Kind::H2(_) => None,
            };
            let end = end.unwrap_or_else(Instant::now);
            this.timings.last_byte = Some(end.saturating_duration_since(this.started));
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::H1(b) => b.is_end_stream(),
            Kind::H2(b) => b.stream.is_none() || b.body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::H1(b) => b.size_hint(),
            Kind::H2(_) => SizeHint::default(),
        }
    }
}

struct H2Body {
    body: ::h2::RecvStream,
    data_done: bool,
    /// The stream handle (reset on drop while open) and its slot on the connection; `None`
    /// once the stream ended, which frees the slot at once rather than at drop.
    stream: Option<(h2::StreamGuard, h2::StreamLease)>,
}

impl H2Body {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.stream.is_none() {
            return Poll::Ready(None);
        }
        if !self.data_done {
            match ready!(self.body.poll_data(cx)) {
                Some(Ok(chunk)) => {
                    // Capacity goes back to the upstream only now that the chunk leaves us:
                    // this is what makes a slow consumer slow the upstream down.
                    let _ = self.body.flow_control().release_capacity(chunk.len());
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(self.end_with(&e)))),
                None => self.data_done = true,
            }
        }
        match ready!(self.body.poll_trailers(cx)) {
            Ok(Some(trailers)) => {
                self.finish();
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            Ok(None) => {
                self.finish();
                Poll::Ready(None)
            }
            Err(e) => Poll::Ready(Some(Err(self.end_with(&e)))),
        }
    }

    fn end_with(&mut self, e: &::h2::Error) -> BodyError {
        if let Some((_, lease)) = &self.stream {
            lease.observe(e);
        }
        self.finish();
        error::from_h2_body(e)
    }

    /// The stream is closed: no reset needed, and its slot is free for another request.
    fn finish(&mut self) {
        if let Some((guard, lease)) = self.stream.take() {
            guard.disarm();
            drop(lease);
        }
    }
}
