//! Settings: how to reach an upstream ([`UpstreamConfig`], [`Protocol`]), the classes of
//! traffic ([`Lane`]), one [`LaneConfig`] per lane plus the health and recycling knobs shared
//! by every connection ([`PoolConfig`]). Validated by `Upstream::new` (field names in the
//! errors). Plain data at the bottom of the crate: everything else may name it.

use std::path::PathBuf;
use std::time::Duration;

/// Which HTTP version to speak to the upstream, and how to agree on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Protocol {
    /// HTTP/1.1 over `http://` or `https://` (ALPN offers only `http/1.1`).
    Http1,
    /// HTTP/2 over TLS; the server must select `h2` by ALPN, else requests fail with
    /// [`UpstreamError::Protocol`](crate::UpstreamError::Protocol). Requires `https://`.
    H2,
    /// HTTP/2 with prior knowledge over plain TCP. Requires `http://`.
    H2c,
    /// Over `https://`: offer `h2` and `http/1.1` by ALPN and use what the server picks (the
    /// first answer sticks for the life of the `Upstream`). Over `http://` there is nothing to
    /// negotiate with, so this is HTTP/1.1. The default.
    #[default]
    Auto,
}

/// How to reach one upstream. Checked by [`Upstream::new`](crate::Upstream::new).
#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// Name used in errors and logs.
    pub name: String,
    /// Scheme (`http` or `https`), authority, and the path that request paths are appended
    /// to, e.g. `http://127.0.0.1:9090/v1`. Default `http://127.0.0.1:9090/v1`.
    pub base_url: http::Uri,
    /// Wire protocol. Default [`Protocol::Auto`].
    pub protocol: Protocol,
    /// Extra PEM trust root(s), in addition to the webpki (Mozilla) roots. Default none.
    pub ca_file: Option<PathBuf>,
    /// Bound on DNS + TCP connect + TLS handshake. Default 5 s.
    pub connect_timeout: Duration,
    /// HTTP/2 receive window per stream: how far one unread stream can run ahead of its
    /// consumer. Default 256 KiB.
    pub h2_stream_window: u32,
    /// HTTP/2 receive window for the whole connection. Must be at least
    /// `max_streams_per_connection × h2_stream_window` for every lane, so stalled streams can
    /// never pin the window their neighbours need. Default 25 MiB (100 × 256 KiB).
    pub h2_connection_window: u32,
    /// Lanes, connection and stream caps, health checks, recycling. Default
    /// [`PoolConfig::default`].
    pub pool: PoolConfig,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            name: "default".into(),
            base_url: http::Uri::from_static("http://127.0.0.1:9090/v1"),
            protocol: Protocol::Auto,
            ca_file: None,
            connect_timeout: Duration::from_secs(5),
            h2_stream_window: 256 * 1024,
            h2_connection_window: 100 * 256 * 1024,
            pool: PoolConfig::default(),
        }
    }
}

/// A class of traffic with its own connections, so that a short call never shares a TCP
/// connection (its loss, its windows, its head-of-line blocking) with long streams.
///
/// The caller chooses the lane by putting it in the request's extensions before
/// [`crate::Upstream::send`]; a request without one goes to [`Lane::Short`]:
///
/// ```
/// let mut req = http::Request::post("/chat/completions").body(bytes::Bytes::new()).unwrap();
/// req.extensions_mut().insert(sluice_upstream::Lane::Stream);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Long responses (SSE streams that run for seconds to minutes).
    Stream,
    /// Quick calls: non-streaming requests, probes, model lists. The default.
    #[default]
    Short,
}

impl Lane {
    /// Both lanes.
    pub const ALL: [Lane; 2] = [Lane::Stream, Lane::Short];

    /// `"stream"` or `"short"`, for metrics and config paths.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Stream => "stream",
            Lane::Short => "short",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Lane::Stream => 0,
            Lane::Short => 1,
        }
    }
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    /// connection is replaced up to. Ignored for HTTP/1.1. Must be ≤ the HTTP/2 cap.
    /// Default: 2 for [`Lane::Stream`], 1 for [`Lane::Short`].
    pub min_connections: usize,
    /// Cap on the lane's open connections, counting degraded and draining ones (a bounded
    /// number of sockets, even while old connections drain). Must be ≥ 1 when set.
    ///
    /// Default (`None`) depends on the protocol the lane speaks, because an HTTP/1.1
    /// connection carries one request at a time and an HTTP/2 one carries
    /// `max_streams_per_connection`:
    /// - HTTP/2: [`DEFAULT_H2_MAX_CONNECTIONS`] (64), i.e. 3,200 streams on the stream lane;
    /// - HTTP/1.1 (also under [`crate::Protocol::Auto`] once ALPN chose http/1.1):
    ///   [`DEFAULT_HTTP1_MAX_CONNECTIONS`] (4,096), the same order of concurrent requests.
    ///
    /// Both defaults are lowered to [`crate::FdLimit::lane_ceiling`] when the process's
    /// open-file limit could not back them. A value set here is used as it is.
    pub max_connections: Option<usize>,
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

/// The default cap on a lane's HTTP/2 connections (see [`LaneConfig::max_connections`]).
pub const DEFAULT_H2_MAX_CONNECTIONS: usize = 64;

/// The default cap on a lane's HTTP/1.1 connections (see [`LaneConfig::max_connections`]):
/// one request per connection, so it is sized like an HTTP/2 lane's request capacity
/// (64 connections × 50 to 100 streams), not like its connection count. With 64, a lane of an
/// HTTP/1.1-only server (vLLM, Ollama, llama.cpp, TGI) admitted 64 requests and failed the
/// rest of a burst of 1,000 with 503s after `acquire_timeout`.
pub const DEFAULT_HTTP1_MAX_CONNECTIONS: usize = 4096;

/// The protocol a lane's connections speak, which decides its default connection cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    Http1,
    H2,
}

impl LaneConfig {
    /// The lane's connection cap in force on `wire`: `max_connections` if set, else the
    /// protocol's default lowered to the open-file ceiling (never below `min_connections`
    /// for HTTP/2, so the lane can still keep its minimum).
    pub(crate) fn cap(&self, wire: Wire, ceiling: usize) -> usize {
        match (self.max_connections, wire) {
            (Some(n), _) => n,
            (None, Wire::Http1) => DEFAULT_HTTP1_MAX_CONNECTIONS.min(ceiling),
            (None, Wire::H2) => DEFAULT_H2_MAX_CONNECTIONS
                .min(ceiling)
                .max(self.min_connections),
        }
    }

    /// The defaults for `lane` (see each field).
    pub fn default_for(lane: Lane) -> LaneConfig {
        let (min_connections, max_streams_per_connection) = match lane {
            Lane::Stream => (2, 50),
            Lane::Short => (1, 100),
        };
        LaneConfig {
            min_connections,
            max_connections: None,
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
    /// old; an idle HTTP/1.1 connection this old is closed. Default `None` (no limit).
    pub max_connection_age: Option<Duration>,
    /// Drain a connection once it has carried this many requests (HTTP/1.1: close it after
    /// that response). Must be ≥ 1 when set. Default `None` (no limit).
    pub max_requests_per_connection: Option<u64>,
    /// HTTP/1.1: a kept-alive connection idle this long is closed by us. Must be > 0.
    /// Default 50 s.
    ///
    /// Below the keep-alive timeouts of the common 60 s server and load-balancer defaults
    /// (AWS ALB, HAProxy and Tomcat configurations; nginx's 75 s), with room for timer
    /// granularity, so that with such servers the close is ours and clean, and never races a
    /// request the server is about to drop. Servers with shorter keep-alives (uvicorn and
    /// so vLLM, Node: 5 s) close first; a request that meets such a close on a reused
    /// connection before any response byte is re-sent once on a fresh connection (see
    /// [`crate::PoolCounters::stale_retries`]). Much shorter would reconnect between the
    /// requests of a steady but sparse load for nothing.
    pub idle_timeout: Duration,
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
            idle_timeout: Duration::from_secs(50),
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
            idle_timeout,
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
            if *max_connections == Some(0) {
                return Err((field("max_connections"), "must be at least 1".into()));
            }
            if let Some(max_connections) = (*max_connections).filter(|m| min_connections > m) {
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
        if idle_timeout.is_zero() {
            return Err(("pool.idle_timeout".into(), "must be more than 0".into()));
        }
        if dns_refresh.is_zero() {
            return Err(("pool.dns_refresh".into(), "must be more than 0".into()));
        }
        Ok(())
    }
}
