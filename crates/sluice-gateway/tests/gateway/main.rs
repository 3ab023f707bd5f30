//! The whole gateway in-process, between real clients and the real mock upstream, over real
//! sockets, on HTTP/1.1 and HTTP/2 on both sides.

// The mock's own test clients (hyper HTTP/1.1, h2): one copy, shared.
#[path = "../../../sluice-mock/tests/mock/support.rs"]
#[allow(dead_code)]
mod support;

mod cancel;
mod errors;
mod lanes;
mod relay;
mod shutdown;
mod timeouts;
mod tls;

use sluice_gateway::config::Config;
use sluice_gateway::Gateway;
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
}

pub async fn gateway(mock: &MockServer, s: Setup<'_>) -> Gateway {
    let protocol = if s.protocol.is_empty() {
        "h2c"
    } else {
        s.protocol
    };
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{}\n\n[[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"{protocol}\"\n{}\n\n[[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\n{}\n",
        s.server,
        mock.url(),
        s.upstream,
        s.route
    );
    let cfg = Config::from_toml(&text, &|k| (k == "TEST_KEY").then(|| "sk-test".to_string()))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    Gateway::start(cfg).await.unwrap()
}

pub const STREAM: &str = r#"{"model":"gpt-4o","stream":true}"#;
pub const CHAT: &str = r#"{"model":"gpt-4o"}"#;
