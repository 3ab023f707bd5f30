//! Added latency per tool call through the whole gateway (`sluice::Server`, the MCP gateway
//! mounted at `/mcp` on its listener: the edge, the key lookup, the mount, `sluice-mcp`),
//! against the same `tools/call` sent directly to a Rust mock MCP server, alternately, in one
//! run, over kept-alive HTTP/1.1 on loopback; p50/p90/p99 of each and the difference. Also
//! `initialize` each way. Target (issue 32): +0.3 ms p50 at most.
//!
//! Run: `cargo bench -p sluice --bench mcp_latency` (`SLUICE_BENCH_CALLS=N`, default 3000).

#[path = "../../sluice-mcp/benches/support/latency_run.rs"]
mod latency_run;
#[path = "../../sluice-mcp/tests/support/mock.rs"]
#[allow(dead_code)]
mod mock;

use latency_run::{calls_from_env, compare, config_text};
use mock::{MockEra, MockMcp};
use sluice_gateway::config::Config;

fn main() {
    let calls = calls_from_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let m = MockMcp::start("alpha", MockEra::Both).await;
        let server = "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n";
        let cfg = Config::from_toml(&config_text(server, &m.url()), &|_| None).unwrap();
        let server = sluice::Server::start(cfg).await.unwrap();
        compare(
            m.addr,
            server.addr(),
            calls,
            "through sluice::Server (/mcp on the gateway's listener)",
        )
        .await;
        let seen = m.stats.calls.load(std::sync::atomic::Ordering::Relaxed) as usize;
        assert_eq!(seen, 2 * (calls + 300));
    });
}
