//! One lane's HTTP/2 shards: acquiring a stream slot (least in-flight, open another
//! connection when all are full, else wait in a bounded FIFO), the lane's single connect
//! task, and pruning finished shards.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use super::select::{self, Candidate};
use crate::config::{Lane, Protocol, Wire};
use crate::connect::Connected;
use crate::error::UpstreamError;
use crate::h2::{LaneEvents, Shard, StreamLease};
use crate::shard::{AlpnPolicy, CapWarning, ConnectionSnapshot, LaneSnapshot, PoolCtx, ShardState};

/// How often a waiting request re-reads the servers' SETTINGS_MAX_CONCURRENT_STREAMS, which
/// h2 raises without notifying anyone.
const SLOT_RECHECK: Duration = Duration::from_millis(50);

// A poisoned lock only means a panic elsewhere; the data behind these locks stays consistent
// (every update is a single assignment or push).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a waiting request got.
pub(crate) enum Acquired {
    Stream(StreamLease),
    /// ALPN chose http/1.1 (`Auto`): send over HTTP/1.1, on this socket if there is one.
    Http1(Option<Connected>),
}

/// State shared by the lane, its shards' tasks (as a `Weak`) and its connect task.
pub(crate) struct LaneShared {
    lane: Lane,
    ctx: Arc<PoolCtx>,
    state: Mutex<LaneState>,
    /// Waiting requests, oldest first, each with its own wake-up. Only the head may take a
    /// free slot; when it does it wakes the next. So a freed slot, a state change or a
    /// finished connect costs one wake-up, not one per waiter: with 10,000 requests queued
    /// for a pool that is still opening connections, waking everyone on every event was
    /// quadratic and starved the pool. Locked on its own (never while taking `state`'s lock
    /// from inside it), so shards can wake the head without the lane lock.
    waiters: Mutex<VecDeque<(u64, Arc<Notify>)>>,
    /// Connects so far: where the next one starts in the host's address list.
    connects: AtomicUsize,
    cap_warning: CapWarning,
}

struct LaneState {
    shards: Vec<Arc<Shard>>,
    /// The lane's one connect in progress, owned here so that dropping the lane aborts it.
    connecting: Option<JoinHandle<()>>,
    /// Numbers connect attempts, so that a waiter fails only with the attempt it waited for.
    connect_gen: u64,
    failed: Option<(u64, UpstreamError)>,
    /// A socket on which TLS chose http/1.1 (`Auto`), for the first HTTP/1.1 request.
    fallback_io: Option<Connected>,
    next_ticket: u64,
    /// Replacing degraded shards is rate-limited: not before `replace_after`, and each
    /// replacement doubles `replace_backoff` (a healthy PONG resets it).
    replace_after: Instant,
    replace_backoff: Duration,
}

/// Longest wait between two replacements of degraded shards.
const MAX_REPLACE_BACKOFF: Duration = Duration::from_secs(30);

impl Drop for LaneState {
    fn drop(&mut self) {
        if let Some(task) = self.connecting.take() {
            task.abort();
        }
    }
}

impl LaneState {
    /// Open connections (degraded and draining ones too: each is a socket).
    fn live(&self) -> usize {
        self.shards
            .iter()
            .filter(|s| s.shared.state() != ShardState::Closed)
            .count()
    }

    fn candidates(&self, avoid: Option<u64>) -> Vec<Candidate> {
        self.shards
            .iter()
            .map(|s| Candidate {
                state: s.shared.state(),
                in_flight: s.shared.in_flight.load(Ordering::Acquire),
                cap: s.cap(),
                rtt: lock(&s.shared.health).ewma,
                avoid: Some(s.shared.id) == avoid,
            })
            .collect()
    }

    fn prune(&mut self, max_age: Option<Duration>) {
        for s in &self.shards {
            s.check_age(max_age);
        }
        // NOTE: dropping a shard here (inside the lane lock) only aborts its tasks; nothing in
        // a shard's drop takes this lock.
        self.shards.retain(|s| !s.shared.finished());
    }
}

impl LaneShared {
    fn pending(&self) -> usize {
        lock(&self.waiters).len()
    }

    /// The first wait between replacements: max(ping_interval, 1 s), so a replacement gets
    /// at least one PING to prove itself before the next is opened.
    fn base_backoff(&self) -> Duration {
        self.ctx.cfg.ping_interval.max(Duration::from_secs(1))
    }

    /// A background connect (keeping `min_connections` ready), unless it would replace a
    /// degraded shard sooner than the backoff allows.
    ///
    /// NOTE: we accept replacing degraded shards slowly (1 s, then doubling to 30 s) because
    /// against a server that accepts TCP but never answers, every replacement degrades too:
    /// a scripted peer showed connections churning as fast as they degraded.
    fn background_connect(self: &Arc<Self>, st: &mut LaneState, cands: &[Candidate]) {
        let cfg = self.ctx.cfg.lane(self.lane);
        if self.ctx.fell_back()
            || !select::should_connect(
                cands,
                st.connecting.is_some(),
                cfg.min_connections,
                self.ctx.cap(self.lane, Wire::H2),
            )
        {
            return;
        }
        if cands.iter().any(|c| c.state == ShardState::Degraded) {
            let now = Instant::now();
            if now < st.replace_after {
                return;
            }
            st.replace_backoff = st.replace_backoff.max(self.base_backoff());
            st.replace_after = now + st.replace_backoff;
            st.replace_backoff = (st.replace_backoff * 2).min(MAX_REPLACE_BACKOFF);
        }
        self.start_connect(st);
    }

    /// Starts the lane's connect task; returns its generation.
    fn start_connect(self: &Arc<Self>, st: &mut LaneState) -> u64 {
        st.connect_gen += 1;
        let gen = st.connect_gen;
        let ctx = self.ctx.clone();
        let lane = self.lane;
        let weak = Arc::downgrade(self);
        let turn = self.connects.fetch_add(1, Ordering::Relaxed);
        st.connecting = Some(tokio::spawn(async move {
            let result = connect(&ctx, lane, weak.clone(), turn).await;
            let Some(shared) = weak.upgrade() else {
                return;
            };
            let mut st = lock(&shared.state);
            // Our own handle: dropping it detaches (we are about to end anyway).
            st.connecting = None;
            match result {
                Ok(Opened::Shard(shard)) => st.shards.push(shard),
                Ok(Opened::Http1(io)) => st.fallback_io = Some(io),
                Err(e) => {
                    ctx.counters
                        .connect_failures
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, ?lane, "upstream h2 connect failed");
                    st.failed = Some((gen, e));
                }
            }
            drop(st);
            shared.wake_head();
        }));
        gen
    }
}

impl LaneEvents for LaneShared {
    /// Wakes the oldest waiting request (a stored permit if it is not waiting right now).
    fn wake_head(&self) {
        if let Some((_, n)) = lock(&self.waiters).front() {
            n.notify_one();
        }
    }

    /// Drops finished shards (and drains those past `max_age`).
    fn prune_and_check_age(&self, max_age: Option<Duration>) {
        lock(&self.state).prune(max_age);
    }

    /// A Ready shard answered a PING in time: the link works, so replacing a degraded shard
    /// need not wait long.
    fn healthy_pong(&self) {
        let base = self.base_backoff();
        let mut st = lock(&self.state);
        if st.replace_backoff > base {
            st.replace_backoff = base;
            st.replace_after = st.replace_after.min(Instant::now() + base);
        }
    }

    /// Opens a connection in the background if the lane needs one (fewer than
    /// `min_connections` ready, e.g. because a shard just became degraded). Called by a
    /// shard's PING loop when its health changes.
    fn maintain(self: Arc<Self>) {
        let mut st = lock(&self.state);
        st.prune(self.ctx.cfg.max_connection_age);
        let cands = st.candidates(None);
        self.background_connect(&mut st, &cands);
    }

    /// The lowest RTT any live shard of the lane has shown (the lane's baseline).
    fn best_rtt(&self) -> Option<Duration> {
        let st = lock(&self.state);
        st.shards
            .iter()
            .filter(|s| s.shared.state() != ShardState::Closed)
            .filter_map(|s| lock(&s.shared.health).min_rtt)
            .min()
    }
}

/// Removes a waiter's ticket however its acquire ends (success, error, or the caller
/// dropping the future), so the queue never holds ghosts.
struct Ticket<'a> {
    shared: &'a LaneShared,
    id: Option<u64>,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            lock(&self.shared.waiters).retain(|(t, _)| *t != id);
            // The head may have changed.
            self.shared.wake_head();
        }
    }
}

/// One lane's HTTP/2 connections.
pub(crate) struct H2Lane {
    lane: Lane,
    ctx: Arc<PoolCtx>,
    shared: Arc<LaneShared>,
}

impl H2Lane {
    pub(crate) fn new(lane: Lane, ctx: Arc<PoolCtx>) -> Self {
        H2Lane {
            lane,
            ctx: ctx.clone(),
            shared: Arc::new(LaneShared {
                lane,
                ctx: ctx.clone(),
                state: Mutex::new(LaneState {
                    shards: Vec::new(),
                    connecting: None,
                    connect_gen: 0,
                    failed: None,
                    fallback_io: None,
                    next_ticket: 0,
                    replace_after: Instant::now(),
                    replace_backoff: Duration::ZERO,
                }),
                waiters: Mutex::new(VecDeque::new()),
                connects: AtomicUsize::new(0),
                cap_warning: CapWarning::new(),
            }),
        }
    }

    /// Takes a stream slot on the best shard, opening or waiting for one as needed.
    ///
    /// `avoid`: a shard that just refused this request; used again only if no other shard
    /// has room. Waiting is bounded by the lane's `acquire_timeout` and by `deadline`.
    ///
    /// # Errors
    /// `PoolFull` (the wait queue is at `max_pending`), `PoolAcquireTimeout`, or the error of
    /// the connect attempt this request waited for.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the queue and takes no slot.
    pub(crate) async fn acquire(
        &self,
        deadline: Instant,
        avoid: Option<u64>,
    ) -> Result<Acquired, UpstreamError> {
        let cfg = self.ctx.cfg.lane(self.lane).clone();
        let max_connections = self.ctx.cap(self.lane, Wire::H2);
        let start = Instant::now();
        let give_up = deadline.min(start + cfg.acquire_timeout);
        let mut ticket = Ticket {
            shared: &self.shared,
            id: None,
        };
        // The connect attempt whose failure this request shares.
        let mut waiting_for: Option<u64> = None;
        let mut warned = false;
        let wake = Arc::new(Notify::new());
        loop {
            let mut notified = pin!(wake.notified());
            // Registered before the checks, so a wake-up between check and wait is not lost
            // (and `notify_one` keeps a permit anyway).
            notified.as_mut().enable();
            let is_head;
            // Open connections when last looked at, for the error if the wait times out.
            let live;
            {
                let mut st = lock(&self.shared.state);
                if self.ctx.fell_back() {
                    return Ok(Acquired::Http1(st.fallback_io.take()));
                }
                st.prune(self.ctx.cfg.max_connection_age);
                let cands = st.candidates(avoid);
                let my_turn = match lock(&self.shared.waiters).front() {
                    None => true,
                    Some((head, _)) => Some(*head) == ticket.id,
                };
                if my_turn {
                    if let Some(i) = select::choose(&cands) {
                        let lease = st.shards[i].lease(&self.ctx);
                        if let Some(id) = ticket.id.take() {
                            lock(&self.shared.waiters).retain(|(t, _)| *t != id);
                            // Let the next waiter try.
                            self.shared.wake_head();
                        }
                        // Keep min_connections ready, and open the next connection before
                        // this lane fills up (in the background).
                        let after = st.candidates(None);
                        self.shared.background_connect(&mut st, &after);
                        return Ok(Acquired::Stream(lease));
                    }
                }
                if let Some((gen, err)) = &st.failed {
                    if waiting_for.is_some_and(|w| *gen >= w) {
                        return Err(err.duplicate());
                    }
                }
                live = st.live();
                if !warned && live >= max_connections && select::choose(&cands).is_none() {
                    warned = true;
                    self.shared.cap_warning.reached(
                        &self.ctx.connector.upstream,
                        self.lane,
                        self.ctx.h2_limit(self.lane, live),
                    );
                }
                if select::should_connect(
                    &cands,
                    st.connecting.is_some(),
                    cfg.min_connections,
                    max_connections,
                ) {
                    let gen = self.shared.start_connect(&mut st);
                    waiting_for.get_or_insert(gen);
                } else if st.connecting.is_some() {
                    waiting_for.get_or_insert(st.connect_gen);
                }
                if ticket.id.is_none() {
                    let mut waiters = lock(&self.shared.waiters);
                    if waiters.len() >= cfg.max_pending {
                        self.ctx.counters.pool_full.fetch_add(1, Ordering::Relaxed);
                        return Err(UpstreamError::PoolFull {
                            upstream: self.ctx.connector.upstream.clone(),
                            lane: self.lane,
                            limit: self.ctx.h2_limit(self.lane, live),
                            max_pending: cfg.max_pending,
                        });
                    }
                    let id = st.next_ticket;
                    st.next_ticket += 1;
                    waiters.push_back((id, wake.clone()));
                    ticket.id = Some(id);
                }
                is_head = lock(&self.shared.waiters)
                    .front()
                    .is_some_and(|(h, _)| Some(*h) == ticket.id);
            }
            let now = Instant::now();
            if now >= give_up {
                self.ctx
                    .counters
                    .pool_acquire_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                return Err(UpstreamError::PoolAcquireTimeout {
                    upstream: self.ctx.connector.upstream.clone(),
                    lane: self.lane,
                    limit: self.ctx.h2_limit(self.lane, live),
                    waited: now - start,
                });
            }
            // Only the head polls for a server raising its stream limit (which h2 does not
            // announce); the others wait for their turn.
            let recheck = if is_head {
                give_up.min(now + SLOT_RECHECK)
            } else {
                give_up
            };
            tokio::select! {
                _ = notified => {}
                _ = sleep_until(recheck) => {}
            }
        }
    }

    pub(crate) fn snapshot(&self) -> LaneSnapshot {
        let mut st = lock(&self.shared.state);
        st.prune(self.ctx.cfg.max_connection_age);
        let connections: Vec<ConnectionSnapshot> = st
            .shards
            .iter()
            .map(|s| {
                let sh = &s.shared;
                let health = *lock(&sh.health);
                ConnectionSnapshot {
                    id: sh.id,
                    protocol: sh.protocol,
                    lane: sh.lane,
                    state: sh.state(),
                    in_flight: sh.in_flight.load(Ordering::Acquire),
                    cap: s.cap(),
                    // h2 reports "no limit" as usize::MAX.
                    server_max_streams: Some(s.server_max_streams()).filter(|m| *m != usize::MAX),
                    rtt: health.ewma,
                    age: sh.opened_at.elapsed(),
                    requests_served: sh.requests.load(Ordering::Relaxed),
                    bytes_in: sh.bytes_in.load(Ordering::Relaxed),
                    bytes_out: sh.bytes_out.load(Ordering::Relaxed),
                }
            })
            .collect();
        let count = |state| connections.iter().filter(|c| c.state == state).count();
        LaneSnapshot {
            lane: self.lane,
            connecting: usize::from(st.connecting.is_some()),
            ready: count(ShardState::Ready),
            degraded: count(ShardState::Degraded),
            draining: count(ShardState::Draining),
            in_flight: connections.iter().map(|c| c.in_flight).sum(),
            pending: self.shared.pending(),
            max_connections: self.ctx.cap(self.lane, Wire::H2),
            connections,
        }
    }
}

enum Opened {
    Shard(Arc<Shard>),
    Http1(Connected),
}

/// One connect: TCP (+ TLS), then the HTTP/2 handshake, bounded by `connect_timeout` each.
async fn connect(
    ctx: &Arc<PoolCtx>,
    lane: Lane,
    weak: std::sync::Weak<LaneShared>,
    turn: usize,
) -> Result<Opened, UpstreamError> {
    let connect_timeout = ctx.connector.connect_timeout();
    // Bounded by `connect_timeout` inside (→ ConnectTimeout); the waiters' own deadlines
    // bound how long they wait for it, so no request deadline applies here.
    let connected = ctx
        .connector
        .connect(Instant::now() + 2 * connect_timeout, turn)
        .await?;
    ctx.counters.connects.fetch_add(1, Ordering::Relaxed);
    let protocol = match ctx.settings.alpn {
        AlpnPolicy::None => Protocol::H2c,
        _ => Protocol::H2,
    };
    if !connected.alpn_h2 {
        match ctx.settings.alpn {
            AlpnPolicy::None => {}
            AlpnPolicy::Required => {
                return Err(UpstreamError::Protocol(format!(
                    "upstream `{}` did not negotiate h2 by ALPN; use protocol Auto or Http1 \
                     for a server without HTTP/2",
                    ctx.connector.upstream
                )))
            }
            AlpnPolicy::FallBack => {
                ctx.set_fell_back();
                return Ok(Opened::Http1(connected));
            }
        }
    }
    let shard = tokio::time::timeout(
        connect_timeout,
        Shard::open(ctx, lane, weak, connected.io, protocol, connected.phases),
    )
    .await
    .map_err(|_| UpstreamError::ConnectTimeout(connect_timeout))??;
    Ok(Opened::Shard(shard))
}
