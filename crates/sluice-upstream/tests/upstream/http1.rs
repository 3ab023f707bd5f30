//! HTTP/1.1 lanes: their default cap (one request per connection, within the open-file
//! ceiling), the cap warning and the saturation error naming the setting, every connection in
//! the snapshot, rotation by age and by request count, and the idle timeout.

use std::time::Duration;

use sluice_mock::MockServer;
use sluice_upstream::{
    fd_limit, Lane, LaneLimit, Protocol, ShardState, Upstream, UpstreamConfig, UpstreamError,
    DEFAULT_H2_MAX_CONNECTIONS, DEFAULT_HTTP1_MAX_CONNECTIONS,
};
use tokio::time::Instant;

use crate::support::*;

/// A streaming chat request on `lane`.
fn on(lane: Lane, xmock: &str) -> http::Request<bytes::Bytes> {
    let mut req = chat(xmock, STREAM);
    req.extensions_mut().insert(lane);
    req
}

fn http1(mock: &MockServer, f: impl FnOnce(&mut UpstreamConfig)) -> Upstream {
    let mut cfg = config(mock, Protocol::Http1);
    f(&mut cfg);
    Upstream::new(cfg).unwrap()
}

async fn wait_until(what: &str, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !pred() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn http1_lanes_default_to_one_connection_per_request_sized_caps() {
    let mock = mock().await;
    let ceiling = fd_limit().lane_ceiling();
    let caps = |up: &Upstream| -> Vec<usize> {
        up.pool_snapshot()
            .lanes
            .iter()
            .map(|l| l.max_connections)
            .collect()
    };
    let h1 = DEFAULT_HTTP1_MAX_CONNECTIONS.min(ceiling);
    assert!(
        h1 >= 1000 || ceiling < 1000,
        "{h1}: the open-file limit is too low"
    );
    assert_eq!(caps(&upstream(&mock, Protocol::Http1)), [h1, h1]);
    let h2 = DEFAULT_H2_MAX_CONNECTIONS.min(ceiling);
    assert_eq!(caps(&upstream(&mock, Protocol::H2c)), [h2, h2]);
    // Auto over http:// is HTTP/1.1, so it gets the HTTP/1.1 default.
    assert_eq!(caps(&upstream(&mock, Protocol::Auto)), [h1, h1]);
    // A configured cap is used as it is.
    let set = http1(&mock, |c| c.pool.stream.max_connections = Some(7));
    assert_eq!(caps(&set), [7, h1]);
    // The soft limit was raised to the hard limit (where the platform allows it).
    let limit = fd_limit();
    if limit.problem.is_none() {
        assert_eq!(limit.soft, limit.hard.or(Some(1 << 20)), "{limit}");
    }
}

#[tokio::test]
async fn an_http1_lane_at_its_cap_warns_once_and_fails_naming_the_setting() {
    let mock = mock().await;
    let up = http1(&mock, |c| {
        c.pool.short.max_connections = Some(2);
        c.pool.short.acquire_timeout = Duration::from_millis(150);
    });
    let (logs, _guard) = Logs::capture();
    let held = [
        up.send(on(Lane::Short, "tokens=40, interval_ms=20"), secs(5))
            .await
            .unwrap(),
        up.send(on(Lane::Short, "tokens=40, interval_ms=20"), secs(5))
            .await
            .unwrap(),
    ];
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let up = up.clone();
            tokio::spawn(async move { up.send(on(Lane::Short, ""), secs(5)).await.unwrap_err() })
        })
        .collect();
    for w in waiters {
        let err = w.await.unwrap();
        assert!(
            matches!(
                &err,
                UpstreamError::PoolAcquireTimeout {
                    upstream,
                    lane: Lane::Short,
                    limit: LaneLimit::Http1Connections { max_connections: 2 },
                    ..
                } if upstream == "local"
            ),
            "{err:?}"
        );
        assert_eq!(
            err.config_key().as_deref(),
            Some("pool.short.max_connections")
        );
        assert!(
            err.to_string().contains("all 2 HTTP/1.1 connections"),
            "{err}"
        );
    }
    let warnings = logs.lines_with("at its connection cap");
    assert_eq!(warnings.len(), 1, "rate-limited to one: {warnings:#?}");
    let w = &warnings[0];
    assert!(w.contains("WARN"), "{w}");
    for needle in ["local", "short", "pool.short.max_connections", "HTTP/1.1"] {
        assert!(w.contains(needle), "{needle} missing in {w}");
    }
    assert!(!w.contains("127.0.0.1"), "no address in the warning: {w}");
    // The other lane has its own cap and never warned.
    assert!(logs.lines_with("pool.stream").is_empty());
    drop(held);
}

#[tokio::test]
async fn an_h2_lane_at_its_cap_warns_and_fails_naming_the_setting() {
    let mock = mock().await;
    let mut cfg = config(&mock, Protocol::H2c);
    cfg.pool.stream.min_connections = 1;
    cfg.pool.stream.max_connections = Some(1);
    cfg.pool.stream.max_streams_per_connection = 1;
    cfg.pool.stream.acquire_timeout = Duration::from_millis(150);
    let up = Upstream::new(cfg).unwrap();
    let (logs, _guard) = Logs::capture();
    let held = up
        .send(on(Lane::Stream, "tokens=40, interval_ms=20"), secs(5))
        .await
        .unwrap();
    for _ in 0..3 {
        let err = up.send(on(Lane::Stream, ""), secs(5)).await.unwrap_err();
        assert!(
            matches!(
                err,
                UpstreamError::PoolAcquireTimeout {
                    limit: LaneLimit::H2Connections { max_connections: 1 },
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.config_key().as_deref(),
            Some("pool.stream.max_connections")
        );
    }
    let warnings = logs.lines_with("at its connection cap");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("pool.stream.max_connections") && warnings[0].contains("HTTP/2"),
        "{}",
        warnings[0]
    );
    drop(held);
}

#[tokio::test]
async fn every_http1_connection_is_in_the_snapshot() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::Http1);
    complete(&up, &mock, "tokens=1").await; // short lane, then idle
    let streams = [
        up.send(on(Lane::Stream, "tokens=20, interval_ms=10"), secs(5))
            .await
            .unwrap(),
        up.send(on(Lane::Stream, "tokens=20, interval_ms=10"), secs(5))
            .await
            .unwrap(),
    ];
    let snap = up.pool_snapshot();
    let (stream, short) = (&snap.lanes[0], &snap.lanes[1]);
    assert_eq!((stream.lane, short.lane), (Lane::Stream, Lane::Short));
    assert_eq!(stream.connections.len(), 2, "{stream:?}");
    for c in &stream.connections {
        assert_eq!(c.protocol, Protocol::Http1);
        assert_eq!(c.lane, Lane::Stream);
        assert_eq!(c.state, ShardState::InUse);
        assert_eq!((c.in_flight, c.cap, c.requests_served), (1, 1, 1));
        assert!(c.bytes_out > 0 && c.bytes_in > 0, "{c:?}");
        assert_eq!((c.rtt, c.server_max_streams), (None, None));
    }
    assert_ne!(stream.connections[0].id, stream.connections[1].id);
    assert_eq!((stream.in_flight, stream.ready), (2, 0));
    assert_eq!(short.connections.len(), 1, "{short:?}");
    let idle = &short.connections[0];
    assert_eq!(
        (idle.state, idle.in_flight, idle.requests_served),
        (ShardState::Idle, 0, 1)
    );
    assert_eq!((short.ready, short.in_flight), (1, 0));
    // Connection ids are unique across the lanes.
    assert!(stream.connections.iter().all(|c| c.id != idle.id));
    let age_before = idle.age;
    for s in streams {
        read_all(&mut s.into_body()).await.unwrap();
    }
    let snap = up.pool_snapshot();
    assert!(snap.lanes[0]
        .connections
        .iter()
        .all(|c| c.state == ShardState::Idle && c.in_flight == 0));
    assert!(snap.lanes[1].connections[0].age > age_before);
    assert_eq!(up.stats().idle_http1_connections, 3);
    assert_eq!(mock.stats().snapshot().totals.connections, 3);
}

#[tokio::test]
async fn http1_connections_rotate_after_max_requests() {
    let mock = mock().await;
    let up = http1(&mock, |c| c.pool.max_requests_per_connection = Some(2));
    let first = complete(&up, &mock, "tokens=1").await;
    // The second request is the connection's last: it shows as draining while it runs.
    let resp = up
        .send(chat("tokens=3, interval_ms=20", STREAM), secs(5))
        .await
        .unwrap();
    let second = request_id(&resp);
    let snap = up.pool_snapshot();
    let c = &snap.lanes[1].connections[0];
    assert_eq!(
        (c.state, c.requests_served),
        (ShardState::Draining, 2),
        "{c:?}"
    );
    assert_eq!(snap.lanes[1].draining, 1);
    read_all(&mut resp.into_body()).await.unwrap();
    let third = complete(&up, &mock, "tokens=1").await;
    let stats = mock.stats().snapshot();
    assert_eq!(stats.request(second).unwrap().conn_id, first.conn_id);
    assert_ne!(third.conn_id, first.conn_id);
    wait_for(mock.stats(), "the rotated connection closed", |s| {
        s.connection(first.conn_id)
            .is_some_and(|c| c.closed_at.is_some())
    })
    .await;
    assert_eq!(up.pool_snapshot().counters.drains_max_requests, 1);
}

#[tokio::test]
async fn http1_connections_rotate_at_max_age() {
    let mock = mock().await;
    let up = http1(&mock, |c| {
        c.pool.max_connection_age = Some(Duration::from_millis(300))
    });
    // In use past its age: shown draining, and not reused after its response.
    let resp = up
        .send(chat("tokens=8, interval_ms=50", STREAM), secs(5))
        .await
        .unwrap();
    let first_conn = mock
        .stats()
        .snapshot()
        .request(request_id(&resp))
        .unwrap()
        .conn_id;
    wait_until("the connection shows as draining", || {
        up.pool_snapshot().lanes[1]
            .connections
            .first()
            .is_some_and(|c| c.state == ShardState::Draining)
    })
    .await;
    read_all(&mut resp.into_body()).await.unwrap();
    let second = complete(&up, &mock, "tokens=1").await;
    assert_ne!(second.conn_id, first_conn);
    // Idle past its age: closed by the pool without waiting for a request.
    wait_for(mock.stats(), "the idle connection closed at its age", |s| {
        s.connection(second.conn_id)
            .is_some_and(|c| c.closed_at.is_some())
    })
    .await;
    let snap = up.pool_snapshot();
    assert_eq!(snap.counters.drains_max_age, 2, "{:?}", snap.counters);
    assert!(snap.lanes[1].connections.is_empty(), "{:?}", snap.lanes[1]);
    assert_eq!(up.stats().open_connections, 0);
}

#[tokio::test]
async fn idle_http1_connections_close_after_idle_timeout() {
    let mock = mock().await;
    let up = http1(&mock, |c| c.pool.idle_timeout = Duration::from_millis(200));
    let a = complete(&up, &mock, "tokens=1").await;
    // Reused while fresh: the timeout counts from the last response.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = complete(&up, &mock, "tokens=1").await;
    assert_eq!(a.conn_id, b.conn_id);
    let snap = wait_for(mock.stats(), "the idle connection closed", |s| {
        s.connection(b.conn_id)
            .is_some_and(|c| c.closed_at.is_some())
    })
    .await;
    let idle_for = snap.connection(b.conn_id).unwrap().closed_at.unwrap()
        - snap.request(b.id).unwrap().finished_at.unwrap();
    assert!(
        idle_for >= Duration::from_millis(150) && idle_for < Duration::from_secs(2),
        "closed after {idle_for:?} idle"
    );
    wait_until("no connection left", || up.stats().open_connections == 0).await;
    assert!(up.pool_snapshot().lanes[1].connections.is_empty());
    assert_eq!(up.stats().idle_http1_connections, 0);
    // The next request simply opens a new connection.
    let c = complete(&up, &mock, "tokens=1").await;
    assert_ne!(c.conn_id, b.conn_id);
}
