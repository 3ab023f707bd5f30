//! The generic cell rate algorithm, shared by rate and token checks. Both backends compute the
//! same thing: the in-memory store calls these functions, the Redis scripts (`lua/admit.lua`,
//! `lua/settle.lua`) repeat them line for line.
//!
//! State is one number per key, the theoretical arrival time (TAT): when the bucket would be
//! full again. A request of `cost` units passes when `max(tat, now) + cost·T - now <= period`,
//! with `T = period / limit`; so a full bucket lets `limit` units through at once, then one
//! every `T`. No state (or a TAT in the past) means a full bucket.
//!
//! Times are microseconds since [`TIME_BASE_SECS`], as doubles: Lua has only doubles, and
//! rebasing keeps their resolution near 0.02 µs for decades. `EPSILON_US` absorbs rounding.

/// Times are counted from this Unix second (2023-11-14), in both backends.
pub(crate) const TIME_BASE_SECS: u64 = 1_700_000_000;

/// Rounding slack in µs when comparing times.
pub(crate) const EPSILON_US: f64 = 1.0;

/// The numbers of a GCRA key at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Numbers {
    pub remaining: u64,
    pub used: u64,
    pub reset_us: f64,
}

/// The verdict for one request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// Passes; store `new_tat`. `numbers` are after this request.
    Allowed { new_tat: f64, numbers: Numbers },
    /// Over the limit; passes in `retry_us`. `numbers` are as they stand.
    Limited { retry_us: f64, numbers: Numbers },
    /// Costs more than the limit: never passes.
    TooLarge { numbers: Numbers },
}

/// One GCRA limit: `limit` units per `period_us`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gcra {
    pub limit: u64,
    pub period_us: f64,
}

impl Gcra {
    fn interval(&self) -> f64 {
        self.period_us / self.limit as f64
    }

    /// The numbers when the key's TAT is `tat` (`None`: no state, a full bucket).
    pub fn numbers(&self, tat: Option<f64>, now: f64) -> Numbers {
        let t = self.interval();
        let backlog = (tat.unwrap_or(now) - now).max(0.0);
        // Slack in units, so that drift of a fraction of a µs never costs a whole unit.
        let tol = (EPSILON_US / t).min(0.5);
        let remaining = ((self.period_us - backlog) / t + tol).floor().max(0.0);
        let used = (backlog / t - tol).ceil().max(0.0);
        Numbers {
            remaining: (remaining as u64).min(self.limit),
            used: used as u64,
            reset_us: backlog,
        }
    }

    /// Decides a request of `cost` units now, without changing anything.
    pub fn decide(&self, tat: Option<f64>, now: f64, cost: u64) -> Outcome {
        let base = tat.unwrap_or(now).max(now);
        if cost > self.limit {
            return Outcome::TooLarge {
                numbers: self.numbers(tat, now),
            };
        }
        let new_tat = base + cost as f64 * self.interval();
        let wait = new_tat - self.period_us - now;
        if wait > EPSILON_US {
            Outcome::Limited {
                retry_us: wait,
                numbers: self.numbers(tat, now),
            }
        } else {
            Outcome::Allowed {
                new_tat,
                numbers: self.numbers(Some(new_tat), now),
            }
        }
    }

    /// Reconciles a reservation: `delta` units more (charge) or fewer (refund, negative) than
    /// were taken. A charge may push the TAT past the burst (later requests wait); a refund
    /// never fills the bucket beyond full. `None`: the bucket is full, drop the key.
    pub fn adjust(&self, tat: Option<f64>, now: f64, delta: i64) -> Option<f64> {
        let base = tat.unwrap_or(now).max(now);
        let new_tat = base + delta as f64 * self.interval();
        (new_tat > now).then_some(new_tat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: f64 = 60_000_000.0;

    fn allowed(outcome: Outcome) -> (f64, Numbers) {
        match outcome {
            Outcome::Allowed { new_tat, numbers } => (new_tat, numbers),
            other => panic!("expected allowed, got {other:?}"),
        }
    }

    #[test]
    fn a_full_bucket_passes_the_whole_limit_at_once_then_one_per_interval() {
        let g = Gcra {
            limit: 600,
            period_us: MINUTE,
        };
        let now = 5e13;
        let mut tat = None;
        for i in 0..600 {
            let (t, n) = allowed(g.decide(tat, now, 1));
            assert_eq!(n.remaining, 599 - i);
            assert_eq!(n.used, i + 1);
            tat = Some(t);
        }
        match g.decide(tat, now, 1) {
            Outcome::Limited { retry_us, numbers } => {
                assert!((retry_us - 100_000.0).abs() < 1.0, "{retry_us}");
                assert_eq!(numbers.remaining, 0);
                assert!((numbers.reset_us - MINUTE).abs() < 1.0);
            }
            other => panic!("{other:?}"),
        }
        // One interval later exactly one more passes.
        let later = now + 100_000.0;
        let (t, n) = allowed(g.decide(tat, later, 1));
        assert_eq!(n.remaining, 0);
        assert!(matches!(
            g.decide(Some(t), later, 1),
            Outcome::Limited { .. }
        ));
    }

    #[test]
    fn fractional_intervals_still_pass_exactly_the_limit() {
        // 7 per minute: T = 8571428.57… µs, not representable exactly.
        let g = Gcra {
            limit: 7,
            period_us: MINUTE,
        };
        let now = 5e13 + 0.5;
        let mut tat = None;
        for _ in 0..7 {
            tat = Some(allowed(g.decide(tat, now, 1)).0);
        }
        assert!(matches!(g.decide(tat, now, 1), Outcome::Limited { .. }));
    }

    #[test]
    fn cost_is_taken_in_units_and_too_large_never_passes() {
        let g = Gcra {
            limit: 1000,
            period_us: MINUTE,
        };
        let now = 5e13;
        let (tat, n) = allowed(g.decide(None, now, 700));
        assert_eq!((n.remaining, n.used), (300, 700));
        match g.decide(Some(tat), now, 400) {
            Outcome::Limited { retry_us, .. } => {
                // 100 tokens short, at 60 ms a token.
                assert!((retry_us - 6_000_000.0).abs() < 1.0, "{retry_us}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            g.decide(None, now, 1001),
            Outcome::TooLarge { .. }
        ));
    }

    #[test]
    fn refunds_never_overfill_and_charges_may_exceed_the_burst() {
        let g = Gcra {
            limit: 1000,
            period_us: MINUTE,
        };
        let now = 5e13;
        let (tat, _) = allowed(g.decide(None, now, 500));
        // Used 200 of 500: 300 back.
        let tat = g.adjust(Some(tat), now, -300);
        assert_eq!(g.numbers(tat, now).remaining, 800);
        // Refunding more than was taken leaves a full bucket, not a bonus.
        assert_eq!(g.adjust(tat, now, -5000), None);
        // Used 1500 where 500 were reserved: 1000 more; the next request waits.
        let (tat, _) = allowed(g.decide(None, now, 500));
        let tat = g.adjust(Some(tat), now, 1000);
        let n = g.numbers(tat, now);
        assert_eq!((n.remaining, n.used), (0, 1500));
        match g.decide(tat, now, 1) {
            Outcome::Limited { retry_us, .. } => assert!((retry_us - 30_060_000.0).abs() < 1.0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_bucket_refills_over_time() {
        let g = Gcra {
            limit: 10,
            period_us: 1_000_000.0,
        };
        let now = 5e13;
        let (tat, _) = allowed(g.decide(None, now, 10));
        let half = g.numbers(Some(tat), now + 500_000.0);
        assert_eq!((half.remaining, half.used), (5, 5));
        assert!((half.reset_us - 500_000.0).abs() < 1.0);
        let full = g.numbers(Some(tat), now + 2_000_000.0);
        assert_eq!((full.remaining, full.used, full.reset_us), (10, 0, 0.0));
    }
}
