//! Graceful shutdown: streams in flight finish within the grace period; after it, they end
//! with an error event.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_gateway::workers::Workers;

use crate::support::*;
use crate::{gateway, Setup, STREAM};

/// On the shared runtime and on worker threads (`server.workers`), whose threads then stop
/// when dropped.
#[tokio::test]
async fn streams_finish_within_the_grace_period() {
    for pinned in [false, true] {
        let mock = mock("").await;
        let workers = pinned.then(|| Arc::new(Workers::start(2).unwrap()));
        let gw = gateway(
            &mock,
            Setup {
                server: "shutdown_grace = \"5s\"",
                workers: workers.clone(),
                ..Default::default()
            },
        )
        .await;
        let addr = gw.addr();
        let stream = tokio::spawn(async move {
            h1(
                addr,
                request(
                    "POST",
                    "/v1/chat/completions",
                    "tokens=5, interval_ms=100",
                    STREAM,
                ),
            )
            .await
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        let t0 = tokio::time::Instant::now();
        gw.shutdown().await;
        assert!(t0.elapsed() < Duration::from_secs(3), "pinned {pinned}");
        let r = stream.await.unwrap();
        assert_eq!(
            sse(&r.body).last().unwrap().1,
            "[DONE]",
            "the stream completed (pinned {pinned})"
        );
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "no new connections (pinned {pinned})"
        );
        if let Some(w) = workers {
            assert_eq!(w.connections(), [0, 0]);
            let w = Arc::try_unwrap(w).expect("the gateway let go of its workers");
            let t0 = tokio::time::Instant::now();
            tokio::task::spawn_blocking(move || drop(w)).await.unwrap();
            assert!(t0.elapsed() < Duration::from_secs(2), "the threads stopped");
        }
    }
}

#[tokio::test]
async fn streams_past_the_grace_period_get_an_error_event() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: "shutdown_grace = \"300ms\"",
            ..Default::default()
        },
    )
    .await;
    let addr = gw.addr();
    let send = h2_connect(addr).await;
    let stream = tokio::spawn(async move {
        h2(
            &send,
            request(
                "POST",
                "/v1/chat/completions",
                "tokens=100, interval_ms=50",
                STREAM,
            ),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    gw.shutdown().await;
    let r = stream.await.unwrap();
    let (_, data) = sse(&r.body).pop().unwrap();
    let v: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(v["error"]["code"], "shutdown");
    wait_for(mock.stats(), "upstream cancelled", |s| {
        matches!(s.requests[0].outcome, sluice_mock::Outcome::Cancelled(_))
    })
    .await;
}

/// Shutdown sends GOAWAY to HTTP/2 clients: a new stream on the same connection is not
/// accepted, while the stream already open runs to its end.
#[tokio::test]
async fn shutdown_sends_goaway_to_http2_clients() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: "shutdown_grace = \"5s\"",
            ..Default::default()
        },
    )
    .await;
    let send = h2_connect(gw.addr()).await;
    let open = {
        let send = send.clone();
        tokio::spawn(async move {
            h2(
                &send,
                request(
                    "POST",
                    "/v1/chat/completions",
                    "tokens=5, interval_ms=100",
                    STREAM,
                ),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let stopping = tokio::spawn(gw.shutdown());
    tokio::time::sleep(Duration::from_millis(150)).await;
    let late = h2_send(&send, request("POST", "/v1/chat/completions", "", STREAM)).await;
    let err = late.expect_err("no new stream after GOAWAY");
    assert!(
        err.is_go_away() || err.reason() == Some(h2::Reason::REFUSED_STREAM),
        "{err:?}"
    );
    let r = open.await.unwrap();
    assert_eq!(
        sse(&r.body).last().unwrap().1,
        "[DONE]",
        "the open stream finished"
    );
    stopping.await.unwrap();
    assert_eq!(
        mock.stats().snapshot().totals.requests,
        1,
        "the late stream never reached the upstream"
    );
}
