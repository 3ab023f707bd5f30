//! The pool's public snapshot: plain data that the lanes and the connections of both
//! protocols fill in, for metrics and the admin API.

use std::time::Duration;

use super::state::ShardState;
use crate::config::{Lane, Protocol};

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
