//! The mock's TCP stream: `degrade` throttles every write, like a lossy TCP link that slows all
//! the streams it carries at once; a connection marked for it is closed with RST, not FIN.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
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
pub(crate) struct Throttled {
    io: TcpStream,
    rate: Rate,
    pause: Option<Pin<Box<Sleep>>>,
    rst: Arc<AtomicBool>,
}

impl Throttled {
    /// `rst`, once set, makes dropping the stream an abortive close (SO_LINGER 0: TCP RST).
    pub(crate) fn new(io: TcpStream, rate: Rate, rst: Arc<AtomicBool>) -> Self {
        Throttled {
            io,
            rate,
            pause: None,
            rst,
        }
    }
}

impl Drop for Throttled {
    fn drop(&mut self) {
        if self.rst.load(Ordering::Relaxed) {
            // Zero linger never blocks: the kernel drops the buffers and sends RST.
            let _ = self.io.set_zero_linger();
        }
    }
}

impl AsyncRead for Throttled {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Throttled {
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
