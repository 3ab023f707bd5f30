//! Unit and property tests of the balancer: the state machine on made-up instants, and the
//! `Balancer` on tokio's paused clock.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::ewma::PeakEwma;
use super::state::{Attempt, Avail, Chosen, State};
use super::*;
use crate::Lane;

fn targets(weights: &[u32]) -> Vec<TargetConfig> {
    weights
        .iter()
        .enumerate()
        .map(|(i, w)| TargetConfig::new(format!("t{i}")).weight(*w))
        .collect()
}

fn config(weights: &[u32], policy: BalancePolicy) -> BalancerConfig {
    BalancerConfig {
        name: "test".into(),
        targets: targets(weights),
        policy,
        ..BalancerConfig::default()
    }
}

fn state(cfg: BalancerConfig, seed: u64, now: Instant) -> State {
    cfg.validate().unwrap();
    State::new(cfg, fastrand::Rng::with_seed(seed), now)
}

fn attempt(c: Chosen, lane: Lane, now: Instant) -> Attempt {
    Attempt {
        index: c.index,
        lane,
        probe: c.probe,
        started: now,
        latency_recorded: false,
    }
}

/// Picks from `s` and completes at once with `outcome`; returns the index.
fn pick_complete(s: &mut State, outcome: Outcome, now: Instant) -> usize {
    let c = s.pick(Lane::Short, &[], now);
    s.complete(&attempt(c, Lane::Short, now), Some(outcome), now);
    c.index
}

const FAIL: Outcome = Outcome::Failure(Failure::Retryable);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn peak_ewma_jumps_up_at_once_and_decays_down_with_its_time_constant() {
    let tau = secs(10);
    let t0 = Instant::now();
    let mut e = PeakEwma::new(secs(5), t0);
    // The first sample replaces the initial guess, even a lower one.
    e.observe(Duration::from_millis(100), t0, tau);
    assert_eq!(e.read(t0, tau), 0.1);
    // A higher sample replaces the estimate at once, however little time passed.
    e.observe(secs(2), t0, tau);
    assert_eq!(e.read(t0, tau), 2.0);
    // A lower sample after one time constant moves it (1 − 1/e) of the way.
    let t1 = t0 + tau;
    e.observe(Duration::from_millis(100), t1, tau);
    let expected = 2.0 / std::f64::consts::E + 0.1 * (1.0 - 1.0 / std::f64::consts::E);
    assert!(
        (e.read(t1, tau) - expected).abs() < 1e-9,
        "{}",
        e.read(t1, tau)
    );
    // The same low sample again at once barely moves it: recovery is earned by time.
    e.observe(Duration::from_millis(100), t1, tau);
    assert!((e.read(t1, tau) - expected).abs() < 1e-9);
    // Without samples it decays toward zero with the same constant.
    assert!((e.read(t1 + tau, tau) - expected / std::f64::consts::E).abs() < 1e-9);
    assert_eq!(e.samples(), 4);
}

#[tokio::test(start_paused = true)]
async fn the_balancer_keeps_a_peak_ewma_per_lane_on_the_paused_clock() {
    let b = Balancer::with_seed(config(&[1], BalancePolicy::P2cEwma), 1).unwrap();
    let mut p = b.pick(Lane::Stream, &[]);
    p.record_latency(secs(2));
    // Later samples of the same attempt are ignored: only the first byte counts.
    p.record_latency(secs(9));
    tokio::time::advance(secs(180)).await;
    p.complete(Outcome::Success);
    let snap = b.snapshot();
    let t = &snap.targets[0];
    // 180 s later the stream's sample has decayed (e^-18, so to the 1 ms floor), and the
    // total duration was not taken as a sample.
    assert_eq!(t.stream.samples, 1);
    assert!(
        t.stream.latency == Duration::from_millis(1),
        "decayed to the floor: {:?}",
        t.stream
    );
    // The short lane never had a sample: its initial estimate, decayed.
    assert_eq!(t.short.samples, 0);

    // A short call without an explicit latency uses the time from pick to complete.
    let p = b.pick(Lane::Short, &[]);
    tokio::time::advance(secs(3)).await;
    p.complete(Outcome::Success);
    let t = b.snapshot().targets[0].clone();
    assert_eq!(t.short.samples, 1);
    assert_eq!(t.short.latency, secs(3));
    tokio::time::advance(secs(10)).await;
    let t = b.snapshot().targets[0].clone();
    let decayed = 3.0 / std::f64::consts::E;
    assert!(
        (t.short.latency.as_secs_f64() - decayed).abs() < 1e-6,
        "{:?}",
        t.short
    );
    // A timeout is a latency sample too (a lower bound): the estimate jumps up.
    let p = b.pick(Lane::Short, &[]);
    tokio::time::advance(secs(5)).await;
    p.complete(Outcome::Failure(Failure::Timeout));
    assert_eq!(b.snapshot().targets[0].short.latency, secs(5));
    // A fast failure (connection refused) is not: it would make a dead target look fast.
    let p = b.pick(Lane::Short, &[]);
    p.complete(Outcome::Failure(Failure::NotSent));
    assert_eq!(b.snapshot().targets[0].short.samples, 2);
}

#[test]
fn a_burst_after_a_pause_spreads_instead_of_herding_onto_the_longest_idle_target() {
    let t0 = Instant::now();
    let mut s = state(config(&[1, 1], BalancePolicy::P2cEwma), 4, t0);
    // Same latency, sampled 30 s apart; then five minutes of silence.
    s.record_latency(0, Lane::Short, Duration::from_millis(100), t0);
    s.record_latency(1, Lane::Short, Duration::from_millis(100), t0 + secs(30));
    let burst = t0 + secs(330);
    let mut counts = [0; 2];
    for _ in 0..20 {
        // Held, not completed: the in-flight term must do the spreading.
        counts[s.pick(Lane::Short, &[], burst).index] += 1;
    }
    assert!(counts[0] >= 8 && counts[1] >= 8, "{counts:?}");
}

fn outlier_config(consecutive: u32, base: u64, max: u64) -> BalancerConfig {
    BalancerConfig {
        outlier: OutlierConfig {
            consecutive_failures: Some(consecutive),
            success_rate: None,
            base_ejection_time: secs(base),
            max_ejection_time: secs(max),
            max_ejection_percent: 50,
        },
        ..config(&[1, 1, 1], BalancePolicy::Priority)
    }
}

#[tokio::test(start_paused = true)]
async fn ejection_time_grows_with_each_ejection_is_capped_and_shrinks_in_service() {
    let b = Balancer::with_seed(outlier_config(2, 10, 25), 7).unwrap();
    let fail_first = |n: usize| {
        for _ in 0..n {
            let p = b.pick(Lane::Short, &[]);
            assert_eq!(p.index(), 0);
            p.complete(FAIL);
        }
    };
    fail_first(1);
    assert_eq!(b.snapshot().targets[0].consecutive_failures, 1);
    fail_first(1);
    let t = b.snapshot().targets[0].clone();
    assert_eq!(
        (t.ejected_for, t.ejections, t.ejection_level),
        (Some(secs(10)), 1, 1)
    );
    assert_eq!(
        b.pick(Lane::Short, &[]).index(),
        1,
        "priority skips the ejected target"
    );

    // Each failed probe ejects again with n + 1: 20 s, then 30 s capped at 25 s.
    for (level, time) in [(2, 20), (3, 25)] {
        tokio::time::advance(b.snapshot().targets[0].ejected_for.unwrap()).await;
        let probe = b.pick(Lane::Short, &[]);
        assert!(probe.is_probe() && probe.index() == 0, "{probe:?}");
        probe.complete(FAIL);
        let t = b.snapshot().targets[0].clone();
        assert_eq!((t.ejected_for, t.ejection_level), (Some(secs(time)), level));
    }
    tokio::time::advance(secs(25)).await;
    let probe = b.pick(Lane::Short, &[]);
    assert!(probe.is_probe());
    probe.complete(Outcome::Success);
    let t = b.snapshot().targets[0].clone();
    assert!(t.usable && !t.half_open && t.ejected_for.is_none());
    assert_eq!((t.ejection_level, t.ejections), (3, 3));

    // Every base_ejection_time in service takes one off n.
    tokio::time::advance(secs(10)).await;
    assert_eq!(b.snapshot().targets[0].ejection_level, 2);
    tokio::time::advance(secs(25)).await;
    assert_eq!(b.snapshot().targets[0].ejection_level, 0);
    fail_first(2);
    assert_eq!(b.snapshot().targets[0].ejected_for, Some(secs(10)));
    let c = b.snapshot().counters;
    assert_eq!(
        (c.ejections, c.probes, c.probe_failures, c.probe_successes),
        (4, 3, 2, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_half_open_target_gets_exactly_one_probe_and_neutral_ends_pass_it_on() {
    let b = Balancer::with_seed(outlier_config(1, 10, 300), 3).unwrap();
    b.pick(Lane::Short, &[]).complete(FAIL);
    assert!(b.snapshot().targets[0].ejected_for.is_some());
    tokio::time::advance(secs(10)).await;
    assert!(b.snapshot().targets[0].half_open);

    let probe = b.pick(Lane::Stream, &[]);
    assert!(probe.is_probe() && probe.index() == 0);
    // While the probe is in flight nobody else goes there.
    let others: Vec<Pick> = (0..20).map(|_| b.pick(Lane::Short, &[])).collect();
    assert!(others.iter().all(|p| p.index() != 0 && !p.is_probe()));
    assert!(b.snapshot().targets[0].probe_in_flight);
    // A cancel says nothing: the next pick probes instead.
    drop(probe);
    let probe = b.pick(Lane::Short, &[]);
    assert!(probe.is_probe() && probe.index() == 0);
    // Nor does a final error or a 429 (which rests it, though).
    probe.complete(Outcome::Failure(Failure::Final));
    let probe = b.pick(Lane::Short, &[]);
    assert!(probe.is_probe());
    probe.complete(Outcome::RateLimited {
        retry_after: Some(secs(2)),
    });
    assert_ne!(b.pick(Lane::Short, &[]).index(), 0, "resting");
    tokio::time::advance(secs(2)).await;
    // An excluded half-open target is not probed by that request.
    assert_ne!(b.pick(Lane::Short, &[0]).index(), 0);
    let probe = b.pick(Lane::Short, &[]);
    assert!(probe.is_probe());
    probe.complete(Outcome::Success);
    let t = b.snapshot().targets[0].clone();
    assert!(t.usable);
    assert_eq!(t.ejections, 1, "neutral probe ends did not eject it again");
    assert_eq!(b.snapshot().counters.probes, 4);
    drop(others);
    assert!(b.snapshot().targets.iter().all(|t| t.in_flight == 0));
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_target_rests_for_retry_after_without_counting_toward_ejection() {
    let mut cfg = outlier_config(1, 10, 300);
    cfg.max_rate_limit_rest = secs(60);
    let b = Balancer::with_seed(cfg, 5).unwrap();
    b.pick(Lane::Short, &[]).complete(Outcome::RateLimited {
        retry_after: Some(secs(30)),
    });
    let t = b.snapshot().targets[0].clone();
    assert_eq!(t.resting_for, Some(secs(30)));
    assert!(!t.usable);
    assert_eq!(
        (t.ejections, t.ejection_level, t.consecutive_failures),
        (0, 0, 0)
    );
    assert_eq!(b.pick(Lane::Short, &[]).index(), 1);
    tokio::time::advance(secs(30)).await;
    assert_eq!(b.pick(Lane::Short, &[]).index(), 0, "back after the rest");
    // Capped by max_rate_limit_rest; without Retry-After, rate_limit_rest (1 s).
    b.pick(Lane::Short, &[]).complete(Outcome::RateLimited {
        retry_after: Some(secs(3600)),
    });
    assert_eq!(b.snapshot().targets[0].resting_for, Some(secs(60)));
    let p = b.pick(Lane::Short, &[]);
    assert_eq!(p.index(), 1);
    p.complete(Outcome::RateLimited { retry_after: None });
    assert_eq!(b.snapshot().targets[1].resting_for, Some(secs(1)));
    // Resting targets do not count toward the ejection cap: target 2 can still be ejected.
    b.pick(Lane::Short, &[]).complete(FAIL);
    let snap = b.snapshot();
    assert!(snap.targets[2].ejected_for.is_some());
    assert_eq!(snap.counters.rests, 3);
    // Everything is out now: the pick fails open to the one back soonest (target 1, 1 s).
    let p = b.pick(Lane::Short, &[]);
    assert!(p.is_fail_open());
    assert_eq!(p.index(), 1);
}

#[test]
fn the_success_rate_rule_ejects_an_outlier_among_many_targets() {
    let t0 = Instant::now();
    let mut cfg = config(&[1; 7], BalancePolicy::WeightedRoundRobin);
    cfg.outlier = OutlierConfig {
        consecutive_failures: None,
        success_rate: Some(SuccessRateConfig {
            interval: secs(10),
            minimum_hosts: 5,
            request_volume: 20,
            stdev_factor: 1.9,
        }),
        ..OutlierConfig::default()
    };
    let mut s = state(cfg, 1, t0);
    // WRR with equal weights visits each target once per 7 picks; target 6 fails half.
    for round in 0..30 {
        for _ in 0..7 {
            let c = s.pick(Lane::Short, &[], t0);
            let outcome = if c.index == 6 && round % 2 == 0 {
                FAIL
            } else {
                Outcome::Success
            };
            s.complete(&attempt(c, Lane::Short, t0), Some(outcome), t0);
        }
    }
    // Nothing happens before the window closes.
    assert_eq!(s.ejected_count(), 0);
    s.refresh(t0 + secs(10));
    assert_eq!(s.ejected_count(), 1);
    assert_eq!(s.avail(6), Avail::Unusable);
    assert_eq!(s.counters().success_rate_ejections, 1);
    // The next window starts empty: no second ejection from the old numbers.
    s.refresh(t0 + secs(20));
    assert_eq!(s.counters().ejections, 1);
}

#[test]
fn the_success_rate_rule_needs_volume_and_enough_hosts() {
    let t0 = Instant::now();
    let mut cfg = config(&[1; 7], BalancePolicy::WeightedRoundRobin);
    cfg.outlier.consecutive_failures = None;
    cfg.outlier.success_rate = Some(SuccessRateConfig {
        request_volume: 100,
        ..SuccessRateConfig::default()
    });
    let mut s = state(cfg, 1, t0);
    for _ in 0..7 * 50 {
        let c = s.pick(Lane::Short, &[], t0);
        let outcome = if c.index == 6 { FAIL } else { Outcome::Success };
        s.complete(&attempt(c, Lane::Short, t0), Some(outcome), t0);
    }
    s.refresh(t0 + secs(10));
    assert_eq!(
        s.ejected_count(),
        0,
        "50 requests each is below the volume of 100"
    );
}

#[test]
fn fail_open_prefers_what_is_back_soonest_and_unhealthy_last() {
    let t0 = Instant::now();
    let mut cfg = outlier_config(1, 10, 300);
    cfg.outlier.max_ejection_percent = 100;
    cfg.targets[2].health_check = Some(HealthCheckConfig::default());
    let mut s = state(cfg, 1, t0);
    for _ in 0..3 {
        s.report_health(2, false);
    }
    assert_eq!(s.counters().health_flips, 1);
    // Target 0 ejected at t0 (back t0+10 s), target 1 at t0+5 s (back t0+15 s).
    pick_complete(&mut s, FAIL, t0);
    pick_complete(&mut s, FAIL, t0 + secs(5));
    let c = s.pick(Lane::Short, &[], t0 + secs(6));
    assert!(c.fail_open);
    assert_eq!(c.index, 0, "back soonest, and not unhealthy");
    // Excluded targets come last: with 0 excluded, 1 (ejected) before 2 (unhealthy).
    let c = s.pick(Lane::Short, &[0], t0 + secs(6));
    assert_eq!((c.index, c.fail_open), (1, true));
    // When everything is excluded, the same order over all.
    let c = s.pick(Lane::Short, &[0, 1, 2], t0 + secs(6));
    assert_eq!(c.index, 0);
}

#[test]
fn an_excluded_target_is_used_only_when_no_other_usable_target_exists() {
    let t0 = Instant::now();
    let mut s = state(config(&[1, 1, 1], BalancePolicy::P2cEwma), 9, t0);
    for _ in 0..100 {
        let c = s.pick(Lane::Short, &[0, 2], t0);
        assert_eq!(c.index, 1);
        s.complete(&attempt(c, Lane::Short, t0), None, t0);
    }
    // Target 1 unusable (resting): an excluded usable target beats failing open.
    let c = s.pick(Lane::Short, &[0, 2], t0);
    assert_eq!(c.index, 1);
    let rested = Outcome::RateLimited {
        retry_after: Some(secs(5)),
    };
    s.complete(&attempt(c, Lane::Short, t0), Some(rested), t0);
    let c = s.pick(Lane::Short, &[0, 2], t0);
    assert!(c.index != 1 && !c.fail_open, "{c:?}");
}

#[test]
fn health_checks_flip_after_their_thresholds() {
    let t0 = Instant::now();
    let mut cfg = config(&[1, 1], BalancePolicy::Priority);
    cfg.targets[0].health_check = Some(HealthCheckConfig {
        healthy_threshold: 2,
        unhealthy_threshold: 3,
        ..HealthCheckConfig::default()
    });
    let mut s = state(cfg, 1, t0);
    let health = |s: &State| s.target_snapshot(0, t0).health;
    assert_eq!(health(&s), Health::Unchecked);
    s.report_health(0, true);
    assert_eq!(health(&s), Health::Healthy, "the first pass is enough");
    s.report_health(0, false);
    s.report_health(0, false);
    assert_eq!(health(&s), Health::Healthy);
    s.report_health(0, true);
    s.report_health(0, false);
    s.report_health(0, false);
    assert_eq!(health(&s), Health::Healthy, "the streak was broken");
    s.report_health(0, false);
    assert_eq!(health(&s), Health::Unhealthy);
    assert_eq!(s.pick(Lane::Short, &[], t0).index, 1);
    s.report_health(0, true);
    assert_eq!(health(&s), Health::Unhealthy);
    s.report_health(0, true);
    assert_eq!(health(&s), Health::Healthy);
    assert_eq!(s.counters().health_flips, 3);
    // A target without a health check ignores reports.
    s.report_health(1, false);
    assert_eq!(s.target_snapshot(1, t0).health, Health::Unchecked);
}

#[test]
fn the_ejection_cap_rounds_down_but_allows_one() {
    let cap = |pct: u8, n: usize| {
        OutlierConfig {
            max_ejection_percent: pct,
            ..OutlierConfig::default()
        }
        .ejection_cap(n)
    };
    assert_eq!(
        [cap(50, 1), cap(50, 2), cap(50, 3), cap(50, 10)],
        [0, 1, 1, 5]
    );
    assert_eq!(
        [cap(0, 1), cap(0, 4), cap(10, 4), cap(100, 3)],
        [0, 1, 1, 3]
    );
}

#[test]
fn config_errors_name_the_field() {
    let field = |cfg: BalancerConfig| match cfg.validate() {
        Err(BalanceConfigError::Field { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    assert_eq!(field(BalancerConfig::default()), "targets");
    assert_eq!(
        field(config(&[1, 0], BalancePolicy::Priority)),
        "targets[1].weight"
    );
    let mut c = config(&[1, 1], BalancePolicy::Priority);
    c.targets[1].name = "t0".into();
    assert_eq!(field(c), "targets[1].name");
    let mut c = config(&[1], BalancePolicy::Priority);
    c.targets[0].health_check = Some(HealthCheckConfig {
        path: "models".into(),
        ..HealthCheckConfig::default()
    });
    assert_eq!(field(c), "targets[0].health_check.path");
    let mut c = config(&[1], BalancePolicy::Priority);
    c.outlier.max_ejection_time = secs(1);
    assert_eq!(field(c), "outlier.max_ejection_time");
    let mut c = config(&[1], BalancePolicy::Priority);
    c.outlier.max_ejection_percent = 101;
    assert_eq!(field(c), "outlier.max_ejection_percent");
    let mut c = config(&[1], BalancePolicy::Priority);
    c.outlier.consecutive_failures = Some(0);
    assert_eq!(field(c), "outlier.consecutive_failures");
    let mut c = config(&[1], BalancePolicy::Priority);
    c.outlier.success_rate = Some(SuccessRateConfig {
        stdev_factor: f64::NAN,
        ..SuccessRateConfig::default()
    });
    assert_eq!(field(c), "outlier.success_rate.stdev_factor");
    let msg = Balancer::new(config(&[0], BalancePolicy::Priority))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("balancer `test`: targets[0].weight"), "{msg}");
    for p in [
        BalancePolicy::P2cEwma,
        BalancePolicy::LeastInFlight,
        BalancePolicy::WeightedRoundRobin,
        BalancePolicy::Priority,
    ] {
        assert_eq!(BalancePolicy::parse(p.as_str()), Some(p));
    }
    assert_eq!(BalancePolicy::parse("random"), None);
}

#[test]
fn a_health_check_config_never_shows_its_header_values() {
    let mut check = HealthCheckConfig::default();
    check.headers.insert(
        http::header::AUTHORIZATION,
        "Bearer sk-secret".parse().unwrap(),
    );
    let cfg = BalancerConfig {
        targets: vec![TargetConfig::new("key-1").health_check(check)],
        ..BalancerConfig::default()
    };
    let shown = format!("{cfg:?}");
    assert!(
        shown.contains("authorization") && !shown.contains("sk-secret"),
        "{shown}"
    );
}

#[test]
fn statuses_and_upstream_errors_map_to_outcomes() {
    let mut h = http::HeaderMap::new();
    h.insert(http::header::RETRY_AFTER, "7".parse().unwrap());
    let s = |code: u16| http::StatusCode::from_u16(code).unwrap();
    assert_eq!(
        Outcome::from_status(s(429), &h),
        Outcome::RateLimited {
            retry_after: Some(secs(7))
        }
    );
    h.insert(
        http::header::RETRY_AFTER,
        "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
    );
    assert_eq!(
        Outcome::from_status(s(429), &h),
        Outcome::RateLimited { retry_after: None }
    );
    assert_eq!(Outcome::from_status(s(503), &h), FAIL);
    assert_eq!(
        Outcome::from_status(s(400), &h),
        Outcome::Failure(Failure::Final)
    );
    assert_eq!(Outcome::from_status(s(200), &h), Outcome::Success);
    use crate::UpstreamError as E;
    assert_eq!(Failure::from_upstream_error(&E::Refused), Failure::NotSent);
    assert_eq!(Failure::from_upstream_error(&E::Deadline), Failure::Timeout);
    assert_eq!(Failure::from_upstream_error(&E::Closed), Failure::Retryable);
    let full = E::PoolFull {
        upstream: "u".into(),
        lane: Lane::Short,
        limit: crate::LaneLimit::NotReady,
        max_pending: 1,
    };
    assert_eq!(Failure::from_upstream_error(&full), Failure::Local);
    assert!(!Failure::Local.counts_toward_ejection());
    assert!(Failure::FirstTokenTimeout.counts_toward_ejection());
}

// ---- property tests ----

#[derive(Clone, Debug)]
enum Op {
    Pick { stream: bool, exclude: u8 },
    Complete { which: usize, outcome: u8 },
    Cancel { which: usize },
    Health { target: usize, pass: bool },
    Advance { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), any::<u8>()).prop_map(|(stream, exclude)| Op::Pick { stream, exclude }),
        4 => (any::<usize>(), 0u8..6).prop_map(|(which, outcome)| Op::Complete { which, outcome }),
        1 => any::<usize>().prop_map(|which| Op::Cancel { which }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(target, pass)| Op::Health { target, pass }),
        2 => (0u64..4000).prop_map(|ms| Op::Advance { ms }),
    ]
}

fn policy() -> impl Strategy<Value = BalancePolicy> {
    prop_oneof![
        Just(BalancePolicy::P2cEwma),
        Just(BalancePolicy::LeastInFlight),
        Just(BalancePolicy::WeightedRoundRobin),
        Just(BalancePolicy::Priority),
    ]
}

fn outcome(k: u8) -> Outcome {
    match k {
        0 | 1 => Outcome::Success,
        2 => FAIL,
        3 => Outcome::Failure(Failure::Timeout),
        4 => Outcome::Failure(Failure::Final),
        _ => Outcome::RateLimited {
            retry_after: Some(Duration::from_millis(1500)),
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The pick rule of the module docs, and the ejection cap, under any sequence of picks,
    /// outcomes, cancels, health reports and time.
    #[test]
    fn picks_follow_the_rule_and_ejections_stay_under_the_cap(
        weights in proptest::collection::vec(1u32..5, 1..7),
        checked in any::<u8>(),
        policy in policy(),
        consecutive in 1u32..4,
        pct in 0u8..=100,
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let n = weights.len();
        let mut cfg = config(&weights, policy);
        cfg.outlier = OutlierConfig {
            consecutive_failures: Some(consecutive),
            success_rate: Some(SuccessRateConfig {
                interval: secs(5),
                minimum_hosts: 2,
                request_volume: 2,
                stdev_factor: 0.5,
            }),
            base_ejection_time: secs(2),
            max_ejection_time: secs(7),
            max_ejection_percent: pct,
        };
        for (i, t) in cfg.targets.iter_mut().enumerate() {
            if checked & (1 << i) != 0 {
                t.health_check = Some(HealthCheckConfig {
                    healthy_threshold: 1,
                    unhealthy_threshold: 1,
                    ..HealthCheckConfig::default()
                });
            }
        }
        let cap = cfg.outlier.ejection_cap(n);
        let mut now = Instant::now();
        let mut s = state(cfg, seed, now);
        let mut open: Vec<Attempt> = Vec::new();
        for op in ops {
            match op {
                Op::Pick { stream, exclude } => {
                    let lane = if stream { Lane::Stream } else { Lane::Short };
                    let exclude: Vec<usize> = (0..n).filter(|i| exclude & (1 << i) != 0).collect();
                    s.refresh(now);
                    let ex = |i: &usize| exclude.contains(i);
                    let probe_ready: Vec<usize> = (0..n).filter(|i| !ex(i) && s.avail(*i) == Avail::ProbeReady).collect();
                    let usable: Vec<usize> = (0..n).filter(|i| !ex(i) && s.avail(*i) == Avail::Usable).collect();
                    let usable_any: Vec<usize> = (0..n).filter(|i| s.avail(*i) == Avail::Usable).collect();
                    let c = s.pick(lane, &exclude, now);
                    if !probe_ready.is_empty() {
                        prop_assert!(c.probe && probe_ready.contains(&c.index), "{c:?} {probe_ready:?}");
                    } else if !usable.is_empty() {
                        prop_assert!(usable.contains(&c.index) && !c.fail_open, "{c:?} {usable:?}");
                    } else if !usable_any.is_empty() {
                        prop_assert!(usable_any.contains(&c.index) && !c.fail_open, "{c:?}");
                    } else {
                        prop_assert!(c.fail_open);
                        let not_excluded = (0..n).any(|i| !ex(&i));
                        prop_assert!(!not_excluded || !ex(&c.index), "failing open prefers not excluded");
                    }
                    open.push(attempt(c, lane, now));
                    let probes = open.iter().filter(|a| a.probe && a.index == c.index).count();
                    prop_assert!(probes <= 1, "{probes} probes in flight on target {}", c.index);
                }
                Op::Complete { which, outcome: k } if !open.is_empty() => {
                    let a = open.swap_remove(which % open.len());
                    s.complete(&a, Some(outcome(k)), now);
                }
                Op::Cancel { which } if !open.is_empty() => {
                    let a = open.swap_remove(which % open.len());
                    s.complete(&a, None, now);
                }
                Op::Health { target, pass } => s.report_health(target % n, pass),
                Op::Advance { ms } => {
                    now += Duration::from_millis(ms);
                    s.refresh(now);
                }
                Op::Complete { .. } | Op::Cancel { .. } => {}
            }
            prop_assert!(s.ejected_count() <= cap, "{} out, cap {cap}", s.ejected_count());
        }
        for a in open.drain(..) {
            s.complete(&a, None, now);
        }
        for i in 0..n {
            prop_assert_eq!(s.in_flight(i, Lane::Stream) + s.in_flight(i, Lane::Short), 0);
        }
    }

    /// Smooth WRR: over k × Σweight picks each target gets exactly k × its weight.
    #[test]
    fn weighted_round_robin_gives_exact_shares(
        weights in proptest::collection::vec(1u32..10, 1..7),
        rounds in 1usize..4,
    ) {
        let now = Instant::now();
        let mut s = state(config(&weights, BalancePolicy::WeightedRoundRobin), 0, now);
        let total: u32 = weights.iter().sum();
        let mut counts = vec![0u32; weights.len()];
        for _ in 0..rounds * total as usize {
            counts[pick_complete(&mut s, Outcome::Success, now)] += 1;
        }
        let expected: Vec<u32> = weights.iter().map(|w| w * rounds as u32).collect();
        prop_assert_eq!(counts, expected);
    }

    /// p2c with equal latencies and no load chooses in proportion to weight, within five
    /// standard deviations of the binomial.
    #[test]
    fn p2c_shares_follow_weights_when_latencies_are_equal(
        weights in proptest::collection::vec(1u32..6, 2..6),
        seed in any::<u64>(),
    ) {
        let now = Instant::now();
        let mut s = state(config(&weights, BalancePolicy::P2cEwma), seed, now);
        let picks = 4000u32;
        let mut counts = vec![0u32; weights.len()];
        for _ in 0..picks {
            let c = s.pick(Lane::Short, &[], now);
            let mut a = attempt(c, Lane::Short, now);
            // Every target reports the same latency at the same instant.
            s.record_latency(c.index, Lane::Short, Duration::from_millis(250), now);
            a.latency_recorded = true;
            s.complete(&a, Some(Outcome::Success), now);
            counts[c.index] += 1;
        }
        let total: u32 = weights.iter().sum();
        for (i, w) in weights.iter().enumerate() {
            let p = f64::from(*w) / f64::from(total);
            let mean = f64::from(picks) * p;
            let sd = (f64::from(picks) * p * (1.0 - p)).sqrt();
            prop_assert!((f64::from(counts[i]) - mean).abs() <= 5.0 * sd + 1.0,
                "target {i} weight {w}: {} picks, expected {mean:.0} ± {:.0}", counts[i], 5.0 * sd);
        }
    }

    /// Least in flight: every pick is a target with the lowest (in-flight + 1) / weight
    /// among the targets it may use.
    #[test]
    fn least_in_flight_picks_are_minimal(
        weights in proptest::collection::vec(1u32..4, 1..7),
        seed in any::<u64>(),
        ops in proptest::collection::vec((any::<bool>(), any::<u8>(), any::<usize>()), 1..150),
    ) {
        let n = weights.len();
        let now = Instant::now();
        let mut s = state(config(&weights, BalancePolicy::LeastInFlight), seed, now);
        let mut open: Vec<Attempt> = Vec::new();
        for (is_pick, exclude, which) in ops {
            if is_pick || open.is_empty() {
                let exclude: Vec<usize> = (0..n).filter(|i| exclude & (1 << i) != 0).collect();
                let mut tier: Vec<usize> = (0..n).filter(|i| !exclude.contains(i)).collect();
                if tier.is_empty() {
                    tier = (0..n).collect();
                }
                let load = |s: &State, i: usize| {
                    f64::from(s.in_flight(i, Lane::Short) + 1) / f64::from(s.weight(i))
                };
                let min = tier.iter().map(|&i| load(&s, i)).fold(f64::INFINITY, f64::min);
                let c = s.pick(Lane::Short, &exclude, now);
                prop_assert!(tier.contains(&c.index));
                prop_assert!(load(&s, c.index) - 1.0 / f64::from(s.weight(c.index)) <= min + 1e-9,
                    "picked {} not minimal", c.index);
                open.push(attempt(c, Lane::Short, now));
            } else {
                let a = open.swap_remove(which % open.len());
                s.complete(&a, None, now);
            }
        }
    }
}
