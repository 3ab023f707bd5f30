//! One chat request judged as its client would, against the real mock: successes with their
//! two latencies, and each way a response can fail counted under its own cause.

use std::time::Duration;

use sluice_bench::chat::{self, Kind};
use sluice_bench::Failure;
use sluice_mock::{Behavior, MockConfig, MockServer};

async fn mock(spec: &str) -> MockServer {
    MockServer::start(MockConfig {
        defaults: Behavior::default().with_spec(spec).unwrap(),
        ..MockConfig::default()
    })
    .await
    .unwrap()
}

const TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_stream_is_timed_to_its_first_content_and_a_call_to_its_end() {
    let m = mock("ttft_ms=50, tokens=5, interval_ms=40").await;
    let client = chat::client(m.addr(), 2).unwrap();
    let s = chat::send(&client, Kind::Stream, "chat-s-1", TIMEOUT).await;
    assert!(s.ok(), "{:?}", s.failure);
    // The first content comes after the first token's wait; the stream ends four gaps later.
    assert!(s.latency >= Duration::from_millis(50), "{s:?}");
    assert!(s.total >= s.latency + Duration::from_millis(150), "{s:?}");
    let c = chat::send(&client, Kind::Call, "chat-c-1", TIMEOUT).await;
    assert!(c.ok(), "{:?}", c.failure);
    assert_eq!(c.latency, c.total);
    // The id went out as the request id and the idempotency key.
    let snap = m.stats().snapshot();
    let ids: Vec<(&str, &str, bool)> = snap
        .requests
        .iter()
        .map(|r| {
            let h = |name: &str| {
                r.headers
                    .iter()
                    .find(|(k, _)| k == name)
                    .map_or("", |(_, v)| v.as_str())
            };
            (h("x-request-id"), h("idempotency-key"), r.stream)
        })
        .collect();
    assert_eq!(
        ids,
        [
            ("chat-s-1", "chat-s-1", true),
            ("chat-c-1", "chat-c-1", false)
        ]
    );
}

#[tokio::test]
async fn each_failure_is_told_by_its_cause() {
    let cases = [
        ("status=503", Kind::Call, Failure::Status(503)),
        ("status=429", Kind::Stream, Failure::Status(429)),
        (
            "tokens=5, stream_error_after=2",
            Kind::Stream,
            Failure::ErrorEvent,
        ),
        ("tokens=5, abort_after=2", Kind::Stream, Failure::Body),
        ("tokens=0", Kind::Stream, Failure::Cut),
    ];
    for (spec, kind, want) in cases {
        let m = mock(spec).await;
        let client = chat::client(m.addr(), 1).unwrap();
        let r = chat::send(&client, kind, "chat-fail", TIMEOUT).await;
        let (got, message) = r.failure.clone().unwrap_or_else(|| panic!("{spec}: {r:?}"));
        assert_eq!(got, want, "{spec}: {message}");
        assert!(!message.is_empty());
        assert_eq!(r.latency, r.total);
    }
    // Nothing answers: a timeout, after the time given.
    let m = mock("silent").await;
    let client = chat::client(m.addr(), 1).unwrap();
    let r = chat::send(
        &client,
        Kind::Call,
        "chat-silent",
        Duration::from_millis(200),
    )
    .await;
    assert_eq!(r.failure.map(|f| f.0), Some(Failure::Timeout));
    assert!(r.total >= Duration::from_millis(200));
}
