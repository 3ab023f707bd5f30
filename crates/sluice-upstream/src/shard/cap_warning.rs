//! The warning a lane logs when it reaches its connection cap, at most once per
//! [`CAP_WARNING_EVERY`] per lane: a saturated lane is hit by every request of a burst, and
//! one line is what an operator needs to find the setting, not thousands.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LaneLimit;
use crate::Lane;

/// At most one cap warning per lane this often.
pub(crate) const CAP_WARNING_EVERY: Duration = Duration::from_secs(10);

/// Rate limit for one lane's cap warning.
#[derive(Debug)]
pub(crate) struct CapWarning {
    base: Instant,
    /// Milliseconds after `base` before which no warning is due; 0 until the first.
    next_ms: AtomicU64,
}

impl CapWarning {
    pub(crate) fn new() -> CapWarning {
        CapWarning {
            base: Instant::now(),
            next_ms: AtomicU64::new(0),
        }
    }

    /// Whether a warning is due at `now`; if so, the next one is not due for
    /// [`CAP_WARNING_EVERY`]. Exactly one of racing callers gets `true`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        let now_ms =
            u64::try_from(now.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX);
        let next = self.next_ms.load(Ordering::Relaxed);
        let every = CAP_WARNING_EVERY.as_millis() as u64;
        now_ms >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now_ms.saturating_add(every).max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Logs that `lane` of `upstream` reached its cap, if a warning is due.
    pub(crate) fn reached(&self, upstream: &str, lane: Lane, limit: LaneLimit) {
        if !self.due(Instant::now()) {
            return;
        }
        let key = limit
            .setting()
            .map(|s| format!("pool.{lane}.{s}"))
            .unwrap_or_default();
        tracing::warn!(
            upstream,
            lane = lane.as_str(),
            key = key.as_str(),
            "upstream lane at its connection cap: {limit}; further requests wait up to \
             acquire_timeout for a slot, then fail with 503 (raise {key} of upstream \
             `{upstream}` if this is normal load; at most one such warning per lane every {}s)",
            CAP_WARNING_EVERY.as_secs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn at_most_one_warning_per_interval() {
        let w = CapWarning::new();
        let t0 = Instant::now();
        assert!(w.due(t0), "the first is due at once");
        assert!(!w.due(t0));
        assert!(!w.due(t0 + CAP_WARNING_EVERY - Duration::from_millis(1)));
        assert!(w.due(t0 + CAP_WARNING_EVERY));
        assert!(!w.due(t0 + CAP_WARNING_EVERY + Duration::from_secs(1)));
        assert!(w.due(t0 + 5 * CAP_WARNING_EVERY));
    }
}
