//! From a request to what the mock answers, independent of the protocol that carried it.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::Value;

use crate::knobs::{Behavior, KnobError};
use crate::shapes::{
    self, anthropic, error_body, model_of, openai, responses, u64_field, Api, Completion, EventSeq,
};
use crate::stats::Stats;

/// The header that carries per-request behaviour.
pub const MOCK_HEADER: &str = "x-mock";
/// The response header that carries the mock's request id.
pub const REQUEST_ID_HEADER: &str = "x-mock-request-id";

/// The mock's answer to a request.
pub(crate) enum Reply {
    /// A complete body: JSON or a provider error.
    Full {
        status: StatusCode,
        body: Bytes,
        retry_after: Option<u32>,
    },
    /// An SSE stream.
    Stream(Box<dyn EventSeq>),
}

impl Reply {
    fn json(status: StatusCode, v: &Value) -> Reply {
        Reply::Full {
            status,
            body: Bytes::from(v.to_string()),
            retry_after: None,
        }
    }

    fn error(api: Api, status: StatusCode, message: &str, code: Option<&str>) -> Reply {
        Reply::Full {
            status,
            body: error_body(api, status.as_u16(), message, code),
            retry_after: None,
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Reply::Full { status, .. } => *status,
            Reply::Stream(_) => StatusCode::OK,
        }
    }
}

/// What routing learned, for the stats.
pub(crate) struct Routed {
    pub(crate) reply: Reply,
    pub(crate) model: Option<String>,
    pub(crate) stream: bool,
}

/// Whether a path belongs to the mock's own control surface (not recorded as a request).
pub(crate) fn is_admin(path: &str) -> bool {
    path.starts_with("/__mock/")
}

/// `GET /__mock/stats` (`?totals` for the counters alone, cheap enough to poll during a load
/// test) and `POST /__mock/reset`.
pub(crate) fn admin(method: &Method, uri: &http::Uri, stats: &Stats) -> Reply {
    match (method, uri.path()) {
        (&Method::GET, "/__mock/stats") if uri.query() == Some("totals") => Reply::json(
            StatusCode::OK,
            &serde_json::json!({ "totals": stats.totals() }),
        ),
        (&Method::GET, "/__mock/stats") => Reply::json(StatusCode::OK, &stats.snapshot().to_json()),
        (&Method::POST, "/__mock/reset") => {
            stats.reset();
            Reply::json(StatusCode::OK, &serde_json::json!({ "reset": true }))
        }
        _ => Reply::error(
            Api::OpenAi,
            StatusCode::NOT_FOUND,
            "unknown mock control path; use GET /__mock/stats or POST /__mock/reset",
            Some("not_found"),
        ),
    }
}

fn api_of(path: &str) -> Api {
    if path == "/v1/messages" {
        Api::Anthropic
    } else {
        Api::OpenAi
    }
}

/// Reads the `x-mock` header over the defaults.
pub(crate) fn behavior(headers: &HeaderMap, defaults: &Behavior) -> Result<Behavior, KnobError> {
    match headers.get(MOCK_HEADER) {
        None => Ok(defaults.clone()),
        Some(v) => defaults.with_spec(v.to_str().map_err(|_| KnobError::NotUtf8)?),
    }
}

/// The 400 for a bad `x-mock` header.
pub(crate) fn knob_error(path: &str, err: &KnobError) -> Reply {
    Reply::error(
        api_of(path),
        StatusCode::BAD_REQUEST,
        &err.to_string(),
        Some("invalid_x_mock"),
    )
}

/// The error code for a missing required header: `x-session-id` → `missing_session_id`.
fn missing_code(header: &str) -> String {
    let name = header.strip_prefix("x-").unwrap_or(header);
    format!("missing_{}", name.replace('-', "_"))
}

/// Decides the reply for an API request whose body has been read.
pub(crate) fn route(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
    b: &Behavior,
) -> Routed {
    let api = api_of(path);
    let plain = |reply| Routed {
        reply,
        model: None,
        stream: false,
    };
    let expected = match path {
        "/v1/models" => Method::GET,
        "/v1/chat/completions"
        | "/v1/completions"
        | "/v1/embeddings"
        | "/v1/messages"
        | "/v1/responses" => Method::POST,
        _ => {
            return plain(Reply::error(
                api,
                StatusCode::NOT_FOUND,
                &format!("unknown path {path}"),
                Some("unknown_url"),
            ))
        }
    };
    if method != expected {
        return plain(Reply::error(
            api,
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{path} takes {expected}, not {method}"),
            Some("method_not_allowed"),
        ));
    }
    if let Some(name) = &b.require_header {
        if !headers.contains_key(name.as_str()) {
            return plain(Reply::error(
                api,
                StatusCode::BAD_REQUEST,
                &format!("the required header `{name}` is missing"),
                Some(&missing_code(name)),
            ));
        }
    }
    if let Some(status) = b.status.and_then(|s| StatusCode::from_u16(s).ok()) {
        if !status.is_success() {
            let retry_after = b.retry_after.or(match status.as_u16() {
                429 | 503 => Some(1),
                _ => None,
            });
            let Reply::Full { body, .. } = Reply::error(
                api,
                status,
                &format!("mock status {}", status.as_u16()),
                Some(&format!("mock_{}", status.as_u16())),
            ) else {
                unreachable!("Reply::error builds a full reply")
            };
            return plain(Reply::Full {
                status,
                body,
                retry_after,
            });
        }
    }
    if path == "/v1/models" {
        return plain(Reply::json(StatusCode::OK, &openai::models_body()));
    }
    let req: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            return plain(Reply::error(
                api,
                StatusCode::BAD_REQUEST,
                "the request body must be a JSON object",
                Some("invalid_json"),
            ))
        }
        Err(e) => {
            return plain(Reply::error(
                api,
                StatusCode::BAD_REQUEST,
                &format!("the request body is not valid JSON: {e}"),
                Some("invalid_json"),
            ))
        }
    };
    let Some(model) = model_of(&req).map(str::to_string) else {
        return plain(Reply::error(
            api,
            StatusCode::BAD_REQUEST,
            "the request body has no string `model`",
            Some("missing_model"),
        ));
    };
    let stream = req.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = req
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // The content depends on what was asked, not on how it is delivered.
    let seed = shapes::request_seed(&req);
    let completion = |max| Completion::with_seed(&model, seed, body.len(), max, b);
    let done = |reply| Routed {
        reply,
        model: Some(model.clone()),
        stream,
    };
    let max_tokens = |names: &[&str]| names.iter().find_map(|n| u64_field(&req, n));
    let reply = match path {
        "/v1/chat/completions" => {
            let c = completion(max_tokens(&["max_completion_tokens", "max_tokens"]));
            if stream {
                Reply::Stream(Box::new(openai::ChatStream { c, include_usage }))
            } else {
                Reply::json(StatusCode::OK, &openai::chat_body(&c))
            }
        }
        "/v1/completions" => {
            let c = completion(max_tokens(&["max_tokens"]));
            if stream {
                Reply::Stream(Box::new(openai::CompletionsStream { c, include_usage }))
            } else {
                Reply::json(StatusCode::OK, &openai::completions_body(&c))
            }
        }
        "/v1/embeddings" => match openai::embeddings_body(&model, &req) {
            Ok(v) => Reply::json(StatusCode::OK, &v),
            Err(msg) => Reply::error(api, StatusCode::BAD_REQUEST, &msg, Some("invalid_input")),
        },
        "/v1/messages" => {
            let Some(max) = u64_field(&req, "max_tokens") else {
                return done(Reply::error(
                    api,
                    StatusCode::BAD_REQUEST,
                    "max_tokens: Field required",
                    None,
                ));
            };
            let c = completion(Some(max));
            if stream {
                Reply::Stream(Box::new(anthropic::MessageStream { c }))
            } else {
                Reply::json(StatusCode::OK, &anthropic::message_body(&c))
            }
        }
        _ => {
            let c = completion(max_tokens(&["max_output_tokens"]));
            if stream {
                Reply::Stream(Box::new(responses::ResponseStream { c }))
            } else {
                Reply::json(StatusCode::OK, &responses::response_object(&c, true))
            }
        }
    };
    done(reply)
}

/// Largest request body the mock reads, on either protocol; beyond it, 413.
pub(crate) const MAX_REQUEST_BODY: usize = 64 << 20;

/// The 413 for a request body over the mock's limit.
pub(crate) fn too_large(path: &str) -> Reply {
    Reply::error(
        api_of(path),
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!(
            "the request body is larger than the mock accepts ({} MiB)",
            MAX_REQUEST_BODY >> 20
        ),
        Some("request_too_large"),
    )
}
