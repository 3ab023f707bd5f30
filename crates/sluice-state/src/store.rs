//! [`Store`]: the one handle the gateway holds. A concrete type over a closed enum of two
//! backends, not a trait object: there are exactly two, the Redis one needs the memory one
//! anyway (its fail-open fallback), and the enum keeps every call a static dispatch with no
//! boxed future on the hot path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::check::{Check, Quota, Refusal, Usage};
use crate::idempotency::{record_name, BeginRaw, BodyHash, Completion, RecordId, StoredResponse};
use crate::memory::{MemoryLimits, MemoryRecords};
use crate::redis_backend::{background, Job, RedisBackend};
use crate::stats::{Stats, StatsSnapshot, StoreMode};
use crate::{
    BackendConfig, ConfigError, FailureMode, IdempotencyConfig, MemoryConfig, StateConfig,
    StateError,
};

/// Limits, budgets and idempotency records, in memory or shared through Redis.
///
/// Cheap to clone (one `Arc`); clones share everything. With Redis the store owns one
/// background task (queued settles, lease renewal, probing Redis while it is down) that ends
/// when the last clone is dropped.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::{sync::Arc, time::Duration};
/// use sluice_state::{Check, Decision, StateConfig, Store, Usage};
///
/// let store = Store::new(StateConfig::default()).await?; // in memory
/// let key: Arc<str> = Arc::from("k42");
/// let checks = vec![
///     Check::Rate { key: key.clone(), limit: 600, period: Duration::from_secs(60) },
///     Check::Tokens { key: key.clone(), limit: 100_000, period: Duration::from_secs(60), reserve: 1024 },
///     Check::Concurrency { key: key.clone(), limit: 8 },
///     Check::Budget { key, limit_micros: 5_000_000, period: Duration::from_secs(86_400) },
/// ];
/// match store.admit(checks).await? {
///     Decision::Admitted(admission) => {
///         let _headers = admission.quotas(); // x-ratelimit-* numbers
///         // ... forward the request ...
///         admission.settle(Usage { tokens: Some(312), spend_micros: 1_250 }).await?;
///     }
///     Decision::Refused(refusal) => {
///         let _status_429_retry_after = refusal.retry_after;
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
}

/// The outcome of [`Store::admit`].
#[derive(Debug)]
pub enum Decision {
    /// Every check passed and was taken; settle the admission when the request ends.
    Admitted(Admission),
    /// A check refused; nothing was taken.
    Refused(Refusal),
}

/// Which state an admission or record lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The memory backend, or the Redis backend's fallback.
    Local,
    /// Redis.
    Shared,
}

#[derive(Debug)]
pub(crate) struct Local {
    limits: MemoryLimits,
    records: MemoryRecords,
}

impl Local {
    fn new(memory: &MemoryConfig, idempotency: &IdempotencyConfig) -> Self {
        Local {
            limits: MemoryLimits::new(memory),
            records: MemoryRecords::new(idempotency, memory),
        }
    }
}

#[derive(Debug)]
enum Backend {
    Memory(Local),
    Redis {
        shared: Arc<RedisBackend>,
        fallback: Local,
        jobs: mpsc::Sender<Job>,
    },
}

#[derive(Debug)]
pub(crate) struct Inner {
    backend: Backend,
    stats: Arc<Stats>,
    idempotency: IdempotencyConfig,
    /// Numbers leases and idempotency tokens.
    next_id: AtomicU64,
}

// === impl Store ===

impl Store {
    /// A store in this process's memory. Needs no runtime.
    pub fn in_memory(memory: &MemoryConfig, idempotency: &IdempotencyConfig) -> Store {
        Store {
            inner: Arc::new(Inner {
                backend: Backend::Memory(Local::new(memory, idempotency)),
                stats: Arc::default(),
                idempotency: idempotency.clone(),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// Builds the configured store. With Redis it pings it (within `connect_timeout`) and
    /// starts its background task; an unreachable Redis is not an error: the store starts in
    /// the configured failure mode and comes back when Redis answers.
    ///
    /// Must be called inside a tokio runtime when the backend is Redis.
    ///
    /// # Errors
    /// The configuration is invalid ([`StateConfig::validate`]).
    pub async fn new(config: StateConfig) -> Result<Store, ConfigError> {
        config.validate()?;
        let StateConfig {
            backend,
            memory,
            idempotency,
        } = config;
        let redis = match backend {
            BackendConfig::Memory => return Ok(Store::in_memory(&memory, &idempotency)),
            BackendConfig::Redis(redis) => redis,
        };
        let stats = Arc::new(Stats::default());
        let queue = redis.settle_queue;
        let shared = Arc::new(RedisBackend::new(redis, stats.clone())?);
        if !shared.probe().await {
            shared.mark_down();
            tracing::warn!(
                on_failure = shared.config().on_failure.as_str(),
                "shared state store (redis) unreachable at startup; probing it"
            );
        }
        let (jobs, queue) = mpsc::channel(queue);
        tokio::spawn(background(shared.clone(), queue));
        Ok(Store {
            inner: Arc::new(Inner {
                backend: Backend::Redis {
                    shared,
                    fallback: Local::new(&memory, &idempotency),
                    jobs,
                },
                stats,
                idempotency,
                next_id: AtomicU64::new(1),
            }),
        })
    }

    /// Passes every check and takes what it costs, in one round trip, or takes nothing.
    ///
    /// # Errors
    /// An invalid check (a zero limit or period, more than [`crate::MAX_CHECKS`] checks); with
    /// `fail_closed`, Redis failing or down (503); in memory, the memory bound reached. With
    /// `fail_open` a Redis failure is answered from local memory.
    ///
    /// # Cancel safety
    /// Dropped after Redis applied it, the admission's tokens stay taken and its lease is not
    /// renewed, so it expires after `lease_ttl`.
    pub async fn admit(&self, checks: Vec<Check>) -> Result<Decision, StateError> {
        if checks.len() > crate::MAX_CHECKS {
            return Err(StateError::InvalidCheck("more than 16 checks"));
        }
        for check in &checks {
            check.validate()?;
        }
        let inner = &self.inner;
        let local = match &inner.backend {
            Backend::Memory(local) => local,
            Backend::Redis {
                shared, fallback, ..
            } => {
                shared.check_slots(&checks)?;
                let lease = checks
                    .iter()
                    .any(|c| matches!(c, Check::Concurrency { .. }))
                    .then(|| inner.next_id.fetch_add(1, Ordering::Relaxed));
                // Boxed: the Redis call's future is ~2 KB, and unboxed it would sit in (and be
                // moved with) every admission's future, the in-memory ones too.
                match Box::pin(shared.admit(&checks, lease, false)).await {
                    Ok(Ok(quotas)) => {
                        if let Some(n) = lease {
                            shared.hold_lease(n, &checks);
                        }
                        return Ok(self.admitted(checks, quotas, Origin::Shared, lease));
                    }
                    Ok(Err(refusal)) => return Ok(Decision::Refused(refusal)),
                    Err(e) => {
                        inner.fall_back(shared, e)?;
                        fallback
                    }
                }
            }
        };
        match local.limits.admit(&checks)? {
            Ok(quotas) => Ok(self.admitted(checks, quotas, Origin::Local, None)),
            Err(refusal) => Ok(Decision::Refused(refusal)),
        }
    }

    fn admitted(
        &self,
        checks: Vec<Check>,
        quotas: Vec<Quota>,
        origin: Origin,
        lease: Option<u64>,
    ) -> Decision {
        Decision::Admitted(Admission {
            checks,
            quotas,
            origin,
            lease,
            store: Arc::downgrade(&self.inner),
            settled: false,
        })
    }

    /// The numbers of `checks` without taking anything, for the admin API: remaining requests
    /// and tokens, leases held, spend in the current budget period.
    ///
    /// # Errors
    /// As [`Store::admit`].
    pub async fn quotas(&self, checks: &[Check]) -> Result<Vec<Quota>, StateError> {
        if checks.len() > crate::MAX_CHECKS {
            return Err(StateError::InvalidCheck("more than 16 checks"));
        }
        for check in checks {
            check.validate()?;
        }
        match &self.inner.backend {
            Backend::Memory(local) => local.limits.quotas(checks),
            Backend::Redis {
                shared, fallback, ..
            } => {
                shared.check_slots(checks)?;
                match shared.admit(checks, None, true).await {
                    Ok(Ok(quotas)) => Ok(quotas),
                    Ok(Err(refusal)) => Ok(refusal.quotas),
                    Err(e) => {
                        self.inner.fall_back(shared, e)?;
                        fallback.limits.quotas(checks)
                    }
                }
            }
        }
    }

    /// A budget key's spend in the current period, in micro-units.
    ///
    /// # Errors
    /// As [`Store::admit`].
    pub async fn spend(&self, key: &Arc<str>, period: Duration) -> Result<u64, StateError> {
        let check = Check::Budget {
            key: key.clone(),
            limit_micros: 1,
            period,
        };
        let quotas = self.quotas(std::slice::from_ref(&check)).await?;
        Ok(quotas.first().map_or(0, |q| q.used))
    }

    /// Looks up or creates the idempotency record of (`scope`, `key`): `scope` separates
    /// tenants (use the virtual key's id), `key` is the client's `Idempotency-Key`. A completed
    /// response is replayed for `ttl` after completion; an in-flight record blocks duplicates
    /// for at most [`IdempotencyConfig::in_flight_ttl`]. One round trip with Redis.
    ///
    /// # Errors
    /// [`StateError::InvalidIdempotencyKey`] (400); otherwise as [`Store::admit`].
    pub async fn idempotency_begin(
        &self,
        scope: &str,
        key: &str,
        body_hash: BodyHash,
        ttl: Duration,
    ) -> Result<Begin, StateError> {
        let record = RecordId {
            name: record_name(scope, key)?,
            token: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
        };
        let inner = &self.inner;
        let (raw, origin) = match &inner.backend {
            Backend::Memory(local) => (local.records.begin(&record, body_hash)?, Origin::Local),
            Backend::Redis {
                shared, fallback, ..
            } => match Box::pin(shared.idempotency_begin(
                &record,
                body_hash,
                inner.idempotency.in_flight_ttl,
            ))
            .await
            {
                Ok(raw) => (raw, Origin::Shared),
                Err(e) => {
                    inner.fall_back(shared, e)?;
                    (fallback.records.begin(&record, body_hash)?, Origin::Local)
                }
            },
        };
        Ok(match raw {
            BeginRaw::Fresh => Begin::Fresh(IdempotencyGuard {
                store: Arc::downgrade(&self.inner),
                record,
                origin,
                ttl,
                finished: false,
            }),
            BeginRaw::InFlight => Begin::InFlight,
            BeginRaw::Done(response) => Begin::Done(response),
            BeginRaw::Mismatch => Begin::Mismatch,
        })
    }

    /// [`Store::idempotency_begin`], and while the record is in flight, polls it again (2 ms,
    /// doubling up to [`IdempotencyConfig::poll_max_interval`]) until it completes, is released
    /// (then this request gets [`Begin::Fresh`]) or `deadline` passes ([`Begin::InFlight`]).
    ///
    /// NOTE: polling rather than pub/sub: pub/sub needs a dedicated connection per instance and
    /// its messages can be missed across a reconnect anyway; a poll costs one small round trip.
    ///
    /// # Errors
    /// As [`Store::idempotency_begin`].
    pub async fn idempotency_wait(
        &self,
        scope: &str,
        key: &str,
        body_hash: BodyHash,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<Begin, StateError> {
        let mut pause = Duration::from_millis(2);
        loop {
            let begin = self.idempotency_begin(scope, key, body_hash, ttl).await?;
            let now = Instant::now();
            if !matches!(begin, Begin::InFlight) || now >= deadline {
                return Ok(begin);
            }
            tokio::time::sleep_until((now + pause).min(deadline)).await;
            pause = (pause * 2).min(self.inner.idempotency.poll_max_interval);
        }
    }

    /// Where the store answers from now.
    pub fn mode(&self) -> StoreMode {
        match &self.inner.backend {
            Backend::Memory(_) => StoreMode::Memory,
            Backend::Redis { shared, .. } => shared.mode(),
        }
    }

    /// The Redis backend, if the store has one (the response cache shares it).
    pub(crate) fn shared_backend(&self) -> Option<Arc<RedisBackend>> {
        match &self.inner.backend {
            Backend::Memory(_) => None,
            Backend::Redis { shared, .. } => Some(shared.clone()),
        }
    }

    /// The counters, for metrics.
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.stats.snapshot(self.mode())
    }
}

// === impl Inner ===

impl Inner {
    fn local(&self) -> &Local {
        match &self.backend {
            Backend::Memory(local) => local,
            Backend::Redis { fallback, .. } => fallback,
        }
    }

    /// After a failed shared call: `Ok` to answer from local memory (`fail_open`), or the error.
    fn fall_back(&self, shared: &RedisBackend, e: StateError) -> Result<(), StateError> {
        match shared.config().on_failure {
            FailureMode::FailOpen => {
                Stats::add(&self.stats.fallbacks);
                shared.warn_fallback(&e);
                Ok(())
            }
            FailureMode::FailClosed => {
                Stats::add(&self.stats.refused_unavailable);
                Err(e)
            }
        }
    }

    async fn settle(
        &self,
        checks: &[Check],
        origin: Origin,
        lease: Option<u64>,
        usage: Usage,
    ) -> Result<(), StateError> {
        match (&self.backend, origin) {
            (Backend::Redis { shared, .. }, Origin::Shared) => {
                if let Some(n) = lease {
                    shared.forget_lease(n);
                }
                shared.settle_or_owe(checks, lease, usage).await
            }
            (
                Backend::Redis {
                    shared, fallback, ..
                },
                Origin::Local,
            ) => {
                fallback.limits.settle(checks, usage);
                shared.owe(checks, usage.spend_micros);
                Ok(())
            }
            (Backend::Memory(local), _) => {
                local.limits.settle(checks, usage);
                Ok(())
            }
        }
    }

    fn settle_detached(
        &self,
        checks: Vec<Check>,
        origin: Origin,
        lease: Option<u64>,
        usage: Usage,
    ) {
        match (&self.backend, origin) {
            (Backend::Redis { shared, jobs, .. }, Origin::Shared) => {
                if let Some(n) = lease {
                    shared.forget_lease(n);
                }
                let job = Job::Settle {
                    checks,
                    lease,
                    usage,
                };
                if let Err(full) = jobs.try_send(job) {
                    Stats::add(&self.stats.detached_dropped);
                    if let Job::Settle { checks, usage, .. } = full.into_inner() {
                        shared.owe(&checks, usage.spend_micros);
                    }
                }
            }
            (
                Backend::Redis {
                    shared, fallback, ..
                },
                Origin::Local,
            ) => {
                fallback.limits.settle(&checks, usage);
                shared.owe(&checks, usage.spend_micros);
            }
            (Backend::Memory(local), _) => local.limits.settle(&checks, usage),
        }
    }

    pub(crate) async fn idempotency_complete(
        &self,
        record: &RecordId,
        origin: Origin,
        response: StoredResponse,
        ttl: Duration,
    ) -> Result<Completion, StateError> {
        if response.stored_len() > self.idempotency.max_response_bytes {
            self.idempotency_release(record, origin).await?;
            return Ok(Completion::TooLarge);
        }
        match (&self.backend, origin) {
            (Backend::Redis { shared, .. }, Origin::Shared) => {
                let stored = shared.idempotency_complete(record, &response, ttl).await?;
                Ok(if stored {
                    Completion::Stored
                } else {
                    Completion::Lost
                })
            }
            _ => Ok(self.local().records.complete(record, response, ttl)),
        }
    }

    pub(crate) async fn idempotency_release(
        &self,
        record: &RecordId,
        origin: Origin,
    ) -> Result<(), StateError> {
        match (&self.backend, origin) {
            (Backend::Redis { shared, .. }, Origin::Shared) => {
                shared.idempotency_release(record).await
            }
            _ => {
                self.local().records.release(record);
                Ok(())
            }
        }
    }

    pub(crate) fn idempotency_release_detached(&self, record: &RecordId, origin: Origin) {
        match (&self.backend, origin) {
            (Backend::Redis { jobs, .. }, Origin::Shared) => {
                let job = Job::Release {
                    record: record.clone(),
                };
                if jobs.try_send(job).is_err() {
                    Stats::add(&self.stats.detached_dropped);
                }
            }
            _ => self.local().records.release(record),
        }
    }
}

// === impl Admission ===

/// An admitted request's hold on its limits. End it with [`Admission::settle`] (awaited, one
/// round trip) or [`Admission::settle_detached`] (from synchronous code such as a body's
/// `Drop`). Dropping it unsettled settles with [`Usage::default`]: leases are released, the
/// token reservation stands and no spend is added.
#[derive(Debug)]
pub struct Admission {
    checks: Vec<Check>,
    quotas: Vec<Quota>,
    origin: Origin,
    lease: Option<u64>,
    store: Weak<Inner>,
    settled: bool,
}

impl Admission {
    /// The numbers of every check after this admission, in the order of the checks: for the
    /// `x-ratelimit-*` headers.
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas
    }

    /// The checks it passed.
    pub fn checks(&self) -> &[Check] {
        &self.checks
    }

    /// False when it was admitted from local memory because Redis was down (`fail_open`), or
    /// by the memory backend.
    pub fn is_shared(&self) -> bool {
        self.origin == Origin::Shared
    }

    /// Reconciles the token reservation with `usage.tokens`, releases the leases and adds
    /// `usage.spend_micros` to every budget, in one round trip.
    ///
    /// # Errors
    /// Redis failed or is down: leases then expire by their TTL and the token reconciliation is
    /// lost, but the spend is kept (bounded) and added to the budget when Redis is back.
    ///
    /// # Cancel safety
    /// If dropped before it finishes, the update may or may not have been applied.
    pub async fn settle(mut self, usage: Usage) -> Result<(), StateError> {
        self.settled = true;
        let Some(inner) = self.store.upgrade() else {
            return Ok(());
        };
        inner
            .settle(&self.checks, self.origin, self.lease.take(), usage)
            .await
    }

    /// [`Admission::settle`] without waiting: done at once in memory, else queued for the
    /// store's background task (a bounded queue; when full it is dropped and counted in
    /// [`StatsSnapshot::detached_dropped`], and the leases expire by their TTL). Never blocks.
    pub fn settle_detached(mut self, usage: Usage) {
        self.detach(usage);
    }

    fn detach(&mut self, usage: Usage) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        if let Some(inner) = self.store.upgrade() {
            let checks = std::mem::take(&mut self.checks);
            inner.settle_detached(checks, self.origin, self.lease.take(), usage);
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.detach(Usage::default());
    }
}

// === impl IdempotencyGuard ===

/// What [`Store::idempotency_begin`] found.
#[derive(Debug)]
pub enum Begin {
    /// No record: this request runs. Complete or release the guard when it ends.
    Fresh(IdempotencyGuard),
    /// The same key and body are in flight elsewhere: a non-streaming duplicate may wait
    /// ([`Store::idempotency_wait`]); a streaming one is refused with 409.
    InFlight,
    /// The same key and body completed: replay this response.
    Done(StoredResponse),
    /// The same key was used with a different body: 422.
    Mismatch,
}

impl Begin {
    /// A low-cardinality label for metrics: `fresh`, `in_flight`, `replayed`, `mismatch`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Begin::Fresh(_) => "fresh",
            Begin::InFlight => "in_flight",
            Begin::Done(_) => "replayed",
            Begin::Mismatch => "mismatch",
        }
    }
}

/// Ownership of an in-flight idempotency record. Dropping it without
/// [`IdempotencyGuard::complete`] releases the record (in the background with Redis).
#[derive(Debug)]
pub struct IdempotencyGuard {
    store: Weak<Inner>,
    record: RecordId,
    origin: Origin,
    ttl: Duration,
    finished: bool,
}

impl IdempotencyGuard {
    /// Stores the response for replay for the TTL given at begin, if it fits
    /// [`crate::IdempotencyConfig::max_response_bytes`] (else releases the record). One round
    /// trip with Redis.
    ///
    /// # Errors
    /// The store failed; the record then stays in flight until its in-flight TTL passes.
    ///
    /// # Cancel safety
    /// If dropped before it finishes, the record may or may not be stored.
    pub async fn complete(mut self, response: StoredResponse) -> Result<Completion, StateError> {
        self.finished = true;
        let Some(inner) = self.store.upgrade() else {
            return Ok(Completion::Lost);
        };
        inner
            .idempotency_complete(&self.record, self.origin, response, self.ttl)
            .await
    }

    /// Forgets the record now, so a retry runs again. One round trip with Redis.
    ///
    /// # Errors
    /// The store failed; the record then stays in flight until its in-flight TTL passes.
    pub async fn release(mut self) -> Result<(), StateError> {
        self.finished = true;
        let Some(inner) = self.store.upgrade() else {
            return Ok(());
        };
        inner.idempotency_release(&self.record, self.origin).await
    }
}

impl Drop for IdempotencyGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Some(inner) = self.store.upgrade() {
            inner.idempotency_release_detached(&self.record, self.origin);
        }
    }
}
