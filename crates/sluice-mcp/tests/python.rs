//! The official MCP Python SDK (`mcp` on PyPI) as client and as servers, through the gateway,
//! over real sockets: two servers (tests/python/mcp_server.py) behind two gateway instances
//! that share the session secret, driven by tests/python/mcp_client.py.
//!
//! Needs a Python with the `mcp` SDK: `$SLUICE_PYTHON`, else `.venv/bin/python` at the
//! workspace root (`.ci/run` creates it). Without one (when the crate was built; see build.rs)
//! the tests are ignored with the reason, except under `CI=true`, where they run and fail.

mod support;

use std::process::Command;

use support::{config, python, workspace_root, GatewayServer, PyServer};

const GRANTS: &str = r#"
[[mcp.grant]]
keys = ["alice"]
server = "*"
tools = ["echo", "add", "slow", "cancelled", "whoami"]

[[mcp.grant]]
keys = ["bob"]
server = "beta"
"#;

async fn run_client(args: Vec<String>) {
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
async fn sdk_stateless_client_needs_no_session() {
    let (_alpha, _beta, cfg) = servers(false).await;
    let gw = GatewayServer::start(&config(&cfg)).await;
    run_client(vec!["stateless".into(), gw.url(), "alice".into()]).await;
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
