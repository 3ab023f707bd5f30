//! The MCP gateway over real sockets against Rust mock MCP servers (no Python needed):
//! sessions that a second instance continues, forged and altered ids refused, the stateless
//! revision, grants and limits, progress, cancellation, timeouts, degraded lists, era bridges,
//! credentials, the merged server stream and the admin view.

mod support;

use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use sluice_mcp::CallOutcome;
use std::sync::atomic::Ordering;
use support::mock::{MockEra, MockMcp};
use support::{config, messages, send, GatewayServer};

const GRANTS: &str = r#"
[[mcp.grant]]
keys = ["alice", "limited"]
server = "*"
tools = ["echo", "add", "whoami", "fail", "slow"]

[[mcp.grant]]
keys = ["bob"]
server = "beta"

[[mcp.limit]]
keys = ["limited"]
calls = { limit = 2, per = "1m" }
"#;

fn servers(a: &MockMcp, b: &MockMcp, extra_a: &str) -> String {
    format!(
        "[[mcp.server]]\nname = \"alpha\"\nurl = \"{}\"\n{extra_a}\n\n[[mcp.server]]\nname = \"beta\"\nurl = \"{}\"\n",
        a.url(),
        b.url()
    )
}

fn init_body(version: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": { "name": "test", "version": "1" } } })
    .to_string()
}

fn req(id: u64, method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string()
}

/// Opens a handshake-era session as `key`; the session id.
async fn open(gw: &GatewayServer, key: &str) -> String {
    let auth = format!("Bearer {key}");
    let (status, headers, body) = send(
        &gw.url(),
        Method::POST,
        &[("authorization", &auth)],
        &init_body("2025-11-25"),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");
    assert!(v["result"]["capabilities"]["tools"].is_object());
    headers["mcp-session-id"].to_str().unwrap().to_string()
}

async fn call(gw: &GatewayServer, key: &str, sid: &str, body: &str) -> (u16, Vec<Value>) {
    let auth = format!("Bearer {key}");
    let (status, headers, body) = send(
        &gw.url(),
        Method::POST,
        &[
            ("authorization", &auth),
            ("mcp-session-id", sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        body,
    )
    .await;
    (status.as_u16(), messages(&headers, &body))
}

fn tool_names(v: &Value) -> Vec<String> {
    let mut n: Vec<String> = v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

fn text(v: &Value) -> &str {
    v["result"]["content"][0]["text"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_federates_two_servers_and_survives_instances() {
    let (a, b) = (
        MockMcp::start("alpha", MockEra::Both).await,
        MockMcp::start("beta", MockEra::Both).await,
    );
    let cfg = config(&format!("{}{GRANTS}", servers(&a, &b, "")));
    let gw1 = GatewayServer::start(&cfg).await;
    let gw2 = GatewayServer::start(&cfg).await;
    let sid = open(&gw1, "alice").await;
    assert_eq!(a.stats.initialized.load(Ordering::Relaxed), 1);
    assert_eq!(b.stats.initialized.load(Ordering::Relaxed), 1);

    // The second instance serves the session: lists merged and filtered, calls routed.
    let (status, m) = call(&gw2, "alice", &sid, &req(2, "tools/list", json!({}))).await;
    assert_eq!(status, 200);
    let names = tool_names(&m[0]);
    assert!(names.contains(&"alpha__echo".into()) && names.contains(&"beta__add".into()));
    assert!(!names.iter().any(|n| n.ends_with("hidden")), "{names:?}");
    let (_, m) = call(
        &gw2,
        "alice",
        &sid,
        &req(
            3,
            "tools/call",
            json!({ "name": "alpha__echo", "arguments": { "text": "hi" } }),
        ),
    )
    .await;
    assert_eq!(text(&m[0]), "alpha:hi");
    assert_eq!(m[0]["id"], 3);
    let (_, m) = call(
        &gw1,
        "alice",
        &sid,
        &req(
            4,
            "tools/call",
            json!({ "name": "beta__add", "arguments": { "a": 2, "b": 40 } }),
        ),
    )
    .await;
    assert_eq!(text(&m[0]), "42");
    // A tool error is relayed and recorded as one.
    let (_, m) = call(
        &gw2,
        "alice",
        &sid,
        &req(
            5,
            "tools/call",
            json!({ "name": "beta__fail", "arguments": {} }),
        ),
    )
    .await;
    assert_eq!(m[0]["result"]["isError"], true);
    let recs = gw2.records.0.lock().clone();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].server, "alpha");
    assert_eq!(recs[0].tool, "echo");
    assert_eq!(recs[0].outcome, CallOutcome::Ok);
    assert_eq!(recs[0].key_id.as_deref(), Some("alice"));
    assert_eq!(recs[1].outcome, CallOutcome::ToolError);

    // ping is answered by the gateway.
    let (_, m) = call(&gw2, "alice", &sid, &req(6, "ping", json!({}))).await;
    assert_eq!(m[0]["result"], json!({}));

    // Forged, altered, missing, another key's: refused.
    let mut altered = sid.clone().into_bytes();
    let i = altered.len() / 2;
    altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for bad in [altered.as_str(), "forged", "", &"A".repeat(9000)] {
        let (status, _) = call(&gw2, "alice", bad, &req(7, "tools/list", json!({}))).await;
        assert_eq!(status, if bad.is_empty() { 400 } else { 404 }, "{bad:.40}");
    }
    let (status, _) = call(&gw2, "bob", &sid, &req(8, "tools/list", json!({}))).await;
    assert_eq!(status, 404, "another key's session");
    let (status, _, _) = send(
        &gw2.url(),
        Method::POST,
        &[("authorization", "Bearer alice")],
        &req(9, "tools/list", json!({})),
    )
    .await;
    assert_eq!(status, 400, "no session id");

    // The merged server stream carries both servers' notifications.
    let sid2 = sid.clone();
    let url = gw2.url();
    let got = tokio::time::timeout(Duration::from_secs(5), async move {
        use http_body_util::BodyExt;
        let uri: http::Uri = url.parse().unwrap();
        let io = tokio::net::TcpStream::connect(format!(
            "{}:{}",
            uri.host().unwrap(),
            uri.port_u16().unwrap()
        ))
        .await
        .unwrap();
        let (mut s, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .unwrap();
        tokio::spawn(conn);
        let r = http::Request::get(uri.path())
            .header("host", "x")
            .header("accept", "text/event-stream")
            .header("authorization", "Bearer alice")
            .header("mcp-session-id", sid2)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let mut resp = s.send_request(r).await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut seen = String::new();
        while seen.matches("list_changed").count() < 2 {
            let f = resp.body_mut().frame().await.unwrap().unwrap();
            seen.push_str(&String::from_utf8_lossy(&f.into_data().unwrap()));
        }
        seen
    })
    .await
    .expect("both notifications within 5 s");
    assert_eq!(got.matches("notifications/tools/list_changed").count(), 2);

    // DELETE ends the upstream sessions; this instance refuses the id from then on.
    let (status, _, _) = send(
        &gw1.url(),
        Method::DELETE,
        &[("authorization", "Bearer alice"), ("mcp-session-id", &sid)],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(a.stats.deleted.load(Ordering::Relaxed), 1);
    assert_eq!(b.stats.deleted.load(Ordering::Relaxed), 1);
    let (status, _) = call(&gw1, "alice", &sid, &req(10, "tools/list", json!({}))).await;
    assert_eq!(status, 404);

    // The admin view: servers, health, tool counts; no secret.
    let snap = gw2.gateway.admin_snapshot();
    assert_eq!(snap["servers"][0]["name"], "alpha");
    assert_eq!(snap["servers"][0]["status"], "up");
    assert_eq!(snap["servers"][0]["tools"], 6);
}

fn modern_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![
        ("authorization", "Bearer alice"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(n) = name {
        h.push(("mcp-name", n));
    }
    h
}

fn envelope() -> Value {
    json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stateless_revision_needs_no_session() {
    let (a, b) = (
        MockMcp::start("alpha", MockEra::Both).await,
        MockMcp::start("beta", MockEra::Both).await,
    );
    let gw = GatewayServer::start(&config(&format!("{}{GRANTS}", servers(&a, &b, "")))).await;
    let url = gw.url();

    let (status, _, body) = send(
        &url,
        Method::POST,
        &modern_headers("server/discover", None),
        &req(1, "server/discover", json!({ "_meta": envelope() })),
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert!(v["result"]["supportedVersions"]
        .as_array()
        .unwrap()
        .contains(&json!("2026-07-28")));

    let (status, headers, body) = send(
        &url,
        Method::POST,
        &modern_headers("tools/list", None),
        &req(2, "tools/list", json!({ "_meta": envelope() })),
    )
    .await;
    assert_eq!(status, 200);
    assert!(headers.get("mcp-session-id").is_none());
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert!(tool_names(&v).contains(&"beta__echo".into()));
    // Filtered per key: never shared-cacheable, whatever the servers said.
    assert_eq!(v["result"]["cacheScope"], "private");
    assert_eq!(v["result"]["resultType"], "complete");

    let (status, _, body) = send(
        &url,
        Method::POST,
        &modern_headers("tools/call", Some("alpha__echo")),
        &req(
            3,
            "tools/call",
            json!({ "_meta": envelope(), "name": "alpha__echo", "arguments": { "text": "x" } }),
        ),
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(text(&v), "alpha:x");
    assert_eq!(
        a.stats.initialized.load(Ordering::Relaxed),
        0,
        "no session upstream"
    );
    assert!(a.stats.modern_requests.load(Ordering::Relaxed) >= 2);

    // The envelope and routing headers are checked as the SDKs check them.
    type Case<'a> = (Vec<(&'a str, &'a str)>, String, u16, i64);
    let cases: Vec<Case<'_>> = vec![
        (
            modern_headers("tools/call", Some("alpha__add")),
            req(
                4,
                "tools/call",
                json!({ "_meta": envelope(), "name": "alpha__echo" }),
            ),
            400,
            -32020,
        ),
        (
            modern_headers("tools/list", None),
            req(5, "tools/list", json!({})),
            400,
            -32602,
        ),
        (
            vec![("mcp-protocol-version", "2099-01-01")],
            req(6, "tools/list", json!({ "_meta": envelope() })),
            400,
            -32022,
        ),
        (
            modern_headers("nope/nope", None),
            req(7, "nope/nope", json!({ "_meta": envelope() })),
            404,
            -32601,
        ),
    ];
    for (headers, body, status, code) in cases {
        let (s, _, b) = send(&url, Method::POST, &headers, &body).await;
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            (s.as_u16(), v["error"]["code"].as_i64()),
            (status, Some(code)),
            "{body}"
        );
    }
    // A notification is accepted and dropped.
    let (s, _, _) = send(
        &url,
        Method::POST,
        &[("mcp-protocol-version", "2026-07-28")],
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
    )
    .await;
    assert_eq!(s, 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_filter_lists_and_refuse_calls_and_limits_apply() {
    let (a, b) = (
        MockMcp::start("alpha", MockEra::Both).await,
        MockMcp::start("beta", MockEra::Both).await,
    );
    let gw = GatewayServer::start(&config(&format!("{}{GRANTS}", servers(&a, &b, "")))).await;
    let sid = open(&gw, "bob").await;
    // bob's session has no alpha part at all.
    assert_eq!(a.stats.initialized.load(Ordering::Relaxed), 0);
    let (_, m) = call(&gw, "bob", &sid, &req(2, "tools/list", json!({}))).await;
    let names = tool_names(&m[0]);
    assert!(names.iter().all(|n| n.starts_with("beta__")), "{names:?}");
    assert!(
        names.contains(&"beta__hidden".into()),
        "bob may use all of beta"
    );
    for (id, name) in [
        (3, "alpha__echo"),
        (4, "nope__echo"),
        (5, "echo"),
        (6, "beta__"),
    ] {
        let (status, m) = call(
            &gw,
            "bob",
            &sid,
            &req(
                id,
                "tools/call",
                json!({ "name": name, "arguments": { "text": "x" } }),
            ),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(m[0]["error"]["code"], -32602, "{name}");
        assert_eq!(m[0]["id"], id);
    }
    assert_eq!(a.stats.calls.load(Ordering::Relaxed), 0);
    let recs = gw.records.0.lock().clone();
    assert!(recs.iter().all(|r| r.outcome == CallOutcome::Refused));

    // Two calls a minute for `limited`, then 429 with the JSON-RPC error and Retry-After.
    let sid = open(&gw, "limited").await;
    let echo = |id| {
        req(
            id,
            "tools/call",
            json!({ "name": "alpha__echo", "arguments": { "text": "x" } }),
        )
    };
    for id in 10..12 {
        let (status, m) = call(&gw, "limited", &sid, &echo(id)).await;
        assert_eq!((status, text(&m[0])), (200, "alpha:x"));
    }
    let (status, headers, body) = send(
        &gw.url(),
        Method::POST,
        &[
            ("authorization", "Bearer limited"),
            ("mcp-session-id", &sid),
        ],
        &echo(12),
    )
    .await;
    assert_eq!(status, 429);
    assert!(headers.get("retry-after").is_some());
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], -32029);
    assert!(v["error"]["data"]["retryAfterMs"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_streams_and_a_dropped_client_cancels_the_call() {
    let (a, b) = (
        MockMcp::start("alpha", MockEra::Both).await,
        MockMcp::start("beta", MockEra::Both).await,
    );
    let gw = GatewayServer::start(&config(&format!("{}{GRANTS}", servers(&a, &b, "")))).await;
    let sid = open(&gw, "alice").await;
    let (_, m) = call(
        &gw,
        "alice",
        &sid,
        &req(2, "tools/call", json!({ "name": "alpha__slow", "arguments": { "steps": 3, "delay_ms": 10 }, "_meta": { "progressToken": "tok" } })),
    )
    .await;
    assert_eq!(m.len(), 4, "{m:?}");
    for (i, n) in m[..3].iter().enumerate() {
        assert_eq!(n["method"], "notifications/progress");
        assert_eq!(n["params"]["progressToken"], "tok");
        assert_eq!(n["params"]["progress"], i as u64 + 1);
    }
    assert_eq!(text(&m[3]), "alpha:slow done");

    // A client that goes away mid-call: the upstream stream is dropped and the upstream
    // session is told with notifications/cancelled.
    use http_body_util::BodyExt;
    let uri: http::Uri = gw.url().parse().unwrap();
    let io = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let (mut s, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let r = http::Request::post(uri.path())
        .header("host", "x")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", "Bearer alice")
        .header("mcp-session-id", &sid)
        .body(http_body_util::Full::new(bytes::Bytes::from(req(
            3,
            "tools/call",
            json!({ "name": "alpha__slow", "arguments": { "steps": 1000, "delay_ms": 20 }, "_meta": { "progressToken": 7 } }),
        ))))
        .unwrap();
    let mut resp = s.send_request(r).await.unwrap();
    let first = resp
        .body_mut()
        .frame()
        .await
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
    drop(resp);
    drop(s);
    conn.abort();
    let mut ok = false;
    for _ in 0..100 {
        if a.stats.cancel_notes.load(Ordering::Relaxed) >= 1
            && a.stats.dropped_streams.load(Ordering::Relaxed) >= 1
        {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ok,
        "cancel notes {}, dropped streams {}",
        a.stats.cancel_notes.load(Ordering::Relaxed),
        a.stats.dropped_streams.load(Ordering::Relaxed)
    );
    let recs = gw.records.0.lock().clone();
    assert_eq!(recs.last().unwrap().outcome, CallOutcome::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_times_out_and_a_dead_server_degrades_the_list() {
    let (a, b) = (
        MockMcp::start("alpha", MockEra::Both).await,
        MockMcp::start("beta", MockEra::Both).await,
    );
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let cfg = config(&format!(
        "{}\n[[mcp.server]]\nname = \"gone\"\nurl = \"http://{dead_addr}/mcp\"\ntimeouts = {{ connect = \"200ms\", list = \"500ms\" }}\n{GRANTS}",
        servers(&a, &b, "timeouts = { call = \"300ms\" }")
    ));
    let gw = GatewayServer::start(&cfg).await;
    let auth = "Bearer alice";
    let (status, headers, body) = send(
        &gw.url(),
        Method::POST,
        &[("authorization", auth)],
        &init_body("2025-06-18"),
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        v["result"]["_meta"]["sluice/unavailable"][0]["server"],
        "gone"
    );
    let sid = headers["mcp-session-id"].to_str().unwrap().to_string();
    let (_, m) = call(&gw, "alice", &sid, &req(2, "tools/list", json!({}))).await;
    assert!(tool_names(&m[0]).contains(&"alpha__echo".into()));
    assert_eq!(
        m[0]["result"]["_meta"]["sluice/unavailable"][0]["server"],
        "gone"
    );

    let started = tokio::time::Instant::now();
    let (_, m) = call(
        &gw,
        "alice",
        &sid,
        &req(3, "tools/call", json!({ "name": "alpha__slow", "arguments": { "steps": 1000, "delay_ms": 20 }, "_meta": { "progressToken": 1 } })),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    let last = m.last().unwrap();
    assert_eq!(last["error"]["code"], -32001, "{m:?}");
    assert_eq!(last["id"], 3);
    let recs = gw.records.0.lock().clone();
    assert_eq!(recs.last().unwrap().outcome, CallOutcome::Timeout);
    for _ in 0..100 {
        if a.stats.dropped_streams.load(Ordering::Relaxed) >= 1
            && a.stats.cancel_notes.load(Ordering::Relaxed) >= 1
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(a.stats.dropped_streams.load(Ordering::Relaxed), 1);
    assert_eq!(a.stats.cancel_notes.load(Ordering::Relaxed), 1);
    let snap = gw.gateway.admin_snapshot();
    assert_eq!(snap["servers"][2]["name"], "gone");
    assert_ne!(snap["servers"][2]["status"], "up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eras_are_bridged_both_ways() {
    let (a, b) = (
        MockMcp::start("alpha", MockEra::ModernOnly).await,
        MockMcp::start("beta", MockEra::HandshakeOnly).await,
    );
    let gw = GatewayServer::start(&config(&format!("{}{GRANTS}", servers(&a, &b, "")))).await;
    // A handshake-era client: alpha (2026-07-28 only) gets envelopes.
    let sid = open(&gw, "alice").await;
    let (_, m) = call(
        &gw,
        "alice",
        &sid,
        &req(
            2,
            "tools/call",
            json!({ "name": "alpha__echo", "arguments": { "text": "old" } }),
        ),
    )
    .await;
    assert_eq!(text(&m[0]), "alpha:old");
    let (_, m) = call(&gw, "alice", &sid, &req(3, "tools/list", json!({}))).await;
    let names = tool_names(&m[0]);
    assert!(
        names.contains(&"alpha__add".into()) && names.contains(&"beta__add".into()),
        "{m:?}"
    );
    // A 2026-07-28 client: beta (handshake only) is served through a gateway-held session.
    for id in [4, 5] {
        let (status, _, body) = send(
            &gw.url(),
            Method::POST,
            &modern_headers("tools/call", Some("beta__echo")),
            &req(id, "tools/call", json!({ "_meta": envelope(), "name": "beta__echo", "arguments": { "text": "new" } })),
        )
        .await;
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((status.as_u16(), text(&v)), (200, "beta:new"), "{v}");
    }
    // One session for the client's, one for the bridge (reused by the second call).
    assert_eq!(b.stats.initialized.load(Ordering::Relaxed), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_injected_per_server_and_never_shown() {
    let (a, b) = (
        MockMcp::start("alpha", MockEra::Both).await,
        MockMcp::start("beta", MockEra::Both).await,
    );
    let cfg = format!(
        "[[mcp.server]]\nname = \"alpha\"\nurl = \"{}\"\nauth = {{ type = \"bearer\", env = \"TEST_MCP_TOKEN\" }}\n\n\
         [[mcp.server]]\nname = \"beta\"\nurl = \"{}\"\nauth = {{ type = \"passthrough\" }}\n{GRANTS}",
        a.url(),
        b.url()
    );
    let gw = GatewayServer::start(&config(&cfg)).await;
    let sid = open(&gw, "alice").await;
    let whoami = |id, server: &str| {
        req(
            id,
            "tools/call",
            json!({ "name": format!("{server}__whoami"), "arguments": {} }),
        )
    };
    let (_, m) = call(&gw, "alice", &sid, &whoami(2, "alpha")).await;
    assert_eq!(text(&m[0]), "Bearer static-token-for-alpha");
    let (_, _, body) = send(
        &gw.url(),
        Method::POST,
        &[
            ("authorization", "Bearer alice"),
            ("mcp-session-id", &sid),
            ("x-client-token", "Bearer users-own-token"),
        ],
        &whoami(3, "beta"),
    )
    .await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(text(&v), "Bearer users-own-token");
    // The gateway's own key never goes upstream.
    assert_ne!(a.stats.last_auth.lock().as_deref(), Some("Bearer alice"));
    let shown = format!(
        "{} {:?} {:?}",
        gw.gateway.admin_snapshot(),
        gw.records.0.lock(),
        config(&cfg).mcp
    );
    assert!(!shown.contains("static-token-for-alpha") && !shown.contains("users-own-token"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_refused_in_json_rpc_form() {
    let (a, b) = (
        MockMcp::start("alpha", MockEra::Both).await,
        MockMcp::start("beta", MockEra::Both).await,
    );
    let gw = GatewayServer::start(&config(&format!("{}{GRANTS}", servers(&a, &b, "")))).await;
    let url = gw.url();
    for (body, status, code) in [
        ("{", 400, -32700),
        ("[]", 400, -32600),
        (r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, 400, -32600),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"initialize"}"#,
            400,
            -32600,
        ),
    ] {
        let (s, _, b) = send(&url, Method::POST, &[], body).await;
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            (s.as_u16(), v["error"]["code"].as_i64()),
            (status, Some(code)),
            "{body}"
        );
    }
    // Refused from its Content-Length, before the body is read.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    tcp.write_all(b"POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 5242880\r\n\r\n")
        .await
        .unwrap();
    let mut head = vec![0u8; 12];
    tcp.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 413");
    let (s, h, _) = send(&url, Method::PUT, &[], "").await;
    assert_eq!(s, 405);
    assert!(h.get("allow").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_server_is_reached_with_its_ca_file() {
    let (m, pem) = MockMcp::start_tls("tls", MockEra::Both).await;
    let dir = support::TempDir::new("ca");
    let ca = dir.0.join("ca.pem");
    std::fs::write(&ca, pem).unwrap();
    let url = format!("https://localhost:{}/mcp", m.addr.port());
    let cfg = config(&format!(
        "[[mcp.server]]\nname = \"trusted\"\nurl = \"{url}\"\nca_file = \"{}\"\n\n\
         [[mcp.server]]\nname = \"untrusted\"\nurl = \"{url}\"\n\
         [[mcp.grant]]\nkeys = [\"*\"]\nserver = \"*\"\n",
        ca.display()
    ));
    let gw = GatewayServer::start(&cfg).await;
    let sid = open(&gw, "alice").await;
    let (_, m2) = call(
        &gw,
        "alice",
        &sid,
        &req(
            2,
            "tools/call",
            json!({ "name": "trusted__echo", "arguments": { "text": "tls" } }),
        ),
    )
    .await;
    assert_eq!(text(&m2[0]), "tls:tls");
    // Without the CA the certificate is not trusted: that server is left out, said so.
    let (_, m3) = call(&gw, "alice", &sid, &req(3, "tools/list", json!({}))).await;
    assert_eq!(
        m3[0]["result"]["_meta"]["sluice/unavailable"][0]["server"],
        "untrusted"
    );
    assert_eq!(m.stats.initialized.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_at_initialize_joins_later_and_a_lost_session_is_reopened() {
    // `late` is down when the session begins.
    let spot = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let late_addr = spot.local_addr().unwrap();
    drop(spot);
    let a = MockMcp::start("alpha", MockEra::Both).await;
    let cfg = config(&format!(
        "[[mcp.server]]\nname = \"alpha\"\nurl = \"{}\"\n\n[[mcp.server]]\nname = \"late\"\nurl = \"http://{late_addr}/mcp\"\n{GRANTS}",
        a.url()
    ));
    let gw = GatewayServer::start(&cfg).await;
    let sid = open(&gw, "alice").await;
    let (_, m) = call(&gw, "alice", &sid, &req(2, "tools/list", json!({}))).await;
    assert_eq!(
        m[0]["result"]["_meta"]["sluice/unavailable"][0]["server"],
        "late"
    );

    // It comes up; after the repair backoff the same session gets it.
    let late = support::mock::MockMcp::start_on(late_addr, "late", MockEra::Both).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (_, m) = call(&gw, "alice", &sid, &req(3, "tools/list", json!({}))).await;
    assert!(tool_names(&m[0]).contains(&"late__echo".into()), "{m:?}");
    assert!(m[0]["result"]["_meta"].is_null());
    let echo = |id, text: &str| {
        req(
            id,
            "tools/call",
            json!({ "name": "late__echo", "arguments": { "text": text } }),
        )
    };
    let (_, m) = call(&gw, "alice", &sid, &echo(4, "joined")).await;
    assert_eq!(text(&m[0]), "late:joined");
    assert_eq!(late.stats.initialized.load(Ordering::Relaxed), 1);

    // The server forgets its sessions (a restart): the call goes on a new one, transparently.
    a.stats.sessions.lock().clear();
    let (status, m) = call(
        &gw,
        "alice",
        &sid,
        &req(
            5,
            "tools/call",
            json!({ "name": "alpha__echo", "arguments": { "text": "again" } }),
        ),
    )
    .await;
    assert_eq!((status, text(&m[0])), (200, "alpha:again"));
    assert_eq!(a.stats.initialized.load(Ordering::Relaxed), 2);
    // DELETE ends the repaired parts too.
    let (status, _, _) = send(
        &gw.url(),
        Method::DELETE,
        &[("authorization", "Bearer alice"), ("mcp-session-id", &sid)],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(late.stats.deleted.load(Ordering::Relaxed), 1);
    assert_eq!(
        a.stats.deleted.load(Ordering::Relaxed),
        2,
        "the lost one and the new one"
    );
}
