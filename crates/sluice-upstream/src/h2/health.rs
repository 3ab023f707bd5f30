//! Shard health from PING round trips and stream progress: pure logic (the ping loop in
//! `conn.rs` feeds it samples and acts on its verdicts).

use std::time::Duration;

/// Good pings in a row that bring a degraded shard back.
pub(crate) const RECOVERY_PINGS: u32 = 3;

/// Weight of a new RTT sample in the EWMA.
///
/// NOTE: we accept a fairly reactive 0.25 (a single 4× spike already moves the average by
/// 75%) because the cost of a false "degraded" is one extra connection, while the cost of a
/// late one is new streams landing on a bad link (the incident); recovery needs 3 good
/// samples, which damps flapping.
const EWMA_WEIGHT: f64 = 0.25;

/// What one shard's pings have shown.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Health {
    /// Smoothed RTT; `None` before the first PONG.
    pub(crate) ewma: Option<Duration>,
    /// The lowest RTT seen: the link's baseline when idle (compare BBR's min_rtt).
    pub(crate) min_rtt: Option<Duration>,
    /// Whether the shard is degraded (no new streams).
    pub(crate) degraded: bool,
    /// Consecutive good pings while degraded.
    pub(crate) good_streak: u32,
}

/// The RTT above which a shard is degraded: `factor` × the lane's best RTT, but never below
/// `floor`. The lane's best is the lowest `min_rtt` of its shards, so a lane with one shard
/// still notices that shard slowing down relative to its own idle baseline.
pub(crate) fn threshold(best: Option<Duration>, factor: f64, floor: Duration) -> Duration {
    match best {
        Some(best) => best.mul_f64(factor).max(floor),
        None => floor,
    }
}

impl Health {
    /// Records a PONG after `rtt`. `stalled`: the shard's open streams made no progress for
    /// the stall timeout. Returns whether the shard is degraded now.
    pub(crate) fn on_pong(&mut self, rtt: Duration, threshold: Duration, stalled: bool) -> bool {
        self.ewma = Some(match self.ewma {
            None => rtt,
            Some(e) => e.mul_f64(1.0 - EWMA_WEIGHT) + rtt.mul_f64(EWMA_WEIGHT),
        });
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        let good = rtt <= threshold && !stalled;
        if self.degraded {
            self.good_streak = if good { self.good_streak + 1 } else { 0 };
            if self.good_streak >= RECOVERY_PINGS {
                self.degraded = false;
                self.good_streak = 0;
                // The spike is over: start the average again from the link as it is now,
                // or the old spike would degrade it again at once.
                self.ewma = Some(rtt);
            }
        } else if stalled || self.ewma.is_some_and(|e| e > threshold) {
            self.degrade();
        }
        self.degraded
    }

    /// A PING has been outstanding longer than the threshold already (a PONG stuck behind a
    /// throttled link), or the streams stalled: degraded now, without waiting for the PONG.
    pub(crate) fn degrade(&mut self) {
        self.degraded = true;
        self.good_streak = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn threshold_is_factor_times_best_but_at_least_the_floor() {
        assert_eq!(threshold(None, 3.0, 50 * MS), 50 * MS);
        assert_eq!(threshold(Some(MS), 3.0, 50 * MS), 50 * MS);
        assert_eq!(threshold(Some(100 * MS), 3.0, 50 * MS), 300 * MS);
    }

    #[test]
    fn slow_rtt_degrades_and_three_good_pings_recover() {
        let mut h = Health::default();
        let t = 50 * MS;
        assert!(!h.on_pong(MS, t, false));
        assert!(
            h.on_pong(2000 * MS, t, false),
            "one huge spike moves the EWMA past 50ms"
        );
        assert!(h.on_pong(MS, t, false), "1 good");
        assert!(h.on_pong(MS, t, false), "2 good");
        assert!(!h.on_pong(MS, t, false), "3 good: recovered");
        assert_eq!(h.ewma, Some(MS));
        assert_eq!(h.min_rtt, Some(MS));
    }

    #[test]
    fn a_bad_ping_resets_the_recovery_streak() {
        let mut h = Health::default();
        let t = 50 * MS;
        h.degrade();
        assert!(h.on_pong(MS, t, false));
        assert!(h.on_pong(MS, t, false));
        assert!(h.on_pong(500 * MS, t, false), "bad: streak back to 0");
        assert!(h.on_pong(MS, t, false));
        assert!(h.on_pong(MS, t, false));
        assert!(!h.on_pong(MS, t, false));
    }

    #[test]
    fn a_stall_degrades_even_with_a_fast_rtt() {
        let mut h = Health::default();
        assert!(h.on_pong(MS, 50 * MS, true));
        assert!(
            h.on_pong(MS, 50 * MS, true),
            "still stalled: not a good ping"
        );
    }
}
