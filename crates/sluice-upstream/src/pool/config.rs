//! Pool settings: one [`LaneConfig`] per lane plus the health and recycling knobs shared by
//! every connection, validated by `Upstream::new` (field names in the errors).

use std::time::Duration;

use crate::Lane;

/// Settings of one lane's connections.
///
/// HTTP/2: a lane holds between `min_connections` and `max_connections` connections
/// ("shards"), each carrying at most `max_streams_per_connection` streams (and never more
/// than the server's SETTINGS_MAX_CONCURRENT_STREAMS). HTTP/1.1: a lane is a keep-alive pool
/// of at most `max_connections` connections, one request each.
#[derive(Clone, Debug, PartialEq)]
pub struct LaneConfig {
    /// HTTP/2 connections the lane keeps ready. Opened lazily: the first request on the lane
    /// opens the first one, and each later acquire that finds fewer than this many ready
    /// connections opens one more in the background (one at a time). Also what a degraded
    /// connection is replaced up to. Ignored for HTTP/1.1. Must be ≤ `max_connections`.
    /// Default: 2 for [`Lane::Stream`], 1 for [`Lane::Short`].
    pub min_connections: usize,
    /// Cap on the lane's open connections, counting degraded and draining ones (a bounded
    /// number of sockets, even while old connections drain). Must be ≥ 1. Default 64.
    pub max_connections: usize,
    /// HTTP/2: our cap on concurrent streams per connection; the server's
    /// SETTINGS_MAX_CONCURRENT_STREAMS, re-read on every acquire, applies if lower. Must be
    /// ≥ 1. Default: 50 for [`Lane::Stream`] (long streams share a connection's loss and
    /// window), 100 for [`Lane::Short`].
    pub max_streams_per_connection: u32,
    /// Requests allowed to wait for a slot when every connection is at its cap and no more
    /// may be opened. One more fails at once with [`crate::UpstreamError::PoolFull`].
    /// Default 1024 (Envoy's `max_pending_requests`).
    pub max_pending: usize,
    /// Longest a request waits for a slot (the request's deadline also applies, whichever is
    /// first); then [`crate::UpstreamError::PoolAcquireTimeout`]. Must be > 0. Default 5 s.
    pub acquire_timeout: Duration,
}

impl LaneConfig {
    /// The defaults for `lane` (see each field).
    pub fn default_for(lane: Lane) -> LaneConfig {
        let (min_connections, max_streams_per_connection) = match lane {
            Lane::Stream => (2, 50),
            Lane::Short => (1, 100),
        };
        LaneConfig {
            min_connections,
            max_connections: 64,
            max_streams_per_connection,
            max_pending: 1024,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

/// The upstream's connection pool: per-lane settings, health checks and recycling.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolConfig {
    /// Lane [`Lane::Stream`] (long SSE responses). Default [`LaneConfig::default_for`].
    pub stream: LaneConfig,
    /// Lane [`Lane::Short`] (quick calls, probes). Default [`LaneConfig::default_for`].
    pub short: LaneConfig,
    /// HTTP/2: a PING per connection this often, for its RTT. A PING unanswered for
    /// max(2 × this, 1 s) closes the connection (its streams fail). Must be > 0.
    /// Default 5 s.
    pub ping_interval: Duration,
    /// HTTP/2: a connection whose RTT (EWMA) exceeds this many times the lane's best RTT,
    /// and also exceeds `degraded_rtt_floor`, is degraded: no new streams, its open streams
    /// continue, a replacement is opened (below `max_connections`); it recovers after 3 good
    /// pings in a row. Must be ≥ 1.0. Default 3.0.
    pub degraded_rtt_factor: f64,
    /// HTTP/2: RTTs at or below this never degrade a connection, whatever the factor says
    /// (loopback and LAN RTTs jitter by large factors). Default 50 ms.
    pub degraded_rtt_floor: Duration,
    /// HTTP/2: a connection with open streams that received no DATA for this long is
    /// degraded (same rules as a high RTT). Must be > 0. Default 30 s.
    pub stall_timeout: Duration,
    /// Drain a connection (no new streams; close when its last stream ends) once it is this
    /// old. Default `None` (no limit).
    pub max_connection_age: Option<Duration>,
    /// Drain a connection once it has carried this many requests. Must be ≥ 1 when set.
    /// Default `None` (no limit).
    pub max_requests_per_connection: Option<u64>,
    /// How long the addresses of `base_url`'s host are used before it is resolved again.
    /// Every new connection (both protocols, each lane) starts at the next of those
    /// addresses, round robin, trying the others if it refuses. Resolution is lazy: the
    /// first connect after expiry resolves. Must be > 0. Default 30 s.
    pub dns_refresh: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            stream: LaneConfig::default_for(Lane::Stream),
            short: LaneConfig::default_for(Lane::Short),
            ping_interval: Duration::from_secs(5),
            degraded_rtt_factor: 3.0,
            degraded_rtt_floor: Duration::from_millis(50),
            stall_timeout: Duration::from_secs(30),
            max_connection_age: None,
            max_requests_per_connection: None,
            dns_refresh: Duration::from_secs(30),
        }
    }
}

impl PoolConfig {
    /// The settings of `lane`.
    pub fn lane(&self, lane: Lane) -> &LaneConfig {
        match lane {
            Lane::Stream => &self.stream,
            Lane::Short => &self.short,
        }
    }

    /// Checks every field; `Err((field, reason))` names the first one at fault, e.g.
    /// `("pool.stream.max_connections", "must be at least 1")`.
    pub(crate) fn validate(&self) -> Result<(), (String, String)> {
        // Destructured so that a new field cannot be silently left unchecked.
        let PoolConfig {
            stream,
            short,
            ping_interval,
            degraded_rtt_factor,
            degraded_rtt_floor: _,
            stall_timeout,
            max_connection_age,
            max_requests_per_connection,
            dns_refresh,
        } = self;
        for (name, lane) in [("stream", stream), ("short", short)] {
            let LaneConfig {
                min_connections,
                max_connections,
                max_streams_per_connection,
                max_pending: _,
                acquire_timeout,
            } = lane;
            let field = |f: &str| format!("pool.{name}.{f}");
            if *max_connections == 0 {
                return Err((field("max_connections"), "must be at least 1".into()));
            }
            if min_connections > max_connections {
                return Err((
                    field("min_connections"),
                    format!("{min_connections} is above max_connections ({max_connections})"),
                ));
            }
            if *max_streams_per_connection == 0 {
                return Err((
                    field("max_streams_per_connection"),
                    "must be at least 1".into(),
                ));
            }
            if acquire_timeout.is_zero() {
                return Err((field("acquire_timeout"), "must be more than 0".into()));
            }
        }
        if ping_interval.is_zero() {
            return Err(("pool.ping_interval".into(), "must be more than 0".into()));
        }
        if !(degraded_rtt_factor.is_finite() && *degraded_rtt_factor >= 1.0) {
            return Err((
                "pool.degraded_rtt_factor".into(),
                format!("{degraded_rtt_factor} must be a number ≥ 1.0"),
            ));
        }
        if stall_timeout.is_zero() {
            return Err(("pool.stall_timeout".into(), "must be more than 0".into()));
        }
        if max_connection_age.is_some_and(|a| a.is_zero()) {
            return Err((
                "pool.max_connection_age".into(),
                "must be more than 0 (use None for no limit)".into(),
            ));
        }
        if *max_requests_per_connection == Some(0) {
            return Err((
                "pool.max_requests_per_connection".into(),
                "must be at least 1 (use None for no limit)".into(),
            ));
        }
        if dns_refresh.is_zero() {
            return Err(("pool.dns_refresh".into(), "must be more than 0".into()));
        }
        Ok(())
    }
}
