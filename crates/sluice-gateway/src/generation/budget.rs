//! The retry budget of one upstream: retries may add at most a share of recent requests (plus
//! a small floor), so a provider's bad minute does not turn into a retry storm.
//!
//! The model is Finagle's and linkerd's `retry_budget { retry_ratio, min_retries_per_second,
//! ttl }`: every request deposits `ratio` tokens, every retry withdraws one, deposits expire
//! after the window, and `min_per_second × window` tokens are always available. Kept in
//! one-second buckets so that the expiry is exact to a second and the cost is one short lock.

use parking_lot::Mutex;
use tokio::time::Instant;

pub use crate::config::BudgetConfig;

/// Seconds of history the budget keeps.
const WINDOW_SECS: usize = 10;

#[derive(Clone, Copy, Default)]
struct Bucket {
    /// The second (since `epoch`) this bucket counts.
    second: u64,
    requests: u32,
    retries: u32,
}

/// One upstream's budget. Cheap: one uncontended lock per request.
pub(crate) struct RetryBudget {
    cfg: BudgetConfig,
    epoch: Instant,
    buckets: Mutex<[Bucket; WINDOW_SECS]>,
}

impl RetryBudget {
    pub(crate) fn new(cfg: BudgetConfig) -> Self {
        RetryBudget {
            cfg,
            epoch: Instant::now(),
            buckets: Mutex::new([Bucket::default(); WINDOW_SECS]),
        }
    }

    /// The settings it was built with (a reload keeps the budget when they are unchanged).
    pub(crate) fn config(&self) -> BudgetConfig {
        self.cfg
    }

    fn with_current<R>(&self, f: impl FnOnce(&mut Bucket, &[Bucket; WINDOW_SECS]) -> R) -> R {
        let second = self.epoch.elapsed().as_secs();
        let mut b = self.buckets.lock();
        let i = (second % WINDOW_SECS as u64) as usize;
        if b[i].second != second {
            b[i] = Bucket {
                second,
                requests: 0,
                retries: 0,
            };
        }
        let mut cur = b[i];
        let r = f(&mut cur, &b);
        b[i] = cur;
        r
    }

    /// A first attempt: deposits `ratio` tokens.
    pub(crate) fn request(&self) {
        self.with_current(|cur, _| cur.requests = cur.requests.saturating_add(1));
    }

    /// Withdraws one token for a retry; `false` (and nothing withdrawn) when the budget is
    /// spent.
    pub(crate) fn try_retry(&self) -> bool {
        let cfg = self.cfg;
        self.with_current(|cur, all| {
            let live = |b: &Bucket| cur.second.saturating_sub(b.second) < WINDOW_SECS as u64;
            // `all` still holds the old copy of the current bucket: count `cur` instead.
            let (mut requests, mut retries) = (u64::from(cur.requests), u64::from(cur.retries));
            for b in all.iter().filter(|b| live(b) && b.second != cur.second) {
                requests += u64::from(b.requests);
                retries += u64::from(b.retries);
            }
            let allowed =
                cfg.ratio * requests as f64 + f64::from(cfg.min_per_second) * WINDOW_SECS as f64;
            if (retries as f64) + 1.0 <= allowed {
                cur.retries = cur.retries.saturating_add(1);
                true
            } else {
                false
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const WINDOW: Duration = Duration::from_secs(WINDOW_SECS as u64);

    #[tokio::test(start_paused = true)]
    async fn a_storm_gets_the_ratio_plus_the_floor() {
        let b = RetryBudget::new(BudgetConfig {
            ratio: 0.2,
            min_per_second: 1,
        });
        let mut granted = 0;
        for _ in 0..1000 {
            b.request();
            if b.try_retry() {
                granted += 1;
            }
        }
        // 0.2 × 1000 + 1 × 10.
        assert_eq!(granted, 210);
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_expire_with_the_window() {
        let b = RetryBudget::new(BudgetConfig {
            ratio: 1.0,
            min_per_second: 0,
        });
        for _ in 0..5 {
            b.request();
        }
        tokio::time::advance(WINDOW + Duration::from_secs(1)).await;
        assert!(!b.try_retry(), "old deposits must have expired");
        b.request();
        assert!(b.try_retry());
        assert!(!b.try_retry());
    }
}
