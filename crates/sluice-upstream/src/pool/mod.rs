//! The upstream's connection pool: lanes, HTTP/2 shards, choosing a shard, health, draining,
//! transparent retries of requests the server provably did not process, and a snapshot.
//!
//! ```text
//! Pool
//!  └─ lane (Stream | Short), each with its own connections
//!      ├─ HTTP/2: shards (lane.rs), each one connection (shard_h2.rs) with a PING loop
//!      │   (health.rs) and a frame tap (tap.rs); the shard for a stream is chosen by
//!      │   select.rs
//!      └─ HTTP/1.1: a keep-alive pool (h1/), one request per connection, each
//!          connection tracked for the snapshot, rotation and the idle timeout
//! ```
//!
//! A lane that reaches its connection cap (either protocol) logs a warning, at most once per
//! 10 s (cap_warning.rs), and its waiting requests fail naming the limit ([`LaneLimit`]).

mod cap_warning;
mod health;
mod lane;
mod select;
mod shard_h2;
mod tap;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use tokio::time::Instant;

pub(crate) use cap_warning::CapWarning;
pub(crate) use shard_h2::StreamLease;

use crate::config::{Lane, PoolConfig, Wire};
use crate::connect::Connector;
use crate::error::{LaneLimit, UpstreamError};
use crate::h1::H1Pool;
use crate::h2::{self, H2Settings, Sent};
use crate::target::Target;
use crate::timing::Recorder;
use crate::{Counters, Protocol};
use lane::{Acquired, H2Lane};
use shard_h2::HealthSettings;

/// Retries of a request that the server provably did not process (REFUSED_STREAM, a stream
/// above a GOAWAY's last-stream-id, a connection found dead before the request was written).
const MAX_TRANSPARENT_RETRIES: usize = 2;

/// The state of one pooled connection. HTTP/2 connections are `Ready`, `Degraded`,
/// `Draining` or `Closed`; HTTP/1.1 connections are `Idle`, `InUse` or `Draining`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ShardState {
    /// HTTP/2: takes new streams (up to its cap).
    Ready = 0,
    /// Slow PING RTT or stalled streams: no new streams; open ones continue; recovers after
    /// 3 good pings.
    Degraded = 1,
    /// GOAWAY received, or an age or request limit reached: no new streams; closes when its
    /// last stream ends. HTTP/1.1: its request continues, then it closes.
    Draining = 2,
    /// Gone (I/O error, PING timeout, server closed it).
    Closed = 3,
    /// HTTP/1.1: kept alive, waiting for the next request.
    Idle = 4,
    /// HTTP/1.1: carrying a request (until its response body ends).
    InUse = 5,
}

impl ShardState {
    pub(crate) fn from_u8(v: u8) -> ShardState {
        match v {
            0 => ShardState::Ready,
            1 => ShardState::Degraded,
            2 => ShardState::Draining,
            4 => ShardState::Idle,
            5 => ShardState::InUse,
            _ => ShardState::Closed,
        }
    }

    /// `"ready"`, `"degraded"`, `"draining"`, `"closed"`, `"idle"` or `"in_use"`, for
    /// metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ShardState::Ready => "ready",
            ShardState::Degraded => "degraded",
            ShardState::Draining => "draining",
            ShardState::Closed => "closed",
            ShardState::Idle => "idle",
            ShardState::InUse => "in_use",
        }
    }
}

/// Why a connection was drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DrainReason {
    GoAway,
    MaxAge,
    MaxRequests,
}

/// A point-in-time view of the pool, for metrics and the admin API. Plain data: every field
/// is a number, a duration, an enum with `as_str`, or a list of those.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSnapshot {
    /// One entry per lane ([`Lane::ALL`] order).
    pub lanes: Vec<LaneSnapshot>,
    /// Counters since the `Upstream` was created.
    pub counters: PoolCounters,
}

/// One lane. For HTTP/1.1, `ready` is the number of idle keep-alive connections, `draining`
/// the connections whose request is the last, and `in_flight` the requests holding one of the
/// lane's `max_connections` slots (including those still connecting).
#[derive(Clone, Debug, PartialEq)]
pub struct LaneSnapshot {
    /// Which lane.
    pub lane: Lane,
    /// Connects in progress: at most one at a time per HTTP/2 lane; on an HTTP/1.1 lane, one
    /// per request that found no idle connection (the TCP and TLS connect included).
    pub connecting: usize,
    /// Connections taking new streams.
    pub ready: usize,
    /// Degraded connections (no new streams).
    pub degraded: usize,
    /// Draining connections (no new streams, closing when empty).
    pub draining: usize,
    /// Streams (or HTTP/1.1 requests) in flight on the lane.
    pub in_flight: usize,
    /// Requests waiting for a slot.
    pub pending: usize,
    /// The lane's connection cap in force for the protocol it speaks (configured, or the
    /// protocol's default within the open-file ceiling).
    pub max_connections: usize,
    /// Its connections, by id.
    pub connections: Vec<ConnectionSnapshot>,
}

/// One pooled connection (HTTP/2 or HTTP/1.1).
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionSnapshot {
    /// Pool-wide id (not the mock's or the server's id).
    pub id: u64,
    /// `H2`, `H2c` or `Http1`.
    pub protocol: Protocol,
    /// Its lane.
    pub lane: Lane,
    /// Its state.
    pub state: ShardState,
    /// Streams open on it (HTTP/1.1: 1 while in use).
    pub in_flight: usize,
    /// Streams it may carry now: min(`max_streams_per_connection`, `server_max_streams`)
    /// (HTTP/1.1: 1).
    pub cap: usize,
    /// The server's current SETTINGS_MAX_CONCURRENT_STREAMS (as h2 knows it); `None` when
    /// the server set no limit, and for HTTP/1.1.
    pub server_max_streams: Option<usize>,
    /// Smoothed PING RTT; `None` before the first PONG, and for HTTP/1.1 (no PING).
    pub rtt: Option<Duration>,
    /// Since the handshake (HTTP/1.1: since TCP/TLS was established).
    pub age: Duration,
    /// Streams it has carried.
    pub requests_served: u64,
    /// Bytes read from the socket (TLS included).
    pub bytes_in: u64,
    /// Bytes written to the socket (TLS included).
    pub bytes_out: u64,
}

/// Pool counters since the `Upstream` was created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Connections established (TCP + TLS).
    pub connects: u64,
    /// Connect or handshake attempts that failed.
    pub connect_failures: u64,
    /// GOAWAY frames received (first per connection).
    pub goaways: u64,
    /// Streams the server refused (REFUSED_STREAM).
    pub refused_streams: u64,
    /// Requests re-sent on another connection because the server provably had not processed
    /// them (REFUSED_STREAM, above a GOAWAY's last-stream-id, connection dead before sending).
    pub transparent_retries: u64,
    /// HTTP/1.1: requests re-sent once on a fresh connection because the reused keep-alive
    /// connection they were written to closed (EOF or reset) before a single response byte,
    /// within a second of the write: the server had closed it as idle while the request was
    /// on its way.
    pub stale_retries: u64,
    /// Connections drained because of a GOAWAY.
    pub drains_goaway: u64,
    /// Connections drained at `max_connection_age`.
    pub drains_max_age: u64,
    /// Connections drained at `max_requests_per_connection`.
    pub drains_max_requests: u64,
    /// Times a connection became degraded (RTT or stall).
    pub degradations: u64,
    /// Connections closed because a PING went unanswered.
    pub ping_timeouts: u64,
    /// Requests that failed with `PoolAcquireTimeout`.
    pub pool_acquire_timeouts: u64,
    /// Requests that failed with `PoolFull`.
    pub pool_full: u64,
}

/// Everything the lanes and shards of one upstream share.
pub(crate) struct PoolCtx {
    pub(crate) connector: Arc<Connector>,
    pub(crate) settings: H2Settings,
    pub(crate) cfg: PoolConfig,
    pub(crate) counters: Arc<Counters>,
    fell_back: AtomicBool,
    /// Ids of connections of either protocol, unique in the pool.
    pub(crate) next_shard_id: AtomicU64,
    /// The open-file ceiling on default connection caps.
    ceiling: usize,
}

impl PoolCtx {
    /// `lane`'s connection cap in force on `wire`.
    pub(crate) fn cap(&self, lane: Lane, wire: Wire) -> usize {
        self.cfg.lane(lane).cap(wire, self.ceiling)
    }

    /// What limits `lane` when it has no free slot: its HTTP/2 cap if `live` connections
    /// reached it, else connections not ready yet.
    pub(crate) fn h2_limit(&self, lane: Lane, live: usize) -> LaneLimit {
        let max_connections = self.cap(lane, Wire::H2);
        if live >= max_connections {
            LaneLimit::H2Connections { max_connections }
        } else {
            LaneLimit::NotReady
        }
    }

    pub(crate) fn fell_back(&self) -> bool {
        self.fell_back.load(Ordering::Acquire)
    }

    fn set_fell_back(&self) {
        self.fell_back.store(true, Ordering::Release);
    }

    fn health_settings(&self) -> HealthSettings {
        HealthSettings {
            interval: self.cfg.ping_interval,
            factor: self.cfg.degraded_rtt_factor,
            floor: self.cfg.degraded_rtt_floor,
            stall_timeout: self.cfg.stall_timeout,
            max_age: self.cfg.max_connection_age,
        }
    }
}

/// The pool of one upstream.
pub(crate) struct Pool {
    ctx: Arc<PoolCtx>,
    /// `None` when the protocol can never be HTTP/2 (Http1, or Auto over http://).
    h2: Option<[H2Lane; 2]>,
    h1: [Arc<H1Pool>; 2],
}

impl Pool {
    /// `ceiling`: the open-file ceiling on default connection caps
    /// ([`crate::FdLimit::lane_ceiling`]).
    pub(crate) fn new(
        connector: Arc<Connector>,
        settings: Option<H2Settings>,
        cfg: PoolConfig,
        counters: Arc<Counters>,
        ceiling: usize,
    ) -> Pool {
        let has_h2 = settings.is_some();
        let ctx = Arc::new(PoolCtx {
            connector,
            settings: settings.unwrap_or(H2Settings {
                stream_window: 0,
                connection_window: 0,
                alpn: h2::AlpnPolicy::None,
            }),
            cfg,
            counters,
            fell_back: AtomicBool::new(false),
            next_shard_id: AtomicU64::new(1),
            ceiling,
        });
        let h1 = Lane::ALL.map(|lane| Arc::new(H1Pool::new(ctx.clone(), lane)));
        let h2 = has_h2.then(|| Lane::ALL.map(|lane| H2Lane::new(lane, ctx.clone())));
        Pool { ctx, h2, h1 }
    }

    /// Whether requests go over HTTP/2 (configured for it, and ALPN did not choose
    /// http/1.1).
    pub(crate) fn uses_h2(&self) -> bool {
        self.h2.is_some() && !self.ctx.fell_back()
    }

    pub(crate) fn fell_back(&self) -> bool {
        self.ctx.fell_back()
    }

    pub(crate) fn h1(&self, lane: Lane) -> &Arc<H1Pool> {
        &self.h1[lane.index()]
    }

    /// Sends over HTTP/2 on `lane`, retrying on another shard (at most twice, within
    /// `deadline`) when the server provably did not process the request. `rec` gets every
    /// wait for a slot and the connect this request waited for, if any.
    ///
    /// `req` is borrowed, not taken: under `Auto` it may still go out over HTTP/1.1, and each
    /// attempt builds its own HTTP/2 head from it (see [`h2::exchange`]).
    pub(crate) async fn send_h2(
        &self,
        lane: Lane,
        target: &Target,
        req: &Request<Bytes>,
        deadline: Instant,
        rec: &mut Recorder,
    ) -> Result<Sent, UpstreamError> {
        let Some(lanes) = &self.h2 else {
            return Ok(Sent::Http1(None));
        };
        let h2lane = &lanes[lane.index()];
        let mut avoid = None;
        let mut retries = 0;
        loop {
            let shard_id;
            // The lease is made inside the awaited expression: a local would keep its room
            // in this future beside the exchange that takes it.
            let err = match {
                let waiting = Instant::now();
                let lease = match h2lane.acquire(deadline, avoid).await? {
                    Acquired::Stream(lease) => {
                        rec.waited(waiting, lease.opened);
                        lease
                    }
                    Acquired::Http1(connected) => {
                        rec.waited(waiting, connected.as_ref().map(|c| c.phases));
                        return Ok(Sent::Http1(connected));
                    }
                };
                shard_id = lease.shard().id;
                h2::exchange(lease, target, req, deadline, rec)
            }
            .await
            {
                Ok(sent) => return Ok(sent),
                Err(e) => e,
            };
            let counters = &self.ctx.counters;
            if matches!(err, h2::Failed::NotProcessed(UpstreamError::Refused)) {
                counters.refused_streams.fetch_add(1, Ordering::Relaxed);
            }
            match err {
                h2::Failed::NotProcessed(e)
                    if retries < MAX_TRANSPARENT_RETRIES && Instant::now() < deadline =>
                {
                    retries += 1;
                    counters.transparent_retries.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, retries, "retrying an unprocessed request");
                    avoid = Some(shard_id);
                }
                h2::Failed::NotProcessed(e) | h2::Failed::Processed(e) => return Err(e),
            }
        }
    }

    pub(crate) fn snapshot(&self) -> PoolSnapshot {
        let lanes = Lane::ALL
            .iter()
            .map(|&lane| match &self.h2 {
                Some(l) if !self.ctx.fell_back() => l[lane.index()].snapshot(),
                _ => self.h1(lane).snapshot(),
            })
            .collect();
        PoolSnapshot {
            lanes,
            counters: self.ctx.counters.pool_counters(),
        }
    }
}

// A poisoned lock only means a panic elsewhere; the data behind these locks stays consistent
// (every update is a single assignment or push).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
