//! Typed provider errors (`error=KIND`) and errors inside a 200 stream
//! (`stream_error_after=N:KIND`), in each provider's shape, on both protocols.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::support::*;

const CHAT: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
const MSG: &str =
    r#"{"model":"claude","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#;
const GEM: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
const GEN: &str = "/v1beta/models/gemini-2.5-flash:generateContent";
const GEN_SSE: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";

fn with_stream(body: &str) -> String {
    let mut v: Value = serde_json::from_str(body).unwrap();
    v["stream"] = json!(true);
    v.to_string()
}

/// Sends the request over HTTP/1.1 and h2c; both must answer the same status and body.
async fn both(path: &str, knobs: &str, body: &str) -> Resp {
    let mock = mock("").await;
    let r1 = h1(mock.addr(), request("POST", path, knobs, body)).await;
    let send = h2_connect(mock.addr()).await;
    let r2 = h2(&send, request("POST", path, knobs, body)).await;
    assert_eq!(r1.status, r2.status, "{path} {knobs}");
    assert_eq!(r1.body, r2.body, "{path} {knobs}");
    for h in ["retry-after", "x-ratelimit-remaining-requests"] {
        assert_eq!(r1.headers.get(h), r2.headers.get(h), "{h}");
    }
    let kind = knobs
        .split(',')
        .next()
        .unwrap()
        .trim()
        .strip_prefix("error=")
        .unwrap();
    let want = format!("error:{kind}");
    let snap = mock.stats().snapshot();
    for r in &snap.requests {
        assert_eq!(
            r.fault.as_deref(),
            Some(want.as_str()),
            "the fault is recorded"
        );
    }
    assert_eq!(snap.totals.faults, 2);
    r1
}

#[tokio::test]
async fn rate_limit_in_each_shape() {
    let r = both(
        "/v1/chat/completions",
        "error=rate_limit, retry_after=7",
        CHAT,
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers["retry-after"], "7");
    assert_eq!(r.headers["x-ratelimit-remaining-requests"], "0");
    let e = &r.json()["error"];
    assert_eq!(
        (e["code"].as_str(), e["type"].as_str()),
        (Some("rate_limit_exceeded"), Some("requests"))
    );
    assert!(e["message"].as_str().unwrap().contains("try again in 7s"));

    let r = both("/v1/messages", "error=rate_limit", MSG).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");

    let r = both(GEN, "error=rate_limit, retry_after=26", GEM).await;
    assert_eq!(r.status, 429);
    assert!(
        r.headers.get("retry-after").is_none(),
        "Gemini says it in the body"
    );
    let e = &r.json()["error"];
    assert_eq!(
        (e["code"].as_u64(), e["status"].as_str()),
        (Some(429), Some("RESOURCE_EXHAUSTED"))
    );
    let retry = e["details"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["@type"] == "type.googleapis.com/google.rpc.RetryInfo")
        .unwrap();
    assert_eq!(retry["retryDelay"], "26s");
}

#[tokio::test]
async fn retry_after_as_an_http_date() {
    let mock = mock("").await;
    let r = h1(
        mock.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "error=rate_limit, retry_after_date=120",
            CHAT,
        ),
    )
    .await;
    let at = httpdate::parse_http_date(r.headers["retry-after"].to_str().unwrap()).unwrap();
    let ahead = at.duration_since(SystemTime::now()).unwrap();
    assert!(
        ahead > Duration::from_secs(110) && ahead <= Duration::from_secs(121),
        "{ahead:?}"
    );
    // The status knob honours it too.
    let r = h1(
        mock.addr(),
        request(
            "POST",
            "/v1/messages",
            "status=503, retry_after_date=5",
            MSG,
        ),
    )
    .await;
    assert!(httpdate::parse_http_date(r.headers["retry-after"].to_str().unwrap()).is_ok());
}

#[tokio::test]
async fn overloaded_server_and_quota() {
    let r = both("/v1/messages", "error=overloaded", MSG).await;
    assert_eq!(r.status, 529);
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    let r = both("/v1/chat/completions", "error=overloaded", CHAT).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["type"], "server_error");
    let r = both(GEN, "error=overloaded", GEM).await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["error"]["status"]),
        (503, &json!("UNAVAILABLE"))
    );

    let r = both("/v1/chat/completions", "error=server", CHAT).await;
    assert_eq!(r.status, 500);
    let r = both("/v1/messages", "error=server", MSG).await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["error"]["type"]),
        (500, &json!("api_error"))
    );
    let r = both(GEN, "error=server", GEM).await;
    assert_eq!(r.json()["error"]["status"], "INTERNAL");

    let r = both("/v1/chat/completions", "error=quota", CHAT).await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["error"]["code"]),
        (429, &json!("insufficient_quota"))
    );
    assert!(
        r.headers.get("retry-after").is_none(),
        "a quota error is not retryable"
    );
    let r = both("/v1/messages", "error=quota", MSG).await;
    assert_eq!(
        r.json()["error"]["details"]["error_code"],
        "enforced_spend_limit_reached"
    );
    let r = both(GEN, "error=quota", GEM).await;
    let details = r.json()["error"]["details"].to_string();
    assert!(
        details.contains("QuotaFailure") && !details.contains("RetryInfo"),
        "{details}"
    );
}

#[tokio::test]
async fn context_length_in_each_shape() {
    let r = both("/v1/chat/completions", "error=context_length", CHAT).await;
    assert_eq!(r.status, 400);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "context_length_exceeded");
    assert_eq!(e["param"], "messages");
    assert_eq!(e["type"], "invalid_request_error");

    let r = both("/v1/messages", "error=context_length", MSG).await;
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let (n, max) = msg
        .strip_prefix("prompt is too long: ")
        .and_then(|m| m.strip_suffix(" maximum"))
        .and_then(|m| m.split_once(" tokens > "))
        .unwrap_or_else(|| panic!("{msg}"));
    assert!(n.parse::<u64>().unwrap() > max.parse::<u64>().unwrap());

    let r = both(GEN, "error=context_length", GEM).await;
    let e = &r.json()["error"];
    assert_eq!(
        (r.status.as_u16(), e["status"].as_str()),
        (400, Some("INVALID_ARGUMENT"))
    );
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("exceeds the maximum number of tokens allowed"));
}

#[tokio::test]
async fn content_filter_auth_invalid_not_found() {
    let r = both("/v1/chat/completions", "error=content_filter", CHAT).await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["error"]["code"]),
        (400, &json!("content_policy_violation"))
    );
    let r = both("/v1/chat/completions", "error=content_filter_azure", CHAT).await;
    let e = &r.json()["error"];
    assert_eq!(
        (e["code"].as_str(), e["innererror"]["code"].as_str()),
        (Some("content_filter"), Some("ResponsibleAIPolicyViolation"))
    );
    let r = both("/v1/messages", "error=content_filter", MSG).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "Output blocked by content filtering policy"
    );
    // Gemini blocks a prompt with a 200 and promptFeedback, no candidates.
    let r = both(GEN, "error=content_filter", GEM).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["promptFeedback"]["blockReason"], "SAFETY");
    assert!(v.get("candidates").is_none());
    let r = both(GEN_SSE, "error=content_filter", GEM).await;
    let events = sse(&r.body);
    assert_eq!(events.len(), 1);
    let v: Value = serde_json::from_str(&events[0].1).unwrap();
    assert_eq!(v["promptFeedback"]["blockReason"], "SAFETY");

    let r = both("/v1/chat/completions", "error=auth", CHAT).await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["error"]["code"]),
        (401, &json!("invalid_api_key"))
    );
    let r = both("/v1/messages", "error=auth", MSG).await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["error"]["type"]),
        (401, &json!("authentication_error"))
    );
    let r = both(GEN, "error=auth", GEM).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["details"][0]["reason"], "API_KEY_INVALID");

    let r = both(
        "/v1/responses",
        "error=invalid",
        r#"{"model":"m","input":"hi"}"#,
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["error"]["type"]),
        (400, &json!("invalid_request_error"))
    );
    let r = both("/v1/messages", "error=not_found", MSG).await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["error"]["message"]),
        (404, &json!("model: claude"))
    );
    let r = both(GEN, "error=not_found", GEM).await;
    assert_eq!(r.json()["error"]["status"], "NOT_FOUND");
}

/// A stream cut by `stream_error_after`: (events, the last event's name, its data).
async fn cut_stream(path: &str, knobs: &str, body: &str) -> Vec<(Option<String>, String)> {
    let mock = mock("tokens=10").await;
    let r1 = h1(mock.addr(), request("POST", path, knobs, body)).await;
    let send = h2_connect(mock.addr()).await;
    let r2 = h2(&send, request("POST", path, knobs, body)).await;
    assert_eq!(r1.status, 200);
    assert_eq!(r1.body, r2.body, "the cut is the same on both protocols");
    let snap = mock.stats().snapshot();
    for r in &snap.requests {
        assert_eq!(
            r.outcome,
            sluice_mock::Outcome::Completed,
            "the stream ends cleanly"
        );
        assert!(r.fault.as_deref().unwrap().starts_with("stream_error:"));
    }
    sse(&r1.body)
}

fn text_deltas(events: &[(Option<String>, String)], pointer: &str) -> usize {
    events
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
        .filter(|v| {
            v.pointer(pointer)
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty())
        })
        .count()
}

#[tokio::test]
async fn anthropic_error_event_after_content() {
    let events = cut_stream("/v1/messages", "stream_error_after=3", &with_stream(MSG)).await;
    assert_eq!(text_deltas(&events, "/delta/text"), 3);
    let (name, data) = events.last().unwrap();
    assert_eq!(name.as_deref(), Some("error"));
    let v: Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "overloaded_error");
    assert!(
        events
            .iter()
            .all(|(n, _)| n.as_deref() != Some("message_stop")),
        "no message_stop after the error"
    );
}

#[tokio::test]
async fn openai_error_data_event_after_content() {
    let events = cut_stream(
        "/v1/chat/completions",
        "stream_error_after=2:server",
        &with_stream(CHAT),
    )
    .await;
    assert_eq!(text_deltas(&events, "/choices/0/delta/content"), 2);
    let (name, data) = events.last().unwrap();
    assert_eq!(name, &None);
    let v: Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["error"]["type"], "server_error");
    assert!(events.iter().all(|(_, d)| d != "[DONE]"));
    // Responses: an `error` event with its sequence number.
    let events = cut_stream(
        "/v1/responses",
        "stream_error_after=1:rate_limit",
        r#"{"model":"m","input":"hi","stream":true}"#,
    )
    .await;
    let (name, data) = events.last().unwrap();
    assert_eq!(name.as_deref(), Some("error"));
    let v: Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["code"], "rate_limit_exceeded");
    assert_eq!(v["sequence_number"], events.len() - 1);
}

#[tokio::test]
async fn gemini_error_chunk_after_content() {
    let events = cut_stream(GEN_SSE, "stream_error_after=4:overloaded", GEM).await;
    assert_eq!(events.len(), 5);
    assert_eq!(
        text_deltas(&events, "/candidates/0/content/parts/0/text"),
        4
    );
    let v: Value = serde_json::from_str(&events[4].1).unwrap();
    assert_eq!(v["error"]["code"], 503);
    assert_eq!(v["error"]["status"], "UNAVAILABLE");
    assert!(
        events[4].1.starts_with(r#"{"error":"#),
        "the SDK spots errors by this prefix"
    );
}

#[tokio::test]
async fn error_after_more_events_than_content_comes_before_the_end() {
    let events = cut_stream("/v1/messages", "stream_error_after=99", &with_stream(MSG)).await;
    assert_eq!(text_deltas(&events, "/delta/text"), 10);
    assert_eq!(events.last().unwrap().0.as_deref(), Some("error"));
    assert!(events
        .iter()
        .all(|(n, _)| n.as_deref() != Some("message_delta")));
}

#[tokio::test]
async fn content_filter_mid_stream_is_the_filter_finish() {
    let events = cut_stream(
        "/v1/chat/completions",
        "stream_error_after=2:content_filter",
        &with_stream(CHAT),
    )
    .await;
    assert_eq!(text_deltas(&events, "/choices/0/delta/content"), 2);
    let finish: Vec<_> = events
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v.pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    assert_eq!(finish, ["content_filter"]);
    assert_eq!(events.last().unwrap().1, "[DONE]");

    let events = cut_stream(
        "/v1/messages",
        "stream_error_after=2:content_filter",
        &with_stream(MSG),
    )
    .await;
    let delta = events
        .iter()
        .find(|(n, _)| n.as_deref() == Some("message_delta"))
        .unwrap();
    let v: Value = serde_json::from_str(&delta.1).unwrap();
    assert_eq!(v["delta"]["stop_reason"], "refusal");

    let events = cut_stream(GEN_SSE, "stream_error_after=2:content_filter", GEM).await;
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "SAFETY");
    assert_eq!(
        text_deltas(&events, "/candidates/0/content/parts/0/text"),
        2
    );
}
