//! The HTTP/2 connection: one shared connect, stream limits (ours and the server's), GOAWAY.

use std::time::Duration;

use sluice_mock::{MockConfig, Outcome};
use sluice_upstream::{Protocol, Upstream};

use crate::support::*;

#[tokio::test]
async fn concurrent_first_requests_share_one_connect() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::H2c);
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let up = up.clone();
            tokio::spawn(async move {
                let resp = up.send(chat("", STREAM), secs(5)).await.unwrap();
                read_all(&mut resp.into_body()).await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let snap = mock.stats().snapshot();
    assert_eq!(snap.totals.connections, 1);
    assert_eq!(snap.totals.completed, 10);
    let stats = up.stats();
    assert_eq!((stats.protocol, stats.open_connections), (Protocol::H2c, 1));
}

async fn run_concurrent(up: &Upstream, n: usize, knobs: &'static str) {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let up = up.clone();
            tokio::spawn(async move {
                let resp = up.send(chat(knobs, STREAM), secs(10)).await.unwrap();
                read_all(&mut resp.into_body()).await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn server_max_concurrent_streams_is_respected() {
    let mock = mock_with(MockConfig {
        h2_max_concurrent_streams: Some(2),
        ..MockConfig::default()
    })
    .await;
    // One connection only: the server's limit is what makes streams wait.
    let mut cfg = config(&mock, Protocol::H2c);
    cfg.pool.short.max_connections = Some(1);
    let up = Upstream::new(cfg).unwrap();
    // Prime the connection so the server's SETTINGS have arrived.
    complete(&up, &mock, "tokens=1").await;
    run_concurrent(&up, 6, "tokens=4, interval_ms=30").await;
    let snap = mock.stats().snapshot();
    assert_eq!(snap.totals.connections, 1);
    assert_eq!(snap.totals.refused, 0);
    assert_eq!(snap.totals.completed, 7);
    assert_eq!(snap.connections[0].max_concurrent_streams, 2);
}

#[tokio::test]
async fn our_own_stream_cap_is_respected() {
    let mock = mock().await;
    // One connection only, so the cap is what makes the streams wait.
    let mut cfg = max_streams(config(&mock, Protocol::H2c), 1);
    cfg.pool.short.max_connections = Some(1);
    cfg.h2_connection_window = 256 * 1024;
    let up = Upstream::new(cfg).unwrap();
    run_concurrent(&up, 4, "tokens=4, interval_ms=20").await;
    let snap = mock.stats().snapshot();
    assert_eq!(snap.totals.completed, 4);
    assert_eq!(snap.connections[0].max_concurrent_streams, 1);
}

#[tokio::test]
async fn goaway_lets_open_stream_finish_and_sends_new_ones_to_a_new_connection() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::H2c);
    // The first stream makes the mock start a graceful GOAWAY (last-stream-id = 1).
    let long = up
        .send(
            chat("goaway_after=1, tokens=20, interval_ms=20", STREAM),
            secs(5),
        )
        .await
        .unwrap();
    let long_id = request_id(&long);
    wait_for(mock.stats(), "goaway", |s| s.totals.goaways == 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // h2 fails new streams on a connection that received GOAWAY before sending them, so the
    // request was never sent there: it goes to a fresh connection within its deadline.
    let next = complete(&up, &mock, "").await;
    // Meanwhile the stream below the last-stream-id finishes on the old connection.
    read_all(&mut long.into_body()).await.unwrap();
    let snap = mock.stats().snapshot();
    let long = snap.request(long_id).unwrap();
    assert_eq!(long.outcome, Outcome::Completed);
    assert_ne!(next.conn_id, long.conn_id);
    assert_eq!(
        snap.totals.refused, 0,
        "nothing was sent into the draining connection"
    );
    assert_eq!(snap.totals.connections, 2);
}

#[tokio::test]
async fn dropping_the_upstream_closes_its_connections() {
    for protocol in [Protocol::H2c, Protocol::Http1] {
        let mock = mock().await;
        let up = upstream(&mock, protocol);
        let rec = complete(&up, &mock, "").await;
        assert_eq!(up.stats().open_connections, 1);
        drop(up);
        wait_for(mock.stats(), "connection closed", |s| {
            s.connection(rec.conn_id)
                .is_some_and(|c| c.closed_at.is_some())
        })
        .await;
    }
}
