//! Every timeout, and every broken stream, ends with an explicit error: a provider-shaped 504 or
//! 502 before the response started, a final SSE error event after. Never a silent cut, never a
//! synthetic [DONE].

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::support::*;
use crate::{gateway, gateway_at, Setup, CHAT, STREAM};

fn last_error(body: &[u8]) -> (Option<String>, Value) {
    let (event, data) = sse(body).pop().expect("at least one event");
    (
        event,
        serde_json::from_str(&data).expect("the last event is JSON"),
    )
}

#[tokio::test]
async fn first_byte_timeout_on_a_stream_is_an_error_event() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            upstream: "timeouts = { first_byte = \"300ms\" }",
            ..Default::default()
        },
    )
    .await;
    let t0 = Instant::now();
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "ttft_ms=3000", STREAM),
    )
    .await;
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(
        r.status, 200,
        "the mock sent its headers at once; the first event never came"
    );
    let (_, err) = last_error(&r.body);
    assert_eq!(err["error"]["code"], "first_token_timeout");
    assert!(!String::from_utf8_lossy(&r.body).contains("[DONE]"));
    // The upstream was cancelled, not left running.
    wait_for(mock.stats(), "cancel", |s| {
        matches!(s.requests[0].outcome, sluice_mock::Outcome::Cancelled(_))
    })
    .await;
}

#[tokio::test]
async fn first_byte_timeout_before_headers_is_a_504() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            upstream: "timeouts = { first_byte = \"300ms\" }",
            ..Default::default()
        },
    )
    .await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "ttft_ms=3000", CHAT),
    )
    .await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"]["code"], "first_byte_timeout");
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/messages",
            "ttft_ms=3000",
            r#"{"model":"c","max_tokens":5}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"]["type"], "timeout_error");
}

#[tokio::test]
async fn idle_timeout_mid_stream_keeps_every_event_then_errors() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            upstream: "timeouts = { idle = \"300ms\" }",
            ..Default::default()
        },
    )
    .await;
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=5, stall_after=3:5000",
            STREAM,
        ),
    )
    .await;
    let events = sse(&r.body);
    assert_eq!(
        events.len(),
        4,
        "3 upstream events, then the error: {events:?}"
    );
    let (_, err) = last_error(&r.body);
    assert_eq!(err["error"]["code"], "idle_timeout");
    // Anthropic clients get `event: error`.
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/messages",
            "tokens=5, stall_after=3:5000",
            r#"{"model":"c","max_tokens":50,"stream":true}"#,
        ),
    )
    .await;
    let (event, err) = last_error(&r.body);
    assert_eq!(event.as_deref(), Some("error"));
    assert_eq!(err["type"], "error");
    assert_eq!(err["error"]["type"], "timeout_error");
}

#[tokio::test]
async fn total_timeout_ends_a_long_stream() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup { upstream: "timeouts = { total = \"500ms\", first_byte = \"400ms\", connect = \"200ms\", idle = \"400ms\" }", ..Default::default() }).await;
    let t0 = Instant::now();
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=100, interval_ms=50",
            STREAM,
        ),
    )
    .await;
    assert!(t0.elapsed() < Duration::from_secs(2));
    let (_, err) = last_error(&r.body);
    assert_eq!(err["error"]["code"], "total_timeout");
    assert!(sse(&r.body).len() > 3);
}

#[tokio::test]
async fn upstream_reset_mid_stream_keeps_the_last_event() {
    let mock = mock("").await;
    for protocol in ["h2c", "http1"] {
        let gw = gateway(
            &mock,
            Setup {
                protocol,
                ..Default::default()
            },
        )
        .await;
        let r = h1(
            gw.addr(),
            request(
                "POST",
                "/v1/chat/completions",
                "tokens=10, abort_after=4, interval_ms=10",
                STREAM,
            ),
        )
        .await;
        let events = sse(&r.body);
        assert_eq!(
            events.len(),
            5,
            "{protocol}: all 4 events the upstream sent, then the error"
        );
        let (_, err) = last_error(&r.body);
        assert_eq!(err["error"]["code"], "upstream_reset", "{protocol}");
    }
}

/// An upstream that closes in the middle of an event: the partial event is never forwarded.
#[tokio::test]
async fn upstream_eof_mid_event() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"b\":")
                    .await;
                let _ = s.shutdown().await;
            });
        }
    });
    let gw = gateway_at(
        &format!("http://{addr}/v1"),
        Setup {
            protocol: "http1",
            ..Default::default()
        },
    )
    .await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", STREAM),
    )
    .await;
    let body = String::from_utf8(r.body.to_vec()).unwrap();
    // The content event committed the stream; the cut after it is an error event.
    assert!(
        body.starts_with("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"),
        "{body}"
    );
    assert!(
        !body.contains("{\"b\":"),
        "a partial event must never reach the client: {body}"
    );
    let (_, err) = last_error(&r.body);
    assert_eq!(err["error"]["code"], "upstream_eof_mid_event");
}

#[tokio::test]
async fn black_hole_upstream_is_a_first_byte_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let gw = gateway_at(
        &format!("http://{addr}/v1"),
        Setup {
            upstream: "timeouts = { first_byte = \"300ms\" }",
            ..Default::default()
        },
    )
    .await;
    let t0 = Instant::now();
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 504);
    assert!(t0.elapsed() < Duration::from_secs(2));
    holder.abort();
}

#[tokio::test]
async fn oversized_event_ends_the_stream_with_an_error() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: "max_event_bytes = \"64KiB\"",
            ..Default::default()
        },
    )
    .await;
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=4, big_event=100000",
            STREAM,
        ),
    )
    .await;
    let (_, err) = last_error(&r.body);
    assert_eq!(err["error"]["code"], "event_too_large");
    assert!(r.body.len() < 60_000);
}

/// The `sequence_number`s of a Responses stream count every event from 0, and it ends with
/// `error` then `response.failed`, both carrying `code`.
fn assert_responses_failure(body: &[u8], code: &str) {
    let events = sse(body);
    assert!(events.len() > 3, "{}", String::from_utf8_lossy(body));
    for (i, (name, data)) in events.iter().enumerate() {
        let v: Value = serde_json::from_str(data).unwrap_or_else(|_| panic!("{data}"));
        assert_eq!(v["sequence_number"], i as u64, "numbered on: {data}");
        assert_eq!(name.as_deref(), v["type"].as_str(), "{data}");
    }
    let n = events.len();
    let error: Value = serde_json::from_str(&events[n - 2].1).unwrap();
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["code"], code, "{error}");
    let failed: Value = serde_json::from_str(&events[n - 1].1).unwrap();
    assert_eq!(failed["type"], "response.failed", "{failed}");
    assert_eq!(failed["response"]["status"], "failed");
    assert_eq!(failed["response"]["error"]["code"], code);
    let created: Value = serde_json::from_str(&events[0].1).unwrap();
    assert_eq!(
        failed["response"]["id"], created["response"]["id"],
        "the response the stream created"
    );
    assert!(
        !events.iter().any(|(_, d)| d.contains("\"choices\"")),
        "nothing in chat-completions shape: {events:?}"
    );
}

/// The gateway's own mid-stream errors (a stall past `idle`, the upstream cut) reach each
/// client in its own API: a Responses client gets `error` and `response.failed` numbered on
/// from its stream (passed through from an OpenAI-shaped upstream, or translated from
/// Anthropic's), a Gemini client a Gemini error chunk, whatever the upstream spoke.
#[tokio::test]
async fn gateway_errors_mid_stream_are_in_each_clients_api() {
    let mock = mock("").await;
    for provider in ["", "provider = \"anthropic\""] {
        let upstream = format!("timeouts = {{ idle = \"300ms\" }}\n{provider}");
        let gw = gateway(
            &mock,
            Setup {
                upstream: &upstream,
                ..Default::default()
            },
        )
        .await;
        let responses = r#"{"model":"gpt-4o","input":"hi","stream":true}"#;
        let r = h1(
            gw.addr(),
            request(
                "POST",
                "/v1/responses",
                "tokens=8, stall_after=5:5000",
                responses,
            ),
        )
        .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_responses_failure(&r.body, "idle_timeout");
        let r = h1(
            gw.addr(),
            request(
                "POST",
                "/v1/responses",
                "tokens=8, interval_ms=20, abort_after=5",
                responses,
            ),
        )
        .await;
        assert_responses_failure(&r.body, "upstream_reset");

        let gemini = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        let r = h1(
            gw.addr(),
            request(
                "POST",
                "/v1beta/models/gpt-4o:streamGenerateContent?alt=sse",
                "tokens=8, stall_after=5:5000",
                gemini,
            ),
        )
        .await;
        assert_eq!(r.status, 200);
        let events = sse(&r.body);
        assert!(events.len() > 1, "{events:?}");
        let (event, err) = last_error(&r.body);
        assert_eq!(event, None, "Gemini events are unnamed");
        assert_eq!(err["error"]["code"], 504, "{err}");
        assert_eq!(err["error"]["status"], "DEADLINE_EXCEEDED", "{err}");
        assert!(err["error"]["message"].is_string(), "{err}");
        for (_, data) in &events[..events.len() - 1] {
            let v: Value = serde_json::from_str(data).unwrap();
            assert!(v["candidates"].is_array(), "{data}");
        }
    }
}
