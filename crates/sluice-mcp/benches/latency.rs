//! Added latency per tool call: the same `tools/call` (a JSON answer from a Rust mock MCP
//! server) sent directly to the mock and through `McpGateway`, alternately, in one run, over
//! kept-alive HTTP/1.1 connections on loopback; p50/p90/p99 of each and the difference.
//! Also the cost of `initialize` through the gateway (the fan-out to the server, the merge, the
//! session id) against `initialize` at the mock directly. Target: +0.3 ms p50 at most.
//!
//! Run: `cargo bench -p sluice-mcp --bench latency` (`SLUICE_BENCH_CALLS=N`, default 3000).

#[path = "support/latency_run.rs"]
mod latency_run;
#[path = "../tests/support/mock.rs"]
#[allow(dead_code)]
mod mock;

use std::convert::Infallible;
use std::net::SocketAddr;

use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use latency_run::{calls_from_env, compare, config_text};
use mock::{MockEra, MockMcp};
use sluice_config::Config;
use sluice_mcp::{Caller, McpDeps, McpGateway};
use tokio::net::TcpListener;

async fn serve_gateway(gw: McpGateway) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (io, _) = listener.accept().await.unwrap();
            let _ = io.set_nodelay(true);
            let gw = gw.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let gw = gw.clone();
                    async move {
                        let caller = Caller {
                            key_id: Some("bench".into()),
                            authorization: None,
                            traceparent: None,
                        };
                        Ok::<_, Infallible>(gw.handle(req, caller).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(io), svc)
                    .await;
            });
        }
    });
    addr
}

fn main() {
    let calls = calls_from_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let m = MockMcp::start("alpha", MockEra::Both).await;
        let cfg = Config::from_toml(&config_text("", &m.url()), &|_| None).unwrap();
        let gw = McpGateway::new(&cfg.mcp, McpDeps::default()).unwrap();
        let gw_addr = serve_gateway(gw).await;
        compare(m.addr, gw_addr, calls, "through McpGateway").await;
        let seen = m.stats.calls.load(std::sync::atomic::Ordering::Relaxed) as usize;
        assert_eq!(seen, 2 * (calls + 300));
    });
}
