//! The probe scenario against the real mock, directly (a shared or a separate client pool) and
//! through the in-process gateway with its default lanes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use sluice_bench::{probe, ProbeOpts, ProbeReport};
use sluice_mock::{MockConfig, MockServer};
use sluice_upstream::Protocol;

fn x_mock(v: &str) -> Vec<(HeaderName, HeaderValue)> {
    vec![(
        HeaderName::from_static("x-mock"),
        HeaderValue::from_str(v).unwrap(),
    )]
}

fn opts(base: &str, mock: &MockServer, protocol: Protocol, shared: bool) -> ProbeOpts {
    ProbeOpts {
        url: format!("{base}/v1/chat/completions").parse().unwrap(),
        protocol,
        shared_client: shared,
        streams: 4,
        stream_body: Bytes::from_static(br#"{"model":"gpt-4o","stream":true}"#),
        stream_headers: x_mock("tokens=100000, interval_ms=20"),
        first_stream_headers: x_mock("tokens=100000, interval_ms=20, degrade=1000000"),
        probe_body: Bytes::from_static(br#"{"model":"gpt-4o"}"#),
        probe_headers: vec![],
        probe_interval: Duration::from_millis(100),
        probe_timeout: Duration::from_secs(5),
        duration: Duration::from_millis(1500),
        warmup: Duration::from_secs(5),
        mock_stats: Some(format!("{}/__mock/stats", mock.url()).parse().unwrap()),
        progress: Arc::default(),
    }
}

fn check_counts(r: &ProbeReport) {
    assert_eq!(r.long_streams, 4);
    assert_eq!(r.long_streams_active_at_start, 4, "{r:?}");
    assert!(r.requests >= 5, "{r:?}");
    assert_eq!(r.errors + r.timeouts, 0, "{r:?}");
    assert_eq!(r.successes + r.cancelled_at_end, r.requests);
    assert_eq!(r.latency.count, r.successes);
    assert!(r.latency.p95_ms <= r.latency.max_ms);
    // Every probe reached the mock, so every one is located.
    assert_eq!(r.probes_located, r.requests, "{r:?}");
    assert!(r.samples.iter().all(|s| s.active_long_streams == 4));
}

async fn mock() -> MockServer {
    MockServer::start(MockConfig::default()).await.unwrap()
}

#[tokio::test]
async fn a_shared_h2_pool_puts_every_probe_on_the_streams_connection() {
    let mock = mock().await;
    let r = probe::run(opts(&mock.url(), &mock, Protocol::H2c, true))
        .await
        .unwrap();
    check_counts(&r);
    assert_eq!(r.shared_pct(), Some(100.0), "{r:?}");
    assert_eq!(r.on_degraded_connection, r.probes_located);
}

#[tokio::test]
async fn a_separate_pool_never_shares() {
    let mock = mock().await;
    let r = probe::run(opts(&mock.url(), &mock, Protocol::H2c, false))
        .await
        .unwrap();
    check_counts(&r);
    assert_eq!(r.shared_pct(), Some(0.0), "{r:?}");
    assert_eq!(r.on_degraded_connection, 0);
}

#[tokio::test]
async fn through_the_gateway_lanes_keep_probes_off_the_streams_connections() {
    let mock = mock().await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\nshutdown_grace = \"1s\"\n\n[[upstream]]\nname = \"mock\"\n\
         base_url = \"{}/v1\"\nprotocol = \"h2c\"\n\n[[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\n",
        mock.url()
    );
    let cfg = sluice_gateway::config::Config::from_toml(&text, &|_| None).unwrap();
    let gw = sluice_gateway::Gateway::start(cfg).await.unwrap();
    let r = probe::run(opts(
        &format!("http://{}", gw.addr()),
        &mock,
        Protocol::Http1,
        false,
    ))
    .await
    .unwrap();
    check_counts(&r);
    assert_eq!(r.shared_pct(), Some(0.0), "{r:?}");
    // The streams' ids came back through the gateway, and the degraded one is a stream's.
    let snap = mock.stats().snapshot();
    assert!(snap
        .connections
        .iter()
        .any(|c| c.degrade_bytes_per_s == Some(1_000_000)));
    gw.shutdown().await;
}
