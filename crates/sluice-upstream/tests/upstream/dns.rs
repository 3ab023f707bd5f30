//! DNS: `base_url` hosts are resolved, cached for `pool.dns_refresh`, and resolved again
//! after it (seen through the `dns` phase of new connections).

use std::time::Duration;

use sluice_upstream::{PhaseTimings, Protocol, Upstream, UpstreamConfig, UpstreamConfigError};

use crate::support::*;

fn localhost_http1(mock: &sluice_mock::MockServer, dns_refresh: Duration) -> Upstream {
    let mut cfg = UpstreamConfig {
        base_url: format!("http://localhost:{}/v1", mock.addr().port())
            .parse()
            .unwrap(),
        ..config(mock, Protocol::Http1)
    };
    cfg.pool.dns_refresh = dns_refresh;
    Upstream::new(cfg).unwrap()
}

/// Opens two connections: the second request starts while the first still holds its
/// connection (its body unread), after `pause`. Returns both requests' timings.
async fn two_connections(up: &Upstream, pause: Duration) -> (PhaseTimings, PhaseTimings) {
    let first = up.send(chat("", STREAM), secs(5)).await.unwrap();
    tokio::time::sleep(pause).await;
    let second = up.send(chat("", STREAM), secs(5)).await.unwrap();
    let t = |r: &http::Response<_>| *r.extensions().get::<PhaseTimings>().unwrap();
    (t(&first), t(&second))
}

#[tokio::test]
async fn a_new_connection_within_dns_refresh_uses_the_cached_addresses() {
    let mock = mock().await;
    let up = localhost_http1(&mock, Duration::from_secs(30));
    let (first, second) = two_connections(&up, Duration::ZERO).await;
    assert!(first.dns.is_some(), "{first:?}");
    assert!(second.connect.is_some(), "a second connection: {second:?}");
    assert_eq!(second.dns, None, "cached: {second:?}");
    assert_eq!(mock.stats().snapshot().totals.connections, 2);
}

#[tokio::test]
async fn a_new_connection_after_dns_refresh_resolves_again() {
    let mock = mock().await;
    let up = localhost_http1(&mock, Duration::from_millis(1));
    let (first, second) = two_connections(&up, Duration::from_millis(20)).await;
    assert!(first.dns.is_some(), "{first:?}");
    assert!(second.connect.is_some(), "a second connection: {second:?}");
    assert!(second.dns.is_some(), "expired, resolved again: {second:?}");
}

#[test]
fn dns_refresh_of_zero_is_rejected_naming_the_field() {
    let mut cfg = UpstreamConfig::default();
    cfg.pool.dns_refresh = Duration::ZERO;
    let err = Upstream::new(cfg).unwrap_err();
    assert!(
        matches!(&err, UpstreamConfigError::Pool { field, .. } if field == "pool.dns_refresh"),
        "{err:?}"
    );
}
