//! Lanes: a short call never shares an upstream connection with a long stream.

use std::time::Duration;

use crate::support::*;
use crate::{gateway, Setup, CHAT, STREAM};

fn conn_of(snap: &sluice_mock::Snapshot, i: usize) -> u64 {
    snap.requests[i].conn_id
}

#[tokio::test]
async fn short_calls_and_streams_use_different_connections() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    let addr = gw.addr();
    let long = tokio::spawn(async move {
        h1(
            addr,
            request(
                "POST",
                "/v1/chat/completions",
                "tokens=20, interval_ms=30",
                STREAM,
            ),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..5 {
        assert_eq!(
            h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT))
                .await
                .status,
            200
        );
    }
    // A long generation is a long call even without streaming.
    let long_gen = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=3",
            r#"{"model":"gpt-4o","max_tokens":100000}"#,
        ),
    )
    .await;
    assert_eq!(long_gen.status, 200);
    long.await.unwrap();
    let snap = mock.stats().snapshot();
    let stream_conn = conn_of(&snap, 0);
    for i in 1..=5 {
        assert_ne!(
            conn_of(&snap, i),
            stream_conn,
            "short call {i} shared the stream's connection"
        );
    }
    let short_conns: std::collections::HashSet<_> = (1..=5).map(|i| conn_of(&snap, i)).collect();
    assert!(
        !short_conns.contains(&conn_of(&snap, 6)),
        "the long generation took the stream lane"
    );
}

#[tokio::test]
async fn a_route_can_pin_its_lane() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            route: "lane = \"short\"",
            ..Default::default()
        },
    )
    .await;
    h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "tokens=3", STREAM),
    )
    .await;
    let snap = mock.stats().snapshot();
    assert_eq!(
        conn_of(&snap, 0),
        conn_of(&snap, 1),
        "both on the pinned short lane"
    );
}

#[tokio::test]
async fn admin_pools_and_pool_metrics_describe_the_connections() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "tokens=2", STREAM),
    )
    .await;
    h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    let pools = h1(gw.admin_addr(), request("GET", "/admin/pools", "", ""))
        .await
        .json();
    let up = &pools["upstreams"][0];
    assert_eq!(up["name"], "mock");
    let lanes = up["lanes"].as_array().unwrap();
    let lane = |name: &str| lanes.iter().find(|l| l["lane"] == name).unwrap().clone();
    for name in ["stream", "short"] {
        let l = lane(name);
        let conns = l["connections"].as_array().unwrap();
        assert!(!conns.is_empty(), "{name}: {l}");
        assert_eq!(conns[0]["lane"], name);
        assert_eq!(conns[0]["protocol"], "h2c");
        assert_eq!(conns[0]["state"], "ready");
        assert!(conns[0]["requests_served"].as_u64().unwrap() >= 1 || name == "stream");
        assert!(conns[0]["cap"].as_u64().unwrap() >= 1);
        assert!(conns[0]["bytes_in"].as_u64().unwrap() > 0, "{l}");
        assert!(conns[0]["bytes_out"].as_u64().unwrap() > 0, "{l}");
    }
    assert!(up["counters"]["connects"].as_u64().unwrap() >= 2);
    let m = String::from_utf8(
        h1(gw.admin_addr(), request("GET", "/metrics", "", ""))
            .await
            .body
            .to_vec(),
    )
    .unwrap();
    for needle in [
        "sluice_pool_connections{upstream=\"mock\",lane=\"short\",state=\"ready\"}",
        "sluice_pool_in_flight{upstream=\"mock\",lane=\"stream\"}",
        "sluice_pool_pending{upstream=\"mock\",lane=\"short\"} 0",
        "sluice_pool_connects_total{upstream=\"mock\"}",
        "sluice_pool_drains_total{upstream=\"mock\",reason=\"goaway\"} 0",
    ] {
        assert!(m.contains(needle), "missing {needle} in:\n{m}");
    }
}

/// Phase timings: `Server-Timing` on request (`X-Sluice-Timing: 1`) or for every response
/// (`server.server_timing`), and the acquire-wait histogram.
#[tokio::test]
async fn server_timing_on_request_or_by_config() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    let plain = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "ttft_ms=100", CHAT),
    )
    .await;
    assert!(!plain.headers.contains_key("server-timing"));
    let mut req = request("POST", "/v1/chat/completions", "ttft_ms=100", CHAT);
    req.headers_mut()
        .insert("x-sluice-timing", "1".parse().unwrap());
    let timed = h1(gw.addr(), req).await;
    let st = timed.headers["server-timing"].to_str().unwrap().to_string();
    let phases: std::collections::HashMap<&str, f64> = st
        .split(", ")
        .map(|p| {
            let (name, dur) = p.split_once(";dur=").unwrap_or_else(|| panic!("{st}"));
            (name, dur.parse().unwrap())
        })
        .collect();
    assert!(phases["ttfb"] >= 100.0, "{st}");
    assert!(
        phases.contains_key("acquire") && phases.contains_key("written"),
        "{st}"
    );
    assert!(phases["last"] >= phases["ttfb"], "{st}");
    let m = String::from_utf8(
        h1(gw.admin_addr(), request("GET", "/metrics", "", ""))
            .await
            .body
            .to_vec(),
    )
    .unwrap();
    assert!(
        m.contains("sluice_pool_acquire_wait_seconds_count{upstream=\"mock\",lane=\"short\"} 2"),
        "{m}"
    );

    let gw = gateway(
        &mock,
        Setup {
            server: "server_timing = true",
            ..Default::default()
        },
    )
    .await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "tokens=2", STREAM),
    )
    .await;
    let st = r.headers["server-timing"].to_str().unwrap();
    assert!(
        st.contains("connect;dur=") && st.contains("ttfb;dur="),
        "a fresh connection: {st}"
    );
}

/// A full pool fails fast with a clear 503 instead of queueing without end.
#[tokio::test]
async fn a_full_pool_is_a_fast_503() {
    let mock = mock("ttft_ms=2000").await;
    let gw = gateway(
        &mock,
        Setup {
            upstream: "pool = { short = { min_connections = 1, max_connections = 1, max_streams_per_connection = 1, acquire_timeout = \"200ms\" } }",
            ..Default::default()
        },
    )
    .await;
    let addr = gw.addr();
    let busy =
        tokio::spawn(
            async move { h1(addr, request("POST", "/v1/chat/completions", "", CHAT)).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = tokio::time::Instant::now();
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], "pool_acquire_timeout");
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(busy.await.unwrap().status, 200);
}
