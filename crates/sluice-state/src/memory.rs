//! The in-memory backend: limits and idempotency records of this process. It is the whole store
//! with the memory backend, and the fail-open fallback of the Redis backend.
//!
//! Limits live in shards (a mutex over a few hash maps each); an admission locks the shards of
//! its keys in index order, so it is all-or-nothing without a global lock. Memory is bounded:
//! each shard drops entries that no longer matter every `sweep_interval` (a full bucket, no
//! lease, a past budget period), and live entries are capped by `max_entries`.

use std::collections::hash_map::{Entry, HashMap, RandomState};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::check::{Check, CheckKind, Quota, Refusal, RefusalReason, Usage};
use crate::gcra::{Gcra, Outcome, TIME_BASE_SECS};
use crate::idempotency::{BeginRaw, BodyHash, Completion, RecordId, StoredResponse};
use crate::{IdempotencyConfig, MemoryConfig, StateError};

const SHARDS: usize = 32;

/// The retry hint of a full concurrency limit: slots free when requests end, not at a time.
pub(crate) const CONCURRENCY_RETRY_HINT: Duration = Duration::from_secs(1);

/// The time of the in-memory backend: Unix time read once, then advanced by tokio's clock, so
/// paused-clock tests control it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    start: Instant,
    start_unix_us: f64,
}

/// One reading of [`Clock`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Now {
    /// µs since [`TIME_BASE_SECS`], for GCRA.
    pub rel_us: f64,
    /// µs since the Unix epoch, for budget periods.
    pub unix_us: f64,
}

impl Clock {
    pub fn new() -> Self {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Clock {
            start: Instant::now(),
            start_unix_us: unix.as_micros() as f64,
        }
    }

    pub fn now(&self) -> Now {
        let instant = Instant::now();
        let unix_us = self.start_unix_us + (instant - self.start).as_micros() as f64;
        Now {
            rel_us: unix_us - (TIME_BASE_SECS * 1_000_000) as f64,
            unix_us,
        }
    }
}

/// A budget's spend in one period.
#[derive(Clone, Copy, Debug)]
struct Spend {
    window: u64,
    spend: u64,
    /// End of the window, Unix µs: the entry is swept after it.
    end_unix_us: f64,
}

#[derive(Debug, Default)]
struct Shard {
    rate: HashMap<Arc<str>, f64>,
    tokens: HashMap<Arc<str>, f64>,
    leases: HashMap<Arc<str>, u64>,
    budgets: HashMap<Arc<str>, Spend>,
    next_sweep_us: f64,
}

impl Shard {
    fn len(&self) -> usize {
        self.rate.len() + self.tokens.len() + self.leases.len() + self.budgets.len()
    }

    /// Drops what equals "no entry"; returns how many were dropped.
    fn sweep(&mut self, now: Now) -> usize {
        let before = self.len();
        self.rate.retain(|_, tat| *tat > now.rel_us);
        self.tokens.retain(|_, tat| *tat > now.rel_us);
        self.leases.retain(|_, n| *n > 0);
        self.budgets.retain(|_, s| s.end_unix_us > now.unix_us);
        before - self.len()
    }
}

fn period_us(period: Duration) -> f64 {
    period.as_micros() as f64
}

/// The budget window containing `unix_us`, and its end.
pub(crate) fn budget_window(unix_us: f64, period: Duration) -> (u64, f64) {
    let p = period_us(period);
    let window = (unix_us / p).floor();
    (window as u64, (window + 1.0) * p)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave a map half-updated in a way that matters more
    // than refusing every later request would.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Limits in memory.
#[derive(Debug)]
pub(crate) struct MemoryLimits {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    entries: AtomicUsize,
    max_entries: usize,
    sweep_us: f64,
    clock: Clock,
}

/// A decision before anything is applied.
struct Verdict {
    quota: Quota,
    refusal: Option<(RefusalReason, Option<Duration>)>,
    /// Applying this check adds an entry.
    adds_entry: bool,
}

impl MemoryLimits {
    pub fn new(config: &MemoryConfig) -> Self {
        MemoryLimits {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: RandomState::new(),
            entries: AtomicUsize::new(0),
            max_entries: config.max_entries,
            sweep_us: period_us(config.sweep_interval),
            clock: Clock::new(),
        }
    }

    fn shard_of(&self, check: &Check) -> usize {
        (self.hasher.hash_one((check.kind() as u8, &**check.key())) as usize) % SHARDS
    }

    /// Locks the shards of `checks` in index order; returns the guards and, per check, the
    /// position of its guard.
    fn lock_for(&self, checks: &[Check]) -> (Vec<MutexGuard<'_, Shard>>, Vec<usize>) {
        let of: Vec<usize> = checks.iter().map(|c| self.shard_of(c)).collect();
        let mut order = of.clone();
        order.sort_unstable();
        order.dedup();
        let positions = of
            .iter()
            .map(|s| order.partition_point(|o| o < s))
            .collect();
        let guards = order.iter().map(|&i| lock(&self.shards[i])).collect();
        (guards, positions)
    }

    fn sweep_due(&self, guards: &mut [MutexGuard<'_, Shard>], now: Now) {
        for shard in guards.iter_mut() {
            if now.rel_us >= shard.next_sweep_us {
                let dropped = shard.sweep(now);
                self.entries.fetch_sub(dropped, Ordering::Relaxed);
                shard.next_sweep_us = now.rel_us + self.sweep_us;
            }
        }
    }

    fn verdict(shard: &Shard, check: &Check, now: Now, read_only: bool) -> Verdict {
        let kind = check.kind();
        match check {
            Check::Rate { key, limit, period }
            | Check::Tokens {
                key, limit, period, ..
            } => {
                let cost = match check {
                    Check::Tokens { reserve, .. } => *reserve,
                    _ => 1,
                };
                let map = if kind == CheckKind::Requests {
                    &shard.rate
                } else {
                    &shard.tokens
                };
                let tat = map.get(&**key).copied();
                let gcra = Gcra {
                    limit: *limit,
                    period_us: period_us(*period),
                };
                let (numbers, refusal) = match gcra.decide(tat, now.rel_us, cost) {
                    _ if read_only => (gcra.numbers(tat, now.rel_us), None),
                    Outcome::Allowed { numbers, .. } => (numbers, None),
                    Outcome::Limited { retry_us, numbers } => (
                        numbers,
                        Some((
                            RefusalReason::Limited,
                            Some(Duration::from_micros(retry_us.ceil() as u64)),
                        )),
                    ),
                    Outcome::TooLarge { numbers } => {
                        (numbers, Some((RefusalReason::TooLarge, None)))
                    }
                };
                Verdict {
                    quota: Quota {
                        kind,
                        limit: *limit,
                        remaining: numbers.remaining,
                        used: numbers.used,
                        reset_after: Duration::from_micros(numbers.reset_us.ceil() as u64),
                    },
                    refusal,
                    adds_entry: tat.is_none() && cost > 0,
                }
            }
            Check::Concurrency { key, limit } => {
                let held = shard.leases.get(&**key).copied();
                let n = held.unwrap_or(0);
                let full = n >= *limit;
                // An admission counts the slot it takes; a read does not.
                let taking = u64::from(!full && !read_only);
                Verdict {
                    quota: Quota {
                        kind,
                        limit: *limit,
                        remaining: limit.saturating_sub(n + taking),
                        used: n + taking,
                        reset_after: Duration::ZERO,
                    },
                    refusal: full.then_some((RefusalReason::Limited, Some(CONCURRENCY_RETRY_HINT))),
                    adds_entry: held.is_none(),
                }
            }
            Check::Budget {
                key,
                limit_micros,
                period,
            } => {
                let (window, end) = budget_window(now.unix_us, *period);
                let spend = match shard.budgets.get(&**key) {
                    Some(s) if s.window == window => s.spend,
                    _ => 0,
                };
                let reset_after = Duration::from_micros((end - now.unix_us).ceil() as u64);
                Verdict {
                    quota: Quota {
                        kind,
                        limit: *limit_micros,
                        remaining: limit_micros.saturating_sub(spend),
                        used: spend,
                        reset_after,
                    },
                    refusal: (spend >= *limit_micros)
                        .then_some((RefusalReason::BudgetExceeded, Some(reset_after))),
                    adds_entry: false,
                }
            }
        }
    }

    /// Passes every check and takes what they cost, or takes nothing and says why.
    ///
    /// # Errors
    /// [`StateError::MemoryFull`] when new entries would exceed `max_entries`.
    pub fn admit(&self, checks: &[Check]) -> Result<Result<Vec<Quota>, Refusal>, StateError> {
        match self.try_admit(checks) {
            Err(StateError::MemoryFull(_)) => {
                // Entries to drop may sit in shards this admission did not lock; locking them
                // now could deadlock with another admission, so sweep everything and retry.
                self.sweep_all();
                self.try_admit(checks)
            }
            other => other,
        }
    }

    fn sweep_all(&self) {
        let now = self.clock.now();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            let dropped = shard.sweep(now);
            self.entries.fetch_sub(dropped, Ordering::Relaxed);
            shard.next_sweep_us = now.rel_us + self.sweep_us;
        }
    }

    fn try_admit(&self, checks: &[Check]) -> Result<Result<Vec<Quota>, Refusal>, StateError> {
        let now = self.clock.now();
        let (mut guards, positions) = self.lock_for(checks);
        self.sweep_due(&mut guards, now);
        let mut quotas = Vec::with_capacity(checks.len());
        let mut refused = None;
        let mut new_entries = 0;
        for (i, check) in checks.iter().enumerate() {
            let v = Self::verdict(&guards[positions[i]], check, now, false);
            if refused.is_none() {
                if let Some((reason, retry_after)) = v.refusal {
                    refused = Some((i, reason, retry_after));
                }
            }
            new_entries += usize::from(v.adds_entry);
            quotas.push(v.quota);
        }
        if let Some((index, reason, retry_after)) = refused {
            // Report the numbers as they stand, not as if this admission had passed.
            let quotas = checks
                .iter()
                .enumerate()
                .map(|(i, c)| Self::verdict(&guards[positions[i]], c, now, true).quota)
                .collect();
            return Ok(Err(Refusal {
                index,
                kind: checks[index].kind(),
                reason,
                retry_after,
                quotas,
            }));
        }
        let live = self.entries.load(Ordering::Relaxed);
        if new_entries > 0 && live + new_entries > self.max_entries {
            return Err(StateError::MemoryFull(live));
        }
        for (i, check) in checks.iter().enumerate() {
            let shard = &mut *guards[positions[i]];
            let added = match check {
                Check::Rate { key, limit, period } => {
                    take(&mut shard.rate, key, *limit, *period, 1, now)
                }
                Check::Tokens {
                    key,
                    limit,
                    period,
                    reserve,
                } => take(&mut shard.tokens, key, *limit, *period, *reserve, now),
                Check::Concurrency { key, .. } => match shard.leases.entry(key.clone()) {
                    Entry::Occupied(mut e) => {
                        *e.get_mut() += 1;
                        false
                    }
                    Entry::Vacant(e) => {
                        e.insert(1);
                        true
                    }
                },
                Check::Budget { .. } => false,
            };
            if added {
                self.entries.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(Ok(quotas))
    }

    /// The numbers of `checks` without taking anything.
    pub fn quotas(&self, checks: &[Check]) -> Vec<Quota> {
        let now = self.clock.now();
        let (guards, positions) = self.lock_for(checks);
        checks
            .iter()
            .enumerate()
            .map(|(i, c)| Self::verdict(&guards[positions[i]], c, now, true).quota)
            .collect()
    }

    /// Ends an admission: reconciles token reservations, releases leases, adds spend.
    pub fn settle(&self, checks: &[Check], usage: Usage) {
        let now = self.clock.now();
        let (mut guards, positions) = self.lock_for(checks);
        for (i, check) in checks.iter().enumerate() {
            let shard = &mut *guards[positions[i]];
            match check {
                Check::Rate { .. } => {}
                Check::Tokens {
                    key,
                    limit,
                    period,
                    reserve,
                } => {
                    let Some(actual) = usage.tokens else { continue };
                    let delta = actual.min(crate::check::MAX_LIMIT) as i64 - *reserve as i64;
                    if delta == 0 {
                        continue;
                    }
                    let gcra = Gcra {
                        limit: *limit,
                        period_us: period_us(*period),
                    };
                    let tat = shard.tokens.get(&**key).copied();
                    match gcra.adjust(tat, now.rel_us, delta) {
                        Some(new_tat) => {
                            if shard.tokens.insert(key.clone(), new_tat).is_none() {
                                self.entries.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        None => {
                            if shard.tokens.remove(&**key).is_some() {
                                self.entries.fetch_sub(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                Check::Concurrency { key, .. } => {
                    if let Some(n) = shard.leases.get_mut(&**key) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            shard.leases.remove(&**key);
                            self.entries.fetch_sub(1, Ordering::Relaxed);
                        }
                    }
                }
                Check::Budget { key, period, .. } => {
                    if usage.spend_micros == 0 {
                        continue;
                    }
                    let (window, end_unix_us) = budget_window(now.unix_us, *period);
                    match shard.budgets.entry(key.clone()) {
                        Entry::Occupied(mut e) => {
                            let s = e.get_mut();
                            if s.window != window {
                                *s = Spend {
                                    window,
                                    spend: 0,
                                    end_unix_us,
                                };
                            }
                            s.spend = s.spend.saturating_add(usage.spend_micros);
                        }
                        Entry::Vacant(e) => {
                            e.insert(Spend {
                                window,
                                spend: usage.spend_micros,
                                end_unix_us,
                            });
                            self.entries.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
    }

    /// Live entries (for tests of the memory bound).
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }
}

/// Takes `cost` units from a GCRA key (already decided to pass); true if the key is new.
fn take(
    map: &mut HashMap<Arc<str>, f64>,
    key: &Arc<str>,
    limit: u64,
    period: Duration,
    cost: u64,
    now: Now,
) -> bool {
    if cost == 0 {
        return false;
    }
    let gcra = Gcra {
        limit,
        period_us: period_us(period),
    };
    let tat = map.get(&**key).copied();
    let new_tat = gcra
        .adjust(tat, now.rel_us, cost as i64)
        .unwrap_or(now.rel_us);
    map.insert(key.clone(), new_tat).is_none()
}

#[derive(Debug)]
enum RecordState {
    InFlight { token: u64 },
    Done(StoredResponse),
}

#[derive(Debug)]
struct Record {
    hash: BodyHash,
    expires: Instant,
    state: RecordState,
}

#[derive(Debug, Default)]
struct Records {
    map: HashMap<Box<str>, Record>,
    /// Bytes of stored responses.
    bytes: usize,
    next_sweep: Option<Instant>,
}

impl Records {
    fn remove(&mut self, name: &str) {
        if let Some(Record {
            state: RecordState::Done(r),
            ..
        }) = self.map.remove(name)
        {
            self.bytes -= r.stored_len();
        }
    }

    fn sweep(&mut self, now: Instant) {
        let mut freed = 0;
        self.map.retain(|_, r| {
            let keep = r.expires > now;
            if let (false, RecordState::Done(resp)) = (keep, &r.state) {
                freed += resp.stored_len();
            }
            keep
        });
        self.bytes -= freed;
    }
}

/// Idempotency records in memory, bounded in count and bytes.
#[derive(Debug)]
pub(crate) struct MemoryRecords {
    records: Mutex<Records>,
    config: IdempotencyConfig,
    sweep_interval: Duration,
}

impl MemoryRecords {
    pub fn new(config: &IdempotencyConfig, memory: &MemoryConfig) -> Self {
        MemoryRecords {
            records: Mutex::new(Records::default()),
            config: config.clone(),
            sweep_interval: memory.sweep_interval,
        }
    }

    /// # Errors
    /// [`StateError::MemoryFull`] when `max_records` are live.
    pub fn begin(&self, id: &RecordId, hash: BodyHash) -> Result<BeginRaw, StateError> {
        let now = Instant::now();
        let mut records = lock(&self.records);
        if records.next_sweep.is_none_or(|t| now >= t) {
            records.sweep(now);
            records.next_sweep = Some(now + self.sweep_interval);
        }
        if let Some(r) = records.map.get(&id.name) {
            if r.expires > now {
                return Ok(if r.hash != hash {
                    BeginRaw::Mismatch
                } else {
                    match &r.state {
                        RecordState::InFlight { .. } => BeginRaw::InFlight,
                        RecordState::Done(resp) => BeginRaw::Done(resp.clone()),
                    }
                });
            }
            records.remove(&id.name);
        }
        if records.map.len() >= self.config.max_records {
            records.sweep(now);
            if records.map.len() >= self.config.max_records {
                return Err(StateError::MemoryFull(records.map.len()));
            }
        }
        records.map.insert(
            id.name.clone(),
            Record {
                hash,
                expires: now + self.config.in_flight_ttl,
                state: RecordState::InFlight { token: id.token },
            },
        );
        Ok(BeginRaw::Fresh)
    }

    pub fn complete(&self, id: &RecordId, response: StoredResponse, ttl: Duration) -> Completion {
        let now = Instant::now();
        let mut records = lock(&self.records);
        let owned = matches!(
            records.map.get(&id.name),
            Some(Record { state: RecordState::InFlight { token }, expires, .. })
                if *token == id.token && *expires > now
        );
        if !owned {
            return Completion::Lost;
        }
        let len = response.stored_len();
        if len > self.config.max_response_bytes || records.bytes + len > self.config.max_total_bytes
        {
            records.remove(&id.name);
            return Completion::TooLarge;
        }
        records.bytes += len;
        if let Some(r) = records.map.get_mut(&id.name) {
            r.expires = now + ttl;
            r.state = RecordState::Done(response);
        }
        Completion::Stored
    }

    pub fn release(&self, id: &RecordId) {
        let mut records = lock(&self.records);
        if matches!(
            records.map.get(&id.name),
            Some(Record { state: RecordState::InFlight { token }, .. }) if *token == id.token
        ) {
            records.remove(&id.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[tokio::test(start_paused = true)]
    async fn gcra_on_a_paused_clock_refills_one_request_per_interval() {
        let limits = MemoryLimits::new(&MemoryConfig::default());
        let check = [Check::Rate {
            key: key("k"),
            limit: 10,
            period: Duration::from_secs(1),
        }];
        for _ in 0..10 {
            assert!(limits.admit(&check).unwrap().is_ok());
        }
        let refusal = limits.admit(&check).unwrap().unwrap_err();
        assert_eq!(refusal.retry_after, Some(Duration::from_millis(100)));
        assert_eq!(refusal.quotas[0].remaining, 0);
        assert_eq!(refusal.quotas[0].reset_after, Duration::from_secs(1));
        tokio::time::advance(Duration::from_millis(99)).await;
        assert!(limits.admit(&check).unwrap().is_err());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(limits.admit(&check).unwrap().is_ok());
        assert!(limits.admit(&check).unwrap().is_err());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(limits.quotas(&check)[0].remaining, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn refused_admissions_take_nothing_from_any_check() {
        let limits = MemoryLimits::new(&MemoryConfig::default());
        let rate = Check::Rate {
            key: key("k"),
            limit: 100,
            period: Duration::from_secs(60),
        };
        let tokens = Check::Tokens {
            key: key("k"),
            limit: 1000,
            period: Duration::from_secs(60),
            reserve: 600,
        };
        let checks = [rate.clone(), tokens];
        assert!(limits.admit(&checks).unwrap().is_ok());
        let refusal = limits.admit(&checks).unwrap().unwrap_err();
        assert_eq!((refusal.index, refusal.kind), (1, CheckKind::Tokens));
        // 6 s per 100 tokens: 200 short.
        assert_eq!(refusal.retry_after, Some(Duration::from_secs(12)));
        assert_eq!(limits.quotas(&[rate])[0].remaining, 99);
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_reconcile_with_actual_usage() {
        let limits = MemoryLimits::new(&MemoryConfig::default());
        let tokens = |reserve| Check::Tokens {
            key: key("k"),
            limit: 1000,
            period: Duration::from_secs(60),
            reserve,
        };
        assert!(limits.admit(&[tokens(800)]).unwrap().is_ok());
        limits.settle(
            &[tokens(800)],
            Usage {
                tokens: Some(100),
                spend_micros: 0,
            },
        );
        assert_eq!(limits.quotas(&[tokens(0)])[0].remaining, 900);
        assert!(limits.admit(&[tokens(900)]).unwrap().is_ok());
        // Used 1900 where 900 were reserved.
        limits.settle(
            &[tokens(900)],
            Usage {
                tokens: Some(1900),
                spend_micros: 0,
            },
        );
        let q = limits.quotas(&[tokens(0)])[0];
        assert_eq!((q.remaining, q.used), (0, 2000));
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(limits.quotas(&[tokens(0)])[0].remaining, 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn sweeps_drop_entries_that_no_longer_matter_and_the_cap_holds() {
        let limits = MemoryLimits::new(&MemoryConfig {
            max_entries: 3,
            sweep_interval: Duration::from_secs(1),
        });
        let rate = |k: &str| {
            [Check::Rate {
                key: key(k),
                limit: 10,
                period: Duration::from_secs(1),
            }]
        };
        for k in ["a", "b", "c"] {
            assert!(limits.admit(&rate(k)).unwrap().is_ok());
        }
        assert!(matches!(
            limits.admit(&rate("d")),
            Err(StateError::MemoryFull(3))
        ));
        // A known key still passes at the cap.
        assert!(limits.admit(&rate("a")).unwrap().is_ok());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(limits.admit(&rate("d")).unwrap().is_ok());
        assert_eq!(limits.entries(), 1);
    }
}
