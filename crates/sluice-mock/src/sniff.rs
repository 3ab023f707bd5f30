//! HTTP/1.1 and h2c prior knowledge on one plain port: read just enough to tell them apart,
//! then hand the bytes back to whichever protocol it is.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An IO whose first reads return bytes already read from it.
pub(crate) struct Prefixed<IO> {
    prefix: Bytes,
    io: IO,
}

/// Reads until the bytes either are the full HTTP/2 preface or cannot be (or EOF). Returns
/// whether it is HTTP/2 and the IO with the bytes put back.
pub(crate) async fn sniff<IO: AsyncRead + Unpin>(mut io: IO) -> io::Result<(bool, Prefixed<IO>)> {
    let mut buf = Vec::with_capacity(H2_PREFACE.len());
    let is_h2 = loop {
        if !H2_PREFACE.starts_with(&buf) {
            break false;
        }
        if buf.len() == H2_PREFACE.len() {
            break true;
        }
        let mut chunk = [0u8; 24];
        let want = H2_PREFACE.len() - buf.len();
        let n = io.read(&mut chunk[..want]).await?;
        if n == 0 {
            break false;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    Ok((
        is_h2,
        Prefixed {
            prefix: Bytes::from(buf),
            io,
        },
    ))
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
