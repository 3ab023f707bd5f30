//! One behaviour suite, run against both backends: the memory store, and a Redis store talking
//! to a real `redis-server` started for the test, or to a real three-node Redis Cluster (with
//! its hash-tagged keys and scripts routed by slot).

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use sluice_state::{
    Admission, Begin, BodyHash, Check, CheckKind, Completion, Decision, IdempotencyConfig,
    MemoryConfig, Refusal, RefusalReason, StateError, Store, Usage,
};
use support::topology::RedisCluster;
use support::{eventually, redis_config, redis_store, RedisServer};
use tokio::time::Instant;

/// A store under test; keeps its Redis server alive.
struct Env {
    store: Store,
    _redis: Option<RedisServer>,
    _cluster: Option<RedisCluster>,
}

impl Env {
    async fn memory() -> Option<Env> {
        Some(Env {
            store: Store::in_memory(&MemoryConfig::default(), &IdempotencyConfig::default()),
            _redis: None,
            _cluster: None,
        })
    }

    async fn redis() -> Env {
        let server = RedisServer::start().await;
        let store = redis_store(redis_config(&server.url())).await;
        Env {
            store,
            _redis: Some(server),
            _cluster: None,
        }
    }

    async fn cluster() -> Env {
        let cluster = RedisCluster::start().await;
        let store = redis_store(redis_config(&cluster.url())).await;
        Env {
            store,
            _redis: None,
            _cluster: Some(cluster),
        }
    }
}

macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let env = super::Env::memory().await.unwrap();
                    super::$name(env.store.clone()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[cfg_attr(no_redis, ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER")]
                async fn $name() {
                    let env = super::Env::redis().await;
                    super::$name(env.store.clone()).await;
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[cfg_attr(any(no_redis, no_redis_cli), ignore = "no redis-server or redis-cli: install them (apt-get install redis-server redis-tools) or set REDIS_SERVER and REDIS_CLI")]
                async fn $name() {
                    let env = super::Env::cluster().await;
                    super::$name(env.store.clone()).await;
                }
            )*
        }
    };
}

both_backends!(
    rate_admits_the_limit_then_refuses_with_a_retry_after,
    a_refusal_takes_nothing_from_any_check,
    tokens_are_reserved_then_reconciled_with_actual_usage,
    a_reservation_above_the_limit_never_passes,
    concurrency_is_capped_and_freed_by_settle_and_by_drop,
    budget_refuses_once_spent_until_its_period_ends,
    quotas_are_read_without_taking_anything,
    idempotency_fresh_in_flight_done_and_mismatch,
    a_dropped_idempotency_guard_releases_the_record,
    a_response_above_the_byte_bound_is_not_stored,
    a_duplicate_waits_for_the_first_within_its_deadline,
    invalid_input_is_an_error_not_a_refusal,
    detached_settles_queued_together_are_all_applied,
);

fn key(s: &str) -> Arc<str> {
    Arc::from(s)
}

fn rate(k: &str, limit: u64, period: Duration) -> Check {
    Check::Rate {
        key: key(k),
        limit,
        period,
    }
}

fn tokens(k: &str, reserve: u64) -> Check {
    Check::Tokens {
        key: key(k),
        limit: 1000,
        period: Duration::from_secs(60),
        reserve,
    }
}

async fn admit(store: &Store, checks: Vec<Check>) -> Result<Admission, Refusal> {
    match store.admit(checks).await.expect("store works") {
        Decision::Admitted(a) => Ok(a),
        Decision::Refused(r) => Err(r),
    }
}

fn near(actual: Duration, expected: Duration, slack: Duration) -> bool {
    actual + slack >= expected && actual <= expected + slack
}

async fn rate_admits_the_limit_then_refuses_with_a_retry_after(store: Store) {
    let check = || vec![rate("k", 5, Duration::from_secs(60))];
    for left in (0..5).rev() {
        let a = admit(&store, check()).await.unwrap();
        let q = a.quotas()[0];
        assert_eq!(
            (q.kind, q.limit, q.remaining),
            (CheckKind::Requests, 5, left)
        );
    }
    let refusal = admit(&store, check()).await.unwrap_err();
    assert_eq!(refusal.metric_label(), "rate_limited");
    assert_eq!((refusal.index, refusal.reason), (0, RefusalReason::Limited));
    // One request every 12 s.
    let retry = refusal.retry_after.unwrap();
    assert!(
        near(retry, Duration::from_secs(12), Duration::from_secs(1)),
        "{retry:?}"
    );
    let q = refusal.quota().unwrap();
    assert_eq!((q.remaining, q.used), (0, 5));
    assert!(near(
        q.reset_after,
        Duration::from_secs(60),
        Duration::from_secs(1)
    ));
}

async fn a_refusal_takes_nothing_from_any_check(store: Store) {
    let checks = || {
        vec![
            rate("k", 10, Duration::from_secs(60)),
            tokens("k", 300),
            Check::Concurrency {
                key: key("k"),
                limit: 1,
            },
        ]
    };
    let held = admit(&store, checks()).await.unwrap();
    let refusal = admit(&store, checks()).await.unwrap_err();
    assert_eq!((refusal.index, refusal.kind), (2, CheckKind::Concurrency));
    assert_eq!(refusal.metric_label(), "concurrency_limited");
    assert_eq!(refusal.retry_after, Some(Duration::from_secs(1)));
    // The refused admission's rate and tokens checks passed but took nothing.
    assert_eq!(refusal.quotas[0].remaining, 9);
    assert_eq!(refusal.quotas[1].remaining, 700);
    let q = store.quotas(&checks()).await.unwrap();
    assert_eq!((q[0].remaining, q[1].remaining, q[2].used), (9, 700, 1));
    held.settle(Usage::default()).await.unwrap();
}

async fn tokens_are_reserved_then_reconciled_with_actual_usage(store: Store) {
    let a = admit(&store, vec![tokens("t", 800)]).await.unwrap();
    assert_eq!(a.quotas()[0].remaining, 200);
    a.settle(Usage {
        tokens: Some(100),
        spend_micros: 0,
    })
    .await
    .unwrap();
    assert_eq!(
        store.quotas(&[tokens("t", 0)]).await.unwrap()[0].remaining,
        900
    );
    // Used 1900 where 900 were reserved: charged the difference, past the burst.
    let a = admit(&store, vec![tokens("t", 900)]).await.unwrap();
    a.settle(Usage {
        tokens: Some(1900),
        spend_micros: 0,
    })
    .await
    .unwrap();
    let q = store.quotas(&[tokens("t", 0)]).await.unwrap()[0];
    assert_eq!((q.remaining, q.used), (0, 2000));
    let refusal = admit(&store, vec![tokens("t", 1)]).await.unwrap_err();
    assert_eq!(refusal.metric_label(), "tokens_limited");
    // 2001 tokens owed at 60 ms each, 1000 of them within the burst.
    let retry = refusal.retry_after.unwrap();
    assert!(
        near(retry, Duration::from_millis(60_060), Duration::from_secs(1)),
        "{retry:?}"
    );
}

async fn a_reservation_above_the_limit_never_passes(store: Store) {
    let refusal = admit(&store, vec![tokens("big", 1001)]).await.unwrap_err();
    assert_eq!(refusal.reason, RefusalReason::TooLarge);
    assert_eq!(refusal.retry_after, None);
    assert_eq!(refusal.metric_label(), "tokens_too_large");
    assert_eq!(refusal.quotas[0].remaining, 1000);
}

async fn concurrency_is_capped_and_freed_by_settle_and_by_drop(store: Store) {
    let check = || {
        vec![Check::Concurrency {
            key: key("c"),
            limit: 2,
        }]
    };
    let a1 = admit(&store, check()).await.unwrap();
    let a2 = admit(&store, check()).await.unwrap();
    assert_eq!(a2.quotas()[0].remaining, 0);
    assert!(admit(&store, check()).await.is_err());
    a1.settle(Usage::default()).await.unwrap();
    let a3 = admit(&store, check()).await.unwrap();
    assert!(admit(&store, check()).await.is_err());
    // A drop releases too (in the background with Redis).
    drop(a2);
    let deadline = Instant::now() + Duration::from_secs(3);
    let _a4 = loop {
        match admit(&store, check()).await {
            Ok(a) => break a,
            Err(r) if Instant::now() >= deadline => panic!("the dropped lease was kept: {r:?}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    drop(a3);
}

/// Waits until the current `period` window has at least `left` to run, so a test does not
/// straddle a period boundary.
async fn start_of_window(period: Duration, left: Duration) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = Duration::from_micros((now.as_micros() % period.as_micros()) as u64);
    if period - into < left {
        tokio::time::sleep(period - into + Duration::from_millis(20)).await;
    }
}

async fn budget_refuses_once_spent_until_its_period_ends(store: Store) {
    let period = Duration::from_secs(2);
    let budget = || {
        vec![Check::Budget {
            key: key("b"),
            limit_micros: 1000,
            period,
        }]
    };
    start_of_window(period, Duration::from_millis(1500)).await;
    for _ in 0..2 {
        let a = admit(&store, budget()).await.unwrap();
        a.settle(Usage {
            tokens: None,
            spend_micros: 600,
        })
        .await
        .unwrap();
    }
    assert_eq!(store.spend(&key("b"), period).await.unwrap(), 1200);
    let refusal = admit(&store, budget()).await.unwrap_err();
    assert_eq!(refusal.reason, RefusalReason::BudgetExceeded);
    assert_eq!(refusal.metric_label(), "budget_exceeded");
    let q = refusal.quota().unwrap();
    assert_eq!((q.limit, q.remaining, q.used), (1000, 0, 1200));
    let retry = refusal.retry_after.unwrap();
    assert!(retry <= period && retry == q.reset_after, "{retry:?}");
    tokio::time::sleep(retry + Duration::from_millis(50)).await;
    let a = admit(&store, budget()).await.unwrap();
    assert_eq!(a.quotas()[0].remaining, 1000);
    assert_eq!(store.spend(&key("b"), period).await.unwrap(), 0);
}

/// Many requests ending at once: their detached settles (queued, and sent to Redis as one
/// script call per batch) all land: every lease freed, every reservation reconciled, every
/// spend added, a key named by many of them included.
async fn detached_settles_queued_together_are_all_applied(store: Store) {
    let period = Duration::from_secs(3600);
    start_of_window(period, Duration::from_secs(30)).await;
    let checks = || {
        vec![
            Check::Tokens {
                key: key("d"),
                limit: 100_000,
                // Long enough that the counts do not drain while the test runs.
                period: Duration::from_secs(30 * 86_400),
                reserve: 100,
            },
            Check::Concurrency {
                key: key("d"),
                limit: 40,
            },
            Check::Budget {
                key: key("d"),
                limit_micros: 1_000_000,
                period,
            },
        ]
    };
    let mut held = Vec::new();
    for _ in 0..40 {
        held.push(admit(&store, checks()).await.unwrap());
    }
    let q = store.quotas(&checks()).await.unwrap();
    assert_eq!((q[0].used, q[1].used), (4000, 40));
    let trips_before = store.stats().round_trips;
    for a in held {
        a.settle_detached(Usage {
            tokens: Some(10),
            spend_micros: 7,
        });
    }
    let reads = std::sync::atomic::AtomicU64::new(0);
    let settled = eventually(Duration::from_secs(5), || async {
        reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let q = store.quotas(&checks()).await.unwrap();
        q[1].used == 0 && q[0].used == 400
    })
    .await;
    // (Memory makes no round trips: 0.)
    let settle_trips = (store.stats().round_trips - trips_before)
        .saturating_sub(reads.load(std::sync::atomic::Ordering::Relaxed));
    let q = store.quotas(&checks()).await.unwrap();
    assert!(
        settled,
        "tokens used {} (want 400), leases held {} (want 0)",
        q[0].used, q[1].used
    );
    assert_eq!(store.spend(&key("d"), period).await.unwrap(), 280);
    // With Redis, the settles queued together went in fewer calls than one each.
    let shared = store.stats().round_trips > 0;
    println!("40 detached settles: {settle_trips} round trips");
    assert!(!shared || settle_trips < 40, "{settle_trips} round trips");
}

async fn quotas_are_read_without_taking_anything(store: Store) {
    let check = || {
        vec![
            rate("q", 10, Duration::from_secs(60)),
            Check::Concurrency {
                key: key("q"),
                limit: 4,
            },
        ]
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(admit(&store, check()).await.unwrap());
    }
    for _ in 0..2 {
        let q = store.quotas(&check()).await.unwrap();
        assert_eq!((q[0].remaining, q[0].used), (7, 3));
        assert_eq!((q[1].remaining, q[1].used), (1, 3));
    }
    // Unknown keys read as full.
    let q = store
        .quotas(&[rate("unknown", 10, Duration::from_secs(1))])
        .await
        .unwrap();
    assert_eq!(
        (q[0].remaining, q[0].used, q[0].reset_after),
        (10, 0, Duration::ZERO)
    );
}

fn response(body: &'static [u8]) -> sluice_state::StoredResponse {
    sluice_state::StoredResponse {
        status: StatusCode::OK,
        headers: vec![(
            HeaderName::from_static("content-type"),
            HeaderValue::from_static("application/json"),
        )],
        body: Bytes::from_static(body),
    }
}

const HASH_A: BodyHash = BodyHash([1; 32]);
const HASH_B: BodyHash = BodyHash([2; 32]);
const TTL: Duration = Duration::from_secs(60);

async fn idempotency_fresh_in_flight_done_and_mismatch(store: Store) {
    let Begin::Fresh(guard) = store
        .idempotency_begin("k42", "idem-1", HASH_A, TTL)
        .await
        .unwrap()
    else {
        panic!("first begin is fresh");
    };
    let again = store
        .idempotency_begin("k42", "idem-1", HASH_A, TTL)
        .await
        .unwrap();
    assert!(matches!(again, Begin::InFlight), "{again:?}");
    let other = store
        .idempotency_begin("k42", "idem-1", HASH_B, TTL)
        .await
        .unwrap();
    assert!(matches!(other, Begin::Mismatch));
    // Another scope is another record.
    assert!(matches!(
        store
            .idempotency_begin("k43", "idem-1", HASH_B, TTL)
            .await
            .unwrap(),
        Begin::Fresh(_)
    ));
    assert_eq!(
        guard.complete(response(b"{\"ok\":1}")).await.unwrap(),
        Completion::Stored
    );
    match store
        .idempotency_begin("k42", "idem-1", HASH_A, TTL)
        .await
        .unwrap()
    {
        Begin::Done(stored) => assert_eq!(stored, response(b"{\"ok\":1}")),
        other => panic!("expected a replay, got {other:?}"),
    }
    let other = store
        .idempotency_begin("k42", "idem-1", HASH_B, TTL)
        .await
        .unwrap();
    assert_eq!(other.metric_label(), "mismatch");
}

async fn a_dropped_idempotency_guard_releases_the_record(store: Store) {
    let Begin::Fresh(guard) = store
        .idempotency_begin("s", "drop", HASH_A, TTL)
        .await
        .unwrap()
    else {
        panic!("fresh");
    };
    drop(guard);
    assert!(
        eventually(Duration::from_secs(3), || {
            let store = store.clone();
            async move {
                matches!(
                    store
                        .idempotency_begin("s", "drop", HASH_A, TTL)
                        .await
                        .unwrap(),
                    Begin::Fresh(_)
                )
            }
        })
        .await
    );
    let Begin::Fresh(guard) = store
        .idempotency_begin("s", "release", HASH_A, TTL)
        .await
        .unwrap()
    else {
        panic!("fresh");
    };
    guard.release().await.unwrap();
    assert!(matches!(
        store
            .idempotency_begin("s", "release", HASH_A, TTL)
            .await
            .unwrap(),
        Begin::Fresh(_)
    ));
}

async fn a_response_above_the_byte_bound_is_not_stored(store: Store) {
    let Begin::Fresh(guard) = store
        .idempotency_begin("s", "big", HASH_A, TTL)
        .await
        .unwrap()
    else {
        panic!("fresh");
    };
    let mut big = response(b"");
    big.body = Bytes::from(vec![b'x'; IdempotencyConfig::default().max_response_bytes]);
    assert_eq!(guard.complete(big).await.unwrap(), Completion::TooLarge);
    // Released: a retry runs again.
    assert!(matches!(
        store
            .idempotency_begin("s", "big", HASH_A, TTL)
            .await
            .unwrap(),
        Begin::Fresh(_)
    ));
}

async fn a_duplicate_waits_for_the_first_within_its_deadline(store: Store) {
    let Begin::Fresh(guard) = store
        .idempotency_begin("s", "wait", HASH_A, TTL)
        .await
        .unwrap()
    else {
        panic!("fresh");
    };
    // The deadline passes while the first is in flight.
    let started = Instant::now();
    let deadline = started + Duration::from_millis(100);
    let waited = store
        .idempotency_wait("s", "wait", HASH_A, TTL, deadline)
        .await
        .unwrap();
    assert!(matches!(waited, Begin::InFlight));
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(started.elapsed() < Duration::from_secs(2));
    // The first completes while the duplicate waits.
    let first = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        guard.complete(response(b"done")).await.unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    let waited = store
        .idempotency_wait("s", "wait", HASH_A, TTL, deadline)
        .await
        .unwrap();
    assert!(
        matches!(waited, Begin::Done(ref r) if r.body == "done"),
        "{waited:?}"
    );
    assert_eq!(first.await.unwrap(), Completion::Stored);
}

async fn invalid_input_is_an_error_not_a_refusal(store: Store) {
    let err = store
        .admit(vec![rate("z", 0, Duration::from_secs(1))])
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::InvalidCheck(_)));
    assert!(!err.is_unavailable());
    let err = store
        .admit(vec![rate("z", 1, Duration::ZERO)])
        .await
        .unwrap_err();
    assert_eq!(err.metric_label(), "state_invalid_check");
    let long = "k".repeat(256);
    let err = store
        .idempotency_begin("s", &long, HASH_A, TTL)
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::InvalidIdempotencyKey));
    assert!(store.idempotency_begin("s", "", HASH_A, TTL).await.is_err());
}
