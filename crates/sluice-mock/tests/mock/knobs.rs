//! Every behaviour knob, observed from the client side.

use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::Value;
use tokio::time::Instant;

use crate::support::*;

const STREAM: &str = r#"{"model":"m","stream":true}"#;
const CHAT: &str = r#"{"model":"m"}"#;

#[tokio::test]
async fn ttft_and_interval_shape_the_timing() {
    let mock = mock("").await;
    let mut send = h1_connect(mock.addr()).await;
    let t0 = Instant::now();
    let resp = h1_send(
        &mut send,
        request(
            "POST",
            "/v1/chat/completions",
            "ttft_ms=300, tokens=3, interval_ms=100",
            STREAM,
        ),
    )
    .await;
    let mut body = resp.into_body();
    let mut arrivals = Vec::new();
    while let Some(f) = body.frame().await {
        if f.unwrap().data_ref().is_some_and(|d| !d.is_empty()) {
            arrivals.push(t0.elapsed());
        }
    }
    assert!(arrivals[0] >= Duration::from_millis(300), "{arrivals:?}");
    // role + 3 tokens + finish + [DONE] = 6 events, 5 gaps of 100 ms after the first.
    assert!(
        arrivals.len() >= 6,
        "events must be flushed one by one: {arrivals:?}"
    );
    let total = *arrivals.last().unwrap() - arrivals[0];
    assert!(total >= Duration::from_millis(500), "{arrivals:?}");
}

#[tokio::test]
async fn non_streaming_ttft_delays_the_headers() {
    let mock = mock("").await;
    let t0 = Instant::now();
    let r = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "ttft_ms=250", CHAT),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(t0.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn token_bytes_big_event_and_body_bytes_size_the_output() {
    let mock = mock("").await;
    let r = h1(
        mock.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=4, token_bytes=50",
            STREAM,
        ),
    )
    .await;
    for (_, data) in &sse(&r.body)[1..5] {
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(
            v["choices"][0]["delta"]["content"].as_str().unwrap().len(),
            50
        );
    }
    let r = h1(
        mock.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=4, big_event=1048576",
            STREAM,
        ),
    )
    .await;
    let biggest = sse(&r.body).iter().map(|(_, d)| d.len()).max().unwrap();
    assert!(biggest > 1_048_576, "{biggest}");
    let send = h2_connect(mock.addr()).await;
    let r = h2(
        &send,
        request("POST", "/v1/chat/completions", "body_bytes=20000000", CHAT),
    )
    .await;
    assert!(r.body.len() >= 20_000_000);
    assert_eq!(
        r.headers["content-length"],
        r.body.len().to_string().as_str()
    );
    assert_eq!(r.json()["object"], "chat.completion");
}

#[tokio::test]
async fn max_tokens_caps_like_a_model() {
    let mock = mock("tokens=50").await;
    let r = h1(
        mock.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "",
            r#"{"model":"m","max_tokens":3}"#,
        ),
    )
    .await;
    assert_eq!(r.json()["usage"]["completion_tokens"], 3);
    assert_eq!(r.json()["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn status_knob_returns_provider_errors() {
    let mock = mock("").await;
    let r = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "status=429", CHAT),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.json()["error"]["type"], "rate_limit_exceeded");
    let r = h1(
        mock.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "status=503, retry_after=7",
            CHAT,
        ),
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.headers["retry-after"], "7");
    let r = h1(
        mock.addr(),
        request(
            "POST",
            "/v1/messages",
            "status=500",
            r#"{"model":"c","max_tokens":1}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"]["type"], "api_error");
}

#[tokio::test]
async fn require_header_gives_a_missing_session_error() {
    let mock = mock("require_header=x-session-id").await;
    let r = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "", CHAT),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], "missing_session_id");
    let mut req = request("POST", "/v1/chat/completions", "", CHAT);
    req.headers_mut()
        .insert("x-session-id", "s-1".parse().unwrap());
    assert_eq!(h1(mock.addr(), req).await.status, 200);
}

#[tokio::test]
async fn line_endings() {
    let mock = mock("tokens=2").await;
    let lf = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "", STREAM),
    )
    .await
    .body;
    for (knob, eol) in [("line_ending=crlf", "\r\n"), ("line_ending=cr", "\r")] {
        let body = h1(
            mock.addr(),
            request("POST", "/v1/chat/completions", knob, STREAM),
        )
        .await
        .body;
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(
            text.ends_with(&format!("data: [DONE]{eol}{eol}")),
            "{text:?}"
        );
        if eol == "\r" {
            assert!(!text.contains('\n'));
        }
        assert_eq!(text.replace(eol, "\n").as_bytes(), &lf[..]);
    }
}

#[tokio::test]
async fn heartbeats_while_waiting_for_the_first_token() {
    let mock = mock("").await;
    let r = h1(
        mock.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "ttft_ms=550, heartbeat_ms=100, tokens=1",
            STREAM,
        ),
    )
    .await;
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    let pings = text.matches(": ping\n").count();
    assert!((4..=6).contains(&pings), "{pings} pings in {text:?}");
    assert!(text.starts_with(": ping\n"));
}

#[tokio::test]
async fn split_writes_small_data_frames() {
    let mock = mock("tokens=3").await;
    let send = h2_connect(mock.addr()).await;
    let resp = h2_send(
        &send,
        request("POST", "/v1/chat/completions", "split=7", STREAM),
    )
    .await
    .unwrap();
    let mut body = resp.into_body();
    let chunks = h2_chunks(&mut body).await.unwrap();
    assert!(
        chunks.iter().all(|c| c.len() <= 7),
        "{:?}",
        chunks.iter().map(|c| c.len()).collect::<Vec<_>>()
    );
    let whole: Vec<u8> = chunks.concat();
    let plain = h2(&send, request("POST", "/v1/chat/completions", "", STREAM))
        .await
        .body;
    assert_eq!(&whole[..], &plain[..]);
}

#[tokio::test]
async fn malformed_event_is_cut_json() {
    let mock = mock("tokens=3").await;
    let r = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "malformed=2", STREAM),
    )
    .await;
    let events = sse(&r.body);
    assert!(serde_json::from_str::<Value>(&events[2].1).is_err());
    assert!(serde_json::from_str::<Value>(&events[1].1).is_ok());
    assert_eq!(events.len(), 6);
}

#[tokio::test]
async fn slow_read_throttles_the_request_body() {
    let mock = mock("").await;
    let pad = "x".repeat(4000);
    let body = format!(r#"{{"model":"m","pad":"{pad}"}}"#);
    for h2c in [false, true] {
        let t0 = Instant::now();
        let req = request("POST", "/v1/chat/completions", "slow_read=10000", &body);
        let r = if h2c {
            h2(&h2_connect(mock.addr()).await, req).await
        } else {
            h1(mock.addr(), req).await
        };
        assert_eq!(r.status, 200);
        assert!(
            t0.elapsed() >= Duration::from_millis(350),
            "h2c={h2c}: {:?}",
            t0.elapsed()
        );
    }
}
