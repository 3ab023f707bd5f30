//! Phase timings over real sockets: what a fresh connection, a reused one, a pool wait, the
//! mock's time to first token and TLS show in [`PhaseTimings`], and the `Server-Timing` value.

use std::time::Duration;

use sluice_mock::{MockConfig, MockServer};
use sluice_upstream::{PhaseTimings, Protocol, ResponseBody, Upstream, UpstreamConfig};

use crate::support::*;

/// `base_url` on `localhost` (resolved by DNS) rather than the mock's IP address.
fn via_localhost(mock: &MockServer, protocol: Protocol) -> UpstreamConfig {
    let scheme = if mock.cert_pem().is_some() {
        "https"
    } else {
        "http"
    };
    UpstreamConfig {
        base_url: format!("{scheme}://localhost:{}/v1", mock.addr().port())
            .parse()
            .unwrap(),
        ..config(mock, protocol)
    }
}

/// Sends, reads the whole body, and returns the timings from the response's extensions and
/// from the body after its end.
async fn timed(up: &Upstream, xmock: &str, body: &str) -> (PhaseTimings, PhaseTimings) {
    let resp = up.send(chat(xmock, body), secs(5)).await.unwrap();
    assert_eq!(resp.status(), 200);
    let at_headers = *resp.extensions().get::<PhaseTimings>().unwrap();
    let mut body: ResponseBody = resp.into_body();
    assert_eq!(body.timings().last_byte, None, "the body has not ended yet");
    read_all(&mut body).await.unwrap();
    (at_headers, body.timings())
}

fn assert_ordered(t: &PhaseTimings) {
    assert!(t.written <= t.first_byte, "{t:?}");
    if let Some(last) = t.last_byte {
        assert!(t.first_byte <= last, "{t:?}");
    }
}

/// The first request on a fresh connection pays for DNS and TCP; the next one, on the same
/// connection, pays for neither.
async fn fresh_then_reused(protocol: Protocol) {
    let mock = mock().await;
    let up = Upstream::new(via_localhost(&mock, protocol)).unwrap();
    let (first, first_done) = timed(&up, "", STREAM).await;
    assert!(first.dns.is_some(), "localhost must be resolved: {first:?}");
    assert!(first.connect.is_some(), "{first:?}");
    assert_eq!(first.tls, None, "plain TCP has no TLS phase");
    assert_eq!(first.last_byte, None);
    assert_eq!(
        PhaseTimings {
            last_byte: None,
            ..first_done
        },
        first,
        "the body's timings are the extension's plus the last byte"
    );
    assert!(first_done.last_byte.is_some());
    assert_ordered(&first_done);

    let (second, second_done) = timed(&up, "", STREAM).await;
    assert_eq!(
        (second.dns, second.connect, second.tls),
        (None, None, None),
        "a reused connection has no connect phases: {second:?}"
    );
    // Nothing else is in flight, so a slot is free at once; generous for a loaded machine.
    assert!(second.acquire < Duration::from_secs(1), "{second:?}");
    assert_ordered(&second_done);
    assert_eq!(mock.stats().snapshot().totals.connections, 1);
}

#[tokio::test]
async fn h2c_first_request_connects_and_resolves_then_reuse_has_no_connect() {
    fresh_then_reused(Protocol::H2c).await;
}

#[tokio::test]
async fn http1_first_request_connects_and_resolves_then_reuse_has_no_connect() {
    fresh_then_reused(Protocol::Http1).await;
}

#[tokio::test]
async fn ttft_delays_first_byte_of_a_non_streaming_response() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::H2c);
    let (t, done) = timed(&up, "ttft_ms=200", NON_STREAM).await;
    // The mock holds the headers of a non-streaming response for ttft_ms.
    assert!(t.first_byte >= Duration::from_millis(200), "{t:?}");
    assert!(done.last_byte.unwrap() >= t.first_byte, "{done:?}");
    assert_ordered(&done);
}

#[tokio::test]
async fn last_byte_of_a_stream_counts_the_whole_stream() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::Http1);
    let (t, done) = timed(&up, "ttft_ms=200, tokens=3, interval_ms=20", STREAM).await;
    // Streaming headers come before the first token; the body ends after it.
    let last = done.last_byte.unwrap();
    assert!(last >= Duration::from_millis(200), "{done:?}");
    assert!(last >= t.first_byte);
}

#[tokio::test]
async fn waiting_for_a_busy_connection_is_acquire_time_not_connect_time() {
    let mock = mock().await;
    let mut cfg = config(&mock, Protocol::Http1);
    cfg.pool.short.max_connections = Some(1);
    let up = Upstream::new(cfg).unwrap();
    // Holds the only connection for at least 4 gaps of 50 ms after its headers.
    let busy = up
        .send(chat("tokens=5, interval_ms=50", STREAM), secs(5))
        .await
        .unwrap();
    let reader = tokio::spawn(async move { read_all(&mut busy.into_body()).await.unwrap() });
    let (waited, _) = timed(&up, "", STREAM).await;
    reader.await.unwrap();
    assert!(waited.acquire >= Duration::from_millis(100), "{waited:?}");
    assert_eq!(
        waited.connect, None,
        "it reused the busy connection once free"
    );
}

async fn tls_mock() -> MockServer {
    mock_with(MockConfig {
        tls: true,
        ..MockConfig::default()
    })
    .await
}

/// Over `https://` to the mock's IP address: a TLS phase, and no DNS (nothing to resolve).
async fn tls_phase(protocol: Protocol) {
    let mock = tls_mock().await;
    let ca = CaFile::new(&mock);
    let up = Upstream::new(UpstreamConfig {
        ca_file: Some(ca.0.clone()),
        ..config(&mock, protocol)
    })
    .unwrap();
    let (t, done) = timed(&up, "", STREAM).await;
    assert!(t.tls.is_some(), "{t:?}");
    assert!(t.connect.is_some(), "{t:?}");
    assert_eq!(t.dns, None, "an IP address is not resolved: {t:?}");
    assert_ordered(&done);
    let (again, _) = timed(&up, "", STREAM).await;
    assert_eq!((again.connect, again.tls), (None, None), "{again:?}");
}

#[tokio::test]
async fn tls_handshake_is_a_phase_over_h2() {
    tls_phase(Protocol::H2).await;
}

#[tokio::test]
async fn tls_handshake_is_a_phase_over_http1() {
    tls_phase(Protocol::Http1).await;
}

#[tokio::test]
async fn tls_via_localhost_records_dns_connect_and_tls() {
    let mock = tls_mock().await;
    let ca = CaFile::new(&mock);
    let up = Upstream::new(UpstreamConfig {
        ca_file: Some(ca.0.clone()),
        ..via_localhost(&mock, Protocol::Auto)
    })
    .unwrap();
    let (t, _) = timed(&up, "", STREAM).await;
    assert!(
        t.dns.is_some() && t.connect.is_some() && t.tls.is_some(),
        "{t:?}"
    );
}

/// Splits a `Server-Timing` value into (name, milliseconds), failing on anything malformed.
fn parse_server_timing(value: &str) -> Vec<(String, f64)> {
    value
        .split(", ")
        .map(|metric| {
            let (name, dur) = metric
                .split_once(";dur=")
                .unwrap_or_else(|| panic!("`{metric}` is not name;dur=…"));
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
                "`{name}` is not a token"
            );
            let (_, decimals) = dur.split_once('.').unwrap_or((dur, ""));
            assert!(decimals.len() <= 3, "`{dur}` has more than 3 decimals");
            let ms: f64 = dur.parse().unwrap_or_else(|e| panic!("`{dur}`: {e}"));
            assert!(ms >= 0.0);
            (name.to_string(), ms)
        })
        .collect()
}

#[tokio::test]
async fn server_timing_header_parses_and_lists_present_phases() {
    let mock = mock().await;
    let up = Upstream::new(via_localhost(&mock, Protocol::H2c)).unwrap();
    let (t, done) = timed(&up, "ttft_ms=200", NON_STREAM).await;
    let header = t.server_timing_header();
    http::HeaderValue::from_str(&header).expect("a valid header value");
    let metrics = parse_server_timing(&header);
    let names: Vec<&str> = metrics.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["acquire", "dns", "connect", "written", "ttfb"],
        "{header}"
    );
    let ttfb = metrics.iter().find(|(n, _)| n == "ttfb").unwrap().1;
    assert!(ttfb >= 200.0, "{header}");
    let with_last = parse_server_timing(&done.server_timing_header());
    assert_eq!(with_last.last().unwrap().0, "last");

    let (reused, _) = timed(&up, "", NON_STREAM).await;
    let names: Vec<String> = parse_server_timing(&reused.server_timing_header())
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["acquire", "written", "ttfb"]);
}
