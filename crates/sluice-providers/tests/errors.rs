//! Upstream errors in every shape provider-formats.md §6 documents (sources beside each
//! case), classified; retry hints read from headers and bodies; errors inside 200 streams;
//! and the same errors re-expressed for clients of each family.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{json, Value};
use sluice_providers::error::{classify, classify_stream_error, client_error};
use sluice_providers::{ErrorClass, Family, ProviderError};
use sluice_sse::{Decoder, Item};

const NOW: u64 = 1_767_225_600;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).expect("header value"));
    }
    h
}

fn err(family: Family, status: u16, body: &Value) -> ProviderError {
    classify(
        family,
        StatusCode::from_u16(status).expect("status"),
        &HeaderMap::new(),
        body.to_string().as_bytes(),
        NOW,
    )
}

struct Case {
    family: Family,
    status: u16,
    body: Value,
    class: ErrorClass,
    code: Option<&'static str>,
}

fn case(
    family: Family,
    status: u16,
    body: Value,
    class: ErrorClass,
    code: Option<&'static str>,
) -> Case {
    Case {
        family,
        status,
        body,
        class,
        code,
    }
}

#[test]
fn openai_shapes() {
    use ErrorClass::*;
    let o = Family::OpenAi;
    let cases = [
        // https://github.com/chathub-dev/chathub/issues/126
        case(
            o,
            400,
            json!({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 8765 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            ContextLength,
            Some("context_length_exceeded"),
        ),
        // https://github.com/openai/codex/issues/88
        case(
            o,
            429,
            json!({"error": {"message": "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 28426, Requested 3148. Please try again in 1.574s.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}),
            RateLimited,
            Some("rate_limit_exceeded"),
        ),
        // https://github.com/TheR1D/shell_gpt/issues/653
        case(
            o,
            429,
            json!({"error": {"message": "Request too large for gpt-4 in organization org-x on tokens per min (TPM): Limit 10000, Requested 12000.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}),
            RateLimited,
            Some("rate_limit_exceeded"),
        ),
        // https://huggingface.co/spaces/microsoft/HuggingGPT/discussions/5
        case(
            o,
            429,
            json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}),
            QuotaExhausted,
            Some("insufficient_quota"),
        ),
        // Quota with `code: null` (whether OpenAI fills `code` is unconfirmed, §10).
        case(
            o,
            429,
            json!({"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota", "param": null, "code": null}}),
            QuotaExhausted,
            Some("insufficient_quota"),
        ),
        // LL exception_mapping_utils.py: content_policy_violation
        case(
            o,
            400,
            json!({"error": {"message": "Your request was rejected as a result of our safety system.", "type": "invalid_request_error", "param": null, "code": "content_policy_violation"}}),
            ContentFiltered,
            Some("content_policy_violation"),
        ),
        // Azure content filter (LL exception_mapping_utils.py: content_filter / ResponsibleAIPolicyViolation)
        case(
            o,
            400,
            json!({"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.", "type": null, "param": "prompt", "code": "content_filter", "status": 400, "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {"hate": {"filtered": true, "severity": "high"}}}}}),
            ContentFiltered,
            Some("content_filter"),
        ),
        // OPY _make_status_error: 401, 403, 404, 409, 422, ≥500
        case(
            o,
            401,
            json!({"error": {"message": "Incorrect API key provided: sk-abc***xyz.", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}),
            Auth,
            Some("invalid_api_key"),
        ),
        case(
            o,
            403,
            json!({"error": {"message": "Project does not have access to model gpt-5", "type": "invalid_request_error", "param": null, "code": "model_not_found"}}),
            Auth,
            Some("model_not_found"),
        ),
        case(
            o,
            404,
            json!({"error": {"message": "The model `gpt-9` does not exist or you do not have access to it.", "type": "invalid_request_error", "param": null, "code": "model_not_found"}}),
            InvalidRequest,
            Some("model_not_found"),
        ),
        case(
            o,
            422,
            json!({"error": {"message": "Unprocessable", "type": "invalid_request_error", "param": null, "code": null}}),
            InvalidRequest,
            Some("invalid_request_error"),
        ),
        case(
            o,
            500,
            json!({"error": {"message": "The server had an error while processing your request. Sorry about that!", "type": "server_error", "param": null, "code": null}}),
            ServerError,
            Some("server_error"),
        ),
        case(
            o,
            503,
            json!({"error": {"message": "The engine is currently overloaded, please try again later", "type": "server_error", "param": null, "code": null}}),
            Overloaded,
            Some("server_error"),
        ),
        // vLLM's shape (VL): top-level message/type/code.
        case(
            o,
            400,
            json!({"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.", "type": "BadRequestError", "param": null, "code": 400}),
            ContextLength,
            Some("BadRequestError"),
        ),
    ];
    check(cases);
}

#[test]
fn anthropic_shapes() {
    use ErrorClass::*;
    let a = Family::Anthropic;
    let e = |kind: &str, message: &str| json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"});
    let cases = [
        // https://docs.claude.com/en/api/errors (and APY _client.py)
        case(a, 400, e("invalid_request_error", "messages: text content blocks must be non-empty"), InvalidRequest, Some("invalid_request_error")),
        case(a, 401, e("authentication_error", "invalid x-api-key"), Auth, Some("authentication_error")),
        case(a, 402, e("billing_error", "Your credit balance is too low"), QuotaExhausted, Some("billing_error")),
        case(a, 403, e("permission_error", "Your API key does not have permission to use the specified resource."), Auth, Some("permission_error")),
        case(a, 404, e("not_found_error", "model: claude-9"), InvalidRequest, Some("not_found_error")),
        case(a, 413, e("request_too_large", "Request exceeds the maximum allowed number of bytes."), InvalidRequest, Some("request_too_large")),
        case(a, 429, e("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"), RateLimited, Some("rate_limit_error")),
        case(a, 500, e("api_error", "Internal server error"), ServerError, Some("api_error")),
        case(a, 529, e("overloaded_error", "Overloaded"), Overloaded, Some("overloaded_error")),
        // https://github.com/whoz-oss/coday/issues/26
        case(a, 400, e("invalid_request_error", "prompt is too long: 207791 tokens > 200000 maximum"), ContextLength, Some("invalid_request_error")),
        case(a, 400, e("invalid_request_error", "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, decrease input length or `max_tokens` and try again"), ContextLength, Some("invalid_request_error")),
        // provider-formats §6 (Anthropic: "Output blocked by content filtering policy")
        case(a, 400, e("invalid_request_error", "Output blocked by content filtering policy"), ContentFiltered, Some("invalid_request_error")),
        // Spend limit: https://learn.microsoft.com/ko-kr/microsoft-cloud/dev/dev-proxy/concepts/anthropic-529-overloaded-error
        case(a, 429, json!({"type": "error", "error": {"type": "rate_limit_error", "message": "You have reached your specified API usage limits.", "details": {"error_code": "enforced_spend_limit_reached"}}}), QuotaExhausted, Some("enforced_spend_limit_reached")),
    ];
    check(cases);
}

#[test]
fn gemini_shapes() {
    use ErrorClass::*;
    let g = Family::Gemini;
    let e = |code: u16, status: &str, message: &str, details: Value| json!({"error": {"code": code, "message": message, "status": status, "details": details}});
    let cases = [
        // https://ai.google.dev/gemini-api/docs/troubleshooting ; GPY errors.py
        case(g, 400, e(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}}])), Auth, Some("INVALID_ARGUMENT")),
        // https://github.com/router-for-me/CLIProxyAPI/issues/97
        case(g, 400, e(400, "INVALID_ARGUMENT", "Invalid JSON payload received. Unknown name \"additionalProperties\" at 'tools[0].function_declarations[0].parameters': Cannot find field.", json!([{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [{"field": "tools[0].function_declarations[0].parameters", "description": "Invalid JSON payload received."}]}])), InvalidRequest, Some("INVALID_ARGUMENT")),
        case(g, 400, e(400, "FAILED_PRECONDITION", "User location is not supported for the API use.", json!([])), InvalidRequest, Some("FAILED_PRECONDITION")),
        // LL exception_mapping_utils.py: "exceeds the maximum number of tokens allowed"
        case(g, 400, e(400, "INVALID_ARGUMENT", "The input token count (1234567) exceeds the maximum number of tokens allowed (1048576).", json!([])), ContextLength, Some("INVALID_ARGUMENT")),
        case(g, 403, e(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers.", json!([])), Auth, Some("PERMISSION_DENIED")),
        case(g, 404, e(404, "NOT_FOUND", "models/gemini-9 is not found for API version v1beta.", json!([])), InvalidRequest, Some("NOT_FOUND")),
        // https://github.com/musistudio/claude-code-router/issues/187 (per-minute quota, RetryInfo)
        case(g, 429, e(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details.", json!([
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"}, "quotaValue": "15"}]},
            {"@type": "type.googleapis.com/google.rpc.Help", "links": [{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "26s"}
        ])), RateLimited, Some("RESOURCE_EXHAUSTED")),
        // https://github.com/RooCodeInc/Roo-Code/issues/3883 (per-day quota)
        case(g, 429, e(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details.", json!([
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "quotaValue": "1500"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "52s"}
        ])), QuotaExhausted, Some("RESOURCE_EXHAUSTED")),
        case(g, 500, e(500, "INTERNAL", "An internal error has occurred.", json!([])), ServerError, Some("INTERNAL")),
        case(g, 503, e(503, "UNAVAILABLE", "The model is overloaded. Please try again later.", json!([])), Overloaded, Some("UNAVAILABLE")),
        case(g, 504, e(504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete.", json!([])), ServerError, Some("DEADLINE_EXCEEDED")),
        // The streaming endpoint without alt=sse wraps the error (GPY _api_client.py).
        case(g, 429, json!([{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}}]), RateLimited, Some("RESOURCE_EXHAUSTED")),
        // Content filter: HTTP 200 + promptFeedback.blockReason (GPY GenerateContentResponsePromptFeedback).
        case(g, 200, json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 8}}), ContentFiltered, None),
        case(g, 200, json!({"candidates": [{"finishReason": "SAFETY", "index": 0}]}), ContentFiltered, None),
    ];
    check(cases);
}

fn check(cases: impl IntoIterator<Item = Case>) {
    for c in cases {
        let e = err(c.family, c.status, &c.body);
        assert_eq!(e.class, c.class, "{}", c.body);
        assert_eq!(e.code.as_deref(), c.code, "{}", c.body);
        assert_eq!(e.status.as_u16(), c.status);
        let message = c
            .body
            .pointer("/error/message")
            .or_else(|| c.body.get("message"))
            .or_else(|| c.body.pointer("/0/error/message"));
        if let Some(m) = message {
            assert_eq!(e.message, m.as_str().unwrap_or_default(), "{}", c.body);
        }
    }
}

#[test]
fn retry_hints() {
    let body =
        br#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#;
    let at = |h: &HeaderMap| {
        classify(Family::OpenAi, StatusCode::TOO_MANY_REQUESTS, h, body, NOW).retry_after
    };
    assert_eq!(
        at(&headers(&[("retry-after-ms", "1574")])),
        Some(Duration::from_millis(1574))
    );
    assert_eq!(
        at(&headers(&[("retry-after", "30")])),
        Some(Duration::from_secs(30))
    );
    // retry-after-ms wins, as in the SDKs (OPY/APY _base_client.py).
    assert_eq!(
        at(&headers(&[
            ("retry-after-ms", "250"),
            ("retry-after", "30")
        ])),
        Some(Duration::from_millis(250))
    );
    // An HTTP date, two minutes from now; one in the past is no wait.
    let date = httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(NOW + 120));
    assert_eq!(
        at(&headers(&[("retry-after", &date)])),
        Some(Duration::from_secs(120))
    );
    let past = httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(NOW - 120));
    assert_eq!(
        at(&headers(&[("retry-after", &past)])),
        Some(Duration::ZERO)
    );
    assert_eq!(at(&headers(&[("retry-after", "soon")])), None);
    assert_eq!(at(&HeaderMap::new()), None);

    // Gemini's RetryInfo in the body; a header still wins.
    let g =
        json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "x", "details": [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}
        ]}})
        .to_string();
    let e = classify(
        Family::Gemini,
        StatusCode::TOO_MANY_REQUESTS,
        &HeaderMap::new(),
        g.as_bytes(),
        NOW,
    );
    assert_eq!(e.retry_after, Some(Duration::from_millis(1500)));
    let e = classify(
        Family::Gemini,
        StatusCode::TOO_MANY_REQUESTS,
        &headers(&[("retry-after", "3")]),
        g.as_bytes(),
        NOW,
    );
    assert_eq!(e.retry_after, Some(Duration::from_secs(3)));
}

#[test]
fn messages_are_bounded_and_bodies_need_not_be_json() {
    let long = "é".repeat(3000);
    let e = err(
        Family::OpenAi,
        400,
        &json!({"error": {"message": long, "type": "invalid_request_error"}}),
    );
    assert!(e.message.len() <= 1024 && e.message.len() >= 1022);
    assert!(e.message.chars().all(|c| c == 'é'));

    let html = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>";
    let e = classify(
        Family::Anthropic,
        StatusCode::BAD_GATEWAY,
        &HeaderMap::new(),
        html,
        NOW,
    );
    assert_eq!(
        (e.class, e.message.as_str()),
        (
            ErrorClass::ServerError,
            "the upstream answered 502 Bad Gateway"
        )
    );
    let e = classify(
        Family::OpenAi,
        StatusCode::SERVICE_UNAVAILABLE,
        &HeaderMap::new(),
        b"upstream connect error or disconnect/reset before headers",
        NOW,
    );
    assert_eq!((e.class, e.code.as_deref()), (ErrorClass::Overloaded, None));
    assert_eq!(
        e.message,
        "upstream connect error or disconnect/reset before headers"
    );
    let e = classify(
        Family::OpenAi,
        StatusCode::REQUEST_TIMEOUT,
        &HeaderMap::new(),
        b"",
        NOW,
    );
    assert_eq!(
        (e.class, e.message.as_str()),
        (
            ErrorClass::ServerError,
            "the upstream answered 408 Request Timeout"
        )
    );
    // FastAPI-style servers.
    let e = err(Family::OpenAi, 422, &json!({"detail": "model is required"}));
    assert_eq!(
        (e.class, e.message.as_str()),
        (ErrorClass::InvalidRequest, "model is required")
    );
}

fn event(raw: &str) -> sluice_sse::Event {
    let mut d = Decoder::new();
    d.feed(Bytes::from(raw.to_string()));
    d.finish();
    match d.next_item() {
        Some(Ok(Item::Event(e))) => e,
        other => panic!("not an event: {other:?}"),
    }
}

#[test]
fn errors_inside_streams() {
    // OPY _streaming.py: a `data:` JSON with an "error" key.
    let e = classify_stream_error(
        Family::OpenAi,
        &event("data: {\"error\":{\"message\":\"The server had an error while processing your request. Sorry about that!\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"),
    )
    .expect("an error");
    assert_eq!((e.class, e.status.as_u16()), (ErrorClass::ServerError, 500));

    // https://docs.claude.com/en/api/messages-streaming: "would normally correspond to an HTTP 529"
    let e = classify_stream_error(
        Family::Anthropic,
        &event("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"),
    )
    .expect("an error");
    assert_eq!(
        (e.class, e.status.as_u16(), e.message.as_str()),
        (ErrorClass::Overloaded, 529, "Overloaded")
    );
    assert!(e.class.is_retryable());

    // Gemini error chunk (GPY _api_client.py / errors.py).
    let e = classify_stream_error(
        Family::Gemini,
        &event("data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\n\n"),
    )
    .expect("an error");
    assert_eq!(
        (e.class, e.status.as_u16(), e.code.as_deref()),
        (ErrorClass::Overloaded, 503, Some("UNAVAILABLE"))
    );
    let e = classify_stream_error(
        Family::Gemini,
        &event("data: [{\"error\":{\"code\":429,\"message\":\"Resource exhausted\",\"status\":\"RESOURCE_EXHAUSTED\"}}]\n\n"),
    )
    .expect("an error");
    assert_eq!((e.class, e.status.as_u16()), (ErrorClass::RateLimited, 429));

    // A named error event with plain text.
    let e = classify_stream_error(
        Family::OpenAi,
        &event("event: error\ndata: upstream went away\n\n"),
    )
    .expect("an error");
    assert_eq!(
        (e.class, e.status.as_u16(), e.message.as_str()),
        (ErrorClass::ServerError, 500, "upstream went away")
    );

    // Content is not an error, even when it says "error".
    for (family, raw) in [
        (Family::OpenAi, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"error\"},\"finish_reason\":null}]}\n\n"),
        (Family::OpenAi, "data: {\"choices\":[{\"delta\":{\"content\":\"an \\\"error\\\": here\"}}]}\n\n"),
        (Family::OpenAi, "data: [DONE]\n\n"),
        (Family::Anthropic, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"error\"}}\n\n"),
        (Family::Anthropic, "event: ping\ndata: {\"type\": \"ping\"}\n\n"),
        (Family::Gemini, "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"error\"}]}}]}\n\n"),
    ] {
        assert_eq!(classify_stream_error(family, &event(raw)), None, "{raw}");
    }
}

fn body(b: &Bytes) -> Value {
    serde_json::from_slice(b).expect("JSON")
}

#[test]
fn errors_in_the_clients_family() {
    // Anthropic's 529 has no OpenAI or Gemini equivalent: 503.
    let overloaded = err(
        Family::Anthropic,
        529,
        &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    let (s, b) = client_error(Family::OpenAi, &overloaded);
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        body(&b),
        json!({"error": {"message": "Overloaded", "type": "server_error", "param": null, "code": "overloaded_error"}})
    );
    let (s, b) = client_error(Family::Anthropic, &overloaded);
    assert_eq!(s.as_u16(), 529);
    assert_eq!(
        body(&b),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    assert!(
        b.starts_with(b"{\"type\":\"error\""),
        "Anthropic's key order"
    );
    let (s, b) = client_error(Family::Gemini, &overloaded);
    assert_eq!(
        (s.as_u16(), body(&b)["error"]["status"].clone()),
        (503, json!("UNAVAILABLE"))
    );

    // A context overflow from Gemini speaks OpenAI's code to OpenAI clients.
    let ctx = err(
        Family::Gemini,
        400,
        &json!({"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "The input token count (1234567) exceeds the maximum number of tokens allowed (1048576)."}}),
    );
    let (s, b) = client_error(Family::OpenAi, &ctx);
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(body(&b)["error"]["code"], "context_length_exceeded");
    assert_eq!(body(&b)["error"]["type"], "invalid_request_error");

    // Quota: OpenAI's type; Anthropic's billing 402 is a 429 for OpenAI clients.
    let billing = err(
        Family::Anthropic,
        402,
        &json!({"type": "error", "error": {"type": "billing_error", "message": "Your credit balance is too low"}}),
    );
    let (s, b) = client_error(Family::OpenAi, &billing);
    assert_eq!(
        (s.as_u16(), body(&b)["error"]["type"].clone()),
        (429, json!("insufficient_quota"))
    );
    let (s, b) = client_error(Family::Anthropic, &billing);
    assert_eq!(
        (s.as_u16(), body(&b)["error"]["type"].clone()),
        (402, json!("billing_error"))
    );
    let quota = err(
        Family::OpenAi,
        429,
        &json!({"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota", "code": "insufficient_quota"}}),
    );
    let (s, b) = client_error(Family::Anthropic, &quota);
    assert_eq!(
        (s.as_u16(), body(&b)["error"]["type"].clone()),
        (429, json!("rate_limit_error"))
    );

    // The gateway's credentials are not the client's business (OpenAI echoes part of the key).
    let auth = err(
        Family::OpenAi,
        401,
        &json!({"error": {"message": "Incorrect API key provided: sk-abc***xyz.", "type": "invalid_request_error", "code": "invalid_api_key"}}),
    );
    for f in [Family::OpenAi, Family::Anthropic, Family::Gemini] {
        let (s, b) = client_error(f, &auth);
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        assert!(!String::from_utf8_lossy(&b).contains("sk-"), "{f:?}");
    }

    // An error event in a 200 stream never reaches a client as a 2xx.
    let mut in_stream = overloaded.clone();
    in_stream.status = StatusCode::OK;
    assert_eq!(
        client_error(Family::OpenAi, &in_stream).0,
        StatusCode::BAD_GATEWAY
    );
}
