//! HTTP/1.1 keep-alive for a client pool's tests: the server's idle timeout, and the stale
//! keep-alive race (`h1_stale_close`), seen byte by byte on raw sockets.

use std::io;
use std::time::Duration;

use sluice_mock::{Behavior, CloseReason, MockConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};

use crate::support::*;

const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;

/// What came back for one request on a raw connection.
#[derive(Debug)]
enum Answer {
    /// A whole response (its body read to its `Content-Length`): the status.
    Response(u16),
    /// The connection ended (FIN) before any response byte.
    Eof,
}

/// Writes one request and reads one `Content-Length` response, byte exact.
async fn exchange(tcp: &mut TcpStream, knobs: &str, body: &str) -> io::Result<Answer> {
    let mut req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: mock\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n",
        body.len()
    );
    if !knobs.is_empty() {
        req.push_str(&format!("x-mock: {knobs}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    tcp.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            assert!(buf.is_empty(), "cut mid-response: {buf:?}");
            return Ok(Answer::Eof);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let status = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("a content-length response")
        .trim()
        .parse()
        .unwrap();
    while buf.len() < head_end + len {
        let mut chunk = [0u8; 4096];
        let n = tcp.read(&mut chunk).await?;
        assert!(n > 0, "cut mid-body");
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(Answer::Response(status))
}

fn ok(a: io::Result<Answer>) {
    match a {
        Ok(Answer::Response(200)) => {}
        other => panic!("expected a 200, got {other:?}"),
    }
}

async fn mock_ka(idle: Option<u64>, stale: Option<u64>, rst: bool) -> sluice_mock::MockServer {
    mock_with(MockConfig {
        defaults: Behavior::default().with_spec("tokens=3").unwrap(),
        h1_idle_timeout: idle.map(Duration::from_millis),
        h1_stale_close: stale.map(Duration::from_millis),
        h1_stale_close_rst: rst,
        ..MockConfig::default()
    })
    .await
}

#[tokio::test]
async fn idle_timeout_closes_a_kept_alive_connection() {
    let mock = mock_ka(Some(250), None, false).await;
    let mut tcp = TcpStream::connect(mock.addr()).await.unwrap();
    ok(exchange(&mut tcp, "", CHAT).await);
    let t0 = Instant::now();
    // Reused well within the timeout: still open.
    ok(exchange(&mut tcp, "", CHAT).await);
    let mut byte = [0u8; 1];
    let n = timeout(Duration::from_secs(3), tcp.read(&mut byte))
        .await
        .expect("the server closes it")
        .unwrap();
    assert_eq!(n, 0, "FIN, no bytes");
    assert!(
        t0.elapsed() >= Duration::from_millis(240),
        "{:?}",
        t0.elapsed()
    );
    let snap = wait_for(mock.stats(), "closed", |s| {
        s.connections[0].closed_at.is_some()
    })
    .await;
    assert_eq!(
        snap.connections[0].close_reason,
        Some(CloseReason::IdleTimeout)
    );
    assert_eq!(snap.totals.h1_idle_closes, 1);
    assert_eq!(snap.totals.completed, 2);
}

#[tokio::test]
async fn idle_timeout_never_cuts_a_response_in_flight() {
    let mock = mock_ka(Some(150), None, false).await;
    let mut send = h1_connect(mock.addr()).await;
    // 6 events 100 ms apart: a response far longer than the idle timeout.
    let body = r#"{"model":"m","stream":true}"#;
    let r = h1_send(
        &mut send,
        request("POST", "/v1/chat/completions", "interval_ms=100", body),
    )
    .await;
    let bytes = http_body_util::BodyExt::collect(r.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(sse(&bytes).last().unwrap().1, "[DONE]");
    // And the connection is reusable right after it.
    let r = h1_send(&mut send, request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(mock.stats().totals().h1_idle_closes, 0);
}

#[tokio::test]
async fn stale_close_drops_the_request_on_a_connection_idle_too_long() {
    let mock = mock_ka(None, Some(200), false).await;
    let mut tcp = TcpStream::connect(mock.addr()).await.unwrap();
    ok(exchange(&mut tcp, "", CHAT).await);
    ok(exchange(&mut tcp, "", CHAT).await);
    sleep(Duration::from_millis(300)).await;
    // The request goes out (the socket is open) and the server closes without a byte.
    match exchange(&mut tcp, "", CHAT).await {
        Ok(Answer::Eof) => {}
        other => panic!("expected FIN without a response, got {other:?}"),
    }
    let snap = wait_for(mock.stats(), "closed", |s| {
        s.connections[0].closed_at.is_some()
    })
    .await;
    assert_eq!(
        snap.connections[0].close_reason,
        Some(CloseReason::StaleClose)
    );
    assert_eq!(snap.totals.h1_stale_closes, 1);
    assert_eq!(
        snap.requests.len(),
        2,
        "the stale request was not processed"
    );
    assert_eq!(snap.totals.requests, 2);
    // A new connection works at once; its first request is never stale.
    let mut fresh = TcpStream::connect(mock.addr()).await.unwrap();
    sleep(Duration::from_millis(250)).await;
    ok(exchange(&mut fresh, "", CHAT).await);
}

#[tokio::test]
async fn stale_close_with_rst() {
    let mock = mock_ka(None, Some(100), true).await;
    let mut tcp = TcpStream::connect(mock.addr()).await.unwrap();
    ok(exchange(&mut tcp, "", CHAT).await);
    sleep(Duration::from_millis(200)).await;
    match exchange(&mut tcp, "", CHAT).await {
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}"),
        other => panic!("expected RST, got {other:?}"),
    }
    assert_eq!(mock.stats().totals().h1_stale_closes, 1);
}

#[tokio::test]
async fn a_pooled_hyper_client_sees_an_incomplete_message_on_a_stale_connection() {
    let mock = mock_ka(None, Some(100), false).await;
    let mut send = h1_connect(mock.addr()).await;
    let r = h1_send(&mut send, request("POST", "/v1/chat/completions", "", CHAT)).await;
    http_body_util::BodyExt::collect(r.into_body())
        .await
        .unwrap();
    sleep(Duration::from_millis(200)).await;
    // hyper still thinks the connection is reusable: the server's close is only seen once
    // the request is on the wire, as in the real race.
    send.ready().await.unwrap();
    let (parts, body) = request("POST", "/v1/chat/completions", "", CHAT).into_parts();
    let err = send
        .send_request(http::Request::from_parts(
            parts,
            http_body_util::Full::new(body),
        ))
        .await
        .unwrap_err();
    assert!(err.is_incomplete_message(), "{err:?}");
}
