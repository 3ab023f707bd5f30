//! HTTP/1.1 keep-alive pool: reuse after a complete response, the connection cap, waiting for
//! a connection bounded by the deadline, and idle connections the server closed.

use std::time::Duration;

use sluice_upstream::{Protocol, Upstream, UpstreamError};
use tokio::time::Instant;

use crate::support::*;

fn capped(mock: &sluice_mock::MockServer, cap: usize) -> Upstream {
    let mut cfg = config(mock, Protocol::Http1);
    cfg.pool.short.max_connections = Some(cap);
    Upstream::new(cfg).unwrap()
}

#[tokio::test]
async fn sequential_requests_reuse_one_connection() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::Http1);
    let mut conns = Vec::new();
    for _ in 0..3 {
        conns.push(complete(&up, &mock, "").await.conn_id);
    }
    assert!(conns.iter().all(|c| *c == conns[0]), "{conns:?}");
    assert_eq!(mock.stats().snapshot().totals.connections, 1);
    let stats = up.stats();
    assert_eq!(stats.protocol, Protocol::Http1);
    assert_eq!(stats.open_connections, 1);
    assert_eq!(stats.idle_http1_connections, 1);
    assert_eq!(stats.in_flight, 0);
}

#[tokio::test]
async fn cap_reached_second_request_waits_then_runs_on_the_same_connection() {
    let mock = mock().await;
    let up = capped(&mock, 1);
    let first = tokio::spawn({
        let up = up.clone();
        async move {
            let resp = up
                .send(chat("tokens=5, interval_ms=60", STREAM), secs(5))
                .await
                .unwrap();
            let id = request_id(&resp);
            read_all(&mut resp.into_body()).await.unwrap();
            id
        }
    });
    // Let the first request take the only connection.
    wait_for(mock.stats(), "first request", |s| s.requests.len() == 1).await;
    let second = complete(&up, &mock, "tokens=1").await;
    let first_id = first.await.unwrap();
    let snap = mock.stats().snapshot();
    let first = snap.request(first_id).unwrap();
    assert!(
        second.started >= first.finished_at.unwrap(),
        "the second request ran before the first released the connection"
    );
    assert_eq!(second.conn_id, first.conn_id);
    assert_eq!(snap.totals.connections, 1);
}

#[tokio::test]
async fn cap_reached_and_deadline_passes_is_pool_acquire_timeout() {
    let mock = mock().await;
    let up = capped(&mock, 1);
    let resp = up
        .send(chat("tokens=50, interval_ms=20", STREAM), secs(5))
        .await
        .unwrap();
    let t0 = Instant::now();
    let err = up
        .send(chat("", STREAM), t0 + Duration::from_millis(200))
        .await
        .unwrap_err();
    let waited = t0.elapsed();
    assert!(
        matches!(err, UpstreamError::PoolAcquireTimeout { .. }),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "pool_acquire_timeout");
    // Never sent, so retry-safe; but saturated: not to be retried into this pool.
    assert!(err.is_retry_safe() && err.is_pool_saturated());
    assert_eq!(up.pool_snapshot().counters.pool_acquire_timeouts, 1);
    assert!(
        waited >= Duration::from_millis(190) && waited < Duration::from_millis(600),
        "{waited:?}"
    );
    assert_eq!(mock.stats().snapshot().totals.requests, 1, "never sent");
    drop(resp);
}

#[tokio::test]
async fn idle_connection_closed_by_server_is_not_handed_out() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::Http1);
    // `goaway_after=1` on HTTP/1.1: the mock answers with `Connection: close` and closes.
    let first = complete(&up, &mock, "goaway_after=1").await;
    wait_for(mock.stats(), "connection closed", |s| {
        s.connection(first.conn_id)
            .is_some_and(|c| c.closed_at.is_some())
    })
    .await;
    let second = complete(&up, &mock, "").await;
    assert_ne!(second.conn_id, first.conn_id);
    assert_eq!(up.stats().open_connections, 1);
}
