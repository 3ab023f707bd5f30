//! The property of the request-head fuzz target, shared by `cargo fuzz` and `cargo test`: for
//! any method, path and body, routing never panics; a routed model matches its route's globs
//! and no earlier route's; every refusal is a 4xx whose client message quotes at most a short
//! prefix of the input (the body of a 10 MB `model` is not a 10 MB error).

use http::Method;
use sluice_gateway::config::{glob_match, Config};
use sluice_gateway::route::head::{route_request, Routed};

/// Routes with literal names, `*` and `?` globs, and a catch-all last.
pub const CONFIG: &str = r#"
[[upstream]]
name = "u"
base_url = "http://127.0.0.1:9/v1"

[[route]]
models = ["gpt-4o", "gpt-4o-*"]
upstream = "u"

[[route]]
models = ["claude-?-*", "模型*"]
upstream = "u"

[[route]]
models = ["*mini*"]
upstream = "u"
"#;

pub fn config() -> Config {
    Config::from_toml(CONFIG, &|_| None).expect("the fuzz config loads")
}

const METHODS: &[Method] = &[Method::POST, Method::GET, Method::PUT, Method::DELETE];
const PATHS: &[&str] = &[
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/responses",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/models",
    "/healthz",
    "/metrics",
    "/admin/pools",
    "/chat/completions",
    "/v2/x",
    "/",
];

/// `data`: the first byte picks the method, the second the path (or, past the list, the rest
/// up to a newline is the path), the remainder is the body.
pub fn check(config: &Config, data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let method = &METHODS[data[0] as usize % METHODS.len()];
    let (path, body): (String, &[u8]) = match PATHS.get(data[1] as usize % (PATHS.len() + 1)) {
        Some(p) => (p.to_string(), &data[2..]),
        None => {
            let rest = &data[2..];
            let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
            (
                String::from_utf8_lossy(&rest[..end]).into_owned(),
                rest.get(end + 1..).unwrap_or(&[]),
            )
        }
    };
    match route_request(config, method, &path, body) {
        Ok(Routed::Local(_)) => assert_eq!(*method, Method::GET),
        Ok(Routed::Model { route, .. }) => {
            assert_eq!(*method, Method::POST);
            let v: serde_json::Value =
                serde_json::from_slice(body).expect("routed bodies are JSON");
            let model = v["model"]
                .as_str()
                .expect("routed bodies have a string model");
            let matches = |i: usize| config.routes[i].models.iter().any(|g| glob_match(g, model));
            assert!(matches(route), "{model:?} does not match route {route}");
            assert!(
                !(0..route).any(matches),
                "{model:?} matches an earlier route"
            );
        }
        Err(e) => {
            assert!(e.status().is_client_error(), "{e}: {}", e.status());
            let msg = e.message();
            assert!(
                msg.len() <= 600,
                "a {} byte message for {} input bytes",
                msg.len(),
                data.len()
            );
            assert!(!msg.contains('\n') && !msg.contains('\u{1b}'), "{msg:?}");
        }
    }
}
