//! Reading upstream errors (provider-formats.md §6): the three providers' error bodies, the
//! retry hints in headers and bodies, and the markers that tell a context overflow, a
//! content filter or an exhausted quota from an ordinary 400 or 429.

use std::time::Duration;

use http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::{anthropic_status, ErrorClass, ProviderError};
use crate::api::Family;

/// At most this much of a provider's message is kept.
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;

/// What an error body says, whatever its family's shape.
#[derive(Debug, Default)]
struct Detail {
    message: Option<String>,
    /// OpenAI `error.type`, Anthropic `error.type`.
    kind: Option<String>,
    /// OpenAI `error.code` (string), Anthropic `error.details.error_code`.
    code: Option<String>,
    /// Gemini `error.status` (`RESOURCE_EXHAUSTED`).
    status: Option<String>,
    /// Gemini `error.code`, vLLM `code`: an HTTP status.
    http_code: Option<u16>,
    /// Gemini `ErrorInfo.reason` (`API_KEY_INVALID`).
    reason: Option<String>,
    /// Azure `error.innererror.code` (`ResponsibleAIPolicyViolation`).
    inner_code: Option<String>,
    /// Gemini `QuotaFailure` names a per-day quota.
    daily_quota: bool,
    /// Gemini `RetryInfo.retryDelay`.
    retry_delay: Option<Duration>,
    /// Gemini `promptFeedback.blockReason`, or a candidate finished by a filter.
    blocked: bool,
}

fn string(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

impl Detail {
    fn read(body: &[u8]) -> Detail {
        let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
            return Detail::default();
        };
        // Gemini's streaming endpoint without `alt=sse` wraps errors: `[{"error":...}]`.
        if let Value::Array(a) = &mut v {
            v = a.first_mut().map(Value::take).unwrap_or(Value::Null);
        }
        Detail::from_value(&v)
    }

    fn from_value(v: &Value) -> Detail {
        let mut d = Detail::default();
        match v.get("error") {
            Some(Value::Object(e)) => {
                d.message = string(e.get("message"));
                d.kind = string(e.get("type"));
                match e.get("code") {
                    Some(Value::String(c)) if !c.is_empty() => d.code = Some(c.clone()),
                    Some(Value::Number(n)) => {
                        d.http_code = n.as_u64().and_then(|n| u16::try_from(n).ok())
                    }
                    _ => {}
                }
                d.status = string(e.get("status"));
                d.inner_code = string(e.get("innererror").and_then(|i| i.get("code")));
                match e.get("details") {
                    // Anthropic: `{"error_code": "enforced_spend_limit_reached"}`.
                    Some(Value::Object(details)) => {
                        if let Some(c) = string(details.get("error_code")) {
                            d.code = Some(c);
                        }
                    }
                    // Gemini: google.rpc details.
                    Some(Value::Array(details)) => {
                        for detail in details {
                            d.read_rpc_detail(detail);
                        }
                    }
                    _ => {}
                }
            }
            // `{"error": "message"}` (some OpenAI-compatible servers).
            Some(Value::String(s)) => d.message = Some(s.clone()),
            _ => {
                // vLLM: `{"object":"error","message","type","code":400}`; FastAPI:
                // `{"detail":"..."}`.
                d.message = string(v.get("message")).or_else(|| string(v.get("detail")));
                d.kind = string(v.get("type"));
                if let Some(n) = v.get("code").and_then(Value::as_u64) {
                    d.http_code = u16::try_from(n).ok();
                }
            }
        }
        if v.pointer("/promptFeedback/blockReason").is_some() {
            d.blocked = true;
        }
        if let Some(reason) = v
            .pointer("/candidates/0/finishReason")
            .and_then(Value::as_str)
        {
            let filter = crate::finish::Finish::from_gemini(reason, false);
            if filter == crate::finish::Finish::ContentFilter {
                d.blocked = true;
            }
        }
        d
    }

    fn read_rpc_detail(&mut self, detail: &Value) {
        let kind = detail.get("@type").and_then(Value::as_str).unwrap_or("");
        if kind.ends_with("google.rpc.RetryInfo") {
            self.retry_delay = detail
                .get("retryDelay")
                .and_then(Value::as_str)
                .and_then(proto_duration);
        } else if kind.ends_with("google.rpc.ErrorInfo") {
            self.reason = string(detail.get("reason"));
        } else if kind.ends_with("google.rpc.QuotaFailure") {
            let violations = detail.get("violations").and_then(Value::as_array);
            self.daily_quota |= violations.is_some_and(|vs| {
                vs.iter().any(|v| {
                    ["quotaId", "quotaMetric"].iter().any(|k| {
                        v.get(*k)
                            .and_then(Value::as_str)
                            .is_some_and(|s| s.contains("PerDay"))
                    })
                })
            });
        }
    }

    fn is(&self, value: &str) -> bool {
        [&self.kind, &self.code, &self.inner_code, &self.status]
            .iter()
            .any(|f| f.as_deref() == Some(value))
    }

    fn says(&self, needles: &[&str]) -> bool {
        let Some(m) = &self.message else {
            return false;
        };
        let m = m.to_ascii_lowercase();
        needles.iter().any(|n| m.contains(n))
    }

    fn content_filtered(&self) -> bool {
        self.blocked
            || self.is("content_policy_violation")
            || self.is("content_filter")
            || self.is("ResponsibleAIPolicyViolation")
            || self.says(&["output blocked by content filtering policy"])
    }

    fn context_length(&self) -> bool {
        self.is("context_length_exceeded")
            || self.says(&[
                // Anthropic
                "prompt is too long",
                "exceed context limit",
                // Gemini
                "exceeds the maximum number of tokens",
                // OpenAI, vLLM
                "maximum context length",
                "context_length_exceeded",
            ])
    }

    fn quota(&self) -> bool {
        self.is("insufficient_quota")
            || self.is("enforced_spend_limit_reached")
            || self.is("billing_error")
            || self.daily_quota
    }

    fn bad_key(&self) -> bool {
        self.reason.as_deref() == Some("API_KEY_INVALID")
            || self.is("UNAUTHENTICATED")
            || self.is("PERMISSION_DENIED")
            || self.is("authentication_error")
            || self.is("permission_error")
    }

    /// The most specific machine-readable code it has.
    fn code(&self) -> Option<String> {
        self.code
            .clone()
            .or_else(|| self.kind.clone())
            .or_else(|| self.status.clone())
    }
}

/// Gemini's `google.protobuf.Duration` JSON: `"26s"`, `"1.5s"`.
fn proto_duration(s: &str) -> Option<Duration> {
    let secs: f64 = s.strip_suffix('s')?.parse().ok()?;
    Duration::try_from_secs_f64(secs).ok()
}

fn class_for(status: StatusCode, d: &Detail) -> ErrorClass {
    let s = status.as_u16();
    if d.content_filtered() {
        return ErrorClass::ContentFiltered;
    }
    if (400..500).contains(&s) && d.context_length() {
        return ErrorClass::ContextLength;
    }
    if d.quota() && matches!(s, 400 | 402 | 403 | 429) {
        return ErrorClass::QuotaExhausted;
    }
    match s {
        429 => ErrorClass::RateLimited,
        402 => ErrorClass::QuotaExhausted,
        401 | 403 => ErrorClass::Auth,
        400 if d.bad_key() => ErrorClass::Auth,
        503 | 529 => ErrorClass::Overloaded,
        _ if d.is("overloaded_error") || d.is("UNAVAILABLE") => ErrorClass::Overloaded,
        408 | 500..=599 => ErrorClass::ServerError,
        400..=499 => ErrorClass::InvalidRequest,
        // An error body on a success status: only inside a stream, whose status was derived
        // from the error's type before this; anything else is the server misbehaving.
        _ => ErrorClass::ServerError,
    }
}

/// At most [`MAX_MESSAGE_BYTES`], cut at a character boundary.
pub(crate) fn capped(m: &str) -> &str {
    let mut end = m.len().min(MAX_MESSAGE_BYTES);
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    &m[..end]
}

/// [`capped`], in place.
fn cap_message(mut m: String) -> String {
    m.truncate(capped(&m).len());
    m
}

fn fallback_message(status: StatusCode, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX_MESSAGE_BYTES)]);
    let text = text.trim();
    // An HTML page from a proxy in front of the provider says less than its status does.
    if text.is_empty() || text.starts_with('<') {
        format!(
            "the upstream answered {} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        )
        .trim_end()
        .to_string()
    } else {
        text.to_string()
    }
}

/// How long the headers ask to wait: `retry-after-ms` (OpenAI, Anthropic), then
/// `retry-after` in seconds or as an HTTP date (a date in the past is no wait).
fn retry_after_headers(headers: &HeaderMap, now_unix: u64) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
    {
        if let Ok(d) = Duration::try_from_secs_f64(ms / 1000.0) {
            return Some(d);
        }
    }
    let v = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(v).ok()?;
    let at = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now_unix)))
}

pub(super) fn classify(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now_unix: u64,
) -> ProviderError {
    let d = Detail::read(body);
    let class = class_for(status, &d);
    let retry_after = retry_after_headers(headers, now_unix).or(d.retry_delay);
    ProviderError {
        class,
        status,
        code: d.code(),
        message: cap_message(
            d.message
                .clone()
                .unwrap_or_else(|| fallback_message(status, body)),
        ),
        retry_after,
    }
}

/// The status an error type stands for when it arrives inside a 200 stream.
fn status_of(d: &Detail) -> StatusCode {
    if let Some(s) = d.http_code.and_then(|c| StatusCode::from_u16(c).ok()) {
        if s.as_u16() >= 400 {
            return s;
        }
    }
    let by_name = |name: &str| -> Option<u16> {
        if let Some(status) = anthropic_status(name) {
            return Some(status);
        }
        Some(match name {
            // OpenAI
            "rate_limit_exceeded" | "insufficient_quota" | "tokens" | "requests" => 429,
            "server_error" => 500,
            // Gemini (google.rpc)
            "INVALID_ARGUMENT" | "FAILED_PRECONDITION" => 400,
            "UNAUTHENTICATED" => 401,
            "PERMISSION_DENIED" => 403,
            "NOT_FOUND" => 404,
            "RESOURCE_EXHAUSTED" => 429,
            "INTERNAL" => 500,
            "UNAVAILABLE" => 503,
            "DEADLINE_EXCEEDED" => 504,
            _ => return None,
        })
    };
    [&d.code, &d.kind, &d.status]
        .iter()
        .filter_map(|f| f.as_deref())
        .find_map(by_name)
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

pub(super) fn classify_stream_error(
    family: Family,
    event: &sluice_sse::Event,
) -> Option<ProviderError> {
    let data = event.data();
    let named_error = event.event_type() == b"error";
    // Content events never hold an unescaped `"error"` key: skip the parse for them.
    if !named_error && memchr::memmem::find(data, b"\"error\"").is_none() {
        return None;
    }
    let v: Value = match serde_json::from_slice(data) {
        Ok(v) => v,
        // `event: error` says what it is even when its data is plain text.
        Err(_) if named_error => {
            let text = String::from_utf8_lossy(data).trim().to_string();
            return Some(ProviderError {
                class: ErrorClass::ServerError,
                status: StatusCode::INTERNAL_SERVER_ERROR,
                code: None,
                message: cap_message(if text.is_empty() {
                    "the upstream reported an error in the stream".to_string()
                } else {
                    text
                }),
                retry_after: None,
            });
        }
        Err(_) => return None,
    };
    let v = match v {
        Value::Array(mut a) if !a.is_empty() => a.swap_remove(0),
        v => v,
    };
    let is_error = match family {
        Family::Anthropic => named_error || v.get("type").and_then(Value::as_str) == Some("error"),
        Family::OpenAi | Family::Gemini => {
            named_error
                || v.get("error")
                    .is_some_and(|e| e.is_object() || e.is_string())
        }
    };
    if !is_error {
        return None;
    }
    let d = Detail::from_value(&v);
    let status = status_of(&d);
    Some(ProviderError {
        class: class_for(status, &d),
        status,
        code: d.code(),
        message: cap_message(
            d.message
                .clone()
                .unwrap_or_else(|| "the upstream reported an error in the stream".to_string()),
        ),
        retry_after: d.retry_delay,
    })
}
