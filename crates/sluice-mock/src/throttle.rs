//! `degrade`: a connection whose every write is throttled, like a lossy TCP link that slows all
//! the streams it carries at once.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Sleep};

/// The rate a request set for its connection; 0 means unthrottled.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rate(Arc<AtomicU64>);

impl Rate {
    pub(crate) fn set(&self, bytes_per_s: u64) {
        self.0.store(bytes_per_s, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Wraps the TCP stream (below TLS, so TLS records are throttled too).
pub(crate) struct Throttled<IO> {
    io: IO,
    rate: Rate,
    pause: Option<Pin<Box<Sleep>>>,
}

impl<IO> Throttled<IO> {
    pub(crate) fn new(io: IO, rate: Rate) -> Self {
        Throttled {
            io,
            rate,
            pause: None,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Throttled<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Throttled<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let rate = self.rate.get();
        if rate == 0 {
            return Pin::new(&mut self.io).poll_write(cx, buf);
        }
        if let Some(pause) = self.pause.as_mut() {
            std::task::ready!(pause.as_mut().poll(cx));
            self.pause = None;
        }
        // Write at most 50 ms worth of bytes, then owe the link the time they take.
        let budget = (rate / 20).max(1) as usize;
        let n = std::task::ready!(
            Pin::new(&mut self.io).poll_write(cx, &buf[..buf.len().min(budget)])
        )?;
        let owed = Duration::from_secs_f64(n as f64 / rate as f64);
        self.pause = Some(Box::pin(sleep(owed)));
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
