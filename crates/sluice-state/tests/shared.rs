//! Several stores sharing one real `redis-server`, as several gateway instances would: one
//! limit between them, leases of a crashed instance expiring, and Redis dying or stalling
//! mid-test without any call outliving its deadline.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use sluice_state::{
    Admission, Begin, BodyHash, Check, Decision, FailureMode, RedisConfig, StateError, Store,
    StoreMode, Usage,
};
use support::{eventually, redis_config, redis_store, RedisServer};
use tokio::time::Instant;

fn key(s: &str) -> Arc<str> {
    Arc::from(s)
}

async fn admit(store: &Store, checks: Vec<Check>) -> Option<Admission> {
    match store.admit(checks).await.expect("redis answers") {
        Decision::Admitted(a) => Some(a),
        Decision::Refused(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn two_stores_keep_one_rate_limit() {
    let redis = RedisServer::start().await;
    let a = redis_store(redis_config(&redis.url())).await;
    let b = redis_store(redis_config(&redis.url())).await;
    support::two_stores_keep_one_rate_limit(&a, &b, "k").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn two_stores_keep_one_concurrency_cap() {
    let redis = RedisServer::start().await;
    let a = redis_store(redis_config(&redis.url())).await;
    let b = redis_store(redis_config(&redis.url())).await;
    let check = || {
        vec![Check::Concurrency {
            key: key("c"),
            limit: 3,
        }]
    };
    let tries = (0..10).map(|i| {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        async move { admit(&store, check()).await }
    });
    let mut held: Vec<Admission> = join_all(tries).await.into_iter().flatten().collect();
    assert_eq!(held.len(), 3);
    assert!(admit(&a, check()).await.is_none());
    assert!(admit(&b, check()).await.is_none());
    // A slot released by one instance is free for the other.
    let first = held.remove(0);
    let released_by_a = first.is_shared();
    first.settle(Usage::default()).await.unwrap();
    assert!(released_by_a);
    held.push(admit(&b, check()).await.expect("slot freed"));
    assert!(admit(&a, check()).await.is_none());
    assert_eq!(a.quotas(&check()).await.unwrap()[0].used, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn an_idempotent_begin_from_two_stores_at_once_gives_one_fresh() {
    let redis = RedisServer::start().await;
    let a = redis_store(redis_config(&redis.url())).await;
    let b = redis_store(redis_config(&redis.url())).await;
    let hash = BodyHash([7; 32]);
    let ttl = Duration::from_secs(60);
    for i in 0..50 {
        let idem = format!("idem-{i}");
        let (x, y) = tokio::join!(
            a.idempotency_begin("k42", &idem, hash, ttl),
            b.idempotency_begin("k42", &idem, hash, ttl)
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        let fresh = [&x, &y]
            .iter()
            .filter(|r| matches!(r, Begin::Fresh(_)))
            .count();
        let in_flight = [&x, &y]
            .iter()
            .filter(|r| matches!(r, Begin::InFlight))
            .count();
        assert_eq!((fresh, in_flight), (1, 1), "{x:?} {y:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn a_crashed_stores_leases_expire_while_live_ones_are_renewed() {
    let redis = RedisServer::start().await;
    let ttl = Duration::from_millis(600);
    let config = RedisConfig {
        lease_ttl: ttl,
        ..redis_config(&redis.url())
    };
    let crashed = redis_store(config.clone()).await;
    let live = redis_store(config.clone()).await;
    let other = redis_store(config).await;
    let check = |k: &str| {
        vec![Check::Concurrency {
            key: key(k),
            limit: 1,
        }]
    };
    // The crashed instance never settles and stops renewing.
    let lost = admit(&crashed, check("crash")).await.expect("free slot");
    std::mem::forget(lost);
    drop(crashed);
    let held = admit(&live, check("live")).await.expect("free slot");

    let started = Instant::now();
    assert!(admit(&other, check("crash")).await.is_none());
    assert!(
        eventually(Duration::from_secs(5), || {
            let other = other.clone();
            async move {
                match admit(&other, check("crash")).await {
                    Some(a) => {
                        a.settle(Usage::default()).await.unwrap();
                        true
                    }
                    None => false,
                }
            }
        })
        .await,
        "the crashed store's lease never expired"
    );
    let freed_after = started.elapsed();
    assert!(
        freed_after >= ttl - Duration::from_millis(150),
        "{freed_after:?}"
    );

    // Three TTLs later the live store's lease still holds its slot: it was renewed.
    tokio::time::sleep((3 * ttl).saturating_sub(started.elapsed())).await;
    assert!(admit(&other, check("live")).await.is_none());
    assert!(live.stats().leases_renewed >= 2, "{:?}", live.stats());
    held.settle(Usage::default()).await.unwrap();
    assert!(admit(&other, check("live")).await.is_some());
}

/// A store that trips fast, for the failure tests.
fn fragile(url: &str, on_failure: FailureMode) -> RedisConfig {
    RedisConfig {
        call_timeout: Duration::from_millis(50),
        connect_timeout: Duration::from_millis(200),
        trip_after: 2,
        probe_interval: Duration::from_millis(100),
        on_failure,
        ..redis_config(url)
    }
}

/// Margin over the call deadline for a loaded, shared test machine.
const MARGIN: Duration = Duration::from_millis(250);

fn rate() -> Vec<Check> {
    vec![Check::Rate {
        key: key("down"),
        limit: 1_000_000,
        period: Duration::from_secs(60),
    }]
}

/// Calls `admit` `n` times; asserts none outlives the deadline; returns the results.
async fn admit_timed(
    store: &Store,
    config: &RedisConfig,
    n: usize,
) -> Vec<Result<Decision, StateError>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let started = Instant::now();
        let result = store.admit(rate()).await;
        let took = started.elapsed();
        assert!(took <= config.call_timeout + MARGIN, "a call took {took:?}");
        out.push(result);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn fail_open_falls_back_within_the_deadline_and_recovers() {
    let mut redis = RedisServer::start().await;
    let config = fragile(&redis.url(), FailureMode::FailOpen);
    let store = redis_store(config.clone()).await;
    assert!(matches!(store.admit(rate()).await, Ok(Decision::Admitted(a)) if a.is_shared()));
    let day = Duration::from_secs(86_400);
    let budget = || {
        vec![Check::Budget {
            key: key("spender"),
            limit_micros: 1_000_000,
            period: day,
        }]
    };
    let before_outage = admit(&store, budget()).await.expect("under budget");
    assert!(before_outage.is_shared());

    // Killed: connection errors at once.
    redis.kill();
    for result in admit_timed(&store, &config, 20).await {
        assert!(matches!(result, Ok(Decision::Admitted(_))), "{result:?}");
    }
    assert_eq!(store.mode(), StoreMode::Fallback);
    let stats = store.stats();
    assert!(stats.fallbacks >= 20 && stats.trips == 1, "{stats:?}");
    match store.admit(rate()).await.unwrap() {
        Decision::Admitted(a) => assert!(!a.is_shared()),
        Decision::Refused(r) => panic!("{r:?}"),
    }
    // Spend during the outage, from a shared admission and a fallback one, is owed.
    let spent = |micros| Usage {
        tokens: None,
        spend_micros: micros,
    };
    assert!(before_outage.settle(spent(300)).await.is_err());
    let during = admit(&store, budget()).await.expect("fallback admits");
    assert!(!during.is_shared());
    during.settle(spent(400)).await.unwrap();

    redis.restart().await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            store.mode() == StoreMode::Shared
        })
        .await,
        "never recovered: {:?}",
        store.stats()
    );
    assert_eq!(store.stats().recoveries, 1);
    assert!(matches!(store.admit(rate()).await, Ok(Decision::Admitted(a)) if a.is_shared()));
    // The restarted Redis lost everything, but the owed spend is paid into it.
    assert!(
        eventually(Duration::from_secs(5), || async {
            store.spend(&key("spender"), day).await.unwrap() == 700
        })
        .await,
        "owed spend not paid: {}",
        store.spend(&key("spender"), day).await.unwrap()
    );

    // Frozen (a slow Redis): calls time out at the deadline, then fall back at once.
    redis.freeze();
    let before = store.stats().timeouts;
    for result in admit_timed(&store, &config, 10).await {
        assert!(matches!(result, Ok(Decision::Admitted(_))), "{result:?}");
    }
    assert!(store.stats().timeouts > before);
    assert_eq!(store.mode(), StoreMode::Fallback);
    redis.thaw();
    assert!(
        eventually(Duration::from_secs(5), || async {
            store.mode() == StoreMode::Shared
        })
        .await
    );
    assert!(matches!(store.admit(rate()).await, Ok(Decision::Admitted(a)) if a.is_shared()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn fail_closed_refuses_within_the_deadline_and_recovers() {
    let mut redis = RedisServer::start().await;
    let config = fragile(&redis.url(), FailureMode::FailClosed);
    let store = redis_store(config.clone()).await;
    assert!(matches!(
        store.admit(rate()).await,
        Ok(Decision::Admitted(_))
    ));
    let hash = BodyHash([0; 32]);
    let ttl = Duration::from_secs(60);

    redis.kill();
    for result in admit_timed(&store, &config, 20).await {
        let err = result.expect_err("fail_closed refuses");
        assert!(err.is_unavailable(), "{err:?}");
    }
    assert_eq!(store.mode(), StoreMode::Unavailable);
    let err = store
        .idempotency_begin("s", "k", hash, ttl)
        .await
        .unwrap_err();
    assert_eq!(err.metric_label(), "state_unavailable");
    let stats = store.stats();
    assert!(
        stats.refused_unavailable >= 21 && stats.fallbacks == 0,
        "{stats:?}"
    );

    redis.restart().await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            store.mode() == StoreMode::Shared
        })
        .await
    );
    assert!(matches!(
        store.admit(rate()).await,
        Ok(Decision::Admitted(_))
    ));
    assert!(matches!(
        store.idempotency_begin("s", "k", hash, ttl).await,
        Ok(Begin::Fresh(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_at_startup_does_not_stop_the_store() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = fragile(&format!("redis://127.0.0.1:{port}/"), FailureMode::FailOpen);
    let started = Instant::now();
    let store = redis_store(config.clone()).await;
    assert!(started.elapsed() <= config.connect_timeout + MARGIN);
    assert_eq!(store.mode(), StoreMode::Fallback);
    for result in admit_timed(&store, &config, 5).await {
        assert!(matches!(result, Ok(Decision::Admitted(a)) if !a.is_shared()));
    }
}

/// A settle queued while Redis stalls for longer than a request's call deadline (but not for
/// long) still lands once: the batch waits for it, where a timed-out batch that ran anyway
/// would have its spend owed and then paid a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn a_settle_queued_through_a_short_stall_is_charged_once() {
    let redis = RedisServer::start().await;
    let config = RedisConfig {
        call_timeout: Duration::from_millis(20),
        trip_after: 100,
        probe_interval: Duration::from_millis(50),
        ..redis_config(&redis.url())
    };
    let store = redis_store(config).await;
    let period = Duration::from_secs(86_400);
    let budget = || {
        vec![Check::Budget {
            key: key("stall"),
            limit_micros: 1_000_000,
            period,
        }]
    };
    let a = admit(&store, budget()).await.expect("admitted");
    redis.freeze();
    a.settle_detached(Usage {
        tokens: None,
        spend_micros: 7,
    });
    // Longer than the call deadline, well within the batch's.
    tokio::time::sleep(Duration::from_millis(100)).await;
    redis.thaw();
    assert!(
        eventually(Duration::from_secs(3), || async {
            store.spend(&key("stall"), period).await.ok() == Some(7)
        })
        .await,
        "the spend never landed"
    );
    // Several probe intervals later (when owed spend would be paid), still once.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.spend(&key("stall"), period).await.unwrap(), 7);
    assert_eq!(store.stats().timeouts, 0);
}
