//! State shared by the Sluice gateway's requests: rate, token, concurrency and budget limits,
//! idempotency records and the response cache; in this process's memory, or in Redis shared by
//! many instances.
//!
//! The gateway holds one [`Store`] and, per request:
//! 1. builds the request's [`Check`]s (per key, key × model, route) and calls
//!    [`Store::admit`]: one round trip, all-or-nothing, answering [`Decision::Admitted`] with
//!    the numbers for the `x-ratelimit-*` headers, or [`Decision::Refused`] with the refusing
//!    check and a retry-after (429);
//! 2. when the request ends, calls [`Admission::settle`] with the real [`Usage`] (tokens,
//!    spend), or lets the [`Admission`] drop (leases released, reservation kept);
//! 3. with an `Idempotency-Key`, calls [`Store::idempotency_begin`] (or
//!    [`Store::idempotency_wait`] for a non-streaming duplicate) before forwarding, and
//!    [`IdempotencyGuard::complete`] with the response;
//! 4. on a route with a cache, holds a [`ResponseCache`] beside the store (built from it, so
//!    it shares its Redis): [`ResponseCache::get`] before forwarding, [`ResponseCache::begin`]
//!    on a miss (single flight), [`FlightGuard::complete`] with a complete success.
//!
//! Modules, in the order a request meets them:
//!
//! ```text
//! cache.rs          the response cache (ResponseCache, Lookup, Flight) over cache/: entry.rs
//!                   (what is kept, its key, its Redis form), memory.rs (the LRU), redis.rs,
//!                   flight.rs (single flight), directives.rs (headers), config.rs
//! store.rs          the Store, and the handles it gives a request: Admission, IdempotencyGuard
//! check.rs          what a request asks (Check) and is told (Quota, Refusal, Usage)
//! redis_backend.rs  the shared backend: one Lua script per call, each with a deadline
//! redis_keys.rs     the Redis key of every counter and record (hash-tagged with Cluster)
//! redis_link.rs     the connection: one server, the primary the sentinels name, a Cluster
//! redis_sentinel.rs asking the sentinels where the primary is
//! redis_url.rs      the URL's schemes: redis://, redis+sentinel://, redis+cluster://
//! memory.rs         this process's backend, and the Redis backend's fail-open fallback
//! gcra.rs           the rate and token arithmetic of both backends
//! idempotency.rs    a record's name, the stored response, what a backend found
//! stats.rs, config.rs, error.rs
//! ```
//!
//! Imports point down that list and never back: cache → store, redis_backend, redis_keys,
//! idempotency; store → redis_backend → redis_keys,
//! redis_link → redis_sentinel, redis_url; redis_backend → memory → gcra, idempotency, check
//! → error.
//!
//! Shared state never hangs a request: every Redis call has a deadline
//! ([`RedisConfig::call_timeout`]); when Redis is slow or down the store answers from local
//! memory ([`FailureMode::FailOpen`]) or fails fast ([`FailureMode::FailClosed`]), counts it in
//! [`Store::stats`], logs a rate-limited warning, and returns to Redis when it answers again.
//! Errors ([`StateError`]) and refusals ([`Refusal`]) have a `metric_label()`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod cache;
mod check;
mod config;
mod error;
mod gcra;
mod idempotency;
mod memory;
mod redis_backend;
mod redis_keys;
mod redis_link;
mod redis_sentinel;
mod redis_url;
mod stats;
mod store;
mod stream_log;

pub use cache::{
    age_header_value, CacheConfig, CacheDirectives, CacheKey, CacheScope, CacheStats, CacheStatus,
    CacheStoreConfig, CachedBody, CachedEvent, CachedResponse, CachedUsage, Flight, FlightGuard,
    FlightWaiter, InvalidCacheTtl, Lookup, PutOutcome, PutPolicy, Replay, ResponseCache, Waited,
    CACHE_STATUS_HEADER, CACHE_TTL_HEADER, MAX_CACHED_RESPONSE_BYTES,
};
pub use check::{Check, CheckKind, Quota, Refusal, RefusalReason, Usage, MAX_CHECKS};
pub use config::{
    BackendConfig, ConfigError, FailureMode, IdempotencyConfig, MemoryConfig, RedisConfig,
    StateConfig,
};
pub use error::StateError;
pub use idempotency::{BodyHash, Completion, StoredResponse, MAX_IDEMPOTENCY_KEY_LEN};
pub use stats::{StatsSnapshot, StoreMode};
pub use store::{Admission, Begin, Decision, IdempotencyGuard, Store};
pub use stream_log::{LogEntry, StreamLogs, POLL as STREAM_LOG_POLL};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
