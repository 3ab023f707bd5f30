//! What the MCP latency benchmarks share (`sluice-mcp`'s, through `McpGateway` alone, and
//! `sluice`'s, through the whole server): the client, the messages, the alternating
//! measurement and its report. Included with `#[path]` by both.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

/// Calls per side: `SLUICE_BENCH_CALLS`, default 3,000.
pub fn calls_from_env() -> usize {
    std::env::var("SLUICE_BENCH_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000)
}

/// A config with one MCP server at `mock_url`, granted to everyone with no practical limit;
/// `server` is prepended (a `[server]` table, or nothing).
pub fn config_text(server: &str, mock_url: &str) -> String {
    format!(
        "{server}[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"u\"\n\
         [mcp]\nsession_secret = \"bench-secret-0123456789abcdef0123456789\"\n\
         [[mcp.server]]\nname = \"alpha\"\nurl = \"{mock_url}\"\n\
         [[mcp.grant]]\nkeys = [\"*\"]\nserver = \"*\"\n\
         [[mcp.limit]]\nkeys = [\"*\"]\ncalls = {{ limit = 1000000000, per = \"1s\" }}\n"
    )
}

pub async fn client(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let io = tokio::net::TcpStream::connect(addr).await.unwrap();
    io.set_nodelay(true).unwrap();
    let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    s
}

pub async fn post(
    s: &mut SendRequest<Full<Bytes>>,
    headers: &[(&str, &str)],
    body: &'static str,
) -> (http::HeaderMap, Bytes) {
    s.ready().await.unwrap();
    let mut req = Request::post("/mcp")
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = s
        .send_request(
            req.body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap(),
        )
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let b = body.collect().await.unwrap().to_bytes();
    assert_eq!(parts.status, 200, "{}", String::from_utf8_lossy(&b));
    (parts.headers, b)
}

pub const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
pub const CALL_DIRECT: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}"#;
pub const CALL_GATEWAY: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"hello"}}}"#;

pub fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `initialize` 200 times and `calls` tool calls each way, alternating, after 300 warm-up
/// calls; prints the percentiles and the difference. The mock sees `2 * (calls + 300)` calls.
pub async fn compare(direct_addr: SocketAddr, via_addr: SocketAddr, calls: usize, title: &str) {
    let mut direct = client(direct_addr).await;
    let mut via = client(via_addr).await;

    // Sessions, and what initialize costs each way.
    let mut init_direct = Vec::new();
    let mut init_via = Vec::new();
    let mut direct_sid = String::new();
    let mut via_sid = String::new();
    for _ in 0..200 {
        let t = Instant::now();
        let (h, _) = post(&mut direct, &[], INIT).await;
        init_direct.push(t.elapsed());
        direct_sid = h["mcp-session-id"].to_str().unwrap().to_string();
        let t = Instant::now();
        let (h, _) = post(&mut via, &[], INIT).await;
        init_via.push(t.elapsed());
        via_sid = h["mcp-session-id"].to_str().unwrap().to_string();
    }
    let dh = [
        ("mcp-session-id", direct_sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let vh = [
        ("mcp-session-id", via_sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];

    // Warm up both paths (connections, allocator, branch predictors).
    for _ in 0..300 {
        post(&mut direct, &dh, CALL_DIRECT).await;
        post(&mut via, &vh, CALL_GATEWAY).await;
    }
    let mut d = Vec::with_capacity(calls);
    let mut v = Vec::with_capacity(calls);
    for i in 0..calls {
        // Alternate which goes first, so neither always follows the other.
        if i % 2 == 0 {
            let t = Instant::now();
            post(&mut direct, &dh, CALL_DIRECT).await;
            d.push(t.elapsed());
            let t = Instant::now();
            let (_, b) = post(&mut via, &vh, CALL_GATEWAY).await;
            v.push(t.elapsed());
            debug_assert!(b.windows(11).any(|w| w == b"alpha:hello"));
        } else {
            let t = Instant::now();
            post(&mut via, &vh, CALL_GATEWAY).await;
            v.push(t.elapsed());
            let t = Instant::now();
            post(&mut direct, &dh, CALL_DIRECT).await;
            d.push(t.elapsed());
        }
    }
    println!("tools/call {title}, {calls} each, sequential, loopback, kept-alive HTTP/1.1:");
    for (name, s) in [("direct", &mut d), ("via gateway", &mut v)] {
        println!(
            "  {name:<12} p50 {:>7.1} µs   p90 {:>7.1} µs   p99 {:>7.1} µs",
            us(pct(s, 0.5)),
            us(pct(s, 0.9)),
            us(pct(s, 0.99))
        );
    }
    let added = us(pct(&mut v, 0.5)) - us(pct(&mut d, 0.5));
    println!("  added latency p50: {added:.1} µs (target ≤ 300 µs)");
    println!("initialize (one server), 200 each:");
    println!(
        "  direct p50 {:.1} µs, via gateway p50 {:.1} µs (fan-out, initialized, merge, session id)",
        us(pct(&mut init_direct, 0.5)),
        us(pct(&mut init_via, 0.5))
    );
}
