//! The official MCP Python SDK (`mcp` on PyPI) as client and as servers, through the gateway,
//! over real sockets: two servers (tests/python/mcp_server.py) behind two gateway instances
//! that share the session secret, driven by tests/python/mcp_client.py.
//!
//! Needs a Python with the `mcp` SDK: `$SLUICE_PYTHON`, else `.venv/bin/python` at the
//! workspace root (`.ci/run` creates it). Without one (when the crate was built; see build.rs)
//! the tests are ignored with the reason, except under `CI=true`, where they run and fail.

mod support;

use support::{config, python, run_client, workspace_root, GatewayServer, PyServer};

const GRANTS: &str = r#"
[[mcp.grant]]
keys = ["alice"]
server = "*"
tools = ["echo", "add", "slow", "cancelled", "whoami"]

[[mcp.grant]]
keys = ["bob"]
server = "beta"
"#;

async fn servers(json_beta: bool) -> (PyServer, PyServer, String) {
    let (alpha, beta) = tokio::join!(
        PyServer::start("alpha", false),
        PyServer::start("beta", json_beta)
    );
    let cfg = format!(
        "[[mcp.server]]\nname = \"alpha\"\nurl = \"{}\"\n\n[[mcp.server]]\nname = \"beta\"\nurl = \"{}\"\n{GRANTS}",
        alpha.url(),
        beta.url()
    );
    (alpha, beta, cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python_mcp,
    ignore = "no Python with the `mcp` SDK: create .venv (see README)"
)]
async fn sdk_session_federates_and_continues_on_a_second_instance() {
    // beta answers in JSON mode, alpha in SSE mode: both shapes go through.
    let (_alpha, _beta, cfg) = servers(true).await;
    let cfg = config(&cfg);
    let a = GatewayServer::start(&cfg).await;
    let b = GatewayServer::start(&cfg).await;
    run_client(vec!["session".into(), a.url(), b.url(), "alice".into()]).await;
    // The second instance served the calls; its records have them, with the key and no secret.
    let recs = b.records.0.lock().clone();
    assert!(recs.iter().any(|r| r.server == "alpha" && r.tool == "echo"));
    assert!(recs.iter().any(|r| r.server == "beta" && r.tool == "add"));
    assert!(recs
        .iter()
        .any(|r| r.outcome == sluice_mcp::CallOutcome::Cancelled));
    assert!(recs.iter().all(|r| r.key_id.as_deref() == Some("alice")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python_mcp,
    ignore = "no Python with the `mcp` SDK: create .venv (see README)"
)]
async fn sdk_stateless_client_needs_no_session_on_either_instance() {
    let (_alpha, _beta, cfg) = servers(false).await;
    let cfg = config(&cfg);
    let a = GatewayServer::start(&cfg).await;
    let b = GatewayServer::start(&cfg).await;
    run_client(vec!["stateless".into(), a.url(), b.url(), "alice".into()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python_mcp,
    ignore = "no Python with the `mcp` SDK: create .venv (see README)"
)]
async fn sdk_key_without_the_grant_sees_and_calls_nothing_of_it() {
    let (_alpha, _beta, cfg) = servers(false).await;
    let gw = GatewayServer::start(&config(&cfg)).await;
    run_client(vec!["nogrant".into(), gw.url(), "bob".into()]).await;
}

/// A local stdio server (the SDK's, over stdin/stdout) started and supervised by the gateway:
/// its tools federated next to an HTTP server's, its environment only what the config gives,
/// progress and cancellation through the shared process, a restart after it crashes, and the
/// process gone with the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python_mcp,
    ignore = "no Python with the `mcp` SDK: create .venv (see README)"
)]
async fn stdio_server_is_started_supervised_and_restarted() {
    use http::Method;
    use serde_json::{json, Value};
    use std::time::Duration;
    use support::{messages, send};

    let alpha = PyServer::start("alpha", false).await;
    let script = workspace_root().join("tests/python/mcp_server.py");
    let cfg = config(&format!(
        r#"
[[mcp.server]]
name = "alpha"
url = "{}"

[[mcp.server]]
name = "gamma"
command = ["{}", "{}", "gamma", "--stdio"]
env = {{ GAMMA_SETTING = "configured" }}
restart = {{ policy = "always", backoff = "100ms", max_backoff = "1s" }}

[[mcp.grant]]
keys = ["alice"]
server = "*"
"#,
        alpha.url(),
        python().display(),
        script.display()
    ));
    let gw = GatewayServer::start(&cfg).await;
    let url = gw.url();
    let (_, headers, body) = send(
        &url,
        Method::POST,
        &[("authorization", "Bearer alice")],
        &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } })
        .to_string(),
    )
    .await;
    let init: Value = serde_json::from_slice(&body).unwrap();
    assert!(init["result"]["_meta"].is_null(), "every server up: {init}");
    let sid = headers["mcp-session-id"].to_str().unwrap().to_string();
    let call = |id: u64, method: &str, params: Value| {
        let (url, sid) = (url.clone(), sid.clone());
        let body =
            json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string();
        async move {
            let (_, h, b) = send(
                &url,
                Method::POST,
                &[("authorization", "Bearer alice"), ("mcp-session-id", &sid)],
                &body,
            )
            .await;
            messages(&h, &b)
        }
    };
    let text = |v: &Value| {
        v["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let tool = |name: &str, args: Value| json!({ "name": name, "arguments": args });

    let m = call(2, "tools/list", json!({})).await;
    let names: Vec<&str> = m[0]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"gamma__echo") && names.contains(&"alpha__echo"),
        "{names:?}"
    );
    assert_eq!(
        text(
            &call(
                3,
                "tools/call",
                tool("gamma__echo", json!({ "text": "hi" }))
            )
            .await[0]
        ),
        "gamma:hi"
    );
    // Its environment: what the config gives, and nothing of the gateway's beyond inherit_env.
    assert_eq!(
        text(
            &call(
                4,
                "tools/call",
                tool("gamma__getenv", json!({ "name": "GAMMA_SETTING" }))
            )
            .await[0]
        ),
        "configured"
    );
    assert_eq!(
        text(
            &call(
                5,
                "tools/call",
                tool("gamma__getenv", json!({ "name": "CARGO_MANIFEST_DIR" }))
            )
            .await[0]
        ),
        "<unset>"
    );

    // Progress, with the client's token given back.
    let m = call(6, "tools/call", json!({ "name": "gamma__slow", "arguments": { "steps": 2, "delay": 0.05 }, "_meta": { "progressToken": "p-1" } })).await;
    assert_eq!(m.len(), 3, "{m:?}");
    assert_eq!(m[0]["params"]["progressToken"], "p-1");
    assert!(text(&m[2]).contains("slow done"));
    assert_eq!(m[2]["id"], 6);

    // A client that goes away mid-call cancels it in the process.
    {
        let url = url.clone();
        let sid = sid.clone();
        let h = tokio::spawn(async move {
            send(
                &url,
                Method::POST,
                &[("authorization", "Bearer alice"), ("mcp-session-id", &sid)],
                &json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": { "name": "gamma__slow", "arguments": { "steps": 100, "delay": 0.1 } } }).to_string(),
            )
            .await
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        h.abort();
        let _ = h.await;
    }
    let mut counts = String::new();
    for i in 0..50 {
        counts = text(&call(100 + i, "tools/call", tool("gamma__cancelled", json!({}))).await[0]);
        if counts == "2/1" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(counts, "2/1", "started/cancelled");

    // A crash ends the call with an error; the supervisor starts it again.
    let m = call(8, "tools/call", tool("gamma__crash", json!({}))).await;
    assert_eq!(m[0]["error"]["code"], -32000, "{m:?}");
    let mut back = false;
    for i in 0..100 {
        let m = call(
            200 + i,
            "tools/call",
            tool("gamma__echo", json!({ "text": "again" })),
        )
        .await;
        if text(&m[0]) == "gamma:again" {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "the stdio server came back");
    let snap = gw.gateway.admin_snapshot();
    let gamma = &snap["servers"][1];
    assert_eq!(gamma["transport"], "stdio");
    assert_eq!(gamma["restarts"], 1, "{snap}");
    let pid = gamma["pid"].as_u64().unwrap();

    // The process ends with the gateway.
    drop(gw);
    let mut gone = false;
    for _ in 0..50 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        if status.is_empty() || status.contains("State:\tZ") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "pid {pid} still running");
}
