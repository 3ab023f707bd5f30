//! Shared helpers: a mock, an upstream pointed at it, requests, and polling the mock's stats.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use sluice_mock::{Behavior, MockConfig, MockServer, ReqRecord, Snapshot, Stats};
use sluice_upstream::{BodyError, Protocol, ResponseBody, Upstream, UpstreamConfig};
use tokio::time::Instant;

pub const STREAM: &str = r#"{"model":"m","stream":true}"#;
pub const NON_STREAM: &str = r#"{"model":"m"}"#;

pub async fn mock_with(cfg: MockConfig) -> MockServer {
    MockServer::start(MockConfig {
        defaults: Behavior::default().with_spec("tokens=5").unwrap(),
        ..cfg
    })
    .await
    .unwrap()
}

pub async fn mock() -> MockServer {
    mock_with(MockConfig::default()).await
}

pub fn config(mock: &MockServer, protocol: Protocol) -> UpstreamConfig {
    UpstreamConfig {
        name: "local".into(),
        base_url: format!("{}/v1", mock.url()).parse().unwrap(),
        protocol,
        ..UpstreamConfig::default()
    }
}

/// Sets both lanes' `max_streams_per_connection`.
pub fn max_streams(mut cfg: UpstreamConfig, n: u32) -> UpstreamConfig {
    cfg.pool.stream.max_streams_per_connection = n;
    cfg.pool.short.max_streams_per_connection = n;
    cfg
}

pub fn upstream(mock: &MockServer, protocol: Protocol) -> Upstream {
    Upstream::new(config(mock, protocol)).unwrap()
}

pub fn chat(xmock: &str, body: &str) -> Request<Bytes> {
    let mut b = Request::post("/chat/completions").header("content-type", "application/json");
    if !xmock.is_empty() {
        b = b.header("x-mock", xmock);
    }
    b.body(Bytes::from(body.to_string())).unwrap()
}

pub fn secs(s: u64) -> Instant {
    Instant::now() + Duration::from_secs(s)
}

pub fn ms(m: u64) -> Instant {
    Instant::now() + Duration::from_millis(m)
}

pub fn request_id<B>(resp: &http::Response<B>) -> u64 {
    resp.headers()[sluice_mock::REQUEST_ID_HEADER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Reads the body to its end.
pub async fn read_all(body: &mut ResponseBody) -> Result<Bytes, BodyError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            out.extend_from_slice(&data);
        }
    }
    Ok(out.into())
}

/// Sends and reads a whole response, returning the mock's record of it.
pub async fn complete(up: &Upstream, mock: &MockServer, xmock: &str) -> ReqRecord {
    let resp = up.send(chat(xmock, STREAM), secs(5)).await.unwrap();
    assert_eq!(resp.status(), 200);
    let id = request_id(&resp);
    let body = read_all(&mut resp.into_body()).await.unwrap();
    assert!(!body.is_empty());
    let snap = wait_for(mock.stats(), "request completed", |s| {
        s.request(id)
            .is_some_and(|r| r.outcome == sluice_mock::Outcome::Completed)
    })
    .await;
    snap.request(id).unwrap().clone()
}

pub async fn wait_for(stats: &Stats, what: &str, pred: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let snap = stats.snapshot();
        if pred(&snap) {
            return snap;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The trust root file for a TLS mock, removed on drop.
pub struct CaFile(pub std::path::PathBuf);

impl CaFile {
    pub fn new(mock: &MockServer) -> CaFile {
        let path = std::env::temp_dir().join(format!(
            "sluice-upstream-ca-{}-{}.pem",
            std::process::id(),
            mock.addr().port()
        ));
        std::fs::write(&path, mock.cert_pem().unwrap()).unwrap();
        CaFile(path)
    }
}

impl Drop for CaFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Log lines captured from `tracing` while the guard lives (tests run on one thread, so a
/// thread-local subscriber sees every task of the test).
#[derive(Clone, Default)]
pub struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    /// Captures WARN and above until the returned guard drops.
    pub fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let sub = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        (logs, tracing::subscriber::set_default(sub))
    }

    /// The captured lines that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

/// Reads one request (head, then a Content-Length body); false at EOF or on an error.
pub async fn read_request(tcp: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    true
}
