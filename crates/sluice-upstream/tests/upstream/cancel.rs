//! Cancellation by ownership: dropping the `send` future or the body cancels the upstream
//! request within 100 ms; HTTP/2 keeps its connection, HTTP/1.1 discards it.

use std::time::Duration;

use http_body_util::BodyExt;
use sluice_mock::{MockServer, Outcome, Snapshot};
use sluice_upstream::{Protocol, Upstream};
use tokio::time::Instant;

use crate::support::*;

const LIMIT: Duration = Duration::from_millis(100);

fn cancelled(s: &Snapshot, id: u64) -> bool {
    s.request(id)
        .is_some_and(|r| matches!(r.outcome, Outcome::Cancelled(_)))
}

/// Asserts the mock saw request `id` cancelled within LIMIT of `t0`, returns its conn id.
async fn assert_cancelled(mock: &MockServer, id: u64, t0: Instant, protocol: Protocol) -> u64 {
    let snap = wait_for(mock.stats(), "cancel recorded", |s| cancelled(s, id)).await;
    let rec = snap.request(id).unwrap();
    let lag = rec.cancelled_at.unwrap() - t0;
    assert!(lag < LIMIT, "cancel seen after {lag:?}");
    assert!(
        rec.finished_at.is_none(),
        "the request must not have completed"
    );
    if protocol != Protocol::Http1 {
        assert_eq!(rec.outcome, Outcome::Cancelled("rst_stream".into()));
    }
    rec.conn_id
}

/// After a cancel: h2 reuses the connection, HTTP/1.1 opens a new one.
async fn assert_next_request(up: &Upstream, mock: &MockServer, old_conn: u64, protocol: Protocol) {
    let rec = complete(up, mock, "tokens=2").await;
    if protocol == Protocol::Http1 {
        assert_ne!(
            rec.conn_id, old_conn,
            "a cancelled HTTP/1.1 connection was reused"
        );
    } else {
        assert_eq!(
            rec.conn_id, old_conn,
            "the h2 connection did not survive a cancel"
        );
        assert_eq!(mock.stats().snapshot().totals.connections, 1);
    }
}

async fn body_drop(protocol: Protocol, knobs: &str, read_first: bool) {
    let mock = mock().await;
    let up = upstream(&mock, protocol);
    let resp = up.send(chat(knobs, STREAM), secs(5)).await.unwrap();
    let id = request_id(&resp);
    let mut body = resp.into_body();
    if read_first {
        body.frame().await.unwrap().unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(up.stats().in_flight, 1);
    let t0 = Instant::now();
    drop(body);
    assert_eq!(up.stats().in_flight, 0);
    let conn = assert_cancelled(&mock, id, t0, protocol).await;
    assert_next_request(&up, &mock, conn, protocol).await;
}

async fn send_drop(protocol: Protocol) {
    let mock = mock().await;
    let up = upstream(&mock, protocol);
    // Non-streaming: no headers until the 5 s "generation" is over.
    let fut = up.send(chat("ttft_ms=5000", NON_STREAM), secs(10));
    assert!(tokio::time::timeout(Duration::from_millis(200), fut)
        .await
        .is_err());
    let t0 = Instant::now();
    let snap = mock.stats().snapshot();
    assert_eq!(snap.requests.len(), 1, "the request reached the mock");
    let id = snap.requests[0].id;
    let conn = assert_cancelled(&mock, id, t0, protocol).await;
    assert_next_request(&up, &mock, conn, protocol).await;
}

#[tokio::test]
async fn h2_body_drop_mid_stream_resets_stream_and_keeps_connection() {
    body_drop(Protocol::H2c, "tokens=1000, interval_ms=20", true).await;
}

#[tokio::test]
async fn h2_body_drop_during_first_token_wait() {
    body_drop(Protocol::H2c, "ttft_ms=5000", false).await;
}

#[tokio::test]
async fn h2_send_drop_before_headers() {
    send_drop(Protocol::H2c).await;
}

#[tokio::test]
async fn h1_body_drop_mid_stream_closes_connection() {
    body_drop(Protocol::Http1, "tokens=1000, interval_ms=20", true).await;
}

#[tokio::test]
async fn h1_body_drop_during_first_token_wait() {
    body_drop(Protocol::Http1, "ttft_ms=5000", false).await;
}

#[tokio::test]
async fn h1_send_drop_before_headers() {
    send_drop(Protocol::Http1).await;
}
