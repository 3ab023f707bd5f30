//! Added latency per tool call through the whole gateway (`sluice::Server`, the MCP gateway
//! mounted at `/mcp` on its listener: the edge, the key lookup, the mount, `sluice-mcp`),
//! against the same `tools/call` sent directly to a Rust mock MCP server, alternately, in one
//! run, over kept-alive HTTP/1.1 on loopback; p50/p90/p99 of each and the difference. Also
//! `initialize` each way. Target (issue 32): +0.3 ms p50 at most.
//!
//! Run: `cargo bench -p sluice --bench mcp_latency` (`SLUICE_BENCH_CALLS=N`, default 3000).

#[path = "../../sluice-mcp/tests/support/mock.rs"]
#[allow(dead_code)]
mod mock;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use mock::{MockEra, MockMcp};
use sluice_gateway::config::Config;
use tokio::time::Instant;

async fn client(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let io = tokio::net::TcpStream::connect(addr).await.unwrap();
    io.set_nodelay(true).unwrap();
    let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    s
}

async fn post(
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

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
const CALL_DIRECT: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}"#;
const CALL_GATEWAY: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"hello"}}}"#;

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let calls: usize = std::env::var("SLUICE_BENCH_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let m = MockMcp::start("alpha", MockEra::Both).await;
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"u\"\n\
             [mcp]\nsession_secret = \"bench-secret-0123456789abcdef0123456789\"\n\
             [[mcp.server]]\nname = \"alpha\"\nurl = \"{}\"\n\
             [[mcp.grant]]\nkeys = [\"*\"]\nserver = \"*\"\n\
             [[mcp.limit]]\nkeys = [\"*\"]\ncalls = {{ limit = 1000000000, per = \"1s\" }}\n",
            m.url()
        );
        let cfg = Config::from_toml(&text, &|_| None).unwrap();
        let server = sluice::Server::start(cfg).await.unwrap();
        let gw_addr = server.addr();

        let mut direct = client(m.addr).await;
        let mut via = client(gw_addr).await;

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
        let dh = [("mcp-session-id", direct_sid.as_str()), ("mcp-protocol-version", "2025-11-25")];
        let vh = [("mcp-session-id", via_sid.as_str()), ("mcp-protocol-version", "2025-11-25")];

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
        println!(
            "tools/call through sluice::Server (/mcp on the gateway's listener), {calls} each, \
             sequential, loopback, kept-alive HTTP/1.1:"
        );
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
        assert_eq!(m.stats.calls.load(std::sync::atomic::Ordering::Relaxed) as usize, 2 * (calls + 300));
    });
}
