//! The cache in Redis, over the store's own connection, deadline and down detection: when
//! Redis is slow or down a lookup is a miss after at most the call deadline (at once while it
//! is marked down), never an error.
//!
//! Keys: `<prefix>:q:<digest hex>` holds an entry (the envelope of `entry.rs`, `SET ... PX`
//! the TTL); `<prefix>:qn:<namespace>` and `<prefix>:qr:<route>` index the entries of a
//! namespace and of a route, as sorted sets of entry keys scored by expiry.
//!
//! NOTE: indexes rather than `SCAN MATCH` for purges: a purge then costs the entries it
//! removes, not a walk of the whole keyspace (which holds every limit counter too) on every
//! node of a Cluster; each index is trimmed of expired members by every store and expires
//! with its last entry, so it stays as small as the live entries. We accept two costs: a store
//! writes the index entries too (in the same script on one server; one call per slot, sent at
//! once, with Cluster), and an index evicted under `maxmemory` before its entries lets those
//! entries outlive a purge until their TTL.
//!
//! Stores leave the request path: [`put_task`] runs them from a bounded queue (in items and
//! bytes), a batch at a time, so a relay finishing a stream in `poll_frame` or `Drop` never
//! waits for Redis.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::future::join_all;
use redis::Script;
use tokio::sync::mpsc;

use super::entry::{decode, CacheKey, CachedResponse};
use super::flight::FlightEnd;
use super::CacheCounters;
use crate::redis_backend::RedisBackend;
use crate::{CacheScope, StateError, Store};

/// Queued stores run at once.
const PUT_BATCH: usize = 32;
/// Entries deleted per call by a purge.
const PURGE_BATCH: usize = 256;
/// The least deadline of calls off the request path (stores, purges, counts): the same
/// floor as the store's batches of settles. A store that times out is work wasted, not a
/// request held.
const BACKGROUND_DEADLINE: Duration = Duration::from_millis(250);

/// A store waiting in the queue.
#[derive(Debug)]
pub(crate) struct PutJob {
    pub key: CacheKey,
    pub envelope: Vec<u8>,
    pub ttl: Duration,
    /// Ends the leader's flight once the entry is in Redis (followers arriving meanwhile are
    /// served from the flight).
    pub end: Option<FlightEnd>,
}

pub(crate) struct RedisCache {
    /// Held so the store's background task, which probes Redis back after an outage, runs as
    /// long as the cache does.
    _store: Store,
    pub shared: Arc<RedisBackend>,
    pub jobs: mpsc::Sender<PutJob>,
    /// Bytes of envelopes queued, bounded by `CacheStoreConfig::max_queued_bytes`.
    pub queued_bytes: Arc<AtomicUsize>,
    put: Arc<Script>,
    pop: Script,
    count: Script,
}

impl std::fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCache")
            .field("queued_bytes", &self.queued_bytes.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What a Redis lookup found.
pub(crate) enum Fetched {
    Hit(Arc<CachedResponse>, Duration),
    Absent,
}

/// The index of `scope`'s entries.
fn index(shared: &RedisBackend, scope: &CacheScope) -> String {
    match scope {
        CacheScope::Namespace(ns) => shared.keys().cache_namespace_index(ns),
        CacheScope::Route(route) => shared.keys().cache_route_index(route),
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

impl RedisCache {
    /// Builds the cache and starts its store task (ends when the cache is dropped).
    pub fn new(
        store: Store,
        shared: Arc<RedisBackend>,
        queue: usize,
        counters: Arc<CacheCounters>,
    ) -> RedisCache {
        let (jobs, rx) = mpsc::channel(queue);
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let put = Arc::new(Script::new(include_str!("../lua/cache_put.lua")));
        tokio::spawn(put_task(
            shared.clone(),
            put.clone(),
            rx,
            queued_bytes.clone(),
            counters,
        ));
        RedisCache {
            _store: store,
            shared,
            jobs,
            queued_bytes,
            put,
            pop: Script::new(include_str!("../lua/cache_pop.lua")),
            count: Script::new(include_str!("../lua/cache_count.lua")),
        }
    }

    fn background_deadline(&self) -> Duration {
        self.shared.config().call_timeout.max(BACKGROUND_DEADLINE)
    }

    /// One round trip (`GET` and `PTTL`, pipelined) under the call deadline.
    ///
    /// # Errors
    /// Redis failed, is down, or holds an envelope that does not decode.
    pub async fn get(&self, key: &CacheKey) -> Result<Fetched, StateError> {
        let name = self.shared.keys().cache_entry(&key.hex());
        let (value, pttl): (Option<Vec<u8>>, i64) = self
            .shared
            .call(|mut conn| async move {
                redis::pipe()
                    .cmd("GET")
                    .arg(&name)
                    .cmd("PTTL")
                    .arg(&name)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        let Some(value) = value else {
            return Ok(Fetched::Absent);
        };
        let decoded = decode(Bytes::from(value))?;
        if decoded.route != key.route.as_bytes() || decoded.namespace != key.namespace.as_bytes() {
            return Ok(Fetched::Absent);
        }
        // By Redis's clock (TTL set minus TTL left), so instances' clocks do not matter; the
        // wall clock only if the key lost its TTL.
        let age = if pttl >= 0 {
            decoded
                .ttl
                .saturating_sub(Duration::from_millis(pttl as u64))
        } else {
            SystemTime::now()
                .duration_since(decoded.entry.stored_at)
                .unwrap_or_default()
        };
        Ok(Fetched::Hit(Arc::new(decoded.entry), age))
    }

    /// Stores an envelope and indexes it, in one call (one per slot with Cluster).
    ///
    /// # Errors
    /// Redis failed or is down (the entry may then be stored without its index entries).
    pub async fn put(
        &self,
        key: &CacheKey,
        envelope: &[u8],
        ttl: Duration,
    ) -> Result<(), StateError> {
        put_envelope(
            &self.shared,
            &self.put,
            key,
            envelope,
            ttl,
            self.background_deadline(),
        )
        .await
    }

    /// Deletes every entry `scope`'s index names, a batch per call, then the index.
    ///
    /// # Errors
    /// Redis failed or is down; what was deleted until then stays deleted.
    pub async fn purge(&self, scope: &CacheScope) -> Result<u64, StateError> {
        let index = index(&self.shared, scope);
        let deadline = self.background_deadline();
        let total: u64 = {
            let index = index.clone();
            self.shared
                .call_for(deadline, |mut conn| async move {
                    redis::cmd("ZCARD").arg(&index).query_async(&mut conn).await
                })
                .await?
        };
        let mut purged = 0;
        // Bounded by the size at the start, so stores racing the purge cannot keep it going.
        for _ in 0..=total.div_ceil(PURGE_BATCH as u64) {
            // Off the index first, then deleted: a store racing in between leaves at worst an
            // index member naming nothing, never an entry its index forgot.
            let popped: Vec<String> = {
                let mut inv = self.pop.prepare_invoke();
                inv.key(&index).arg(PURGE_BATCH);
                self.shared
                    .call_for(deadline, |mut conn| async move {
                        inv.invoke_async(&mut conn).await
                    })
                    .await?
            };
            if popped.is_empty() {
                break;
            }
            let groups = self.shared.by_slot(popped, |k| k.as_str());
            let deletes = groups.into_iter().map(|keys| {
                self.shared.call_for(deadline, move |mut conn| async move {
                    redis::cmd("DEL")
                        .arg(&keys)
                        .query_async::<u64>(&mut conn)
                        .await
                })
            });
            for deleted in join_all(deletes).await {
                purged += deleted?;
            }
        }
        self.shared
            .call_for(deadline, |mut conn| async move {
                redis::cmd("DEL")
                    .arg(&index)
                    .query_async::<u64>(&mut conn)
                    .await
            })
            .await?;
        Ok(purged)
    }

    /// Live entries `scope`'s index names.
    ///
    /// # Errors
    /// Redis failed or is down.
    pub async fn count(&self, scope: &CacheScope) -> Result<u64, StateError> {
        let mut inv = self.count.prepare_invoke();
        inv.key(index(&self.shared, scope));
        self.shared
            .call_for(self.background_deadline(), |mut conn| async move {
                inv.invoke_async(&mut conn).await
            })
            .await
    }
}

async fn put_envelope(
    shared: &RedisBackend,
    script: &Script,
    key: &CacheKey,
    envelope: &[u8],
    ttl: Duration,
    deadline: Duration,
) -> Result<(), StateError> {
    let keys = shared.keys();
    let entry = keys.cache_entry(&key.hex());
    let names = vec![
        entry.clone(),
        keys.cache_namespace_index(&key.namespace),
        keys.cache_route_index(&key.route),
    ];
    let calls = shared
        .by_slot(names, |k| k.as_str())
        .into_iter()
        .map(|group| {
            let mut inv = script.prepare_invoke();
            let with_entry = group.first() == Some(&entry);
            for name in &group {
                inv.key(name);
            }
            inv.arg(if with_entry { "1" } else { "0" })
                .arg(millis(ttl))
                .arg(&entry);
            if with_entry {
                inv.arg(envelope);
            }
            shared.call_for(deadline, |mut conn| async move {
                inv.invoke_async::<i64>(&mut conn).await
            })
        });
    for result in join_all(calls).await {
        result?;
    }
    Ok(())
}

/// Runs queued stores, [`PUT_BATCH`] at once over the multiplexed connection, until the cache
/// is dropped (its queue closes), after running what was queued.
async fn put_task(
    shared: Arc<RedisBackend>,
    script: Arc<Script>,
    mut jobs: mpsc::Receiver<PutJob>,
    queued_bytes: Arc<AtomicUsize>,
    counters: Arc<CacheCounters>,
) {
    let deadline = shared.config().call_timeout.max(BACKGROUND_DEADLINE);
    let mut batch = Vec::with_capacity(PUT_BATCH);
    while jobs.recv_many(&mut batch, PUT_BATCH).await > 0 {
        let runs = batch.drain(..).map(|job| {
            let (shared, script, queued_bytes, counters) =
                (&shared, &script, &queued_bytes, &counters);
            async move {
                let PutJob {
                    key,
                    envelope,
                    ttl,
                    end,
                } = job;
                let result = put_envelope(shared, script, &key, &envelope, ttl, deadline).await;
                queued_bytes.fetch_sub(envelope.len(), Ordering::Relaxed);
                match result {
                    Ok(()) => CacheCounters::add(&counters.stores),
                    Err(e) => {
                        CacheCounters::add(&counters.errors);
                        tracing::debug!(cause = e.metric_label(), "cache store to redis failed");
                    }
                }
                // The flight ends once its answer is in Redis (or failed to get there).
                drop(end);
            }
        });
        join_all(runs).await;
    }
}
