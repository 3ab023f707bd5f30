//! Who may call: unknown, missing and revoked keys get 401 in the client's format before any
//! upstream work; a key outside its models or routes gets 403; the client's key never reaches
//! the upstream on a keyed route, whatever the upstream's auth.

use crate::support::*;
use crate::{bearer, gateway, hash, post, CHAT};

fn keys() -> String {
    format!(
        r#"
[[key]]
id = "alpha"
hash = "{}"
owner = "alice"
team = "search"

[[key]]
id = "gone"
hash = "{}"
revoked = true

[[key]]
id = "gpt-only"
hash = "{}"
models = ["gpt-*"]
routes = ["chat"]
"#,
        hash("sk-alpha"),
        hash("sk-revoked"),
        hash("sk-gpt-only")
    )
}

const ROUTES: &str = r#"
[[route]]
name = "chat"
models = ["gpt-*"]
upstream = "mock"

[[route]]
name = "claude"
models = ["claude*"]
upstream = "mock"
"#;

#[tokio::test]
async fn bad_keys_get_401_in_the_clients_format_and_reach_no_upstream() {
    let mock = mock("").await;
    let gw = gateway(&mock, ROUTES, &keys()).await;
    let cases = [
        (None, "missing_api_key"),
        (bearer("sk-nope"), "invalid_api_key"),
        (Some(("x-api-key", "sk-nope")), "invalid_api_key"),
        (bearer("sk-revoked"), "revoked_api_key"),
        (Some(("x-api-key", "sk-revoked")), "revoked_api_key"),
    ];
    for (key, code) in cases {
        let r = h1(gw.addr(), post("/v1/chat/completions", key, CHAT)).await;
        assert_eq!(r.status, 401, "{key:?}");
        assert_eq!(r.json()["error"]["code"], code, "{key:?}");
        assert_eq!(r.json()["error"]["type"], "authentication_error");
        assert!(
            !String::from_utf8_lossy(&r.body).contains("sk-"),
            "the key is never echoed"
        );
        let body = r#"{"model":"claude-x","max_tokens":10,"messages":[]}"#;
        let r = h2(
            &h2_connect(gw.addr()).await,
            post("/v1/messages", key, body),
        )
        .await;
        assert_eq!(r.status, 401);
        assert_eq!(r.json()["type"], "error");
        assert_eq!(r.json()["error"]["type"], "authentication_error");
    }
    // Even a body that is not JSON: the key is refused before the body is read.
    let r = h1(gw.addr(), post("/v1/chat/completions", bearer("sk-x"), "{")).await;
    assert_eq!(r.status, 401);
    assert!(mock.stats().snapshot().requests.is_empty());
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains("sluice_key_refusals_total{reason=\"invalid_api_key\"} 5"),
        "{metrics}"
    );
    assert!(metrics.contains("sluice_request_end_total{reason=\"unauthorized\"} 11"));
}

#[tokio::test]
async fn a_key_is_replaced_by_the_upstreams_credential() {
    let mock = mock("").await;
    let gw = gateway(&mock, ROUTES, &keys()).await;
    for key in [bearer("sk-alpha"), Some(("x-api-key", "sk-alpha"))] {
        let r = h1(gw.addr(), post("/v1/chat/completions", key, CHAT)).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    let snap = mock.stats().snapshot();
    assert_eq!(snap.requests.len(), 2);
    for req in &snap.requests {
        let get = |name: &str| {
            req.headers
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(get("authorization"), ["Bearer sk-upstream"]);
        assert!(get("x-api-key").is_empty());
    }
}

#[tokio::test]
async fn a_key_outside_its_models_or_routes_gets_403() {
    let mock = mock("").await;
    let routes = r#"
[[route]]
name = "chat"
models = ["gpt-4*", "o1*"]
upstream = "mock"

[[route]]
name = "next"
models = ["gpt-5*"]
upstream = "mock"
"#;
    let gw = gateway(&mock, routes, &keys()).await;
    let send = |key: &'static str, model: &str| {
        let body = format!(r#"{{"model":"{model}","messages":[]}}"#);
        let addr = gw.addr();
        async move { h1(addr, post("/v1/chat/completions", bearer(key), &body)).await }
    };
    let r = send("sk-gpt-only", "gpt-4o").await;
    assert_eq!(r.status, 200);
    // The route allows it, the key's models do not.
    let r = send("sk-gpt-only", "o1-mini").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["code"], "model_not_allowed");
    assert_eq!(r.json()["error"]["type"], "permission_error");
    // The key's models allow it, its routes do not.
    let r = send("sk-gpt-only", "gpt-5").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["code"], "route_not_allowed");
    // The unrestricted key may use both.
    assert_eq!(send("sk-alpha", "gpt-5").await.status, 200);
    assert_eq!(send("sk-alpha", "o1-mini").await.status, 200);
    assert_eq!(mock.stats().snapshot().requests.len(), 3);
}

#[tokio::test]
async fn keys_are_optional_per_route_and_passthrough_stays_possible() {
    let mock = mock("").await;
    let routes = r#"
[[route]]
name = "chat"
models = ["open-*"]
upstream = "open"
keys = "optional"

[[route]]
name = "off"
models = ["off-*"]
upstream = "open"
keys = "off"

[[route]]
name = "locked"
models = ["locked-*"]
upstream = "open"
"#;
    let gw = gateway(&mock, routes, &keys()).await;
    let body = |m: &str| format!(r#"{{"model":"{m}","messages":[]}}"#);
    // Optional: no key, or the upstream's own key (passed through), or one of ours (used, and
    // not forwarded).
    for (key, forwarded) in [
        (None, None),
        (bearer("sk-provider"), Some("Bearer sk-provider")),
        (bearer("sk-alpha"), None),
        (bearer("sk-gpt-only"), None),
    ] {
        let r = h1(
            gw.addr(),
            post("/v1/chat/completions", key, &body("open-1")),
        )
        .await;
        let expect = if key == bearer("sk-gpt-only") {
            403
        } else {
            200
        };
        assert_eq!(r.status, expect, "{key:?}");
        if expect == 200 {
            let snap = mock.stats().snapshot();
            let last = snap.requests.last().unwrap();
            let auth = last
                .headers
                .iter()
                .find(|(n, _)| n == "authorization")
                .map(|(_, v)| v.as_str());
            assert_eq!(auth, forwarded, "{key:?}");
        }
    }
    let r = h1(
        gw.addr(),
        post(
            "/v1/chat/completions",
            bearer("sk-revoked"),
            &body("open-1"),
        ),
    )
    .await;
    assert_eq!(r.status, 401);
    // Off: no key check at all (a revoked key is not looked at), and still never forwarded.
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-revoked"), &body("off-1")),
    )
    .await;
    assert_eq!(r.status, 200);
    let snap = mock.stats().snapshot();
    let last = snap.requests.last().unwrap();
    assert!(last.headers.iter().all(|(n, _)| n != "authorization"));
    // Required with a passthrough upstream: the client's key is still not forwarded.
    let r = h1(
        gw.addr(),
        post(
            "/v1/chat/completions",
            bearer("sk-alpha"),
            &body("locked-1"),
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    let snap = mock.stats().snapshot();
    let last = snap.requests.last().unwrap();
    assert!(last
        .headers
        .iter()
        .all(|(n, _)| n != "authorization" && n != "x-api-key"));
    let r = h1(
        gw.addr(),
        post(
            "/v1/chat/completions",
            bearer("sk-provider"),
            &body("locked-1"),
        ),
    )
    .await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn keys_come_from_a_key_file_too() {
    let mock = mock("").await;
    let dir = std::env::temp_dir().join(format!("sluice-keyfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys.toml");
    std::fs::write(
        &file,
        format!(
            "[[key]]\nid = \"from-file\"\nhash = \"{}\"\nteam = \"ops\"\n",
            hash("sk-file")
        ),
    )
    .unwrap();
    let rest = format!("{}\n[keys]\nfile = \"{}\"\n", keys(), file.display());
    let gw = gateway(&mock, ROUTES, &rest).await;
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-file"), CHAT),
    )
    .await;
    assert_eq!(r.status, 200);
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-alpha"), CHAT),
    )
    .await;
    assert_eq!(r.status, 200);
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains("sluice_key_requests_total{team=\"ops\",owner=\"\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("sluice_key_requests_total{team=\"search\",owner=\"alice\"} 1"));
    let _ = std::fs::remove_dir_all(dir);
}

/// The access log names the key, its team and owner, never the key itself.
#[tokio::test]
async fn the_access_log_names_the_key_and_never_its_secret() {
    let mock = sluice_mock::MockServer::start(sluice_mock::MockConfig::default())
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("sluice-keys-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    let mut config = crate::config(&mock, ROUTES, &keys());
    config.server.access_log = sluice_gateway::access_log::AccessLogSink::File(path.clone());
    let gw = sluice::Server::start(config).await.unwrap();
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-alpha"), CHAT),
    )
    .await;
    assert_eq!(r.status, 200);
    // The writer batches lines on its own thread: wait for the line, bounded.
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.contains("status=200") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let line = text
        .lines()
        .find(|l| l.contains("status=200"))
        .unwrap_or_else(|| panic!("no access log line: {text:?}"));
    assert!(line.contains("key=alpha"), "{line}");
    assert!(line.contains("team=search"), "{line}");
    assert!(line.contains("owner=alice"), "{line}");
    assert!(!line.contains("sk-alpha"), "{line}");
    let _ = std::fs::remove_dir_all(dir);
}
