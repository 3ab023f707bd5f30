//! A point-in-time view of a balancer for `/admin` and metrics.

use std::time::Duration;

use super::BalancePolicy;

/// A target's health as the active checks see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Health {
    /// Not actively checked (no `health_check`), or no check has finished yet. Usable.
    #[default]
    Unchecked,
    /// The last checks passed. Usable.
    Healthy,
    /// `unhealthy_threshold` checks in a row failed: no traffic while a usable target
    /// exists, until `healthy_threshold` checks in a row pass.
    Unhealthy,
}

impl Health {
    /// `"unchecked"`, `"healthy"` or `"unhealthy"`, for metrics and the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unchecked => "unchecked",
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
        }
    }
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Latency and load of one target on one lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaneLoad {
    /// The peak-EWMA latency estimate as of the snapshot (decayed since its last sample,
    /// never below 1 ms); the balancer's `initial_latency`, decaying, before the first
    /// sample.
    pub latency: Duration,
    /// Picks on this lane not yet completed or dropped.
    pub in_flight: u32,
    /// Latency samples taken.
    pub samples: u64,
}

/// One target's state.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetSnapshot {
    /// The target's name.
    pub name: String,
    /// Its configured weight.
    pub weight: u32,
    /// Active health-check state.
    pub health: Health,
    /// Whether a pick may choose it now without failing open: healthy or unchecked, not
    /// ejected, not half-open, not resting.
    pub usable: bool,
    /// Time left of its current ejection, if ejected.
    pub ejected_for: Option<Duration>,
    /// Its ejection time is over and it waits for (or is serving) its one probe request.
    pub half_open: bool,
    /// Its half-open probe is in flight.
    pub probe_in_flight: bool,
    /// Ejections over its life.
    pub ejections: u64,
    /// The ejection multiplier n: the next ejection lasts `base_ejection_time × (n + 1)`
    /// (capped); it shrinks by one for every `base_ejection_time` in service.
    pub ejection_level: u32,
    /// Time left of a rest after a rate-limited response, if resting.
    pub resting_for: Option<Duration>,
    /// Failures in a row that count toward ejection.
    pub consecutive_failures: u32,
    /// [`Lane::Stream`](crate::Lane::Stream): first-byte latency and streams in flight.
    pub stream: LaneLoad,
    /// [`Lane::Short`](crate::Lane::Short): latency and calls in flight.
    pub short: LaneLoad,
    /// Picks (both lanes) not yet completed or dropped.
    pub in_flight: u32,
    /// Picks of this target over its life (each attempt is one).
    pub requests: u64,
    /// Attempts completed with [`Outcome::Success`](super::Outcome::Success).
    pub successes: u64,
    /// Attempts that failed in a way that counts toward ejection.
    pub failures: u64,
    /// Attempts that failed in a way that does not ([`Failure::Final`](super::Failure::Final),
    /// [`Failure::Local`](super::Failure::Local)).
    pub other_failures: u64,
    /// Attempts answered with [`Outcome::RateLimited`](super::Outcome::RateLimited).
    pub rate_limited: u64,
    /// Attempts dropped without an outcome (cancelled).
    pub cancelled: u64,
    /// Counted attempts (successes and counted failures) in the current success-rate window.
    pub window_requests: u64,
    /// Success rate in the current window; `None` before its first counted attempt.
    pub success_rate: Option<f64>,
}

/// Counters over the balancer's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BalancerCounters {
    /// Picks made.
    pub picks: u64,
    /// Picks that failed open: no usable target was left (after exclusions), so the best
    /// unusable one was returned.
    pub fail_open_picks: u64,
    /// Ejections, by either rule and by failed probes.
    pub ejections: u64,
    /// Of those, by the success-rate rule.
    pub success_rate_ejections: u64,
    /// Ejections skipped because `max_ejection_percent` was reached.
    pub ejections_skipped: u64,
    /// Half-open probes started.
    pub probes: u64,
    /// Probes that succeeded (the target came back).
    pub probe_successes: u64,
    /// Probes that failed (the target was ejected again).
    pub probe_failures: u64,
    /// Health-state changes from active checks.
    pub health_flips: u64,
    /// Rests started by rate-limited outcomes.
    pub rests: u64,
}

/// A balancer's state, from [`Balancer::snapshot`](super::Balancer::snapshot).
#[derive(Clone, Debug, PartialEq)]
pub struct BalancerSnapshot {
    /// The balancer's name.
    pub name: String,
    /// Its policy.
    pub policy: BalancePolicy,
    /// Every target, in configured order.
    pub targets: Vec<TargetSnapshot>,
    /// Its counters.
    pub counters: BalancerCounters,
}

impl BalancerSnapshot {
    /// The target named `name`, if any.
    pub fn target(&self, name: &str) -> Option<&TargetSnapshot> {
        self.targets.iter().find(|t| t.name == name)
    }
}
