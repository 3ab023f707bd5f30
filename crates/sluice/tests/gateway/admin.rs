//! The admin plane over real sockets: its own listener, the token, readiness during a drain,
//! the redacted config and the dashboard's feed.

use std::time::Duration;

use http_body_util::BodyExt;
use sluice::Server;
use sluice_gateway::config::Config;

use crate::support::*;
use crate::{gateway, Setup, CHAT, STREAM};

const TOKEN: &str = "test-admin-token-0123456789abcdef";

fn get(path: &str) -> http::Request<bytes::Bytes> {
    request("GET", path, "", "")
}

fn with_auth(path: &str, auth: &str) -> http::Request<bytes::Bytes> {
    let mut r = get(path);
    r.headers_mut()
        .insert("authorization", auth.parse().unwrap());
    r
}

#[tokio::test]
async fn metrics_and_admin_live_only_on_the_admin_listener() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    assert_ne!(gw.addr(), gw.admin_addr());
    assert!(gw.admin_addr().ip().is_loopback());
    assert_eq!(
        h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT))
            .await
            .status,
        200
    );
    // The client listener: the APIs and /healthz, nothing else.
    for path in [
        "/metrics",
        "/admin/pools",
        "/admin/config",
        "/admin/",
        "/admin/feed",
        "/readyz",
    ] {
        let r = h1(gw.addr(), get(path)).await;
        assert_eq!(r.status, 404, "{path} on the client listener");
    }
    assert_eq!(h1(gw.addr(), get("/healthz")).await.status, 200);
    // The admin listener.
    let admin = gw.admin_addr();
    let m = h1(admin, get("/metrics")).await;
    assert_eq!(m.status, 200);
    let text = String::from_utf8(m.body.to_vec()).unwrap();
    assert!(
        text.contains("sluice_requests_total{route=\"*\",status=\"200\"} 1"),
        "{text}"
    );
    assert_eq!(
        h1(admin, get("/admin/pools")).await.json()["upstreams"][0]["name"],
        "mock"
    );
    assert_eq!(h1(admin, get("/healthz")).await.status, 200);
    let ready = h1(admin, get("/readyz")).await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json()["status"], "ready");
    let page = h1(admin, get("/admin/")).await;
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("id=\"active-streams\""));
    assert_eq!(h1(admin, get("/admin/dashboard.js")).await.status, 200);
    assert_eq!(h1(admin, get("/admin/nope")).await.status, 404);
    assert_eq!(
        h1(admin, request("POST", "/metrics", "", "")).await.status,
        405
    );
}

#[tokio::test]
async fn admin_config_is_redacted_and_hashed() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: &format!("admin_token = \"{TOKEN}\""),
            upstream: "auth = { type = \"bearer\", env = \"TEST_KEY\" }",
            ..Setup::default()
        },
    )
    .await;
    let auth = format!("Bearer {TOKEN}");
    let r = h1(gw.admin_addr(), with_auth("/admin/config", &auth)).await;
    assert_eq!(r.status, 200);
    let body = String::from_utf8(r.body.to_vec()).unwrap();
    // Neither the upstream key nor the admin token leaves.
    assert!(!body.contains("sk-test"), "{body}");
    assert!(!body.contains(TOKEN), "{body}");
    let v = r.json();
    assert_eq!(v["config"]["upstream"][0]["auth"]["secret"], "<redacted>");
    assert_eq!(v["config"]["server"]["admin_token"], "<redacted>");
    assert_eq!(v["config"]["upstream"][0]["timeouts"]["idle"], "5m");
    let hash = v["hash"].as_str().unwrap();
    assert!(
        hash.starts_with("sha256:") && hash.len() == 7 + 64,
        "{hash}"
    );
    // The same config gives the same hash.
    let again = h1(gw.admin_addr(), with_auth("/admin/config", &auth))
        .await
        .json();
    assert_eq!(again["hash"], v["hash"]);
}

#[tokio::test]
async fn the_admin_token_is_required_where_it_is_set() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: &format!("admin_token = \"{TOKEN}\""),
            ..Setup::default()
        },
    )
    .await;
    let admin = gw.admin_addr();
    for path in ["/metrics", "/admin/pools", "/admin/config", "/admin/feed"] {
        let none = h1(admin, get(path)).await;
        assert_eq!(none.status, 401, "{path}");
        assert_eq!(
            none.headers["www-authenticate"],
            "Bearer realm=\"sluice-admin\""
        );
        for wrong in [
            format!("Bearer {TOKEN}x"),
            format!("Bearer {}", &TOKEN[1..]),
            format!("Basic {TOKEN}"),
            TOKEN.to_string(),
        ] {
            assert_eq!(
                h1(admin, with_auth(path, &wrong)).await.status,
                401,
                "{path} {wrong}"
            );
        }
    }
    let ok = h1(admin, with_auth("/metrics", &format!("Bearer {TOKEN}"))).await;
    assert_eq!(ok.status, 200);
    // Liveness, readiness and the static page need no token (nothing secret in them); the
    // page asks for the token before it reads the feed.
    for path in ["/healthz", "/readyz", "/admin/", "/admin/dashboard.js"] {
        assert_eq!(h1(admin, get(path)).await.status, 200, "{path}");
    }
}

#[tokio::test]
async fn a_non_loopback_admin_address_needs_a_token() {
    let base = "[[upstream]]\nname = \"m\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"m\"\n";
    let open = format!("[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\nadmin_listen = \"0.0.0.0:0\"\n{base}");
    let e = Config::from_toml(&open, &|_| None).unwrap_err();
    assert_eq!(e.path, "server.admin_listen");
    assert!(e.reason.contains("admin_token"), "{e}");
    assert_eq!(e.line, Some(4));
    // With the token it starts, and the token guards it.
    let guarded = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\nadmin_listen = \"0.0.0.0:0\"\nadmin_token = \"${{ADMIN_TOKEN}}\"\n{base}"
    );
    let cfg = Config::from_toml(&guarded, &|k| {
        (k == "ADMIN_TOKEN").then(|| TOKEN.to_string())
    })
    .unwrap();
    let gw = Server::start(cfg).await.unwrap();
    assert!(gw.admin_addr().ip().is_unspecified());
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], gw.admin_addr().port()));
    assert_eq!(h1(local, get("/metrics")).await.status, 401);
    assert_eq!(
        h1(local, with_auth("/metrics", &format!("Bearer {TOKEN}")))
            .await
            .status,
        200
    );
    // Startup refuses a config built without validation too.
    let mut cfg = Config::from_toml(&guarded, &|k| {
        (k == "ADMIN_TOKEN").then(|| TOKEN.to_string())
    })
    .unwrap();
    cfg.server.admin_token = None;
    let err = Server::start(cfg).await.unwrap_err();
    assert!(err.to_string().contains("admin_token"), "{err}");
}

#[tokio::test]
async fn readyz_turns_503_when_the_drain_starts() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: "shutdown_grace = \"5s\"",
            ..Setup::default()
        },
    )
    .await;
    let (addr, admin) = (gw.addr(), gw.admin_addr());
    assert_eq!(h1(admin, get("/readyz")).await.status, 200);
    let stream = tokio::spawn(async move {
        h1(
            addr,
            request(
                "POST",
                "/v1/chat/completions",
                "tokens=8, interval_ms=100",
                STREAM,
            ),
        )
        .await
    });
    wait_for(mock.stats(), "the stream started", |s| {
        !s.requests.is_empty()
    })
    .await;
    gw.stop_token().cancel();
    // While the stream drains, the admin plane still answers, and says not ready.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let r = loop {
        let r = h1(admin, get("/readyz")).await;
        if r.status == 503 || tokio::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["status"], "not_ready");
    assert!(r.json()["reasons"][0]
        .as_str()
        .unwrap()
        .contains("draining"));
    assert_eq!(
        h1(admin, get("/healthz")).await.status,
        200,
        "alive while draining"
    );
    let s = stream.await.unwrap();
    assert_eq!(s.status, 200);
    assert!(
        String::from_utf8_lossy(&s.body).contains("[DONE]"),
        "the stream finished"
    );
    gw.wait().await;
}

/// Reads SSE from a response until an event named `name` arrives; returns its data.
async fn next_event(
    body: &mut hyper::body::Incoming,
    buf: &mut String,
    name: &str,
) -> serde_json::Value {
    let marker = format!("event: {name}\ndata: ");
    loop {
        if let Some(i) = buf.find(&marker) {
            let rest = &buf[i + marker.len()..];
            if let Some(end) = rest.find("\n\n") {
                let v = serde_json::from_str(&rest[..end]).unwrap();
                let cut = i + marker.len() + end + 2;
                buf.drain(..cut);
                return v;
            }
        }
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("a feed frame within 5 s")
            .expect("the feed ended")
            .unwrap();
        if let Ok(d) = frame.into_data() {
            buf.push_str(std::str::from_utf8(&d).unwrap());
        }
    }
}

#[tokio::test]
async fn the_feed_shows_streams_and_bounds_its_viewers() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    let (addr, admin) = (gw.addr(), gw.admin_addr());
    let mut send = h1_connect(admin).await;
    let resp = h1_send(&mut send, get("/admin/feed")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let mut buf = String::new();
    let history = next_event(&mut body, &mut buf, "history").await;
    assert!(history["points"].is_array());
    let first = next_event(&mut body, &mut buf, "tick").await;
    assert_eq!(first["streams"]["active"], 0);
    assert_eq!(first["routes"][0]["targets"][0]["upstream"], "mock");
    let streams: Vec<_> = (0..3)
        .map(|_| {
            tokio::spawn(async move {
                h1(
                    addr,
                    request(
                        "POST",
                        "/v1/chat/completions",
                        "tokens=15, interval_ms=100",
                        STREAM,
                    ),
                )
                .await
            })
        })
        .collect();
    let mut seen = 0;
    for _ in 0..4 {
        let f = next_event(&mut body, &mut buf, "tick").await;
        seen = f["streams"]["active"].as_u64().unwrap();
        if seen == 3 {
            assert!(f["streams"]["oldest_s"].as_f64().unwrap() > 0.0);
            let lanes = f["upstreams"][0]["lanes"].as_array().unwrap();
            assert!(lanes.iter().any(|l| l["in_flight"] == 3), "{lanes:?}");
            break;
        }
    }
    assert_eq!(seen, 3, "the feed showed the 3 streams");
    for s in streams {
        assert_eq!(s.await.unwrap().status, 200);
    }
    let mut last = serde_json::Value::Null;
    for _ in 0..4 {
        last = next_event(&mut body, &mut buf, "tick").await;
        if last["streams"]["active"] == 0 && last["totals"]["requests"] == 3 {
            break;
        }
    }
    assert_eq!(last["streams"]["active"], 0);
    assert_eq!(last["totals"]["end_reasons"]["completed"], 3);
    assert!(last["point"]["fe_p50"].as_f64().is_some(), "{last}");
    // Viewers are bounded: 15 more fit, the 17th is turned away.
    let mut others = Vec::new();
    for _ in 0..15 {
        let mut s = h1_connect(admin).await;
        let r = h1_send(&mut s, get("/admin/feed")).await;
        assert_eq!(r.status(), 200);
        others.push((s, r));
    }
    let full = h1(admin, get("/admin/feed")).await;
    assert_eq!(full.status, 503);
    assert_eq!(full.json()["error"]["code"], "too_many_viewers");
    // A viewer that leaves frees its place.
    drop(others.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let mut s = h1_connect(admin).await;
        let r = h1_send(&mut s, get("/admin/feed")).await;
        if r.status() == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot was not freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
