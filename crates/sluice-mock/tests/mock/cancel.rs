//! Cancellation evidence: the mock records a client's departure within 100 ms, mid-stream and
//! during the time-to-first-token wait, on both protocols.

use std::time::Duration;

use http_body_util::BodyExt;
use sluice_mock::Outcome;
use tokio::time::{sleep, Instant};

use crate::support::*;

const STREAM: &str = r#"{"model":"m","stream":true}"#;
const LIMIT: Duration = Duration::from_millis(100);

fn cancelled(snap: &sluice_mock::Snapshot, id: u64) -> bool {
    snap.request(id)
        .is_some_and(|r| matches!(r.outcome, Outcome::Cancelled(_)))
}

async fn check_h1(knobs: &str, read_first: bool) {
    let mock = mock("").await;
    let mut send = h1_connect(mock.addr()).await;
    let resp = h1_send(
        &mut send,
        request("POST", "/v1/chat/completions", knobs, STREAM),
    )
    .await;
    let id: u64 = resp.headers()["x-mock-request-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut body = resp.into_body();
    if read_first {
        body.frame().await.unwrap().unwrap();
    }
    sleep(Duration::from_millis(50)).await;
    let t0 = Instant::now();
    drop(body);
    drop(send);
    let snap = wait_for(mock.stats(), "cancel recorded", |s| cancelled(s, id)).await;
    let rec = snap.request(id).unwrap();
    let lag = rec.cancelled_at.unwrap() - t0;
    assert!(lag < LIMIT, "cancel seen after {lag:?}");
    assert!(rec.finished_at.is_none());
}

async fn check_h2(knobs: &str, read_first: bool) {
    let mock = mock("").await;
    let send = h2_connect(mock.addr()).await;
    let resp = h2_send(
        &send,
        request("POST", "/v1/chat/completions", knobs, STREAM),
    )
    .await
    .unwrap();
    let id: u64 = resp.headers()["x-mock-request-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut body = resp.into_body();
    if read_first {
        body.data().await.unwrap().unwrap();
    }
    sleep(Duration::from_millis(50)).await;
    let t0 = Instant::now();
    drop(body); // RST_STREAM(CANCEL); the connection stays open
    let snap = wait_for(mock.stats(), "cancel recorded", |s| cancelled(s, id)).await;
    let rec = snap.request(id).unwrap();
    assert!(rec.cancelled_at.unwrap() - t0 < LIMIT);
    assert_eq!(rec.outcome, Outcome::Cancelled("rst_stream".into()));
    // The connection survives a cancelled stream.
    let r = h2(
        &send,
        request("POST", "/v1/chat/completions", "tokens=1", STREAM),
    )
    .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn http1_cancel_mid_stream() {
    check_h1("tokens=1000, interval_ms=20", true).await;
}

#[tokio::test]
async fn http1_cancel_during_first_token_wait() {
    check_h1("ttft_ms=5000", false).await;
}

#[tokio::test]
async fn http2_cancel_mid_stream() {
    check_h2("tokens=1000, interval_ms=20", true).await;
}

#[tokio::test]
async fn http2_cancel_during_first_token_wait() {
    check_h2("ttft_ms=5000", false).await;
}

#[tokio::test]
async fn http2_connection_close_cancels_every_stream() {
    let mock = mock("ttft_ms=5000").await;
    let tcp = tokio::net::TcpStream::connect(mock.addr()).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(conn);
    let (a, b) = tokio::join!(
        h2_send(&send, request("POST", "/v1/chat/completions", "", STREAM)),
        h2_send(&send, request("POST", "/v1/chat/completions", "", STREAM)),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let t0 = Instant::now();
    driver.abort(); // drops the TCP connection
    drop((a, b, send));
    let snap = wait_for(mock.stats(), "both cancelled", |s| {
        s.requests.len() == 2
            && s.requests
                .iter()
                .all(|r| matches!(r.outcome, Outcome::Cancelled(_)))
    })
    .await;
    for r in &snap.requests {
        assert!(r.cancelled_at.unwrap() - t0 < LIMIT);
    }
}

#[tokio::test]
async fn non_streaming_cancel_during_generation() {
    let mock = mock("ttft_ms=5000").await;
    let send = h2_connect(mock.addr()).await;
    let fut = h2_send(
        &send,
        request("POST", "/v1/chat/completions", "", r#"{"model":"m"}"#),
    );
    // The response future is pending (no headers until ttft); dropping it resets the stream.
    assert!(tokio::time::timeout(Duration::from_millis(100), fut)
        .await
        .is_err());
    let t0 = Instant::now();
    let snap = wait_for(mock.stats(), "cancel recorded", |s| {
        s.requests
            .first()
            .is_some_and(|r| matches!(r.outcome, Outcome::Cancelled(_)))
    })
    .await;
    assert!(snap.requests[0].cancelled_at.unwrap() - t0 < LIMIT);
}

#[tokio::test]
async fn http1_non_streaming_cancel_during_generation() {
    // hyper's HTTP/1.1 server keeps reading the socket while the service future is pending, so
    // a client that closes before any response byte is noticed too.
    let mock = mock("ttft_ms=5000").await;
    let mut send = h1_connect(mock.addr()).await;
    let fut = h1_send(
        &mut send,
        request("POST", "/v1/chat/completions", "", r#"{"model":"m"}"#),
    );
    assert!(tokio::time::timeout(Duration::from_millis(100), fut)
        .await
        .is_err());
    drop(send);
    let t0 = Instant::now();
    let snap = wait_for(mock.stats(), "cancel recorded", |s| {
        s.requests
            .first()
            .is_some_and(|r| matches!(r.outcome, Outcome::Cancelled(_)))
    })
    .await;
    assert!(snap.requests[0].cancelled_at.unwrap() - t0 < LIMIT);
}
