//! HTTP/1.1: one lane's keep-alive pool of connections ([`conn::Conn`], speaking HTTP/1.1
//! through our own small codec, [`codec`]), capped at the lane's HTTP/1.1 `max_connections`,
//! each connection tracked ([`conn::ConnInfo`]) for the snapshot, for rotation
//! (`max_connection_age`, `max_requests_per_connection`) and for the idle timeout.
//!
//! Why not hyper's client connection: it is built for one connection shared through a
//! channel (a dispatch queue, want/giver signalling, a `Connection` future to drive), all of
//! which costs a small proxied call ~14 K instructions; our connection carries one request at
//! a time, held by one owner, so writing the head and parsing the answer in place is all
//! there is to do. The server side stays hyper; HTTP/2 stays on h2.
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
//! A connection has no task of its own: it is a socket and a buffer, owned by the idle list
//! or by the lease of the request on it, and the request's own task writes the request, reads
//! the head and reads the body ([`H1Body`]). An idle connection is not read: a close by the
//! server is seen when the connection is taken for a request (one read attempt that must find
//! nothing, [`Conn::is_reusable_idle`]), by the sweeper, or by the stale keep-alive retry
//! below when the close crosses the request.

mod body;
mod codec;
mod conn;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::config::{Lane, Wire};
use crate::connect::{Connected, Io};
use crate::error::{LaneLimit, UpstreamError};
use crate::shard::{CapWarning, DrainReason, LaneSnapshot, PoolCtx, ShardState};
use crate::timing::Recorder;
pub(crate) use body::H1Body;
use conn::{Conn, ConnInfo};

/// How soon after the request was handed over the close of a reused connection must come to be
/// taken for the stale keep-alive race (see [`H1Pool::send`]).
const STALE_CLOSE_WINDOW: Duration = Duration::from_secs(1);

/// The lane's live connections by id, shared with the connections (which remove themselves
/// when dropped).
type Registry = Arc<Mutex<HashMap<u64, Arc<ConnInfo>>>>;

/// A kept-alive connection waiting for its next request.
/// How far down the idle stack a worker thread looks for a connection of its own before it
/// takes another thread's (which works, one thread wake more per read).
const OWN_SCAN: usize = 16;

struct Idle {
    conn: Box<Conn>,
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

    /// Sends one request and returns the response head and its body, which holds the lease of
    /// its connection.
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
    /// The request is borrowed, not consumed: it stays at hand until the head arrives, to be
    /// written again after a stale close.
    ///
    /// Cancel safety: dropping the future drops the lease; a connection with a request in
    /// flight is then closed, never returned to the pool.
    pub(crate) async fn send(
        self: &Arc<Self>,
        req: &Request<Bytes>,
        deadline: Instant,
        mut preconnected: Option<Connected>,
        rec: &mut Recorder,
    ) -> Result<(http::response::Parts, H1Body), UpstreamError> {
        let waiting = Instant::now();
        let permit = self.permit(deadline).await?;
        rec.waited(waiting, None);
        let mut permit = Some(permit);
        // After a stale close only a fresh connection will do: the other idle connections
        // are as old, and may be as stale.
        let mut fresh_only = false;
        let counters = &self.ctx.counters;
        let max_requests = self.ctx.cfg.max_requests_per_connection;
        let head_request = req.method() == Method::HEAD;
        loop {
            let taken = if fresh_only { None } else { self.take_idle() };
            let reused = taken.is_some();
            let conn = match taken {
                Some(idle) => idle.conn,
                None => {
                    let connected = match preconnected.take() {
                        Some(c) => c,
                        // Boxed: only a new connection needs the connect's 1.6 KB.
                        None => Box::pin(self.connect(deadline)).await?,
                    };
                    rec.connected(connected.phases);
                    self.open(connected.io)
                }
            };
            let mut lease = Lease {
                conn,
                pool: self.clone(),
                permit: permit.take(),
            };
            let conn = &mut lease.conn;
            conn.info.begin_request(max_requests, counters);
            let read_before = conn.info.bytes_in();
            let handed_over = Instant::now();
            let exchange = async {
                conn.write_request(req).await?;
                rec.written();
                conn.read_head(head_request).await
            };
            let failed = match timeout_at(deadline, exchange).await {
                // The lease's drop closes the connection: it holds a request in flight.
                Err(_) => return Err(UpstreamError::Deadline),
                Ok(Ok(head)) => {
                    let body = H1Body::new(head.framing, head.keep_alive, lease);
                    return Ok((head.parts, body));
                }
                Ok(Err(e)) => e,
            };
            let now = Instant::now();
            let stale = reused
                && lease.conn.info.bytes_in() == read_before
                && failed.closed_before_answering()
                && now - handed_over <= STALE_CLOSE_WINDOW
                && now < deadline;
            if !stale {
                return Err(failed.head_error());
            }
            counters.stale_retries.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                upstream = %self.ctx.connector.upstream,
                lane = self.lane.as_str(),
                connection = lease.conn.info.id,
                error = %failed,
                "a reused http/1.1 connection closed before answering; \
                 sending again on a fresh connection"
            );
            fresh_only = true;
            permit = lease.into_permit();
        }
    }

    /// When an idle connection must be closed: idle for `idle_timeout`, or `max_connection_age`
    /// old, whichever comes first.
    fn expires(&self, idle: &Idle) -> (Instant, Option<DrainReason>) {
        let by_idle = idle.since + self.ctx.cfg.idle_timeout;
        match self.ctx.cfg.max_connection_age {
            Some(max) if idle.conn.info.opened_at() + max <= by_idle => {
                (idle.conn.info.opened_at() + max, Some(DrainReason::MaxAge))
            }
            _ => (by_idle, None),
        }
    }

    /// Whether `idle` must not be used at `now` (counting an age drain if that is why): closed
    /// by the server, or expired.
    fn expired(&self, idle: &mut Idle, now: Instant) -> bool {
        if !idle.conn.is_reusable_idle() {
            return true;
        }
        let (at, reason) = self.expires(idle);
        if now < at {
            return false;
        }
        if let Some(reason) = reason {
            idle.conn.info.drain(reason, &self.ctx.counters);
        }
        true
    }

    /// Pops an idle connection that is still open and not expired. Closed ones (the server's
    /// FIN already arrived) are dropped here, and so are expired ones, which closes them.
    fn take_idle(&self) -> Option<Idle> {
        let now = Instant::now();
        let home = crate::home::current();
        loop {
            // The check reads the socket: outside the lock.
            let mut i = {
                let mut idle = lock(&self.idle);
                // On a worker thread, one of its own connections if one is among the most
                // recently idle (the list is a stack): its socket is driven by this thread.
                let own = (home != 0)
                    .then(|| {
                        idle.iter()
                            .rev()
                            .take(OWN_SCAN)
                            .position(|i| i.conn.home == home)
                    })
                    .flatten();
                match own {
                    Some(back) => {
                        let at = idle.len() - 1 - back;
                        idle.remove(at)
                    }
                    None => idle.pop()?,
                }
            };
            if !self.expired(&mut i, now) {
                i.conn.info.set_state(ShardState::InUse);
                return Some(i);
            }
        }
    }

    /// Puts a connection whose response ended cleanly back in the idle list, unless it is
    /// closed, draining (its last request) or too old; those are dropped, which closes them.
    /// Called before the lease's permit is released, so a waiter finds it idle.
    /// Returns the time it read, if it read one (the body's end takes it for its last byte).
    fn put_idle(self: &Arc<Self>, conn: Box<Conn>) -> Option<Instant> {
        let info = &conn.info;
        if info.state() == ShardState::Draining {
            return None;
        }
        let now = Instant::now();
        if let Some(max) = self.ctx.cfg.max_connection_age {
            if info.age(now) >= max {
                info.drain(DrainReason::MaxAge, &self.ctx.counters);
                return Some(now);
            }
        }
        info.set_state(ShardState::Idle);
        let was_empty = {
            let mut idle = lock(&self.idle);
            idle.push(Idle { conn, since: now });
            idle.len() == 1
        };
        if was_empty {
            self.start_sweeper();
            // The sweeper sleeps without a deadline while the list is empty.
            self.idle_added.notify_one();
        }
        Some(now)
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
        idle.retain_mut(|i| !self.expired(i, now));
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
        // Decrements `connecting` however the connect ends, including the caller dropping us.
        struct Connecting<'a>(&'a AtomicUsize);
        impl Drop for Connecting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.connecting.fetch_add(1, Ordering::Relaxed);
        let _connecting = Connecting(&self.connecting);
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

    /// A connection just connected, registered in the lane's registry, in use.
    /// Boxed once for the connection's life: a request's lease, and so the response body the
    /// relay holds for a stream's whole life, carries a pointer instead of the socket and its
    /// buffers, and moving it between the idle list and a lease copies nothing.
    fn open(&self, io: Io) -> Box<Conn> {
        let id = self.ctx.next_shard_id.fetch_add(1, Ordering::Relaxed);
        let info = Arc::new(ConnInfo::new(id, self.lane));
        let open = self.ctx.counters.connection_opened();
        Box::new(Conn::new(io, info, self.live.clone(), open))
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

/// One HTTP/1.1 connection in use. Dropped without [`Lease::reuse`], it closes the
/// connection: only a response read to its end leaves the connection in a known state.
///
/// Fields drop in order: the connection (closing it) before the permit, so a waiter given the
/// permit never finds the cap exceeded.
pub(crate) struct Lease {
    conn: Box<Conn>,
    pool: Arc<H1Pool>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Lease {
    /// The response was read to its end and allows another request: the connection goes back
    /// to the idle list (unless it is draining, or due for rotation).
    /// Returns when it did, if the pool read the clock.
    pub(crate) fn reuse(self) -> Option<Instant> {
        let Lease { conn, pool, permit } = self;
        // Before the permit is released, so a waiter finds it idle.
        let at = pool.put_idle(conn);
        drop(permit);
        at
    }

    pub(crate) fn conn_mut(&mut self) -> &mut Conn {
        &mut self.conn
    }

    /// Closes the connection and keeps its permit, for another attempt.
    fn into_permit(self) -> Option<OwnedSemaphorePermit> {
        let Lease { conn, permit, .. } = self;
        drop(conn);
        permit
    }
}
