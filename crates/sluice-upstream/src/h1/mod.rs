//! HTTP/1.1: one lane's keep-alive pool of `hyper::client::conn::http1` connections, capped
//! at the lane's HTTP/1.1 `max_connections`, each connection tracked ([`conn::ConnInfo`]) for
//! the snapshot, for rotation (`max_connection_age`, `max_requests_per_connection`) and for
//! the idle timeout.
//!
//! The cap is a semaphore whose permits are held by *leases* (a connection in use, from
//! request to the end of its response body). A connection goes back to the idle list before
//! its permit is released, and a new connection is opened only by a permit holder that found
//! the idle list empty, so connections (idle + leased) never exceed the cap. Waiting for a
//! permit is FIFO (tokio's semaphore is fair), bounded by the lane's `acquire_timeout` and the
//! request's deadline, and by the lane's `max_pending` waiters.
//!
//! Idle connections are closed by a sweeper task once idle for `idle_timeout` (or past
//! `max_connection_age`); the task is spawned with the first idle connection, holds only a
//! `Weak` of the pool, and is aborted with it.
//!
//! A connection has no task of its own: its hyper `Connection` future (a [`Driver`]) travels
//! with its `SendRequest`, in the idle list and in the lease, and the request's own task polls
//! it while it waits for the head and while it reads the body. A small call then stays on one
//! task, where a spawned driver cost two cross-task wake-ups per call. An idle connection is
//! not polled: a close by the server is seen when the connection is next used (`ready` fails,
//! or the stale keep-alive retry below), or the sweeper drops it first.

mod conn;
mod driver;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::connect::{Connected, Io};
use crate::error::{self, LaneLimit, UpstreamError};
use crate::pool::{CapWarning, DrainReason, LaneSnapshot, PoolCtx, ShardState, Wire};
use crate::timing::Recorder;
use crate::Lane;
use conn::{ConnInfo, Counted};
use driver::Driver;

type SendRequest = http1::SendRequest<Full<Bytes>>;

/// How soon after the request was handed over the close of a reused connection must come to be
/// taken for the stale keep-alive race (see [`H1Pool::send`]).
const STALE_CLOSE_WINDOW: Duration = Duration::from_secs(1);

/// The lane's live connections by id, shared with their tasks (which remove themselves).
type Registry = Arc<Mutex<HashMap<u64, Arc<ConnInfo>>>>;

/// A kept-alive connection waiting for its next request.
struct Idle {
    send: SendRequest,
    driver: Driver,
    conn: Arc<ConnInfo>,
    since: Instant,
}

pub(crate) struct H1Pool {
    ctx: Arc<PoolCtx>,
    lane: Lane,
    /// The lane's HTTP/1.1 connection cap in force.
    cap: usize,
    permits: Arc<Semaphore>,
    /// Most recently returned last (LIFO): the warmest connection is reused first, and the
    /// coldest ones are the ones the idle timeout closes.
    idle: Mutex<Vec<Idle>>,
    live: Registry,
    /// Requests waiting for a permit.
    pending: AtomicUsize,
    /// Connects (and handshakes) in progress.
    connecting: AtomicUsize,
    /// Connects so far: where the next one starts in the host's address list.
    connects: AtomicUsize,
    cap_warning: CapWarning,
    /// Closes idle connections on time; spawned with the first idle connection.
    sweeper: Mutex<Option<JoinHandle<()>>>,
    /// Wakes the sweeper when the idle list stops being empty.
    idle_added: Arc<Notify>,
}

// A poisoned lock only means a panic elsewhere; the idle list and the registry stay
// consistent (every update is a single push, pop, insert or remove).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for H1Pool {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.sweeper).take() {
            task.abort();
        }
    }
}

impl H1Pool {
    pub(crate) fn new(ctx: Arc<PoolCtx>, lane: Lane) -> Self {
        let cap = ctx.cap(lane, Wire::Http1);
        H1Pool {
            ctx,
            lane,
            cap,
            permits: Arc::new(Semaphore::new(cap)),
            idle: Mutex::new(Vec::new()),
            live: Arc::new(Mutex::new(HashMap::new())),
            pending: AtomicUsize::new(0),
            connecting: AtomicUsize::new(0),
            connects: AtomicUsize::new(0),
            cap_warning: CapWarning::new(),
            sweeper: Mutex::new(None),
            idle_added: Arc::new(Notify::new()),
        }
    }

    pub(crate) fn idle_count(&self) -> usize {
        lock(&self.idle).len()
    }

    pub(crate) fn snapshot(&self) -> LaneSnapshot {
        let now = Instant::now();
        let max_age = self.ctx.cfg.max_connection_age;
        let mut connections: Vec<_> = lock(&self.live)
            .values()
            .map(|c| c.snapshot(max_age, now))
            .filter(|c| c.state != ShardState::Closed)
            .collect();
        connections.sort_unstable_by_key(|c| c.id);
        let count = |state| connections.iter().filter(|c| c.state == state).count();
        LaneSnapshot {
            lane: self.lane,
            connecting: self.connecting.load(Ordering::Relaxed),
            ready: count(ShardState::Idle),
            degraded: 0,
            draining: count(ShardState::Draining),
            in_flight: self.cap - self.permits.available_permits(),
            pending: self.pending.load(Ordering::Relaxed),
            max_connections: self.cap,
            connections,
        }
    }

    fn limit(&self) -> LaneLimit {
        LaneLimit::Http1Connections {
            max_connections: self.cap,
        }
    }

    /// A connection permit: at once if one is free, else waiting in FIFO order (at most
    /// `max_pending` waiters) until `acquire_timeout` or `deadline`.
    async fn permit(&self, deadline: Instant) -> Result<OwnedSemaphorePermit, UpstreamError> {
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return Ok(p);
        }
        let upstream = &self.ctx.connector.upstream;
        self.cap_warning.reached(upstream, self.lane, self.limit());
        let cfg = self.ctx.cfg.lane(self.lane);
        let start = Instant::now();
        let counters = &self.ctx.counters;
        if self.pending.fetch_add(1, Ordering::AcqRel) >= cfg.max_pending {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            counters.pool_full.fetch_add(1, Ordering::Relaxed);
            return Err(UpstreamError::PoolFull {
                upstream: upstream.clone(),
                lane: self.lane,
                limit: self.limit(),
                max_pending: cfg.max_pending,
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
        let give_up = deadline.min(start + cfg.acquire_timeout);
        let got = timeout_at(give_up, self.permits.clone().acquire_owned()).await;
        drop(waiting);
        match got {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(UpstreamError::Closed),
            Err(_) => {
                counters
                    .pool_acquire_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                Err(UpstreamError::PoolAcquireTimeout {
                    upstream: upstream.clone(),
                    lane: self.lane,
                    limit: self.limit(),
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
    /// A request written to a reused connection that then closed (EOF or reset) before a
    /// single response byte arrived is sent again, once, on a fresh connection, within
    /// `deadline` (`stale_retries`): the server closed the connection as idle while the
    /// request was on its way, so it never read it as a request to answer. Nothing else is
    /// retried here: not a fresh connection failing the same way (the server chose to drop
    /// that request), and never after a response byte.
    ///
    /// The close must also come within [`STALE_CLOSE_WINDOW`] of the write. The idle close
    /// races the request, so it arrives within about a round trip; a reused connection that
    /// dies seconds after the request was written (a load balancer's idle timeout during a
    /// long time to first token, a server killed mid-generation) had the request in the
    /// server's hands, and sending it again could run an expensive generation twice.
    ///
    /// NOTE: we accept, as pingora's `RetryType::ReusedOnly` and browsers do, that a server
    /// that read the whole request on a kept-alive connection and then at once closed without
    /// a byte looks the same as the idle close; the idle close is by far the common case
    /// (every server with a keep-alive timeout shorter than ours, e.g. uvicorn's 5 s), and the
    /// other would fail the retry too, on a fresh connection, where it is not retried again.
    ///
    /// Cancel safety: dropping the future drops the lease; a connection with a request in
    /// flight is then closed by hyper, never returned to the pool.
    pub(crate) async fn send(
        self: &Arc<Self>,
        req: Request<Full<Bytes>>,
        deadline: Instant,
        mut preconnected: Option<Connected>,
        rec: &mut Recorder,
    ) -> Result<(Response<Incoming>, Lease), UpstreamError> {
        let waiting = Instant::now();
        let permit = self.permit(deadline).await?;
        rec.waited(waiting, None);
        let mut permit = Some(permit);
        let mut req = Some(req);
        // After a stale close only a fresh connection will do: the other idle connections
        // are as old, and may be as stale.
        let mut fresh_only = false;
        let counters = &self.ctx.counters;
        let max_requests = self.ctx.cfg.max_requests_per_connection;
        while let Some(request) = req.take() {
            let taken = if fresh_only { None } else { self.take_idle() };
            let reused = taken.is_some();
            let mut lease = match taken {
                Some(idle) => Lease::new(
                    idle.send,
                    idle.driver,
                    idle.conn,
                    self.clone(),
                    permit.take(),
                ),
                None => {
                    let connected = match preconnected.take() {
                        Some(c) => c,
                        // Boxed: only a new connection needs the connect's 1.6 KB.
                        None => Box::pin(self.connect(deadline)).await?,
                    };
                    rec.connected(connected.phases);
                    let (send, driver, conn) = self.handshake(connected.io).await?;
                    Lease::new(send, driver, conn, self.clone(), permit.take())
                }
            };
            let (Some(send), Some(driver)) = (lease.send.as_mut(), lease.driver.as_mut()) else {
                return Err(UpstreamError::Closed);
            };
            match timeout_at(deadline, driver.drive(send.ready())).await {
                Err(_) => return Err(UpstreamError::Deadline),
                // An idle connection that died between the check and now: try another.
                Ok(Err(_)) if reused => {
                    req = Some(request);
                    permit = lease.into_permit();
                    continue;
                }
                Ok(Err(e)) => return Err(error::from_hyper_head(&e)),
                Ok(Ok(())) => {}
            }
            // Kept only while a stale retry is still possible: a header map clone per request
            // on a reused connection, nothing on a fresh one.
            let again = reused.then(|| copy_request(&request));
            lease.conn.begin_request(max_requests, counters);
            let read_before = lease.conn.bytes_in();
            let handed_over = Instant::now();
            let sent = send.try_send_request(request);
            rec.written();
            let mut failed = match timeout_at(deadline, driver.drive(sent)).await {
                // Dropping `sent` makes hyper close the connection; the lease discards it.
                Err(_) => return Err(UpstreamError::Deadline),
                Ok(Ok(resp)) => return Ok((resp, lease)),
                Ok(Err(e)) => e,
            };
            // hyper hands the request back when it was never written: a reused connection
            // that the server closed meanwhile. Safe to send it on another.
            if let Some(unsent) = failed.take_message().filter(|_| reused) {
                req = Some(unsent);
                permit = lease.into_permit();
                continue;
            }
            let now = Instant::now();
            let stale = lease.conn.bytes_in() == read_before
                && error::closed_before_answering(failed.error())
                && now - handed_over <= STALE_CLOSE_WINDOW
                && now < deadline;
            match again {
                Some(copy) if stale => {
                    counters.stale_retries.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        upstream = %self.ctx.connector.upstream,
                        lane = self.lane.as_str(),
                        connection = lease.conn.id,
                        error = %failed.error(),
                        "a reused http/1.1 connection closed before answering; \
                         sending again on a fresh connection"
                    );
                    req = Some(copy);
                    fresh_only = true;
                    permit = lease.into_permit();
                }
                _ => return Err(error::from_hyper_head(failed.error())),
            }
        }
        // The loop only ends by returning; reaching here would mean a request went missing.
        Err(UpstreamError::Closed)
    }

    /// When an idle connection must be closed: idle for `idle_timeout`, or `max_connection_age`
    /// old, whichever comes first.
    fn expires(&self, idle: &Idle) -> (Instant, Option<DrainReason>) {
        let by_idle = idle.since + self.ctx.cfg.idle_timeout;
        match self.ctx.cfg.max_connection_age {
            Some(max) if idle.conn.opened_at() + max <= by_idle => {
                (idle.conn.opened_at() + max, Some(DrainReason::MaxAge))
            }
            _ => (by_idle, None),
        }
    }

    /// Whether `idle` must not be used at `now` (counting an age drain if that is why).
    fn expired(&self, idle: &Idle, now: Instant) -> bool {
        if idle.send.is_closed() || idle.driver.is_done() {
            return true;
        }
        let (at, reason) = self.expires(idle);
        if now < at {
            return false;
        }
        if let Some(reason) = reason {
            idle.conn.drain(reason, &self.ctx.counters);
        }
        true
    }

    /// Pops an idle connection that is still open and not expired. Closed ones are dropped
    /// here (hyper marks a connection closed as soon as its task sees the server's FIN), and
    /// so are expired ones, which closes them.
    fn take_idle(&self) -> Option<Idle> {
        let now = Instant::now();
        let mut idle = lock(&self.idle);
        while let Some(i) = idle.pop() {
            if !self.expired(&i, now) {
                i.conn.set_state(ShardState::InUse);
                return Some(i);
            }
        }
        None
    }

    /// Puts a connection whose response ended cleanly back in the idle list, unless it is
    /// closed, draining (its last request) or too old; those are dropped, which closes them.
    /// Called before the lease's permit is released, so a waiter finds it idle.
    fn put_idle(self: &Arc<Self>, send: SendRequest, driver: Driver, conn: Arc<ConnInfo>) {
        if send.is_closed() || driver.is_done() || conn.state() == ShardState::Draining {
            return;
        }
        let now = Instant::now();
        if let Some(max) = self.ctx.cfg.max_connection_age {
            if conn.age(now) >= max {
                conn.drain(DrainReason::MaxAge, &self.ctx.counters);
                return;
            }
        }
        conn.set_state(ShardState::Idle);
        let was_empty = {
            let mut idle = lock(&self.idle);
            idle.push(Idle {
                send,
                driver,
                conn,
                since: now,
            });
            idle.len() == 1
        };
        if was_empty {
            self.start_sweeper();
            // The sweeper sleeps without a deadline while the list is empty.
            self.idle_added.notify_one();
        }
    }

    fn start_sweeper(self: &Arc<Self>) {
        let mut sweeper = lock(&self.sweeper);
        if sweeper.is_some() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            *sweeper = Some(rt.spawn(sweep(Arc::downgrade(self), self.idle_added.clone())));
        }
    }

    /// Closes the idle connections that are closed, idle too long or too old; returns when the
    /// next one expires, if any is left.
    fn close_expired(&self, now: Instant) -> Option<Instant> {
        let mut idle = lock(&self.idle);
        idle.retain(|i| !self.expired(i, now));
        idle.iter().map(|i| self.expires(i).0).min()
    }

    /// How late the sweeper may close a connection: it wakes for the earliest expiry and closes
    /// all expired then, so a burst of connections that went idle together costs one wake-up,
    /// not one each.
    fn sweep_slack(&self) -> Duration {
        (self.ctx.cfg.idle_timeout / 16).min(Duration::from_secs(1))
    }

    async fn connect(&self, deadline: Instant) -> Result<Connected, UpstreamError> {
        let turn = self.connects.fetch_add(1, Ordering::Relaxed);
        let counters = &self.ctx.counters;
        match self.ctx.connector.connect(deadline, turn).await {
            Ok(c) => {
                counters.connects.fetch_add(1, Ordering::Relaxed);
                Ok(c)
            }
            Err(e) => {
                counters.connect_failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    async fn handshake(
        &self,
        io: Io,
    ) -> Result<(SendRequest, Driver, Arc<ConnInfo>), UpstreamError> {
        let id = self.ctx.next_shard_id.fetch_add(1, Ordering::Relaxed);
        let info = Arc::new(ConnInfo::new(id, self.lane));
        let io = TokioIo::new(Counted::new(io, info.clone()));
        self.connecting.fetch_add(1, Ordering::Relaxed);
        let shaken = http1::Builder::new().handshake(io).await;
        self.connecting.fetch_sub(1, Ordering::Relaxed);
        let (send, conn) = shaken.map_err(|e| UpstreamError::Protocol(e.to_string()))?;
        let open = self.ctx.counters.connection_opened();
        lock(&self.live).insert(id, info.clone());
        let driver = Driver::new(conn, info.clone(), self.live.clone(), open);
        Ok((send, driver, info))
    }
}

/// Closes idle connections on time. Holds the pool only while sweeping.
async fn sweep(pool: Weak<H1Pool>, idle_added: Arc<Notify>) {
    loop {
        let next = {
            let Some(pool) = pool.upgrade() else {
                return;
            };
            pool.close_expired(Instant::now())
                .map(|at| at + pool.sweep_slack())
        };
        match next {
            Some(at) => sleep_until(at).await,
            None => idle_added.notified().await,
        }
    }
}

/// A request's copy, for sending it again: hyper consumes the request it writes.
fn copy_request(req: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut r = Request::new(req.body().clone());
    *r.method_mut() = req.method().clone();
    *r.uri_mut() = req.uri().clone();
    *r.version_mut() = req.version();
    *r.headers_mut() = req.headers().clone();
    r
}

/// One HTTP/1.1 connection in use. Dropped without [`Lease::reuse`], it closes the
/// connection: only a response read to its end leaves the connection in a known state.
pub(crate) struct Lease {
    send: Option<SendRequest>,
    driver: Option<Driver>,
    conn: Arc<ConnInfo>,
    pool: Arc<H1Pool>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Lease {
    fn new(
        send: SendRequest,
        driver: Driver,
        conn: Arc<ConnInfo>,
        pool: Arc<H1Pool>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Lease {
        Lease {
            send: Some(send),
            driver: Some(driver),
            conn,
            pool,
            permit,
        }
    }

    /// The response was read to EOF: the connection may carry another request (unless it is
    /// closed, or due for rotation).
    pub(crate) fn reuse(mut self) {
        if let (Some(send), Some(driver)) = (self.send.take(), self.driver.take()) {
            // Before the permit is released (in drop), so a waiter finds it idle.
            self.pool.put_idle(send, driver, self.conn.clone());
        }
    }

    /// Moves the connection on (reads the response into its body, writes what is left of the
    /// request); the response body's poll calls it first, with the same waker.
    pub(crate) fn poll_connection(&mut self, cx: &mut std::task::Context<'_>) {
        if let Some(d) = self.driver.as_mut() {
            d.poll_connection(cx);
        }
    }

    fn into_permit(mut self) -> Option<OwnedSemaphorePermit> {
        drop(self.send.take());
        drop(self.driver.take());
        self.permit.take()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Connection first (closing it), then the permit.
        drop(self.send.take());
        drop(self.driver.take());
        drop(self.permit.take());
    }
}
