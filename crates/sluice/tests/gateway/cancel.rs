//! Cascading cancellation: the client's disconnect, at any moment, cancels the upstream.

use std::time::Duration;

use http_body_util::BodyExt;
use sluice_mock::Outcome;
use tokio::time::{sleep, Instant};

use crate::support::*;
use crate::{gateway, Setup, CHAT, STREAM};

const LIMIT: Duration = Duration::from_millis(100);

fn cancelled(s: &sluice_mock::Snapshot) -> bool {
    s.requests
        .last()
        .is_some_and(|r| matches!(r.outcome, Outcome::Cancelled(_)))
}

/// Client over HTTP/1.1 or HTTP/2, upstream over h2c or HTTP/1.1, leaving mid-stream or during
/// the first-token wait, the connection on the shared runtime or on a worker thread
/// (`server.workers`): the mock sees the cancel within 100 ms every time.
#[tokio::test]
async fn client_disconnect_cancels_upstream_everywhere() {
    for (upstream, pinned) in [
        ("h2c", false),
        ("http1", false),
        ("h2c", true),
        ("http1", true),
    ] {
        for h2_client in [false, true] {
            for (knobs, read_first) in [
                ("tokens=1000, interval_ms=20", true),
                ("ttft_ms=5000", false),
            ] {
                let mock = mock("").await;
                let gw = gateway(
                    &mock,
                    Setup {
                        protocol: upstream,
                        workers: pinned.then(|| {
                            std::sync::Arc::new(sluice_gateway::workers::Workers::start(2).unwrap())
                        }),
                        ..Default::default()
                    },
                )
                .await;
                let what = format!(
                    "upstream {upstream}, h2 client {h2_client}, {knobs}, worker threads {pinned}"
                );
                let t0;
                if h2_client {
                    let send = h2_connect(gw.addr()).await;
                    let resp = h2_send(
                        &send,
                        request("POST", "/v1/chat/completions", knobs, STREAM),
                    )
                    .await
                    .unwrap();
                    let mut body = resp.into_body();
                    if read_first {
                        body.data().await.unwrap().unwrap();
                    }
                    sleep(Duration::from_millis(50)).await;
                    t0 = Instant::now();
                    drop(body); // RST_STREAM(CANCEL) to the gateway
                } else {
                    let mut send = h1_connect(gw.addr()).await;
                    let resp = h1_send(
                        &mut send,
                        request("POST", "/v1/chat/completions", knobs, STREAM),
                    )
                    .await;
                    let mut body = resp.into_body();
                    if read_first {
                        body.frame().await.unwrap().unwrap();
                    }
                    sleep(Duration::from_millis(50)).await;
                    t0 = Instant::now();
                    drop(body);
                    drop(send); // closes the TCP connection
                }
                let snap = wait_for(mock.stats(), &what, cancelled).await;
                let rec = snap.requests.last().unwrap();
                let lag = rec.cancelled_at.unwrap() - t0;
                assert!(lag < LIMIT, "{what}: cancel took {lag:?}");
                if upstream == "h2c" {
                    assert_eq!(
                        rec.outcome,
                        Outcome::Cancelled("rst_stream".into()),
                        "{what}"
                    );
                }
                let m = String::from_utf8(
                    h1(gw.admin_addr(), request("GET", "/metrics", "", ""))
                        .await
                        .body
                        .to_vec(),
                )
                .unwrap();
                assert!(
                    m.contains("sluice_client_cancellations_total 1"),
                    "{what}: {m}"
                );
                assert!(m.contains("sluice_active_streams 0"), "{what}: {m}");
            }
        }
    }
}

/// A non-streaming request whose client leaves while the upstream is still generating.
#[tokio::test]
async fn disconnect_before_response_headers_cancels_upstream() {
    let mock = mock("ttft_ms=5000").await;
    let gw = gateway(&mock, Setup::default()).await;
    let mut send = h1_connect(gw.addr()).await;
    let fut = h1_send(&mut send, request("POST", "/v1/chat/completions", "", CHAT));
    assert!(tokio::time::timeout(Duration::from_millis(200), fut)
        .await
        .is_err());
    let t0 = Instant::now();
    drop(send);
    let snap = wait_for(mock.stats(), "cancel", cancelled).await;
    assert!(snap.requests[0].cancelled_at.unwrap() - t0 < LIMIT);
}

/// `on_client_disconnect = "drain"`: the upstream runs to its end although the client left.
#[tokio::test]
async fn drain_policy_reads_the_upstream_to_its_end() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            route: "on_client_disconnect = \"drain\"",
            ..Default::default()
        },
    )
    .await;
    let body = r#"{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true}}"#;
    let mut send = h1_connect(gw.addr()).await;
    let resp = h1_send(
        &mut send,
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=10, interval_ms=30",
            body,
        ),
    )
    .await;
    let mut b = resp.into_body();
    b.frame().await.unwrap().unwrap();
    drop(b);
    drop(send);
    let snap = wait_for(mock.stats(), "completed", |s| {
        s.requests.last().unwrap().outcome != Outcome::InProgress
    })
    .await;
    assert_eq!(
        snap.requests[0].outcome,
        Outcome::Completed,
        "the upstream was drained, not cancelled"
    );
}
