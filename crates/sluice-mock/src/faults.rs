//! Server-wide state of the policy faults: the `fail_first` counters and the clock that
//! `fail_for_ms` and `flap` run on. `/__mock/reset` restarts both.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use tokio::time::Instant;

use crate::knobs::Behavior;

/// How many distinct `fail_first` keys are remembered; a new key beyond that clears them all
/// (a test uses a handful; this only keeps a runaway client from growing the map).
const MAX_KEYS: usize = 10_000;

/// The counters and clock of `fail_first`, `fail_for_ms` and `flap`.
#[derive(Debug)]
pub(crate) struct FaultState {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    epoch: Instant,
    counters: HashMap<String, u64>,
}

impl FaultState {
    pub(crate) fn new() -> Self {
        FaultState {
            inner: Mutex::new(Inner {
                epoch: Instant::now(),
                counters: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means a panic elsewhere already failed a test.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Zeroes the counters and restarts the clock.
    pub(crate) fn reset(&self) {
        let mut inner = self.lock();
        inner.epoch = Instant::now();
        inner.counters.clear();
    }

    /// Which trigger, if any, fails this request. `header` is the request's `x-mock` value,
    /// the default `fail_first` key. Every request with `fail_first` counts, failed or not.
    pub(crate) fn trigger(&self, b: &Behavior, header: &str) -> Option<&'static str> {
        if b.fail_first.is_none() && b.fail_for.is_none() && b.flap.is_none() {
            // The common case takes no lock: a load test's requests do not contend here.
            return None;
        }
        let mut inner = self.lock();
        if let Some(n) = b.fail_first {
            let key = b.fail_key.as_deref().unwrap_or(header);
            if !inner.counters.contains_key(key) && inner.counters.len() >= MAX_KEYS {
                inner.counters.clear();
            }
            let count = inner.counters.entry(key.to_string()).or_insert(0);
            *count += 1;
            if *count <= u64::from(n) {
                return Some("fail_first");
            }
        }
        let age = inner.epoch.elapsed();
        if b.fail_for.is_some_and(|t| age < t) {
            return Some("fail_for_ms");
        }
        if let Some((up, down)) = b.flap {
            let period = (up + down).as_nanos();
            if age.as_nanos() % period >= up.as_nanos() {
                return Some("flap");
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn fail_first_counts_per_key_and_reset_restarts() {
        let f = FaultState::new();
        let b = Behavior::default().with_spec("fail_first=2").unwrap();
        let outcomes: Vec<_> = (0..4).map(|_| f.trigger(&b, "k").is_some()).collect();
        assert_eq!(outcomes, [true, true, false, false]);
        assert!(
            f.trigger(&b, "other").is_some(),
            "another key has its own count"
        );
        let keyed = Behavior::default()
            .with_spec("fail_first=1, fail_key=x")
            .unwrap();
        assert!(f.trigger(&keyed, "a").is_some());
        assert!(
            f.trigger(&keyed, "b").is_none(),
            "fail_key shares one counter"
        );
        f.reset();
        assert!(f.trigger(&b, "k").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn fail_for_and_flap_follow_the_clock() {
        let f = FaultState::new();
        let young = Behavior::default().with_spec("fail_for_ms=100").unwrap();
        let flap = Behavior::default().with_spec("flap=100:50").unwrap();
        assert_eq!(f.trigger(&young, ""), Some("fail_for_ms"));
        assert_eq!(f.trigger(&flap, ""), None);
        tokio::time::advance(Duration::from_millis(120)).await;
        assert_eq!(f.trigger(&young, ""), None);
        assert_eq!(f.trigger(&flap, ""), Some("flap"));
        tokio::time::advance(Duration::from_millis(40)).await;
        assert_eq!(f.trigger(&flap, ""), None, "160 ms: up again");
        f.reset();
        assert_eq!(f.trigger(&young, ""), Some("fail_for_ms"));
    }
}
