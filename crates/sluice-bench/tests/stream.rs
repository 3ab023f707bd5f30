//! The stream scenario against the real mock: the report's fields hold what happened.

use std::time::Duration;

use bytes::Bytes;
use sluice_bench::{stream, StreamOpts};
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

fn opts(mock: &MockServer, protocol: Protocol) -> StreamOpts {
    StreamOpts {
        url: format!("{}/v1/chat/completions", mock.url())
            .parse()
            .unwrap(),
        protocol,
        concurrency: 20,
        requests: 40,
        ramp: Duration::from_millis(100),
        body: Bytes::from_static(br#"{"model":"m","stream":true}"#),
        headers: vec![],
        close_after_events: None,
        close_share: 1.0,
        timeout: Duration::from_secs(10),
        mock_stats: None,
        max_duration: Duration::from_secs(30),
    }
}

#[tokio::test]
async fn completed_streams_are_measured() {
    let mock = mock("tokens=5, ttft_ms=50, interval_ms=20").await;
    for protocol in [Protocol::Http1, Protocol::H2c] {
        let r = stream::run(opts(&mock, protocol)).await.unwrap();
        assert_eq!(r.completed, 40, "{protocol:?}: {r:?}");
        assert_eq!(r.errors + r.timeouts, 0);
        // role + 5 tokens + finish + [DONE]
        assert_eq!(r.events, 40 * 8);
        assert_eq!(r.ttfb.count, 40);
        assert!(
            r.first_event.p50_ms >= 50.0,
            "ttft is 50 ms: {:?}",
            r.first_event
        );
        assert!(r.event_gaps.p50_ms >= 19.0, "{:?}", r.event_gaps);
        assert_eq!(r.event_gaps.count, 40 * 7);
    }
}

#[tokio::test]
async fn early_close_reports_cancel_latency() {
    let mock = mock("tokens=1000, interval_ms=10").await;
    let mut o = opts(&mock, Protocol::H2c);
    o.close_after_events = Some(3);
    o.mock_stats = Some(format!("{}/__mock/stats", mock.url()).parse().unwrap());
    let r = stream::run(o).await.unwrap();
    assert_eq!(r.closed_early, 40, "{r:?}");
    let c = r.cancel_latency.expect("cancel latency measured");
    assert_eq!(c.count, 40);
    assert!(c.p99_ms < 100.0, "{c:?}");
}

#[tokio::test]
async fn a_share_of_streams_closes_early() {
    let mock = mock("tokens=20, interval_ms=5").await;
    let mut o = opts(&mock, Protocol::H2c);
    o.close_after_events = Some(3);
    o.close_share = 0.25;
    let r = stream::run(o).await.unwrap();
    assert_eq!((r.closed_early, r.completed), (10, 30), "{r:?}");
}

#[tokio::test]
async fn failures_are_counted_not_fatal() {
    let mock = mock("status=503").await;
    let r = stream::run(opts(&mock, Protocol::Http1)).await.unwrap();
    assert_eq!(r.errors, 40);
    assert!(r.error_samples[0].contains("503"));
}
