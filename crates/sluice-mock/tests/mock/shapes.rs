//! Every endpoint and shape, on both protocols.

use serde_json::Value;

use crate::support::*;

const CHAT: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;

/// Runs the same request over HTTP/1.1 and h2c and checks both give identical bytes.
async fn both(req: impl Fn() -> http::Request<bytes::Bytes>) -> Resp {
    let mock = mock("").await;
    let r1 = h1(mock.addr(), req()).await;
    let send = h2_connect(mock.addr()).await;
    let r2 = h2(&send, req()).await;
    assert_eq!(r1.status, r2.status);
    assert_eq!(
        r1.body, r2.body,
        "content must be a function of the request"
    );
    assert_eq!(r1.headers["content-type"], r2.headers["content-type"]);
    r1
}

#[tokio::test]
async fn chat_completion_non_streaming() {
    let r = both(|| request("POST", "/v1/chat/completions", "tokens=5", CHAT)).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-4o");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert!(!v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn chat_completion_stream_with_usage_and_done() {
    let body =
        r#"{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#;
    let r = both(|| request("POST", "/v1/chat/completions", "tokens=4", body)).await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let events = sse(&r.body);
    // role, 4 tokens, finish, usage, [DONE]
    assert_eq!(events.len(), 8, "{events:?}");
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let usage: Value = serde_json::from_str(&events[6].1).unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 4);
    assert_eq!(usage["choices"], serde_json::json!([]));
    let chunk: Value = serde_json::from_str(&events[1].1).unwrap();
    assert_eq!(chunk["object"], "chat.completion.chunk");
    assert_eq!(chunk["usage"], Value::Null);
}

#[tokio::test]
async fn chat_stream_without_usage_has_no_usage_field() {
    let body = r#"{"model":"m","stream":true}"#;
    let r = both(|| request("POST", "/v1/chat/completions", "tokens=2", body)).await;
    let events = sse(&r.body);
    assert_eq!(events.len(), 5);
    let chunk: Value = serde_json::from_str(&events[1].1).unwrap();
    assert!(chunk.get("usage").is_none());
}

#[tokio::test]
async fn chat_tool_call_deltas() {
    let body = r#"{"model":"m","stream":true}"#;
    let r = both(|| request("POST", "/v1/chat/completions", "tools=1, tokens=3", body)).await;
    let events = sse(&r.body);
    let mut args = String::new();
    let mut finish = None;
    for (_, data) in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(data).unwrap();
        if let Some(a) = v.pointer("/choices/0/delta/tool_calls/0/function/arguments") {
            args.push_str(a.as_str().unwrap());
        }
        if let Some(f) = v
            .pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
        {
            finish = Some(f.to_string());
        }
    }
    let parsed: Value = serde_json::from_str(&args).unwrap();
    assert!(parsed["query"].is_string());
    assert_eq!(finish.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn legacy_completions_both_ways() {
    let r = both(|| {
        request(
            "POST",
            "/v1/completions",
            "tokens=3",
            r#"{"model":"m","prompt":"x"}"#,
        )
    })
    .await;
    assert_eq!(r.json()["object"], "text_completion");
    let r = both(|| {
        request(
            "POST",
            "/v1/completions",
            "tokens=3",
            r#"{"model":"m","prompt":"x","stream":true}"#,
        )
    })
    .await;
    let events = sse(&r.body);
    assert_eq!(events.len(), 5);
    assert_eq!(events[4].1, "[DONE]");
}

#[tokio::test]
async fn embeddings_and_models() {
    let r = both(|| {
        request(
            "POST",
            "/v1/embeddings",
            "",
            r#"{"model":"e","input":["a","b"],"dimensions":3}"#,
        )
    })
    .await;
    let v = r.json();
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][1]["embedding"].as_array().unwrap().len(), 3);
    let r = both(|| request("GET", "/v1/models", "", "")).await;
    assert_eq!(r.json()["object"], "list");
    assert!(!r.json()["data"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn anthropic_messages_both_ways() {
    let body = r#"{"model":"claude","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = both(|| request("POST", "/v1/messages", "tokens=3", body)).await;
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["stop_reason"], "end_turn");
    let body = r#"{"model":"claude","max_tokens":100,"stream":true,"messages":[]}"#;
    let r = both(|| request("POST", "/v1/messages", "tokens=3", body)).await;
    let names: Vec<_> = sse(&r.body).into_iter().map(|(e, _)| e.unwrap()).collect();
    assert_eq!(names.first().unwrap(), "message_start");
    assert_eq!(
        names.iter().filter(|n| *n == "content_block_delta").count(),
        3
    );
    assert_eq!(names.last().unwrap(), "message_stop");
}

#[tokio::test]
async fn anthropic_errors_speak_anthropic() {
    let mock = mock("").await;
    let r = h1(
        mock.addr(),
        request("POST", "/v1/messages", "", r#"{"model":"c"}"#),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn responses_stream_ends_with_completed() {
    let body = r#"{"model":"m","input":"hi","stream":true}"#;
    let r = both(|| request("POST", "/v1/responses", "tokens=3", body)).await;
    let events = sse(&r.body);
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["status"], "completed");
    for (i, (name, data)) in events.iter().enumerate() {
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["type"].as_str(), name.as_deref());
        assert_eq!(v["sequence_number"], i);
    }
    let r = both(|| {
        request(
            "POST",
            "/v1/responses",
            "tokens=3",
            r#"{"model":"m","input":"hi"}"#,
        )
    })
    .await;
    assert_eq!(r.json()["object"], "response");
}

#[tokio::test]
async fn every_response_carries_a_request_id_and_stats_record_it() {
    let mock = mock("").await;
    let r = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "", CHAT),
    )
    .await;
    let id = r.request_id();
    let snap = mock.stats().snapshot();
    let rec = snap.request(id).unwrap();
    assert_eq!(rec.model.as_deref(), Some("gpt-4o"));
    assert_eq!(rec.path, "/v1/chat/completions");
    assert!(rec
        .headers
        .iter()
        .any(|(k, v)| k == "content-type" && v == "application/json"));
    assert_eq!(rec.outcome, sluice_mock::Outcome::Completed);
    let err = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "", "{"),
    )
    .await;
    assert_eq!(err.status, 400);
    assert!(err.request_id() > id);
}

#[tokio::test]
async fn bad_input_gets_a_400_that_says_what_is_wrong() {
    let mock = mock("").await;
    let cases = [
        ("{", "not valid JSON"),
        ("[1]", "JSON object"),
        (r#"{"messages":[]}"#, "model"),
    ];
    for (body, says) in cases {
        let r = h1(
            mock.addr(),
            request("POST", "/v1/chat/completions", "", body),
        )
        .await;
        assert_eq!(r.status, 400, "{body}");
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(says), "{body}: {msg}");
    }
    let r = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "tokens=many", CHAT),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("tokens"));
    let r = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "warp=9", CHAT),
    )
    .await;
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown x-mock key `warp`"));
    let r = h1(mock.addr(), request("POST", "/v2/nothing", "", CHAT)).await;
    assert_eq!(r.status, 404);
    let r = h1(mock.addr(), request("GET", "/v1/chat/completions", "", "")).await;
    assert_eq!(r.status, 405);
}

#[tokio::test]
async fn stats_and_reset_over_http() {
    let mock = mock("").await;
    h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "", CHAT),
    )
    .await;
    let send = h2_connect(mock.addr()).await;
    h2(&send, request("POST", "/v1/chat/completions", "", CHAT)).await;
    let stats = h1(mock.addr(), request("GET", "/__mock/stats", "", ""))
        .await
        .json();
    assert_eq!(stats["totals"]["requests"], 2);
    let protos: Vec<_> = stats["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["protocol"].as_str().unwrap().to_string())
        .collect();
    assert!(protos.contains(&"http/1.1".to_string()) && protos.contains(&"h2c".to_string()));
    assert_eq!(stats["requests"][0]["outcome"]["kind"], "completed");
    let totals = h1(mock.addr(), request("GET", "/__mock/stats?totals", "", ""))
        .await
        .json();
    assert_eq!(totals["totals"]["completed"], 2);
    assert_eq!(totals["totals"]["in_progress"], 0);
    assert!(totals.get("requests").is_none());
    let r = h2(&send, request("POST", "/__mock/reset", "", "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(mock.stats().snapshot().totals.requests, 0);
}
