//! Backpressure: an unread body stops the upstream after about one window; on HTTP/2 one
//! stalled stream does not stall its neighbours on the same connection.

use std::time::Duration;

use http_body_util::BodyExt;
use sluice_mock::Outcome;
use sluice_upstream::{Protocol, Upstream, UpstreamConfig};

use crate::support::*;

const WINDOW: u32 = 64 * 1024;
/// About 2 MB of SSE: 2000 events of 1000-byte tokens.
const BIG: &str = "tokens=2000, token_bytes=1000";
const BIG_BYTES: u64 = 2_000_000;

fn small_windows(mock: &sluice_mock::MockServer) -> Upstream {
    Upstream::new(UpstreamConfig {
        h2_stream_window: WINDOW,
        h2_connection_window: 16 * WINDOW,
        ..max_streams(config(mock, Protocol::H2c), 16)
    })
    .unwrap()
}

#[tokio::test]
async fn h2_unread_body_stops_upstream_after_one_window() {
    let mock = mock().await;
    let up = small_windows(&mock);
    let resp = up.send(chat(BIG, STREAM), secs(5)).await.unwrap();
    let id = request_id(&resp);
    let mut body = resp.into_body();
    body.frame().await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rec = mock.stats().snapshot().request(id).unwrap().clone();
    // One stream window plus what the mock had in flight: far below the total.
    assert!(
        rec.bytes_sent < 4 * u64::from(WINDOW),
        "upstream sent {} bytes to a consumer that did not read",
        rec.bytes_sent
    );
    assert_eq!(rec.outcome, Outcome::InProgress);
    // Reading again resumes the stream to its end.
    let rest = read_all(&mut body).await.unwrap();
    assert!(rest.len() as u64 > BIG_BYTES);
    // The mock records a blocked write when it completes: the stall shows up now.
    let rec = mock.stats().snapshot().request(id).unwrap().clone();
    assert!(
        rec.write_blocked >= Duration::from_millis(400),
        "the mock waited only {:?} for flow-control capacity",
        rec.write_blocked
    );
}

#[tokio::test]
async fn h2_stalled_stream_does_not_stall_its_neighbour() {
    let mock = mock().await;
    let up = small_windows(&mock);
    let stalled = up.send(chat(BIG, STREAM), secs(5)).await.unwrap();
    let stalled_id = request_id(&stalled);
    // The second stream moves 2 MB, 32 stream windows, through the same connection while
    // the first holds its window unread.
    let rec = tokio::time::timeout(Duration::from_secs(10), complete(&up, &mock, BIG))
        .await
        .expect("the neighbour stream stalled");
    let snap = mock.stats().snapshot();
    let stalled_rec = snap.request(stalled_id).unwrap();
    assert_eq!(rec.conn_id, stalled_rec.conn_id, "both on one connection");
    assert!(rec.bytes_sent > BIG_BYTES);
    assert!(stalled_rec.bytes_sent < 4 * u64::from(WINDOW));
    drop(stalled);
}

#[tokio::test]
async fn h1_unread_body_stops_upstream() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::Http1);
    // 32 MB, well beyond what loopback socket buffers absorb.
    let resp = up
        .send(chat("tokens=32000, token_bytes=1000", STREAM), secs(5))
        .await
        .unwrap();
    let id = request_id(&resp);
    let mut body = resp.into_body();
    body.frame().await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rec = mock.stats().snapshot().request(id).unwrap().clone();
    assert!(
        rec.bytes_sent < 16_000_000,
        "upstream sent {} bytes to a consumer that did not read",
        rec.bytes_sent
    );
    assert!(rec.write_blocked > Duration::ZERO, "the mock never waited");
}
