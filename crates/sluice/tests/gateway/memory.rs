//! Issue 15, item 2: buffered bodies are budgeted across requests. Clients that park uploads
//! or do not read their responses hold a bounded amount of memory for a bounded time; past the
//! budget, new requests get a fast 503 in the API's error format; a response the client does
//! not take is cut at the send timeout and its memory given back.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

use crate::raw::*;
use crate::support::*;
use crate::{gateway, Setup, CHAT};

/// Uploads that stall hold their declared bytes; the next upload that does not fit is refused
/// before a byte of it is read, and once the stalled ones are cut the budget is whole again.
#[tokio::test]
async fn stalled_uploads_fill_the_budget_and_the_next_one_gets_a_fast_503() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: "memory_budget = \"1MiB\"\nmax_request_body = \"512KiB\"\nmax_response_body = \"512KiB\"\n\
                     client_timeouts = { body_idle = \"1s\" }",
            ..Default::default()
        },
    )
    .await;
    // Two clients declare 500 KiB each, send 100 KiB, and stall.
    let mut parked = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(gw.addr()).await.unwrap();
        s.write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-length: {}\r\n\r\n",
                500 << 10
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        s.write_all(&vec![b' '; 100 << 10]).await.unwrap();
        parked.push(s);
    }
    eventually("both uploads charged", Duration::from_secs(2), || {
        metric(&gw, "sluice_body_budget_used_bytes") == f64::from(1000 << 10)
    })
    .await;
    let big = format!(r#"{{"model":"gpt-4o","pad":"{}"}}"#, "x".repeat(100 << 10));
    let t0 = Instant::now();
    let raw = exchange(gw.addr(), &post("/v1/chat/completions", "", &big)).await;
    let (status, head, body) = split_response(&raw);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"memory_budget_exceeded\""), "{body}");
    assert!(head.contains("retry-after: 1"), "{head}");
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "refused before any wait"
    );
    assert_eq!(
        metric(
            &gw,
            "sluice_client_requests_refused_total{reason=\"memory_budget\"}"
        ),
        1.0
    );
    // A small request still fits (24 KiB are left).
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    // The stalled uploads are cut at body_idle, and their bytes come back.
    for mut s in parked {
        let raw = read_to_close(&mut s, Duration::from_secs(5)).await.unwrap();
        assert_eq!(split_response(&String::from_utf8_lossy(&raw)).0, 408);
    }
    eventually("the budget is whole again", Duration::from_secs(2), || {
        metric(&gw, "sluice_body_budget_used_bytes") == 0.0
    })
    .await;
    let raw = exchange(gw.addr(), &post("/v1/chat/completions", "", &big)).await;
    assert_eq!(split_response(&raw).0, 200);
    assert_eq!(mock.stats().snapshot().totals.requests, 2);
}

/// A socket that takes bytes slowly: a small receive buffer, so the gateway's writes block
/// soon after the kernel's send buffer is full.
async fn non_reader(to: std::net::SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(to).await.unwrap()
}

/// A client that never reads its 16 MB response holds it only until the send timeout: then its
/// connection is cut (and logged), and the budget is given back. Meanwhile, another non-reader
/// past the budget gets a 503 instead of pinning more.
#[tokio::test]
async fn a_client_that_does_not_read_its_response_is_cut_at_the_send_timeout() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: "memory_budget = \"24MiB\"\nmax_response_body = \"20MiB\"\n\
                     client_timeouts = { send = \"2s\" }",
            ..Default::default()
        },
    )
    .await;
    let req = post(
        "/v1/chat/completions",
        "x-mock: body_bytes=16000000\r\n",
        CHAT,
    );
    let mut first = non_reader(gw.addr()).await;
    first.write_all(&req).await.unwrap();
    eventually("the response is held", Duration::from_secs(5), || {
        metric(&gw, "sluice_body_budget_used_bytes") >= 16e6
    })
    .await;
    // A second one does not fit: 503, and no more memory held.
    let second = exchange(gw.addr(), &req).await;
    let (status, _, body) = split_response(&second);
    assert_eq!(status, 503, "{body:.300}");
    assert!(body.contains("\"memory_budget_exceeded\""), "{body:.300}");
    // The first is cut at the send timeout.
    let t0 = Instant::now();
    eventually("the non-reader is cut", Duration::from_secs(6), || {
        metric(
            &gw,
            "sluice_client_connections_closed_total{reason=\"send_timeout\"}",
        ) == 1.0
    })
    .await;
    assert!(t0.elapsed() < Duration::from_secs(4));
    eventually("its memory is given back", Duration::from_secs(2), || {
        metric(&gw, "sluice_body_budget_used_bytes") == 0.0
    })
    .await;
    let got = read_to_close(&mut first, Duration::from_secs(10)).await;
    let got = got.expect("the connection was closed");
    assert!(
        got.len() < 16_000_000,
        "cut before the end: {} bytes",
        got.len()
    );
    // A client that reads gets the whole body.
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "body_bytes=16000000", CHAT),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.body.len() >= 16_000_000);
}
