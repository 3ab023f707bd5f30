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

use super::{bedrock, gemini_error, Api, SseItem};
use crate::knobs::ErrorKind;

// === impl RetryHint ===

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

// === the error table ===

/// Where a row's message says `{model}`, `{secs}`, `{context}` or `{n}`: the model asked
/// for, the retry hint's seconds, the provider's context window, and that window plus the
/// prompt's tokens (what a context_length error claims the prompt came to).
fn render(template: &str, model: &str, secs: u32, context: u32, prompt_tokens: u32) -> String {
    if !template.contains('{') {
        return template.to_owned();
    }
    // The model last: it is the client's text, and may itself say `{secs}`.
    template
        .replace("{secs}", &secs.to_string())
        .replace("{context}", &context.to_string())
        .replace("{n}", &(context + prompt_tokens).to_string())
        .replace("{model}", model)
}

/// The body of a typed error, in one of the providers' shapes.
enum Body {
    /// `{"error": {message, type, param, code}}`; `None` is JSON `null`.
    OpenAi {
        message: &'static str,
        kind: &'static str,
        param: Option<&'static str>,
        code: Option<&'static str>,
    },
    /// Azure OpenAI's content filter, with its `innererror`.
    AzureContentFilter,
    /// `{"type": "error", "error": {type, message}}`, plus `details.error_code` when set.
    Anthropic {
        kind: &'static str,
        message: &'static str,
        error_code: Option<&'static str>,
    },
    /// google.rpc's `{"error": {code, message, status, details}}`, `code` being the row's
    /// status.
    Gemini {
        message: &'static str,
        details: &'static [Detail],
    },
    /// Gemini's content filter: a 200 whose prompt was blocked.
    GeminiBlocked,
    /// Bedrock's `{"message"}`, with `x-amzn-ErrorType` naming the exception.
    Bedrock {
        exception: &'static str,
        message: &'static str,
    },
    /// Bedrock's content filter: a 200 Converse answer with `stopReason: content_filtered`
    /// (route.rs answers it as a filtered completion, so streams and InvokeModel get their
    /// own shapes of it).
    BedrockFiltered,
}

/// A google.rpc detail of a Gemini error.
enum Detail {
    /// `QuotaFailure` on the requests-per-minute quota.
    QuotaPerMinute,
    /// `QuotaFailure` on the requests-per-day quota.
    QuotaPerDay,
    /// `RetryInfo` with the retry hint's seconds.
    RetryInfo,
    /// `ErrorInfo` with reason `API_KEY_INVALID`.
    ApiKeyInvalid,
}

/// One provider's answer to some kinds of error.
struct Row {
    api: Api,
    kinds: &'static [ErrorKind],
    status: u16,
    /// Sends `Retry-After` whether or not the knob asked for it, before `headers`.
    retry_after: bool,
    /// More headers; a value may say `{secs}`.
    headers: &'static [(&'static str, &'static str)],
    body: Body,
}

/// Every provider's answer to every [`ErrorKind`] (a test checks that each pair has exactly
/// one row). Data rather than a `match` so that a provider's errors read as the table they
/// are, and a new kind is one row per provider.
const ROWS: &[Row] = &[
    // OpenAI.
    Row {
        api: Api::OpenAi,
        kinds: &[ErrorKind::RateLimit],
        status: 429,
        retry_after: true,
        headers: &[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "{secs}s"),
        ],
        body: Body::OpenAi {
            message: "Rate limit reached for {model} in organization org-mock on requests per \
                      min (RPM): Limit 60, Used 60, Requested 1. Please try again in {secs}s.",
            kind: "requests",
            param: None,
            code: Some("rate_limit_exceeded"),
        },
    },
    Row {
        api: Api::OpenAi,
        kinds: &[ErrorKind::Quota],
        status: 429,
        retry_after: false,
        headers: &[],
        body: Body::OpenAi {
            message: "You exceeded your current quota, please check your plan and billing \
                      details.",
            kind: "insufficient_quota",
            param: None,
            code: Some("insufficient_quota"),
        },
    },
    Row {
        api: Api::OpenAi,
        kinds: &[ErrorKind::Overloaded],
        status: 503,
        retry_after: false,
        headers: &[],
        body: Body::OpenAi {
            message: "The server is overloaded or not ready yet.",
            kind: "server_error",
            param: None,
            code: None,
        },
    },
    Row {
        api: Api::OpenAi,
        kinds: &[ErrorKind::Server],
        status: 500,
        retry_after: false,
        headers: &[],
        body: Body::OpenAi {
            message: "The server had an error while processing your request. Sorry about that!",
            kind: "server_error",
            param: None,
            code: None,
        },
    },
    Row {
        api: Api::OpenAi,
        kinds: &[ErrorKind::ContextLength],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::OpenAi {
            message: "This model's maximum context length is {context} tokens. However, your \
                      messages resulted in {n} tokens. Please reduce the length of the \
                      messages.",
            kind: "invalid_request_error",
            param: Some("messages"),
            code: Some("context_length_exceeded"),
        },
    },
    Row {
        api: Api::OpenAi,
        kinds: &[ErrorKind::ContentFilter],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::OpenAi {
            message: "Your request was rejected as a result of our safety system. Your prompt \
                      may contain text that is not allowed by our safety system.",
            kind: "invalid_request_error",
            param: None,
            code: Some("content_policy_violation"),
        },
    },
    Row {
        api: Api::OpenAi,
        kinds: &[ErrorKind::ContentFilterAzure],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::AzureContentFilter,
    },
    Row {
        api: Api::OpenAi,
        kinds: &[ErrorKind::Auth],
        status: 401,
        retry_after: false,
        headers: &[],
        body: Body::OpenAi {
            message: "Incorrect API key provided. You can find your API key at \
                      https://platform.openai.com/account/api-keys.",
            kind: "invalid_request_error",
            param: None,
            code: Some("invalid_api_key"),
        },
    },
    Row {
        api: Api::OpenAi,
        kinds: &[ErrorKind::Invalid],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::OpenAi {
            message: "Invalid request (the mock's error=invalid knob).",
            kind: "invalid_request_error",
            param: None,
            code: None,
        },
    },
    Row {
        api: Api::OpenAi,
        kinds: &[ErrorKind::NotFound],
        status: 404,
        retry_after: false,
        headers: &[],
        body: Body::OpenAi {
            message: "The model `{model}` does not exist or you do not have access to it.",
            kind: "invalid_request_error",
            param: None,
            code: Some("model_not_found"),
        },
    },
    // Anthropic.
    Row {
        api: Api::Anthropic,
        kinds: &[ErrorKind::RateLimit],
        status: 429,
        retry_after: true,
        headers: &[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
        ],
        body: Body::Anthropic {
            kind: "rate_limit_error",
            message: "This request would exceed your organization's rate limit of 50 requests \
                      per minute. Please try again later.",
            error_code: None,
        },
    },
    Row {
        api: Api::Anthropic,
        kinds: &[ErrorKind::Quota],
        status: 429,
        retry_after: false,
        headers: &[],
        body: Body::Anthropic {
            kind: "rate_limit_error",
            message: "You have reached your specified API usage limits.",
            error_code: Some("enforced_spend_limit_reached"),
        },
    },
    Row {
        api: Api::Anthropic,
        kinds: &[ErrorKind::Overloaded],
        status: 529,
        retry_after: false,
        headers: &[],
        body: Body::Anthropic {
            kind: "overloaded_error",
            message: "Overloaded",
            error_code: None,
        },
    },
    Row {
        api: Api::Anthropic,
        kinds: &[ErrorKind::Server],
        status: 500,
        retry_after: false,
        headers: &[],
        body: Body::Anthropic {
            kind: "api_error",
            message: "Internal server error",
            error_code: None,
        },
    },
    Row {
        api: Api::Anthropic,
        kinds: &[ErrorKind::ContextLength],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::Anthropic {
            kind: "invalid_request_error",
            message: "prompt is too long: {n} tokens > {context} maximum",
            error_code: None,
        },
    },
    Row {
        api: Api::Anthropic,
        kinds: &[ErrorKind::ContentFilter, ErrorKind::ContentFilterAzure],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::Anthropic {
            kind: "invalid_request_error",
            message: "Output blocked by content filtering policy",
            error_code: None,
        },
    },
    Row {
        api: Api::Anthropic,
        kinds: &[ErrorKind::Auth],
        status: 401,
        retry_after: false,
        headers: &[],
        body: Body::Anthropic {
            kind: "authentication_error",
            message: "invalid x-api-key",
            error_code: None,
        },
    },
    Row {
        api: Api::Anthropic,
        kinds: &[ErrorKind::Invalid],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::Anthropic {
            kind: "invalid_request_error",
            message: "Invalid request (the mock's error=invalid knob).",
            error_code: None,
        },
    },
    Row {
        api: Api::Anthropic,
        kinds: &[ErrorKind::NotFound],
        status: 404,
        retry_after: false,
        headers: &[],
        body: Body::Anthropic {
            kind: "not_found_error",
            message: "model: {model}",
            error_code: None,
        },
    },
    // Gemini: no Retry-After header (RetryInfo says when).
    Row {
        api: Api::Gemini,
        kinds: &[ErrorKind::RateLimit],
        status: 429,
        retry_after: false,
        headers: &[],
        body: Body::Gemini {
            message: "You exceeded your current quota, please check your plan and billing \
                      details. For more information on this error, head to: \
                      https://ai.google.dev/gemini-api/docs/rate-limits.",
            details: &[Detail::QuotaPerMinute, Detail::RetryInfo],
        },
    },
    Row {
        api: Api::Gemini,
        kinds: &[ErrorKind::Quota],
        status: 429,
        retry_after: false,
        headers: &[],
        body: Body::Gemini {
            message: "You exceeded your current quota, please check your plan and billing \
                      details.",
            details: &[Detail::QuotaPerDay],
        },
    },
    Row {
        api: Api::Gemini,
        kinds: &[ErrorKind::Overloaded],
        status: 503,
        retry_after: false,
        headers: &[],
        body: Body::Gemini {
            message: "The model is overloaded. Please try again later.",
            details: &[],
        },
    },
    Row {
        api: Api::Gemini,
        kinds: &[ErrorKind::Server],
        status: 500,
        retry_after: false,
        headers: &[],
        body: Body::Gemini {
            message: "An internal error has occurred. Please retry or report in \
                      https://developers.generativeai.google/guide/troubleshooting",
            details: &[],
        },
    },
    Row {
        api: Api::Gemini,
        kinds: &[ErrorKind::ContextLength],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::Gemini {
            message: "The input token count ({n}) exceeds the maximum number of tokens allowed \
                      ({context}).",
            details: &[],
        },
    },
    Row {
        api: Api::Gemini,
        kinds: &[ErrorKind::ContentFilter, ErrorKind::ContentFilterAzure],
        status: 200,
        retry_after: false,
        headers: &[],
        body: Body::GeminiBlocked,
    },
    Row {
        api: Api::Gemini,
        kinds: &[ErrorKind::Auth],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::Gemini {
            message: "API key not valid. Please pass a valid API key.",
            details: &[Detail::ApiKeyInvalid],
        },
    },
    Row {
        api: Api::Gemini,
        kinds: &[ErrorKind::Invalid],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::Gemini {
            message: "Request contains an invalid argument.",
            details: &[],
        },
    },
    Row {
        api: Api::Gemini,
        kinds: &[ErrorKind::NotFound],
        status: 404,
        retry_after: false,
        headers: &[],
        body: Body::Gemini {
            message: "models/{model} is not found for API version v1beta, or is not supported \
                      for generateContent. Call ListModels to see the list of available models \
                      and their supported methods.",
            details: &[],
        },
    },
    // Bedrock: the type in `x-amzn-ErrorType` (botocore reads it there), no Retry-After.
    Row {
        api: Api::Bedrock,
        kinds: &[ErrorKind::RateLimit],
        status: 429,
        retry_after: false,
        headers: &[],
        body: Body::Bedrock {
            exception: "ThrottlingException",
            message: "Too many requests, please wait before trying again.",
        },
    },
    Row {
        api: Api::Bedrock,
        kinds: &[ErrorKind::Quota],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::Bedrock {
            exception: "ServiceQuotaExceededException",
            message: "Your request exceeds the service quota for your account. You can view \
                      your quotas at https://console.aws.amazon.com/servicequotas. You can \
                      resubmit your request later.",
        },
    },
    Row {
        api: Api::Bedrock,
        kinds: &[ErrorKind::Overloaded],
        status: 503,
        retry_after: false,
        headers: &[],
        body: Body::Bedrock {
            exception: "ServiceUnavailableException",
            message: "Bedrock is unable to process your request.",
        },
    },
    Row {
        api: Api::Bedrock,
        kinds: &[ErrorKind::Server],
        status: 500,
        retry_after: false,
        headers: &[],
        body: Body::Bedrock {
            exception: "InternalServerException",
            message: "The server encountered an internal error while processing the request.",
        },
    },
    Row {
        api: Api::Bedrock,
        kinds: &[ErrorKind::ContextLength],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::Bedrock {
            exception: "ValidationException",
            message: "Input is too long for requested model.",
        },
    },
    Row {
        api: Api::Bedrock,
        kinds: &[ErrorKind::ContentFilter, ErrorKind::ContentFilterAzure],
        status: 200,
        retry_after: false,
        headers: &[],
        body: Body::BedrockFiltered,
    },
    Row {
        api: Api::Bedrock,
        kinds: &[ErrorKind::Auth],
        status: 403,
        retry_after: false,
        headers: &[],
        body: Body::Bedrock {
            exception: "UnrecognizedClientException",
            message: "The security token included in the request is invalid.",
        },
    },
    Row {
        api: Api::Bedrock,
        kinds: &[ErrorKind::Invalid],
        status: 400,
        retry_after: false,
        headers: &[],
        body: Body::Bedrock {
            exception: "ValidationException",
            message: "Invalid request (the mock's error=invalid knob).",
        },
    },
    Row {
        api: Api::Bedrock,
        kinds: &[ErrorKind::NotFound],
        status: 404,
        retry_after: false,
        headers: &[],
        body: Body::Bedrock {
            exception: "ResourceNotFoundException",
            message: "Could not resolve the foundation model from the provided model \
                      identifier {model}.",
        },
    },
];

/// The context window a provider's messages quote.
fn context_window(api: Api) -> u32 {
    match api {
        Api::OpenAi => OPENAI_CONTEXT,
        Api::Anthropic => ANTHROPIC_CONTEXT,
        Api::Gemini => GEMINI_CONTEXT,
        Api::Bedrock => ANTHROPIC_CONTEXT,
    }
}

// === typed errors: a row, rendered ===

/// The typed error `kind` in `api`'s shape.
pub(crate) fn typed(api: Api, kind: ErrorKind, ctx: &ErrorCtx) -> ErrorReply {
    let row = ROWS
        .iter()
        .find(|r| r.api == api && r.kinds.contains(&kind))
        .expect("every provider has a row for every kind (tested)");
    let model = ctx.model.as_deref().unwrap_or("mock-model");
    let secs = ctx.retry.secs;
    let text = |t: &str| render(t, model, secs, context_window(api), ctx.prompt_tokens);
    let mut headers = Vec::new();
    if row.retry_after {
        headers.push(("retry-after", ctx.retry.header()));
    }
    headers.extend(row.headers.iter().map(|&(name, value)| (name, text(value))));
    let body = match row.body {
        Body::OpenAi {
            message,
            kind,
            param,
            code,
        } => openai(&text(message), json!(kind), json!(param), json!(code)),
        Body::AzureContentFilter => azure_content_filter(),
        Body::Anthropic {
            kind,
            message,
            error_code,
        } => {
            let mut body = anthropic(kind, &text(message));
            if let Some(code) = error_code {
                body["error"]["details"] = json!({ "error_code": code });
            }
            body
        }
        Body::Gemini { message, details } => {
            let details = details.iter().map(|d| d.render(model, secs)).collect();
            gemini_error(row.status, &text(message), details)
        }
        Body::GeminiBlocked => super::gemini::blocked_body(model, ctx.prompt_tokens),
        Body::Bedrock { exception, message } => {
            headers.push(("x-amzn-errortype", bedrock::error_type_header(exception)));
            json!({ "message": text(message) })
        }
        Body::BedrockFiltered => bedrock::filtered_body(ctx.prompt_tokens),
    };
    if ctx.retry.explicit
        && !headers.iter().any(|(k, _)| *k == "retry-after")
        && !matches!(api, Api::Gemini | Api::Bedrock)
    {
        headers.push(("retry-after", ctx.retry.header()));
    }
    ErrorReply {
        status: StatusCode::from_u16(row.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        body,
        headers,
    }
}

impl Detail {
    fn render(&self, model: &str, secs: u32) -> Value {
        match self {
            Detail::QuotaPerMinute => gemini_quota(model, "Minute"),
            Detail::QuotaPerDay => gemini_quota(model, "Day"),
            Detail::RetryInfo => {
                google_rpc("RetryInfo", json!({ "retryDelay": format!("{secs}s") }))
            }
            Detail::ApiKeyInvalid => google_rpc(
                "ErrorInfo",
                json!({
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": { "service": "generativelanguage.googleapis.com" },
                }),
            ),
        }
    }
}

/// Azure OpenAI's content filter error: OpenAI's shape plus `status` and the `innererror`
/// that names the category.
fn azure_content_filter() -> Value {
    let safe = json!({ "filtered": false, "severity": "safe" });
    json!({ "error": {
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
    }})
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
        // An exception message in the event stream, named by its union member.
        Api::Bedrock => {
            let exception = e
                .headers
                .iter()
                .find(|(k, _)| *k == "x-amzn-errortype")
                .and_then(|(_, v)| v.split(':').next())
                .unwrap_or("InternalServerException");
            (
                Some(bedrock::stream_exception(exception)),
                json!({ "message": e.body["message"] }).to_string(),
            )
        }
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

    #[test]
    fn every_provider_has_one_row_per_kind() {
        for api in [Api::OpenAi, Api::Anthropic, Api::Gemini, Api::Bedrock] {
            for kind in ErrorKind::ALL {
                let rows = ROWS
                    .iter()
                    .filter(|r| r.api == api && r.kinds.contains(&kind))
                    .count();
                assert_eq!(rows, 1, "{api:?} {kind:?}");
            }
        }
    }
}
