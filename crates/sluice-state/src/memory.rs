//! The in-memory backend: limits and idempotency records of this process. It is the whole store
//! with the memory backend, and the fail-open fallback of the Redis backend.
//!
//! Limits live in shards (a mutex over a few hash maps each); an admission locks the shards of
//! its keys in index order, so it is all-or-nothing without a global lock. Memory is bounded:
//! each shard drops entries that no longer matter every `sweep_interval` (a full bucket, no
//! lease, a past budget period), and live entries are capped by `max_entries`.

use std::collections::hash_map::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hashbrown::HashTable;
use tokio::time::Instant;

use crate::check::{Check, CheckKind, Quota, Refusal, RefusalReason, Usage, MAX_CHECKS, MAX_LIMIT};
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
        let unix_us = self.start_unix_us + micros_f64(instant - self.start);
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

/// The state of one counter.
#[derive(Clone, Copy, Debug)]
enum Value {
    /// Rate and tokens: the GCRA's theoretical arrival time.
    Tat(f64),
    /// Concurrency: leases held.
    Leases(u64),
    /// Budget: spend in a period.
    Spend(Spend),
}

/// One counter. The hash is kept so the table never hashes a key twice.
#[derive(Debug)]
struct Slot {
    hash: u64,
    kind: CheckKind,
    key: Arc<str>,
    value: Value,
}

#[derive(Debug, Default)]
struct Shard {
    table: HashTable<Slot>,
    next_sweep_us: f64,
}

/// The gateway passes the same `Arc` for a key on every request: comparing pointers first
/// skips reading the key's bytes (a cache miss with many keys).
fn same_key(slot: &Slot, kind: CheckKind, key: &Arc<str>) -> bool {
    slot.kind == kind && (Arc::ptr_eq(&slot.key, key) || *slot.key == **key)
}

impl Shard {
    fn get(&self, hash: u64, check: &Check) -> Option<Value> {
        let (kind, key) = (check.kind(), check.key());
        self.table
            .find(hash, |s| same_key(s, kind, key))
            .map(|s| s.value)
    }

    /// Sets a counter; true if it is new.
    fn set(&mut self, hash: u64, check: &Check, value: Value) -> bool {
        let (kind, key) = (check.kind(), check.key());
        match self
            .table
            .entry(hash, |s| same_key(s, kind, key), |s| s.hash)
        {
            hashbrown::hash_table::Entry::Occupied(mut e) => {
                e.get_mut().value = value;
                false
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(Slot {
                    hash,
                    kind,
                    key: key.clone(),
                    value,
                });
                true
            }
        }
    }

    /// Removes a counter; true if it was there.
    fn remove(&mut self, hash: u64, check: &Check) -> bool {
        let (kind, key) = (check.kind(), check.key());
        match self.table.find_entry(hash, |s| same_key(s, kind, key)) {
            Ok(e) => {
                e.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Drops what equals "no entry"; returns how many were dropped.
    fn sweep(&mut self, now: Now) -> usize {
        let before = self.table.len();
        self.table.retain(|s| match s.value {
            Value::Tat(tat) => tat > now.rel_us,
            Value::Leases(n) => n > 0,
            Value::Spend(s) => s.end_unix_us > now.unix_us,
        });
        before - self.table.len()
    }
}

fn period_us(period: Duration) -> f64 {
    micros_f64(period)
}

/// Whole µs of `d` as a double, without the `u128` of `as_micros` (its conversion to `f64`
/// is a slow library call, three per check). Exact below 2^53 µs (285 years).
fn micros_f64(d: Duration) -> f64 {
    d.as_secs() as f64 * 1e6 + f64::from(d.subsec_micros())
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

/// The shard of a counter: bits of its hash that neither the table's bucket index (low bits)
/// nor its control tag (top 7 bits) use.
fn shard_of(hash: u64) -> usize {
    ((hash >> 40) as usize) % SHARDS
}

/// The shards an operation holds, locked in index order (so two operations never deadlock).
struct Locked<'a> {
    guards: [Option<MutexGuard<'a, Shard>>; SHARDS],
}

impl Locked<'_> {
    fn shard(&mut self, hash: u64) -> &mut Shard {
        self.guards[shard_of(hash)]
            .as_deref_mut()
            .expect("the shard of every check is locked")
    }
}

/// Limits in memory.
pub(crate) struct MemoryLimits {
    shards: Box<[Mutex<Shard>]>,
    /// foldhash, seeded per process: counter names come from the config, not from clients,
    /// and SipHash cost ~20 ns per check, twice per request (admit and settle).
    hasher: foldhash::fast::RandomState,
    entries: AtomicUsize,
    max_entries: usize,
    sweep_us: f64,
    clock: Clock,
}

impl std::fmt::Debug for MemoryLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLimits")
            .field("entries", &self.entries.load(Ordering::Relaxed))
            .field("max_entries", &self.max_entries)
            .finish_non_exhaustive()
    }
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
            hasher: foldhash::fast::RandomState::default(),
            entries: AtomicUsize::new(0),
            max_entries: config.max_entries,
            sweep_us: period_us(config.sweep_interval),
            clock: Clock::new(),
        }
    }

    /// Hashes every check once; locks their shards.
    fn lock_for(&self, checks: &[Check]) -> Result<(Locked<'_>, [u64; MAX_CHECKS]), StateError> {
        if checks.len() > MAX_CHECKS {
            return Err(StateError::InvalidCheck("more than 16 checks"));
        }
        let mut hashes = [0u64; MAX_CHECKS];
        let mut mask = 0u32;
        for (h, check) in hashes.iter_mut().zip(checks) {
            *h = self.hasher.hash_one((check.kind() as u8, &**check.key()));
            mask |= 1 << shard_of(*h);
        }
        let mut locked = Locked {
            guards: std::array::from_fn(|_| None),
        };
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            locked.guards[i] = Some(lock(&self.shards[i]));
            mask &= mask - 1;
        }
        Ok((locked, hashes))
    }

    fn sweep_due(&self, locked: &mut Locked<'_>, now: Now) {
        for shard in locked.guards.iter_mut().flatten() {
            if now.rel_us >= shard.next_sweep_us {
                let dropped = shard.sweep(now);
                self.entries.fetch_sub(dropped, Ordering::Relaxed);
                shard.next_sweep_us = now.rel_us + self.sweep_us;
            }
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

    fn verdict(value: Option<Value>, check: &Check, now: Now, read_only: bool) -> Verdict {
        let kind = check.kind();
        match check {
            Check::Rate { limit, period, .. } | Check::Tokens { limit, period, .. } => {
                let cost = match check {
                    Check::Tokens { reserve, .. } => *reserve,
                    _ => 1,
                };
                let tat = match value {
                    Some(Value::Tat(t)) => Some(t),
                    _ => None,
                };
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
                    adds_entry: value.is_none() && cost > 0,
                }
            }
            Check::Concurrency { limit, .. } => {
                let n = match value {
                    Some(Value::Leases(n)) => n,
                    _ => 0,
                };
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
                    adds_entry: value.is_none(),
                }
            }
            Check::Budget {
                limit_micros,
                period,
                ..
            } => {
                let (window, end) = budget_window(now.unix_us, *period);
                let spend = match value {
                    Some(Value::Spend(s)) if s.window == window => s.spend,
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

    fn try_admit(&self, checks: &[Check]) -> Result<Result<Vec<Quota>, Refusal>, StateError> {
        let now = self.clock.now();
        let (mut locked, hashes) = self.lock_for(checks)?;
        self.sweep_due(&mut locked, now);
        let mut quotas = Vec::with_capacity(checks.len());
        let mut values = [None; MAX_CHECKS];
        let mut refused = None;
        let mut new_entries = 0;
        for (i, check) in checks.iter().enumerate() {
            values[i] = locked.shard(hashes[i]).get(hashes[i], check);
            let v = Self::verdict(values[i], check, now, false);
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
                .map(|(i, c)| Self::verdict(values[i], c, now, true).quota)
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
            let hash = hashes[i];
            // Re-read: two checks of one admission may share a counter.
            let value = locked.shard(hash).get(hash, check);
            let new = match check {
                Check::Rate { limit, period, .. } => take(value, *limit, *period, 1, now),
                Check::Tokens {
                    limit,
                    period,
                    reserve,
                    ..
                } => take(value, *limit, *period, *reserve, now),
                Check::Concurrency { .. } => match value {
                    Some(Value::Leases(n)) => Some(Value::Leases(n + 1)),
                    _ => Some(Value::Leases(1)),
                },
                Check::Budget { .. } => None,
            };
            if let Some(new) = new {
                if locked.shard(hash).set(hash, check, new) {
                    self.entries.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(Ok(quotas))
    }

    /// The numbers of `checks` without taking anything.
    ///
    /// # Errors
    /// More than [`MAX_CHECKS`] checks.
    pub fn quotas(&self, checks: &[Check]) -> Result<Vec<Quota>, StateError> {
        let now = self.clock.now();
        let (mut locked, hashes) = self.lock_for(checks)?;
        Ok(checks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let value = locked.shard(hashes[i]).get(hashes[i], c);
                Self::verdict(value, c, now, true).quota
            })
            .collect())
    }

    /// Ends an admission: reconciles token reservations, releases leases, adds spend.
    pub fn settle(&self, checks: &[Check], usage: Usage) {
        let now = self.clock.now();
        let Ok((mut locked, hashes)) = self.lock_for(checks) else {
            return; // Never admitted: too many checks.
        };
        for (i, check) in checks.iter().enumerate() {
            let hash = hashes[i];
            let shard = locked.shard(hash);
            let value = shard.get(hash, check);
            let new = match check {
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
                    let gcra = Gcra {
                        limit: *limit,
                        period_us: period_us(*period),
                    };
                    let tat = match value {
                        Some(Value::Tat(t)) => Some(t),
                        _ => None,
                    };
                    gcra.adjust(tat, now.rel_us, delta).map(Value::Tat)
                }
                Check::Concurrency { .. } => match value {
                    Some(Value::Leases(n)) if n > 1 => Some(Value::Leases(n - 1)),
                    _ => None,
                },
                Check::Budget { period, .. } => {
                    if usage.spend_micros == 0 {
                        continue;
                    }
                    let (window, end_unix_us) = budget_window(now.unix_us, *period);
                    let before = match value {
                        Some(Value::Spend(s)) if s.window == window => s.spend,
                        _ => 0,
                    };
                    Some(Value::Spend(Spend {
                        window,
                        spend: before.saturating_add(usage.spend_micros),
                        end_unix_us,
                    }))
                }
            };
            match new {
                Some(new) => {
                    if shard.set(hash, check, new) {
                        self.entries.fetch_add(1, Ordering::Relaxed);
                    }
                }
                None => {
                    if shard.remove(hash, check) {
                        self.entries.fetch_sub(1, Ordering::Relaxed);
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

/// The TAT after taking `cost` units (already decided to pass); `None`: nothing to store.
fn take(value: Option<Value>, limit: u64, period: Duration, cost: u64, now: Now) -> Option<Value> {
    if cost == 0 {
        return None;
    }
    let gcra = Gcra {
        limit,
        period_us: period_us(period),
    };
    let tat = match value {
        Some(Value::Tat(t)) => Some(t),
        _ => None,
    };
    gcra.adjust(tat, now.rel_us, cost as i64).map(Value::Tat)
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
pub(crate) struct MemoryRecords {
    records: Mutex<Records>,
    config: IdempotencyConfig,
    sweep_interval: Duration,
}

impl std::fmt::Debug for MemoryRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the records: stored responses may hold anything.
        let records = lock(&self.records);
        f.debug_struct("MemoryRecords")
            .field("records", &records.map.len())
            .field("bytes", &records.bytes)
            .finish_non_exhaustive()
    }
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
        assert_eq!(limits.quotas(&check).unwrap()[0].remaining, 10);
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
        assert_eq!(limits.quotas(&[rate]).unwrap()[0].remaining, 99);
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
        assert_eq!(limits.quotas(&[tokens(0)]).unwrap()[0].remaining, 900);
        assert!(limits.admit(&[tokens(900)]).unwrap().is_ok());
        // Used 1900 where 900 were reserved.
        limits.settle(
            &[tokens(900)],
            Usage {
                tokens: Some(1900),
                spend_micros: 0,
            },
        );
        let q = limits.quotas(&[tokens(0)]).unwrap()[0];
        assert_eq!((q.remaining, q.used), (0, 2000));
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(limits.quotas(&[tokens(0)]).unwrap()[0].remaining, 1000);
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
        // Expired entries make room, wherever they are.
        tokio::time::advance(Duration::from_secs(2)).await;
        for k in ["d", "e", "f"] {
            assert!(limits.admit(&rate(k)).unwrap().is_ok());
        }
        assert_eq!(limits.entries(), 3);
    }

    fn record(name: &str, token: u64) -> RecordId {
        RecordId {
            name: name.into(),
            token,
        }
    }

    fn reply(len: usize) -> StoredResponse {
        StoredResponse {
            status: http::StatusCode::OK,
            headers: Vec::new(),
            body: bytes::Bytes::from(vec![b'x'; len]),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn records_expire_and_stay_within_their_bounds() {
        let records = MemoryRecords::new(
            &IdempotencyConfig {
                in_flight_ttl: Duration::from_secs(10),
                max_records: 2,
                max_total_bytes: 100,
                ..IdempotencyConfig::default()
            },
            &MemoryConfig::default(),
        );
        let hash = BodyHash([0; 32]);
        // An owner that never finishes blocks duplicates for the in-flight TTL only.
        assert!(matches!(
            records.begin(&record("a", 1), hash),
            Ok(BeginRaw::Fresh)
        ));
        assert!(matches!(
            records.begin(&record("a", 2), hash),
            Ok(BeginRaw::InFlight)
        ));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(matches!(
            records.begin(&record("a", 3), hash),
            Ok(BeginRaw::Fresh)
        ));
        // The first owner lost it.
        let lost = records.complete(&record("a", 1), reply(10), Duration::from_secs(5));
        assert_eq!(lost, Completion::Lost);
        let stored = records.complete(&record("a", 3), reply(60), Duration::from_secs(5));
        assert_eq!(stored, Completion::Stored);
        // Count bound.
        assert!(matches!(
            records.begin(&record("b", 4), hash),
            Ok(BeginRaw::Fresh)
        ));
        assert!(matches!(
            records.begin(&record("c", 5), hash),
            Err(StateError::MemoryFull(2))
        ));
        // Byte bound: 60 + 60 > 100, so not stored, and released.
        let full = records.complete(&record("b", 4), reply(60), Duration::from_secs(5));
        assert_eq!(full, Completion::TooLarge);
        assert!(matches!(
            records.begin(&record("b", 6), hash),
            Ok(BeginRaw::Fresh)
        ));
        // The replay expires with its TTL, freeing its bytes.
        assert!(matches!(
            records.begin(&record("a", 7), hash),
            Ok(BeginRaw::Done(_))
        ));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(matches!(
            records.begin(&record("a", 8), hash),
            Ok(BeginRaw::Fresh)
        ));
        records.release(&record("b", 6));
        let stored = records.complete(&record("a", 8), reply(100), Duration::from_secs(5));
        assert_eq!(stored, Completion::Stored);
    }
}
