//! Issue 15, item 3: reset amplification ("rapid reset", CVE-2023-44487). A client that resets
//! each HTTP/2 stream right after the gateway accepted it, or reconnects after every ~15
//! resets, made Sluice send 20,000 upstream requests in seconds. Now one connection is closed
//! with GOAWAY(ENHANCE_YOUR_CALM) past `client_resets.per_connection` cancels, one address is
//! refused for a while past `per_ip`, so the same attack costs a bounded number of upstream
//! requests, while a well-behaved client on another connection is served throughout.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use crate::raw::*;
use crate::support::*;
use crate::{gateway, Setup, CHAT};

/// Streams each reset right after they were sent. With `upstream`, each is reset only once
/// the upstream has it: the worst case, where every reset stream cost an upstream request.
/// Returns the streams sent and how the connection ended.
async fn rapid_reset(
    from: &str,
    to: SocketAddr,
    streams: usize,
    upstream: Option<&sluice_mock::MockServer>,
) -> (usize, Option<h2::Error>) {
    let tcp = connect_from(from, to).await;
    let Ok((client, conn)) = h2::client::handshake(tcp).await else {
        return (0, None);
    };
    let conn = tokio::spawn(conn);
    let mut sent = 0;
    for _ in 0..streams {
        let req = http::Request::post("http://gw/v1/chat/completions")
            .header("content-type", "application/json")
            // A slow upstream: the reset always comes before the answer, as with real models.
            .header("x-mock", "ttft_ms=5000")
            .body(())
            .unwrap();
        let Ok(mut ready) = client.clone().ready().await else {
            break;
        };
        let Ok((resp, mut body)) = ready.send_request(req, false) else {
            break;
        };
        let before = upstream.map(|m| m.stats().snapshot().totals.requests);
        let _ = body.send_data(Bytes::from_static(CHAT.as_bytes()), true);
        tokio::task::yield_now().await;
        if let (Some(m), Some(before)) = (upstream, before) {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
            while m.stats().snapshot().totals.requests == before
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        body.send_reset(h2::Reason::CANCEL);
        drop(resp);
        sent += 1;
        tokio::task::yield_now().await;
    }
    drop(client);
    let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
    let err = match ended {
        Ok(Ok(Err(e))) => Some(e),
        _ => None,
    };
    (sent, err)
}

async fn well_behaved(from: &str, to: SocketAddr, n: usize) {
    let tcp = connect_from(from, to).await;
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    for _ in 0..n {
        let r = h2(&send, request("POST", "/v1/chat/completions", "", CHAT)).await;
        assert_eq!(r.status, 200, "the well-behaved client is served");
    }
}

#[tokio::test]
async fn resets_on_one_connection_end_it_with_enhance_your_calm() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    let (sent, err) = rapid_reset("127.0.0.2", gw.addr(), 2000, Some(&mock)).await;
    let err = err.expect("the gateway ended the connection with an error GOAWAY");
    assert!(err.is_go_away(), "{err:?}");
    assert_eq!(err.reason(), Some(h2::Reason::ENHANCE_YOUR_CALM), "{err:?}");
    assert!(sent < 2000, "the attack was stopped after {sent} streams");
    assert_eq!(
        metric(
            &gw,
            "sluice_client_connections_closed_total{reason=\"enhance_your_calm\"}"
        ),
        1.0
    );
    // Bounded: the per-connection limit (100) and the one that tripped it, instead of 2000.
    let upstream = mock.stats().snapshot().totals.requests;
    assert!(upstream <= 110, "{upstream} upstream requests");
    well_behaved("127.0.0.3", gw.addr(), 3).await;
}

#[tokio::test]
async fn an_address_that_reconnects_between_resets_is_blocked_and_others_are_served() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: "client_resets = { per_ip = 100, block = \"30s\" }",
            ..Default::default()
        },
    )
    .await;
    let addr = gw.addr();
    let good = tokio::spawn(async move {
        for _ in 0..5 {
            well_behaved("127.0.0.3", addr, 2).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // 15 resets per connection (under every per-connection limit), then a new connection.
    let mut total = 0;
    for _ in 0..130 {
        total += rapid_reset("127.0.0.4", addr, 15, None).await.0;
    }
    good.await.unwrap();
    assert!(
        metric(
            &gw,
            "sluice_client_connections_refused_total{reason=\"blocked\"}"
        ) >= 1.0
    );
    let upstream = mock.stats().snapshot().totals.requests;
    // The address's 100 cancels, plus the last connection's streams, plus the good client's 10.
    assert!(
        upstream <= 100 + 2 * 15 + 10,
        "{upstream} upstream requests for {total} streams sent"
    );
    // Blocked means refused before any work: a plain request from that address gets 429.
    let tcp = connect_from("127.0.0.4", addr).await;
    match h2::client::handshake(tcp).await {
        // Refused at accept.
        Err(_) => {}
        Ok((send, conn)) => {
            tokio::spawn(conn);
            if let Ok(r) = h2_send(&send, request("POST", "/v1/chat/completions", "", CHAT)).await {
                assert_eq!(r.status(), 429);
            }
        }
    }
    assert_eq!(mock.stats().snapshot().totals.requests, upstream);
}
