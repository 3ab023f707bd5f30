//! The load client: our own upstream pool pointed at the target, so a run holds real
//! connections the way the gateway does.

use std::time::Duration;

use sluice_upstream::{LaneConfig, PoolConfig, Protocol, Upstream, UpstreamConfig};

use crate::BenchError;

/// HTTP/2 receive window per stream: enough for a full-speed stream on loopback without letting
/// thousands of streams reserve gigabytes.
const STREAM_WINDOW: u32 = 64 * 1024;

/// The largest flow-control window HTTP/2 allows.
const MAX_WINDOW: u64 = (1 << 31) - 1;

/// A client for the URL's origin whose both lanes use `lane` (the load client has one kind of
/// traffic per client; scenarios that need two kinds build two clients).
pub(crate) fn build(
    url: &http::Uri,
    protocol: Protocol,
    lane: LaneConfig,
) -> Result<Upstream, BenchError> {
    let (Some(scheme), Some(authority)) = (url.scheme_str(), url.authority()) else {
        return Err(BenchError::Url(format!("{url} needs a scheme and a host")));
    };
    // The connection window must cover every stream's window (the pool checks it), so one
    // stalled stream can never starve its neighbours.
    let connection_window =
        (u64::from(lane.max_streams_per_connection) * u64::from(STREAM_WINDOW)).min(MAX_WINDOW);
    Upstream::new(UpstreamConfig {
        name: "bench-target".into(),
        base_url: format!("{scheme}://{authority}")
            .parse()
            .map_err(|e| BenchError::Url(format!("{url}: {e}")))?,
        protocol,
        h2_stream_window: STREAM_WINDOW,
        h2_connection_window: connection_window as u32,
        pool: PoolConfig {
            short: lane.clone(),
            stream: lane,
            ..PoolConfig::default()
        },
        ..UpstreamConfig::default()
    })
    .map_err(|e| BenchError::Client(e.to_string()))
}

/// A lane of `connections` connections (HTTP/2: kept open, `streams` each; HTTP/1.1: the
/// keep-alive pool's cap) where up to `pending` requests may wait `acquire_timeout` for a slot.
pub(crate) fn lane(
    connections: usize,
    streams: u32,
    pending: usize,
    acquire_timeout: Duration,
) -> LaneConfig {
    let connections = connections.max(1);
    LaneConfig {
        min_connections: connections,
        max_connections: Some(connections),
        max_streams_per_connection: streams.max(1),
        max_pending: pending.max(1),
        acquire_timeout: acquire_timeout.max(Duration::from_millis(1)),
    }
}

/// The request path (and query) of `url`.
pub(crate) fn path_of(url: &http::Uri) -> String {
    url.path_and_query().map_or("/", |p| p.as_str()).to_string()
}
