//! Stores sharing a real Redis Cluster of three primaries: one limit between two stores with
//! counters spread over the nodes, every check of an admission in one slot (and an admission
//! that cannot be refused as a bug, not answered locally), and the batched work of the
//! background task (lease renewals, queued settles) split per slot.

mod support;

use std::sync::Arc;
use std::time::Duration;

use sluice_state::{
    Begin, BodyHash, Check, Decision, FailureMode, RedisConfig, StateError, Store, StoreMode, Usage,
};
use support::topology::RedisCluster;
use support::{eventually, redis_config, redis_store};

fn key(s: &str) -> Arc<str> {
    Arc::from(s)
}

/// Everything one request of virtual key `id` on `model` checks: its own limits and budget,
/// and the same on the key × model counter.
fn admission(id: &str, model: &str) -> Vec<Check> {
    let minute = Duration::from_secs(60);
    let mut checks = Vec::new();
    for name in [id.to_string(), format!("{id}/{model}")] {
        let name = key(&name);
        checks.extend([
            Check::Rate {
                key: name.clone(),
                limit: 100,
                period: minute,
            },
            Check::Tokens {
                key: name.clone(),
                limit: 10_000,
                period: minute,
                reserve: 1000,
            },
            Check::Concurrency {
                key: name.clone(),
                limit: 2,
            },
            Check::Budget {
                key: name,
                limit_micros: 1_000_000,
                period: Duration::from_secs(86_400),
            },
        ]);
    }
    checks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    any(no_redis, no_redis_cli),
    ignore = "no redis-server or redis-cli: install them (apt-get install redis-server redis-tools) or set REDIS_SERVER and REDIS_CLI"
)]
async fn two_stores_keep_one_rate_limit_on_a_cluster() {
    let cluster = RedisCluster::start().await;
    let a = redis_store(redis_config(&cluster.url())).await;
    let b = redis_store(redis_config(&cluster.url())).await;
    for name in ["k0", "k1", "k2", "k3"] {
        support::two_stores_keep_one_rate_limit(&a, &b, name).await;
    }
    // The counters of different keys live on different nodes.
    let counts = cluster.key_counts().await;
    assert_eq!(counts.iter().sum::<u64>(), 4, "{counts:?}");
    assert!(counts.iter().filter(|n| **n > 0).count() >= 2, "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    any(no_redis, no_redis_cli),
    ignore = "no redis-server or redis-cli: install them (apt-get install redis-server redis-tools) or set REDIS_SERVER and REDIS_CLI"
)]
async fn an_admission_is_one_slot_and_one_that_cannot_be_is_refused_as_a_bug() {
    let cluster = RedisCluster::start().await;
    // Failing open: a cross-slot admission must still not be answered from local memory.
    let config = RedisConfig {
        on_failure: FailureMode::FailOpen,
        ..redis_config(&cluster.url())
    };
    let store = redis_store(config.clone()).await;
    for id in ["k1", "k2", "k3", "{team-a}k4"] {
        let checks = admission(id, "gpt-4o");
        assert!(config.shares_slot(&checks));
        let held = match store.admit(checks.clone()).await.unwrap() {
            Decision::Admitted(a) => a,
            Decision::Refused(r) => panic!("{r:?}"),
        };
        assert!(held.is_shared());
        assert_eq!(held.quotas()[1].remaining, 9_000);
        held.settle(Usage {
            tokens: Some(300),
            spend_micros: 1_500,
        })
        .await
        .unwrap();
        let q = store.quotas(&checks).await.unwrap();
        // Rate 99 left, tokens 10,000 - 300 (less refill), no lease held, 1,500 spent.
        assert_eq!(q[0].remaining, 99);
        assert!((9_700..=9_710).contains(&q[1].remaining), "{q:?}");
        assert_eq!((q[2].used, q[3].used), (0, 1_500));
        assert_eq!((q[4].remaining, q[7].used), (99, 1_500));
    }
    // Two keys of one team share a slot, so a team budget can join their admissions.
    let mut team = admission("{team-a}k5", "m");
    team.push(Check::Budget {
        key: key("{team-a}"),
        limit_micros: 10,
        period: Duration::from_secs(60),
    });
    assert!(matches!(store.admit(team).await, Ok(Decision::Admitted(_))));

    let mut mixed = admission("k1", "m");
    mixed.extend(admission("k2", "m"));
    assert!(!config.shares_slot(&mixed));
    let err = store.admit(mixed.clone()).await.unwrap_err();
    assert!(matches!(err, StateError::InvalidCheck(_)), "{err:?}");
    assert_eq!(err.metric_label(), "state_invalid_check");
    assert!(store.quotas(&mixed).await.is_err());
    let stats = store.stats();
    assert_eq!((stats.fallbacks, stats.errors), (0, 0), "{stats:?}");
    assert_eq!(stats.mode, StoreMode::Shared);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    any(no_redis, no_redis_cli),
    ignore = "no redis-server or redis-cli: install them (apt-get install redis-server redis-tools) or set REDIS_SERVER and REDIS_CLI"
)]
async fn leases_renewals_and_queued_settles_span_slots() {
    let cluster = RedisCluster::start().await;
    let ttl = Duration::from_millis(600);
    let config = RedisConfig {
        lease_ttl: ttl,
        ..redis_config(&cluster.url())
    };
    let a = redis_store(config.clone()).await;
    let b = redis_store(config).await;
    let ids: Vec<String> = (0..24).map(|i| format!("lease{i}")).collect();
    let cap = |id: &str| {
        vec![Check::Concurrency {
            key: key(id),
            limit: 1,
        }]
    };
    let mut held = Vec::new();
    for id in &ids {
        match a.admit(cap(id)).await.unwrap() {
            Decision::Admitted(lease) => held.push(lease),
            Decision::Refused(r) => panic!("{r:?}"),
        }
    }
    // Three lease TTLs later every slot is still taken: a's renewals, batched across many
    // slots, reached every node.
    tokio::time::sleep(3 * ttl).await;
    for id in &ids {
        assert!(
            matches!(b.admit(cap(id)).await.unwrap(), Decision::Refused(_)),
            "{id}"
        );
    }
    let stats = a.stats();
    assert!(stats.leases_renewed >= 2 * ids.len() as u64, "{stats:?}");
    assert_eq!(stats.leases_lost, 0);

    // Settled from `Drop` paths, queued together: one batch over many slots, all applied.
    let day = Duration::from_secs(86_400);
    let budget = |id: &str| {
        vec![Check::Budget {
            key: key(id),
            limit_micros: 1_000_000,
            period: day,
        }]
    };
    for (lease, id) in held.into_iter().zip(&ids) {
        lease.settle_detached(Usage::default());
        match a.admit(budget(id)).await.unwrap() {
            Decision::Admitted(spend) => spend.settle_detached(Usage {
                tokens: None,
                spend_micros: 70,
            }),
            Decision::Refused(r) => panic!("{r:?}"),
        }
    }
    for id in &ids {
        let id = key(id);
        assert!(
            eventually(Duration::from_secs(5), || {
                let (b, id) = (b.clone(), id.clone());
                async move { b.spend(&id, day).await.unwrap() == 70 }
            })
            .await,
            "{id}: the spend never landed"
        );
        assert!(matches!(
            b.admit(cap(&id)).await.unwrap(),
            Decision::Admitted(_)
        ));
    }

    // Idempotency records: one fresh begin between the two stores.
    let hash = BodyHash([3; 32]);
    for i in 0..20 {
        let idem = format!("idem-{i}");
        let ttl = Duration::from_secs(60);
        let (x, y) = tokio::join!(
            a.idempotency_begin("k42", &idem, hash, ttl),
            b.idempotency_begin("k42", &idem, hash, ttl)
        );
        let fresh = [x.unwrap(), y.unwrap()]
            .iter()
            .filter(|r| matches!(r, Begin::Fresh(_)))
            .count();
        assert_eq!(fresh, 1);
    }
    assert_eq!(a.stats().errors + b.stats().errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_at_startup_does_not_stop_the_store() {
    let port = support::free_port();
    let config = RedisConfig {
        connect_timeout: Duration::from_millis(200),
        on_failure: FailureMode::FailClosed,
        ..redis_config(&format!("redis+cluster://127.0.0.1:{port}"))
    };
    let started = tokio::time::Instant::now();
    let store: Store = redis_store(config).await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(store.mode(), StoreMode::Unavailable);
    let err = store.admit(admission("k", "m")).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    any(no_redis, no_redis_cli),
    ignore = "no redis-server or redis-cli: install them (apt-get install redis-server redis-tools) or set REDIS_SERVER and REDIS_CLI"
)]
async fn cached_answers_spread_over_a_cluster_and_purge_across_slots() {
    use sluice_state::{
        CacheKey, CacheScope, CacheStoreConfig, CachedBody, CachedResponse, CachedUsage, Lookup,
        PutOutcome, PutPolicy, ResponseCache,
    };
    let cluster = RedisCluster::start().await;
    let config = CacheStoreConfig::default();
    let a = ResponseCache::new(&redis_store(redis_config(&cluster.url())).await, &config).unwrap();
    let b = ResponseCache::new(&redis_store(redis_config(&cluster.url())).await, &config).unwrap();
    let entry = || CachedResponse {
        status: http::StatusCode::OK,
        headers: Vec::new(),
        body: CachedBody::Whole(bytes::Bytes::from_static(b"{}")),
        usage: CachedUsage::default(),
        stored_at: std::time::SystemTime::now(),
    };
    let policy = PutPolicy {
        ttl: Duration::from_secs(600),
        max_bytes: 1024,
    };
    let cache_key = |n: u8, route: &str, ns: &str| CacheKey {
        digest: [n; 32],
        route: key(route),
        namespace: key(ns),
    };
    // Entries, their namespace indexes and their route indexes fall in different slots.
    for n in 0..30u8 {
        let k = cache_key(
            n,
            ["chat", "embed"][usize::from(n % 2)],
            &format!("key:k{}", n % 3),
        );
        assert_eq!(a.put(&k, entry(), policy).await, PutOutcome::Stored);
    }
    let counts = cluster.key_counts().await;
    assert_eq!(counts.iter().sum::<u64>(), 30 + 2 + 3, "{counts:?}");
    assert!(counts.iter().all(|n| *n > 0), "{counts:?}");
    assert!(matches!(
        b.get(&cache_key(4, "chat", "key:k1")).await,
        Lookup::Hit(..)
    ));
    let route = CacheScope::Route(key("chat"));
    assert_eq!(b.count(&route).await.unwrap(), 15);
    assert_eq!(b.purge(&route).await.unwrap(), 15);
    assert!(matches!(
        a.get(&cache_key(4, "chat", "key:k1")).await,
        Lookup::Miss
    ));
    let namespace = CacheScope::Namespace(key("key:k1"));
    // k1 holds 10 entries, 5 of them on "chat" and already gone.
    assert_eq!(a.purge(&namespace).await.unwrap(), 5);
    assert!(matches!(
        b.get(&cache_key(1, "embed", "key:k1")).await,
        Lookup::Miss
    ));
    assert!(matches!(
        b.get(&cache_key(3, "embed", "key:k0")).await,
        Lookup::Hit(..)
    ));
    assert_eq!(a.stats().errors + b.stats().errors, 0);
}
