//! A read-side frame tap: wraps the IO handed to h2 and parses the 9-byte header of every
//! frame the server sends, to learn what h2 does not tell its client: when DATA last arrived
//! (stall detection) and that a GOAWAY arrived, with its last-stream-id, even while long
//! streams keep the connection open.
//!
//! NOTE: we accept parsing frame headers twice (here and in h2) because it is a few
//! instructions per frame, and the alternative (no GOAWAY signal until a new stream fails, no
//! progress signal until the consumer polls) is the gap described in
//! shared/reference/rust-stack.md §4.5.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const DATA: u8 = 0x0;
const GOAWAY: u8 = 0x7;

/// What the tap reports to.
pub(crate) trait FrameSink: Send + Sync + 'static {
    /// A DATA frame with a non-empty payload arrived.
    fn data(&self);
    /// A GOAWAY arrived.
    fn goaway(&self, last_stream_id: u32, error_code: u32);
    /// Bytes went over the socket (for the connection's bytes in/out).
    fn bytes(&self, read: usize, written: usize);
}

/// The frame parser, fed the bytes as they are read.
#[derive(Debug, Default)]
pub(crate) struct FrameParser {
    header: [u8; 9],
    header_len: usize,
    /// Payload bytes of the current frame still to come.
    remaining: usize,
    kind: u8,
    /// The first 8 payload bytes of a GOAWAY (last-stream-id, error code).
    goaway: [u8; 8],
    goaway_len: usize,
}

impl FrameParser {
    pub(crate) fn feed(&mut self, mut bytes: &[u8], sink: &dyn FrameSink) {
        while !bytes.is_empty() {
            if self.remaining == 0 && self.header_len < 9 {
                let n = (9 - self.header_len).min(bytes.len());
                self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
                self.header_len += n;
                bytes = &bytes[n..];
                if self.header_len < 9 {
                    return;
                }
                let h = self.header;
                self.remaining =
                    usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                self.kind = h[3];
                self.goaway_len = 0;
                if self.kind == DATA && self.remaining > 0 {
                    sink.data();
                }
                if self.remaining == 0 {
                    self.header_len = 0;
                }
                continue;
            }
            let n = self.remaining.min(bytes.len());
            if self.kind == GOAWAY && self.goaway_len < 8 {
                let k = (8 - self.goaway_len).min(n);
                self.goaway[self.goaway_len..self.goaway_len + k].copy_from_slice(&bytes[..k]);
                self.goaway_len += k;
                if self.goaway_len == 8 {
                    let g = self.goaway;
                    let last = u32::from_be_bytes([g[0], g[1], g[2], g[3]]) & 0x7fff_ffff;
                    sink.goaway(last, u32::from_be_bytes([g[4], g[5], g[6], g[7]]));
                }
            }
            self.remaining -= n;
            bytes = &bytes[n..];
            if self.remaining == 0 {
                self.header_len = 0;
            }
        }
    }
}

/// The IO wrapper.
pub(crate) struct Tapped<IO> {
    io: IO,
    parser: FrameParser,
    sink: Arc<dyn FrameSink>,
}

impl<IO> Tapped<IO> {
    pub(crate) fn new(io: IO, sink: Arc<dyn FrameSink>) -> Self {
        Tapped {
            io,
            parser: FrameParser::default(),
            sink,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tapped<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
        let this = &mut *self;
        let fresh = &buf.filled()[before..];
        this.sink.bytes(fresh.len(), 0);
        this.parser.feed(fresh, &*this.sink);
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tapped<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, buf))?;
        self.sink.bytes(0, n);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let n = std::task::ready!(Pin::new(&mut self.io).poll_write_vectored(cx, bufs))?;
        self.sink.bytes(0, n);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<(usize, Vec<(u32, u32)>)>);

    impl FrameSink for Seen {
        fn data(&self) {
            self.0.lock().unwrap().0 += 1;
        }
        fn goaway(&self, last: u32, code: u32) {
            self.0.lock().unwrap().1.push((last, code));
        }
        fn bytes(&self, _: usize, _: usize) {}
    }

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, 0];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn counts_data_and_reads_goaway_across_any_split() {
        let mut wire = frame(0x4, 0, &[0; 6]); // SETTINGS
        wire.extend(frame(DATA, 1, b"hello"));
        wire.extend(frame(DATA, 1, b"")); // empty END_STREAM: not progress
        wire.extend(frame(GOAWAY, 0, &[0, 0, 0, 3, 0, 0, 0, 0, b'x']));
        wire.extend(frame(DATA, 3, b"more"));
        for chunk in 1..wire.len() {
            let seen = Seen::default();
            let mut p = FrameParser::default();
            for part in wire.chunks(chunk) {
                p.feed(part, &seen);
            }
            let (data, goaways) = seen.0.into_inner().unwrap();
            assert_eq!(data, 2, "chunk size {chunk}");
            assert_eq!(goaways, vec![(3, 0)], "chunk size {chunk}");
        }
    }
}
