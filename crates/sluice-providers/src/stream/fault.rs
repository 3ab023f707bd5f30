//! Errors inside a stream, as a translating translator meets them: an upstream's error event,
//! or an upstream stream it cannot follow. Each becomes one error event in the client's format.
//!
//! NOTE: this reads just enough of an error event to re-express it (status, code, message);
//! classifying it for the policy stage is `crate::error::classify_stream_error`'s job, on the
//! client-format event this produces, so the code is kept as the upstream gave it. The two
//! share the Anthropic type-to-status table and the message cap, and otherwise read apart:
//! this one reads only the upstream's own family (borrowed, once per failed stream) and
//! keeps its code and message verbatim, with a status from that family's fields only (an
//! OpenAI-shaped event's `type` or `code`, a Gemini `error.code` between 400 and 599), and a
//! `upstream_error` event when the data cannot be read; `classify_stream_error` reads any
//! family's shape (vLLM's and FastAPI's too, Gemini's `[{"error":..}]`) for a class, a
//! retry hint and the most specific code. Reading both with one parser would change the
//! events clients get today.

use std::borrow::Cow;

use bytes::Bytes;
use http::StatusCode;
use serde::Deserialize;

use crate::api::Family;
use crate::error::{anthropic_status, capped};

/// An error to end the client's stream with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    status: StatusCode,
    code: String,
    message: String,
}

#[derive(Deserialize)]
struct AnthropicError<'a> {
    #[serde(borrow)]
    error: AnthropicBody<'a>,
}

#[derive(Deserialize)]
struct AnthropicBody<'a> {
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WithError<'a> {
    #[serde(borrow)]
    error: ErrorBody<'a>,
}

/// OpenAI `{message, type, code}` and Gemini `{code, message, status}` in one shape: `code`
/// is a string for OpenAI, a number (the HTTP status) for Gemini and vLLM.
#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    code: Option<serde_json::Value>,
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
}

impl Fault {
    /// An Anthropic `event: error` (`{"type":"error","error":{"type":..,"message":..}}`):
    /// `overloaded_error` "would normally correspond to an HTTP 529".
    pub(crate) fn from_anthropic(data: &[u8]) -> Fault {
        let Ok(e) = serde_json::from_slice::<AnthropicError<'_>>(data) else {
            return Fault::unreadable("anthropic");
        };
        let code = e.error.kind.unwrap_or(Cow::Borrowed("api_error"));
        let status = anthropic_status(&code).unwrap_or(500);
        Fault::new(
            status,
            &code,
            e.error.message.as_deref().unwrap_or("upstream error"),
        )
    }

    /// An OpenAI-shaped `{"error":{..}}` chunk (OpenAI, vLLM and other compatible servers).
    pub(crate) fn from_openai(data: &[u8]) -> Fault {
        let Ok(e) = serde_json::from_slice::<WithError<'_>>(data) else {
            return Fault::unreadable("openai");
        };
        let e = e.error;
        let code_str = match &e.code {
            Some(serde_json::Value::String(s)) => Some(s.as_str()),
            _ => None,
        };
        let numeric = e.code.as_ref().and_then(serde_json::Value::as_u64);
        let status = match (numeric, code_str, e.kind.as_deref()) {
            (Some(n @ 400..=599), _, _) => n as u16,
            (_, Some("rate_limit_exceeded" | "insufficient_quota"), _) => 429,
            (_, _, Some("insufficient_quota" | "rate_limit_exceeded" | "tokens" | "requests")) => {
                429
            }
            (_, Some("context_length_exceeded"), _) | (_, _, Some("invalid_request_error")) => 400,
            (_, _, Some("authentication_error")) => 401,
            _ => 500,
        };
        let code = code_str
            .or(e.kind.as_deref())
            .unwrap_or("upstream_error")
            .to_owned();
        Fault::new(
            status,
            &code,
            e.message.as_deref().unwrap_or("upstream error"),
        )
    }

    /// A Gemini error chunk (`{"error":{"code":503,"message":..,"status":"UNAVAILABLE"}}`).
    pub(crate) fn from_gemini(data: &[u8]) -> Fault {
        let Ok(e) = serde_json::from_slice::<WithError<'_>>(data) else {
            return Fault::unreadable("gemini");
        };
        let e = e.error;
        let status = e
            .code
            .as_ref()
            .and_then(serde_json::Value::as_u64)
            .filter(|n| (400..=599).contains(n))
            .map_or(500, |n| n as u16);
        Fault::new(
            status,
            e.status.as_deref().unwrap_or("INTERNAL"),
            e.message.as_deref().unwrap_or("upstream error"),
        )
    }

    /// An error the caller has already read (a Bedrock exception message's type and text).
    pub(crate) fn with(status: u16, code: &str, message: &str) -> Fault {
        Fault::new(status, code, message)
    }

    /// The upstream sent an event this translator cannot read.
    pub(crate) fn malformed(provider: &str, what: &str) -> Fault {
        Fault::new(
            502,
            "upstream_malformed_event",
            &format!(
                "the {provider} upstream sent a stream event that cannot be translated: {what}"
            ),
        )
    }

    /// The upstream's stream ended before its end marker.
    pub(crate) fn truncated(provider: &str) -> Fault {
        Fault::new(
            502,
            "upstream_stream_truncated",
            &format!("the {provider} upstream's stream ended before the answer was complete"),
        )
    }

    fn unreadable(provider: &str) -> Fault {
        Fault::new(
            502,
            "upstream_error",
            &format!("the {provider} upstream sent an error event that cannot be read"),
        )
    }

    fn new(status: u16, code: &str, message: &str) -> Fault {
        Fault {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            code: code.to_owned(),
            message: capped(message).to_owned(),
        }
    }

    /// The error's code, as the upstream gave it (or the gateway's own).
    pub(crate) fn code(&self) -> &str {
        &self.code
    }

    /// Its message.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// The final SSE event for a client of `family`.
    pub(crate) fn event(&self, family: Family) -> Bytes {
        crate::error::sse_error_event(family, self.status, &self.code, &self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_family() {
        let a = Fault::from_anthropic(
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert_eq!(
            (a.status.as_u16(), a.code.as_str()),
            (529, "overloaded_error")
        );
        let o = Fault::from_openai(
            br#"{"error":{"message":"slow down","type":"tokens","code":"rate_limit_exceeded"}}"#,
        );
        assert_eq!(
            (o.status.as_u16(), o.code.as_str()),
            (429, "rate_limit_exceeded")
        );
        let v = Fault::from_openai(
            br#"{"error":{"message":"bad","type":"BadRequestError","code":400}}"#,
        );
        assert_eq!(v.status.as_u16(), 400);
        let g = Fault::from_gemini(
            br#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#,
        );
        assert_eq!((g.status.as_u16(), g.code.as_str()), (503, "UNAVAILABLE"));
        let long = "é".repeat(2000);
        let f = Fault::new(500, "x", &long);
        assert_eq!(f.message.len(), 1024);
        let unknown = Fault::from_anthropic(br#"{"type":"error","error":{"type":"new_error"}}"#);
        assert_eq!(
            (unknown.status.as_u16(), unknown.code.as_str()),
            (500, "new_error")
        );
    }
}
