//! Typed provider errors (`error=KIND`, `fail_with=KIND`, `stream_error_after=N:KIND`) in each
//! provider's real shape, status and headers.
//!
//! Sources (see /work/shared/reference/provider-formats.md §6): OpenAI `Error` schema and error
//! codes (openai-openapi; `context_length_exceeded` chathub-dev/chathub#126,
//! `rate_limit_exceeded` openai/codex#88, `insufficient_quota`, `content_policy_violation`
//! songquanpeng/one-api#737, Azure `content_filter` openai/openai-dotnet#55); Anthropic
//! `ErrorResponse` and error types (docs.claude.com/en/api/errors; "prompt is too long"
//! whoz-oss/coday#26; in-stream `overloaded_error` envoyproxy/ai-gateway#2697); Gemini
//! google.rpc errors (python-genai `errors.py`; `RetryInfo`/`QuotaFailure`
//! ai.google.dev/gemini-api/docs/troubleshooting; "The model is overloaded"
//! google-gemini/gemini-cli#7227; token limit message from LiteLLM's exception mapping).

use std::time::{Duration, SystemTime};

use http::StatusCode;
use serde_json::{json, Value};

use super::{gemini_error, Api, SseItem};
use crate::knobs::ErrorKind;

/// When a client may retry, from the `retry_after` / `retry_after_date` knobs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RetryHint {
    pub(crate) secs: u32,
    /// Send `Retry-After` as an HTTP date instead of seconds.
    pub(crate) date: bool,
    /// The knob asked for it explicitly (otherwise only 429 and 503 carry one).
    pub(crate) explicit: bool,
}

impl RetryHint {
    /// The `Retry-After` header value.
    pub(crate) fn header(&self) -> String {
        if self.date {
            let at = SystemTime::now() + Duration::from_secs(u64::from(self.secs));
            httpdate::fmt_http_date(at)
        } else {
            self.secs.to_string()
        }
    }
}

/// What an error depends on besides its kind.
#[derive(Clone, Debug)]
pub(crate) struct ErrorCtx {
    pub(crate) model: Option<String>,
    pub(crate) prompt_tokens: u32,
    pub(crate) retry: RetryHint,
}

/// A typed error: status, JSON body and extra headers. Gemini's content filter is the one
/// "error" that is a 200.
#[derive(Debug)]
pub(crate) struct ErrorReply {
    pub(crate) status: StatusCode,
    pub(crate) body: Value,
    pub(crate) headers: Vec<(&'static str, String)>,
}

/// The context window the messages quote; a context_length error claims the prompt is larger.
const OPENAI_CONTEXT: u32 = 128_000;
const ANTHROPIC_CONTEXT: u32 = 200_000;
const GEMINI_CONTEXT: u32 = 1_048_576;

fn openai(message: &str, kind: Value, param: Value, code: Value) -> Value {
    json!({ "error": { "message": message, "type": kind, "param": param, "code": code } })
}

fn anthropic(kind: &str, message: &str) -> Value {
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}

/// A `google.rpc` detail: `@type` first, as Google sends it.
fn google_rpc(kind: &str, fields: Value) -> Value {
    let mut v = serde_json::Map::new();
    v.insert(
        "@type".into(),
        json!(format!("type.googleapis.com/google.rpc.{kind}")),
    );
    if let Value::Object(fields) = fields {
        v.extend(fields);
    }
    Value::Object(v)
}

fn gemini_quota(model: &str, per: &str) -> Value {
    google_rpc(
        "QuotaFailure",
        json!({ "violations": [{
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
            "quotaId": format!("GenerateRequestsPer{per}PerProjectPerModel"),
            "quotaDimensions": { "location": "global", "model": model },
            "quotaValue": "60",
        }]}),
    )
}

/// The typed error `kind` in `api`'s shape.
pub(crate) fn typed(api: Api, kind: ErrorKind, ctx: &ErrorCtx) -> ErrorReply {
    let model = ctx.model.as_deref().unwrap_or("mock-model");
    let secs = ctx.retry.secs;
    let mut headers = Vec::new();
    let retry_after = |headers: &mut Vec<(&'static str, String)>| {
        headers.push(("retry-after", ctx.retry.header()));
    };
    let (status, body) = match api {
        Api::OpenAi => match kind {
            ErrorKind::RateLimit => {
                retry_after(&mut headers);
                headers.push(("x-ratelimit-limit-requests", "60".into()));
                headers.push(("x-ratelimit-remaining-requests", "0".into()));
                headers.push(("x-ratelimit-reset-requests", format!("{secs}s")));
                let msg = format!(
                    "Rate limit reached for {model} in organization org-mock on requests per min \
                     (RPM): Limit 60, Used 60, Requested 1. Please try again in {secs}s."
                );
                let body = openai(
                    &msg,
                    json!("requests"),
                    Value::Null,
                    json!("rate_limit_exceeded"),
                );
                (429, body)
            }
            ErrorKind::Quota => (
                429,
                openai(
                    "You exceeded your current quota, please check your plan and billing \
                     details.",
                    json!("insufficient_quota"),
                    Value::Null,
                    json!("insufficient_quota"),
                ),
            ),
            ErrorKind::Overloaded => (
                503,
                openai(
                    "The server is overloaded or not ready yet.",
                    json!("server_error"),
                    Value::Null,
                    Value::Null,
                ),
            ),
            ErrorKind::Server => (
                500,
                openai(
                    "The server had an error while processing your request. Sorry about that!",
                    json!("server_error"),
                    Value::Null,
                    Value::Null,
                ),
            ),
            ErrorKind::ContextLength => {
                let n = OPENAI_CONTEXT + ctx.prompt_tokens;
                let msg = format!(
                    "This model's maximum context length is {OPENAI_CONTEXT} tokens. However, \
                     your messages resulted in {n} tokens. Please reduce the length of the \
                     messages."
                );
                let body = openai(
                    &msg,
                    json!("invalid_request_error"),
                    json!("messages"),
                    json!("context_length_exceeded"),
                );
                (400, body)
            }
            ErrorKind::ContentFilter => (
                400,
                openai(
                    "Your request was rejected as a result of our safety system. Your prompt may \
                     contain text that is not allowed by our safety system.",
                    json!("invalid_request_error"),
                    Value::Null,
                    json!("content_policy_violation"),
                ),
            ),
            ErrorKind::ContentFilterAzure => {
                let safe = json!({ "filtered": false, "severity": "safe" });
                let body = json!({ "error": {
                    "message": "The response was filtered due to the prompt triggering Azure \
                        OpenAI's content management policy. Please modify your prompt and retry. \
                        To learn more about our content filtering policies please read our \
                        documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
                    "type": null,
                    "param": "prompt",
                    "code": "content_filter",
                    "status": 400,
                    "innererror": {
                        "code": "ResponsibleAIPolicyViolation",
                        "content_filter_result": {
                            "hate": safe, "self_harm": safe, "sexual": safe,
                            "violence": { "filtered": true, "severity": "medium" },
                        },
                    },
                }});
                (400, body)
            }
            ErrorKind::Auth => (
                401,
                openai(
                    "Incorrect API key provided. You can find your API key at \
                     https://platform.openai.com/account/api-keys.",
                    json!("invalid_request_error"),
                    Value::Null,
                    json!("invalid_api_key"),
                ),
            ),
            ErrorKind::Invalid => (
                400,
                openai(
                    "Invalid request (the mock's error=invalid knob).",
                    json!("invalid_request_error"),
                    Value::Null,
                    Value::Null,
                ),
            ),
            ErrorKind::NotFound => (
                404,
                openai(
                    &format!("The model `{model}` does not exist or you do not have access to it."),
                    json!("invalid_request_error"),
                    Value::Null,
                    json!("model_not_found"),
                ),
            ),
        },
        Api::Anthropic => match kind {
            ErrorKind::RateLimit => {
                retry_after(&mut headers);
                headers.push(("anthropic-ratelimit-requests-limit", "50".into()));
                headers.push(("anthropic-ratelimit-requests-remaining", "0".into()));
                (
                    429,
                    anthropic(
                        "rate_limit_error",
                        "This request would exceed your organization's rate limit of 50 \
                         requests per minute. Please try again later.",
                    ),
                )
            }
            ErrorKind::Quota => {
                let mut body = anthropic(
                    "rate_limit_error",
                    "You have reached your specified API usage limits.",
                );
                body["error"]["details"] = json!({ "error_code": "enforced_spend_limit_reached" });
                (429, body)
            }
            ErrorKind::Overloaded => (529, anthropic("overloaded_error", "Overloaded")),
            ErrorKind::Server => (500, anthropic("api_error", "Internal server error")),
            ErrorKind::ContextLength => {
                let n = ANTHROPIC_CONTEXT + ctx.prompt_tokens;
                (
                    400,
                    anthropic(
                        "invalid_request_error",
                        &format!("prompt is too long: {n} tokens > {ANTHROPIC_CONTEXT} maximum"),
                    ),
                )
            }
            ErrorKind::ContentFilter | ErrorKind::ContentFilterAzure => (
                400,
                anthropic(
                    "invalid_request_error",
                    "Output blocked by content filtering policy",
                ),
            ),
            ErrorKind::Auth => (401, anthropic("authentication_error", "invalid x-api-key")),
            ErrorKind::Invalid => (
                400,
                anthropic(
                    "invalid_request_error",
                    "Invalid request (the mock's error=invalid knob).",
                ),
            ),
            ErrorKind::NotFound => (
                404,
                anthropic("not_found_error", &format!("model: {model}")),
            ),
        },
        Api::Gemini => match kind {
            ErrorKind::RateLimit => (
                429,
                gemini_error(
                    429,
                    "You exceeded your current quota, please check your plan and billing \
                     details. For more information on this error, head to: \
                     https://ai.google.dev/gemini-api/docs/rate-limits.",
                    vec![
                        gemini_quota(model, "Minute"),
                        google_rpc("RetryInfo", json!({ "retryDelay": format!("{secs}s") })),
                    ],
                ),
            ),
            ErrorKind::Quota => (
                429,
                gemini_error(
                    429,
                    "You exceeded your current quota, please check your plan and billing \
                     details.",
                    vec![gemini_quota(model, "Day")],
                ),
            ),
            ErrorKind::Overloaded => (
                503,
                gemini_error(
                    503,
                    "The model is overloaded. Please try again later.",
                    vec![],
                ),
            ),
            ErrorKind::Server => (
                500,
                gemini_error(
                    500,
                    "An internal error has occurred. Please retry or report in \
                     https://developers.generativeai.google/guide/troubleshooting",
                    vec![],
                ),
            ),
            ErrorKind::ContextLength => {
                let n = GEMINI_CONTEXT + ctx.prompt_tokens;
                (
                    400,
                    gemini_error(
                        400,
                        &format!(
                            "The input token count ({n}) exceeds the maximum number of tokens \
                             allowed ({GEMINI_CONTEXT})."
                        ),
                        vec![],
                    ),
                )
            }
            ErrorKind::ContentFilter | ErrorKind::ContentFilterAzure => {
                (200, super::gemini::blocked_body(model, ctx.prompt_tokens))
            }
            ErrorKind::Auth => (
                400,
                gemini_error(
                    400,
                    "API key not valid. Please pass a valid API key.",
                    vec![google_rpc(
                        "ErrorInfo",
                        json!({
                            "reason": "API_KEY_INVALID",
                            "domain": "googleapis.com",
                            "metadata": { "service": "generativelanguage.googleapis.com" },
                        }),
                    )],
                ),
            ),
            ErrorKind::Invalid => (
                400,
                gemini_error(400, "Request contains an invalid argument.", vec![]),
            ),
            ErrorKind::NotFound => (
                404,
                gemini_error(
                    404,
                    &format!(
                        "models/{model} is not found for API version v1beta, or is not \
                         supported for generateContent. Call ListModels to see the list of \
                         available models and their supported methods."
                    ),
                    vec![],
                ),
            ),
        },
    };
    if ctx.retry.explicit && !headers.iter().any(|(k, _)| *k == "retry-after") && api != Api::Gemini
    {
        retry_after(&mut headers);
    }
    ErrorReply {
        status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        body,
        headers,
    }
}

/// The event an error after a 200 travels in: Anthropic `event: error`, OpenAI Responses
/// `event: error` (`sequence_number` = `seq`), OpenAI Chat/Completions and Gemini a `data:`
/// event holding the error JSON.
pub(crate) fn in_stream(
    api: Api,
    responses: bool,
    kind: ErrorKind,
    ctx: &ErrorCtx,
    seq: usize,
) -> SseItem {
    let e = typed(api, kind, ctx);
    match api {
        Api::Anthropic => (Some("error"), e.body.to_string()),
        Api::OpenAi if responses => {
            let err = &e.body["error"];
            let v = json!({
                "type": "error",
                "code": err["code"].as_str().or(err["type"].as_str()),
                "message": err["message"],
                "param": err["param"],
                "sequence_number": seq,
            });
            (Some("error"), v.to_string())
        }
        Api::OpenAi | Api::Gemini => (None, e.body.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ErrorCtx {
        ErrorCtx {
            model: Some("m".into()),
            prompt_tokens: 7,
            retry: RetryHint {
                secs: 3,
                date: false,
                explicit: false,
            },
        }
    }

    #[test]
    fn rate_limit_in_every_shape() {
        let o = typed(Api::OpenAi, ErrorKind::RateLimit, &ctx());
        assert_eq!(o.status, 429);
        assert_eq!(o.body["error"]["code"], "rate_limit_exceeded");
        assert!(o.headers.contains(&("retry-after", "3".into())));
        let a = typed(Api::Anthropic, ErrorKind::RateLimit, &ctx());
        assert_eq!(a.body["error"]["type"], "rate_limit_error");
        let g = typed(Api::Gemini, ErrorKind::RateLimit, &ctx());
        assert_eq!(g.body["error"]["status"], "RESOURCE_EXHAUSTED");
        assert_eq!(g.body["error"]["details"][1]["retryDelay"], "3s");
        assert!(g.headers.is_empty(), "Gemini sends no Retry-After header");
    }

    #[test]
    fn http_date_retry_after() {
        let h = RetryHint {
            secs: 60,
            date: true,
            explicit: true,
        }
        .header();
        let at = httpdate::parse_http_date(&h).unwrap();
        let ahead = at.duration_since(SystemTime::now()).unwrap();
        assert!(ahead > Duration::from_secs(55), "{h}");
    }

    #[test]
    fn context_length_messages() {
        let a = typed(Api::Anthropic, ErrorKind::ContextLength, &ctx());
        assert_eq!(
            a.body["error"]["message"],
            "prompt is too long: 200007 tokens > 200000 maximum"
        );
        let g = typed(Api::Gemini, ErrorKind::ContextLength, &ctx());
        assert!(g.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds the maximum number of tokens allowed"));
    }

    #[test]
    fn responses_error_event() {
        let (name, data) = in_stream(Api::OpenAi, true, ErrorKind::Server, &ctx(), 9);
        assert_eq!(name, Some("error"));
        let v: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["sequence_number"].as_u64()),
            (Some("error"), Some(9))
        );
    }
}
