//! Real clients for the mock: hyper's HTTP/1.1 connection API and the `h2` crate, so tests see
//! exactly what went over the wire (RST_STREAM reasons, GOAWAY, DATA frame sizes).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use sluice_mock::{Behavior, MockConfig, MockServer, Snapshot, Stats};
use tokio::net::TcpStream;
use tokio::time::Instant;

pub async fn mock(defaults: &str) -> MockServer {
    MockServer::start(MockConfig {
        defaults: Behavior::default().with_spec(defaults).unwrap(),
        ..MockConfig::default()
    })
    .await
    .unwrap()
}

pub async fn mock_default() -> MockServer {
    mock("").await
}

pub async fn mock_with(cfg: MockConfig) -> MockServer {
    MockServer::start(cfg).await.unwrap()
}

pub struct Resp {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn request_id(&self) -> u64 {
        self.headers[sluice_mock::REQUEST_ID_HEADER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    }
}

pub fn request(method: &str, path: &str, xmock: &str, body: &str) -> Request<Bytes> {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://mock{path}"))
        .header("content-type", "application/json");
    if !xmock.is_empty() {
        b = b.header("x-mock", xmock);
    }
    b.body(Bytes::from(body.to_string())).unwrap()
}

pub async fn h1_connect(addr: SocketAddr) -> http1::SendRequest<Full<Bytes>> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    send
}

pub async fn h1_send(
    send: &mut http1::SendRequest<Full<Bytes>>,
    req: Request<Bytes>,
) -> http::Response<hyper::body::Incoming> {
    let (parts, body) = req.into_parts();
    let mut req = Request::from_parts(parts, Full::new(body));
    req.headers_mut().insert("host", "mock".parse().unwrap());
    send.ready().await.unwrap();
    send.send_request(req).await.unwrap()
}

pub async fn h1(addr: SocketAddr, req: Request<Bytes>) -> Resp {
    let mut send = h1_connect(addr).await;
    let resp = h1_send(&mut send, req).await;
    let (parts, body) = resp.into_parts();
    Resp {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

pub async fn h2_connect(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    send
}

pub async fn h2_send(
    send: &h2::client::SendRequest<Bytes>,
    req: Request<Bytes>,
) -> Result<http::Response<h2::RecvStream>, h2::Error> {
    let (parts, body) = req.into_parts();
    let mut send = send.clone().ready().await?;
    let (resp, mut stream) = send.send_request(Request::from_parts(parts, ()), false)?;
    stream.send_data(body, true)?;
    resp.await
}

/// Reads a whole h2 body, returning the DATA chunks as received.
pub async fn h2_chunks(body: &mut h2::RecvStream) -> Result<Vec<Bytes>, h2::Error> {
    let mut chunks = Vec::new();
    while let Some(c) = body.data().await {
        let c = c?;
        let _ = body.flow_control().release_capacity(c.len());
        chunks.push(c);
    }
    Ok(chunks)
}

pub async fn h2(send: &h2::client::SendRequest<Bytes>, req: Request<Bytes>) -> Resp {
    let resp = h2_send(send, req).await.unwrap();
    let (parts, mut body) = resp.into_parts();
    let chunks = h2_chunks(&mut body).await.unwrap();
    Resp {
        status: parts.status,
        headers: parts.headers,
        body: chunks.concat().into(),
    }
}

/// A minimal SSE reader for tests: (event, data) per event, comments skipped. Handles LF,
/// CRLF and CR. The gateway's real decoder is tested on its own; this one only needs to be
/// obviously right for the mock's well-formed output.
pub fn sse(body: &[u8]) -> Vec<(Option<String>, String)> {
    let text = String::from_utf8_lossy(body)
        .replace("\r\n", "\n")
        .replace('\r', "\n");
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut event = None;
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push(v);
            }
        }
        if !data.is_empty() {
            out.push((event, data.join("\n")));
        }
    }
    out
}

/// Polls the stats until `pred` holds, for up to five seconds.
pub async fn wait_for(stats: &Stats, what: &str, pred: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let snap = stats.snapshot();
        if pred(&snap) {
            return snap;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
