//! An HTTP/1.1 response body, read straight from its connection as it is polled.

use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::time::Instant;

use super::codec::{BodyDecoder, Decoded, Framing};
use super::conn::H1Error;
use super::Lease;
use crate::error::BodyError;

/// The body of one HTTP/1.1 response, holding its connection's lease until the body ends.
///
/// The socket is read only while the body is polled and has nothing buffered, one read at a
/// time: a consumer that stops polling stops reading. At the body's clean end (and with
/// nothing after it in the buffer) the connection goes back to the pool at once, before the
/// last frame is even returned; dropped before the end, the connection is closed.
pub(crate) struct H1Body {
    decoder: BodyDecoder,
    /// `Some` until the body ended or failed.
    lease: Option<Lease>,
    /// The response allows another request on the connection after it.
    keep_alive: bool,
    /// A read or framing error was returned: nothing more comes.
    failed: bool,
    /// When the body ended, if returning the connection to the pool read the clock: the last
    /// byte's time, without a second read.
    ended_at: Option<Instant>,
}

impl H1Body {
    /// The body that follows a response head framed by `framing`; whatever of it arrived with
    /// the head is already in the lease's connection buffer.
    pub(crate) fn new(framing: Framing, keep_alive: bool, lease: Lease) -> Self {
        let mut body = H1Body {
            decoder: BodyDecoder::new(framing),
            lease: Some(lease),
            keep_alive,
            failed: false,
            ended_at: None,
        };
        if body.decoder.is_done() {
            // No body at all: the connection is free before the caller looks at the head.
            body.finish();
        }
        body
    }

    /// The next frame: data as it arrives, then trailers (if any) or `None`.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        loop {
            let Some(lease) = self.lease.as_mut() else {
                return Poll::Ready(None);
            };
            let conn = lease.conn_mut();
            match self.decoder.decode(&mut conn.buf) {
                Ok(Decoded::Data(data)) => {
                    if self.decoder.is_done() {
                        self.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(Decoded::Trailers(trailers)) => {
                    self.finish();
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
                Ok(Decoded::End) => {
                    self.finish();
                    return Poll::Ready(None);
                }
                Ok(Decoded::NeedMore) => {}
                Err(e) => return Poll::Ready(Some(Err(self.fail(&H1Error::Protocol(e))))),
            }
            match ready!(conn.poll_fill(cx)) {
                Ok(0) => {
                    if self.decoder.eof().is_err() {
                        return Poll::Ready(Some(Err(self.fail(&H1Error::Incomplete))));
                    }
                    // A body delimited by the close: it ended cleanly, the connection did not.
                    self.keep_alive = false;
                    self.finish();
                    return Poll::Ready(None);
                }
                Ok(_) => {}
                Err(e) => return Poll::Ready(Some(Err(self.fail(&H1Error::Io(e))))),
            }
        }
    }

    /// Nothing more to read: the body ended (or failed).
    pub(crate) fn is_end_stream(&self) -> bool {
        self.lease.is_none()
    }

    /// Exact for a Content-Length body (what is left of it) and an ended one.
    pub(crate) fn size_hint(&self) -> SizeHint {
        if self.failed {
            return SizeHint::with_exact(0);
        }
        match self.decoder.remaining() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }

    /// The body ended cleanly: the connection goes back to the pool if the response allows
    /// it and nothing followed the body (bytes past its end would be taken for the next
    /// response); otherwise it is closed.
    fn finish(&mut self) {
        if let Some(mut lease) = self.lease.take() {
            if self.keep_alive && lease.conn_mut().buf.is_empty() {
                self.ended_at = lease.reuse();
            }
        }
    }

    /// When the body ended, if the pool took the time then (see `ended_at`).
    pub(crate) fn ended_at(&self) -> Option<Instant> {
        self.ended_at
    }

    /// A broken response leaves the connection in an unknown state: it is closed.
    fn fail(&mut self, e: &H1Error) -> BodyError {
        self.failed = true;
        drop(self.lease.take());
        e.body_error()
    }
}
