//! Every way a request can fail, mapped to a status and the client API's error format, here and
//! nowhere else.

use sluice_telemetry::EndReason;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use sluice_upstream::{BodyError, UpstreamError};

use sluice_providers::Family;

/// Why a request could not be served before its response started.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// No such endpoint.
    #[error("unknown path {0}; Sluice serves /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/messages and /v1/models")]
    NotFound(String),
    /// Known endpoint, wrong method.
    #[error("{path} takes {expected}")]
    MethodNotAllowed {
        /// The path.
        path: String,
        /// The method it takes.
        expected: http::Method,
    },
    /// The request body is over `max_request_body`.
    #[error("the request body is larger than this gateway accepts ({limit} bytes)")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// The client's body could not be read.
    #[error("could not read the request body: {0}")]
    BodyRead(String),
    /// The body is not JSON (or not an object).
    #[error("the request body is not valid JSON: {0}")]
    BadJson(String),
    /// A field the gateway reads has the wrong type.
    #[error("`{field}` must be {expected}, not {found}")]
    BadField {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
        /// What it was.
        found: &'static str,
    },
    /// The body has no `model`.
    #[error("the request body has no string `model`")]
    MissingModel,
    /// No route matches the model.
    #[error("the model `{0}` does not exist or is not routed by this gateway")]
    UnknownModel(String),
    /// The upstream could not be reached or did not answer in time.
    #[error("upstream `{upstream}`: {source}")]
    Upstream {
        /// Upstream name.
        upstream: String,
        /// What went wrong.
        source: UpstreamError,
    },
    /// The response headers did not arrive within `first_byte`.
    #[error("upstream `{upstream}` sent no response within the first-byte timeout ({timeout:?})")]
    FirstByteTimeout {
        /// Upstream name.
        upstream: String,
        /// The timeout that fired.
        timeout: Duration,
    },
    /// The whole exchange exceeded `total` before the response started.
    #[error("upstream `{upstream}` did not finish within the total timeout ({timeout:?})")]
    TotalTimeout {
        /// Upstream name.
        upstream: String,
        /// The timeout that fired.
        timeout: Duration,
    },
    /// A non-streaming response was over `max_response_body`.
    #[error(
        "upstream `{upstream}` sent a response larger than this gateway relays ({limit} bytes)"
    )]
    ResponseTooLarge {
        /// Upstream name.
        upstream: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// A non-streaming response broke off.
    #[error("upstream `{upstream}` broke off its response: {source}")]
    UpstreamBody {
        /// Upstream name.
        upstream: String,
        /// How.
        source: BodyError,
    },
    /// A stream answered but failed before its first content, and no other attempt was
    /// possible.
    #[error("upstream `{upstream}` failed before sending any content: {detail}")]
    StreamFailed {
        /// Upstream name.
        upstream: String,
        /// What happened.
        detail: String,
    },
    /// A stream sent no content within `first_token`, and no other attempt was possible.
    #[error("upstream `{upstream}` sent no content within the first-token timeout ({timeout:?})")]
    FirstTokenTimeout {
        /// Upstream name.
        upstream: String,
        /// The timeout that fired.
        timeout: Duration,
    },
    /// A stream fell silent for `idle` before its first content, and no other attempt was
    /// possible.
    #[error("upstream `{upstream}` sent no event for {timeout:?} (idle timeout)")]
    IdleTimeout {
        /// Upstream name.
        upstream: String,
        /// The timeout that fired.
        timeout: Duration,
    },
    /// Retrying would exceed the upstream's retry budget: failing fast instead.
    #[error("upstream `{upstream}` is failing and its retry budget is spent; not retrying")]
    RetryBudgetExhausted {
        /// Upstream name.
        upstream: String,
    },
    /// The request cannot be sent to the target's provider (an unsupported parameter or
    /// operation, a malformed body).
    #[error("{0}")]
    Translate(sluice_providers::request::RequestError),
    /// A successful upstream response could not be read for translation.
    #[error("upstream `{upstream}` answered with a response that cannot be translated: {source}")]
    ResponseMalformed {
        /// Upstream name.
        upstream: String,
        /// What was wrong.
        source: sluice_providers::response::ResponseError,
    },
    /// The gateway has no credential to send to a cloud upstream: its access token could not
    /// be obtained (the token endpoint refused the service account or client, or cannot be
    /// reached), or a request could not be signed. The detail names no secret.
    #[error("upstream `{upstream}`: no usable credentials: {detail}")]
    UpstreamCredentials {
        /// Upstream name.
        upstream: String,
        /// What went wrong (the token endpoint's error and description, or the signer's).
        detail: String,
    },
    /// The gateway is shutting down.
    #[error("the gateway is shutting down")]
    ShuttingDown,
    /// The client did not send its request body in time (`server.client_timeouts.body_idle`
    /// between two pieces, `body` in all).
    #[error("the request body did not arrive in time: {what} ({timeout:?})")]
    ClientBodyTimeout {
        /// The timeout that fired.
        timeout: Duration,
        /// Which one, in words.
        what: &'static str,
    },
    /// The gateway holds as many buffered bodies as `server.memory_budget` allows.
    #[error(
        "the gateway is holding as many request and response bodies as its memory budget \
         ({limit} bytes) allows; retry shortly"
    )]
    OverBudget {
        /// The budget in bytes.
        limit: u64,
    },
    /// This client address cancelled too many requests right after starting them
    /// (`server.client_resets`); its new requests are refused for a while.
    #[error(
        "too many requests from this client were cancelled right after they started; new \
         requests are refused for {} s",
        crate::headers::retry_after_secs(*retry_after)
    )]
    TooManyCancels {
        /// How much longer the block lasts.
        retry_after: Duration,
    },
    /// The connection starts requests faster than `server.max_connection_request_rate`.
    #[error(
        "this connection starts more than {limit} requests a second \
         (server.max_connection_request_rate); slow down or open another connection"
    )]
    RequestRate {
        /// Requests per second per connection.
        limit: u32,
    },
    /// An HTTP/1.1 request without exactly one `Host` header (RFC 9112 §3.2).
    #[error("{0}")]
    BadHost(&'static str),
    /// A request head that could not be parsed (answered at the connection level).
    #[error("{detail}")]
    MalformedRequest {
        /// 400, 414 or 431.
        status: StatusCode,
        /// What is wrong.
        detail: &'static str,
    },
    /// Refused by the admit stage: a key, a limit, a budget or an idempotency record (401,
    /// 403, 429, 409, 422, 400), or the state store failed (503).
    #[error("{0}")]
    Keys(Box<crate::admit::KeyError>),
    /// Refused by a guardrail (`[[guardrail]]`): before any upstream attempt, or an answer
    /// that did not pass.
    #[error("refused by guardrail `{guardrail}`: {reason}")]
    ContentBlocked {
        /// The guardrail's name.
        guardrail: String,
        /// Why (the rule's label, or the checker's reason).
        reason: String,
    },
    /// `x-sluice-cache-ttl` is not a duration.
    #[error(transparent)]
    CacheTtl(#[from] sluice_state::InvalidCacheTtl),
    /// A resume (`Last-Event-ID`, a response id) names no stream this key may read: never
    /// made, made for another key, or malformed (the same answer, so ids cannot be probed).
    #[error("no resumable stream `{0}` for this key; start a new request without `Last-Event-ID`")]
    StreamNotFound(String),
    /// A resume names a stream whose log is gone (expired after its `keep`), or an event
    /// older than the log still holds.
    #[error("{0}; start a new request without `Last-Event-ID`")]
    StreamGone(String),
    /// A background response needs a resumable stream, and the caps leave no room.
    #[error("the gateway holds as many resumable streams as it may (`server.resumable_streams`, `server.resumable_log_bytes`); retry later, or send the request without `background`")]
    BackgroundFull,
}

impl GatewayError {
    /// The end reason of a request that failed with this before its response started.
    pub fn end_reason(&self) -> EndReason {
        use GatewayError as E;
        match self {
            E::NotFound(_)
            | E::MethodNotAllowed { .. }
            | E::BodyRead(_)
            | E::BadJson(_)
            | E::BadField { .. }
            | E::MissingModel
            | E::UnknownModel(_)
            | E::Translate(_) => EndReason::BadRequest,
            E::BodyTooLarge { .. } => EndReason::BodyTooLarge,
            E::FirstByteTimeout { .. } => EndReason::FirstByteTimeout,
            E::FirstTokenTimeout { .. } => EndReason::FirstTokenTimeout,
            E::TotalTimeout { .. } => EndReason::TotalTimeout,
            E::IdleTimeout { .. } => EndReason::IdleTimeout,
            E::ResponseTooLarge { .. } => EndReason::ResponseTooLarge,
            E::UpstreamBody { .. } => EndReason::UpstreamReset,
            E::ShuttingDown => EndReason::Shutdown,
            E::Keys(k) => k.end_reason(),
            E::ContentBlocked { .. } => EndReason::ContentBlocked,
            E::Upstream { .. }
            | E::StreamFailed { .. }
            | E::RetryBudgetExhausted { .. }
            | E::UpstreamCredentials { .. }
            | E::ResponseMalformed { .. } => EndReason::UpstreamError,
            E::ClientBodyTimeout { .. } => EndReason::ClientTimeout,
            E::OverBudget { .. } => EndReason::OverBudget,
            E::TooManyCancels { .. }
            | E::RequestRate { .. }
            | E::BadHost(_)
            | E::MalformedRequest { .. }
            | E::CacheTtl(_)
            | E::StreamNotFound(_)
            | E::StreamGone(_) => EndReason::BadRequest,
            E::BackgroundFull => EndReason::OverBudget,
        }
    }

    /// The status the client gets.
    pub fn status(&self) -> StatusCode {
        use GatewayError::*;
        match self {
            NotFound(_) | UnknownModel(_) | StreamNotFound(_) => StatusCode::NOT_FOUND,
            StreamGone(_) => StatusCode::GONE,
            BackgroundFull => StatusCode::SERVICE_UNAVAILABLE,
            MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRead(_) | BadJson(_) | BadField { .. } | MissingModel => StatusCode::BAD_REQUEST,
            Translate(e) => e.status(),
            ResponseMalformed { .. } => StatusCode::BAD_GATEWAY,
            Upstream { source, .. } => match source {
                UpstreamError::ConnectTimeout(_) | UpstreamError::Deadline => {
                    StatusCode::GATEWAY_TIMEOUT
                }
                UpstreamError::PoolAcquireTimeout { .. } | UpstreamError::PoolFull { .. } => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                _ => StatusCode::BAD_GATEWAY,
            },
            FirstByteTimeout { .. }
            | TotalTimeout { .. }
            | FirstTokenTimeout { .. }
            | IdleTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ResponseTooLarge { .. } | UpstreamBody { .. } | StreamFailed { .. } => {
                StatusCode::BAD_GATEWAY
            }
            RetryBudgetExhausted { .. } | UpstreamCredentials { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ClientBodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            OverBudget { .. } => StatusCode::SERVICE_UNAVAILABLE,
            TooManyCancels { .. } | RequestRate { .. } => StatusCode::TOO_MANY_REQUESTS,
            BadHost(_) | CacheTtl(_) | ContentBlocked { .. } => StatusCode::BAD_REQUEST,
            MalformedRequest { status, .. } => *status,
            Keys(k) => k.status(),
        }
    }

    /// A short code for the error body, logs and metrics.
    pub fn code(&self) -> &'static str {
        use GatewayError::*;
        match self {
            NotFound(_) => "unknown_url",
            MethodNotAllowed { .. } => "method_not_allowed",
            BodyTooLarge { .. } => "body_too_large",
            BodyRead(_) => "body_read_error",
            BadJson(_) => "invalid_json",
            MissingModel => "missing_model",
            BadField { .. } => "invalid_field",
            Translate(e) => e.code(),
            ResponseMalformed { .. } => "upstream_malformed_response",
            UnknownModel(_) => "model_not_found",
            Upstream { source, .. } => match source {
                UpstreamError::Deadline => "first_byte_timeout",
                other => other.metric_label(),
            },
            FirstByteTimeout { .. } => "first_byte_timeout",
            TotalTimeout { .. } => "total_timeout",
            ResponseTooLarge { .. } => "upstream_response_too_large",
            UpstreamBody { .. } => "upstream_body_error",
            StreamFailed { .. } => "upstream_stream_failed",
            FirstTokenTimeout { .. } => "first_token_timeout",
            IdleTimeout { .. } => "idle_timeout",
            RetryBudgetExhausted { .. } => "retry_budget_exhausted",
            UpstreamCredentials { .. } => "upstream_credentials_unavailable",
            ShuttingDown => "shutting_down",
            ClientBodyTimeout { .. } => "request_body_timeout",
            OverBudget { .. } => "memory_budget_exceeded",
            TooManyCancels { .. } => "too_many_cancellations",
            RequestRate { .. } => "connection_request_rate",
            BadHost(_) => "invalid_host",
            MalformedRequest { status, .. } => match *status {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "request_header_too_large",
                StatusCode::URI_TOO_LONG => "uri_too_long",
                _ => "malformed_request",
            },
            Keys(k) => k.code(),
            CacheTtl(e) => e.metric_label(),
            ContentBlocked { .. } => "content_blocked",
            StreamNotFound(_) => "stream_not_found",
            StreamGone(_) => "stream_expired",
            BackgroundFull => "resumable_capacity",
        }
    }

    /// The error body in the client API's format.
    pub fn body(&self, family: Family) -> Bytes {
        sluice_providers::error::error_body(family, self.status(), self.code(), &self.message())
    }

    /// The message of the error body: what the client may read. Upstreams are named by their
    /// configured name only: addresses, OS errors and TLS details stay in the log (the
    /// error's `Display`). Client input is quoted as a short escaped prefix (see
    /// [`sluice_telemetry::untrusted::echo`]), never whole. A saturated upstream pool names the upstream,
    /// the lane, the limit it hit and the setting to raise.
    pub fn message(&self) -> String {
        use sluice_telemetry::untrusted::{echo, echo_at_most};
        use GatewayError::*;
        match self {
            Upstream { upstream, source } if source.is_pool_saturated() => {
                saturated(upstream, source)
            }
            Upstream { upstream, source } => public_upstream_error(upstream, source),
            UpstreamBody { upstream, source } => format!(
                "upstream `{upstream}` broke off its response: {}",
                public_body_error(source)
            ),
            NotFound(path) => format!(
                "unknown path {}; Sluice serves /v1/chat/completions, /v1/completions, \
                 /v1/embeddings, /v1/responses, /v1/messages and /v1/models",
                echo(path)
            ),
            MethodNotAllowed { path, expected } => format!("{} takes {expected}", echo(path)),
            UnknownModel(model) => format!(
                "the model `{}` does not exist or is not routed by this gateway",
                echo(model)
            ),
            // serde's messages quote the offending value: kept short, with what was expected.
            BadJson(e) => format!(
                "the request body is not valid JSON: {}",
                echo_at_most(e, 160)
            ),
            BodyRead(e) => format!("could not read the request body: {}", echo(e)),
            StreamNotFound(id) => format!(
                "no resumable stream `{}` for this key; start a new request without \
                 `Last-Event-ID`",
                echo_at_most(id, 80)
            ),
            other => other.to_string(),
        }
    }
}

/// An upstream failure as the client may read it: the upstream's configured name and what
/// kind of failure, never the address or the OS's words.
fn public_upstream_error(upstream: &str, e: &UpstreamError) -> String {
    match e {
        UpstreamError::Connect { source, .. } => {
            format!(
                "could not connect to upstream `{upstream}` ({})",
                source.kind()
            )
        }
        UpstreamError::ConnectTimeout(d) => {
            format!("connecting to upstream `{upstream}` timed out after {d:?}")
        }
        UpstreamError::Tls(_) => format!("the TLS handshake with upstream `{upstream}` failed"),
        // Fixed texts, with nothing of the peer in them.
        UpstreamError::Deadline
        | UpstreamError::Refused
        | UpstreamError::GoAway
        | UpstreamError::Reset(_)
        | UpstreamError::Closed => format!("upstream `{upstream}`: {e}"),
        other => format!("upstream `{upstream}` failed ({})", other.metric_label()),
    }
}

/// A broken-off upstream body as the client may read it.
pub(crate) fn public_body_error(e: &BodyError) -> String {
    match e {
        BodyError::Reset(_) | BodyError::Closed | BodyError::Incomplete => e.to_string(),
        other => format!("{} error in the upstream response", other.metric_label()),
    }
}

/// E.g. "upstream `local` is saturated: lane `stream`: all 64 HTTP/1.1 connections of the lane
/// (its max_connections) carried a request, and none became free within 5000 ms; raise
/// `pool.stream.max_connections` in the [[upstream]] named `local` if this is normal load".
fn saturated(upstream: &str, e: &UpstreamError) -> String {
    let (lane, limit, waited) = match e {
        UpstreamError::PoolAcquireTimeout {
            lane,
            limit,
            waited,
            ..
        } => (
            lane,
            limit,
            format!("none became free within {} ms", waited.as_millis()),
        ),
        UpstreamError::PoolFull {
            lane,
            limit,
            max_pending,
            ..
        } => (
            lane,
            limit,
            format!("{max_pending} requests were already waiting for one (max_pending)"),
        ),
        other => return format!("upstream `{upstream}`: {other}"),
    };
    let mut msg =
        format!("upstream `{upstream}` is saturated: lane `{lane}`: {limit}, and {waited}");
    if let Some(key) = e.config_key() {
        msg.push_str(&format!(
            "; raise `{key}` in the [[upstream]] named `{upstream}` if this is normal load"
        ));
    }
    msg
}

/// The final SSE event of a stream that cannot finish normally, in the client's format (see
/// [`sluice_providers::error::sse_error_event`]).
pub fn sse_error_event(family: Family, status: StatusCode, code: &str, message: &str) -> Bytes {
    sluice_providers::error::sse_error_event(family, status, code, message)
}

/// Why the gateway stopped reading a request body.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientBodyError {
    /// No piece of the body for `body_idle`.
    #[error("no request body bytes for {0:?}")]
    Idle(Duration),
    /// The body was not complete within `body`.
    #[error("the request body was not complete within {0:?}")]
    Total(Duration),
    /// The memory budget could not take the next piece.
    #[error(transparent)]
    OverBudget(#[from] crate::body_budget::OverBudget),
}

impl ClientBodyError {
    /// The client's error.
    pub(crate) fn to_gateway_error(&self) -> GatewayError {
        match self {
            ClientBodyError::Idle(t) => GatewayError::ClientBodyTimeout {
                timeout: *t,
                what: "no data from the client for too long",
            },
            ClientBodyError::Total(t) => GatewayError::ClientBodyTimeout {
                timeout: *t,
                what: "not complete in time",
            },
            ClientBodyError::OverBudget(o) => GatewayError::OverBudget { limit: o.limit },
        }
    }
}

/// The client's error for a failed body read, if the gateway itself stopped it (a timeout or
/// the memory budget); `None` for the client's own failures.
pub(crate) fn client_body_error(
    e: &(dyn std::error::Error + Send + Sync + 'static),
) -> Option<GatewayError> {
    e.downcast_ref::<ClientBodyError>()
        .map(ClientBodyError::to_gateway_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_and_anthropic_shapes() {
        let e = GatewayError::UnknownModel("x".into());
        let o: serde_json::Value = serde_json::from_slice(&e.body(Family::OpenAi)).unwrap();
        assert_eq!(o["error"]["code"], "model_not_found");
        assert_eq!(o["error"]["type"], "invalid_request_error");
        let a: serde_json::Value = serde_json::from_slice(&e.body(Family::Anthropic)).unwrap();
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "not_found_error");
        assert_eq!(e.status(), 404);
    }

    #[test]
    fn client_messages_name_upstreams_but_no_address_or_os_error() {
        let e = GatewayError::Upstream {
            upstream: "local".into(),
            source: UpstreamError::Connect {
                upstream: "local".into(),
                addr: "10.1.2.3:28500".parse().unwrap(),
                source: std::io::Error::from_raw_os_error(111),
            },
        };
        assert!(e.to_string().contains("10.1.2.3:28500"), "the log keeps it");
        assert_eq!(
            e.message(),
            "could not connect to upstream `local` (connection refused)"
        );
        let e = GatewayError::Upstream {
            upstream: "local".into(),
            source: UpstreamError::Tls(
                "TLS handshake with upstream `local` at 10.1.2.3:443 failed".into(),
            ),
        };
        assert_eq!(
            e.message(),
            "the TLS handshake with upstream `local` failed"
        );
        let e = GatewayError::UpstreamBody {
            upstream: "local".into(),
            source: BodyError::Protocol("connection reset by peer (os error 104)".into()),
        };
        assert_eq!(
            e.message(),
            "upstream `local` broke off its response: protocol error in the upstream response"
        );
        let e = GatewayError::UnknownModel(format!("m\n{}", "x".repeat(5000)));
        let m = e.message();
        assert!(
            m.len() < 200 && m.contains("m\\n") && m.contains("[cut "),
            "{m}"
        );
    }

    #[test]
    fn a_saturated_pool_names_upstream_lane_and_setting() {
        let e = GatewayError::Upstream {
            upstream: "local".into(),
            source: UpstreamError::PoolAcquireTimeout {
                upstream: "local".into(),
                lane: sluice_upstream::Lane::Stream,
                limit: sluice_upstream::LaneLimit::Http1Connections {
                    max_connections: 64,
                },
                waited: Duration::from_millis(5003),
            },
        };
        assert_eq!(e.status(), 503);
        let o: serde_json::Value = serde_json::from_slice(&e.body(Family::OpenAi)).unwrap();
        assert_eq!(o["error"]["code"], "pool_acquire_timeout");
        assert_eq!(
            o["error"]["message"],
            "upstream `local` is saturated: lane `stream`: all 64 HTTP/1.1 connections of the \
             lane (its max_connections) carried a request, and none became free within 5003 ms; \
             raise `pool.stream.max_connections` in the [[upstream]] named `local` if this is \
             normal load"
        );
        let not_ready = GatewayError::Upstream {
            upstream: "local".into(),
            source: UpstreamError::PoolFull {
                upstream: "local".into(),
                lane: sluice_upstream::Lane::Short,
                limit: sluice_upstream::LaneLimit::NotReady,
                max_pending: 8,
            },
        };
        let m = not_ready.message();
        assert!(
            m.contains("lane `short`") && m.contains("(max_pending)"),
            "{m}"
        );
        assert!(!m.contains("raise"), "no cap was reached: {m}");
    }
}
