//! Upstream connections for the Sluice gateway: connectors (TCP, TLS with ALPN, h2c) and a
//! connection pool with lanes ([`Lane`]): per lane, HTTP/2 shards on the `h2` crate (chosen by
//! load, health-checked by PING, drained on GOAWAY) or an HTTP/1.1 keep-alive pool (one
//! request per connection, so its default cap is larger: see
//! [`LaneConfig::max_connections`]; idle connections closed after
//! [`PoolConfig::idle_timeout`]; a request that meets a stale keep-alive close is re-sent once
//! on a fresh connection).
//!
//! Default connection caps never exceed what the process's open-file limit can back
//! ([`fd_limit`], which also raises the soft limit to the hard limit, once); a server logs
//! [`FdLimit`] at startup.
//!
//! Modules, in the order a request meets them:
//!
//! ```text
//! balance/     above Upstream: picks the target (one Upstream each) of a route
//! lib.rs       Upstream::send: the request's lane, then HTTP/2 or HTTP/1.1
//! target.rs    the request's URI and headers for this upstream
//! pool/        per lane, the HTTP/2 shard for the stream (lane.rs, select.rs), or the lane's
//!              HTTP/1.1 pool; resends what the server provably did not process
//! h2/          one HTTP/2 connection (conn.rs, health.rs, tap.rs) and an exchange on it
//! h1/          a lane's HTTP/1.1 keep-alive pool, its connections (conn.rs) and codec
//! connect.rs   DNS (dns.rs), TCP, TLS with ALPN; fd_limit.rs caps the connections
//! body.rs      the response body, read from the h1 or h2 connection as it is polled
//! shard/       what pool/ shares with h1/ and h2/: connection states, snapshots,
//!              counters, the cap warning, the pool context
//! error.rs, timing.rs, home.rs, config.rs: vocabulary every stage uses
//! ```
//!
//! Imports point one way: pool/ and body.rs use h1/ and h2/, which use shard/ and never the
//! pool; shard/ uses connect.rs, which uses error.rs, which uses config.rs. An HTTP/2
//! connection reaches its lane only through `h2::LaneEvents`. `tests/layers/check_cycles.py`
//! (at the workspace root) finds any circle.
//!
//! The gateway calls only [`Upstream::send`] (and reads [`Upstream::stats`] and
//! [`Upstream::pool_snapshot`]). It gives a request whose body is already
//! buffered and a deadline, and gets back response headers and a [`ResponseBody`] that
//! reads from the upstream only as fast as it is polled, and cancels the upstream request
//! when dropped early.
//!
//! Every response carries the request's [`PhaseTimings`] (waiting for a slot, DNS, connect,
//! TLS, written, first byte) in its extensions; [`ResponseBody::timings`] adds the last byte.
//! `base_url`'s host is resolved to every address it has, cached for
//! [`PoolConfig::dns_refresh`]; each lane's new connections take those addresses in turn.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use sluice_upstream::{Protocol, Upstream, UpstreamConfig};
//! let upstream = Upstream::new(UpstreamConfig {
//!     name: "local".into(),
//!     base_url: "http://127.0.0.1:9090/v1".parse()?,
//!     protocol: Protocol::H2c,
//!     ..UpstreamConfig::default()
//! })?;
//! let req = http::Request::post("/chat/completions").body(bytes::Bytes::from("{}"))?;
//! let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
//! let resp = upstream.send(req, deadline).await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod balance;
mod body;
mod config;
mod connect;
mod dns;
mod error;
mod fd_limit;
mod h1;
mod h2;
pub mod home;
mod pool;
mod shard;
mod target;
mod timing;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use tokio::time::Instant;

pub use balance::{
    retry_after, BalanceConfigError, BalancePolicy, Balancer, BalancerConfig, BalancerCounters,
    BalancerSnapshot, Failure as BalanceFailure, Health, HealthCheckConfig, HealthChecker,
    LaneLoad, Outcome, OutlierConfig, Pick, SuccessRateConfig, TargetConfig as BalanceTarget,
    TargetSnapshot,
};
pub use body::ResponseBody;
pub use config::{
    Lane, LaneConfig, PoolConfig, Protocol, UpstreamConfig, DEFAULT_H2_MAX_CONNECTIONS,
    DEFAULT_HTTP1_MAX_CONNECTIONS,
};
pub use error::{BodyError, LaneLimit, UpstreamConfigError, UpstreamError};
pub use fd_limit::{fd_limit, FdLimit};
pub use shard::{ConnectionSnapshot, LaneSnapshot, PoolCounters, PoolSnapshot, ShardState};
pub use timing::PhaseTimings;

use connect::{Alpn, Connector};
use h2::Sent;
use pool::Pool;
use shard::{AlpnPolicy, Counters, H2Settings, InFlight};
use target::Target;
use timing::Recorder;

/// The largest flow-control window HTTP/2 allows (RFC 9113 §6.9.1).
const MAX_WINDOW: u32 = (1 << 31) - 1;

/// A point-in-time view for metrics and the admin API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamStats {
    /// The protocol in use: the configured one, except that `Auto` becomes `H2` or `Http1`
    /// once the first TLS handshake has chosen (and `Http1` over `http://`).
    pub protocol: Protocol,
    /// Connections currently open (both protocols, all lanes).
    pub open_connections: usize,
    /// HTTP/1.1 connections idle in the keep-alive pools (all lanes).
    pub idle_http1_connections: usize,
    /// Requests from `send` until their response body ends or is dropped.
    pub in_flight: usize,
}

/// One upstream: its connections and the way requests reach them.
///
/// Cheap to clone (an `Arc`); clones share connections. Connection tasks are owned by the
/// `Upstream` and by the response bodies still reading from them: they end when the last
/// clone is dropped and every body using that connection has ended or been dropped.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    target: Target,
    mode: Mode,
    pool: Pool,
    counters: Arc<Counters>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Http1,
    H2,
    H2c,
    Auto,
}

// === impl Upstream ===

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.inner.name)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Upstream {
    /// Validates the config and builds the TLS client config. Opens no connection (the
    /// first `send` does); reads `ca_file` if set. Reads the open-file limit through
    /// [`fd_limit`], which raises the process's soft limit to its hard limit the first time.
    ///
    /// # Errors
    /// [`UpstreamConfigError`] naming the field: a `base_url` without host or with a scheme
    /// other than http/https or one the protocol cannot use (`H2` needs https, `H2c` http);
    /// windows of 0 or above 2^31-1; `h2_connection_window < max_streams_per_connection ×
    /// h2_stream_window` for a lane; a `connect_timeout` of 0; an unreadable `ca_file` or one
    /// without certificates; [`UpstreamConfigError::Pool`] for a pool setting out of range
    /// (see [`PoolConfig`]: each field says its range), naming it as e.g.
    /// `pool.stream.max_connections`.
    pub fn new(cfg: UpstreamConfig) -> Result<Upstream, UpstreamConfigError> {
        Upstream::build(cfg, None)
    }

    /// `new`, with `resolver` (if any) instead of DNS: tests give a host several addresses.
    ///
    /// The checks run in the order of [`Upstream::new`]'s errors, so a config with several
    /// faults always reports the same one first.
    fn build(
        cfg: UpstreamConfig,
        resolver: Option<dns::Resolver>,
    ) -> Result<Upstream, UpstreamConfigError> {
        // Destructured so that a new field cannot be silently ignored.
        let UpstreamConfig {
            name,
            base_url,
            protocol,
            ca_file,
            connect_timeout,
            h2_stream_window,
            h2_connection_window,
            pool,
        } = cfg;
        let err = ConfigErr {
            upstream: &name,
            url: &base_url,
        };
        let (tls, authority) = check_base_url(&base_url, &err)?;
        let mode = Mode::of(protocol, tls).map_err(|reason| err.url(reason))?;
        check_limits(
            &err,
            connect_timeout,
            &pool,
            h2_stream_window,
            h2_connection_window,
        )?;
        let connector = connector(
            &err,
            &authority,
            tls.then_some(mode.alpn()),
            ca_file.as_deref(),
            &pool,
            connect_timeout,
        )?;
        let connector = Arc::new(match resolver {
            Some(r) => connector.with_resolver(r),
            None => connector,
        });
        let scheme = if tls { Scheme::HTTPS } else { Scheme::HTTP };
        let target = Target::new(scheme, authority, base_url.path())
            .ok_or_else(|| err.url("its host is not a valid Host header"))?;
        let counters = Arc::new(Counters::default());
        let h2 = mode.h2_settings(h2_stream_window, h2_connection_window);
        let ceiling = fd_limit().lane_ceiling();
        let pool = Pool::new(connector, h2, pool, counters.clone(), ceiling);
        Ok(Upstream {
            inner: Arc::new(Inner {
                name,
                target,
                mode,
                pool,
                counters,
            }),
        })
    }

    /// Sends one request and waits for the response headers.
    ///
    /// The request goes to the [`Lane`] found in `req.extensions()` ([`Lane::Short`] if there
    /// is none), on a connection of that lane only. On HTTP/2, a request the server provably
    /// did not process (REFUSED_STREAM, a stream above a GOAWAY's last-stream-id, a
    /// connection found dead before the request was written) is re-sent on another
    /// connection, at most twice and within `deadline` (see [`PoolCounters`]). On HTTP/1.1, a
    /// request written to a reused keep-alive connection that closed (EOF or reset) before a
    /// single response byte, within a second of the write, is re-sent once on a fresh
    /// connection, within `deadline` ([`PoolCounters::stale_retries`]); never after a
    /// response byte, never from a fresh connection.
    ///
    /// `req.uri()` is a path and query relative to `base_url`'s path (`/chat/completions` →
    /// `/v1/chat/completions`); scheme, authority and `Host` come from `base_url`.
    /// Connection-specific headers (connection, keep-alive, proxy-connection,
    /// transfer-encoding, upgrade, te other than `trailers`) are dropped, and Content-Length
    /// is set from the body.
    ///
    /// The whole future (connect, waiting for a connection or stream slot, writing, waiting
    /// for the response headers) is bounded by `deadline`; waiting for a slot is also bounded
    /// by the lane's `acquire_timeout` and `max_pending`. The returned body is not: the
    /// caller bounds reading it.
    ///
    /// # Errors
    /// See [`UpstreamError`]; [`UpstreamError::is_retry_safe`] tells whether the upstream can
    /// have processed the request.
    ///
    /// # Cancel safety
    /// Dropping the future cancels the request: on HTTP/2 its stream is reset with
    /// RST_STREAM(CANCEL) and the connection stays up; on HTTP/1.1 the connection is closed
    /// and never reused. Dropping it while connecting leaks nothing.
    ///
    /// # Timings
    /// The response's extensions hold this request's [`PhaseTimings`] up to the first byte;
    /// [`ResponseBody::timings`] adds the last byte once the body ended.
    pub fn send(
        &self,
        req: http::Request<Bytes>,
        deadline: Instant,
    ) -> impl Future<Output = Result<http::Response<ResponseBody>, UpstreamError>> + Send + '_ {
        let lane = req.extensions().get::<Lane>().copied().unwrap_or_default();
        self.send_on(lane, req, deadline)
    }

    /// [`Upstream::send`] on `lane`, whatever `req.extensions()` hold: a caller that knows
    /// its lane inserts no extension (a map allocated for each request, and held with it
    /// while it waits for its upstream).
    ///
    /// # Errors
    /// As [`Upstream::send`].
    ///
    /// # Cancel safety
    /// As [`Upstream::send`].
    #[allow(
        clippy::manual_async_fn,
        reason = "an `async fn` keeps a second copy of its arguments"
    )]
    pub fn send_on(
        &self,
        lane: Lane,
        req: http::Request<Bytes>,
        deadline: Instant,
    ) -> impl Future<Output = Result<http::Response<ResponseBody>, UpstreamError>> + Send + '_ {
        // An `async` block, not an `async fn`: this future is what a request waiting for its
        // upstream holds, and an `async fn` would keep a second copy of `req` in it.
        async move {
            let inner = &self.inner;
            let mut rec = Recorder::new();
            let in_flight = InFlight::new(&inner.counters);
            // No binding of the answer across an await: its place would be held beside the
            // exchange while it waits.
            let preconnected = if inner.pool.uses_h2() {
                match inner
                    .pool
                    .send_h2(lane, &inner.target, &req, deadline, &mut rec)
                    .await
                {
                    Err(e) => return Err(e),
                    Ok(Sent::Response(resp, guard, lease)) => {
                        let (mut parts, recv) = resp.into_parts();
                        let timings = rec.first_byte();
                        parts.extensions.insert(timings.0);
                        let body = ResponseBody::h2(recv, guard, lease, in_flight, timings);
                        return Ok(http::Response::from_parts(parts, body));
                    }
                    // ALPN chose http/1.1: on to HTTP/1.1, on this connection if there is one.
                    Ok(Sent::Http1(io)) => io,
                }
            } else {
                None
            };
            // Boxed: a future is as large as its largest state, and the HTTP/1.1 exchange
            // (2.7 KB) is larger than the HTTP/2 one; inline, every request waiting on an
            // HTTP/2 upstream carried its room (10,000 streams opening at once: 17 MB) for
            // nothing.
            Box::pin(self.send_h1(lane, req, deadline, preconnected, in_flight, rec)).await
        }
    }

    async fn send_h1(
        &self,
        lane: Lane,
        mut req: http::Request<Bytes>,
        deadline: Instant,
        preconnected: Option<connect::Connected>,
        in_flight: InFlight,
        mut rec: Recorder,
    ) -> Result<http::Response<ResponseBody>, UpstreamError> {
        self.inner.target.for_h1(&mut req)?;
        let (mut parts, body) = self
            .inner
            .pool
            .h1(lane)
            .send(&req, deadline, preconnected, &mut rec)
            .await?;
        let timings = rec.first_byte();
        parts.extensions.insert(timings.0);
        let body = ResponseBody::h1(body, in_flight, timings);
        Ok(http::Response::from_parts(parts, body))
    }

    /// A snapshot for metrics and the admin API. Cheap: atomics and one short lock.
    pub fn stats(&self) -> UpstreamStats {
        let inner = &self.inner;
        let protocol = match inner.mode {
            Mode::Http1 => Protocol::Http1,
            Mode::H2 => Protocol::H2,
            Mode::H2c => Protocol::H2c,
            Mode::Auto => match &inner.pool {
                p if p.fell_back() => Protocol::Http1,
                _ if inner.counters.connections_ever() > 0 => Protocol::H2,
                _ => Protocol::Auto,
            },
        };
        UpstreamStats {
            protocol,
            open_connections: inner.counters.open_connections(),
            idle_http1_connections: Lane::ALL
                .iter()
                .map(|l| inner.pool.h1(*l).idle_count())
                .sum(),
            in_flight: inner.counters.in_flight(),
        }
    }

    /// Per lane: connections by state, in-flight streams, waiting requests, the connection
    /// cap in force, and every connection (HTTP/2 or HTTP/1.1, whichever the lane speaks);
    /// plus the pool's counters. Takes each lane's lock briefly.
    pub fn pool_snapshot(&self) -> PoolSnapshot {
        self.inner.pool.snapshot()
    }
}

// === Upstream::build's steps ===

/// Names the upstream and its `base_url` in the errors of its config.
struct ConfigErr<'a> {
    upstream: &'a str,
    url: &'a http::Uri,
}

impl ConfigErr<'_> {
    fn url(&self, reason: &'static str) -> UpstreamConfigError {
        UpstreamConfigError::BaseUrl {
            upstream: self.upstream.to_owned(),
            url: self.url.to_string(),
            reason,
        }
    }

    fn field(&self, field: &'static str, reason: String) -> UpstreamConfigError {
        UpstreamConfigError::Field {
            upstream: self.upstream.to_owned(),
            field,
            reason,
        }
    }

    fn ca_file(&self, path: &Path, reason: String) -> UpstreamConfigError {
        UpstreamConfigError::CaFile {
            upstream: self.upstream.to_owned(),
            path: path.display().to_string(),
            reason,
        }
    }
}

/// Whether `base_url` is TLS, and its authority: the scheme must be http or https, with a
/// host, without credentials or a query.
fn check_base_url(
    base_url: &http::Uri,
    err: &ConfigErr<'_>,
) -> Result<(bool, Authority), UpstreamConfigError> {
    let tls = match base_url.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(err.url("the scheme must be http or https")),
    };
    let authority = base_url
        .authority()
        .cloned()
        .ok_or_else(|| err.url("it has no host"))?;
    if authority.as_str().contains('@') {
        return Err(err.url("credentials in the URL are not supported"));
    }
    if base_url.query().is_some() {
        return Err(err.url("it must not have a query"));
    }
    Ok((tls, authority))
}

/// The numbers: `connect_timeout`, the pool's settings, and the HTTP/2 windows, each in range
/// and the connection window wide enough for every stream a connection may carry.
fn check_limits(
    err: &ConfigErr<'_>,
    connect_timeout: Duration,
    pool: &PoolConfig,
    h2_stream_window: u32,
    h2_connection_window: u32,
) -> Result<(), UpstreamConfigError> {
    if connect_timeout.is_zero() {
        return Err(err.field("connect_timeout", "must be more than 0".into()));
    }
    pool.validate()
        .map_err(|(field, reason)| UpstreamConfigError::Pool {
            upstream: err.upstream.to_owned(),
            field,
            reason,
        })?;
    let h2_max_streams = Lane::ALL
        .iter()
        .map(|l| pool.lane(*l).max_streams_per_connection)
        .max()
        .unwrap_or(1);
    for (field, w) in [
        ("h2_stream_window", h2_stream_window),
        ("h2_connection_window", h2_connection_window),
    ] {
        if w == 0 || w > MAX_WINDOW {
            return Err(err.field(field, format!("{w} is not in 1..=2^31-1")));
        }
    }
    let needed = u64::from(h2_max_streams) * u64::from(h2_stream_window);
    if u64::from(h2_connection_window) < needed {
        return Err(err.field(
            "h2_connection_window",
            format!(
                "{h2_connection_window} is below max_streams_per_connection × \
                 h2_stream_window = {h2_max_streams} × {h2_stream_window} = {needed}; a \
                 few stalled streams could then stall every stream on the connection"
            ),
        ));
    }
    Ok(())
}

/// The connector to `authority`: TCP, then TLS offering `tls`'s ALPN when set (trusting `ca_file`
/// besides the webpki roots).
fn connector(
    err: &ConfigErr<'_>,
    authority: &Authority,
    tls: Option<Alpn>,
    ca_file: Option<&Path>,
    pool: &PoolConfig,
    connect_timeout: Duration,
) -> Result<Connector, UpstreamConfigError> {
    // Read even over http://, so that a wrong path is reported whatever the scheme.
    let roots = match ca_file {
        None => Vec::new(),
        Some(path) => connect::read_ca_file(path).map_err(|reason| err.ca_file(path, reason))?,
    };
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority
        .port_u16()
        .unwrap_or(if tls.is_some() { 443 } else { 80 });
    Connector::new(
        err.upstream,
        host,
        port,
        pool.dns_refresh,
        connect_timeout,
        tls.map(|alpn| (alpn, roots.as_slice())),
    )
    .map_err(|reason| match ca_file {
        Some(path) if reason.contains("ca_file") => err.ca_file(path, reason),
        _ => err.field("base_url", reason),
    })
}

// === impl Mode ===

impl Mode {
    /// The mode `protocol` takes over `base_url`'s scheme, or why the two do not go together.
    fn of(protocol: Protocol, tls: bool) -> Result<Mode, &'static str> {
        match (protocol, tls) {
            (Protocol::H2, false) => Err("protocol H2 needs https (use H2c)"),
            (Protocol::H2c, true) => Err("protocol H2c needs http (use H2)"),
            (Protocol::Http1, _) => Ok(Mode::Http1),
            (Protocol::H2, true) => Ok(Mode::H2),
            (Protocol::H2c, false) => Ok(Mode::H2c),
            (Protocol::Auto, true) => Ok(Mode::Auto),
            (Protocol::Auto, false) => Ok(Mode::Http1),
        }
    }

    /// What TLS offers by ALPN in this mode.
    fn alpn(self) -> Alpn {
        match self {
            Mode::Http1 => Alpn::Http1,
            Mode::H2 => Alpn::H2,
            Mode::H2c => Alpn::H2, // unused: no TLS
            Mode::Auto => Alpn::H2OrHttp1,
        }
    }

    /// The HTTP/2 settings, or `None` when this mode never speaks HTTP/2.
    fn h2_settings(self, stream_window: u32, connection_window: u32) -> Option<H2Settings> {
        let alpn = match self {
            Mode::Http1 => return None,
            Mode::H2c => AlpnPolicy::None,
            Mode::Auto => AlpnPolicy::FallBack,
            Mode::H2 => AlpnPolicy::Required,
        };
        Some(H2Settings {
            stream_window,
            connection_window,
            alpn,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_mock::{MockConfig, MockServer};

    /// An upstream whose host resolves to both mocks (different ports on 127.0.0.1).
    fn spread_over(mocks: &[&MockServer], protocol: Protocol) -> Upstream {
        let mut cfg = UpstreamConfig {
            base_url: "http://upstream.invalid/v1".parse().unwrap(),
            protocol,
            ..UpstreamConfig::default()
        };
        for lane in [&mut cfg.pool.short, &mut cfg.pool.stream] {
            lane.min_connections = 1;
            lane.max_streams_per_connection = 1;
        }
        let addrs = mocks.iter().map(|m| m.addr()).collect();
        Upstream::build(cfg, Some(dns::Resolver::fixed(addrs))).unwrap()
    }

    fn slow_request() -> http::Request<Bytes> {
        // Long enough that both requests are in flight at once, so each needs a connection.
        http::Request::post("/chat/completions")
            .header("x-mock", "tokens=3, interval_ms=100")
            .body(Bytes::from(r#"{"model":"m","stream":true}"#))
            .unwrap()
    }

    async fn connections_per_mock(protocol: Protocol) -> [u64; 2] {
        let a = MockServer::start(MockConfig::default()).await.unwrap();
        let b = MockServer::start(MockConfig::default()).await.unwrap();
        let up = spread_over(&[&a, &b], protocol);
        let deadline = Instant::now() + Duration::from_secs(5);
        let (r1, r2) = tokio::join!(
            up.send(slow_request(), deadline),
            up.send(slow_request(), deadline)
        );
        let (r1, r2) = (r1.unwrap(), r2.unwrap());
        assert!(r1.status().is_success() && r2.status().is_success());
        [&a, &b].map(|m| m.stats().snapshot().totals.connections)
    }

    #[tokio::test]
    async fn http1_connections_of_a_lane_spread_over_the_hosts_addresses() {
        assert_eq!(connections_per_mock(Protocol::Http1).await, [1, 1]);
    }

    #[tokio::test]
    async fn h2_shards_of_a_lane_spread_over_the_hosts_addresses() {
        // Each address gets a connection; the lane may also have opened one more ahead of
        // demand (it was full), which lands on the next address in turn.
        let [a, b] = connections_per_mock(Protocol::H2c).await;
        assert!(a >= 1 && b >= 1 && a + b <= 3, "{a} + {b}");
    }
}
