//! One HTTP/1.1 connection: the socket with its read buffer ([`Conn`]: write a request, read
//! a response head, read body bytes), and its record ([`ConnInfo`]: id, state, age, requests,
//! bytes) for the snapshot and for rotation.
//!
//! The connection has no task of its own: whoever holds it (the request waiting for its head,
//! then the response body) reads and writes it directly. An idle connection is not read at
//! all; [`Conn::is_reusable_idle`] looks once, without waiting, before it is used again.
//!
//! The bytes read are also the proof the stale keep-alive retry needs: a reused connection
//! that failed without a single byte read since the request was handed over cannot have
//! started a response.

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::Request;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

use super::codec::{self, CodecError, Head, ResponseHead};
use super::{lock, Registry};
use crate::config::{Lane, Protocol};
use crate::connect::Io;
use crate::error::{BodyError, UpstreamError};
use crate::shard::{ConnectionSnapshot, Counters, DrainReason, OpenConnection, ShardState};

/// The record of one HTTP/1.1 connection, shared by the pool (idle list, registry) and the
/// connection itself.
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

    fn read(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Ordering::AcqRel);
    }

    fn wrote(&self, n: usize) {
        self.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
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

/// Why an exchange on an HTTP/1.1 connection failed; the connection is not reusable after
/// any of them. Mapped to [`UpstreamError`] (before the response head) and [`BodyError`]
/// (after) here, so that `error.rs` stays below the protocols.
#[derive(Debug, thiserror::Error)]
pub(crate) enum H1Error {
    /// The server closed the connection (EOF) before a whole response head (maybe after
    /// part of one: the caller tells by the bytes read).
    #[error("the upstream closed the connection before a complete response head")]
    ClosedBeforeHead,
    /// The server closed the connection before the body's declared end.
    #[error("the upstream closed the connection before the end of the response body")]
    Incomplete,
    /// Reading or writing the socket failed (reset, broken pipe, TLS error).
    #[error("upstream connection I/O: {0}")]
    Io(#[from] io::Error),
    /// The response is not valid HTTP/1.1, or over a limit.
    #[error(transparent)]
    Protocol(#[from] CodecError),
}

impl H1Error {
    /// Maps an error seen while writing the request or waiting for the response head: the
    /// connection going away (EOF, reset, broken pipe, a failed read or write) is `Closed`, a
    /// malformed or oversized head is `Protocol`.
    pub(crate) fn head_error(&self) -> UpstreamError {
        match self {
            H1Error::Protocol(p) => UpstreamError::Protocol(p.to_string()),
            H1Error::ClosedBeforeHead | H1Error::Incomplete | H1Error::Io(_) => {
                UpstreamError::Closed
            }
        }
    }

    /// Whether an error before the response head means the connection went away (EOF,
    /// reset, broken pipe: while writing the request or waiting for the answer) rather than a
    /// malformed answer. With no response byte read, such a close on a reused connection is
    /// the stale keep-alive race. An EOF after part of a head is reported the same way: the
    /// caller counts the bytes read to tell them apart.
    pub(crate) fn closed_before_answering(&self) -> bool {
        match self {
            H1Error::ClosedBeforeHead => true,
            H1Error::Io(io) => matches!(
                io.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
            ),
            H1Error::Incomplete | H1Error::Protocol(_) => false,
        }
    }

    /// Maps an error seen while reading the response body: cut short by the server's close is
    /// `Incomplete`, a failed read `Closed`, broken framing `Protocol`.
    pub(crate) fn body_error(&self) -> BodyError {
        match self {
            H1Error::ClosedBeforeHead | H1Error::Incomplete => BodyError::Incomplete,
            H1Error::Io(_) => BodyError::Closed,
            H1Error::Protocol(p) => BodyError::Protocol(p.to_string()),
        }
    }
}

/// A request body up to this size is copied after the head and written with it in one write
/// (one TLS record, one segment); a larger one is written from its own buffer, vectored.
const INLINE_BODY: usize = 8 * 1024;

/// The read buffer's size for one read: a response head and a small body arrive in one read,
/// and a streamed body is read at most this much (or what is left of the buffer) at a time.
const READ_SIZE: usize = 8 * 1024;

/// One open HTTP/1.1 connection: owned by the idle list, or by the lease of the request on
/// it. Dropping it closes the socket and takes it out of the lane's registry.
pub(crate) struct Conn {
    io: Io,
    /// Bytes read and not yet used: the head being parsed, then the body's next frames.
    /// Frames are split off it without copying.
    pub(super) buf: BytesMut,
    /// The request head being written; kept for the next request (its capacity, not its
    /// bytes).
    out: Vec<u8>,
    pub(crate) info: Arc<ConnInfo>,
    /// The worker thread whose runtime drives the socket ([`crate::home`]).
    pub(crate) home: usize,
    live: Registry,
    _open: OpenConnection,
}

impl Conn {
    /// A connection just opened, registered in `live` (which it leaves when dropped).
    pub(crate) fn new(io: Io, info: Arc<ConnInfo>, live: Registry, open: OpenConnection) -> Self {
        lock(&live).insert(info.id, info.clone());
        Conn {
            io,
            home: crate::home::current(),
            buf: BytesMut::new(),
            out: Vec::new(),
            info,
            live,
            _open: open,
        }
    }

    /// Whether an idle connection can carry a request: it has not been closed by the server
    /// (EOF), reset, nor sent anything unasked. Looks once without waiting (a server's FIN on
    /// an idle connection is otherwise seen only when a request is written to it).
    pub(crate) fn is_reusable_idle(&mut self) -> bool {
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        let mut cx = Context::from_waker(Waker::noop());
        // Pending (nothing to read) is the only good answer: EOF, an error, or a byte nobody
        // asked for all leave the connection unusable.
        Pin::new(&mut self.io)
            .poll_read(&mut cx, &mut probe)
            .is_pending()
    }

    /// Writes `req` (head, then body) and flushes it.
    ///
    /// # Errors
    /// [`H1Error::Io`] when the socket fails; part of the request may have been written.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped midway, the connection holds part of a request and must be
    /// closed (the lease does so unless the response is read to its end).
    pub(crate) async fn write_request(&mut self, req: &Request<Bytes>) -> Result<(), H1Error> {
        self.out.clear();
        codec::encode_request_head(req, &mut self.out);
        let body = req.body();
        if body.len() <= INLINE_BODY {
            self.out.extend_from_slice(body);
            self.io.write_all(&self.out).await?;
            self.info.wrote(self.out.len());
        } else {
            let head = self.out.len();
            let total = head + body.len();
            let mut done = 0;
            while done < total {
                let n = if done < head {
                    let bufs = [io::IoSlice::new(&self.out[done..]), io::IoSlice::new(body)];
                    self.io.write_vectored(&bufs).await?
                } else {
                    self.io.write(&body[done - head..]).await?
                };
                if n == 0 {
                    return Err(io::Error::from(io::ErrorKind::WriteZero).into());
                }
                self.info.wrote(n);
                done += n;
            }
        }
        self.io.flush().await?;
        Ok(())
    }

    /// Reads until a final response head is buffered and returns it parsed, skipping interim
    /// (1xx) responses; whatever arrived after the head stays buffered for the body.
    ///
    /// # Errors
    /// [`H1Error::ClosedBeforeHead`] at EOF, [`H1Error::Io`] when reading fails,
    /// [`H1Error::Protocol`] when the head is malformed, too large, or a 101.
    ///
    /// # Cancel safety
    /// Not cancel safe: a partly read head is lost; the connection must then be closed.
    pub(crate) async fn read_head(&mut self, head_request: bool) -> Result<ResponseHead, H1Error> {
        loop {
            if !self.buf.is_empty() {
                match codec::parse_head(&mut self.buf, head_request)? {
                    Head::Final(head) => return Ok(head),
                    Head::Interim(status) => {
                        tracing::trace!(%status, "skipping an interim upstream response");
                        continue;
                    }
                    Head::Partial => {}
                }
            }
            if self.fill().await? == 0 {
                return Err(H1Error::ClosedBeforeHead);
            }
        }
    }

    async fn fill(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }

    /// One read into the buffer (at most about [`READ_SIZE`] bytes): the number read, 0 at
    /// EOF.
    ///
    /// # Errors
    /// The socket's read error.
    pub(crate) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        // Reserving reuses the buffer's own space once the frames split off it are dropped.
        self.buf.reserve(READ_SIZE);
        // tokio's `read_buf` fills the spare capacity without initializing it first (we
        // cannot, without unsafe); polling its future once is the poll form of it.
        let n = std::task::ready!(pin!(self.io.read_buf(&mut self.buf)).poll(cx))?;
        self.info.read(n);
        Poll::Ready(Ok(n))
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The socket closes with `io`; the snapshot must stop showing the connection now.
        self.info.set_state(ShardState::Closed);
        lock(&self.live).remove(&self.info.id);
    }
}
