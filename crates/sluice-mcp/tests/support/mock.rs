//! A small MCP server in Rust (Streamable HTTP, both eras), for tests that need no Python and
//! for the added-latency benchmark: `initialize` (with or without a session), `tools/list`,
//! `tools/call` (`echo`, `add`, `whoami`, `fail`, and `slow`, which streams progress over SSE
//! and counts streams the client dropped), `notifications/*`, a GET stream that says
//! `tools/list_changed` once, and DELETE. It can play a 2026-07-28-only or a handshake-only
//! server.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What era the mock accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MockEra {
    /// Both (like the Python SDK's servers).
    Both,
    /// 2026-07-28 only: `initialize` gets -32022.
    ModernOnly,
    /// Handshake only: a 2026-07-28 request without a session gets 400.
    HandshakeOnly,
}

/// What the mock saw.
#[derive(Default, Debug)]
pub struct MockStats {
    pub initialized: AtomicU64,
    pub calls: AtomicU64,
    pub cancel_notes: AtomicU64,
    pub dropped_streams: AtomicU64,
    pub deleted: AtomicU64,
    pub modern_requests: AtomicU64,
    pub last_auth: Mutex<Option<String>>,
    pub sessions: Mutex<Vec<String>>,
}

pub struct MockMcp {
    pub addr: SocketAddr,
    pub stats: Arc<MockStats>,
    task: JoinHandle<()>,
}

impl Drop for MockMcp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockMcp {
    pub async fn start(name: &'static str, era: MockEra) -> MockMcp {
        Self::serve(name, era, None).await
    }

    /// The same on a given address (a server that comes up where one was down).
    pub async fn start_on(addr: SocketAddr, name: &'static str, era: MockEra) -> MockMcp {
        Self::serve_at(addr, name, era, None).await
    }

    /// The same over https with a self-signed certificate for `localhost`; its PEM.
    pub async fn start_tls(name: &'static str, era: MockEra) -> (MockMcp, String) {
        use rustls_pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let pem = ck.cert.pem();
        let cert = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        let key = PrivateKeyDer::from_pem_slice(ck.signing_key.serialize_pem().as_bytes()).unwrap();
        let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        (Self::serve(name, era, Some(acceptor)).await, pem)
    }

    async fn serve(
        name: &'static str,
        era: MockEra,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> MockMcp {
        Self::serve_at(SocketAddr::from(([127, 0, 0, 1], 0)), name, era, tls).await
    }

    async fn serve_at(
        addr: SocketAddr,
        name: &'static str,
        era: MockEra,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> MockMcp {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(MockStats::default());
        let st = stats.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((io, _)) = listener.accept().await else {
                    return;
                };
                let _ = io.set_nodelay(true);
                let st = st.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let st = st.clone();
                        async move { Ok::<_, Infallible>(handle(name, era, st, req).await) }
                    });
                    let builder = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(io), svc).await;
                        }
                        Some(acceptor) => {
                            if let Ok(io) = acceptor.accept(io).await {
                                let _ = builder.serve_connection(TokioIo::new(io), svc).await;
                            }
                        }
                    }
                });
            }
        });
        MockMcp { addr, stats, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

type B = BoxBody<Bytes, Infallible>;

fn json_resp(status: StatusCode, v: &Value) -> Response<B> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

fn empty(status: StatusCode) -> Response<B> {
    let mut r = Response::new(Full::new(Bytes::new()).boxed());
    *r.status_mut() = status;
    r
}

fn sse_event(v: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {v}\n\n"))
}

/// A body fed by a channel; the producer notices the client went away when a send fails.
struct ChanBody(mpsc::Receiver<Bytes>);

impl Body for ChanBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

fn sse_resp(rx: mpsc::Receiver<Bytes>) -> Response<B> {
    let mut r = Response::new(ChanBody(rx).boxed());
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    r
}

fn tools() -> Value {
    let obj = |props: Value| json!({ "type": "object", "properties": props });
    json!([
        { "name": "echo", "description": "echo", "inputSchema": obj(json!({ "text": { "type": "string" } })) },
        { "name": "add", "description": "add", "inputSchema": obj(json!({ "a": { "type": "integer" }, "b": { "type": "integer" } })) },
        { "name": "whoami", "description": "the Authorization header", "inputSchema": obj(json!({})) },
        { "name": "fail", "description": "a tool error", "inputSchema": obj(json!({})) },
        { "name": "slow", "description": "progress over SSE", "inputSchema": obj(json!({ "steps": { "type": "integer" }, "delay_ms": { "type": "integer" } })) },
        { "name": "hidden", "description": "never granted in the tests", "inputSchema": obj(json!({})) },
    ])
}

fn text_result(t: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": t }] })
}

async fn handle(
    name: &str,
    era: MockEra,
    st: Arc<MockStats>,
    req: Request<Incoming>,
) -> Response<B> {
    let (parts, body) = req.into_parts();
    let h = &parts.headers;
    let header = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    *st.last_auth.lock() = header("authorization");
    let modern = header("mcp-protocol-version").as_deref() == Some("2026-07-28");
    let session = header("mcp-session-id");
    match parts.method {
        http::Method::DELETE => {
            st.deleted.fetch_add(1, Ordering::Relaxed);
            return empty(StatusCode::OK);
        }
        http::Method::GET => {
            if session.is_none() {
                return empty(StatusCode::METHOD_NOT_ALLOWED);
            }
            let (tx, rx) = mpsc::channel(4);
            tokio::spawn(async move {
                let note =
                    json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed" });
                let _ = tx.send(sse_event(&note)).await;
                // Open until the client leaves.
                tx.closed().await;
            });
            return sse_resp(rx);
        }
        _ => {}
    }
    let body = body.collect().await.unwrap().to_bytes();
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return json_resp(
            StatusCode::BAD_REQUEST,
            &json!({ "jsonrpc": "2.0", "id": null, "error": { "code": -32700, "message": "Parse error" } }),
        );
    };
    let id = msg.get("id").cloned();
    let method = msg
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    if modern {
        st.modern_requests.fetch_add(1, Ordering::Relaxed);
        if era == MockEra::HandshakeOnly && session.is_none() {
            return json_resp(
                StatusCode::BAD_REQUEST,
                &json!({ "jsonrpc": "2.0", "id": "server-error", "error": { "code": -32600, "message": "Bad Request: Missing session ID" } }),
            );
        }
    }
    let Some(id) = id else {
        if method == "notifications/cancelled" {
            st.cancel_notes.fetch_add(1, Ordering::Relaxed);
        }
        return empty(StatusCode::ACCEPTED);
    };
    let ok = |result: Value| {
        json_resp(
            StatusCode::OK,
            &json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        )
    };
    if !modern && method != "initialize" {
        let known = session
            .as_ref()
            .is_some_and(|s| st.sessions.lock().contains(s));
        if !known && era != MockEra::ModernOnly {
            return json_resp(
                StatusCode::NOT_FOUND,
                &json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32600, "message": "Session not found" } }),
            );
        }
    }
    match method.as_str() {
        "initialize" => {
            if era == MockEra::ModernOnly {
                return json_resp(
                    StatusCode::BAD_REQUEST,
                    &json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32022, "message": "Unsupported protocol version", "data": { "supported": ["2026-07-28"], "requested": "2025-11-25" } } }),
                );
            }
            st.initialized.fetch_add(1, Ordering::Relaxed);
            let sid = format!("{name}-session-{}", st.sessions.lock().len());
            st.sessions.lock().push(sid.clone());
            let v = params
                .get("protocolVersion")
                .cloned()
                .unwrap_or(json!("2025-11-25"));
            let mut r = ok(json!({
                "protocolVersion": v,
                "capabilities": { "tools": { "listChanged": true } },
                "serverInfo": { "name": name, "version": "1" },
            }));
            r.headers_mut()
                .insert("mcp-session-id", sid.parse().unwrap());
            r
        }
        "server/discover" => {
            if era == MockEra::HandshakeOnly {
                return json_resp(
                    StatusCode::BAD_REQUEST,
                    &json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32600, "message": "Bad Request: Missing session ID" } }),
                );
            }
            ok(
                json!({ "supportedVersions": ["2026-07-28"], "capabilities": { "tools": {} }, "resultType": "complete", "ttlMs": 0, "cacheScope": "private" }),
            )
        }
        "tools/list" => ok(json!({ "tools": tools(), "ttlMs": 60000, "cacheScope": "public" })),
        "tools/call" => {
            st.calls.fetch_add(1, Ordering::Relaxed);
            let tool = params.get("name").and_then(Value::as_str).unwrap_or("");
            let args = params.get("arguments").cloned().unwrap_or(json!({}));
            match tool {
                "echo" => ok(text_result(&format!(
                    "{name}:{}",
                    args.get("text").and_then(Value::as_str).unwrap_or("")
                ))),
                "add" => ok(text_result(
                    &(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0))
                        .to_string(),
                )),
                "whoami" => ok(text_result(
                    &st.last_auth
                        .lock()
                        .clone()
                        .unwrap_or_else(|| "<none>".into()),
                )),
                "fail" => ok(
                    json!({ "content": [{ "type": "text", "text": "it failed" }], "isError": true }),
                ),
                "slow" => {
                    let steps = args["steps"].as_u64().unwrap_or(3);
                    let delay = Duration::from_millis(args["delay_ms"].as_u64().unwrap_or(20));
                    let token = params
                        .get("_meta")
                        .and_then(|m| m.get("progressToken"))
                        .cloned();
                    let (tx, rx) = mpsc::channel(2);
                    let (name, id, st) = (name.to_string(), id.clone(), st.clone());
                    tokio::spawn(async move {
                        for i in 1..=steps {
                            tokio::time::sleep(delay).await;
                            if let Some(t) = &token {
                                let note = json!({ "jsonrpc": "2.0", "method": "notifications/progress", "params": { "progressToken": t, "progress": i, "total": steps } });
                                if tx.send(sse_event(&note)).await.is_err() {
                                    st.dropped_streams.fetch_add(1, Ordering::Relaxed);
                                    return;
                                }
                            }
                        }
                        let done = json!({ "jsonrpc": "2.0", "id": id, "result": text_result(&format!("{name}:slow done")) });
                        if tx.send(sse_event(&done)).await.is_err() {
                            st.dropped_streams.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    sse_resp(rx)
                }
                other => json_resp(
                    StatusCode::OK,
                    &json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32602, "message": format!("Unknown tool: {other}") } }),
                ),
            }
        }
        _ => json_resp(
            StatusCode::OK,
            &json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": "Method not found" } }),
        ),
    }
}
