//! Hot reload over real sockets: a reload under 100 running streams cuts none of them and
//! sends the next request by the new route; an unchanged upstream keeps its connections and a
//! changed one drains; an invalid file changes nothing; `POST /admin/reload` takes the token.

use std::path::PathBuf;
use std::time::Duration;

use sluice::Server;
use sluice_gateway::config::Config;
use sluice_gateway::{ConfigSource, Overrides};
use sluice_mock::MockServer;

use crate::support::*;
use crate::{CHAT, STREAM};

const TOKEN: &str = "reload-admin-token-0123456789abcdef";

/// A config file of its own for one test, removed when dropped.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(name: &str, text: &str) -> ConfigFile {
        let path =
            std::env::temp_dir().join(format!("sluice-reload-{name}-{}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        ConfigFile(path)
    }

    fn write(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn start(file: &ConfigFile) -> Server {
    let cfg = Config::load(&file.0).unwrap_or_else(|e| panic!("{e}"));
    Server::start_with_source(
        cfg,
        ConfigSource {
            path: file.0.clone(),
            overrides: Overrides::default(),
            text: None,
        },
    )
    .await
    .unwrap()
}

/// `[server]` lines, then upstreams `(name, mock)`, then routes `(models, upstream, extra)`.
fn config(
    server: &str,
    upstreams: &[(&str, &MockServer, &str)],
    routes: &[(&str, &str)],
) -> String {
    let mut s = format!("[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n{server}\n");
    for (name, mock, extra) in upstreams {
        s += &format!(
            "\n[[upstream]]\nname = \"{name}\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n{extra}\n",
            mock.url()
        );
    }
    for (models, upstream) in routes {
        s += &format!("\n[[route]]\nmodels = {models}\nupstream = \"{upstream}\"\n");
    }
    s
}

fn admin_post(path: &str, auth: Option<&str>) -> http::Request<bytes::Bytes> {
    let mut r = request("POST", path, "", "");
    if let Some(a) = auth {
        r.headers_mut().insert("authorization", a.parse().unwrap());
    }
    r
}

fn admin_get(path: &str, auth: Option<&str>) -> http::Request<bytes::Bytes> {
    let mut r = request("GET", path, "", "");
    if let Some(a) = auth {
        r.headers_mut().insert("authorization", a.parse().unwrap());
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_100_streams_cuts_none_and_the_next_request_takes_the_new_route() {
    let (a, b) = (mock("").await, mock("").await);
    let file = ConfigFile::new(
        "streams",
        &config("", &[("a", &a, "")], &[("[\"gpt-4o\"]", "a")]),
    );
    let gw = start(&file).await;
    const SLOW: &str = "tokens=20, interval_ms=60";
    // The stream as it comes with no reload in between: every later one must equal it.
    let client = h2_connect(gw.addr()).await;
    let reference = h2(
        &client,
        request("POST", "/v1/chat/completions", SLOW, STREAM),
    )
    .await;
    assert_eq!(reference.status, 200);
    let expected = sse(&reference.body);
    assert_eq!(expected.last().unwrap().1, "[DONE]");
    let streams: Vec<_> = (0..100)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                h2(
                    &client,
                    request("POST", "/v1/chat/completions", SLOW, STREAM),
                )
                .await
            })
        })
        .collect();
    wait_for(a.stats(), "100 streams running on a", |s| {
        s.totals.in_progress == 100
    })
    .await;

    file.write(&config(
        "",
        &[("a", &a, ""), ("b", &b, "")],
        &[("[\"gpt-4o\"]", "b")],
    ));
    let outcome = gw.reload().await.unwrap();
    assert_eq!(outcome.version, 2);
    assert_eq!(outcome.upstreams.added, ["b"]);
    assert_eq!(outcome.routes.changed, ["gpt-4o"]);
    assert!(outcome.draining.is_empty(), "{outcome:?}");
    assert_eq!(a.stats().snapshot().totals.in_progress, 100);

    // The first request after the reload goes to b.
    let r = h2(&client, request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    assert_eq!(b.stats().snapshot().totals.requests, 1);
    assert_eq!(a.stats().snapshot().totals.requests, 101);

    for s in streams {
        let r = s.await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(sse(&r.body), expected, "a stream changed across the reload");
    }
    let a_totals = a.stats().snapshot().totals;
    assert_eq!((a_totals.completed, a_totals.cancelled), (101, 0));
    gw.shutdown().await;
}

#[tokio::test]
async fn an_unchanged_upstream_keeps_its_connections_and_a_changed_one_drains() {
    let (a, b) = (mock("").await, mock("").await);
    let file = ConfigFile::new(
        "pools",
        &config(
            "",
            &[("a", &a, ""), ("b", &b, "")],
            &[("[\"gpt-4o\"]", "a"), ("[\"other\"]", "b")],
        ),
    );
    let gw = start(&file).await;
    let other = r#"{"model":"other"}"#;
    let client = h2_connect(gw.addr()).await;
    for body in [CHAT, other] {
        let r = h2(&client, request("POST", "/v1/chat/completions", "", body)).await;
        assert_eq!(r.status, 200);
    }
    let pools = h1(gw.admin_addr(), admin_get("/admin/pools", None))
        .await
        .json();
    let conn_ids = |pools: &serde_json::Value, name: &str| -> Vec<serde_json::Value> {
        let up = pools["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {pools}"))
            .clone();
        up["lanes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|l| l["connections"].as_array().unwrap().clone())
            .map(|c| c["id"].clone())
            .collect()
    };
    let a_before = conn_ids(&pools, "a");
    assert!(!a_before.is_empty(), "{pools}");

    // a: only its timeouts change (not its connections); b: a pool setting changes.
    file.write(&config(
        "",
        &[
            ("a", &a, "timeouts = { total = \"5m\" }"),
            ("b", &b, "pool = { ping_interval = \"7s\" }"),
        ],
        &[("[\"gpt-4o\"]", "a"), ("[\"other\"]", "b")],
    ));
    let outcome = gw.reload().await.unwrap();
    assert_eq!(outcome.upstreams.changed, ["a", "b"]);
    assert_eq!(outcome.draining, ["b"]);
    for body in [CHAT, other] {
        let r = h2(&client, request("POST", "/v1/chat/completions", "", body)).await;
        assert_eq!(r.status, 200);
    }
    let pools = h1(gw.admin_addr(), admin_get("/admin/pools", None))
        .await
        .json();
    assert_eq!(
        conn_ids(&pools, "a"),
        a_before,
        "a's connections were replaced"
    );
    assert_eq!(a.stats().snapshot().totals.connections, 1);
    // b's old pool closed with the last request of the old config; a new one serves.
    let snap = wait_for(b.stats(), "b's old connection closed", |s| {
        s.connections.len() == 2 && s.connections[0].closed_at.is_some()
    })
    .await;
    assert!(snap.connections[1].closed_at.is_none());
    gw.shutdown().await;
}

#[tokio::test]
async fn an_invalid_reload_changes_nothing() {
    let a = mock("").await;
    let good = config("", &[("a", &a, "")], &[("[\"*\"]", "a")]);
    let file = ConfigFile::new("invalid", &good);
    let gw = start(&file).await;
    let admin = gw.admin_addr();
    let before = h1(admin, admin_get("/admin/config", None)).await.json();
    assert_eq!(before["version"], 1);
    assert!(
        before["loaded_at"].as_str().unwrap().ends_with('Z'),
        "{before}"
    );

    file.write(&config(
        "",
        &[("a", &a, "timeouts = { total = \"soon\" }")],
        &[("[\"*\"]", "a")],
    ));
    let r = h1(admin, admin_post("/admin/reload", None)).await;
    assert_eq!(r.status, 400);
    let e = r.json();
    assert_eq!(e["error"]["code"], "invalid_config");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("line ") && msg.contains("upstream[0].timeouts.total"),
        "{msg}"
    );

    // A setting only a restart applies is refused by name.
    file.write(&good.replace("127.0.0.1:0", "127.0.0.1:1"));
    let r = h1(admin, admin_post("/admin/reload", None)).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], "needs_restart");
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("server.listen: changing it needs a restart"),
        "{}",
        r.json()
    );

    let after = h1(admin, admin_get("/admin/config", None)).await.json();
    assert_eq!(after["version"], 1);
    assert_eq!(after["hash"], before["hash"]);
    assert_eq!(after["loaded_at"], before["loaded_at"]);
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    let metrics =
        String::from_utf8(h1(admin, admin_get("/metrics", None)).await.body.to_vec()).unwrap();
    for line in [
        "sluice_config_reloads_total{result=\"invalid\"} 2",
        "sluice_config_reloads_total{result=\"ok\"} 0",
        "sluice_config_version 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }

    // The good file again: version 2, counted.
    file.write(&good.replace("[\"*\"]", "[\"*\", \"x\"]"));
    let r = h1(admin, admin_post("/admin/reload", None)).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["version"], 2);
    assert_eq!(v["routes"]["changed"][0], "*");
    let after = h1(admin, admin_get("/admin/config", None)).await.json();
    assert_eq!(after["version"], 2);
    assert_eq!(after["hash"], v["hash"]);
    assert_ne!(after["hash"], before["hash"]);
    let metrics =
        String::from_utf8(h1(admin, admin_get("/metrics", None)).await.body.to_vec()).unwrap();
    assert!(metrics.contains("sluice_config_reloads_total{result=\"ok\"} 1"));
    assert!(metrics.contains("sluice_config_version 2"));
    gw.shutdown().await;
}

#[tokio::test]
async fn post_admin_reload_takes_the_admin_token_and_post_only() {
    let a = mock("").await;
    let file = ConfigFile::new(
        "token",
        &config(
            &format!("admin_token = \"{TOKEN}\""),
            &[("a", &a, "")],
            &[("[\"*\"]", "a")],
        ),
    );
    let gw = start(&file).await;
    let admin = gw.admin_addr();
    let auth = format!("Bearer {TOKEN}");
    assert_eq!(
        h1(admin, admin_post("/admin/reload", None)).await.status,
        401
    );
    let wrong = format!("Bearer {TOKEN}x");
    assert_eq!(
        h1(admin, admin_post("/admin/reload", Some(&wrong)))
            .await
            .status,
        401
    );
    let get = h1(admin, admin_get("/admin/reload", Some(&auth))).await;
    assert_eq!(get.status, 405);
    assert_eq!(get.headers["allow"], "POST");
    // POST elsewhere stays refused.
    assert_eq!(
        h1(admin, admin_post("/admin/config", Some(&auth)))
            .await
            .status,
        405
    );
    let ok = h1(admin, admin_post("/admin/reload", Some(&auth))).await;
    assert_eq!(ok.status, 200, "{}", String::from_utf8_lossy(&ok.body));
    assert_eq!(ok.json()["version"], 2);
    // The token itself reloads: the old one asked for it, the new one is in force after.
    let new_token = format!("{TOKEN}-2");
    file.write(&config(
        &format!("admin_token = \"{new_token}\""),
        &[("a", &a, "")],
        &[("[\"*\"]", "a")],
    ));
    let ok = h1(admin, admin_post("/admin/reload", Some(&auth))).await;
    assert_eq!(ok.status, 200, "{}", String::from_utf8_lossy(&ok.body));
    assert_eq!(
        h1(admin, admin_get("/admin/config", Some(&auth)))
            .await
            .status,
        401
    );
    let new_auth = format!("Bearer {new_token}");
    let v = h1(admin, admin_get("/admin/config", Some(&new_auth))).await;
    assert_eq!(v.json()["version"], 3);
    assert!(!String::from_utf8_lossy(&v.body).contains(&new_token));
    gw.shutdown().await;

    // A gateway started from a config in memory has no file to read again.
    let cfg = Config::from_toml(&config("", &[("a", &a, "")], &[("[\"*\"]", "a")]), &|_| {
        None
    })
    .unwrap();
    let gw = Server::start(cfg).await.unwrap();
    let r = h1(gw.admin_addr(), admin_post("/admin/reload", None)).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["error"]["code"], "no_config_file");
    gw.shutdown().await;
}

#[tokio::test]
async fn watch_reloads_a_changed_file_once_it_is_whole() {
    let (a, b) = (mock("").await, mock("").await);
    let file = ConfigFile::new(
        "watch",
        &config("", &[("a", &a, ""), ("b", &b, "")], &[("[\"*\"]", "a")]),
    );
    let mut gw = start(&file).await;
    gw.watch_config(Duration::from_millis(100));
    let admin = gw.admin_addr();
    let version = || async {
        h1(admin, admin_get("/admin/config", None)).await.json()["version"]
            .as_u64()
            .unwrap()
    };
    // Half a file: refused, nothing changes.
    let full = config("", &[("a", &a, ""), ("b", &b, "")], &[("[\"*\"]", "b")]);
    file.write(&full[..full.len() - 8]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(version().await, 1);
    file.write(&full);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while version().await != 2 {
        assert!(tokio::time::Instant::now() < deadline, "no reload");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    assert_eq!(b.stats().snapshot().totals.requests, 1);
    assert_eq!(a.stats().snapshot().totals.requests, 0);
    gw.shutdown().await;
}

/// The config version `/admin/config` reports.
async fn config_version(gw: &Server) -> u64 {
    h1(gw.admin_addr(), admin_get("/admin/config", None))
        .await
        .json()["version"]
        .as_u64()
        .unwrap()
}

async fn wait_config_version(gw: &Server, want: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while config_version(gw).await != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "config version never became {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What `sluice serve` does: the config made from the text it read, that text handed on.
async fn start_from_text(file: &ConfigFile, text: &str) -> Server {
    let cfg = Config::from_toml(text, &|_| None).unwrap_or_else(|e| panic!("{e}"));
    Server::start_with_source(
        cfg,
        ConfigSource {
            path: file.0.clone(),
            overrides: Overrides::default(),
            text: Some(text.to_string()),
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn watch_reloads_an_edit_made_while_the_gateway_started() {
    let (a, b) = (mock("").await, mock("").await);
    let read = config("", &[("a", &a, ""), ("b", &b, "")], &[("[\"*\"]", "a")]);
    let file = ConfigFile::new("watch-start", &read);
    // Edited after the gateway read it, before its watch first looks: taken for what runs,
    // this edit would never be applied.
    let edited = config("", &[("a", &a, ""), ("b", &b, "")], &[("[\"*\"]", "b")]);
    file.write(&edited);
    let mut gw = start_from_text(&file, &read).await;
    assert_eq!(config_version(&gw).await, 1);
    gw.watch_config(Duration::from_millis(50));
    wait_config_version(&gw, 2).await;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    assert_eq!(b.stats().snapshot().totals.requests, 1);
    assert_eq!(a.stats().snapshot().totals.requests, 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn watch_leaves_a_file_only_touched_and_reloads_a_changed_one() {
    let (a, b) = (mock("").await, mock("").await);
    let read = config("", &[("a", &a, ""), ("b", &b, "")], &[("[\"*\"]", "a")]);
    let file = ConfigFile::new("watch-touch", &read);
    let mut gw = start_from_text(&file, &read).await;
    gw.watch_config(Duration::from_millis(50));
    // The same text written again (a new modification time): eight polls, no reload.
    tokio::time::sleep(Duration::from_millis(60)).await;
    file.write(&read);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(config_version(&gw).await, 1);
    let edited = config("", &[("a", &a, ""), ("b", &b, "")], &[("[\"*\"]", "b")]);
    file.write(&edited);
    wait_config_version(&gw, 2).await;
    gw.shutdown().await;
}
