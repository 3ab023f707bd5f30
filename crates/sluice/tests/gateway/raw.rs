//! Raw clients for the edge tests: TCP sockets bound to a chosen loopback address (so that one
//! test can be several client IPs), bytes written as they are, and the gateway's metrics.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use sluice::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A TCP connection to `to` from `from` (any port), e.g. `127.0.0.2`.
pub async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let ip: IpAddr = from.parse().unwrap();
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::new(ip, 0)).unwrap();
    s.connect(to).await.unwrap()
}

/// Reads until the peer closes (or resets), at most `limit`; `None` if it is still open then.
pub async fn read_to_close(s: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(out),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Writes `bytes` and reads the whole answer until the gateway closes the connection.
pub async fn exchange(to: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(to).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let out = read_to_close(&mut s, Duration::from_secs(5))
        .await
        .expect("the gateway answers and closes");
    String::from_utf8_lossy(&out).into_owned()
}

/// An HTTP/1.1 POST of `body` with a Host header and `Connection: close`.
pub fn post(path: &str, extra_headers: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The status and the body of a raw HTTP/1.1 response (`content-length` bodies only).
pub fn split_response(raw: &str) -> (u16, String, String) {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
    let status = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {raw:?}"));
    (status, head.to_string(), body.to_string())
}

/// The value of one metric line (`name{labels}` as exposed), or 0 when absent.
pub fn metric(gw: &Server, series: &str) -> f64 {
    gw.telemetry()
        .encode()
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// Polls `f` until it holds, for up to `limit`.
pub async fn eventually(what: &str, limit: Duration, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
