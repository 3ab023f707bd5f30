//! The Redis backend: every operation is one Lua script, so it is atomic and one round trip.
//! Every call has [`RedisConfig::call_timeout`]; failures count towards marking Redis down,
//! and while it is down no call waits for it (the store falls back or refuses at once) until a
//! background probe finds it back.
//!
//! Keys (named by `redis_keys.rs`; with Cluster they carry a hash tag): `<prefix>:r:<key>`
//! (rate TAT), `<prefix>:t:<key>` (tokens TAT), `<prefix>:c:<key>` (a sorted set of leases
//! scored by expiry, ms), `<prefix>:b:<key>` (a hash: budget window and spend),
//! `<prefix>:i:<scope len>:<scope>:<key>` (an idempotency record). Every key has a TTL: a GCRA
//! key until its bucket is full again, a lease set twice the lease TTL, a budget the end of its
//! period plus a minute, a record its in-flight or replay TTL.
//!
//! With Cluster a script's keys must share a hash slot: an admission's do by construction (or
//! it is refused as an invalid check), and the batches of many admissions (queued settles,
//! lease renewals, owed spend) are split into one script call per slot, sent at once.

use std::collections::hash_map::{HashMap, RandomState};
use std::future::Future;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::future::join_all;
use redis::cluster_routing::Slot;
use redis::{RedisResult, Script, ScriptInvocation};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use crate::check::{Check, CheckKind, Quota, Refusal, RefusalReason, Usage, MAX_LIMIT};
use crate::idempotency::{BeginRaw, BodyHash, RecordId, StoredResponse};
use crate::memory::budget_window;
use crate::redis_keys::{KeyLayout, Layout};
use crate::redis_link::{is_unavailable, Conn, Link};
use crate::redis_url::{RedisUrl, Topology};
use crate::stats::{Stats, StoreMode};
use crate::{ConfigError, FailureMode, RedisConfig, StateError};

/// Leases renewed per script call.
const RENEW_BATCH: usize = 256;
/// Budget counters whose unpaid spend is kept while Redis is unreachable.
const MAX_OWED: usize = 10_000;
/// Queued jobs taken at once: their settles go in one script call.
const JOB_BATCH: usize = 64;
/// The least deadline of a batch of queued settles (see `settle_batch`).
const SETTLE_BATCH_DEADLINE: Duration = Duration::from_millis(250);

struct Scripts {
    admit: Script,
    settle: Script,
    renew: Script,
    begin: Script,
    complete: Script,
    release: Script,
}

impl Scripts {
    fn new() -> Self {
        Scripts {
            admit: Script::new(include_str!("lua/admit.lua")),
            settle: Script::new(include_str!("lua/settle.lua")),
            renew: Script::new(include_str!("lua/renew.lua")),
            begin: Script::new(include_str!("lua/idempotency_begin.lua")),
            complete: Script::new(include_str!("lua/idempotency_complete.lua")),
            release: Script::new(include_str!("lua/idempotency_release.lua")),
        }
    }

    fn all(&self) -> [&Script; 6] {
        [
            &self.admit,
            &self.settle,
            &self.renew,
            &self.begin,
            &self.complete,
            &self.release,
        ]
    }
}

/// A budget counter in one period: key, period µs, window.
type OwedCounter = (Arc<str>, u64, u64);

/// One counter update of the settle script.
struct Update {
    /// The Redis key.
    key: String,
    op: Op,
}

enum Op {
    /// Charge (or refund, negative) GCRA units.
    Tokens { limit: u64, period: u64, delta: i64 },
    /// Release a lease.
    Release { member: String },
    /// Add spend to a budget's `window` (0: the current one).
    Spend {
        budget: Arc<str>,
        period: u64,
        window: u64,
        spend: u64,
    },
}

impl Update {
    fn push(&self, inv: &mut ScriptInvocation<'_>) {
        inv.key(&self.key);
        match &self.op {
            Op::Tokens {
                limit,
                period,
                delta,
            } => inv.arg("g").arg(*limit).arg(*period).arg(*delta),
            Op::Release { member } => inv.arg("c").arg(0u64).arg(0u64).arg(member),
            Op::Spend {
                period,
                window,
                spend,
                ..
            } => inv.arg("b").arg(*window).arg(*period).arg(*spend),
        };
    }
}

/// Work queued from `Drop` paths, run by the store's background task.
pub(crate) enum Job {
    Settle {
        checks: Vec<Check>,
        lease: Option<u64>,
        usage: Usage,
    },
    Release {
        record: RecordId,
    },
}

pub(crate) struct RedisBackend {
    link: Link,
    keys: KeyLayout,
    config: RedisConfig,
    /// Names this store's leases and record tokens, so stores never take each other's.
    instance: String,
    scripts: Scripts,
    down: AtomicBool,
    failures: AtomicU32,
    /// Live leases to renew: lease number -> lease set keys.
    leases: Mutex<HashMap<u64, Vec<String>>>,
    /// Spend that did not reach Redis, per (budget key, period µs, window), paid when it is
    /// back, so an outage does not make requests free.
    owed: Mutex<HashMap<OwedCounter, u64>>,
    stats: Arc<Stats>,
    last_warn: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_struct("RedisBackend")
            .field("prefix", &self.config.prefix)
            .field("link", &self.link)
            .field("instance", &self.instance)
            .field("down", &self.down)
            .finish_non_exhaustive()
    }
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

fn millis(d: Duration) -> u64 {
    d.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

impl RedisBackend {
    /// Builds the client without connecting (it connects on the first call).
    ///
    /// Must run inside a tokio runtime.
    pub fn new(config: RedisConfig, stats: Arc<Stats>) -> Result<Self, ConfigError> {
        let link = Link::new(
            &config,
            config
                .call_timeout
                .max(SETTLE_BATCH_DEADLINE)
                .max(config.connect_timeout),
        )?;
        let keys = KeyLayout::new(&config.prefix, layout_of(&config)?);
        let instance = format!(
            "{:016x}",
            RandomState::new().hash_one((std::process::id(), Instant::now()))
        );
        Ok(RedisBackend {
            link,
            keys,
            config,
            instance,
            scripts: Scripts::new(),
            down: AtomicBool::new(false),
            failures: AtomicU32::new(0),
            leases: Mutex::new(HashMap::new()),
            owed: Mutex::new(HashMap::new()),
            stats,
            last_warn: Mutex::new(None),
        })
    }

    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// How this store names its keys.
    pub fn keys(&self) -> &KeyLayout {
        &self.keys
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    pub fn mode(&self) -> StoreMode {
        match (self.is_down(), self.config.on_failure) {
            (false, _) => StoreMode::Shared,
            (true, FailureMode::FailOpen) => StoreMode::Fallback,
            (true, FailureMode::FailClosed) => StoreMode::Unavailable,
        }
    }

    fn member(&self, n: u64) -> String {
        format!("{}:{n}", self.instance)
    }

    /// With Cluster, refuses checks whose counters fall in several hash slots: no script could
    /// take them at once. A configuration bug (the gateway names counters so they share one).
    pub fn check_slots(&self, checks: &[Check]) -> Result<(), StateError> {
        if self.keys.layout() == Layout::Tagged && !self.keys.one_slot(checks) {
            return Err(StateError::InvalidCheck(
                "the checks of one admission fall in several Redis Cluster hash slots; name \
                 their keys with one group (see the sluice-state README, Cluster)",
            ));
        }
        Ok(())
    }

    /// One call with the call deadline; refused at once while Redis is down.
    pub(crate) async fn call<T, F, Fut>(&self, call: F) -> Result<T, StateError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.call_for(self.config.call_timeout, call).await
    }

    /// [`RedisBackend::call`] with another deadline.
    pub(crate) async fn call_for<T, F, Fut>(
        &self,
        deadline: Duration,
        call: F,
    ) -> Result<T, StateError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        if self.is_down() {
            return Err(StateError::Unavailable);
        }
        self.call_within(deadline, call).await
    }

    /// One call with `deadline`, even while Redis is marked down (probes).
    async fn call_within<T, F, Fut>(&self, deadline: Duration, call: F) -> Result<T, StateError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (conn, n) = self.link.get();
        match tokio::time::timeout(deadline, call(conn)).await {
            Ok(Ok(value)) => {
                Stats::add(&self.stats.round_trips);
                if self.failures.load(Ordering::Relaxed) != 0 {
                    self.failures.store(0, Ordering::Relaxed);
                }
                Ok(value)
            }
            Ok(Err(e)) => {
                Stats::add(&self.stats.errors);
                if is_unavailable(&e) {
                    self.note_failure();
                    self.link.failed(n, &e);
                }
                Err(StateError::Redis(e))
            }
            Err(_) => {
                Stats::add(&self.stats.timeouts);
                self.note_failure();
                Err(StateError::Timeout(deadline))
            }
        }
    }

    fn note_failure(&self) {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.config.trip_after && !self.down.swap(true, Ordering::AcqRel) {
            Stats::add(&self.stats.trips);
            tracing::warn!(
                on_failure = self.config.on_failure.as_str(),
                failures = n,
                "shared state store (redis) is down; probing it every {:?}",
                self.config.probe_interval
            );
        }
    }

    /// Marks Redis down without counting failures (unreachable at startup).
    pub fn mark_down(&self) {
        if !self.down.swap(true, Ordering::AcqRel) {
            Stats::add(&self.stats.trips);
        }
    }

    /// A warning per `warn_interval` at most, while answering from local memory.
    pub fn warn_fallback(&self, cause: &StateError) {
        let now = Instant::now();
        let mut last = self
            .last_warn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if last.is_none_or(|t| now >= t + self.config.warn_interval) {
            *last = Some(now);
            tracing::warn!(
                cause = cause.metric_label(),
                "shared state store unavailable; using per-instance limits (fail_open)"
            );
        }
    }

    /// Whether the background task should probe now: Redis is marked down, or (Sentinel,
    /// Cluster) there is no connection.
    pub fn wants_probe(&self) -> bool {
        self.is_down() || self.link.wants_connect()
    }

    /// (Re)connects (with Sentinel: finds the primary again), pings Redis and loads the
    /// scripts; marks it up when all work.
    pub async fn probe(&self) -> bool {
        let deadline = self.config.connect_timeout;
        match tokio::time::timeout(deadline, self.link.connect()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                Stats::add(&self.stats.errors);
                tracing::debug!(error = %e, "shared state store (redis): cannot connect");
                return false;
            }
            Err(_) => {
                Stats::add(&self.stats.timeouts);
                return false;
            }
        }
        let ping = |mut conn: Conn| async move {
            redis::cmd("PING")
                .query_async::<redis::Value>(&mut conn)
                .await
        };
        if self.call_within(deadline, ping).await.is_err() {
            return false;
        }
        // Loaded now, the first calls after a restart or failover do not pay for NOSCRIPT
        // (with Cluster, SCRIPT LOAD goes to every node).
        for script in self.scripts.all() {
            let load = |mut conn: Conn| async move { script.load_async(&mut conn).await };
            if self.call_within(deadline, load).await.is_err() {
                return false;
            }
        }
        self.failures.store(0, Ordering::Relaxed);
        if self.down.swap(false, Ordering::AcqRel) {
            Stats::add(&self.stats.recoveries);
            tracing::info!("shared state store (redis) is back");
        }
        true
    }

    /// Runs the admission script (or, with `dry`, reads the numbers).
    pub async fn admit(
        &self,
        checks: &[Check],
        lease: Option<u64>,
        dry: bool,
    ) -> Result<Result<Vec<Quota>, Refusal>, StateError> {
        let mut inv = self.scripts.admit.prepare_invoke();
        inv.arg(if dry { "1" } else { "0" })
            .arg(lease.map(|n| self.member(n)).unwrap_or_default())
            .arg(millis(self.config.lease_ttl));
        for check in checks {
            inv.key(self.keys.check(check));
            match check {
                Check::Rate { limit, period, .. } => {
                    inv.arg("g").arg(*limit).arg(micros(*period)).arg(1u64)
                }
                Check::Tokens {
                    limit,
                    period,
                    reserve,
                    ..
                } => inv.arg("g").arg(*limit).arg(micros(*period)).arg(*reserve),
                Check::Concurrency { limit, .. } => inv.arg("c").arg(*limit).arg(0u64).arg(0u64),
                Check::Budget {
                    limit_micros,
                    period,
                    ..
                } => inv
                    .arg("b")
                    .arg(*limit_micros)
                    .arg(micros(*period))
                    .arg(0u64),
            };
        }
        let reply: Vec<i64> = self
            .call(|mut conn| async move { inv.invoke_async(&mut conn).await })
            .await?;
        if reply.len() != 3 + 4 * checks.len() {
            return Err(StateError::Corrupt("admission reply"));
        }
        let quotas = checks
            .iter()
            .enumerate()
            .map(|(i, check)| {
                let q = &reply[3 + 4 * i..7 + 4 * i];
                Quota {
                    kind: check.kind(),
                    limit: q[0].max(0) as u64,
                    remaining: q[1].max(0) as u64,
                    used: q[2].max(0) as u64,
                    reset_after: Duration::from_micros(q[3].max(0) as u64),
                }
            })
            .collect();
        let refused = reply[0];
        if refused == 0 {
            return Ok(Ok(quotas));
        }
        let index = usize::try_from(refused - 1)
            .ok()
            .filter(|i| *i < checks.len())
            .ok_or(StateError::Corrupt("admission reply"))?;
        Ok(Err(Refusal {
            index,
            kind: checks[index].kind(),
            reason: match reply[1] {
                1 => RefusalReason::TooLarge,
                2 => RefusalReason::BudgetExceeded,
                _ => RefusalReason::Limited,
            },
            retry_after: u64::try_from(reply[2]).ok().map(Duration::from_micros),
            quotas,
        }))
    }

    /// Remembers a live lease so the background task renews it.
    pub fn hold_lease(&self, n: u64, checks: &[Check]) {
        let keys: Vec<String> = checks
            .iter()
            .filter(|c| c.kind() == CheckKind::Concurrency)
            .map(|c| self.keys.check(c))
            .collect();
        self.leases
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(n, keys);
    }

    /// Stops renewing a lease (settled, or dropped: then it expires by its TTL).
    pub fn forget_lease(&self, n: u64) {
        self.leases
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&n);
    }

    /// Runs the settle script; no round trip when there is nothing to update. If Redis fails,
    /// the spend is owed.
    pub async fn settle_or_owe(
        &self,
        checks: &[Check],
        lease: Option<u64>,
        usage: Usage,
    ) -> Result<(), StateError> {
        let mut updates = Vec::new();
        self.settle_updates(&mut updates, checks, lease, usage);
        let failed = self.run_settle(updates, self.config.call_timeout).await;
        match failed {
            None => Ok(()),
            Some((updates, e)) => {
                self.owe_updates(&updates);
                Err(e)
            }
        }
    }

    /// One admission's settle updates: token reconciliation, lease release, spend.
    fn settle_updates(
        &self,
        out: &mut Vec<Update>,
        checks: &[Check],
        lease: Option<u64>,
        usage: Usage,
    ) {
        for check in checks {
            let op = match check {
                Check::Rate { .. } => continue,
                Check::Tokens {
                    limit,
                    period,
                    reserve,
                    ..
                } => {
                    let Some(actual) = usage.tokens else { continue };
                    let delta = actual.min(MAX_LIMIT) as i64 - *reserve as i64;
                    if delta == 0 {
                        continue;
                    }
                    Op::Tokens {
                        limit: *limit,
                        period: micros(*period),
                        delta,
                    }
                }
                Check::Concurrency { .. } => {
                    let Some(n) = lease else { continue };
                    Op::Release {
                        member: self.member(n),
                    }
                }
                Check::Budget { key, period, .. } => {
                    if usage.spend_micros == 0 {
                        continue;
                    }
                    Op::Spend {
                        budget: key.clone(),
                        period: micros(*period),
                        window: 0,
                        spend: usage.spend_micros.min(MAX_LIMIT),
                    }
                }
            };
            out.push(Update {
                key: self.keys.check(check),
                op,
            });
        }
    }

    /// Runs the settle script over `updates` within `deadline` (refused at once while Redis
    /// is down): one call, or with Cluster one per hash slot, all sent at once. Returns the
    /// updates of the calls that failed, and the first error.
    async fn run_settle(
        &self,
        updates: Vec<Update>,
        deadline: Duration,
    ) -> Option<(Vec<Update>, StateError)> {
        if updates.is_empty() {
            return None;
        }
        let groups = self.by_slot(updates, |u| &u.key);
        let calls = groups.iter().map(|group| {
            let mut inv = self.scripts.settle.prepare_invoke();
            for update in group {
                update.push(&mut inv);
            }
            self.call_for(deadline, |mut conn| async move {
                inv.invoke_async::<i64>(&mut conn).await
            })
        });
        let results = join_all(calls).await;
        let mut failed: Option<(Vec<Update>, StateError)> = None;
        for (group, result) in groups.into_iter().zip(results) {
            if let Err(e) = result {
                match &mut failed {
                    None => failed = Some((group, e)),
                    Some((updates, _)) => updates.extend(group),
                }
            }
        }
        failed
    }

    /// `items` split by the hash slot of their key with Cluster, in their order; one group
    /// otherwise.
    pub(crate) fn by_slot<T>(&self, items: Vec<T>, key: impl Fn(&T) -> &str) -> Vec<Vec<T>> {
        if self.keys.layout() == Layout::Plain {
            return vec![items];
        }
        let mut index: HashMap<Option<Slot>, usize> = HashMap::new();
        let mut groups: Vec<Vec<T>> = Vec::new();
        for item in items {
            let slot = self.keys.slot(key(&item));
            let i = *index.entry(slot).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[i].push(item);
        }
        groups
    }

    /// Settles many admissions at once (the queued settles of the background task): at
    /// saturation this is one round trip, and one script run, for a whole batch instead of one
    /// each (with Cluster, one per slot). The spend of calls that fail is owed.
    async fn settle_batch(&self, settles: &[(Vec<Check>, Option<u64>, Usage)]) {
        let mut updates = Vec::new();
        for (checks, lease, usage) in settles {
            self.settle_updates(&mut updates, checks, *lease, *usage);
        }
        // Off the request path, so it may wait longer than a request's call: a batch that
        // timed out but ran would have its spend owed, and paid, twice.
        let deadline = self.config.call_timeout.max(SETTLE_BATCH_DEADLINE);
        // Failures are counted by `call_within`; leases then expire by their TTL.
        if let Some((failed, _)) = self.run_settle(updates, deadline).await {
            self.owe_updates(&failed);
        }
    }

    /// Keeps the spend of `checks`' budgets to pay when Redis answers again (bounded: beyond
    /// [`MAX_OWED`] counters it is dropped and counted).
    pub fn owe(&self, checks: &[Check], spend_micros: u64) {
        if spend_micros == 0 {
            return;
        }
        let mut owed = self
            .owed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for check in checks {
            let Check::Budget { key, period, .. } = check else {
                continue;
            };
            let period = micros(*period);
            self.owe_counter(&mut owed, key, period, 0, spend_micros);
        }
    }

    /// Owes the spend of settle updates that did not reach Redis.
    fn owe_updates(&self, updates: &[Update]) {
        let mut owed = self
            .owed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for update in updates {
            if let Op::Spend {
                budget,
                period,
                window,
                spend,
            } = &update.op
            {
                self.owe_counter(&mut owed, budget, *period, *window, *spend);
            }
        }
    }

    /// Adds `spend` to a budget's `window` (0: the current one) in `owed`.
    fn owe_counter(
        &self,
        owed: &mut HashMap<OwedCounter, u64>,
        budget: &Arc<str>,
        period: u64,
        window: u64,
        spend: u64,
    ) {
        let window = if window == 0 {
            let unix_us = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_micros() as f64;
            budget_window(unix_us, Duration::from_micros(period)).0
        } else {
            window
        };
        let counter = (budget.clone(), period, window);
        if owed.len() >= MAX_OWED && !owed.contains_key(&counter) {
            Stats::add(&self.stats.spend_dropped);
            return;
        }
        let total = owed.entry(counter).or_default();
        *total = total.saturating_add(spend);
    }

    /// Adds owed spend to its period, if that period is still current (a past period no longer
    /// limits anything), a batch per round trip.
    pub async fn pay_owed(&self) {
        if self.is_down() {
            return;
        }
        let owed: Vec<Update> = {
            let mut owed = self
                .owed
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if owed.is_empty() {
                return;
            }
            owed.drain()
                .map(|((budget, period, window), spend)| Update {
                    key: self.keys.counter(CheckKind::Budget, &budget),
                    op: Op::Spend {
                        budget,
                        period,
                        window,
                        spend: spend.min(MAX_LIMIT),
                    },
                })
                .collect()
        };
        let mut batches = Vec::new();
        let mut rest = owed.into_iter().peekable();
        while rest.peek().is_some() {
            batches.push(rest.by_ref().take(RENEW_BATCH).collect::<Vec<_>>());
        }
        let mut batches = batches.into_iter();
        while let Some(batch) = batches.next() {
            if let Some((failed, _)) = self.run_settle(batch, self.config.call_timeout).await {
                // Keep what is still unpaid. A timed-out batch may have been applied: paying
                // twice is the safer error for a budget than not paying.
                self.owe_updates(&failed);
                for batch in batches {
                    self.owe_updates(&batch);
                }
                return;
            }
        }
    }

    /// Renews every live lease, a batch per round trip (with Cluster, per slot too).
    pub async fn renew_leases(&self) {
        if self.is_down() {
            return;
        }
        let live: Vec<(String, String)> = {
            let leases = self
                .leases
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            leases
                .iter()
                .flat_map(|(n, keys)| keys.iter().map(move |k| (k.clone(), *n)))
                .map(|(k, n)| (k, self.member(n)))
                .collect()
        };
        for batch in live.chunks(RENEW_BATCH) {
            let groups = self.by_slot(batch.iter().collect(), |(key, _)| key);
            let calls = groups.iter().map(|group| {
                let mut inv = self.scripts.renew.prepare_invoke();
                inv.arg(millis(self.config.lease_ttl));
                for (key, member) in group {
                    inv.key(key).arg(member);
                }
                let keys = group.len() as u64;
                async move {
                    let lost = self
                        .call(|mut conn| async move { inv.invoke_async::<u64>(&mut conn).await })
                        .await?;
                    Ok::<_, StateError>((keys, lost.min(keys)))
                }
            });
            let mut failed = false;
            for result in join_all(calls).await {
                match result {
                    Ok((keys, lost)) => {
                        self.stats
                            .leases_renewed
                            .fetch_add(keys - lost, Ordering::Relaxed);
                        self.stats.leases_lost.fetch_add(lost, Ordering::Relaxed);
                    }
                    Err(_) => failed = true,
                }
            }
            if failed {
                return;
            }
        }
    }

    pub async fn idempotency_begin(
        &self,
        record: &RecordId,
        hash: BodyHash,
        in_flight_ttl: Duration,
    ) -> Result<BeginRaw, StateError> {
        let mut inv = self.scripts.begin.prepare_invoke();
        inv.key(self.keys.record(record))
            .arg(&hash.0[..])
            .arg(self.member(record.token))
            .arg(millis(in_flight_ttl));
        let reply: Vec<Vec<u8>> = self
            .call(|mut conn| async move { inv.invoke_async(&mut conn).await })
            .await?;
        match reply.first().map(Vec::as_slice) {
            Some(b"fresh") => Ok(BeginRaw::Fresh),
            Some(b"inflight") => Ok(BeginRaw::InFlight),
            Some(b"mismatch") => Ok(BeginRaw::Mismatch),
            Some(b"done") if reply.len() == 4 => {
                let status = std::str::from_utf8(&reply[1])
                    .ok()
                    .and_then(|s| s.parse::<u16>().ok())
                    .ok_or(StateError::Corrupt("status code"))?;
                let mut reply = reply;
                let body = Bytes::from(std::mem::take(&mut reply[3]));
                Ok(BeginRaw::Done(StoredResponse::decode(
                    status, &reply[2], body,
                )?))
            }
            _ => Err(StateError::Corrupt("idempotency reply")),
        }
    }

    /// True if stored, false if the record was gone.
    pub async fn idempotency_complete(
        &self,
        record: &RecordId,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<bool, StateError> {
        let mut inv = self.scripts.complete.prepare_invoke();
        inv.key(self.keys.record(record))
            .arg(self.member(record.token))
            .arg(response.status.as_u16())
            .arg(response.encode_headers())
            .arg(&response.body[..])
            .arg(millis(ttl));
        let stored: i64 = self
            .call(|mut conn| async move { inv.invoke_async(&mut conn).await })
            .await?;
        Ok(stored == 1)
    }

    pub async fn idempotency_release(&self, record: &RecordId) -> Result<(), StateError> {
        let mut inv = self.scripts.release.prepare_invoke();
        inv.key(self.keys.record(record))
            .arg(self.member(record.token));
        self.call(|mut conn| async move { inv.invoke_async::<i64>(&mut conn).await })
            .await
            .map(drop)
    }

    /// Runs a batch of queued jobs: the settles as one script call, the releases pipelined
    /// beside it.
    async fn run_jobs(&self, jobs: impl Iterator<Item = Job>) {
        let mut settles = Vec::new();
        let mut releases = Vec::new();
        for job in jobs {
            match job {
                Job::Settle {
                    checks,
                    lease,
                    usage,
                } => settles.push((checks, lease, usage)),
                Job::Release { record } => releases.push(record),
            }
        }
        // Failures are counted by `call`; records then expire by their in-flight TTL.
        let releases = join_all(releases.iter().map(|r| self.idempotency_release(r)));
        futures_util::future::join(self.settle_batch(&settles), releases).await;
    }
}

/// The store's one background task: runs queued settles and releases (up to [`JOB_BATCH`] at
/// once: the settles in one script call, the releases pipelined), renews live leases every
/// third of their TTL, probes Redis while it is down or (Sentinel, Cluster) not connected,
/// looks the Sentinel primary up again as soon as a call loses it and asks the sentinels every
/// probe interval whether it moved, and pays owed spend once Redis is up. It ends when the store is dropped (its queue closes), after running what was
/// queued.
pub(crate) async fn background(backend: Arc<RedisBackend>, mut jobs: mpsc::Receiver<Job>) {
    let mut renew = tokio::time::interval(backend.config.lease_ttl / 3);
    renew.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut probe = tokio::time::interval(backend.config.probe_interval);
    probe.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut batch = Vec::with_capacity(JOB_BATCH);
    loop {
        tokio::select! {
            n = jobs.recv_many(&mut batch, JOB_BATCH) => {
                if n == 0 {
                    break;
                }
                backend.run_jobs(batch.drain(..)).await;
            }
            _ = renew.tick() => backend.renew_leases().await,
            // A call lost the Sentinel primary: look it up now, not at the next tick.
            () = backend.link.lost() => {
                backend.probe().await;
            }
            // Always armed: a precondition would only be looked at when another branch wakes
            // the loop, which can be a lease renewal tens of seconds later.
            _ = probe.tick() => {
                if backend.wants_probe() {
                    if !backend.probe().await {
                        continue;
                    }
                } else if backend.link.primary_moved().await {
                    // The old primary is still up (a planned failover, a partition): move
                    // before Sentinel demotes it, which throws away what it took meanwhile.
                    backend.probe().await;
                }
                backend.pay_owed().await;
            }
        }
    }
}

/// The key layout of a config's topology: tagged with Cluster, plain otherwise (the layout
/// from before Cluster support, so an upgrade keeps its counters).
fn layout_of(config: &RedisConfig) -> Result<Layout, ConfigError> {
    Ok(match RedisUrl::parse(&config.url)?.topology {
        Topology::Cluster => Layout::Tagged,
        Topology::Single | Topology::Sentinel { .. } => Layout::Plain,
    })
}
