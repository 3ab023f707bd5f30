//! The pool over real sockets: lanes, shards and their caps, choosing by load, the acquire
//! bounds, health (PING RTT), GOAWAY and recycling, transparent retries, and the snapshot.

use std::collections::HashMap;
use std::time::Duration;

use sluice_mock::{MockConfig, MockServer};
use sluice_upstream::{
    Lane, LaneLimit, Protocol, ResponseBody, ShardState, Upstream, UpstreamConfig, UpstreamError,
};
use tokio::time::Instant;

use crate::support::*;

/// A streaming chat request on `lane`.
fn on(lane: Lane, xmock: &str) -> http::Request<bytes::Bytes> {
    let mut req = chat(xmock, STREAM);
    req.extensions_mut().insert(lane);
    req
}

/// An h2c upstream whose pool is shaped by `f`.
fn h2c(mock: &MockServer, f: impl FnOnce(&mut UpstreamConfig)) -> Upstream {
    let mut cfg = config(mock, Protocol::H2c);
    f(&mut cfg);
    Upstream::new(cfg).unwrap()
}

/// Sends `n` concurrent requests on `lane` and returns their responses (headers received).
async fn open_streams(
    up: &Upstream,
    lane: Lane,
    n: usize,
    xmock: &'static str,
) -> Vec<http::Response<ResponseBody>> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let up = up.clone();
            tokio::spawn(async move { up.send(on(lane, xmock), secs(10)).await.unwrap() })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// How many of these responses each mock connection carried.
fn per_connection(
    mock: &MockServer,
    resps: &[http::Response<ResponseBody>],
) -> HashMap<u64, usize> {
    let snap = mock.stats().snapshot();
    let mut m = HashMap::new();
    for r in resps {
        *m.entry(snap.request(request_id(r)).unwrap().conn_id)
            .or_default() += 1;
    }
    m
}

async fn wait_until(what: &str, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !pred() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn short_calls_never_share_a_connection_with_a_long_stream() {
    let mock = mock().await;
    let up = h2c(&mock, |_| {});
    let long = up
        .send(on(Lane::Stream, "tokens=40, interval_ms=10"), secs(5))
        .await
        .unwrap();
    let long_id = request_id(&long);
    // Short calls, with no lane (the default) and with Lane::Short, while the stream runs.
    let mut short_conns = Vec::new();
    for i in 0..4 {
        let req = if i % 2 == 0 {
            chat("tokens=1", NON_STREAM)
        } else {
            on(Lane::Short, "tokens=1")
        };
        let resp = up.send(req, secs(5)).await.unwrap();
        let id = request_id(&resp);
        read_all(&mut resp.into_body()).await.unwrap();
        short_conns.push(mock.stats().snapshot().request(id).unwrap().conn_id);
    }
    read_all(&mut long.into_body()).await.unwrap();
    let snap = mock.stats().snapshot();
    let long_conn = snap.request(long_id).unwrap().conn_id;
    assert!(
        short_conns.iter().all(|c| *c != long_conn),
        "short calls {short_conns:?} shared the stream's connection {long_conn}"
    );
    let pool = up.pool_snapshot();
    let lane = |l: Lane| pool.lanes.iter().find(|s| s.lane == l).unwrap();
    assert!(lane(Lane::Stream)
        .connections
        .iter()
        .all(|c| c.lane == Lane::Stream));
    assert_eq!(
        lane(Lane::Stream)
            .connections
            .iter()
            .map(|c| c.requests_served)
            .sum::<u64>(),
        1
    );
    assert_eq!(
        lane(Lane::Short)
            .connections
            .iter()
            .map(|c| c.requests_served)
            .sum::<u64>(),
        4
    );
}

#[tokio::test]
async fn streams_past_the_per_connection_cap_open_new_shards() {
    let mock = mock().await;
    let up = h2c(&mock, |c| {
        c.pool.stream.min_connections = 1;
        c.pool.stream.max_connections = Some(8);
        c.pool.stream.max_streams_per_connection = 2;
    });
    let resps = open_streams(&up, Lane::Stream, 6, "tokens=10, interval_ms=50").await;
    let snap = mock.stats().snapshot();
    // Three connections carry the six streams; the lane, full, has opened one more ahead of
    // demand, which carries nothing yet.
    let used: Vec<_> = snap
        .connections
        .iter()
        .filter(|c| c.streams_total > 0)
        .collect();
    assert_eq!(used.len(), 3, "{:?}", snap.connections);
    assert!(snap.totals.connections <= 4, "{:?}", snap.connections);
    for c in &snap.connections {
        assert!(c.max_concurrent_streams <= 2, "{c:?}");
    }
    let counts = per_connection(&mock, &resps);
    assert!(counts.values().all(|n| *n == 2), "{counts:?}");
    let pool = up.pool_snapshot();
    let stream = &pool.lanes[0];
    assert_eq!((stream.lane, stream.in_flight), (Lane::Stream, 6));
    assert!((3..=4).contains(&stream.ready), "{stream:?}");
    assert!(stream.connections.iter().all(|c| c.cap == 2));
    assert_eq!(
        stream
            .connections
            .iter()
            .filter(|c| c.in_flight == 2)
            .count(),
        3
    );
    assert!((3..=4).contains(&pool.counters.connects));
    for r in resps {
        read_all(&mut r.into_body()).await.unwrap();
    }
}

#[tokio::test]
async fn least_in_flight_spreads_streams_evenly_over_existing_shards() {
    let mock = mock().await;
    let up = h2c(&mock, |c| {
        c.pool.stream.min_connections = 3;
        c.pool.stream.max_connections = Some(3);
        c.pool.stream.max_streams_per_connection = 10;
    });
    // Warm up: every acquire below min_connections opens one more shard in the background.
    wait_until("3 ready shards", || {
        let ready = up.pool_snapshot().lanes[0].ready;
        if ready < 3 {
            let up = up.clone();
            tokio::spawn(async move {
                let resp = up
                    .send(on(Lane::Stream, "tokens=1"), secs(5))
                    .await
                    .unwrap();
                read_all(&mut resp.into_body()).await.unwrap();
            });
        }
        ready == 3
    })
    .await;
    wait_until("warm-up done", || {
        up.pool_snapshot().lanes[0].in_flight == 0
    })
    .await;
    let resps = open_streams(&up, Lane::Stream, 6, "tokens=10, interval_ms=50").await;
    let counts = per_connection(&mock, &resps);
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(counts.values().all(|n| *n == 2), "uneven: {counts:?}");
    assert_eq!(mock.stats().snapshot().totals.connections, 3);
}

#[tokio::test]
async fn full_pool_fails_fast_with_bounded_pending_and_acquire_timeout() {
    let mock = mock().await;
    let up = h2c(&mock, |c| {
        c.pool.stream.min_connections = 1;
        c.pool.stream.max_connections = Some(1);
        c.pool.stream.max_streams_per_connection = 1;
        c.pool.stream.max_pending = 1;
        c.pool.stream.acquire_timeout = Duration::from_millis(300);
    });
    let held = up
        .send(on(Lane::Stream, "tokens=100, interval_ms=20"), secs(5))
        .await
        .unwrap();
    // One waiter fills the pending queue...
    let waiter = tokio::spawn({
        let up = up.clone();
        async move {
            let t0 = Instant::now();
            let err = up.send(on(Lane::Stream, ""), secs(5)).await.unwrap_err();
            (err, t0.elapsed())
        }
    });
    wait_until("one pending", || up.pool_snapshot().lanes[0].pending == 1).await;
    // ...so the next fails at once.
    let t0 = Instant::now();
    let full = up.send(on(Lane::Stream, ""), secs(5)).await.unwrap_err();
    assert!(
        t0.elapsed() < Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    assert!(
        matches!(
            &full,
            UpstreamError::PoolFull {
                upstream,
                lane: Lane::Stream,
                limit: LaneLimit::H2Connections { max_connections: 1 },
                max_pending: 1
            } if upstream == "local"
        ),
        "{full:?}"
    );
    assert_eq!(
        full.config_key().as_deref(),
        Some("pool.stream.max_connections")
    );
    assert_eq!(full.metric_label(), "pool_pending_full");
    assert!(full.is_pool_saturated());
    // The waiter gives up at acquire_timeout, well before its 5 s deadline.
    let (err, waited) = waiter.await.unwrap();
    assert!(
        matches!(
            err,
            UpstreamError::PoolAcquireTimeout {
                lane: Lane::Stream,
                limit: LaneLimit::H2Connections { max_connections: 1 },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    let pool = up.pool_snapshot();
    assert_eq!(
        (pool.counters.pool_full, pool.counters.pool_acquire_timeouts),
        (1, 1)
    );
    assert_eq!(pool.lanes[0].pending, 0);
    assert_eq!(
        mock.stats().snapshot().totals.requests,
        1,
        "only the first was sent"
    );
    drop(held);
    // The short lane is unaffected by the stream lane being full.
    complete(&up, &mock, "tokens=1").await;
}

#[tokio::test]
async fn a_degraded_connection_gets_no_new_streams() {
    let mock = mock().await;
    let up = h2c(&mock, |c| {
        c.pool.stream.min_connections = 1;
        c.pool.stream.max_connections = Some(4);
        c.pool.ping_interval = Duration::from_millis(100);
    });
    // Throttle the first connection to 2000 B/s while it has plenty to send: PONGs queue
    // behind the data, so its RTT climbs.
    let slow = up
        .send(
            on(
                Lane::Stream,
                "degrade=2000, tokens=400, interval_ms=5, token_bytes=100",
            ),
            secs(5),
        )
        .await
        .unwrap();
    let slow_conn = mock
        .stats()
        .snapshot()
        .request(request_id(&slow))
        .unwrap()
        .conn_id;
    let slow_shard = up.pool_snapshot().lanes[0].connections[0].id;
    let t0 = Instant::now();
    wait_until("the slow connection leaves Ready", || {
        !up.pool_snapshot().lanes[0]
            .connections
            .iter()
            .any(|c| c.id == slow_shard && c.state == ShardState::Ready)
    })
    .await;
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let c = up.pool_snapshot().counters;
    assert!(c.degradations + c.ping_timeouts >= 1, "{c:?}");
    // A replacement is opened without waiting for a request to need it.
    wait_until("a ready replacement", || {
        up.pool_snapshot().lanes[0]
            .connections
            .iter()
            .any(|c| c.id != slow_shard && c.state == ShardState::Ready)
    })
    .await;
    // Without health checks, all of these would go to the one connection (cap 50).
    let resps = open_streams(&up, Lane::Stream, 4, "tokens=5, interval_ms=10").await;
    let counts = per_connection(&mock, &resps);
    assert!(
        !counts.contains_key(&slow_conn),
        "{counts:?} used {slow_conn}"
    );
    for r in resps {
        read_all(&mut r.into_body()).await.unwrap();
    }
    drop(slow);
}

#[tokio::test]
async fn goaway_drains_the_shard_and_it_closes_after_its_last_stream() {
    let mock = mock().await;
    let up = h2c(&mock, |c| c.pool.stream.min_connections = 1);
    let long = up
        .send(
            on(Lane::Stream, "goaway_after=1, tokens=20, interval_ms=20"),
            secs(5),
        )
        .await
        .unwrap();
    // The frame tap sees the GOAWAY although the long stream keeps the connection open.
    wait_until("draining", || up.pool_snapshot().lanes[0].draining == 1).await;
    let pool = up.pool_snapshot();
    assert_eq!((pool.counters.goaways, pool.counters.drains_goaway), (1, 1));
    let next = up
        .send(on(Lane::Stream, "tokens=1"), secs(5))
        .await
        .unwrap();
    let snap = mock.stats().snapshot();
    assert_ne!(
        snap.request(request_id(&next)).unwrap().conn_id,
        snap.request(request_id(&long)).unwrap().conn_id
    );
    assert_eq!(
        snap.totals.refused, 0,
        "nothing was sent into the draining connection"
    );
    read_all(&mut next.into_body()).await.unwrap();
    read_all(&mut long.into_body()).await.unwrap();
    wait_until("the drained shard is gone", || {
        let lane = &up.pool_snapshot().lanes[0];
        lane.draining == 0 && lane.connections.len() == 1
    })
    .await;
}

#[tokio::test]
async fn request_and_age_limits_recycle_connections() {
    let mock = mock().await;
    let up = h2c(&mock, |c| c.pool.max_requests_per_connection = Some(2));
    let a = complete(&up, &mock, "tokens=1").await.conn_id;
    let b = complete(&up, &mock, "tokens=1").await.conn_id;
    let c = complete(&up, &mock, "tokens=1").await.conn_id;
    assert_eq!(a, b);
    assert_ne!(
        b, c,
        "the third request must not reuse a connection that served 2"
    );
    assert_eq!(up.pool_snapshot().counters.drains_max_requests, 1);

    let mock = mock_with(MockConfig::default()).await;
    let up = h2c(&mock, |c| {
        c.pool.max_connection_age = Some(Duration::from_millis(200))
    });
    let a = complete(&up, &mock, "tokens=1").await.conn_id;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = complete(&up, &mock, "tokens=1").await.conn_id;
    assert_ne!(a, b);
    assert!(up.pool_snapshot().counters.drains_max_age >= 1);
}

#[tokio::test]
async fn refused_on_every_try_is_refused_after_two_transparent_retries() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::H2c);
    let err = up.send(chat("refuse", STREAM), secs(5)).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Refused), "{err:?}");
    let c = up.pool_snapshot().counters;
    assert_eq!((c.refused_streams, c.transparent_retries), (3, 2), "{c:?}");
    assert_eq!(mock.stats().snapshot().totals.refused, 3);
}

#[tokio::test]
async fn snapshot_describes_each_connection() {
    let mock = mock_with(MockConfig {
        h2_max_concurrent_streams: Some(7),
        ..MockConfig::default()
    })
    .await;
    let up = h2c(&mock, |c| c.pool.ping_interval = Duration::from_millis(50));
    complete(&up, &mock, "tokens=1").await;
    wait_until("an RTT", || {
        up.pool_snapshot().lanes[1]
            .connections
            .first()
            .is_some_and(|c| c.rtt.is_some())
    })
    .await;
    let pool = up.pool_snapshot();
    assert_eq!(
        pool.lanes.iter().map(|l| l.lane).collect::<Vec<_>>(),
        Lane::ALL
    );
    let short = &pool.lanes[1];
    assert_eq!((short.ready, short.in_flight, short.pending), (1, 0, 0));
    let c = &short.connections[0];
    assert_eq!(
        (c.protocol, c.lane, c.state),
        (Protocol::H2c, Lane::Short, ShardState::Ready)
    );
    assert_eq!(
        (c.cap, c.server_max_streams, c.requests_served),
        (7, Some(7), 1)
    );
    assert!(c.rtt.unwrap() < Duration::from_secs(1));
    assert!(c.age > Duration::ZERO);
    assert_eq!(pool.counters.connects, 1);
}

#[tokio::test]
async fn a_stalled_stream_degrades_its_connection() {
    let mock = mock().await;
    let up = h2c(&mock, |c| {
        c.pool.stream.min_connections = 1;
        c.pool.ping_interval = Duration::from_millis(50);
        c.pool.stall_timeout = Duration::from_millis(300);
    });
    let stalled = up
        .send(
            on(
                Lane::Stream,
                "tokens=10, interval_ms=10, stall_after=2:3000",
            ),
            secs(5),
        )
        .await
        .unwrap();
    let shard = up.pool_snapshot().lanes[0].connections[0].id;
    wait_until("degraded by the stall", || {
        up.pool_snapshot().lanes[0]
            .connections
            .iter()
            .any(|c| c.id == shard && c.state == ShardState::Degraded)
    })
    .await;
    // The RTT itself is fine: only the missing DATA made it degraded.
    let c = up.pool_snapshot().lanes[0]
        .connections
        .iter()
        .find(|c| c.id == shard)
        .cloned();
    assert!(c
        .unwrap()
        .rtt
        .is_some_and(|r| r < Duration::from_millis(50)));
    drop(stalled);
}

#[tokio::test]
async fn dropping_the_upstream_ends_every_shard_and_its_ping_loop() {
    let mock = mock().await;
    let up = h2c(&mock, |c| {
        c.pool.stream.min_connections = 2;
        c.pool.ping_interval = Duration::from_millis(20);
    });
    complete(&up, &mock, "tokens=1").await;
    let resp = up
        .send(on(Lane::Stream, "tokens=1"), secs(5))
        .await
        .unwrap();
    read_all(&mut resp.into_body()).await.unwrap();
    wait_until("2 stream shards", || up.pool_snapshot().lanes[0].ready == 2).await;
    assert_eq!(mock.stats().snapshot().totals.connections, 3);
    drop(up);
    wait_for(mock.stats(), "every connection closed", |s| {
        s.connections.iter().all(|c| c.closed_at.is_some())
    })
    .await;
}
