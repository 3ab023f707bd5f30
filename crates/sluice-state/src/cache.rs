//! The response cache: exact-match answers, in memory or in the store's Redis, with single
//! flight for identical requests in progress.
//!
//! Per request (the gateway's admission, then its relay):
//! 1. [`CacheDirectives::from_headers`]; with the route's [`CacheConfig`], a [`CacheKey`]
//!    (`sluice_providers::cache_key`);
//! 2. if the request allows a lookup: [`ResponseCache::get`] → [`Lookup::Hit`] (answer it,
//!    `x-sluice-cache: hit`, `Age`) or [`Lookup::Miss`];
//! 3. on a miss, [`ResponseCache::begin`] → [`Flight::Leader`] (go upstream; when the answer
//!    is a complete success, [`FlightGuard::complete`]; otherwise
//!    [`FlightGuard::uncacheable`] or drop it) or [`Flight::Follower`] ([`FlightWaiter::wait`]
//!    for the leader's answer);
//! 4. requests that skip the lookup (`no-cache`) but may store use [`ResponseCache::put`] or
//!    [`ResponseCache::put_detached`].
//!
//! Nothing here fails a request: a store that is slow or down is a miss within the store's
//! call deadline, a store that cannot be made is counted. Only the admin calls
//! ([`ResponseCache::purge`], [`ResponseCache::count`]) return errors.
//!
//! Modules: `entry.rs` (what is kept, its key, its Redis form), `memory.rs` (the LRU),
//! `redis.rs` (the Redis side and its store queue), `flight.rs` (single flight),
//! `directives.rs` (request and response headers), `config.rs`.

mod config;
mod directives;
mod entry;
mod flight;
mod memory;
mod redis;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use config::{CacheConfig, CacheStoreConfig, PutPolicy, Replay, MAX_CACHED_RESPONSE_BYTES};
pub use directives::{
    age_header_value, CacheDirectives, CacheStatus, InvalidCacheTtl, CACHE_STATUS_HEADER,
    CACHE_TTL_HEADER,
};
pub use entry::{CacheKey, CachedBody, CachedEvent, CachedResponse, CachedUsage};
pub use flight::{FlightWaiter, Waited};

use self::flight::{FlightEnd, FlightState, Flights, Joined};
use self::memory::{Found, MemoryCache, Stored};
use self::redis::{Fetched, PutJob, RedisCache};
use crate::{ConfigError, StateError, Store};

/// Which cached answers an admin call means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheScope {
    /// Every answer a route stored.
    Route(Arc<str>),
    /// Every answer of a namespace: a virtual key's, or a sharing route's.
    Namespace(Arc<str>),
}

impl CacheScope {
    pub(crate) fn matches(&self, route: &str, namespace: &str) -> bool {
        match self {
            CacheScope::Route(r) => **r == *route,
            CacheScope::Namespace(n) => **n == *namespace,
        }
    }
}

/// What [`ResponseCache::get`] found.
#[derive(Clone, Debug)]
pub enum Lookup {
    /// A stored answer, and how long ago it was stored (the `Age` header).
    Hit(Arc<CachedResponse>, Duration),
    /// Nothing usable: not stored, expired, stored by another route or namespace, or the
    /// shared store failed or is down (counted in [`CacheStats::errors`]).
    Miss,
}

/// What a store did. Never an error: a store that fails is a miss later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// Stored (in memory, or Redis answered).
    Stored,
    /// Queued for Redis (the detached and flight stores); counted as stored when it lands.
    Queued,
    /// Larger than the route's `max_bytes` (or the whole memory bound): not stored.
    TooLarge,
    /// Not a 200, a TTL of zero, or a route or namespace name over 65,535 bytes: not stored.
    NotCacheable,
    /// Redis failed or is down.
    Unavailable,
    /// The queue to Redis was full (in items or bytes).
    Dropped,
}

impl PutOutcome {
    /// `stored`, `queued`, `too_large`, `not_cacheable`, `unavailable`, `dropped`.
    pub fn metric_label(self) -> &'static str {
        match self {
            PutOutcome::Stored => "stored",
            PutOutcome::Queued => "queued",
            PutOutcome::TooLarge => "too_large",
            PutOutcome::NotCacheable => "not_cacheable",
            PutOutcome::Unavailable => "unavailable",
            PutOutcome::Dropped => "dropped",
        }
    }
}

/// The cache's counters at one moment (since it was built), for metrics and `/admin/cache`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// True with Redis: entries are shared, and counted per scope only
    /// ([`ResponseCache::count`]).
    pub shared: bool,
    /// In memory: entries held (expired ones not yet dropped included). `None` with Redis.
    pub entries: Option<u64>,
    /// In memory: bytes held, bookkeeping included. `None` with Redis.
    pub bytes: Option<u64>,
    /// Lookups that found an answer.
    pub hits: u64,
    /// Lookups that did not (failures of the shared store included).
    pub misses: u64,
    /// Answers stored.
    pub stores: u64,
    /// Answers over `max_bytes`, not stored.
    pub refused_too_large: u64,
    /// Answers that may not be stored (not a 200, a TTL of zero), refused.
    pub refused_not_cacheable: u64,
    /// In memory: entries dropped to make room.
    pub evictions: u64,
    /// In memory: entries found expired.
    pub expired: u64,
    /// Entries removed by purges.
    pub purged: u64,
    /// Calls to Redis that failed or answered something unreadable (each a miss or a lost
    /// store; the store's own counters say why).
    pub errors: u64,
    /// Stores dropped because the queue to Redis was full.
    pub puts_dropped: u64,
    /// Flights led (misses that went upstream with others able to wait for them).
    pub leaders: u64,
    /// Requests that waited for an identical one in flight.
    pub followers: u64,
    /// Followers answered with their leader's answer.
    pub followers_served: u64,
}

impl CacheStats {
    /// Hits over lookups, 0 without lookups.
    pub fn hit_rate(&self) -> f64 {
        let lookups = self.hits + self.misses;
        if lookups == 0 {
            0.0
        } else {
            self.hits as f64 / lookups as f64
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct CacheCounters {
    hits: AtomicU64,
    misses: AtomicU64,
    stores: AtomicU64,
    refused_too_large: AtomicU64,
    refused_not_cacheable: AtomicU64,
    evictions: AtomicU64,
    expired: AtomicU64,
    purged: AtomicU64,
    errors: AtomicU64,
    puts_dropped: AtomicU64,
    leaders: AtomicU64,
    followers: AtomicU64,
    followers_served: Arc<AtomicU64>,
}

impl CacheCounters {
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
enum Backend {
    Memory(MemoryCache),
    Redis(RedisCache),
}

#[derive(Debug)]
struct Inner {
    backend: Backend,
    flights: Arc<Flights>,
    counters: Arc<CacheCounters>,
    max_queued_bytes: usize,
}

/// Exact-match answers, in memory or in the store's Redis. Cheap to clone (one `Arc`).
#[derive(Clone, Debug)]
pub struct ResponseCache {
    inner: Arc<Inner>,
}

// === impl ResponseCache ===

impl ResponseCache {
    /// A cache in this process's memory, bounded by `config`'s entries and bytes. Needs no
    /// runtime.
    ///
    /// # Errors
    /// The configuration is invalid ([`CacheStoreConfig::validate`]).
    pub fn in_memory(config: &CacheStoreConfig) -> Result<ResponseCache, ConfigError> {
        config.validate()?;
        Ok(Self::build(
            Backend::Memory(MemoryCache::new(config.max_entries, config.max_bytes)),
            Arc::default(),
            config,
        ))
    }

    /// The cache of `store`: in Redis when the store is (sharing its connection, call
    /// deadline and down detection, and starting one task that runs stores to Redis), else
    /// in memory.
    ///
    /// Must be called inside a tokio runtime when the store is in Redis.
    ///
    /// # Errors
    /// The configuration is invalid ([`CacheStoreConfig::validate`]).
    pub fn new(store: &Store, config: &CacheStoreConfig) -> Result<ResponseCache, ConfigError> {
        config.validate()?;
        let Some(shared) = store.shared_backend() else {
            return Self::in_memory(config);
        };
        let counters = Arc::<CacheCounters>::default();
        let backend = Backend::Redis(RedisCache::new(
            store.clone(),
            shared,
            config.put_queue,
            counters.clone(),
        ));
        Ok(Self::build(backend, counters, config))
    }

    fn build(backend: Backend, counters: Arc<CacheCounters>, config: &CacheStoreConfig) -> Self {
        ResponseCache {
            inner: Arc::new(Inner {
                backend,
                flights: Arc::default(),
                counters,
                max_queued_bytes: config.max_queued_bytes,
            }),
        }
    }

    /// Looks `key` up. In memory it never waits; with Redis it is one round trip within the
    /// store's call deadline, and no wait at all while Redis is marked down.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn get(&self, key: &CacheKey) -> Lookup {
        let counters = &self.inner.counters;
        let found = match &self.inner.backend {
            Backend::Memory(memory) => match memory.get(key) {
                Found::Hit(entry, age) => Some((entry, age)),
                Found::Absent => None,
                Found::Expired => {
                    CacheCounters::add(&counters.expired);
                    None
                }
            },
            // Boxed: the Redis call's future is large, and unboxed it would sit in every
            // caller's future, the in-memory ones too.
            Backend::Redis(redis) => match Box::pin(redis.get(key)).await {
                Ok(Fetched::Hit(entry, age)) => Some((entry, age)),
                Ok(Fetched::Absent) => None,
                Err(e) => {
                    CacheCounters::add(&counters.errors);
                    tracing::debug!(cause = e.metric_label(), "cache lookup failed; a miss");
                    None
                }
            },
        };
        match found {
            Some((entry, age)) => {
                CacheCounters::add(&counters.hits);
                Lookup::Hit(entry, age)
            }
            None => {
                CacheCounters::add(&counters.misses);
                Lookup::Miss
            }
        }
    }

    /// Checks an answer against `policy` and prepares it for storing.
    fn admit(&self, key: &CacheKey, entry: CachedResponse, policy: PutPolicy) -> Admitted {
        let counters = &self.inner.counters;
        if entry.status != http::StatusCode::OK
            || policy.ttl.is_zero()
            || key.route.len() > usize::from(u16::MAX)
            || key.namespace.len() > usize::from(u16::MAX)
        {
            CacheCounters::add(&counters.refused_not_cacheable);
            return Admitted::Refused(PutOutcome::NotCacheable, None);
        }
        let entry = Arc::new(entry.compact());
        if entry.stored_len() > policy.max_bytes {
            CacheCounters::add(&counters.refused_too_large);
            return Admitted::Refused(PutOutcome::TooLarge, Some(entry));
        }
        Admitted::Ok(entry)
    }

    /// Stores in memory now, or queues for Redis with `end` (which ends a flight once done).
    fn store(
        &self,
        key: &CacheKey,
        entry: &Arc<CachedResponse>,
        ttl: Duration,
        end: Option<FlightEnd>,
    ) -> PutOutcome {
        let counters = &self.inner.counters;
        match &self.inner.backend {
            Backend::Memory(memory) => self.store_in_memory(memory, key, entry.clone(), ttl),
            Backend::Redis(redis) => {
                let envelope = entry::encode(key, entry, ttl);
                let len = envelope.len();
                let queued = redis.queued_bytes.fetch_add(len, Ordering::Relaxed);
                if queued + len > self.inner.max_queued_bytes {
                    redis.queued_bytes.fetch_sub(len, Ordering::Relaxed);
                    CacheCounters::add(&counters.puts_dropped);
                    return PutOutcome::Dropped;
                }
                let job = PutJob {
                    key: key.clone(),
                    envelope,
                    ttl,
                    end,
                };
                match redis.jobs.try_send(job) {
                    Ok(()) => PutOutcome::Queued,
                    Err(_) => {
                        redis.queued_bytes.fetch_sub(len, Ordering::Relaxed);
                        CacheCounters::add(&counters.puts_dropped);
                        PutOutcome::Dropped
                    }
                }
            }
        }
    }

    fn store_in_memory(
        &self,
        memory: &MemoryCache,
        key: &CacheKey,
        entry: Arc<CachedResponse>,
        ttl: Duration,
    ) -> PutOutcome {
        let counters = &self.inner.counters;
        match memory.put(key, entry, ttl) {
            Stored::Stored { evicted } => {
                CacheCounters::add(&counters.stores);
                counters.evictions.fetch_add(evicted, Ordering::Relaxed);
                PutOutcome::Stored
            }
            Stored::TooLarge => {
                CacheCounters::add(&counters.refused_too_large);
                PutOutcome::TooLarge
            }
        }
    }

    /// Stores a complete success (DESIGN.md invariant 14: the caller stores only a
    /// non-streaming 200 or a stream that ended with its terminal event and a finish reason,
    /// never an error, a cut or cancelled stream or a content-filtered answer; this refuses
    /// any status but 200). In memory at once; with Redis one round trip (within
    /// `max(call_timeout, 250ms)`: it is off the request path).
    ///
    /// # Cancel safety
    /// If dropped before it finishes, the answer may or may not be stored.
    pub async fn put(
        &self,
        key: &CacheKey,
        entry: CachedResponse,
        policy: PutPolicy,
    ) -> PutOutcome {
        let entry = match self.admit(key, entry, policy) {
            Admitted::Ok(entry) => entry,
            Admitted::Refused(outcome, _) => return outcome,
        };
        match &self.inner.backend {
            Backend::Memory(memory) => self.store_in_memory(memory, key, entry, policy.ttl),
            Backend::Redis(redis) => {
                let envelope = entry::encode(key, &entry, policy.ttl);
                match Box::pin(redis.put(key, &envelope, policy.ttl)).await {
                    Ok(()) => {
                        CacheCounters::add(&self.inner.counters.stores);
                        PutOutcome::Stored
                    }
                    Err(e) => {
                        CacheCounters::add(&self.inner.counters.errors);
                        tracing::debug!(cause = e.metric_label(), "cache store failed");
                        PutOutcome::Unavailable
                    }
                }
            }
        }
    }

    /// [`ResponseCache::put`] without waiting, for synchronous code (a body's `poll_frame`
    /// or `Drop`): in memory at once, else queued for the cache's task (bounded in items and
    /// bytes; when full it is dropped and counted). Never blocks.
    pub fn put_detached(
        &self,
        key: &CacheKey,
        entry: CachedResponse,
        policy: PutPolicy,
    ) -> PutOutcome {
        match self.admit(key, entry, policy) {
            Admitted::Ok(entry) => self.store(key, &entry, policy.ttl, None),
            Admitted::Refused(outcome, _) => outcome,
        }
    }

    /// Joins the flight of `key`: the first caller leads (goes upstream and ends the flight
    /// with its answer), callers arriving while it is in progress follow (wait for that
    /// answer). Per instance, in memory, never waits. Call it after a [`Lookup::Miss`], and
    /// only for requests that may use a stored answer (not `no-cache`).
    pub fn begin(&self, key: &CacheKey) -> Flight {
        let counters = &self.inner.counters;
        match self.inner.flights.join(key.digest) {
            Joined::Leader(id, tx) => {
                CacheCounters::add(&counters.leaders);
                Flight::Leader(FlightGuard {
                    cache: self.clone(),
                    key: key.clone(),
                    id,
                    tx,
                    finished: false,
                })
            }
            Joined::Follower(rx) => {
                CacheCounters::add(&counters.followers);
                Flight::Follower(FlightWaiter {
                    rx,
                    served: counters.followers_served.clone(),
                })
            }
        }
    }

    /// Removes every answer of `scope`; returns how many live ones went (with Redis, how many
    /// entries its index named that still existed). An admin call: Redis calls wait up to
    /// `max(call_timeout, 250ms)` each, a batch of 256 entries per call.
    ///
    /// # Errors
    /// Redis failed or is down; what was removed until then stays removed.
    pub async fn purge(&self, scope: &CacheScope) -> Result<u64, StateError> {
        let purged = match &self.inner.backend {
            Backend::Memory(memory) => memory.purge(scope),
            Backend::Redis(redis) => redis.purge(scope).await?,
        };
        self.inner
            .counters
            .purged
            .fetch_add(purged, Ordering::Relaxed);
        Ok(purged)
    }

    /// Live answers of `scope` (for `/admin/cache`). In memory a walk of every entry; with
    /// Redis one call.
    ///
    /// # Errors
    /// Redis failed or is down.
    pub async fn count(&self, scope: &CacheScope) -> Result<u64, StateError> {
        match &self.inner.backend {
            Backend::Memory(memory) => Ok(memory.count(scope)),
            Backend::Redis(redis) => redis.count(scope).await,
        }
    }

    /// The counters, for metrics and `/admin/cache`.
    pub fn stats(&self) -> CacheStats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (shared, entries, bytes) = match &self.inner.backend {
            Backend::Memory(memory) => {
                let (entries, bytes) = memory.size();
                (false, Some(entries), Some(bytes))
            }
            Backend::Redis(_) => (true, None, None),
        };
        CacheStats {
            shared,
            entries,
            bytes,
            hits: get(&c.hits),
            misses: get(&c.misses),
            stores: get(&c.stores),
            refused_too_large: get(&c.refused_too_large),
            refused_not_cacheable: get(&c.refused_not_cacheable),
            evictions: get(&c.evictions),
            expired: get(&c.expired),
            purged: get(&c.purged),
            errors: get(&c.errors),
            puts_dropped: get(&c.puts_dropped),
            leaders: get(&c.leaders),
            followers: get(&c.followers),
            followers_served: get(&c.followers_served),
        }
    }

    /// Stores to Redis waiting in the queue, in bytes (0 in memory).
    pub fn queued_bytes(&self) -> usize {
        match &self.inner.backend {
            Backend::Memory(_) => 0,
            Backend::Redis(redis) => redis.queued_bytes.load(Ordering::Relaxed),
        }
    }
}

enum Admitted {
    Ok(Arc<CachedResponse>),
    /// Not stored; the answer itself, if it is one a follower may still be given.
    Refused(PutOutcome, Option<Arc<CachedResponse>>),
}

// === impl FlightGuard ===

/// What [`ResponseCache::begin`] made of a request.
#[derive(Debug)]
pub enum Flight {
    /// No identical request is in flight: go upstream, and end the flight with the answer.
    Leader(FlightGuard),
    /// An identical request is upstream: wait for its answer.
    Follower(FlightWaiter),
}

/// The leader's hold on its flight. End it with [`FlightGuard::complete`] (a complete success)
/// or [`FlightGuard::uncacheable`] (an answer that must not be cached: followers go upstream);
/// dropping it (a cancel, a failure) wakes followers with [`Waited::Abandoned`].
#[derive(Debug)]
pub struct FlightGuard {
    cache: ResponseCache,
    key: CacheKey,
    id: u64,
    tx: watch::Sender<FlightState>,
    finished: bool,
}

impl FlightGuard {
    /// The key of the flight.
    pub fn key(&self) -> &CacheKey {
        &self.key
    }

    /// Stores the answer ([`ResponseCache::put_detached`]: at once in memory, queued for
    /// Redis) and hands it to the followers, who answer it as a hit. An answer over
    /// `max_bytes` is still handed to them (it is a complete success, only too large to
    /// keep); one that is not cacheable wakes them with [`Waited::Uncacheable`]. Never blocks.
    ///
    /// With Redis the flight stays open, answering newcomers at once, until the store lands.
    pub fn complete(mut self, entry: CachedResponse, policy: PutPolicy) -> PutOutcome {
        self.finished = true;
        let cache = self.cache.clone();
        // Dropped at the end (after followers are woken), unless the Redis store takes it to
        // end the flight when the answer is in Redis.
        let mut end = Some(FlightEnd {
            flights: cache.inner.flights.clone(),
            digest: self.key.digest,
            id: self.id,
        });
        let (outcome, state) = match cache.admit(&self.key, entry, policy) {
            Admitted::Ok(entry) => {
                let end = match cache.inner.backend {
                    Backend::Memory(_) => None,
                    Backend::Redis(_) => end.take(),
                };
                let outcome = cache.store(&self.key, &entry, policy.ttl, end);
                (outcome, FlightState::Filled(entry))
            }
            Admitted::Refused(outcome, Some(entry)) => (outcome, FlightState::Filled(entry)),
            Admitted::Refused(outcome, None) => (outcome, FlightState::Uncacheable),
        };
        self.tx.send_replace(state);
        drop(end);
        outcome
    }

    /// Ends the flight with an answer that must not be cached (an error, a cut stream, a
    /// content-filtered answer): followers go upstream themselves.
    pub fn uncacheable(mut self) {
        self.finished = true;
        self.tx.send_replace(FlightState::Uncacheable);
        self.cache.inner.flights.end(&self.key.digest, self.id);
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        if !self.finished {
            // Out of the table first, so followers that begin again make a new flight; the
            // sender drops after this, waking them.
            self.cache.inner.flights.end(&self.key.digest, self.id);
        }
    }
}

#[cfg(test)]
impl ResponseCache {
    /// Flights in the table (in progress, or filled and waiting for their Redis store).
    fn flights(&self) -> usize {
        self.inner.flights.len()
    }
}

#[cfg(test)]
mod tests;
