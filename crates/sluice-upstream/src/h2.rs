//! HTTP/2 on the `h2` crate directly (not hyper's client, which hides PING, GOAWAY and
//! REFUSED_STREAM): one connection per upstream for now, opened lazily and replaced when it
//! closes or receives a GOAWAY. A later issue replaces the single slot with lanes and shards;
//! the seam is [`H2Pool::send`].

use std::pin::pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use h2::{Reason, RecvStream, SendStream};
use http::{Request, Response};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::connect::{Connector, Io};
use crate::error::{self, UpstreamError};
use crate::Counters;

/// How often a request waiting for a stream slot re-reads the server's
/// SETTINGS_MAX_CONCURRENT_STREAMS: h2 raises it without notifying anyone.
const SLOT_RECHECK: Duration = Duration::from_millis(50);

/// Times a request may find its connection dead before a single byte of it was sent, and go
/// on to a fresh connection within the same deadline.
const MAX_FRESH_CONNECTS: usize = 2;

/// Flow-control and stream limits, validated in `Upstream::new`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct H2Settings {
    pub(crate) stream_window: u32,
    pub(crate) connection_window: u32,
    pub(crate) max_streams: u32,
    /// TLS must negotiate h2 by ALPN: with `Auto`, a server that chose http/1.1 sends the
    /// request (and all later ones) to the HTTP/1.1 pool instead.
    pub(crate) alpn: AlpnPolicy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AlpnPolicy {
    /// h2c prior knowledge: no TLS, no ALPN.
    None,
    /// TLS, and h2 is required.
    Required,
    /// TLS, and http/1.1 is an acceptable answer.
    FallBack,
}

/// What [`H2Pool::send`] did.
pub(crate) enum Sent {
    Response(Response<RecvStream>, StreamGuard, StreamLease),
    /// ALPN chose http/1.1 (`Auto`): the caller sends the request over HTTP/1.1, on this
    /// freshly handshaken stream if there is one.
    Http1(Option<Io>),
}

pub(crate) struct H2Pool {
    connector: Arc<Connector>,
    settings: H2Settings,
    /// Single-flight connect: whoever holds the lock and finds no usable connection opens
    /// one; concurrent first requests wait for it instead of racing to open many.
    slot: tokio::sync::Mutex<Option<Arc<H2Conn>>>,
    /// Set once ALPN answered http/1.1 under `Auto`.
    fell_back: AtomicU8,
    counters: Arc<Counters>,
}

impl H2Pool {
    pub(crate) fn new(
        connector: Arc<Connector>,
        settings: H2Settings,
        counters: Arc<Counters>,
    ) -> Self {
        H2Pool {
            connector,
            settings,
            slot: tokio::sync::Mutex::new(None),
            fell_back: AtomicU8::new(0),
            counters,
        }
    }

    pub(crate) fn fell_back(&self) -> bool {
        self.fell_back.load(Ordering::Relaxed) != 0
    }

    /// Sends the request (whose body is already complete) and waits for response headers.
    ///
    /// Cancel safety: dropping the future before the headers arrive resets the stream with
    /// RST_STREAM(CANCEL) (via [`StreamGuard`]); the connection stays up for other streams.
    pub(crate) async fn send(
        &self,
        head: Request<()>,
        body: Bytes,
        deadline: Instant,
    ) -> Result<Sent, UpstreamError> {
        let mut fresh_connects = 0;
        loop {
            let conn = match self.connection(deadline).await? {
                Ok(conn) => conn,
                Err(io) => return Ok(Sent::Http1(io)),
            };
            let lease = match conn.acquire(deadline).await {
                Ok(lease) => lease,
                Err(Acquire::Timeout) => return Err(UpstreamError::PoolTimeout),
                Err(Acquire::Unusable) => continue,
            };
            let send = match timeout_at(deadline, conn.send.clone().ready()).await {
                Err(_) => return Err(UpstreamError::Deadline),
                Ok(Ok(send)) => send,
                Ok(Err(e)) => {
                    // The connection died before this request was sent: nothing processed,
                    // so a fresh connection is safe (and bounded by the deadline).
                    lease.observe(&e);
                    conn.shared.set_state(CLOSED);
                    fresh_connects += 1;
                    if fresh_connects >= MAX_FRESH_CONNECTS {
                        return Err(UpstreamError::Closed);
                    }
                    continue;
                }
            };
            return self.exchange(send, head, body, lease, deadline).await;
        }
    }

    async fn exchange(
        &self,
        mut send: SendRequest<Bytes>,
        head: Request<()>,
        body: Bytes,
        lease: StreamLease,
        deadline: Instant,
    ) -> Result<Sent, UpstreamError> {
        let end_of_stream = body.is_empty();
        let (response, stream) = send.send_request(head, end_of_stream).map_err(|e| {
            lease.observe(&e);
            error::from_h2_head(&e)
        })?;
        let mut guard = StreamGuard(Some(stream));
        if !end_of_stream {
            // Buffered JSON: one send_data is fine. h2 queues it and writes it as the
            // upstream's windows allow; the request size is bounded by the caller.
            if let Some(s) = guard.0.as_mut() {
                s.send_data(body, true).map_err(|e| {
                    lease.observe(&e);
                    error::from_h2_head(&e)
                })?;
            }
        }
        match timeout_at(deadline, response).await {
            // `guard` resets the stream with CANCEL as it drops.
            Err(_) => Err(UpstreamError::Deadline),
            Ok(Err(e)) => {
                lease.observe(&e);
                Err(error::from_h2_head(&e))
            }
            Ok(Ok(resp)) => Ok(Sent::Response(resp, guard, lease)),
        }
    }

    /// The current connection, opening one if there is none usable. `Err(io)` means ALPN
    /// chose http/1.1 under `Auto`.
    async fn connection(
        &self,
        deadline: Instant,
    ) -> Result<Result<Arc<H2Conn>, Option<Io>>, UpstreamError> {
        let mut slot = timeout_at(deadline, self.slot.lock())
            .await
            .map_err(|_| UpstreamError::Deadline)?;
        if self.fell_back() {
            return Ok(Err(None));
        }
        if let Some(conn) = slot.as_ref() {
            if conn.shared.usable() {
                return Ok(Ok(conn.clone()));
            }
        }
        // The old connection (if any) lives on only through the leases of its open streams.
        *slot = None;
        let connected = self.connector.connect(deadline).await?;
        if !connected.alpn_h2 {
            match self.settings.alpn {
                AlpnPolicy::None => {}
                AlpnPolicy::Required => {
                    return Err(UpstreamError::Protocol(format!(
                        "upstream `{}` did not negotiate h2 by ALPN; use protocol Auto or \
                         Http1 for a server without HTTP/2",
                        self.connector.upstream
                    )))
                }
                AlpnPolicy::FallBack => {
                    self.fell_back.store(1, Ordering::Relaxed);
                    return Ok(Err(Some(connected.io)));
                }
            }
        }
        let conn = timeout_at(deadline, self.handshake(connected.io))
            .await
            .map_err(|_| UpstreamError::Deadline)??;
        *slot = Some(conn.clone());
        Ok(Ok(conn))
    }

    async fn handshake(&self, io: Io) -> Result<Arc<H2Conn>, UpstreamError> {
        let s = self.settings;
        let (send, mut conn) = h2::client::Builder::new()
            .initial_window_size(s.stream_window)
            .initial_connection_window_size(s.connection_window)
            // Our own bound until the server's SETTINGS arrive (h2's default is unlimited).
            .initial_max_send_streams(s.max_streams as usize)
            .enable_push(false)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|e| UpstreamError::Protocol(format!("HTTP/2 handshake failed: {e}")))?;
        // Taken now (it can be taken only once) for the pool issue's RTT probe.
        let ping = conn.ping_pong();
        let shared = Arc::new(ConnShared {
            state: AtomicU8::new(OPEN),
            in_flight: AtomicUsize::new(0),
            released: Notify::new(),
        });
        let task_shared = shared.clone();
        let open = self.counters.connection_opened();
        let driver = tokio::spawn(async move {
            let _open = open;
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream h2 connection ended with an error");
            }
            task_shared.set_state(CLOSED);
        });
        Ok(Arc::new(H2Conn {
            send,
            max_streams: s.max_streams as usize,
            shared,
            ping: Mutex::new(ping),
            driver,
        }))
    }
}

const OPEN: u8 = 0;
/// GOAWAY seen: no new streams; open ones finish.
const DRAINING: u8 = 1;
const CLOSED: u8 = 2;

/// State shared with the driver task (which must not own the `H2Conn`, or it would keep
/// itself alive).
struct ConnShared {
    state: AtomicU8,
    in_flight: AtomicUsize,
    /// Signalled when a stream slot frees up or the connection's state changes.
    released: Notify,
}

impl ConnShared {
    fn usable(&self) -> bool {
        self.state.load(Ordering::Acquire) == OPEN
    }

    fn set_state(&self, state: u8) {
        self.state.fetch_max(state, Ordering::AcqRel);
        self.released.notify_waiters();
    }
}

/// One HTTP/2 connection. Dropping the last reference (the pool's slot and every open
/// stream's lease) aborts its driver task, which closes the socket.
pub(crate) struct H2Conn {
    send: SendRequest<Bytes>,
    /// `h2_max_streams`: our cap, applied below the server's SETTINGS_MAX_CONCURRENT_STREAMS.
    max_streams: usize,
    shared: Arc<ConnShared>,
    /// Kept for the pool issue (PING RTT, degraded-connection detection); unused for now.
    #[allow(dead_code)]
    ping: Mutex<Option<h2::PingPong>>,
    driver: JoinHandle<()>,
}

impl Drop for H2Conn {
    fn drop(&mut self) {
        // Explicit, rather than relying on h2 noticing that every SendRequest is gone (hyper
        // documents an h2 bug where a parked Connection is not woken by that).
        self.driver.abort();
    }
}

enum Acquire {
    Timeout,
    Unusable,
}

impl H2Conn {
    fn limit(&self) -> usize {
        self.max_streams.min(self.send.current_max_send_streams())
    }

    /// Takes one stream slot, waiting (until `deadline`) while the connection is at
    /// min(`h2_max_streams`, server's SETTINGS_MAX_CONCURRENT_STREAMS). h2 itself would
    /// queue streams past the server's limit without bound, so we must not rely on it.
    async fn acquire(self: &Arc<Self>, deadline: Instant) -> Result<StreamLease, Acquire> {
        loop {
            let mut notified = pin!(self.shared.released.notified());
            // Registered before the check, so a release between check and wait is not lost.
            notified.as_mut().enable();
            if !self.shared.usable() {
                return Err(Acquire::Unusable);
            }
            let limit = self.limit();
            let got = self
                .shared
                .in_flight
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < limit).then_some(n + 1)
                })
                .is_ok();
            if got {
                return Ok(StreamLease { conn: self.clone() });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Acquire::Timeout);
            }
            tokio::select! {
                _ = notified => {}
                _ = sleep_until(deadline.min(now + SLOT_RECHECK)) => {}
            }
        }
    }
}

/// One stream slot on a connection; frees the slot when dropped (end of response or drop).
/// Holds the connection alive while its stream is open.
pub(crate) struct StreamLease {
    conn: Arc<H2Conn>,
}

impl StreamLease {
    /// Learns from a stream error: a GOAWAY from the server means no new streams go to this
    /// connection (open ones finish); an I/O error means it is gone.
    pub(crate) fn observe(&self, e: &h2::Error) {
        if e.is_go_away() && e.is_remote() {
            self.conn.shared.set_state(DRAINING);
        } else if e.is_io() {
            self.conn.shared.set_state(CLOSED);
        }
    }
}

impl Drop for StreamLease {
    fn drop(&mut self) {
        self.conn.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.conn.shared.released.notify_waiters();
    }
}

/// The request half of an open stream. Dropped while the stream is still open, it resets
/// the stream with CANCEL: explicit, rather than relying on h2's "last handle dropped"
/// bookkeeping, so the upstream stops generating at once.
pub(crate) struct StreamGuard(Option<SendStream<Bytes>>);

impl StreamGuard {
    /// The stream ended normally (or with an error): nothing to cancel.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Some(mut s) = self.0.take() {
            // No-op if the stream is already closed.
            s.send_reset(Reason::CANCEL);
        }
    }
}
