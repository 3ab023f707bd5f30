//! PING timeout against a scripted `h2::server` peer on 127.0.0.1 (the mock always answers
//! PINGs): a peer that stops reading its connection never sends a PONG.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use sluice_upstream::{Lane, Protocol, Upstream, UpstreamConfig};
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::support::*;

#[tokio::test]
async fn unanswered_ping_closes_the_connection_and_fails_its_streams() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (frozen_tx, frozen_rx) = tokio::sync::oneshot::channel();
    let peer = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut conn = h2::server::handshake(tcp).await.unwrap();
        let (_req, mut respond) = conn.accept().await.unwrap().unwrap();
        let resp = http::Response::builder().status(200).body(()).unwrap();
        let mut stream = respond.send_response(resp, false).unwrap();
        stream
            .send_data(Bytes::from_static(b"data: 1\n\n"), false)
            .unwrap();
        // Flush what was queued, then stop polling the connection: from now on nothing is
        // read, so no PING gets a PONG. Keep the socket and the stream open.
        let _ = tokio::time::timeout(Duration::from_millis(100), conn.accept()).await;
        let _ = frozen_tx.send(());
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop((conn, stream));
    });
    let mut cfg = UpstreamConfig {
        name: "frozen".into(),
        base_url: format!("http://{addr}/v1").parse().unwrap(),
        protocol: Protocol::H2c,
        ..UpstreamConfig::default()
    };
    cfg.pool.ping_interval = Duration::from_millis(100);
    let up = Upstream::new(cfg).unwrap();
    let mut req = chat("", STREAM);
    req.extensions_mut().insert(Lane::Stream);
    let resp = up.send(req, secs(5)).await.unwrap();
    let first = up.pool_snapshot().lanes[0].connections[0].id;
    frozen_rx.await.unwrap();
    let t0 = Instant::now();
    let mut body = resp.into_body();
    // The first chunk arrives; then the PING timeout (max(2 × 100 ms, 1 s)) ends the stream.
    let err = loop {
        match body.frame().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("the body ended cleanly"),
        }
    };
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert_eq!(err.metric_label(), "closed", "{err:?}");
    let pool = up.pool_snapshot();
    assert!(pool.counters.ping_timeouts >= 1, "{:?}", pool.counters);
    assert!(
        !pool.lanes[0].connections.iter().any(|c| c.id == first),
        "{:?}",
        pool.lanes[0]
    );
    // The replacements (to a peer that accepts TCP but never answers) degrade too; they
    // must not be replaced in turn up to max_connections.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pool = up.pool_snapshot();
    assert!(
        pool.counters.connects <= 3,
        "replacement storm: {:?}",
        pool.counters
    );
    peer.abort();
}
