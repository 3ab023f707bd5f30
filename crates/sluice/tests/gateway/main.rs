//! The whole gateway in-process, between real clients and the real mock upstream, over real
//! sockets, on HTTP/1.1 and HTTP/2 on both sides.

// The mock's own test clients (hyper HTTP/1.1, h2): one copy, shared.
#[path = "../../../sluice-mock/tests/mock/support.rs"]
#[allow(dead_code)]
mod support;

mod access_log;
mod admin;
mod balance;
mod cache;
mod cancel;
mod client_limits;
mod collector;
mod compression;
mod edge;
mod endpoints;
mod errors;
mod guardrails;
mod http1_upstream;
mod hygiene;
mod lanes;
mod ledger;
mod memory;
mod policy;
mod raw;
mod relay;
mod reload;
mod resets;
mod resumable;
mod shutdown;
mod stalled_body;
mod timeouts;
mod tls;
mod trace;
mod translate;
mod workers;

use sluice::Server;
use sluice_gateway::config::Config;
use sluice_mock::MockServer;

/// Settings of one test's gateway; empty strings keep the defaults.
#[derive(Default)]
pub struct Setup<'a> {
    /// Lines under [server].
    pub server: &'a str,
    /// Lines under the [[upstream]].
    pub upstream: &'a str,
    /// Lines under the [[route]].
    pub route: &'a str,
    /// Upstream protocol (default h2c).
    pub protocol: &'a str,
    /// The route's model globs, as a TOML array (default `["*"]`).
    pub models: &'a str,
    /// Serve client connections on these threads (`sluice serve`'s way) instead of the test's
    /// runtime.
    pub workers: Option<std::sync::Arc<sluice_gateway::workers::Workers>>,
}

/// A gateway whose one upstream is the mock.
pub async fn gateway(mock: &MockServer, s: Setup<'_>) -> Server {
    gateway_at(&format!("{}/v1", mock.url()), s).await
}

/// A gateway whose one upstream (named `mock`) is at `base_url`.
pub async fn gateway_at(base_url: &str, s: Setup<'_>) -> Server {
    let or = |v: &'static str, given: &str| {
        if given.is_empty() {
            v.to_string()
        } else {
            given.to_string()
        }
    };
    let (protocol, models) = (or("h2c", s.protocol), or("[\"*\"]", s.models));
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{}\n{}\n\n[[upstream]]\nname = \"mock\"\nbase_url = \"{base_url}\"\nprotocol = \"{protocol}\"\n{}\n\n[[route]]\nmodels = {models}\nupstream = \"mock\"\n{}\n",
        // The access log only where a test reads it: elsewhere its lines are noise.
        if s.server.contains("access_log") {
            ""
        } else {
            "access_log = \"off\""
        },
        s.server,
        s.upstream,
        s.route
    );
    let cfg = Config::from_toml(&text, &|k| (k == "TEST_KEY").then(|| "sk-test".to_string()))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    match s.workers {
        Some(w) => Server::start_on_workers(cfg, None, w).await.unwrap(),
        None => Server::start(cfg).await.unwrap(),
    }
}

pub const STREAM: &str = r#"{"model":"gpt-4o","stream":true}"#;
pub const CHAT: &str = r#"{"model":"gpt-4o"}"#;
