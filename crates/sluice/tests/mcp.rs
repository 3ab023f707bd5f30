//! The MCP gateway as `sluice serve` runs it: mounted at `/mcp` on the gateway's listener,
//! callers identified by the gateway's own virtual keys, each tool call on the books (the
//! ledger), its metrics on `/metrics` and its servers on `/admin/mcp`. The official MCP Python
//! SDK is the client (tests/python/mcp_client.py) and the servers (tests/python/mcp_server.py),
//! over real sockets, through two `sluice::Server` instances that share the session secret.
//!
//! Needs a Python with the `mcp` SDK (`$SLUICE_PYTHON`, else `.venv/bin/python`; `.ci/run`
//! creates it): without one the tests are ignored with the reason, except under `CI=true`.

#[path = "gateway/collector.rs"]
#[allow(dead_code)]
mod collector;
// The MCP crate's test support: its Python servers and client runner, over real sockets.
#[path = "../../sluice-mcp/tests/support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use http::StatusCode;
use sluice::Server;
use sluice_gateway::config::Config;
use support::{run_client, send, PyServer, TempDir};

const SECRET: &str = "whole-server-test-secret-0123456789abcdef";

/// `sha256:<hex>` of a key, as `[[key]] hash` takes it.
fn hash(key: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A whole Sluice config: one model route (unused here), three keys (alice may use both
/// servers' granted tools, bob only beta, `gone` is revoked), the ledger in `db`, every trace
/// sampled to `collector`, and the two MCP servers.
fn config(alpha: &PyServer, beta: &PyServer, db: &Path, collector: SocketAddr) -> Config {
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
access_log = "off"

[[upstream]]
name = "u"
base_url = "http://127.0.0.1:9/v1"

[[route]]
models = ["*"]
upstream = "u"

[[key]]
id = "alice"
hash = "{alice}"

[[key]]
id = "bob"
hash = "{bob}"

[[key]]
id = "gone"
hash = "{gone}"
revoked = true

[telemetry]
endpoint = "http://{collector}/v1/traces"
sampling_ratio = 1.0

[ledger]
flush_interval = "100ms"
sink = {{ kind = "sqlite", path = "{db}" }}

[mcp]
session_secret = "{SECRET}"

[[mcp.server]]
name = "alpha"
url = "{alpha}"

[[mcp.server]]
name = "beta"
url = "{beta}"

[[mcp.grant]]
keys = ["alice"]
server = "*"
tools = ["echo", "add", "slow", "cancelled", "whoami"]

[[mcp.grant]]
keys = ["bob"]
server = "beta"
"#,
        alice = hash("sk-alice"),
        bob = hash("sk-bob"),
        gone = hash("sk-gone"),
        db = db.display(),
        alpha = alpha.url(),
        beta = beta.url(),
    );
    Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// One HTTP/1.1 request (the MCP support's client): status and body as text.
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, String) {
    let url = format!("http://{addr}{path}");
    let (status, _, body) = send(&url, method.parse().unwrap(), headers, body).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The ledger's tool-call rows: (key, model, upstream, status, end reason).
fn tool_calls(db: &Path) -> Vec<(String, String, Option<String>, i64, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut q = conn
        .prepare(
            "SELECT key_id, served_model, upstream, status, end_reason FROM sluice_requests \
             WHERE route = 'mcp' AND client_api = 'mcp' ORDER BY ts_us",
        )
        .unwrap();
    q.query_map([], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Polls until the ledger's writer has flushed rows matching `want` (it flushes every 100 ms).
async fn wait_for_rows(
    db: &Path,
    want: impl Fn(&[(String, String, Option<String>, i64, String)]) -> bool,
) -> Vec<(String, String, Option<String>, i64, String)> {
    let mut rows = Vec::new();
    for _ in 0..100 {
        if db.exists() {
            rows = tool_calls(db);
            if want(&rows) {
                return rows;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the ledger never held the expected tool calls: {rows:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python_mcp,
    ignore = "no Python with the `mcp` SDK: create .venv (see README)"
)]
async fn sdk_through_two_servers_keys_books_metrics_and_admin() {
    let (alpha, beta) = tokio::join!(
        PyServer::start("alpha", false),
        PyServer::start("beta", false)
    );
    let dir = TempDir::new("ledger");
    let (db_a, db_b) = (dir.0.join("a.db"), dir.0.join("b.db"));
    let traces = collector::Collector::start().await;
    let a = Server::start(config(&alpha, &beta, &db_a, traces.addr))
        .await
        .unwrap();
    let b = Server::start(config(&alpha, &beta, &db_b, traces.addr))
        .await
        .unwrap();
    let url = |s: &Server| format!("http://{}/mcp", s.addr());

    // alice's session opens on A and goes on on B (a balancer without affinity): federated,
    // filtered by her grant, progress streamed, a cancelled call cancelled on the server.
    run_client(vec!["session".into(), url(&a), url(&b), "sk-alice".into()]).await;
    // The calls after `initialize` were B's: on B's books, under alice's key id (never the
    // key), the server as the upstream and the prefixed tool as the model.
    let rows = wait_for_rows(&db_b, |rows| {
        rows.iter()
            .any(|r| r.1 == "alpha__echo" && r.4 == "ok" && r.3 == 200)
            && rows.iter().any(|r| r.1 == "beta__add")
            && rows.iter().any(|r| r.4 == "cancelled")
    })
    .await;
    assert!(rows.iter().all(|r| r.0 == "alice"), "{rows:#?}");
    assert!(
        rows.iter()
            .any(|r| r.2.as_deref() == Some("alpha") && r.1 == "alpha__echo"),
        "{rows:#?}"
    );

    // Each call is a span named after its tool, with the key id (never the key).
    let spans = traces
        .wait_for("the tool call spans", |s| {
            s.iter().any(|s| s.name == "execute_tool alpha__echo")
        })
        .await;
    let echo = spans
        .iter()
        .find(|s| s.name == "execute_tool alpha__echo")
        .unwrap();
    let attr = |k: &str| echo.str(k);
    assert_eq!(attr("gen_ai.tool.name"), Some("alpha__echo"));
    assert_eq!(attr("sluice.key_id"), Some("alice"));
    assert_eq!(attr("sluice.end_reason"), Some("ok"));

    // A client of the stateless revision (2026-07-28) needs no session on either instance.
    run_client(vec![
        "stateless".into(),
        url(&a),
        url(&b),
        "sk-alice".into(),
    ])
    .await;

    // bob's key sees only beta: alpha's tools are neither listed nor callable, and the refusal
    // is on A's books as his.
    run_client(vec!["nogrant".into(), url(&a), "sk-bob".into()]).await;
    let rows = wait_for_rows(&db_a, |rows| {
        rows.iter()
            .any(|r| r.0 == "bob" && r.4 == "refused" && r.3 == 403)
    })
    .await;
    assert!(
        rows.iter()
            .any(|r| r.0 == "bob" && r.1 == "beta__echo" && r.4 == "ok"),
        "{rows:#?}"
    );

    // A revoked key is refused before any server hears of it, in JSON-RPC form.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let (status, body) = http(
        a.addr(),
        "POST",
        "/mcp",
        &[
            ("authorization", "Bearer sk-gone"),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        init,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["jsonrpc"], "2.0", "{body}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("revoked"),
        "{body}"
    );

    // The model API beside it is untouched: an unknown path is still the gateway's 404.
    let (status, _) = http(a.addr(), "GET", "/mcp/other", &[], "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // `/admin/mcp`: both servers, with their tool counts; `/metrics`: the MCP families.
    let (status, body) = http(a.admin_addr(), "GET", "/admin/mcp", &[], "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta"], "{body}");
    let (_, metrics) = http(b.admin_addr(), "GET", "/metrics", &[], "").await;
    assert!(
        metrics.contains("sluice_mcp_calls_total{server=\"alpha\",tool=\"echo\",outcome=\"ok\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_mcp_servers_the_path_is_the_gateways_404_and_admin_says_disabled() {
    let text = "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\naccess_log = \"off\"\n\n[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n[[route]]\nmodels = [\"*\"]\nupstream = \"u\"\n";
    let s = Server::start(Config::from_toml(text, &|_| None).unwrap())
        .await
        .unwrap();
    let (status, _) = http(s.addr(), "POST", "/mcp", &[], "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = http(s.admin_addr(), "GET", "/admin/mcp", &[], "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("mcp_disabled"), "{body}");
}

/// The mount's credential rule, through the whole server: a gateway key identifies the caller
/// and never reaches an MCP server, even one that takes the client's own credential; a token
/// the gateway does not know is that credential, and reaches such a server unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_key_never_reaches_a_server_and_the_clients_own_token_does() {
    let m = support::mock::MockMcp::start("alpha", support::mock::MockEra::Both).await;
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
access_log = "off"

[[upstream]]
name = "u"
base_url = "http://127.0.0.1:9/v1"

[[route]]
models = ["*"]
upstream = "u"

[[key]]
id = "alice"
hash = "{alice}"

[mcp]
session_secret = "{SECRET}"

[[mcp.server]]
name = "alpha"
url = "{url}"
auth = {{ type = "passthrough" }}

[[mcp.grant]]
keys = ["*"]
server = "*"
"#,
        alice = hash("sk-alice"),
        url = m.url(),
    );
    let s = Server::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let (status, body) = http(
        s.addr(),
        "POST",
        "/mcp",
        &[("authorization", "Bearer sk-alice")],
        init,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        m.stats
            .initialized
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1,
        "the server was asked"
    );
    assert_eq!(
        *m.stats.last_auth.lock(),
        None,
        "the gateway key went upstream"
    );
    let (status, body) = http(
        s.addr(),
        "POST",
        "/mcp",
        &[("authorization", "Bearer users-own-token")],
        init,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        m.stats.last_auth.lock().as_deref(),
        Some("Bearer users-own-token")
    );
}
