//! The balancer's state machine: per-target latency, load, ejection, rests and health, and
//! the choice of a target. Pure logic with the clock passed in, so it is tested with
//! made-up instants and property tests; [`super::Balancer`] wraps it in a lock.
//!
//! Which target a pick may return, in order (the rule `Balancer::pick` documents):
//! 1. a half-open target (ejection over) not excluded, not unhealthy, not resting, with no
//!    probe in flight: this pick is its one probe;
//! 2. a usable target not excluded, chosen by the policy;
//! 3. a usable target that already failed this request (excluded), chosen by the policy;
//! 4. failing open: among the targets not excluded (or all, if every one is), the one back
//!    soonest: not unhealthy before unhealthy, then the earliest end of ejection or rest,
//!    ties chosen by the policy.

use std::time::Duration;

use tokio::time::Instant;

use super::config::{BalancePolicy, BalancerConfig};
use super::ewma::PeakEwma;
use super::outcome::Outcome;
use super::snapshot::{BalancerCounters, Health, LaneLoad, TargetSnapshot};
use crate::Lane;

/// Where a target stands with passive outlier detection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Out {
    /// In service.
    In,
    /// Ejected until then.
    Ejected { until: Instant },
    /// Ejection over; the next pick that may use it probes it (`probing` while in flight).
    HalfOpen { probing: bool },
}

/// What a pick may do with a target right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Avail {
    Usable,
    ProbeReady,
    Unusable,
}

#[derive(Clone, Copy, Debug)]
struct LaneState {
    ewma: PeakEwma,
    in_flight: u32,
}

#[derive(Clone, Debug, Default)]
struct Totals {
    requests: u64,
    successes: u64,
    failures: u64,
    other_failures: u64,
    rate_limited: u64,
    cancelled: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct TargetState {
    weight: u32,
    /// (healthy_threshold, unhealthy_threshold) when actively checked.
    thresholds: Option<(u32, u32)>,
    health: Health,
    /// Check results in a row with the same verdict, and that verdict.
    check_streak: (bool, u32),
    pub(crate) out: Out,
    level: u32,
    /// Since when `level` has been shrinking (the target is in service).
    level_since: Instant,
    ejections: u64,
    pub(crate) rest_until: Option<Instant>,
    consecutive_failures: u32,
    lanes: [LaneState; 2],
    wrr_current: i64,
    window_ok: u64,
    window_failed: u64,
    totals: Totals,
}

/// What a pick chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chosen {
    pub(crate) index: usize,
    pub(crate) probe: bool,
    pub(crate) fail_open: bool,
}

/// One attempt in flight: what ending it needs to know.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt {
    pub(crate) index: usize,
    pub(crate) lane: Lane,
    /// It is the one probe of a half-open target.
    pub(crate) probe: bool,
    pub(crate) started: Instant,
    /// `record_latency` already took this attempt's sample.
    pub(crate) latency_recorded: bool,
}

/// Why a target is being ejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    ConsecutiveFailures,
    SuccessRate,
    FailedProbe,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::ConsecutiveFailures => "consecutive_failures",
            Reason::SuccessRate => "success_rate",
            Reason::FailedProbe => "failed_probe",
        }
    }
}

/// `now + d`, saturating far in the future instead of overflowing (a config may say
/// `Duration::MAX`).
pub(crate) fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

pub(crate) fn lane_index(lane: Lane) -> usize {
    match lane {
        Lane::Stream => 0,
        Lane::Short => 1,
    }
}

/// The success-rate window when the rule is off (the snapshot still shows a rate).
const STATS_WINDOW: Duration = Duration::from_secs(10);

pub(crate) struct State {
    cfg: BalancerConfig,
    pub(crate) targets: Vec<TargetState>,
    rng: fastrand::Rng,
    window_start: Instant,
    counters: BalancerCounters,
    mean_weight: f64,
    /// Reused candidate list, so a pick does not allocate.
    scratch: Vec<usize>,
}

impl State {
    /// `cfg` must have passed `validate`.
    pub(crate) fn new(cfg: BalancerConfig, rng: fastrand::Rng, now: Instant) -> State {
        let targets: Vec<TargetState> = cfg
            .targets
            .iter()
            .map(|t| TargetState {
                weight: t.weight.max(1),
                thresholds: t
                    .health_check
                    .as_ref()
                    .map(|h| (h.healthy_threshold, h.unhealthy_threshold)),
                health: Health::Unchecked,
                check_streak: (true, 0),
                out: Out::In,
                level: 0,
                level_since: now,
                ejections: 0,
                rest_until: None,
                consecutive_failures: 0,
                lanes: [LaneState {
                    ewma: PeakEwma::new(cfg.initial_latency, now),
                    in_flight: 0,
                }; 2],
                wrr_current: 0,
                window_ok: 0,
                window_failed: 0,
                totals: Totals::default(),
            })
            .collect();
        let n = targets.len().max(1);
        let mean_weight = targets.iter().map(|t| f64::from(t.weight)).sum::<f64>() / n as f64;
        State {
            cfg,
            scratch: Vec::with_capacity(targets.len()),
            targets,
            rng,
            window_start: now,
            counters: BalancerCounters::default(),
            mean_weight,
        }
    }

    pub(crate) fn cfg(&self) -> &BalancerConfig {
        &self.cfg
    }

    pub(crate) fn avail(&self, i: usize) -> Avail {
        let t = &self.targets[i];
        if t.health == Health::Unhealthy || t.rest_until.is_some() {
            return Avail::Unusable;
        }
        match t.out {
            Out::In => Avail::Usable,
            Out::HalfOpen { probing: false } => Avail::ProbeReady,
            Out::HalfOpen { probing: true } | Out::Ejected { .. } => Avail::Unusable,
        }
    }

    /// Targets out by ejection (ejected or half-open): what `max_ejection_percent` caps.
    pub(crate) fn ejected_count(&self) -> usize {
        self.targets.iter().filter(|t| t.out != Out::In).count()
    }

    /// Applies what time alone changes: ejections end (half-open), rests end, ejection
    /// levels shrink, the success-rate window closes.
    pub(crate) fn refresh(&mut self, now: Instant) {
        let base = self.cfg.outlier.base_ejection_time;
        for t in &mut self.targets {
            if let Out::Ejected { until } = t.out {
                if now >= until {
                    t.out = Out::HalfOpen { probing: false };
                }
            }
            if t.rest_until.is_some_and(|r| now >= r) {
                t.rest_until = None;
            }
            if t.out == Out::In && t.level > 0 {
                let served = now.saturating_duration_since(t.level_since);
                let periods = served.as_nanos() / base.as_nanos().max(1);
                if periods > 0 {
                    let periods = u32::try_from(periods).unwrap_or(u32::MAX);
                    t.level = t.level.saturating_sub(periods);
                    t.level_since = if t.level == 0 {
                        now
                    } else {
                        after(t.level_since, base.saturating_mul(periods))
                    };
                }
            }
        }
        let window = self
            .cfg
            .outlier
            .success_rate
            .as_ref()
            .map_or(STATS_WINDOW, |s| s.interval);
        if now.saturating_duration_since(self.window_start) >= window {
            self.close_window(now);
        }
    }

    /// Envoy's success-rate rule over the window that just closed, then a new window.
    fn close_window(&mut self, now: Instant) {
        if let Some(sr) = self.cfg.outlier.success_rate.clone() {
            let mut rates: Vec<(usize, f64)> = self
                .targets
                .iter()
                .enumerate()
                .filter(|(_, t)| {
                    t.out == Out::In && t.window_ok + t.window_failed >= sr.request_volume
                })
                .map(|(i, t)| {
                    (
                        i,
                        t.window_ok as f64 / (t.window_ok + t.window_failed) as f64,
                    )
                })
                .collect();
            if rates.len() >= sr.minimum_hosts {
                let n = rates.len() as f64;
                let mean = rates.iter().map(|r| r.1).sum::<f64>() / n;
                let var = rates.iter().map(|r| (r.1 - mean).powi(2)).sum::<f64>() / n;
                let threshold = mean - sr.stdev_factor * var.sqrt();
                // Worst first, so the cap keeps the worst ones out.
                rates.sort_by(|a, b| a.1.total_cmp(&b.1));
                for (i, rate) in rates {
                    if rate < threshold && self.try_eject(i, now, Reason::SuccessRate) {
                        self.counters.success_rate_ejections += 1;
                    }
                }
            }
        }
        for t in &mut self.targets {
            t.window_ok = 0;
            t.window_failed = 0;
        }
        self.window_start = now;
    }

    /// Ejects target `i` if the cap allows (a target already out does not add to it).
    fn try_eject(&mut self, i: usize, now: Instant, reason: Reason) -> bool {
        let already_out = self.targets[i].out != Out::In;
        let cap = self.cfg.outlier.ejection_cap(self.targets.len());
        if !already_out && self.ejected_count() >= cap {
            self.counters.ejections_skipped += 1;
            return false;
        }
        let o = &self.cfg.outlier;
        let t = &mut self.targets[i];
        t.level = t.level.saturating_add(1);
        let time = o
            .base_ejection_time
            .saturating_mul(t.level)
            .min(o.max_ejection_time);
        t.out = Out::Ejected {
            until: after(now, time),
        };
        t.ejections += 1;
        t.consecutive_failures = 0;
        self.counters.ejections += 1;
        tracing::warn!(
            balancer = %self.cfg.name,
            target = %self.cfg.targets[i].name,
            reason = reason.as_str(),
            ejected_ms = time.as_millis() as u64,
            ejections = t.ejections,
            "target ejected"
        );
        true
    }

    /// Chooses a target (by the rule in this module's docs) and counts the pick as in
    /// flight.
    pub(crate) fn pick(&mut self, lane: Lane, exclude: &[usize], now: Instant) -> Chosen {
        self.refresh(now);
        let mut cands = std::mem::take(&mut self.scratch);
        let n = self.targets.len();
        let excluded = |i: &usize| exclude.contains(i);

        cands.clear();
        cands.extend((0..n).filter(|i| !excluded(i) && self.avail(*i) == Avail::ProbeReady));
        let mut fail_open = false;
        let index = if !cands.is_empty() {
            cands[self.rng.usize(0..cands.len())]
        } else {
            cands.extend((0..n).filter(|i| !excluded(i) && self.avail(*i) == Avail::Usable));
            if cands.is_empty() {
                cands.extend((0..n).filter(|i| self.avail(*i) == Avail::Usable));
            }
            if cands.is_empty() {
                fail_open = true;
                cands.extend((0..n).filter(|i| !excluded(i)));
                if cands.is_empty() {
                    cands.extend(0..n);
                }
                // The ones back soonest: not unhealthy first, then the earliest end.
                let key = |t: &TargetState| {
                    let ejected = match t.out {
                        Out::Ejected { until } => until,
                        _ => now,
                    };
                    let back = ejected.max(t.rest_until.unwrap_or(now));
                    (t.health == Health::Unhealthy, back)
                };
                let best = cands.iter().map(|&i| key(&self.targets[i])).min();
                cands.retain(|&i| Some(key(&self.targets[i])) == best);
            }
            self.choose(lane, &cands, now)
        };
        self.scratch = cands;

        let t = &mut self.targets[index];
        let probe = t.out == (Out::HalfOpen { probing: false });
        if probe {
            t.out = Out::HalfOpen { probing: true };
            self.counters.probes += 1;
        }
        t.lanes[lane_index(lane)].in_flight += 1;
        t.totals.requests += 1;
        self.counters.picks += 1;
        if fail_open {
            self.counters.fail_open_picks += 1;
        }
        Chosen {
            index,
            probe,
            fail_open,
        }
    }

    /// The policy's choice among `cands` (not empty).
    fn choose(&mut self, lane: Lane, cands: &[usize], now: Instant) -> usize {
        if cands.len() == 1 {
            // WRR still advances, so a lone survivor does not skew the shares after.
            if self.cfg.policy != BalancePolicy::WeightedRoundRobin {
                return cands[0];
            }
        }
        match self.cfg.policy {
            BalancePolicy::P2cEwma => {
                let a = self.draw(cands, None);
                let b = self.draw(cands, Some(a));
                // Ties go to the first draw, so equal targets share by weight.
                if self.cost(b, lane, now) < self.cost(a, lane, now) {
                    b
                } else {
                    a
                }
            }
            BalancePolicy::LeastInFlight => {
                let li = lane_index(lane);
                let load = |i: usize| {
                    let t = &self.targets[i];
                    (u64::from(t.lanes[li].in_flight) + 1, u64::from(t.weight))
                };
                // (f_a / w_a) vs (f_b / w_b) without floats: f_a × w_b vs f_b × w_a.
                let less = |a: (u64, u64), b: (u64, u64)| a.0 * b.1 < b.0 * a.1;
                let mut best = load(cands[0]);
                for &i in &cands[1..] {
                    if less(load(i), best) {
                        best = load(i);
                    }
                }
                let tied: Vec<usize> = cands
                    .iter()
                    .copied()
                    .filter(|&i| !less(best, load(i)))
                    .collect();
                self.draw(&tied, None)
            }
            BalancePolicy::WeightedRoundRobin => {
                let total: i64 = cands
                    .iter()
                    .map(|&i| i64::from(self.targets[i].weight))
                    .sum();
                for &i in cands {
                    let t = &mut self.targets[i];
                    t.wrr_current += i64::from(t.weight);
                }
                let mut best = cands[0];
                for &i in cands {
                    if self.targets[i].wrr_current > self.targets[best].wrr_current {
                        best = i;
                    }
                }
                self.targets[best].wrr_current -= total;
                best
            }
            BalancePolicy::Priority => cands.iter().copied().min().unwrap_or(cands[0]),
        }
    }

    /// A target drawn from `cands` (minus `skip`) with probability proportional to weight.
    /// `skip` is ignored when it would leave nothing.
    fn draw(&mut self, cands: &[usize], skip: Option<usize>) -> usize {
        let skip = skip.filter(|s| cands.iter().any(|i| i != s));
        let weight = |i: usize| u64::from(self.targets[i].weight);
        let total: u64 = cands
            .iter()
            .filter(|&&i| Some(i) != skip)
            .map(|&i| weight(i))
            .sum();
        let mut r = self.rng.u64(0..total.max(1));
        let mut last = cands[0];
        for &i in cands.iter().filter(|&&i| Some(i) != skip) {
            if r < weight(i) {
                return i;
            }
            r -= weight(i);
            last = i;
        }
        last
    }

    /// p2c cost: latency × (1 + in-flight relative to weight). With equal weights this is
    /// linkerd's latency × (in-flight + 1).
    ///
    /// A target not yet measured on the lane (new, or back from an outage) is assumed as fast
    /// as the fastest measured one, so it is tried and measured at once; with a fixed guess
    /// above the measured latencies, sequential traffic would never choose it until the guess
    /// decayed (tens of seconds with the default time constant).
    fn cost(&self, i: usize, lane: Lane, now: Instant) -> f64 {
        let t = &self.targets[i];
        let li = lane_index(lane);
        let l = &t.lanes[li];
        let load = f64::from(l.in_flight) * self.mean_weight / f64::from(t.weight);
        let latency = if l.ewma.samples() == 0 {
            self.targets
                .iter()
                .map(|o| &o.lanes[li].ewma)
                .filter(|e| e.samples() > 0)
                .map(|e| e.read(now, self.cfg.ewma_decay))
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))))
                .unwrap_or_else(|| l.ewma.read(now, self.cfg.ewma_decay))
        } else {
            l.ewma.read(now, self.cfg.ewma_decay)
        };
        latency * (1.0 + load)
    }

    /// Feeds one latency sample of target `i` on `lane`.
    pub(crate) fn record_latency(&mut self, i: usize, lane: Lane, latency: Duration, now: Instant) {
        let tau = self.cfg.ewma_decay;
        self.targets[i].lanes[lane_index(lane)]
            .ewma
            .observe(latency, now, tau);
    }

    /// Ends attempt `a`: `None` is a cancel (neutral).
    pub(crate) fn complete(&mut self, a: &Attempt, outcome: Option<Outcome>, now: Instant) {
        let Attempt {
            index: i,
            lane,
            probe,
            started,
            latency_recorded,
        } = *a;
        let elapsed = now.saturating_duration_since(started);
        self.refresh(now);
        let li = lane_index(lane);
        {
            let t = &mut self.targets[i];
            t.lanes[li].in_flight = t.lanes[li].in_flight.saturating_sub(1);
        }
        // Only the probe decides a half-open target's fate; a late answer from before the
        // ejection does not.
        let probing = probe && self.targets[i].out == (Out::HalfOpen { probing: true });
        let release_probe = |s: &mut State| {
            if probing {
                s.targets[i].out = Out::HalfOpen { probing: false };
            }
        };
        match outcome {
            None => {
                self.targets[i].totals.cancelled += 1;
                release_probe(self);
            }
            Some(Outcome::Success) => {
                if !latency_recorded && lane == Lane::Short {
                    self.record_latency(i, lane, elapsed, now);
                }
                let t = &mut self.targets[i];
                t.totals.successes += 1;
                t.window_ok += 1;
                if probing {
                    t.out = Out::In;
                    t.level_since = now;
                    t.consecutive_failures = 0;
                    self.counters.probe_successes += 1;
                    tracing::info!(
                        balancer = %self.cfg.name,
                        target = %self.cfg.targets[i].name,
                        "ejected target is back: its probe succeeded"
                    );
                } else if t.out == Out::In {
                    t.consecutive_failures = 0;
                }
            }
            Some(Outcome::Failure(kind)) if kind.counts_toward_ejection() => {
                if kind.is_timeout() && !latency_recorded {
                    self.record_latency(i, lane, elapsed, now);
                }
                let t = &mut self.targets[i];
                t.totals.failures += 1;
                t.window_failed += 1;
                if probing {
                    self.counters.probe_failures += 1;
                    self.try_eject(i, now, Reason::FailedProbe);
                } else if t.out == Out::In {
                    t.consecutive_failures = t.consecutive_failures.saturating_add(1);
                    if self
                        .cfg
                        .outlier
                        .consecutive_failures
                        .is_some_and(|n| self.targets[i].consecutive_failures >= n)
                    {
                        self.try_eject(i, now, Reason::ConsecutiveFailures);
                    }
                }
            }
            Some(Outcome::Failure(_)) => {
                self.targets[i].totals.other_failures += 1;
                release_probe(self);
            }
            Some(Outcome::RateLimited { retry_after }) => {
                let rest = retry_after
                    .unwrap_or(self.cfg.rate_limit_rest)
                    .min(self.cfg.max_rate_limit_rest);
                let t = &mut self.targets[i];
                t.totals.rate_limited += 1;
                if !rest.is_zero() {
                    let until = after(now, rest);
                    t.rest_until = Some(t.rest_until.map_or(until, |r| r.max(until)));
                    self.counters.rests += 1;
                }
                release_probe(self);
            }
        }
    }

    /// One active health-check result for target `i`.
    pub(crate) fn report_health(&mut self, i: usize, pass: bool) {
        let Some((healthy_threshold, unhealthy_threshold)) = self.targets[i].thresholds else {
            return;
        };
        let t = &mut self.targets[i];
        t.check_streak = if t.check_streak.0 == pass {
            (pass, t.check_streak.1.saturating_add(1))
        } else {
            (pass, 1)
        };
        let streak = t.check_streak.1;
        let next = match (t.health, pass) {
            // Envoy's rule for a new host: the first pass is enough.
            (Health::Unchecked, true) => Health::Healthy,
            (Health::Unhealthy, true) if streak >= healthy_threshold => Health::Healthy,
            (Health::Unchecked | Health::Healthy, false) if streak >= unhealthy_threshold => {
                Health::Unhealthy
            }
            (h, _) => h,
        };
        if next != t.health {
            let was = t.health;
            t.health = next;
            if next == Health::Healthy && was == Health::Unhealthy {
                // Its old latencies describe the outage, not the recovered target.
                let now = Instant::now();
                for l in &mut t.lanes {
                    l.ewma = PeakEwma::new(self.cfg.initial_latency, now);
                }
            }
            self.counters.health_flips += 1;
            let target = &self.cfg.targets[i].name;
            if next == Health::Unhealthy {
                tracing::warn!(balancer = %self.cfg.name, %target, was = was.as_str(), "target unhealthy: its active checks fail");
            } else {
                tracing::info!(balancer = %self.cfg.name, %target, was = was.as_str(), "target healthy");
            }
        }
    }

    pub(crate) fn counters(&self) -> BalancerCounters {
        self.counters
    }

    pub(crate) fn target_snapshot(&self, i: usize, now: Instant) -> TargetSnapshot {
        let t = &self.targets[i];
        let tau = self.cfg.ewma_decay;
        let lane = |l: &LaneState| LaneLoad {
            latency: Duration::try_from_secs_f64(l.ewma.read(now, tau)).unwrap_or(Duration::MAX),
            in_flight: l.in_flight,
            samples: l.ewma.samples(),
        };
        let window = t.window_ok + t.window_failed;
        TargetSnapshot {
            name: self.cfg.targets[i].name.clone(),
            weight: t.weight,
            health: t.health,
            usable: self.avail(i) == Avail::Usable,
            ejected_for: match t.out {
                Out::Ejected { until } => Some(until.saturating_duration_since(now)),
                _ => None,
            },
            half_open: matches!(t.out, Out::HalfOpen { .. }),
            probe_in_flight: t.out == (Out::HalfOpen { probing: true }),
            ejections: t.ejections,
            ejection_level: t.level,
            resting_for: t.rest_until.map(|r| r.saturating_duration_since(now)),
            consecutive_failures: t.consecutive_failures,
            stream: lane(&t.lanes[0]),
            short: lane(&t.lanes[1]),
            in_flight: t.lanes[0].in_flight + t.lanes[1].in_flight,
            requests: t.totals.requests,
            successes: t.totals.successes,
            failures: t.totals.failures,
            other_failures: t.totals.other_failures,
            rate_limited: t.totals.rate_limited,
            cancelled: t.totals.cancelled,
            window_requests: window,
            success_rate: (window > 0).then(|| t.window_ok as f64 / window as f64),
        }
    }

    /// In-flight count of target `i` on `lane` (tests).
    #[cfg(test)]
    pub(crate) fn in_flight(&self, i: usize, lane: Lane) -> u32 {
        self.targets[i].lanes[lane_index(lane)].in_flight
    }

    /// Weight of target `i` (tests).
    #[cfg(test)]
    pub(crate) fn weight(&self, i: usize) -> u32 {
        self.targets[i].weight
    }
}
