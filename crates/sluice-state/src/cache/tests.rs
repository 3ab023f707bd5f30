//! The memory cache on a paused clock, and single flight.

use std::sync::atomic::AtomicUsize;
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::FutureExt;
use http::StatusCode;
use tokio::time::Instant;

use super::*;

fn key(digest: u8, route: &str, namespace: &str) -> CacheKey {
    CacheKey {
        digest: [digest; 32],
        route: Arc::from(route),
        namespace: Arc::from(namespace),
    }
}

fn answer(len: usize) -> CachedResponse {
    CachedResponse {
        status: StatusCode::OK,
        headers: Vec::new(),
        body: CachedBody::Whole(Bytes::from(vec![b'x'; len])),
        usage: CachedUsage {
            input: 10,
            output: 20,
            ..CachedUsage::default()
        },
        stored_at: SystemTime::now(),
    }
}

const HOUR: Duration = Duration::from_secs(3600);

fn policy(ttl: Duration) -> PutPolicy {
    PutPolicy {
        ttl,
        max_bytes: 1 << 20,
    }
}

fn memory(max_entries: usize, max_bytes: usize) -> ResponseCache {
    ResponseCache::in_memory(&CacheStoreConfig {
        max_entries,
        max_bytes,
        ..CacheStoreConfig::default()
    })
    .unwrap()
}

fn get(cache: &ResponseCache, key: &CacheKey) -> Option<(Arc<CachedResponse>, Duration)> {
    match cache.get(key).now_or_never().expect("memory never waits") {
        Lookup::Hit(entry, age) => Some((entry, age)),
        Lookup::Miss => None,
    }
}

fn put(cache: &ResponseCache, key: &CacheKey, len: usize) -> PutOutcome {
    cache
        .put(key, answer(len), policy(HOUR))
        .now_or_never()
        .expect("memory never waits")
}

#[tokio::test(start_paused = true)]
async fn the_least_recently_used_entry_goes_first_when_entries_are_bounded() {
    let cache = memory(3, usize::MAX >> 1);
    let [a, b, c, d] = [1, 2, 3, 4].map(|n| key(n, "chat", "key:k1"));
    for k in [&a, &b, &c] {
        assert_eq!(put(&cache, k, 10), PutOutcome::Stored);
    }
    assert!(get(&cache, &a).is_some()); // a is now the most recent; b the least
    assert_eq!(put(&cache, &d, 10), PutOutcome::Stored);
    assert!(get(&cache, &b).is_none());
    for k in [&a, &c, &d] {
        assert!(get(&cache, k).is_some());
    }
    // Storing a key again replaces it without evicting anything.
    assert_eq!(put(&cache, &a, 20), PutOutcome::Stored);
    let stats = cache.stats();
    assert_eq!((stats.entries, stats.evictions), (Some(3), 1));
    assert_eq!((stats.hits, stats.misses, stats.stores), (4, 1, 5));
}

#[tokio::test(start_paused = true)]
async fn bytes_are_bounded_too_and_an_oversized_answer_is_refused() {
    let one = answer(1000).footprint();
    let cache = memory(1000, 3 * one);
    let keys: Vec<CacheKey> = (1..=4).map(|n| key(n, "chat", "key:k1")).collect();
    for k in &keys[..3] {
        assert_eq!(put(&cache, k, 1000), PutOutcome::Stored);
    }
    assert_eq!(cache.stats().bytes, Some(3 * one as u64));
    // One more evicts the least recently used to stay within the bytes.
    assert_eq!(put(&cache, &keys[3], 1000), PutOutcome::Stored);
    assert!(get(&cache, &keys[0]).is_none());
    assert_eq!(cache.stats().bytes, Some(3 * one as u64));
    // Two entries' room taken by one larger answer.
    assert_eq!(put(&cache, &keys[0], 2 * 1000), PutOutcome::Stored);
    assert_eq!(cache.stats().entries, Some(2));
    // Larger than the whole bound: refused, nothing evicted.
    assert_eq!(put(&cache, &keys[1], 3 * one), PutOutcome::TooLarge);
    assert_eq!(cache.stats().entries, Some(2));
    // Larger than the route's bound.
    let small = PutPolicy {
        ttl: HOUR,
        max_bytes: 999,
    };
    let refused = cache.put(&keys[1], answer(1000), small).await;
    assert_eq!(refused, PutOutcome::TooLarge);
    assert_eq!(cache.stats().refused_too_large, 2);
}

#[tokio::test(start_paused = true)]
async fn entries_expire_with_their_ttl_and_say_their_age() {
    let cache = memory(10, 1 << 20);
    let k = key(1, "chat", "key:k1");
    let stored = cache
        .put(&k, answer(5), policy(Duration::from_secs(10)))
        .await;
    assert_eq!(stored, PutOutcome::Stored);
    tokio::time::advance(Duration::from_millis(9_500)).await;
    let (entry, age) = get(&cache, &k).expect("still fresh");
    assert_eq!(age, Duration::from_millis(9_500));
    assert_eq!(entry.usage.output, 20);
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(get(&cache, &k).is_none());
    let stats = cache.stats();
    assert_eq!((stats.expired, stats.entries), (1, Some(0)));
    // Expired entries at the tail make room on the next store without counting as evictions.
    let cache = memory(2, 1 << 20);
    let short = policy(Duration::from_secs(1));
    for n in [1, 2] {
        cache.put(&key(n, "chat", "key:k1"), answer(5), short).await;
    }
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(
        put(&cache, &key(3, "chat", "key:k1"), 5),
        PutOutcome::Stored
    );
    assert_eq!(
        (cache.stats().entries, cache.stats().evictions),
        (Some(1), 0)
    );
}

#[tokio::test]
async fn only_complete_successes_for_a_while_are_stored() {
    let cache = memory(10, 1 << 20);
    let k = key(1, "chat", "key:k1");
    for status in [
        StatusCode::BAD_REQUEST,
        StatusCode::TOO_MANY_REQUESTS,
        StatusCode::CREATED,
    ] {
        let entry = CachedResponse {
            status,
            ..answer(5)
        };
        assert_eq!(
            cache.put(&k, entry, policy(HOUR)).await,
            PutOutcome::NotCacheable
        );
    }
    assert_eq!(
        cache.put(&k, answer(5), policy(Duration::ZERO)).await,
        PutOutcome::NotCacheable
    );
    assert!(get(&cache, &k).is_none());
    assert_eq!(cache.stats().refused_not_cacheable, 4);
}

#[tokio::test]
async fn an_entry_answers_only_its_own_route_and_namespace() {
    let cache = memory(10, 1 << 20);
    put(&cache, &key(1, "chat", "key:k1"), 5);
    // The same digest (which a correct key never gives) under another namespace or route.
    assert!(get(&cache, &key(1, "chat", "key:k2")).is_none());
    assert!(get(&cache, &key(1, "other", "key:k1")).is_none());
    assert!(get(&cache, &key(1, "chat", "key:k1")).is_some());
}

#[tokio::test]
async fn purges_remove_a_route_or_a_namespace() {
    let cache = memory(100, 1 << 20);
    put(&cache, &key(1, "chat", "key:k1"), 5);
    put(&cache, &key(2, "chat", "key:k2"), 5);
    put(&cache, &key(3, "embed", "key:k1"), 5);
    put(&cache, &key(4, "embed", "route:embed"), 5);
    let route = |r: &str| CacheScope::Route(Arc::from(r));
    let ns = |n: &str| CacheScope::Namespace(Arc::from(n));
    assert_eq!(cache.count(&route("chat")).await.unwrap(), 2);
    assert_eq!(cache.count(&ns("key:k1")).await.unwrap(), 2);
    assert_eq!(cache.purge(&ns("key:k1")).await.unwrap(), 2);
    assert!(get(&cache, &key(1, "chat", "key:k1")).is_none());
    assert!(get(&cache, &key(2, "chat", "key:k2")).is_some());
    assert_eq!(cache.purge(&route("embed")).await.unwrap(), 1);
    assert_eq!(cache.stats().entries, Some(1));
    assert_eq!(cache.stats().purged, 3);
}

#[tokio::test]
async fn streams_are_kept_as_their_events() {
    let cache = memory(10, 1 << 20);
    let k = key(1, "chat", "key:k1");
    let events = vec![
        CachedEvent {
            bytes: Bytes::from_static(b"data: {\"x\":1}\n\n"),
            offset: Duration::from_millis(120),
        },
        CachedEvent {
            bytes: Bytes::from_static(b"data: [DONE]\n\n"),
            offset: Duration::from_millis(480),
        },
    ];
    let entry = CachedResponse {
        body: CachedBody::Events(events.clone()),
        ..answer(0)
    };
    assert_eq!(cache.put(&k, entry, policy(HOUR)).await, PutOutcome::Stored);
    let (hit, _) = get(&cache, &k).unwrap();
    assert!(hit.is_stream());
    assert_eq!(hit.body, CachedBody::Events(events));
}

// === single flight ===

/// 50 identical requests at once, each looking up, then joining the flight; the leader's
/// "upstream" takes 50 ms. Returns the upstream calls made and what each request answered.
async fn fifty_at_once(cache: &ResponseCache) -> (usize, Vec<Bytes>) {
    let upstream = Arc::new(AtomicUsize::new(0));
    let k = key(9, "chat", "key:k1");
    let requests = (0..50).map(|_| {
        let (cache, upstream, k) = (cache.clone(), upstream.clone(), k.clone());
        tokio::spawn(async move {
            loop {
                if let Lookup::Hit(entry, _) = cache.get(&k).await {
                    return entry;
                }
                match cache.begin(&k) {
                    Flight::Leader(guard) => {
                        upstream.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let entry = CachedResponse {
                            body: CachedBody::Whole(Bytes::from_static(b"{\"answer\":42}")),
                            ..answer(0)
                        };
                        guard.complete(entry.clone(), policy(HOUR));
                        return Arc::new(entry);
                    }
                    Flight::Follower(waiter) => {
                        let deadline = Instant::now() + Duration::from_secs(5);
                        match waiter.wait(deadline).await {
                            Waited::Filled(entry) => return entry,
                            Waited::Abandoned => continue,
                            other => panic!("follower got {other:?}"),
                        }
                    }
                }
            }
        })
    });
    let mut bodies = Vec::new();
    for r in futures_util::future::join_all(requests).await {
        let entry = r.unwrap();
        let CachedBody::Whole(body) = &entry.body else {
            panic!("a body")
        };
        bodies.push(body.clone());
    }
    (upstream.load(Ordering::SeqCst), bodies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_identical_requests_make_one_upstream_call() {
    let cache = memory(10, 1 << 20);
    let (calls, bodies) = fifty_at_once(&cache).await;
    assert_eq!(calls, 1);
    assert!(bodies.iter().all(|b| &b[..] == b"{\"answer\":42}"));
    let stats = cache.stats();
    assert_eq!(stats.leaders, 1);
    assert_eq!(stats.followers, stats.followers_served);
    assert_eq!(stats.followers + stats.hits, 49);
    assert_eq!(cache.flights(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_leader_releases_its_followers_and_the_next_one_leads() {
    let cache = memory(10, 1 << 20);
    let k = key(1, "chat", "key:k1");
    let Flight::Leader(guard) = cache.begin(&k) else {
        panic!("first leads")
    };
    let followers: Vec<FlightWaiter> = (0..3)
        .map(|_| match cache.begin(&k) {
            Flight::Follower(w) => w,
            Flight::Leader(_) => panic!("one leader"),
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let waits = tokio::spawn(futures_util::future::join_all(
        followers.into_iter().map(move |w| w.wait(deadline)),
    ));
    tokio::time::sleep(Duration::from_millis(5)).await;
    drop(guard); // cancelled
    let started = Instant::now();
    for waited in waits.await.unwrap() {
        assert!(matches!(waited, Waited::Abandoned), "{waited:?}");
    }
    assert!(started.elapsed() < Duration::from_millis(1));
    // The next to begin leads a new flight.
    assert!(matches!(cache.begin(&k), Flight::Leader(_)));
}

#[tokio::test(start_paused = true)]
async fn followers_of_an_uncacheable_answer_go_upstream_and_a_deadline_bounds_the_wait() {
    let cache = memory(10, 1 << 20);
    let k = key(1, "chat", "key:k1");
    let Flight::Leader(guard) = cache.begin(&k) else {
        panic!()
    };
    let Flight::Follower(late) = cache.begin(&k) else {
        panic!()
    };
    let Flight::Follower(patient) = cache.begin(&k) else {
        panic!()
    };
    // A follower whose deadline comes first goes upstream on its own.
    let started = Instant::now();
    let waited = late.wait(started + Duration::from_millis(200)).await;
    assert!(matches!(waited, Waited::TimedOut));
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    let patient = tokio::spawn(patient.wait(started + Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(1)).await;
    guard.uncacheable(); // e.g. a content-filtered answer
    assert!(matches!(patient.await.unwrap(), Waited::Uncacheable));
    // An error answer offered to `complete` is refused and wakes followers the same way.
    let Flight::Leader(guard) = cache.begin(&k) else {
        panic!()
    };
    let Flight::Follower(waiter) = cache.begin(&k) else {
        panic!()
    };
    let error = CachedResponse {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        ..answer(3)
    };
    assert_eq!(
        guard.complete(error, policy(HOUR)),
        PutOutcome::NotCacheable
    );
    assert!(matches!(
        waiter.wait(Instant::now()).await,
        Waited::Uncacheable
    ));
    assert!(get(&cache, &k).is_none());
    assert_eq!(cache.flights(), 0);
}

#[tokio::test]
async fn an_answer_too_large_to_keep_still_reaches_the_followers() {
    let cache = memory(10, 1 << 20);
    let k = key(1, "chat", "key:k1");
    let Flight::Leader(guard) = cache.begin(&k) else {
        panic!()
    };
    let Flight::Follower(waiter) = cache.begin(&k) else {
        panic!()
    };
    let small = PutPolicy {
        ttl: HOUR,
        max_bytes: 10,
    };
    assert_eq!(guard.complete(answer(100), small), PutOutcome::TooLarge);
    assert!(matches!(
        waiter.wait(Instant::now()).await,
        Waited::Filled(_)
    ));
    assert!(get(&cache, &k).is_none());
}

#[test]
fn the_handles_cross_threads() {
    fn is<T: Send + Sync>() {}
    is::<ResponseCache>();
    is::<FlightGuard>();
    is::<FlightWaiter>();
    is::<Lookup>();
}

/// The LRU against a plain model (a list in recency order) over many random operations: the
/// slab, links and index agree with it on every lookup, and the bound holds throughout.
#[tokio::test(start_paused = true)]
async fn the_lru_agrees_with_a_simple_model() {
    const CAP: usize = 5;
    let cache = memory(CAP, usize::MAX >> 1);
    let mut model: Vec<u8> = Vec::new(); // most recent last
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..5_000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let n = (seed % 12) as u8;
        let k = key(n, "chat", "key:k1");
        if seed & (1 << 40) == 0 {
            assert_eq!(put(&cache, &k, 1), PutOutcome::Stored);
            model.retain(|&m| m != n);
            if model.len() == CAP {
                model.remove(0);
            }
            model.push(n);
        } else {
            let hit = get(&cache, &k).is_some();
            assert_eq!(hit, model.contains(&n), "key {n}, model {model:?}");
            if hit {
                model.retain(|&m| m != n);
                model.push(n);
            }
        }
        assert_eq!(cache.stats().entries, Some(model.len() as u64));
    }
}
