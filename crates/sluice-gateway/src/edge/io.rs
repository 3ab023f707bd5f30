//! A client connection's bytes, as the connection's watch needs to see them, and two things
//! hyper cannot do for us:
//!
//! - a closing HTTP/2 connection gets GOAWAY(ENHANCE_YOUR_CALM): hyper only sends GOAWAY with
//!   NO_ERROR, so when the connection is to be cut for abuse the socket is handed back (on
//!   drop, through a oneshot) and the frame is written after hyper let go, at a frame
//!   boundary;
//! - hyper answers an HTTP/1.1 request head it cannot parse (bad syntax, a header section over
//!   `max_header_bytes`, a URI too long) by itself, with an empty 400, 431 or 414; that
//!   response is replaced here, at the byte level, by the same status with a short body in the
//!   API's error format. It is recognised by what it is and when it comes: a response head
//!   with `content-length: 0` and nothing else, written while no request of this connection is
//!   in flight and after the client sent bytes that never became a request.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http::StatusCode;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use super::watch::{CloseReason, ConnTracker};
use crate::error::GatewayError;

/// The client connection preface of HTTP/2 starts with these bytes; no HTTP/1.1 method does.
pub(super) const H2_PREFACE_START: &[u8] = b"PRI";

/// GOAWAY(last-stream-id, ENHANCE_YOUR_CALM): frame type 0x7, stream 0, payload 8 bytes.
///
/// The last stream id is the highest possible: we cannot know which streams hyper has begun
/// processing, and a peer treats the streams at or below it as possibly processed, which is the
/// safe side (it will not blindly replay them).
pub(crate) const GOAWAY_ENHANCE_YOUR_CALM: [u8; 17] = [
    0, 0, 8,   // length
    0x7, // GOAWAY
    0,   // flags
    0, 0, 0, 0, // stream 0
    0x7f, 0xff, 0xff, 0xff, // last stream id 2^31 - 1
    0, 0, 0, 0xb, // ENHANCE_YOUR_CALM
];

/// The connection's I/O, seen by its watch.
pub(crate) struct ConnIo<T> {
    inner: Option<T>,
    tracker: Arc<ConnTracker>,
    give_back: Option<oneshot::Sender<T>>,
    /// Bytes of the HTTP/2 preface start matched so far; `None` once decided.
    sniff: Option<usize>,
    /// The last write was flushed: the stream is at a frame boundary.
    clean: bool,
    /// Whether hyper's automatic HTTP/1.1 error responses are replaced.
    rewrite: bool,
    /// The replacement still to be written.
    replacement: Option<Bytes>,
    rewritten: Counter,
}

impl<T> ConnIo<T> {
    /// `give_back` receives the stream when this is dropped while its connection closes for
    /// abuse (to write GOAWAY(ENHANCE_YOUR_CALM)). `alpn_h2`: the TLS handshake chose h2.
    pub(crate) fn new(
        inner: T,
        tracker: Arc<ConnTracker>,
        give_back: oneshot::Sender<T>,
        alpn_h2: bool,
        rewritten: Counter,
    ) -> Self {
        if alpn_h2 {
            tracker.set_h2();
        }
        ConnIo {
            inner: Some(inner),
            tracker,
            give_back: Some(give_back),
            sniff: if alpn_h2 { None } else { Some(0) },
            clean: true,
            rewrite: !alpn_h2,
            replacement: None,
            rewritten,
        }
    }

    fn inner(&mut self) -> io::Result<Pin<&mut T>>
    where
        T: Unpin,
    {
        self.inner
            .as_mut()
            .map(Pin::new)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }

    fn saw(&mut self, bytes: &[u8]) {
        if let Some(matched) = self.sniff {
            let want = &H2_PREFACE_START[matched..];
            let n = want.len().min(bytes.len());
            if bytes[..n] != want[..n] {
                self.sniff = None;
            } else if matched + n == H2_PREFACE_START.len() {
                self.sniff = None;
                self.rewrite = false;
                self.tracker.set_h2();
            } else {
                self.sniff = Some(matched + n);
            }
        }
        self.tracker.bytes_read();
    }

    /// Whether hyper may be writing its automatic error response now: no request in flight,
    /// and bytes came that did not become a request.
    fn may_be_auto_error(&self) -> bool {
        let t = &self.tracker;
        self.rewrite
            && self.replacement.is_none()
            && t.in_flight() == 0
            && (t.requests() == 0 || t.head_pending())
    }

    /// Whether `head` is hyper's automatic error response, written now.
    fn is_auto_error(&self, head: &[u8]) -> Option<StatusCode> {
        if !self.may_be_auto_error() {
            return None;
        }
        auto_error_status(head)
    }

    fn replace(&mut self, status: StatusCode) {
        self.rewritten.inc();
        let (reason, detail) = match status {
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
                "Request Header Fields Too Large",
                "the request head is larger than this gateway accepts (server.max_header_bytes)",
            ),
            StatusCode::URI_TOO_LONG => ("URI Too Long", "the request URI is too long"),
            _ => (
                "Bad Request",
                "the request is not valid HTTP/1.1 (request line or header syntax)",
            ),
        };
        let body = GatewayError::MalformedRequest { status, detail }
            .body(sluice_providers::Family::OpenAi);
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n",
            status.as_u16(),
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        self.replacement = Some(Bytes::from(out));
    }

    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>
    where
        T: AsyncWrite + Unpin,
    {
        while let Some(mut rest) = self.replacement.take() {
            if rest.is_empty() {
                // Stays set (empty): the connection answers nothing more.
                self.replacement = Some(rest);
                break;
            }
            match self.inner()?.poll_write(cx, &rest) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    rest.advance(n);
                    self.replacement = Some(rest);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.replacement = Some(rest);
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// hyper writes its automatic response to an unparsable HTTP/1.1 head as a bare head: status
/// 400, 414 or 431, `content-length: 0`, no other body.
fn auto_error_status(head: &[u8]) -> Option<StatusCode> {
    if head.len() > 512 || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let status = match head.get(..13)? {
        b"HTTP/1.1 400 " => StatusCode::BAD_REQUEST,
        b"HTTP/1.1 414 " => StatusCode::URI_TOO_LONG,
        b"HTTP/1.1 431 " => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        _ => return None,
    };
    let has = |line: &[u8]| {
        head.windows(line.len())
            .any(|w| w.eq_ignore_ascii_case(line))
    };
    // Every response of the request path carries the request id; hyper's own never does.
    (has(b"\r\ncontent-length: 0\r\n") && !has(b"\r\nx-request-id:")).then_some(status)
}

impl<T: AsyncRead + Unpin> AsyncRead for ConnIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(this.inner()?.poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.saw(&buf.filled()[before..]);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ConnIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(status) = this.is_auto_error(buf) {
            this.replace(status);
            // hyper's bytes are taken (and dropped); ours go out on flush.
            return Poll::Ready(Ok(buf.len()));
        }
        if this.replacement.is_some() {
            // Nothing more after the replacement (hyper closes after its error response).
            return Poll::Ready(Ok(buf.len()));
        }
        let n = ready!(this.inner()?.poll_write(cx, buf))?;
        if n > 0 {
            this.clean = false;
        }
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total <= 512 && this.may_be_auto_error() {
            let flat: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            if let Some(status) = this.is_auto_error(&flat) {
                this.replace(status);
                return Poll::Ready(Ok(total));
            }
        }
        if this.replacement.is_some() {
            return Poll::Ready(Ok(total));
        }
        let n = ready!(this.inner()?.poll_write_vectored(cx, bufs))?;
        if n > 0 {
            this.clean = false;
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| i.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        ready!(this.inner()?.poll_flush(cx))?;
        this.clean = true;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        this.inner()?.poll_shutdown(cx)
    }
}

impl<T> Drop for ConnIo<T> {
    fn drop(&mut self) {
        // Only at a frame boundary: a GOAWAY after half a frame would be garbage to the peer.
        if self.clean && self.tracker.closing() == Some(CloseReason::Calm) {
            if let (Some(inner), Some(tx)) = (self.inner.take(), self.give_back.take()) {
                let _ = tx.send(inner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_bare_error_heads_are_recognised_and_nothing_else() {
        let head = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n";
        assert_eq!(
            auto_error_status(head),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(auto_error_status(ok), None);
        let with_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 20\r\n\r\n";
        assert_eq!(auto_error_status(with_body), None);
        let partial = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n";
        assert_eq!(auto_error_status(partial), None);
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nx-request-id: sl-1\r\n\r\n";
        assert_eq!(
            auto_error_status(ours),
            None,
            "an upstream's empty 400, passed on"
        );
    }
}
