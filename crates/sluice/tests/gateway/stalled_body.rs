//! Issue 15, item 8: a non-streaming response whose body stalls after its headers was bounded
//! only by `total` (10 minutes by default). The `idle` rule now applies to every body.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::support::*;
use crate::{gateway_at, Setup, CHAT};

#[tokio::test]
async fn a_non_streaming_body_that_stalls_is_cut_at_idle() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"choices\":")
                    .await;
                // Then nothing, for longer than the test.
                tokio::time::sleep(Duration::from_secs(60)).await;
            });
        }
    });
    let gw = gateway_at(
        &format!("http://{addr}/v1"),
        Setup {
            protocol: "http1",
            upstream: "timeouts = { idle = \"300ms\", total = \"10m\" }",
            ..Default::default()
        },
    )
    .await;
    let t0 = Instant::now();
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"]["code"], "idle_timeout");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}
