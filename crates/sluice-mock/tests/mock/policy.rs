//! Faults for the gateway's policy stage: failing the first N requests, failing for a while,
//! flapping, resets and silence after the request was processed.

use std::time::Duration;

use sluice_mock::{CloseReason, Outcome};
use tokio::time::{sleep, timeout};

use crate::support::*;

const CHAT: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
const MSG: &str =
    r#"{"model":"claude","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#;
const GEN: &str = "/v1beta/models/g:generateContent";
const GEM: &str = r#"{"contents":[{"parts":[{"text":"hi"}]}]}"#;

async fn statuses_h1(
    mock: &sluice_mock::MockServer,
    path: &str,
    knobs: &str,
    body: &str,
    n: usize,
) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            h1(mock.addr(), request("POST", path, knobs, body))
                .await
                .status
                .as_u16(),
        );
    }
    out
}

#[tokio::test]
async fn fail_first_fails_n_then_succeeds_on_both_protocols() {
    let mock = mock("").await;
    assert_eq!(
        statuses_h1(&mock, "/v1/chat/completions", "fail_first=2", CHAT, 4).await,
        [503, 503, 200, 200]
    );
    // Another header value is another key: its own count, here over HTTP/2.
    let send = h2_connect(mock.addr()).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        let r = h2(
            &send,
            request("POST", "/v1/messages", "fail_first=2, tokens=3", MSG),
        )
        .await;
        if r.status == 503 {
            assert_eq!(
                r.json()["error"]["type"],
                "overloaded_error",
                "the provider's shape"
            );
            assert_eq!(r.headers["retry-after"], "1");
        }
        got.push(r.status.as_u16());
    }
    assert_eq!(got, [503, 503, 200]);
    let snap = mock.stats().snapshot();
    assert_eq!(snap.totals.faults, 4);
    assert_eq!(
        snap.requests
            .iter()
            .filter(|r| r.fault.as_deref() == Some("fail_first"))
            .count(),
        4
    );
}

#[tokio::test]
async fn fail_key_shares_a_counter_and_reset_restarts_it() {
    let mock = mock("").await;
    let a = h1(
        mock.addr(),
        request("POST", GEN, "fail_first=1, fail_key=k, tokens=1", GEM),
    )
    .await;
    let b = h1(
        mock.addr(),
        request("POST", GEN, "fail_first=1, fail_key=k, tokens=2", GEM),
    )
    .await;
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (503, 200));
    assert_eq!(a.json()["error"]["status"], "UNAVAILABLE");
    h1(mock.addr(), request("POST", "/__mock/reset", "", "")).await;
    let c = h1(
        mock.addr(),
        request("POST", GEN, "fail_first=1, fail_key=k", GEM),
    )
    .await;
    assert_eq!(c.status, 503, "reset restarts the counters");
}

#[tokio::test]
async fn fail_with_a_status_or_a_typed_error() {
    let mock = mock("").await;
    let r = h1(
        mock.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "fail_first=1, fail_with=429, retry_after=3",
            CHAT,
        ),
    )
    .await;
    assert_eq!(
        (
            r.status.as_u16(),
            r.headers["retry-after"].to_str().unwrap()
        ),
        (429, "3")
    );
    let r = h1(
        mock.addr(),
        request(
            "POST",
            "/v1/messages",
            "fail_first=1, fail_with=overloaded",
            MSG,
        ),
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["error"]["type"]),
        (529, &serde_json::json!("overloaded_error"))
    );
}

#[tokio::test]
async fn reset_before_headers_on_http1_closes_after_processing() {
    let mock = mock("").await;
    let mut send = h1_connect(mock.addr()).await;
    send.ready().await.unwrap();
    let (parts, body) =
        request("POST", "/v1/chat/completions", "reset_before_headers", CHAT).into_parts();
    let err = send
        .send_request(http::Request::from_parts(
            parts,
            http_body_util::Full::new(body),
        ))
        .await
        .expect_err("no response");
    assert!(
        err.is_incomplete_message() || err.is_closed() || err.is_canceled(),
        "{err:?}"
    );
    let snap = wait_for(mock.stats(), "aborted", |s| {
        s.requests
            .first()
            .is_some_and(|r| r.outcome == Outcome::Aborted)
    })
    .await;
    let rec = &snap.requests[0];
    assert_eq!(rec.fault.as_deref(), Some("reset_before_headers"));
    assert_eq!(
        &rec.body[..],
        CHAT.as_bytes(),
        "the request was read: it WAS processed"
    );
    assert_eq!(
        (rec.status, rec.bytes_sent, rec.first_byte_at),
        (0, 0, None)
    );
}

#[tokio::test]
async fn reset_before_headers_on_http2_is_internal_error() {
    let mock = mock("").await;
    let send = h2_connect(mock.addr()).await;
    let err = h2_send(
        &send,
        request("POST", "/v1/messages", "reset_before_headers", MSG),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.reason(),
        Some(h2::Reason::INTERNAL_ERROR),
        "not REFUSED_STREAM: processed"
    );
    let snap = mock.stats().snapshot();
    assert_eq!(snap.requests.len(), 1, "recorded as a processed request");
    assert_eq!(snap.requests[0].outcome, Outcome::Aborted);
    // The connection carries on.
    let r = h2(&send, request("POST", "/v1/messages", "", MSG)).await;
    assert_eq!(r.status, 200);
    // fail_with=reset is the same fault for the first N.
    let err = h2_send(
        &send,
        request("POST", "/v1/messages", "fail_first=1, fail_with=reset", MSG),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason(), Some(h2::Reason::INTERNAL_ERROR));
}

#[tokio::test]
async fn fail_with_close_drops_the_whole_connection() {
    let mock = mock("tokens=3, interval_ms=50").await;
    let send = h2_connect(mock.addr()).await;
    // A stream in flight on the same connection dies with it.
    let long = tokio::spawn({
        let send = send.clone();
        async move {
            let resp = h2_send(
                &send,
                request(
                    "POST",
                    "/v1/chat/completions",
                    "tokens=100",
                    r#"{"model":"m","stream":true}"#,
                ),
            )
            .await?;
            let mut body = resp.into_body();
            h2_chunks(&mut body).await
        }
    });
    wait_for(mock.stats(), "the long stream started", |s| {
        s.totals.requests == 1
    })
    .await;
    let err = h2_send(
        &send,
        request(
            "POST",
            "/v1/chat/completions",
            "fail_first=1, fail_with=close",
            CHAT,
        ),
    )
    .await
    .unwrap_err();
    assert!(
        err.reason().is_none() || err.is_io() || err.is_go_away(),
        "{err:?}"
    );
    assert!(
        long.await.unwrap().is_err(),
        "the stream in flight is cut too"
    );
    let snap = wait_for(mock.stats(), "closed", |s| {
        s.connections[0].closed_at.is_some()
    })
    .await;
    assert_eq!(
        snap.connections[0].close_reason,
        Some(CloseReason::FaultClose)
    );
    assert!(
        snap.requests.iter().all(|r| r.outcome == Outcome::Aborted),
        "the fault ended both, the client cancelled neither: {:?}",
        snap.requests.iter().map(|r| &r.outcome).collect::<Vec<_>>()
    );
    assert!(
        snap.connections[0].goaway_at.is_none(),
        "no GOAWAY: a crash, not a shutdown"
    );
    // HTTP/1.1: the connection is closed without a response (another key: its own count).
    let mut send = h1_connect(mock.addr()).await;
    send.ready().await.unwrap();
    let (parts, body) = request(
        "POST",
        "/v1/chat/completions",
        "fail_first=1, fail_with=close, fail_key=h1",
        CHAT,
    )
    .into_parts();
    assert!(send
        .send_request(http::Request::from_parts(
            parts,
            http_body_util::Full::new(body)
        ))
        .await
        .is_err());
}

#[tokio::test]
async fn silent_sends_nothing_until_the_client_leaves() {
    let mock = mock("").await;
    // HTTP/2: no headers arrive; dropping the response future resets the stream.
    let send = h2_connect(mock.addr()).await;
    let pending = h2_send(
        &send,
        request("POST", "/v1/chat/completions", "silent", CHAT),
    );
    assert!(
        timeout(Duration::from_millis(300), pending).await.is_err(),
        "nothing is sent"
    );
    let snap = wait_for(mock.stats(), "cancel seen", |s| {
        matches!(
            s.requests.first().map(|r| &r.outcome),
            Some(Outcome::Cancelled(_))
        )
    })
    .await;
    let rec = &snap.requests[0];
    assert_eq!(rec.fault.as_deref(), Some("silent"));
    assert_eq!(rec.outcome, Outcome::Cancelled("rst_stream".into()));
    assert_eq!(rec.bytes_sent, 0);
    // HTTP/1.1: the same; closing the connection is the client leaving.
    let mut send = h1_connect(mock.addr()).await;
    let fut = h1_send(
        &mut send,
        request(
            "POST",
            "/v1/messages",
            "fail_first=1, fail_with=silent",
            MSG,
        ),
    );
    assert!(timeout(Duration::from_millis(300), fut).await.is_err());
    drop(send);
    wait_for(mock.stats(), "h1 cancel seen", |s| {
        s.requests.len() == 2 && matches!(s.requests[1].outcome, Outcome::Cancelled(_))
    })
    .await;
}

#[tokio::test]
async fn fail_for_ms_fails_a_young_server() {
    let mock = mock("").await;
    h1(mock.addr(), request("POST", "/__mock/reset", "", "")).await;
    let first = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "fail_for_ms=400", CHAT),
    )
    .await;
    assert_eq!(first.status, 503);
    sleep(Duration::from_millis(450)).await;
    let later = h1(
        mock.addr(),
        request("POST", "/v1/chat/completions", "fail_for_ms=400", CHAT),
    )
    .await;
    assert_eq!(later.status, 200);
    let snap = mock.stats().snapshot();
    assert_eq!(snap.requests[0].fault.as_deref(), Some("fail_for_ms"));
}

#[tokio::test]
async fn flap_alternates_healthy_and_failing() {
    let mock = mock("").await;
    h1(mock.addr(), request("POST", "/__mock/reset", "", "")).await;
    let spec = "flap=600:600, fail_with=overloaded";
    let up = h1(mock.addr(), request("POST", "/v1/messages", spec, MSG)).await;
    assert_eq!(up.status, 200, "healthy first");
    sleep(Duration::from_millis(750)).await;
    let down = h1(mock.addr(), request("POST", "/v1/messages", spec, MSG)).await;
    assert_eq!(down.status, 529, "then failing");
    assert_eq!(
        mock.stats().snapshot().requests[1].fault.as_deref(),
        Some("flap")
    );
}

#[tokio::test]
async fn the_body_of_a_silent_http1_request_is_read_first() {
    // A large body is still read whole before the silence: the request WAS processed.
    let mock = mock("").await;
    let pad = "x".repeat(200_000);
    let body = format!(r#"{{"model":"m","pad":"{pad}"}}"#);
    let mut send = h1_connect(mock.addr()).await;
    let resp = timeout(
        Duration::from_millis(500),
        h1_send(
            &mut send,
            request("POST", "/v1/chat/completions", "silent", &body),
        ),
    )
    .await;
    assert!(resp.is_err(), "no response");
    let snap = wait_for(mock.stats(), "body recorded", |s| {
        s.requests.first().is_some_and(|r| !r.body.is_empty())
    })
    .await;
    let rec = &snap.requests[0];
    assert_eq!(rec.body.len(), 64 * 1024, "recorded up to the cap");
    assert!(rec.body_truncated);
    assert_eq!(
        rec.outcome,
        Outcome::InProgress,
        "silent until the client leaves"
    );
}
