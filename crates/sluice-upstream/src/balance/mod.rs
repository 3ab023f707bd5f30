//! Balancing over several targets of one route (replicas, regions, or several API keys of a
//! provider), each backed by its own [`Upstream`](crate::Upstream).
//!
//! ```text
//! Balancer (one per route; pure logic behind one short lock, no I/O)
//!  ├─ per target: weight, peak-EWMA latency per lane, in-flight per lane,
//!  │   outlier state (in service → ejected → half-open → in service), rest after a 429,
//!  │   health from active checks
//!  ├─ pick(lane, exclude) → Pick (counts in flight until completed or dropped)
//!  └─ snapshot() for /admin and metrics
//! HealthChecker (optional): one task per checked target, owned by the handle, reporting
//!  into the Balancer
//! ```
//!
//! The rules a pick follows are documented on [`Balancer`].

mod config;
mod ewma;
mod health_check;
mod outcome;
mod snapshot;
mod state;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

pub use config::{
    BalanceConfigError, BalancePolicy, BalancerConfig, HealthCheckConfig, OutlierConfig,
    SuccessRateConfig, TargetConfig,
};
pub use health_check::HealthChecker;
pub use outcome::{retry_after, Failure, Outcome};
pub use snapshot::{BalancerCounters, BalancerSnapshot, Health, LaneLoad, TargetSnapshot};

use crate::Lane;
use state::{Attempt, State};

/// Chooses a target for each attempt of a request, one balancer per route. Cheap to clone
/// (an `Arc`); clones share state. Pure logic: it does no I/O and spawns nothing.
///
/// Every method takes one short lock over the targets' state (a linear scan of the
/// targets: a route has a handful to a few dozen); none waits for anything else. Changes
/// that only time makes (an ejection ending, a rest ending, the success-rate window
/// closing) are applied whenever the state is next touched (a pick, a completion, a
/// snapshot).
///
/// The gateway's policy stage asks for a target for every attempt of a request, sends the
/// attempt through that target's `Upstream`, and reports how it went:
///
/// ```
/// use sluice_upstream::{
///     BalanceFailure as Failure, BalanceTarget as TargetConfig, Balancer, BalancerConfig, Lane,
///     Outcome,
/// };
///
/// let balancer = Balancer::new(BalancerConfig {
///     name: "gpt-4o".into(),
///     targets: vec![TargetConfig::new("east"), TargetConfig::new("west").weight(2)],
///     ..BalancerConfig::default()
/// })?;
/// let mut failed = Vec::new();
/// let first = balancer.pick(Lane::Short, &failed);
/// // ... upstreams[first.index()].send(...) answered 503:
/// failed.push(first.index());
/// first.complete(Outcome::Failure(Failure::Retryable));
/// let retry = balancer.pick(Lane::Short, &failed);
/// assert_ne!(retry.index(), failed[0]); // another usable target exists
/// retry.complete(Outcome::Success);
/// # Ok::<(), sluice_upstream::BalanceConfigError>(())
/// ```
///
/// # Which target a pick returns
/// 1. A half-open target (its ejection time is over) that is not excluded, not unhealthy and
///    not resting, if its probe is not already in flight: this pick is its one probe
///    ([`Pick::is_probe`]).
/// 2. Otherwise a usable target (not ejected, not half-open, not unhealthy, not resting)
///    that is not in `exclude`, chosen by the policy.
/// 3. Otherwise a usable target from `exclude` (it failed this request, but the others are
///    worse off), chosen by the policy.
/// 4. Otherwise the pick *fails open* ([`Pick::is_fail_open`]): a route with nothing usable
///    still tries, and the policy decides what to do with the result. It returns the target
///    back soonest among those not excluded (or among all when all are excluded): a target
///    not unhealthy before an unhealthy one (an active check just saw it down), then the
///    earliest end of ejection or rest; ties are chosen by the policy.
///
/// So an ejected, unhealthy, resting or excluded target is never chosen while a usable
/// target that is not excluded exists, and an ejected or unhealthy one never while any
/// usable target exists; the one exception is the single probe of a half-open target
/// (whose ejection is over), which is how it earns its way back.
///
/// # Lanes and latency
/// Latency is kept per [`Lane`](crate::Lane): a replica's time to first byte on a 3-minute
/// stream says nothing about its short calls. For [`Lane::Stream`](crate::Lane::Stream) the
/// sample is the first-byte latency, given with [`Pick::record_latency`] when the first
/// byte (or token) arrives; keep the `Pick` until the stream ends, so it counts as in
/// flight meanwhile. In-flight counts are per lane too.
///
/// # Outlier ejection
/// A target is ejected after `consecutive_failures` counted failures in a row, or by the
/// success-rate rule (see [`OutlierConfig`]), for `base_ejection_time × n` (capped at
/// `max_ejection_time`), n growing with each ejection and shrinking while it stays in
/// service; never more than `max_ejection_percent` of the targets at once. When the time is
/// over the target is half-open: exactly one request probes it. Success brings it back;
/// a counted failure ejects it again with n + 1; a neutral end (cancel, final error, 429)
/// lets the next pick probe instead. A rate-limited outcome rests the target for its
/// `Retry-After` without counting toward ejection.
///
/// Active health checks ([`HealthChecker`]) and passive ejection are independent: a target
/// is usable only when neither rules it out.
#[derive(Clone)]
pub struct Balancer {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    names: Vec<String>,
    state: Mutex<State>,
}

// A poisoned lock only means a panic elsewhere while the state was consistent between
// statements; the counters stay usable.
fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl std::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer")
            .field("name", &self.shared.name)
            .field("targets", &self.shared.names)
            .finish()
    }
}

impl Balancer {
    /// Checks `cfg` and builds the balancer, with a randomly seeded generator.
    ///
    /// # Errors
    /// [`BalanceConfigError::Field`] naming the first field out of range (see
    /// [`BalancerConfig::validate`]).
    pub fn new(cfg: BalancerConfig) -> Result<Balancer, BalanceConfigError> {
        Balancer::build(cfg, fastrand::Rng::new())
    }

    /// [`Balancer::new`] with a fixed seed for its random choices, so tests repeat.
    ///
    /// # Errors
    /// As [`Balancer::new`].
    pub fn with_seed(cfg: BalancerConfig, seed: u64) -> Result<Balancer, BalanceConfigError> {
        Balancer::build(cfg, fastrand::Rng::with_seed(seed))
    }

    fn build(cfg: BalancerConfig, rng: fastrand::Rng) -> Result<Balancer, BalanceConfigError> {
        cfg.validate()?;
        let name = cfg.name.clone();
        let names = cfg.targets.iter().map(|t| t.name.clone()).collect();
        let state = State::new(cfg, rng, Instant::now());
        Ok(Balancer {
            shared: Arc::new(Shared {
                name,
                names,
                state: Mutex::new(state),
            }),
        })
    }

    /// The balancer's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The targets' names, in configured order (a [`Pick::index`] indexes this).
    pub fn targets(&self) -> &[String] {
        &self.shared.names
    }

    /// Chooses a target for one attempt on `lane`, never one in `exclude` (indices of
    /// targets that already failed this request) while another usable target exists; see
    /// [`Balancer`] for the whole rule. Always returns a target: when nothing is
    /// usable it fails open. Indices in `exclude` beyond the targets are ignored.
    ///
    /// The target counts one more in flight on `lane` until the returned [`Pick`] is
    /// completed or dropped.
    pub fn pick(&self, lane: Lane, exclude: &[usize]) -> Pick {
        let now = Instant::now();
        let chosen = lock(&self.shared.state).pick(lane, exclude, now);
        Pick {
            shared: self.shared.clone(),
            attempt: Attempt {
                index: chosen.index,
                lane,
                probe: chosen.probe,
                started: now,
                latency_recorded: false,
            },
            fail_open: chosen.fail_open,
            done: false,
        }
    }

    /// Every target's state and the counters, as of now.
    pub fn snapshot(&self) -> BalancerSnapshot {
        let now = Instant::now();
        let mut state = lock(&self.shared.state);
        state.refresh(now);
        BalancerSnapshot {
            name: self.shared.name.clone(),
            policy: state.cfg().policy,
            targets: (0..self.shared.names.len())
                .map(|i| state.target_snapshot(i, now))
                .collect(),
            counters: state.counters(),
        }
    }

    /// One active health-check result of target `index`.
    pub(crate) fn report_health(&self, index: usize, pass: bool) {
        lock(&self.shared.state).report_health(index, pass);
    }

    /// The balancer's config (for the health checker).
    pub(crate) fn with_config<R>(&self, f: impl FnOnce(&BalancerConfig) -> R) -> R {
        f(lock(&self.shared.state).cfg())
    }
}

/// One attempt on one target, from [`Balancer::pick`]. It counts as in flight on its target
/// and lane until [`Pick::complete`] or until it is dropped; dropping it without completing
/// is a cancel, which says nothing about the target (a half-open probe dropped this way
/// lets the next pick probe instead).
#[must_use = "a Pick reports the attempt's outcome; dropping it at once is a cancel"]
pub struct Pick {
    shared: Arc<Shared>,
    attempt: Attempt,
    fail_open: bool,
    done: bool,
}

impl std::fmt::Debug for Pick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pick")
            .field("target", &self.name())
            .field("lane", &self.attempt.lane)
            .field("probe", &self.attempt.probe)
            .field("fail_open", &self.fail_open)
            .finish()
    }
}

impl Pick {
    /// The target's index in the balancer's configured targets (and so in the gateway's
    /// list of upstreams beside it).
    pub fn index(&self) -> usize {
        self.attempt.index
    }

    /// The target's name.
    pub fn name(&self) -> &str {
        &self.shared.names[self.attempt.index]
    }

    /// The lane it was picked for.
    pub fn lane(&self) -> Lane {
        self.attempt.lane
    }

    /// Whether this attempt is the one probe of a half-open target: its outcome decides
    /// whether the target comes back.
    pub fn is_probe(&self) -> bool {
        self.attempt.probe
    }

    /// Whether nothing usable was left, so this target was returned although it is ejected,
    /// unhealthy, resting, or excluded.
    pub fn is_fail_open(&self) -> bool {
        self.fail_open
    }

    /// Records this attempt's latency sample now: for a stream, call it when the first byte
    /// (or first token) arrives, with the time from the request to it. Only the first call
    /// counts.
    pub fn record_latency(&mut self, latency: Duration) {
        if self.attempt.latency_recorded {
            return;
        }
        self.attempt.latency_recorded = true;
        let Attempt { index, lane, .. } = self.attempt;
        lock(&self.shared.state).record_latency(index, lane, latency, Instant::now());
    }

    /// Ends the attempt with its outcome (see [`Outcome`]).
    pub fn complete(mut self, outcome: Outcome) {
        self.finish(Some(outcome), Instant::now());
    }

    /// [`Pick::complete`] with the time it ended, read by the caller for its own records (one
    /// clock read instead of two).
    pub fn complete_at(mut self, outcome: Outcome, now: Instant) {
        self.finish(Some(outcome), now);
    }

    fn finish(&mut self, outcome: Option<Outcome>, now: Instant) {
        if self.done {
            return;
        }
        self.done = true;
        lock(&self.shared.state).complete(&self.attempt, outcome, now);
    }
}

impl Drop for Pick {
    fn drop(&mut self) {
        if !self.done {
            self.finish(None, Instant::now());
        }
    }
}
