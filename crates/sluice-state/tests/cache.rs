//! The response cache over a real `redis-server`: entries stored with their TTL and found by
//! another store (another gateway instance), purges by route and namespace, single flight
//! handing the leader's answer over while it is stored, and Redis dying or stalling without a
//! lookup outliving the call deadline or failing.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::StatusCode;
use sluice_state::{
    CacheKey, CacheScope, CacheStoreConfig, CachedBody, CachedEvent, CachedResponse, CachedUsage,
    FailureMode, Flight, Lookup, PutOutcome, PutPolicy, RedisConfig, ResponseCache, Store, Waited,
};
use support::{eventually, redis_config, redis_store, RedisServer};
use tokio::time::Instant;

fn key(digest: u8, route: &str, namespace: &str) -> CacheKey {
    CacheKey {
        digest: [digest; 32],
        route: Arc::from(route),
        namespace: Arc::from(namespace),
    }
}

fn answer(body: &'static [u8]) -> CachedResponse {
    CachedResponse {
        status: StatusCode::OK,
        headers: vec![(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        )],
        body: CachedBody::Whole(Bytes::from_static(body)),
        usage: CachedUsage {
            input: 100,
            output: 7,
            cached_input: 0,
            reasoning: 0,
        },
        stored_at: SystemTime::now(),
    }
}

fn policy(ttl: Duration) -> PutPolicy {
    PutPolicy {
        ttl,
        max_bytes: 1 << 20,
    }
}

const HOUR: Duration = Duration::from_secs(3600);

async fn cache_on(store: &Store) -> ResponseCache {
    ResponseCache::new(store, &CacheStoreConfig::default()).expect("valid config")
}

async fn hit(cache: &ResponseCache, key: &CacheKey) -> Option<(Arc<CachedResponse>, Duration)> {
    match cache.get(key).await {
        Lookup::Hit(entry, age) => Some((entry, age)),
        Lookup::Miss => None,
    }
}

async fn raw(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn entries_round_trip_through_redis_with_their_ttl() {
    let redis = RedisServer::start().await;
    let store = redis_store(redis_config(&redis.url())).await;
    let cache = cache_on(&store).await;
    assert!(cache.stats().shared);
    let k = key(1, "chat", "key:k1");
    assert!(hit(&cache, &k).await.is_none());
    assert_eq!(
        cache.put(&k, answer(b"{\"a\":1}"), policy(HOUR)).await,
        PutOutcome::Stored
    );
    let (entry, age) = hit(&cache, &k).await.expect("stored");
    assert_eq!(*entry, answer(b"{\"a\":1}").with_stored_at(entry.stored_at));
    assert!(age < Duration::from_secs(1), "{age:?}");

    // A stream keeps its events and their offsets.
    let stream = key(2, "chat", "key:k1");
    let events = vec![
        CachedEvent {
            bytes: Bytes::from_static(b"data: {\"delta\":\"Hi\"}\n\n"),
            offset: Duration::from_millis(35),
        },
        CachedEvent {
            bytes: Bytes::from_static(b"data: [DONE]\n\n"),
            offset: Duration::from_millis(910),
        },
    ];
    let streamed = CachedResponse {
        body: CachedBody::Events(events.clone()),
        ..answer(b"")
    };
    assert_eq!(
        cache.put(&stream, streamed, policy(HOUR)).await,
        PutOutcome::Stored
    );
    let (entry, _) = hit(&cache, &stream).await.expect("stored");
    assert_eq!(entry.body, CachedBody::Events(events));

    // Redis holds it with its TTL (SET PX), and its indexes live as long.
    let mut conn = raw(&redis).await;
    let name = format!("sluice:q:{}", k.hex());
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&name)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!((HOUR.as_millis() as i64 - 5_000..=HOUR.as_millis() as i64).contains(&pttl));
    for index in ["sluice:qn:key:k1", "sluice:qr:chat"] {
        let members: u64 = redis::cmd("ZCARD")
            .arg(index)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(members, 2, "{index}");
        let pttl: i64 = redis::cmd("PTTL")
            .arg(index)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(pttl > 0, "{index}");
    }

    // A short TTL expires.
    let short = key(3, "chat", "key:k1");
    let stored = cache
        .put(&short, answer(b"{}"), policy(Duration::from_millis(300)))
        .await;
    assert_eq!(stored, PutOutcome::Stored);
    assert!(hit(&cache, &short).await.is_some());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(hit(&cache, &short).await.is_none());

    // Age comes from Redis's clock.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (_, age) = hit(&cache, &k).await.unwrap();
    assert!(age >= Duration::from_secs(1), "{age:?}");

    let stats = cache.stats();
    assert_eq!((stats.stores, stats.errors), (3, 0));
    assert_eq!((stats.hits, stats.misses), (4, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn two_stores_on_one_redis_share_entries_and_purges() {
    let redis = RedisServer::start().await;
    let a = cache_on(&redis_store(redis_config(&redis.url())).await).await;
    let b = cache_on(&redis_store(redis_config(&redis.url())).await).await;
    let k1 = key(1, "chat", "key:k1");
    let k2 = key(2, "chat", "key:k2");
    let shared = key(3, "faq", "route:faq");
    for (k, body) in [(&k1, b"one".as_slice()), (&k2, b"two"), (&shared, b"faq")] {
        let entry = CachedResponse {
            body: CachedBody::Whole(Bytes::copy_from_slice(body)),
            ..answer(b"")
        };
        assert_eq!(a.put(k, entry, policy(HOUR)).await, PutOutcome::Stored);
    }
    let (entry, _) = hit(&b, &k1).await.expect("b sees a's entry");
    assert_eq!(entry.body, CachedBody::Whole(Bytes::from_static(b"one")));
    // The same digest asked for by another namespace or route is not answered.
    assert!(hit(&b, &key(1, "chat", "key:k2")).await.is_none());
    assert!(hit(&b, &key(1, "faq", "key:k1")).await.is_none());

    let ns = |n: &str| CacheScope::Namespace(Arc::from(n));
    let route = |r: &str| CacheScope::Route(Arc::from(r));
    assert_eq!(b.count(&route("chat")).await.unwrap(), 2);
    assert_eq!(b.count(&ns("key:k1")).await.unwrap(), 1);
    // One instance purges a key's namespace; the other no longer finds its entries.
    assert_eq!(b.purge(&ns("key:k1")).await.unwrap(), 1);
    assert!(hit(&a, &k1).await.is_none());
    assert!(hit(&a, &k2).await.is_some());
    assert_eq!(b.count(&ns("key:k1")).await.unwrap(), 0);
    // And a route.
    assert_eq!(a.purge(&route("chat")).await.unwrap(), 1);
    assert!(hit(&b, &k2).await.is_none());
    assert!(hit(&b, &shared).await.is_some());
    assert_eq!(a.count(&route("chat")).await.unwrap(), 0);
    // A large purge goes in batches.
    for n in 0..600u32 {
        let mut digest = [0u8; 32];
        digest[..4].copy_from_slice(&n.to_be_bytes());
        let k = CacheKey {
            digest,
            route: Arc::from("bulk"),
            namespace: Arc::from("key:k9"),
        };
        assert_eq!(
            a.put_detached(&k, answer(b"{}"), policy(HOUR)),
            PutOutcome::Queued
        );
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            a.stats().stores == 603
        })
        .await
    );
    assert_eq!(b.purge(&route("bulk")).await.unwrap(), 600);
    assert_eq!(a.queued_bytes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn fifty_identical_requests_make_one_upstream_call_and_the_answer_reaches_redis() {
    let redis = RedisServer::start().await;
    let a = cache_on(&redis_store(redis_config(&redis.url())).await).await;
    let b = cache_on(&redis_store(redis_config(&redis.url())).await).await;
    let upstream = Arc::new(AtomicUsize::new(0));
    let k = key(7, "chat", "key:k1");
    let requests = (0..50).map(|_| {
        let (cache, upstream, k) = (a.clone(), upstream.clone(), k.clone());
        tokio::spawn(async move {
            loop {
                if let Lookup::Hit(entry, _) = cache.get(&k).await {
                    return entry;
                }
                match cache.begin(&k) {
                    Flight::Leader(guard) => {
                        upstream.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let outcome = guard.complete(answer(b"{\"answer\":42}"), policy(HOUR));
                        assert_eq!(outcome, PutOutcome::Queued);
                        return Arc::new(answer(b"{\"answer\":42}"));
                    }
                    Flight::Follower(waiter) => {
                        match waiter.wait(Instant::now() + Duration::from_secs(5)).await {
                            Waited::Filled(entry) => return entry,
                            Waited::Abandoned => continue,
                            other => panic!("{other:?}"),
                        }
                    }
                }
            }
        })
    });
    for r in futures_util::future::join_all(requests).await {
        assert_eq!(
            r.unwrap().body,
            CachedBody::Whole(Bytes::from_static(b"{\"answer\":42}"))
        );
    }
    assert_eq!(upstream.load(Ordering::SeqCst), 1);
    // The other instance finds it once the queued store lands.
    assert!(
        eventually(Duration::from_secs(5), || async {
            hit(&b, &k).await.is_some()
        })
        .await
    );
    let stats = a.stats();
    assert_eq!((stats.leaders, stats.stores), (1, 1));
    assert_eq!(stats.followers_served + stats.hits, 49);
}

/// A cache over a Redis with a short call deadline, failing open (the default).
async fn fast_failing(redis: &RedisServer) -> (Store, ResponseCache) {
    let config = RedisConfig {
        call_timeout: Duration::from_millis(50),
        on_failure: FailureMode::FailOpen,
        probe_interval: Duration::from_millis(100),
        ..redis_config(&redis.url())
    };
    let store = redis_store(config).await;
    let cache = cache_on(&store).await;
    (store, cache)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn redis_killed_means_misses_within_the_deadline_and_back_when_it_is() {
    let mut redis = RedisServer::start().await;
    let (store, cache) = fast_failing(&redis).await;
    let k = key(1, "chat", "key:k1");
    assert_eq!(
        cache.put(&k, answer(b"{}"), policy(HOUR)).await,
        PutOutcome::Stored
    );
    assert!(hit(&cache, &k).await.is_some());
    redis.kill();
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let started = Instant::now();
        assert!(hit(&cache, &k).await.is_none());
        slowest = slowest.max(started.elapsed());
    }
    // The deadline, plus scheduling slack on a shared machine; once marked down, no wait.
    assert!(slowest < Duration::from_millis(150), "{slowest:?}");
    assert!(cache.stats().errors >= 1);
    assert_eq!(
        cache.put(&k, answer(b"{}"), policy(HOUR)).await,
        PutOutcome::Unavailable
    );
    let started = Instant::now();
    let detached = cache.put_detached(&k, answer(b"{}"), policy(HOUR));
    assert!(matches!(detached, PutOutcome::Queued | PutOutcome::Dropped));
    assert!(started.elapsed() < Duration::from_millis(5));
    // Single flight still works with Redis gone: it lives in memory.
    let Flight::Leader(guard) = cache.begin(&k) else {
        panic!("first leads")
    };
    let Flight::Follower(waiter) = cache.begin(&k) else {
        panic!("second follows")
    };
    guard.complete(answer(b"{\"x\":1}"), policy(HOUR));
    assert!(matches!(
        waiter.wait(Instant::now()).await,
        Waited::Filled(_)
    ));

    redis.restart().await;
    let back = eventually(Duration::from_secs(5), || async {
        cache.put(&k, answer(b"{}"), policy(HOUR)).await == PutOutcome::Stored
    })
    .await;
    assert!(back);
    assert!(hit(&cache, &k).await.is_some());
    assert!(store.stats().trips >= 1 && store.stats().recoveries >= 1);
    assert!(
        eventually(Duration::from_secs(5), || async {
            cache.queued_bytes() == 0
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn a_frozen_redis_costs_a_lookup_at_most_the_call_deadline() {
    let redis = RedisServer::start().await;
    let (_store, cache) = fast_failing(&redis).await;
    let k = key(1, "chat", "key:k1");
    assert_eq!(
        cache.put(&k, answer(b"{}"), policy(HOUR)).await,
        PutOutcome::Stored
    );
    redis.freeze();
    for _ in 0..5 {
        let started = Instant::now();
        assert!(hit(&cache, &k).await.is_none());
        let took = started.elapsed();
        assert!(took < Duration::from_millis(150), "{took:?}");
    }
    redis.thaw();
    let back = eventually(Duration::from_secs(5), || async {
        hit(&cache, &k).await.is_some()
    })
    .await;
    assert!(back);
}

trait WithStoredAt {
    fn with_stored_at(self, at: SystemTime) -> Self;
}

impl WithStoredAt for CachedResponse {
    /// The same answer stored at `at` (Redis keeps milliseconds).
    fn with_stored_at(self, at: SystemTime) -> Self {
        CachedResponse {
            stored_at: at,
            ..self
        }
    }
}
