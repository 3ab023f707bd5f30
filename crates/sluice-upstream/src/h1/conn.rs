//! One HTTP/1.1 connection as the pool sees it: its record (id, state, age, requests, bytes)
//! for the snapshot and for rotation, and the socket wrapper that counts its bytes.
//!
//! The bytes read are also the proof the stale keep-alive retry needs: a reused connection
//! that failed without a single byte read since the request was handed over cannot have
//! started a response.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::pool::{ConnectionSnapshot, DrainReason, ShardState};
use crate::{Counters, Lane, Protocol};

/// The record of one HTTP/1.1 connection, shared by the pool (idle list, registry), the lease
/// of the request on it, its socket wrapper and its driver.
#[derive(Debug)]
pub(crate) struct ConnInfo {
    pub(crate) id: u64,
    lane: Lane,
    opened_at: Instant,
    /// A [`ShardState`]: `Idle`, `InUse`, `Draining` or `Closed`.
    state: AtomicU8,
    requests: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

impl ConnInfo {
    /// A connection just handshaken for a request: in use.
    pub(crate) fn new(id: u64, lane: Lane) -> ConnInfo {
        ConnInfo {
            id,
            lane,
            opened_at: Instant::now(),
            state: AtomicU8::new(ShardState::InUse as u8),
            requests: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
        }
    }

    pub(crate) fn state(&self) -> ShardState {
        ShardState::from_u8(self.state.load(Ordering::Acquire))
    }

    pub(crate) fn set_state(&self, state: ShardState) {
        self.state.store(state as u8, Ordering::Release);
    }

    pub(crate) fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.opened_at)
    }

    pub(crate) fn opened_at(&self) -> Instant {
        self.opened_at
    }

    /// Bytes read from the socket so far.
    pub(crate) fn bytes_in(&self) -> u64 {
        self.bytes_in.load(Ordering::Acquire)
    }

    /// A request is about to be written: count it, and drain the connection (no reuse after
    /// this response) when it reaches `max_requests`.
    pub(crate) fn begin_request(&self, max_requests: Option<u64>, counters: &Counters) {
        let served = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        self.set_state(ShardState::InUse);
        if max_requests.is_some_and(|max| served >= max) {
            self.drain(DrainReason::MaxRequests, counters);
        }
    }

    /// No more requests on this connection; it closes when its response ends. Counted once.
    pub(crate) fn drain(&self, reason: DrainReason, counters: &Counters) {
        let moved = self
            .state
            .fetch_update(
                Ordering::AcqRel,
                Ordering::Acquire,
                |s| match ShardState::from_u8(s) {
                    ShardState::Idle | ShardState::InUse => Some(ShardState::Draining as u8),
                    _ => None,
                },
            )
            .is_ok();
        if moved {
            counters.drained(reason);
            tracing::debug!(
                connection = self.id,
                ?reason,
                "upstream http/1.1 connection draining"
            );
        }
    }

    /// For the snapshot. A connection in use past `max_age` shows as draining: it will not be
    /// reused (the age is checked when its response ends).
    pub(crate) fn snapshot(&self, max_age: Option<Duration>, now: Instant) -> ConnectionSnapshot {
        let age = self.age(now);
        let state = match self.state() {
            ShardState::InUse if max_age.is_some_and(|m| age >= m) => ShardState::Draining,
            s => s,
        };
        ConnectionSnapshot {
            id: self.id,
            protocol: Protocol::Http1,
            lane: self.lane,
            state,
            in_flight: usize::from(matches!(state, ShardState::InUse | ShardState::Draining)),
            cap: 1,
            server_max_streams: None,
            rtt: None,
            age,
            requests_served: self.requests.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
        }
    }
}

/// The connection's socket, counting the bytes that cross it into its [`ConnInfo`].
pub(crate) struct Counted<IO> {
    io: IO,
    info: Arc<ConnInfo>,
}

impl<IO> Counted<IO> {
    pub(crate) fn new(io: IO, info: Arc<ConnInfo>) -> Self {
        Counted { io, info }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
        let n = buf.filled().len() - before;
        if n > 0 {
            self.info.bytes_in.fetch_add(n as u64, Ordering::AcqRel);
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, buf))?;
        self.info.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let n = std::task::ready!(Pin::new(&mut self.io).poll_write_vectored(cx, bufs))?;
        self.info.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
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
