//! Two gateways writing their books to one real PostgreSQL, sharing limits and budgets through
//! one real `redis-server`, under mixed load (two keys, calls and streams, streams the client
//! drops, requests refused by a limit): every request is on the books exactly once, and each
//! key's spend in the ledger equals its budget counter's. Then PostgreSQL is killed: requests go
//! on being answered (their records are dropped and counted, never a request), and once it is
//! back the books are written again. Without PostgreSQL or Redis the test is ignored (the build
//! says so), and fails under CI=true.

#[path = "../../sluice-mock/tests/mock/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "../../sluice-ledger/tests/support/mod.rs"]
mod pg;

#[path = "../../sluice-state/tests/support/mod.rs"]
mod redis_support;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use sluice::Server;
use sluice_gateway::config::Config;

use support::*;

fn sha256_hex(s: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn config(mock: &str, redis: &str, pg: &str) -> Config {
    let text = format!(
        r#"[server]
listen = "127.0.0.1:0"
access_log = "off"

[[upstream]]
name = "mock"
base_url = "{mock}/v1"
protocol = "h2c"

[[route]]
name = "chat"
models = ["*"]
upstream = "mock"

[[key]]
id = "alpha"
hash = "sha256:{alpha}"
budget = {{ limit = 100.0, per = "1d" }}

[[key]]
id = "beta"
hash = "sha256:{beta}"
budget = {{ limit = 100.0, per = "1d" }}
requests = {{ limit = 6, per = "1m" }}

[state]
redis = "{redis}"
call_timeout = "200ms"

[ledger]
flush_interval = "100ms"
sink = {{ kind = "postgres", url = "{pg}" }}
"#,
        alpha = sha256_hex("sk-alpha"),
        beta = sha256_hex("sk-beta"),
    );
    Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn chat(key: &str, stream: bool) -> Request<Bytes> {
    let body = format!(
        r#"{{"model":"gpt-4o","stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    Request::post("http://gw/v1/chat/completions")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .body(Bytes::from(body))
        .unwrap()
}

/// A stream whose client goes away after its first piece: the id it was given.
async fn dropped_stream(addr: std::net::SocketAddr, key: &str) -> String {
    use http_body_util::BodyExt;
    let mut send = h1_connect(addr).await;
    let mut req = chat(key, true);
    req.headers_mut().insert(
        "x-mock",
        http::HeaderValue::from_static("tokens=400, interval_ms=5"),
    );
    let resp = h1_send(&mut send, req).await;
    let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    let mut body = resp.into_body();
    let _ = tokio::time::timeout(Duration::from_secs(5), body.frame()).await;
    id
}

/// `spent_micros` of a key's budget, as `/admin/keys/{id}` reads it from the shared store.
async fn budget_spent(admin: std::net::SocketAddr, id: &str) -> i64 {
    let r = h1(admin, request("GET", &format!("/admin/keys/{id}"), "", "")).await;
    assert_eq!(r.status, 200);
    r.json()["spend"]["spent_micros"].as_i64().unwrap()
}

#[tokio::test]
#[cfg_attr(
    any(no_postgres, no_redis),
    ignore = "needs PostgreSQL and redis-server: apt-get install postgresql redis-server"
)]
async fn two_instances_book_every_request_once_and_a_dead_database_loses_no_request() {
    let mut db = pg::PgServer::start().await;
    let redis = redis_support::RedisServer::start().await;
    let mock = mock("").await;
    let cfg = || config(&mock.url(), &redis.url(), &db.url());
    let a = Server::start(cfg()).await.unwrap();
    let b = Server::start(cfg()).await.unwrap();
    let (addrs, admin) = ([a.addr(), b.addr()], a.admin_addr());

    // Mixed load across both instances.
    let mut sent: Vec<String> = Vec::new();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for i in 0..24 {
        let addr = addrs[i % 2];
        let key = if i % 3 == 0 { "sk-beta" } else { "sk-alpha" };
        if i % 5 == 4 {
            sent.push(dropped_stream(addr, key).await);
            continue;
        }
        let r = h1(addr, chat(key, i % 2 == 1)).await;
        *statuses.entry(r.status.as_u16()).or_default() += 1;
        sent.push(r.headers["x-request-id"].to_str().unwrap().to_string());
    }
    assert!(
        statuses.get(&429).is_some_and(|n| *n > 0),
        "beta's limit refused some: {statuses:?}"
    );
    assert!(statuses.get(&200).is_some_and(|n| *n > 10), "{statuses:?}");

    // Every request once, and each key's spend as its budget counted it.
    let client = db.client().await;
    let counted = pg::eventually(Duration::from_secs(10), || {
        let client = &client;
        let n = sent.len() as i64;
        async move {
            client
                .query_one("SELECT COUNT(*) FROM sluice_requests", &[])
                .await
                .is_ok_and(|r| r.get::<_, i64>(0) >= n)
        }
    })
    .await;
    assert!(
        counted,
        "the records of {} requests in PostgreSQL",
        sent.len()
    );
    let rows = client
        .query("SELECT request_id FROM sluice_requests", &[])
        .await
        .unwrap();
    let mut booked: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    booked.sort();
    let mut want = sent.clone();
    want.sort();
    assert_eq!(booked, want, "each request exactly once");
    for key in ["alpha", "beta"] {
        let ledger: i64 = client
            .query_one(
                "SELECT COALESCE(SUM(cost_micros), 0)::BIGINT FROM sluice_requests WHERE key_id = $1",
                &[&key],
            )
            .await
            .unwrap()
            .get(0);
        assert!(ledger > 0, "{key} spent something");
        // The budget's settle is queued to Redis: read it until it has landed.
        let mut spent = 0;
        for _ in 0..50 {
            spent = budget_spent(admin, key).await;
            if spent == ledger {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(spent, ledger, "{key}: the budget's spend and the ledger's");
    }

    // PostgreSQL dies: every request is still answered; its record is dropped and counted.
    db.kill();
    for i in 0..6 {
        let r = h1(addrs[i % 2], chat("sk-alpha", false)).await;
        assert_eq!(
            r.status, 200,
            "answered while the ledger's database is down"
        );
    }
    let dropped = |m: &str| {
        m.lines()
            .find(|l| l.starts_with("sluice_ledger_records_total{outcome=\"dropped_sink\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut lost = 0;
    for _ in 0..100 {
        lost = dropped(&a.telemetry().encode()) + dropped(&b.telemetry().encode());
        if lost >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        lost >= 1,
        "records dropped while PostgreSQL was down are counted"
    );

    // Back: the books are written again.
    db.restart().await;
    let client = db.client().await;
    let before: i64 = client
        .query_one("SELECT COUNT(*) FROM sluice_requests", &[])
        .await
        .unwrap()
        .get(0);
    let resumed = pg::eventually(Duration::from_secs(20), || {
        let client = &client;
        let addrs = &addrs;
        async move {
            let r = h1(addrs[0], chat("sk-alpha", false)).await;
            assert_eq!(r.status, 200);
            tokio::time::sleep(Duration::from_millis(300)).await;
            client
                .query_one("SELECT COUNT(*) FROM sluice_requests", &[])
                .await
                .is_ok_and(|r| r.get::<_, i64>(0) > before)
        }
    })
    .await;
    assert!(resumed, "writing resumes once PostgreSQL is back");
    a.shutdown().await;
    b.shutdown().await;
}
