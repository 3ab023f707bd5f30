//! Virtual keys, limits, budgets and idempotency, through the whole gateway in-process, between
//! real clients and the real mock upstream, over real sockets.

// The mock's own test clients (hyper HTTP/1.1, h2): one copy, shared.
#[path = "../../../sluice-mock/tests/mock/support.rs"]
#[allow(dead_code)]
mod support;

mod admin;
mod auth;
mod budget;
mod feed;
mod idempotency;
mod limits;
mod teams;

use bytes::Bytes;
use http::Request;
use sluice::Server;
use sluice_gateway::config::Config;
use sluice_mock::MockServer;

/// `sha256:<hex>` of a key, as `[[key]] hash` takes it.
pub fn hash(key: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A gateway in front of the mock (upstream `mock`, h2c, its own bearer key `sk-upstream`),
/// with `routes` (whole `[[route]]` tables) and `rest` (keys, prices, state) appended.
pub async fn gateway(mock: &MockServer, routes: &str, rest: &str) -> Server {
    Server::start(config(mock, routes, rest)).await.unwrap()
}

pub fn config(mock: &MockServer, routes: &str, rest: &str) -> Config {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\nauth = {{ type = \"bearer\", env = \"UPSTREAM_KEY\" }}\n\n[[upstream]]\nname = \"open\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\n{routes}\n{rest}\n",
        mock.url(),
        mock.url()
    );
    Config::from_toml(&text, &|k| {
        (k == "UPSTREAM_KEY").then(|| "sk-upstream".to_string())
    })
    .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A POST with a key header (`authorization: Bearer` unless `header` names another).
pub fn post(path: &str, key: Option<(&str, &str)>, body: &str) -> Request<Bytes> {
    let mut b = Request::builder()
        .method("POST")
        .uri(format!("http://gw{path}"))
        .header("content-type", "application/json");
    if let Some((header, key)) = key {
        b = if header == "authorization" {
            b.header(header, format!("Bearer {key}"))
        } else {
            b.header(header, key)
        };
    }
    b.body(Bytes::from(body.to_string())).unwrap()
}

pub fn bearer(key: &str) -> Option<(&'static str, &str)> {
    Some(("authorization", key))
}

pub const CHAT: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
