//! Routes with several targets through the whole gateway: weights, latency-aware choice,
//! outlier ejection with a half-open probe, active health checks, and per-target keys.

use std::net::SocketAddr;
use std::time::Duration;

use sluice::Server;
use sluice_gateway::config::Config;
use sluice_mock::{Behavior, MockConfig, MockServer};
use tokio::time::{sleep, Instant};

use crate::support::*;

async fn replica_at(addr: SocketAddr, spec: &str) -> MockServer {
    MockServer::start(MockConfig {
        listen: addr,
        defaults: Behavior::default().with_spec(spec).unwrap(),
        ..MockConfig::default()
    })
    .await
    .unwrap()
}

async fn replica(spec: &str) -> MockServer {
    replica_at(SocketAddr::from(([127, 0, 0, 1], 0)), spec).await
}

/// Upstreams `a`, `b`, ... (one per mock, with `upstream_extra`) and one route over all of
/// them with `route_extra`; `targets` lists the route's targets (default: all, weight 1).
async fn gateway_over(
    mocks: &[&MockServer],
    upstream_extra: &str,
    targets: &str,
    route_extra: &str,
) -> Server {
    let mut text = String::from("[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n");
    let mut all = Vec::new();
    for (i, m) in mocks.iter().enumerate() {
        let name = (b'a' + i as u8) as char;
        all.push(format!("{{ upstream = \"{name}\" }}"));
        text.push_str(&format!(
            "\n[[upstream]]\nname = \"{name}\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n{upstream_extra}\n",
            m.url()
        ));
    }
    let targets = if targets.is_empty() {
        format!("[{}]", all.join(", "))
    } else {
        targets.to_string()
    };
    text.push_str(&format!(
        "\n[[route]]\nmodels = [\"*\"]\ntargets = {targets}\n{route_extra}\n"
    ));
    let cfg = Config::from_toml(&text, &|k| Some(format!("sk-{k}")))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    Server::start(cfg).await.unwrap()
}

fn served(m: &MockServer) -> u64 {
    m.stats().snapshot().totals.requests
}

const CHAT: &str = r#"{"model":"m"}"#;

async fn call(gw: &Server) -> Resp {
    h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await
}

#[tokio::test]
async fn weighted_round_robin_follows_the_weights_exactly() {
    let (a, b, c) = (replica("").await, replica("").await, replica("").await);
    let gw = gateway_over(
        &[&a, &b, &c],
        "",
        "[{ upstream = \"a\", weight = 1 }, { upstream = \"b\", weight = 2 }, { upstream = \"c\", weight = 3 }]",
        "balance = \"weighted_round_robin\"",
    )
    .await;
    for _ in 0..60 {
        assert_eq!(call(&gw).await.status, 200);
    }
    assert_eq!([served(&a), served(&b), served(&c)], [10, 20, 30]);
}

#[tokio::test]
async fn p2c_ewma_steers_away_from_a_slow_replica() {
    let slow = replica("ttft_ms=150").await;
    let (b, c) = (replica("").await, replica("").await);
    let gw = gateway_over(&[&slow, &b, &c], "", "", "").await;
    // Four clients at a time: in-flight counts and latencies both weigh.
    for _ in 0..15 {
        let addr = gw.addr();
        let calls: Vec<_> = (0..4)
            .map(|_| {
                tokio::spawn(async move {
                    h1(addr, request("POST", "/v1/chat/completions", "", CHAT)).await
                })
            })
            .collect();
        for c in calls {
            assert_eq!(c.await.unwrap().status, 200);
        }
    }
    let share = served(&slow) as f64 / 60.0;
    assert!(share < 0.2, "the slow replica got {:.0} %", share * 100.0);
}

#[tokio::test]
async fn a_failing_replica_is_ejected_probed_and_brought_back() {
    let bad = replica("status=503").await;
    let bad_addr = bad.addr();
    let good = replica("").await;
    let gw = gateway_over(
        &[&bad, &good],
        "",
        "",
        "outlier = { consecutive_failures = 2, base_ejection_time = \"5s\", success_rate = false }\nretry = { attempts = 2 }",
    )
    .await;
    // Every client call succeeds: the replica's 503s are retried on the other one.
    for _ in 0..10 {
        assert_eq!(call(&gw).await.status, 200);
    }
    let before = served(&bad);
    assert!(before <= 3, "ejected after 2 failures in a row: {before}");
    for _ in 0..10 {
        assert_eq!(call(&gw).await.status, 200);
    }
    assert_eq!(served(&bad), before, "no traffic while ejected");
    // The replica recovers (restarted healthy on the same port); after the ejection time one
    // request probes it and it is back in rotation.
    bad.shutdown().await;
    let healed = replica_at(bad_addr, "").await;
    // 5 s of ejection: long enough for the 10 calls above on a loaded machine (2 s was not,
    // once, with the whole suite running on two cores).
    sleep(Duration::from_millis(5100)).await;
    for _ in 0..5 {
        assert_eq!(call(&gw).await.status, 200);
    }
    assert!(served(&healed) >= 1, "the probe reached it");
    let t = h1(gw.admin_addr(), request("GET", "/admin/targets", "", ""))
        .await
        .json();
    let route = &t["routes"][0];
    assert_eq!(route["counters"]["probe_successes"], 1, "{route}");
    assert_eq!(route["targets"][0]["usable"], true, "{route}");
    assert_eq!(
        route["targets"][0]["ejected_for_ms"],
        serde_json::Value::Null
    );
}

#[tokio::test]
async fn active_health_checks_take_a_stopped_replica_out_and_back() {
    let a = replica("").await;
    let a_addr = a.addr();
    let b = replica("").await;
    let gw = gateway_over(
        &[&a, &b],
        "health_check = { interval = \"100ms\", timeout = \"200ms\", unhealthy_threshold = 1, healthy_threshold = 1 }",
        "",
        "",
    )
    .await;
    a.shutdown().await;
    sleep(Duration::from_millis(400)).await;
    // Unhealthy: no attempt goes to it, so no retries either.
    for _ in 0..10 {
        let r = call(&gw).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.headers["x-sluice-attempts"], "1");
        assert_eq!(r.headers["x-sluice-upstream"], "b");
    }
    let back = replica_at(a_addr, "").await;
    let t0 = Instant::now();
    loop {
        assert_eq!(call(&gw).await.status, 200);
        let api_calls = back
            .stats()
            .snapshot()
            .requests
            .iter()
            .filter(|r| r.path == "/v1/chat/completions")
            .count();
        if api_calls > 0 {
            break;
        }
        if t0.elapsed() > Duration::from_secs(5) {
            let t = h1(gw.admin_addr(), request("GET", "/admin/targets", "", "")).await;
            let p = h1(gw.admin_addr(), request("GET", "/admin/pools", "", "")).await;
            panic!(
                "a restarted replica is back within 5 s\n{}\n{}",
                String::from_utf8_lossy(&t.body),
                String::from_utf8_lossy(&p.body)
            );
        }
        sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn several_keys_of_one_provider_are_several_targets() {
    let m = replica("").await;
    let gw = gateway_over(
        &[&m],
        "provider = \"openai\"",
        "[{ upstream = \"a\", key_env = \"KEY_ONE\" }, { upstream = \"a\", key_env = \"KEY_TWO\" }]",
        "balance = \"weighted_round_robin\"",
    )
    .await;
    for _ in 0..4 {
        assert_eq!(call(&gw).await.status, 200);
    }
    let mut keys: Vec<String> = m
        .stats()
        .snapshot()
        .requests
        .iter()
        .filter_map(|r| {
            r.headers
                .iter()
                .find(|(k, _)| k == "authorization")
                .map(|(_, v)| v.clone())
        })
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys, ["Bearer sk-KEY_ONE", "Bearer sk-KEY_TWO"]);
}

#[tokio::test]
async fn a_rate_limited_target_rests_for_its_retry_after() {
    let limited = replica("status=429, retry_after=2").await;
    let other = replica("").await;
    let gw = gateway_over(&[&limited, &other], "", "", "").await;
    for _ in 0..10 {
        assert_eq!(call(&gw).await.status, 200);
    }
    // One 429 (retried on the other target), then the limited target rests.
    assert_eq!(served(&limited), 1);
}
