//! Errors of this crate: one small enum per phase (config, request, body), each with a
//! low-cardinality `metric_label` and, for requests, whether a retry is safe.

use std::net::SocketAddr;
use std::time::Duration;

/// Why an [`UpstreamConfig`](crate::UpstreamConfig) was rejected by
/// [`Upstream::new`](crate::Upstream::new). Each variant names the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamConfigError {
    /// `base_url` is unusable (no host, a scheme other than http/https, a scheme the protocol
    /// cannot run over).
    #[error("upstream `{upstream}`: base_url `{url}`: {reason}")]
    BaseUrl {
        /// The upstream's name.
        upstream: String,
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A numeric field is out of range.
    #[error("upstream `{upstream}`: {field}: {reason}")]
    Field {
        /// The upstream's name.
        upstream: String,
        /// The field at fault.
        field: &'static str,
        /// What is wrong with it, with the numbers.
        reason: String,
    },
    /// A pool setting is out of range; `field` is its path, e.g. `pool.stream.max_connections`.
    #[error("upstream `{upstream}`: {field}: {reason}")]
    Pool {
        /// The upstream's name.
        upstream: String,
        /// The field at fault, as a path below `UpstreamConfig`.
        field: String,
        /// What is wrong with it, with the numbers.
        reason: String,
    },
    /// `ca_file` could not be read or holds no usable certificate.
    #[error("upstream `{upstream}`: ca_file `{path}`: {reason}")]
    CaFile {
        /// The upstream's name.
        upstream: String,
        /// The path as configured.
        path: String,
        /// Why it is unusable.
        reason: String,
    },
}

/// What held a request back when its lane had no free slot: the lane's connection cap, or
/// (HTTP/2 only) connections that were not ready yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneLimit {
    /// HTTP/1.1: each of the lane's `max_connections` connections carried a request (one
    /// request per connection).
    Http1Connections {
        /// The lane's cap in force (configured, or the default).
        max_connections: usize,
    },
    /// HTTP/2: the lane had `max_connections` connections open and none could take another
    /// stream (each at its stream cap, degraded or draining).
    H2Connections {
        /// The lane's cap in force (configured, or the default).
        max_connections: usize,
    },
    /// HTTP/2: the lane was below its cap, but no connection became ready in time (a connect
    /// still in progress, or every connection degraded or draining).
    NotReady,
}

impl LaneLimit {
    /// The lane setting to raise (`"max_connections"`), or `None` when no cap was reached.
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            LaneLimit::Http1Connections { .. } | LaneLimit::H2Connections { .. } => {
                Some("max_connections")
            }
            LaneLimit::NotReady => None,
        }
    }
}

impl std::fmt::Display for LaneLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaneLimit::Http1Connections { max_connections } => write!(
                f,
                "all {max_connections} HTTP/1.1 connections of the lane (its max_connections) \
                 carried a request"
            ),
            LaneLimit::H2Connections { max_connections } => write!(
                f,
                "all {max_connections} HTTP/2 connections of the lane (its max_connections) \
                 were open and none could take another stream"
            ),
            LaneLimit::NotReady => f.write_str(
                "no HTTP/2 connection of the lane was ready (connecting, degraded or draining)",
            ),
        }
    }
}

/// Why [`Upstream::send`](crate::Upstream::send) did not produce response headers.
///
/// `is_retry_safe()` is true only when the upstream cannot have processed the request, so a
/// caller may retry any method (DESIGN invariant 4).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The TCP connection could not be made (refused, unreachable, DNS failure).
    #[error("upstream `{upstream}` refused the connection at {addr}: {source}")]
    Connect {
        /// The upstream's name.
        upstream: String,
        /// The address tried last (`0.0.0.0:port` when name resolution itself failed).
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// TCP connect plus TLS handshake took longer than `connect_timeout`.
    #[error("connecting to the upstream timed out after {0:?} (TCP + TLS)")]
    ConnectTimeout(Duration),
    /// The TLS handshake failed; the message says why (e.g. the certificate is not trusted).
    #[error("{0}")]
    Tls(String),
    /// No connection or stream slot of the lane became free within the lane's
    /// `acquire_timeout` (or the request's deadline, whichever came first). The request was
    /// never sent. It is retry-safe in the "not processed" sense, but the pool is saturated:
    /// a caller should not retry on the same `Upstream` (it would only queue again), but fail
    /// fast or go to another endpoint. [`UpstreamError::config_key`] names the setting to
    /// raise if this happens under normal load.
    #[error(
        "no connection or stream slot in lane `{lane}` became free within {waited:?}: {limit}"
    )]
    PoolAcquireTimeout {
        /// The upstream's name.
        upstream: String,
        /// The lane that was saturated.
        lane: crate::Lane,
        /// What held the request back.
        limit: LaneLimit,
        /// How long the request waited.
        waited: Duration,
    },
    /// The lane's queue of requests waiting for a slot already held `max_pending` requests,
    /// so this one failed at once without waiting. Never sent; as with
    /// [`UpstreamError::PoolAcquireTimeout`], do not retry into the same pool.
    #[error(
        "lane `{lane}` already has {max_pending} requests waiting for a connection \
         (max_pending), failing fast instead of queueing: {limit}"
    )]
    PoolFull {
        /// The upstream's name.
        upstream: String,
        /// The lane that was saturated.
        lane: crate::Lane,
        /// What held the waiting requests back.
        limit: LaneLimit,
        /// The lane's `max_pending`.
        max_pending: usize,
    },
    /// The response headers did not arrive before the request's deadline.
    #[error("the upstream did not answer before the request's deadline")]
    Deadline,
    /// HTTP/2 RST_STREAM(REFUSED_STREAM): the upstream did not process the request.
    #[error("the upstream refused the stream (REFUSED_STREAM); it did not process the request")]
    Refused,
    /// The stream was above the last-stream-id of a graceful GOAWAY: not processed.
    #[error(
        "the upstream is shutting down the connection (GOAWAY); it did not process the request"
    )]
    GoAway,
    /// The upstream reset the stream before the response headers.
    #[error("the upstream reset the stream: {0}")]
    Reset(h2::Reason),
    /// The connection closed before the response headers arrived.
    #[error("the upstream closed the connection before responding")]
    Closed,
    /// The upstream broke the protocol, or negotiated one we cannot use.
    #[error("protocol error talking to the upstream: {0}")]
    Protocol(String),
}

impl UpstreamError {
    /// A short, fixed label for metrics (`upstream_errors_total{kind=...}`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            UpstreamError::Connect { .. } => "connect",
            UpstreamError::ConnectTimeout(_) => "connect_timeout",
            UpstreamError::Tls(_) => "tls",
            UpstreamError::PoolAcquireTimeout { .. } => "pool_acquire_timeout",
            UpstreamError::PoolFull { .. } => "pool_pending_full",
            UpstreamError::Deadline => "deadline",
            UpstreamError::Refused => "refused_stream",
            UpstreamError::GoAway => "goaway",
            UpstreamError::Reset(_) => "reset",
            UpstreamError::Closed => "closed",
            UpstreamError::Protocol(_) => "protocol",
        }
    }

    /// Whether the upstream cannot have processed the request, so any method may be retried
    /// (on another connection). A TLS failure is not retry-safe because retrying cannot fix
    /// it; `Deadline` is not, because the deadline is spent.
    ///
    /// `PoolAcquireTimeout` and `PoolFull` are retry-safe (the request never left this
    /// process), but see [`UpstreamError::is_pool_saturated`]: a retry must not go back into
    /// the same saturated pool.
    ///
    /// `Refused` and `GoAway` are already retried transparently by [`crate::Upstream::send`]
    /// (at most twice, within the deadline); seeing them means those retries were spent.
    pub fn is_retry_safe(&self) -> bool {
        matches!(
            self,
            UpstreamError::Connect { .. }
                | UpstreamError::ConnectTimeout(_)
                | UpstreamError::Refused
                | UpstreamError::GoAway
                | UpstreamError::PoolAcquireTimeout { .. }
                | UpstreamError::PoolFull { .. }
        )
    }

    /// The request failed because this `Upstream`'s pool is saturated (`PoolAcquireTimeout`,
    /// `PoolFull`). A gateway should shed load or try another endpoint, never retry into the
    /// same `Upstream`.
    pub fn is_pool_saturated(&self) -> bool {
        matches!(
            self,
            UpstreamError::PoolAcquireTimeout { .. } | UpstreamError::PoolFull { .. }
        )
    }

    /// For a saturated pool whose lane reached its connection cap, the setting to raise as a
    /// path below the upstream, e.g. `pool.stream.max_connections`; `None` otherwise.
    pub fn config_key(&self) -> Option<String> {
        match self {
            UpstreamError::PoolAcquireTimeout { lane, limit, .. }
            | UpstreamError::PoolFull { lane, limit, .. } => limit
                .setting()
                .map(|setting| format!("pool.{}.{setting}", lane.as_str())),
            _ => None,
        }
    }

    /// A copy of a connect failure, for every request that was waiting on the same
    /// connection attempt (`UpstreamError` is not `Clone` because `io::Error` is not).
    pub(crate) fn duplicate(&self) -> UpstreamError {
        match self {
            UpstreamError::Connect {
                upstream,
                addr,
                source,
            } => UpstreamError::Connect {
                upstream: upstream.clone(),
                addr: *addr,
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            UpstreamError::ConnectTimeout(d) => UpstreamError::ConnectTimeout(*d),
            UpstreamError::Tls(s) => UpstreamError::Tls(s.clone()),
            UpstreamError::PoolAcquireTimeout {
                upstream,
                lane,
                limit,
                waited,
            } => UpstreamError::PoolAcquireTimeout {
                upstream: upstream.clone(),
                lane: *lane,
                limit: *limit,
                waited: *waited,
            },
            UpstreamError::PoolFull {
                upstream,
                lane,
                limit,
                max_pending,
            } => UpstreamError::PoolFull {
                upstream: upstream.clone(),
                lane: *lane,
                limit: *limit,
                max_pending: *max_pending,
            },
            UpstreamError::Deadline => UpstreamError::Deadline,
            UpstreamError::Refused => UpstreamError::Refused,
            UpstreamError::GoAway => UpstreamError::GoAway,
            UpstreamError::Reset(r) => UpstreamError::Reset(*r),
            UpstreamError::Closed => UpstreamError::Closed,
            UpstreamError::Protocol(s) => UpstreamError::Protocol(s.clone()),
        }
    }
}

/// Why reading a [`ResponseBody`](crate::ResponseBody) failed after the headers arrived.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// HTTP/2: the upstream reset the stream mid-body (e.g. INTERNAL_ERROR).
    #[error("the upstream reset the stream mid-response: {0}")]
    Reset(h2::Reason),
    /// The connection closed mid-body (HTTP/2 connection loss, or an HTTP/1.1 read error).
    #[error("the upstream connection closed mid-response")]
    Closed,
    /// HTTP/1.1: the connection ended before the body's declared length or final chunk.
    #[error("the upstream response ended before it was complete")]
    Incomplete,
    /// The upstream sent something that is not valid HTTP.
    #[error("protocol error in the upstream response: {0}")]
    Protocol(String),
}

impl BodyError {
    /// A short, fixed label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            BodyError::Reset(_) => "reset",
            BodyError::Closed => "closed",
            BodyError::Incomplete => "incomplete",
            BodyError::Protocol(_) => "protocol",
        }
    }
}

/// Maps an `h2::Error` seen while waiting for response headers.
///
/// NOTE: h2 reports `is_go_away() && is_remote()` both for streams above a GOAWAY's
/// last-stream-id (not processed) and for every stream still open when a GOAWAY *with an
/// error code* closes the connection (maybe processed). We cannot see the last-stream-id, so
/// only a graceful GOAWAY (NO_ERROR) counts as "not processed": a graceful close lets streams
/// at or below the last id finish, so a stream failed by it must be above that id.
pub(crate) fn from_h2_head(e: &h2::Error) -> UpstreamError {
    if e.is_go_away() && e.is_remote() {
        return match e.reason() {
            Some(h2::Reason::NO_ERROR) => UpstreamError::GoAway,
            Some(r) => UpstreamError::Reset(r),
            None => UpstreamError::Closed,
        };
    }
    if e.is_reset() && e.is_remote() {
        return match e.reason() {
            Some(h2::Reason::REFUSED_STREAM) => UpstreamError::Refused,
            Some(r) => UpstreamError::Reset(r),
            None => UpstreamError::Closed,
        };
    }
    if e.is_io() || e.is_go_away() {
        return UpstreamError::Closed;
    }
    UpstreamError::Protocol(e.to_string())
}

/// Maps an `h2::Error` seen while reading the response body.
pub(crate) fn from_h2_body(e: &h2::Error) -> BodyError {
    if e.is_reset() || (e.is_go_away() && e.reason() != Some(h2::Reason::NO_ERROR)) {
        if let Some(r) = e.reason() {
            return BodyError::Reset(r);
        }
    }
    if e.is_io() || e.is_go_away() {
        return BodyError::Closed;
    }
    BodyError::Protocol(e.to_string())
}
