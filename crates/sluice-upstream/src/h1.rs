//! HTTP/1.1: one lane's keep-alive pool of `hyper::client::conn::http1` connections, capped
//! at the lane's `max_connections`.
//!
//! The cap is a semaphore whose permits are held by *leases* (a connection in use, from
//! request to the end of its response body). A connection goes back to the idle list before
//! its permit is released, and a new connection is opened only by a permit holder that found
//! the idle list empty, so connections (idle + leased) never exceed the cap. Waiting for a
//! permit is FIFO (tokio's semaphore is fair), bounded by the lane's `acquire_timeout` and the
//! request's deadline, and by the lane's `max_pending` waiters.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout_at, Instant};

use crate::connect::{Connected, Connector, Io};
use crate::error::{self, UpstreamError};
use crate::pool::{LaneConfig, LaneSnapshot};
use crate::timing::Recorder;
use crate::{Counters, Lane};

type SendRequest = http1::SendRequest<Full<Bytes>>;

pub(crate) struct H1Pool {
    connector: Arc<Connector>,
    permits: Arc<Semaphore>,
    /// Most recently returned last (LIFO): the warmest connection is reused first, and the
    /// coldest ones are the ones the server times out.
    idle: Mutex<Vec<SendRequest>>,
    counters: Arc<Counters>,
    lane: Lane,
    cfg: LaneConfig,
    /// Requests waiting for a permit.
    pending: AtomicUsize,
    /// Connects so far: where the next one starts in the host's address list.
    connects: AtomicUsize,
}

// A poisoned lock only means a panic elsewhere; the idle list itself is always consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl H1Pool {
    pub(crate) fn new(
        connector: Arc<Connector>,
        lane: Lane,
        cfg: LaneConfig,
        counters: Arc<Counters>,
    ) -> Self {
        H1Pool {
            connector,
            permits: Arc::new(Semaphore::new(cfg.max_connections)),
            idle: Mutex::new(Vec::new()),
            counters,
            lane,
            cfg,
            pending: AtomicUsize::new(0),
            connects: AtomicUsize::new(0),
        }
    }

    pub(crate) fn idle_count(&self) -> usize {
        lock(&self.idle).len()
    }

    pub(crate) fn snapshot(&self) -> LaneSnapshot {
        LaneSnapshot {
            lane: self.lane,
            connecting: 0,
            ready: self.idle_count(),
            degraded: 0,
            draining: 0,
            in_flight: self.cfg.max_connections - self.permits.available_permits(),
            pending: self.pending.load(Ordering::Relaxed),
            connections: Vec::new(),
        }
    }

    /// A connection permit: at once if one is free, else waiting in FIFO order (at most
    /// `max_pending` waiters) until `acquire_timeout` or `deadline`.
    async fn permit(&self, deadline: Instant) -> Result<OwnedSemaphorePermit, UpstreamError> {
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return Ok(p);
        }
        let start = Instant::now();
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_pending {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            self.counters.pool_full.fetch_add(1, Ordering::Relaxed);
            return Err(UpstreamError::PoolFull {
                lane: self.lane,
                max_pending: self.cfg.max_pending,
            });
        }
        // Decrements `pending` however the wait ends, including the caller dropping us.
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let waiting = Waiting(&self.pending);
        let give_up = deadline.min(start + self.cfg.acquire_timeout);
        let got = timeout_at(give_up, self.permits.clone().acquire_owned()).await;
        drop(waiting);
        match got {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(UpstreamError::Closed),
            Err(_) => {
                self.counters
                    .pool_acquire_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                Err(UpstreamError::PoolAcquireTimeout {
                    lane: self.lane,
                    waited: start.elapsed(),
                })
            }
        }
    }

    /// Sends one request and returns the response with the lease of its connection.
    ///
    /// `preconnected` is a stream whose TLS handshake already chose http/1.1 (protocol
    /// `Auto`); it is used instead of opening a new connection if the pool has none idle.
    /// `rec` gets the wait for a permit, the connect (if any) and when the request was
    /// handed to the connection.
    ///
    /// Cancel safety: dropping the future drops the lease; a connection with a request in
    /// flight is then closed by hyper, never returned to the pool.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut req: Request<Full<Bytes>>,
        deadline: Instant,
        mut preconnected: Option<Connected>,
        rec: &mut Recorder,
    ) -> Result<(Response<Incoming>, Lease), UpstreamError> {
        let waiting = Instant::now();
        let permit = self.permit(deadline).await?;
        rec.waited(waiting, None);
        let mut permit = Some(permit);
        loop {
            let (mut send, reused) = match self.take_idle() {
                Some(send) => (send, true),
                None => {
                    let connected = match preconnected.take() {
                        Some(c) => c,
                        None => self.connect(deadline).await?,
                    };
                    rec.connected(connected.phases);
                    (self.handshake(connected.io).await?, false)
                }
            };
            match timeout_at(deadline, send.ready()).await {
                Err(_) => return Err(UpstreamError::Deadline),
                // An idle connection that died between the check and now: try another.
                Ok(Err(_)) if reused => continue,
                Ok(Err(e)) => return Err(error::from_hyper_head(&e)),
                Ok(Ok(())) => {}
            }
            let sent = send.try_send_request(req);
            rec.written();
            let lease = Lease {
                send: Some(send),
                pool: self.clone(),
                permit: permit.take(),
            };
            match timeout_at(deadline, sent).await {
                // Dropping `sent` makes hyper close the connection; the lease discards it.
                Err(_) => return Err(UpstreamError::Deadline),
                Ok(Ok(resp)) => return Ok((resp, lease)),
                Ok(Err(mut e)) => {
                    // hyper hands the request back when it was never written: a reused
                    // connection that the server closed meanwhile. Safe to send it on another.
                    if reused {
                        if let Some(r) = e.take_message() {
                            req = r;
                            permit = lease.into_permit();
                            continue;
                        }
                    }
                    return Err(error::from_hyper_head(e.error()));
                }
            }
        }
    }

    /// Pops an idle connection that is still open. Closed ones are dropped here: hyper marks
    /// a connection closed as soon as its task sees the server's FIN.
    fn take_idle(&self) -> Option<SendRequest> {
        let mut idle = lock(&self.idle);
        while let Some(send) = idle.pop() {
            if !send.is_closed() {
                return Some(send);
            }
        }
        None
    }

    async fn connect(&self, deadline: Instant) -> Result<Connected, UpstreamError> {
        let turn = self.connects.fetch_add(1, Ordering::Relaxed);
        match self.connector.connect(deadline, turn).await {
            Ok(c) => {
                self.counters.connects.fetch_add(1, Ordering::Relaxed);
                Ok(c)
            }
            Err(e) => {
                self.counters
                    .connect_failures
                    .fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    async fn handshake(&self, io: Io) -> Result<SendRequest, UpstreamError> {
        let (send, conn) = http1::Builder::new()
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| UpstreamError::Protocol(e.to_string()))?;
        let open = self.counters.connection_opened();
        // The task ends when the connection closes, which happens when its SendRequest is
        // dropped: the pool (owned by the Upstream) or a lease (owned by a response) holds it.
        tokio::spawn(async move {
            let _open = open;
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream http/1.1 connection ended with an error");
            }
        });
        Ok(send)
    }
}

/// One HTTP/1.1 connection in use. Dropped without [`Lease::reuse`], it closes the
/// connection: only a response read to its end leaves the connection in a known state.
pub(crate) struct Lease {
    send: Option<SendRequest>,
    pool: Arc<H1Pool>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Lease {
    /// The response was read to EOF: the connection may carry another request.
    pub(crate) fn reuse(mut self) {
        if let Some(send) = self.send.take() {
            if !send.is_closed() {
                // Before the permit is released (in drop), so a waiter finds it idle.
                lock(&self.pool.idle).push(send);
            }
        }
    }

    fn into_permit(mut self) -> Option<OwnedSemaphorePermit> {
        drop(self.send.take());
        self.permit.take()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Connection first (closing it), then the permit.
        drop(self.send.take());
        drop(self.permit.take());
    }
}
