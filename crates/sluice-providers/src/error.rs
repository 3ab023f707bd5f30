//! Errors in each family's format, and the classes upstream errors fall into.
//!
//! Two directions:
//! - *out*: [`error_body`] and [`sse_error_event`] write an error the way a client of a family
//!   expects it (status-derived `type`, a stable `code`), before or inside a stream;
//! - *in*: [`classify`] reads an upstream's error response (status, headers, body) and
//!   [`classify_stream_error`] an error event inside a 200 stream, into a [`ProviderError`]
//!   whose [`ErrorClass`] is what the policy stage decides by — never a string match at a call
//!   site. [`client_error`] then re-expresses it for a client of another family (an Anthropic
//!   529 `overloaded_error` reaches an OpenAI client as a 503).

mod classify;

pub(crate) use classify::capped;

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde::Serialize;

use crate::api::Family;

/// What kind of failure an upstream reported. Low cardinality: a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// 429 for request or token rate: retryable, after `Retry-After` if given.
    RateLimited,
    /// Quota or spend limit exhausted (OpenAI `insufficient_quota`, Anthropic
    /// `enforced_spend_limit_reached`): 429 but final until someone pays.
    QuotaExhausted,
    /// The provider is overloaded (503, Anthropic 529 `overloaded_error`): retryable.
    Overloaded,
    /// A server-side failure (500, 502, 504): retryable.
    ServerError,
    /// The prompt does not fit the model's context window: final for this target, may go to
    /// a target with a larger window.
    ContextLength,
    /// The provider's content filter refused the request or the output: final, never routed
    /// around.
    ContentFiltered,
    /// Anything else the client got wrong (400, 404 for a model, 413, 422): final.
    InvalidRequest,
    /// 401/403: the credential was refused. Final for the request; a key target may be
    /// ejected.
    Auth,
}

impl ErrorClass {
    /// The label value (`rate_limited`, `overloaded`, ...).
    pub fn metric_label(self) -> &'static str {
        match self {
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::QuotaExhausted => "quota_exhausted",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::ServerError => "server_error",
            ErrorClass::ContextLength => "context_length",
            ErrorClass::ContentFiltered => "content_filtered",
            ErrorClass::InvalidRequest => "invalid_request",
            ErrorClass::Auth => "auth",
        }
    }

    /// Whether another attempt (same or other target) may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorClass::RateLimited | ErrorClass::Overloaded | ErrorClass::ServerError
        )
    }
}

/// An upstream's error, understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderError {
    /// What kind of failure it is.
    pub class: ErrorClass,
    /// The status the upstream answered with (200 for an error event inside a stream is
    /// replaced by the status the error would have had: 529/503 for overloaded, ...).
    pub status: StatusCode,
    /// The provider's machine-readable code or type (`rate_limit_exceeded`,
    /// `overloaded_error`, `RESOURCE_EXHAUSTED`), if it gave one.
    pub code: Option<String>,
    /// The provider's message, for the client (bounded: at most 1 KiB kept).
    pub message: String,
    /// How long the provider asked us to wait (`retry-after-ms`, `Retry-After` in seconds or
    /// as an HTTP date, Gemini's `RetryInfo.retryDelay`).
    pub retry_after: Option<Duration>,
}

/// Reads an upstream error response of `family` into a [`ProviderError`].
///
/// Any of the three families' bodies is understood whatever `family` says (OpenAI-compatible
/// servers answer in many shapes, vLLM's and FastAPI's included), so `family` only documents
/// the caller's expectation. The class comes from the status and the body's markers:
/// content-filter codes and messages first, then context overflow (OpenAI
/// `context_length_exceeded`, Anthropic "prompt is too long", Gemini "exceeds the maximum
/// number of tokens"), then quota (OpenAI `insufficient_quota`, Anthropic
/// `enforced_spend_limit_reached` / `billing_error`, a Gemini per-day `QuotaFailure`), then
/// the status. A body that is not JSON gives its text as the message (an HTML page gives
/// the status instead).
///
/// `now_unix` (seconds since the epoch) resolves an HTTP-date `Retry-After` without reading a
/// clock here (this crate does no I/O).
pub fn classify(
    family: Family,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now_unix: u64,
) -> ProviderError {
    let _ = family;
    classify::classify(status, headers, body, now_unix)
}

/// Reads an error event inside a 200 stream (OpenAI `data: {"error":{...}}`, Anthropic
/// `event: error`, a Gemini error chunk). `None` when the event is not an error.
///
/// The status is the one the error stands for (Anthropic `overloaded_error`: 529, Gemini's
/// `error.code`, OpenAI `server_error`: 500). Events without an `"error"` key in their data
/// and no `event: error` are not parsed.
pub fn classify_stream_error(family: Family, event: &sluice_sse::Event) -> Option<ProviderError> {
    classify::classify_stream_error(family, event)
}

/// The status and body a client of `client` gets for an upstream error: the same status and
/// the provider's message and code, re-expressed in the client's format (with the status
/// mapped where the client's API has no such status: Anthropic 529 → 503 and 402 → 429 for
/// OpenAI and Gemini clients; a status below 400, from a stream, becomes 502).
///
/// OpenAI clients get the codes their SDKs and frameworks look for:
/// `context_length_exceeded`, `content_policy_violation`, `insufficient_quota` (also as the
/// `type`), `rate_limit_exceeded`. An [`ErrorClass::Auth`] error's message is replaced: it
/// concerns the gateway's credentials (OpenAI's echoes part of the key), not the client's.
/// The gateway adds `Retry-After` from [`ProviderError::retry_after`].
pub fn client_error(client: Family, err: &ProviderError) -> (StatusCode, Bytes) {
    let s = err.status.as_u16();
    let status = match (client, s) {
        (_, 0..=399) => StatusCode::BAD_GATEWAY,
        (Family::OpenAi | Family::Gemini, 529) => StatusCode::SERVICE_UNAVAILABLE,
        (Family::OpenAi | Family::Gemini, 402) => StatusCode::TOO_MANY_REQUESTS,
        _ => err.status,
    };
    let message = match err.class {
        ErrorClass::Auth => format!(
            "the upstream provider refused the gateway's credentials ({})",
            err.status.as_u16()
        ),
        _ => err.message.clone(),
    };
    let code = match err.class {
        ErrorClass::ContextLength => "context_length_exceeded",
        ErrorClass::ContentFiltered => "content_policy_violation",
        ErrorClass::QuotaExhausted => "insufficient_quota",
        ErrorClass::RateLimited => "rate_limit_exceeded",
        _ => err.code.as_deref().unwrap_or(err.class.metric_label()),
    };
    let kind = match (client, err.class, status.as_u16()) {
        (Family::OpenAi, ErrorClass::QuotaExhausted, _) => "insufficient_quota",
        (Family::OpenAi, _, _) => openai_type(status),
        (Family::Anthropic, ErrorClass::QuotaExhausted, 402) => "billing_error",
        (Family::Anthropic, _, _) => anthropic_type(status),
        (Family::Gemini, _, _) => gemini_status(status),
    };
    let body = family_body(client, status, kind, code, &message);
    (status, body)
}

/// An error body in `family`'s format: OpenAI `{"error":{message,type,param,code}}`,
/// Anthropic `{"type":"error","error":{type,message}}`, Gemini
/// `{"error":{code,message,status}}`. `code` is a stable machine-readable code
/// (`model_not_found`, `rate_limited`, ...); the `type` derives from `status`.
pub fn error_body(family: Family, status: StatusCode, code: &str, message: &str) -> Bytes {
    let kind = match family {
        Family::OpenAi => openai_type(status),
        Family::Anthropic => anthropic_type(status),
        Family::Gemini => gemini_status(status),
    };
    family_body(family, status, kind, code, message)
}

/// The body in `family`'s shape with an explicit `type` (Gemini: `status`). Typed structs
/// rather than `json!` keep each provider's key order (`"type"` first for Anthropic) whether
/// or not serde_json's `preserve_order` is on in the build.
fn family_body(family: Family, status: StatusCode, kind: &str, code: &str, message: &str) -> Bytes {
    #[derive(Serialize)]
    struct OpenAiBody<'a> {
        error: OpenAiError<'a>,
    }
    #[derive(Serialize)]
    struct OpenAiError<'a> {
        message: &'a str,
        #[serde(rename = "type")]
        kind: &'a str,
        param: Option<&'a str>,
        code: &'a str,
    }
    #[derive(Serialize)]
    struct AnthropicBody<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        error: AnthropicError<'a>,
    }
    #[derive(Serialize)]
    struct AnthropicError<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        message: &'a str,
    }
    #[derive(Serialize)]
    struct GeminiBody<'a> {
        error: GeminiError<'a>,
    }
    #[derive(Serialize)]
    struct GeminiError<'a> {
        code: u16,
        message: &'a str,
        status: &'a str,
    }
    let v = match family {
        Family::OpenAi => serde_json::to_vec(&OpenAiBody {
            error: OpenAiError {
                message,
                kind,
                param: None,
                code,
            },
        }),
        Family::Anthropic => serde_json::to_vec(&AnthropicBody {
            kind: "error",
            error: AnthropicError { kind, message },
        }),
        Family::Gemini => serde_json::to_vec(&GeminiBody {
            error: GeminiError {
                code: status.as_u16(),
                message,
                status: kind,
            },
        }),
    };
    // Serialising borrowed strings and numbers cannot fail.
    Bytes::from(v.unwrap_or_default())
}

/// The final SSE event of a stream that cannot finish normally, in `family`'s format: OpenAI
/// clients read a `data:` line holding `{"error":{...}}`, Anthropic clients an `event:
/// error`, Gemini clients a data chunk holding `{"error":{...}}`. No `[DONE]` follows: a
/// broken stream must not look complete.
pub fn sse_error_event(family: Family, status: StatusCode, code: &str, message: &str) -> Bytes {
    let body = error_body(family, status, code, message);
    let mut out = Vec::with_capacity(body.len() + 32);
    if family == Family::Anthropic {
        out.extend_from_slice(b"event: error\n");
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&body);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// OpenAI's error `type` for a status.
pub fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 404 | 405 | 409 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_exceeded",
        504 => "timeout",
        _ => "server_error",
    }
}

/// Anthropic's error `type` for a status.
pub fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 405 | 409 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

/// The HTTP status an Anthropic error `type` stands for (docs.claude.com/en/api/errors:
/// `overloaded_error` "would normally correspond to an HTTP 529"), for an error that arrives
/// inside a 200 stream; `None` for a type Anthropic does not document. Nearly the inverse of
/// [`anthropic_type`].
pub(crate) fn anthropic_status(kind: &str) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => return None,
    })
}

/// Gemini's (google.rpc) `status` for an HTTP status.
pub fn gemini_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 413 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        405 => "UNIMPLEMENTED",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_per_family() {
        let o: serde_json::Value = serde_json::from_slice(&error_body(
            Family::OpenAi,
            StatusCode::NOT_FOUND,
            "model_not_found",
            "no",
        ))
        .unwrap();
        assert_eq!(o["error"]["code"], "model_not_found");
        assert_eq!(o["error"]["type"], "invalid_request_error");
        let a: serde_json::Value = serde_json::from_slice(&error_body(
            Family::Anthropic,
            StatusCode::NOT_FOUND,
            "model_not_found",
            "no",
        ))
        .unwrap();
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "not_found_error");
        let g: serde_json::Value = serde_json::from_slice(&error_body(
            Family::Gemini,
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "slow down",
        ))
        .unwrap();
        assert_eq!(g["error"]["status"], "RESOURCE_EXHAUSTED");
        assert_eq!(g["error"]["code"], 429);
    }

    /// The SSE framing, and the body read as JSON: key order is serde_json's to choose
    /// (`preserve_order` is on in some builds of the workspace and not in others).
    #[test]
    fn sse_error_events() {
        fn payload(event: &[u8], head: &[u8]) -> serde_json::Value {
            let data = event
                .strip_prefix(head)
                .and_then(|e| e.strip_suffix(b"\n\n"))
                .unwrap_or_else(|| panic!("framing: {}", String::from_utf8_lossy(event)));
            assert!(!data.contains(&b'\n'), "one data line");
            serde_json::from_slice(data).expect("the data is JSON")
        }
        let o = sse_error_event(
            Family::OpenAi,
            StatusCode::GATEWAY_TIMEOUT,
            "idle_timeout",
            "no event for 30s",
        );
        let o = payload(&o, b"data: ");
        assert_eq!(o["error"]["code"], "idle_timeout");
        assert_eq!(o["error"]["type"], "timeout");
        assert_eq!(o["error"]["message"], "no event for 30s");
        let a = sse_error_event(
            Family::Anthropic,
            StatusCode::BAD_GATEWAY,
            "upstream_reset",
            "reset",
        );
        let a = payload(&a, b"event: error\ndata: ");
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "api_error");
        assert_eq!(a["error"]["message"], "reset");
        let g = sse_error_event(
            Family::Gemini,
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "busy",
        );
        let g = payload(&g, b"data: ");
        assert_eq!(g["error"]["status"], "UNAVAILABLE");
        assert_eq!(g["error"]["code"], 503);
    }
}
