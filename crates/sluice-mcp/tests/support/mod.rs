//! What the MCP gateway's tests stand up over real sockets: the gateway behind a small hyper
//! server of our own (the composition root mounts it later), a Rust mock MCP server, and the
//! official SDK's servers (tests/python/mcp_server.py).

#![allow(dead_code)] // each test binary uses part of it

pub mod mock;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use sluice_config::Config;
use sluice_mcp::{Caller, McpBody, McpDeps, McpGateway, ToolCallRecord, ToolCallSink};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// 32+ bytes, as the config requires.
pub const SECRET: &str = "test-secret-0123456789abcdef-0123456789";

/// A `Config` from an `[mcp]` section (a minimal route so the file validates).
pub fn config(mcp: &str) -> Config {
    let text = format!(
        "[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n[[route]]\nmodels = [\"*\"]\nupstream = \"u\"\n\n\
         [mcp]\nsession_secret = \"{SECRET}\"\n{mcp}"
    );
    Config::from_toml(&text, &|k| match k {
        "TEST_MCP_TOKEN" => Some("static-token-for-alpha".into()),
        _ => None,
    })
    .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Records every tool call, for assertions.
#[derive(Default)]
pub struct Records(pub Mutex<Vec<ToolCallRecord>>);

impl ToolCallSink for Records {
    fn record(&self, rec: &ToolCallRecord) {
        self.0.lock().push(rec.clone());
    }
}

/// A gateway served on an ephemeral port. The caller's key id is the bearer token of the
/// request (`Authorization: Bearer alice` → `key_id = "alice"`), and `x-client-token` is the
/// client's own credential for passthrough servers: the tests build `Caller` as the gateway's
/// key stage will.
pub struct GatewayServer {
    pub addr: SocketAddr,
    pub gateway: McpGateway,
    pub records: Arc<Records>,
    task: JoinHandle<()>,
}

impl Drop for GatewayServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GatewayServer {
    pub async fn start(cfg: &Config) -> GatewayServer {
        let records = Arc::new(Records::default());
        let deps = McpDeps {
            sink: Some(records.clone()),
            ..McpDeps::default()
        };
        let gateway = McpGateway::new(&cfg.mcp, deps).expect("gateway");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gw = gateway.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((io, _)) = listener.accept().await else {
                    return;
                };
                let _ = io.set_nodelay(true);
                let gw = gw.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let gw = gw.clone();
                        async move { Ok::<_, Infallible>(serve(&gw, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(io), svc)
                        .await;
                });
            }
        });
        GatewayServer {
            addr,
            gateway,
            records,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

async fn serve(gw: &McpGateway, req: Request<Incoming>) -> Response<McpBody> {
    if req.uri().path() != "/mcp" {
        let mut r = Response::new(McpBody::empty());
        *r.status_mut() = http::StatusCode::NOT_FOUND;
        return r;
    }
    let key_id = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let authorization = req.headers().get("x-client-token").cloned();
    gw.handle(
        req,
        Caller {
            key_id,
            authorization,
            traceparent: None,
        },
    )
    .await
}

// === a plain HTTP client for the tests ===

/// One request to `url` with `headers` and `body`; the status, headers and whole body.
pub async fn send(
    url: &str,
    method: http::Method,
    headers: &[(&str, &str)],
    body: &str,
) -> (http::StatusCode, http::HeaderMap, Bytes) {
    use http_body_util::{BodyExt, Full};
    let uri: http::Uri = url.parse().unwrap();
    let addr = format!("{}:{}", uri.host().unwrap(), uri.port_u16().unwrap());
    let io = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(uri.path())
        .header("host", uri.authority().unwrap().as_str())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(30), body.collect())
        .await
        .expect("body within 30 s")
        .unwrap()
        .to_bytes();
    (parts.status, parts.headers, body)
}

/// The JSON-RPC messages of a body: the JSON itself, or each SSE event's data.
pub fn messages(headers: &http::HeaderMap, body: &[u8]) -> Vec<serde_json::Value> {
    let sse = headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !sse {
        return serde_json::from_slice(body)
            .map(|v| vec![v])
            .unwrap_or_default();
    }
    let mut dec = sluice_sse::Decoder::new();
    dec.feed(Bytes::copy_from_slice(body));
    dec.finish();
    let mut out = Vec::new();
    while let Some(Ok(item)) = dec.next_item() {
        if let sluice_sse::Item::Event(e) = item {
            if let Ok(v) = serde_json::from_slice(e.data()) {
                out.push(v);
            }
        }
    }
    out
}

// === the official SDK's servers ===

/// `$SLUICE_PYTHON`, else `.venv/bin/python` at the workspace root.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = workspace_root().join(".venv/bin/python");
    assert!(
        venv.exists(),
        "no Python with the `mcp` SDK: run `python3 -m venv .venv && .venv/bin/pip install -r \
         tests/python/requirements.txt`, or set SLUICE_PYTHON"
    );
    venv
}

/// Runs tests/python/mcp_client.py with `args`; every check it prints must pass.
pub async fn run_client(args: Vec<String>) {
    let script = workspace_root().join("tests/python/mcp_client.py");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python())
            .arg(script)
            .args(args)
            .output()
            .expect("cannot run python")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "MCP SDK checks failed:\n{stdout}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

/// tests/python/mcp_server.py on an ephemeral port; killed on drop.
pub struct PyServer {
    child: Child,
    pub port: u16,
    _dir: TempDir,
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PyServer {
    pub async fn start(name: &str, json: bool) -> PyServer {
        let dir = TempDir::new(name);
        let port_file = dir.0.join("port");
        let mut cmd = Command::new(python());
        cmd.arg(workspace_root().join("tests/python/mcp_server.py"))
            .arg(name)
            .arg(&port_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if json {
            cmd.arg("--json");
        }
        let mut server = PyServer {
            child: cmd.spawn().expect("start the Python MCP server"),
            port: 0,
            _dir: dir,
        };
        for _ in 0..300 {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse().ok())
            {
                server.port = port;
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the Python MCP server `{name}` did not start within 15 s");
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "sluice-mcp-{tag}-{}-{}",
            std::process::id(),
            fastrand_u64()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}
