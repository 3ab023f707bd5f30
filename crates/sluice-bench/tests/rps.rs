//! The rps scenario against the real mock: counts, latencies and both load models.

use std::sync::Arc;
use std::time::Duration;

use sluice_bench::{rps, Load, RpsOpts};
use sluice_mock::{Behavior, MockConfig, MockServer};
use sluice_upstream::Protocol;

async fn mock(spec: &str) -> MockServer {
    MockServer::start(MockConfig {
        defaults: Behavior::default().with_spec(spec).unwrap(),
        ..MockConfig::default()
    })
    .await
    .unwrap()
}

fn opts(mock: &MockServer, protocol: Protocol, load: Load) -> RpsOpts {
    RpsOpts {
        url: format!("{}/v1/chat/completions", mock.url())
            .parse()
            .unwrap(),
        protocol,
        connections: 4,
        load,
        requests: Some(200),
        duration: None,
        body: rps::chat_body(8192),
        headers: vec![],
        timeout: Duration::from_secs(5),
        progress: Arc::default(),
    }
}

#[tokio::test]
async fn closed_loop_sends_exactly_n_over_both_protocols() {
    let mock = mock("tokens=3").await;
    for protocol in [Protocol::Http1, Protocol::H2c] {
        let o = opts(&mock, protocol, Load::Closed { concurrency: 10 });
        let progress = o.progress.clone();
        let r = rps::run(o).await.unwrap();
        assert_eq!(r.mode, "closed");
        assert_eq!(
            (r.sent, r.successes, r.errors, r.timeouts),
            (200, 200, 0, 0),
            "{protocol:?}: {r:?}"
        );
        assert_eq!(r.latency.count, 200);
        assert!(r.latency.p50_ms <= r.latency.p99_ms && r.latency.p99_ms <= r.latency.max_ms);
        assert!(r.throughput_per_s > 0.0);
        assert_eq!(progress.counts(), (200, 200, 0));
    }
    // The 8 KB bodies reached the mock whole, over the connections asked for (HTTP/2: 4).
    let snap = mock.stats().snapshot();
    assert_eq!(snap.totals.requests, 400);
    let h2_conns = snap
        .connections
        .iter()
        .filter(|c| c.protocol == sluice_mock::Protocol::H2c)
        .count();
    assert_eq!(h2_conns, 4);
}

#[tokio::test]
async fn open_model_keeps_its_schedule_and_counts_the_server_time() {
    let mock = mock("ttft_ms=50, tokens=1").await;
    let mut o = opts(
        &mock,
        Protocol::H2c,
        Load::Open {
            rate_per_s: 100.0,
            max_in_flight: 1000,
        },
    );
    o.requests = None;
    o.duration = Some(Duration::from_secs(1));
    let r = rps::run(o).await.unwrap();
    assert_eq!(r.mode, "open");
    assert_eq!(r.target_rate_per_s, Some(100.0));
    // Due at 0, 10, …, 990 ms.
    assert_eq!(r.sent, 100, "{r:?}");
    assert_eq!(r.successes, 100);
    assert!(r.latency.p50_ms >= 50.0, "{:?}", r.latency);
}

#[tokio::test]
async fn timeouts_and_errors_are_counted_not_fatal() {
    let slow = mock("ttft_ms=2000").await;
    let mut o = opts(&slow, Protocol::Http1, Load::Closed { concurrency: 5 });
    o.requests = Some(5);
    o.timeout = Duration::from_millis(100);
    let r = rps::run(o).await.unwrap();
    assert_eq!((r.sent, r.timeouts, r.successes), (5, 5, 0), "{r:?}");
    assert_eq!(r.latency.count, 0);

    let failing = mock("status=503").await;
    let mut o = opts(&failing, Protocol::Http1, Load::Closed { concurrency: 5 });
    o.requests = Some(20);
    let r = rps::run(o).await.unwrap();
    assert_eq!(r.errors, 20);
    assert!(r.error_samples[0].contains("503"), "{:?}", r.error_samples);
    assert_eq!(r.failure_causes.get("status_503"), Some(&20));
    // Every request is in the timeline, failed or not, and in the per-second counts.
    assert_eq!(r.samples.len(), 20);
    assert!(r.samples.iter().all(|s| !s.ok));
    assert_eq!(r.per_second.iter().map(|s| s.failed).sum::<u64>(), 20);
}

#[tokio::test]
async fn a_dead_target_is_tried_once_per_pause_in_both_load_models() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url: http::Uri = format!("http://127.0.0.1:{port}/v1/chat/completions")
        .parse()
        .unwrap();
    for load in [
        Load::Closed { concurrency: 32 },
        Load::Open {
            rate_per_s: 1000.0,
            max_in_flight: 1000,
        },
    ] {
        let o = RpsOpts {
            url: url.clone(),
            protocol: Protocol::Http1,
            connections: 32,
            load,
            requests: None,
            duration: Some(Duration::from_secs(1)),
            body: rps::chat_body(100),
            headers: vec![],
            timeout: Duration::from_millis(300),
            progress: Arc::default(),
        };
        let r = rps::run(o).await.unwrap();
        assert_eq!(r.successes, 0);
        let refused = r.failure_causes["connect_refused"];
        assert_eq!(refused, r.failed(), "{load:?}: {:?}", r.failure_causes);
        // Closed loop: one round of 32, then one try per pause (10, 20, ... ms). Open model:
        // the 1,000 due requests all fail (those held by the pause past their timeout
        // without a connect), on schedule.
        assert!(r.sent <= 1000, "{load:?}: {}", r.sent);
        if let Load::Closed { .. } = load {
            assert!(r.sent < 32 + 12, "{load:?}: {} connects in 1 s", r.sent);
        }
    }
}

#[tokio::test]
async fn a_run_needs_a_bound_and_a_positive_rate() {
    let mock = mock("").await;
    let mut o = opts(&mock, Protocol::Http1, Load::Closed { concurrency: 1 });
    o.requests = None;
    assert!(matches!(
        rps::run(o).await,
        Err(sluice_bench::BenchError::Options(_))
    ));
    let o = opts(
        &mock,
        Protocol::Http1,
        Load::Open {
            rate_per_s: 0.0,
            max_in_flight: 1,
        },
    );
    assert!(matches!(
        rps::run(o).await,
        Err(sluice_bench::BenchError::Options(_))
    ));
}
