//! Balancer settings: plain structs the gateway fills from its TOML, each field documented
//! with its default where it is declared, validated by [`BalancerConfig::validate`] (which
//! [`Balancer::new`](super::Balancer::new) calls) with the field's path in the error.

use std::time::Duration;

use bytes::Bytes;

/// How a [`Balancer`](super::Balancer) chooses among the targets it may use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BalancePolicy {
    /// Power of two choices on peak-EWMA latency (linkerd, Finagle): draw two targets at
    /// random, each in proportion to its weight, and take the one with the lower cost =
    /// lane latency (peak EWMA) × (1 + in-flight on that lane × mean weight / weight). With
    /// equal costs the first one drawn wins, so equal targets share traffic by weight; a
    /// slower or busier target loses its share at once. The default.
    #[default]
    P2cEwma,
    /// The target with the fewest requests in flight on the lane, relative to its weight
    /// (lowest (in-flight + 1) / weight); ties are drawn at random by weight.
    LeastInFlight,
    /// Smooth weighted round robin (nginx): over any Σweight picks from the same set of
    /// targets each target gets exactly its weight, spread out rather than in runs.
    WeightedRoundRobin,
    /// The first usable target in the configured order: later targets are fallbacks.
    Priority,
}

impl BalancePolicy {
    /// `"p2c_ewma"`, `"least_in_flight"`, `"weighted_round_robin"` or `"priority"`: the
    /// config spelling, also used in metrics and the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            BalancePolicy::P2cEwma => "p2c_ewma",
            BalancePolicy::LeastInFlight => "least_in_flight",
            BalancePolicy::WeightedRoundRobin => "weighted_round_robin",
            BalancePolicy::Priority => "priority",
        }
    }

    /// Parses the config spelling (see [`BalancePolicy::as_str`]); `None` for anything else.
    pub fn parse(s: &str) -> Option<BalancePolicy> {
        [
            BalancePolicy::P2cEwma,
            BalancePolicy::LeastInFlight,
            BalancePolicy::WeightedRoundRobin,
            BalancePolicy::Priority,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }
}

impl std::fmt::Display for BalancePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One target of a balancer: a replica, a region, or one API key of a provider, each backed
/// by its own [`Upstream`](crate::Upstream) that the gateway keeps beside the balancer, in
/// the same order (a [`Pick`](super::Pick) names its target by that index).
#[derive(Clone, Debug, PartialEq)]
pub struct TargetConfig {
    /// Unique within the balancer; used in the snapshot, logs and metrics. Never a secret
    /// (name a key `openai-key-2`, not by its value). Required.
    pub name: String,
    /// Relative share of traffic. Must be ≥ 1 (remove a target to stop its traffic).
    /// Default 1.
    pub weight: u32,
    /// Active health checks of this target. Default `None`: the target is only watched
    /// passively (outlier ejection) and its health stays `unchecked`.
    pub health_check: Option<HealthCheckConfig>,
}

impl TargetConfig {
    /// A target named `name` with weight 1 and no active health check.
    pub fn new(name: impl Into<String>) -> TargetConfig {
        TargetConfig {
            name: name.into(),
            weight: 1,
            health_check: None,
        }
    }

    /// The same target with weight `weight`.
    pub fn weight(mut self, weight: u32) -> TargetConfig {
        self.weight = weight;
        self
    }

    /// The same target, actively checked with `check`.
    pub fn health_check(mut self, check: HealthCheckConfig) -> TargetConfig {
        self.health_check = Some(check);
        self
    }
}

/// An active health check: every `interval` one cheap request through the target's
/// [`Upstream::send`](crate::Upstream::send) on [`Lane::Short`](crate::Lane::Short), bounded
/// by `timeout`. A 2xx response (whose body is read, at most 64 KiB) is a pass; anything
/// else (another status, an error, the timeout) is a fail.
///
/// A target starts `unchecked` (usable); its first pass makes it `healthy`.
/// `unhealthy_threshold` fails in a row make it `unhealthy` (no traffic while a usable
/// target exists), and `healthy_threshold` passes in a row make it `healthy` again.
///
/// Its `Debug` shows the header names only: the values are often an API key.
#[derive(Clone, PartialEq)]
pub struct HealthCheckConfig {
    /// Time between the starts of two checks (a check that takes longer delays the next).
    /// The first check runs as soon as the checker starts. Must be > 0. Default 10 s.
    pub interval: Duration,
    /// Bound on one check: connect, response headers and reading the body. Must be > 0.
    /// Default 2 s.
    pub timeout: Duration,
    /// Request method. Default `GET`.
    pub method: http::Method,
    /// Path (and query) relative to the upstream's `base_url`, as in
    /// [`Upstream::send`](crate::Upstream::send): `/models` on `https://host/v1` asks
    /// `/v1/models`. Must start with `/`. Default `/models`.
    pub path: String,
    /// Request headers, e.g. the provider's auth header and `content-type`. Values are never
    /// logged. Default none.
    pub headers: http::HeaderMap,
    /// Request body. Default empty.
    pub body: Bytes,
    /// Passes in a row that make an unhealthy target healthy. Must be ≥ 1. Default 2.
    pub healthy_threshold: u32,
    /// Fails in a row that make a target unhealthy. Must be ≥ 1. Default 3.
    pub unhealthy_threshold: u32,
}

impl std::fmt::Debug for HealthCheckConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured so that a new field is not silently left out.
        let HealthCheckConfig {
            interval,
            timeout,
            method,
            path,
            headers,
            body,
            healthy_threshold,
            unhealthy_threshold,
        } = self;
        f.debug_struct("HealthCheckConfig")
            .field("interval", interval)
            .field("timeout", timeout)
            .field("method", method)
            .field("path", path)
            .field("headers", &headers.keys().collect::<Vec<_>>())
            .field("body_bytes", &body.len())
            .field("healthy_threshold", healthy_threshold)
            .field("unhealthy_threshold", unhealthy_threshold)
            .finish()
    }
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        HealthCheckConfig {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
            method: http::Method::GET,
            path: "/models".into(),
            headers: http::HeaderMap::new(),
            body: Bytes::new(),
            healthy_threshold: 2,
            unhealthy_threshold: 3,
        }
    }
}

/// Envoy's success-rate rule: at the end of every `interval`, among the in-service targets
/// that completed at least `request_volume` counted requests in it (successes plus failures
/// that count toward ejection), if there are at least `minimum_hosts` of them, each whose
/// success rate is below mean − `stdev_factor` × stdev (population) is ejected.
///
/// NOTE: one outlier among n targets sits at most (n − 1)/√n standard deviations below the
/// mean, so with the default factor 1.9 the rule can only fire with 6 or more qualifying
/// targets; smaller routes rely on the consecutive-failure rule.
#[derive(Clone, Debug, PartialEq)]
pub struct SuccessRateConfig {
    /// Length of the window the rates are computed over. Must be > 0. Default 10 s.
    pub interval: Duration,
    /// Qualifying targets needed before the rule applies. Must be ≥ 2. Default 5.
    pub minimum_hosts: usize,
    /// Counted requests a target needs in the window to qualify. Must be ≥ 1. Default 100.
    pub request_volume: u64,
    /// How many standard deviations below the mean a rate must be. Must be > 0 and finite.
    /// Default 1.9.
    pub stdev_factor: f64,
}

impl Default for SuccessRateConfig {
    fn default() -> Self {
        SuccessRateConfig {
            interval: Duration::from_secs(10),
            minimum_hosts: 5,
            request_volume: 100,
            stdev_factor: 1.9,
        }
    }
}

/// Passive outlier ejection: targets that fail are taken out of rotation for a while,
/// then probed by exactly one request (half-open) before they come back.
#[derive(Clone, Debug, PartialEq)]
pub struct OutlierConfig {
    /// Failures in a row that eject a target, counting only failures that count toward
    /// ejection ([`Failure::counts_toward_ejection`](super::Failure::counts_toward_ejection)).
    /// `None` turns the rule off. Must be ≥ 1. Default `Some(5)`.
    pub consecutive_failures: Option<u32>,
    /// The success-rate rule. `None` turns it off. Default `Some(SuccessRateConfig::default())`.
    pub success_rate: Option<SuccessRateConfig>,
    /// An ejection lasts `base_ejection_time × n`, where n counts the target's recent
    /// ejections (1 for the first; +1 for each new one, including a failed probe; −1 for
    /// each `base_ejection_time` the target then stays in service). Must be > 0.
    /// Default 30 s.
    pub base_ejection_time: Duration,
    /// Cap on one ejection's length. Must be ≥ `base_ejection_time`. Default 300 s.
    pub max_ejection_time: Duration,
    /// At most this percentage of the balancer's targets are out by ejection (ejected or
    /// half-open) at once, rounded down but at least one when there are two or more
    /// targets; an ejection beyond the cap is skipped and counted. Targets resting after a
    /// 429 or unhealthy by health check do not count. 0 to 100. Default 50.
    pub max_ejection_percent: u8,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig {
            consecutive_failures: Some(5),
            success_rate: Some(SuccessRateConfig::default()),
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_percent: 50,
        }
    }
}

impl OutlierConfig {
    /// How many of `targets` may be out by ejection at once (see `max_ejection_percent`).
    pub fn ejection_cap(&self, targets: usize) -> usize {
        let cap = targets * usize::from(self.max_ejection_percent.min(100)) / 100;
        if targets >= 2 {
            cap.max(1)
        } else {
            cap
        }
    }
}

/// Everything about one balancer: its targets, the policy, latency tracking, ejection and
/// rate-limit rests.
#[derive(Clone, Debug, PartialEq)]
pub struct BalancerConfig {
    /// Name in logs, the snapshot and metrics (e.g. the route's name). Default `"default"`.
    pub name: String,
    /// The targets, in order (the order matters for [`BalancePolicy::Priority`] and is the
    /// index a [`Pick`](super::Pick) reports). At least one; names unique. Default none.
    pub targets: Vec<TargetConfig>,
    /// How to choose. Default [`BalancePolicy::P2cEwma`].
    pub policy: BalancePolicy,
    /// Time constant of the peak EWMA: a latency sample above the estimate replaces it at
    /// once; lower samples pull it down by 1 − e^(−Δt/decay); and with no samples the
    /// estimate decays toward zero (floored at 1 ms) at the same rate, so a target that
    /// was slow once is tried again later. Must be > 0. Default 10 s.
    pub ewma_decay: Duration,
    /// The latency a target is assumed to have on a lane before its first sample there
    /// (the first sample replaces it). Default 250 ms.
    pub initial_latency: Duration,
    /// Passive outlier ejection. Default [`OutlierConfig::default`].
    pub outlier: OutlierConfig,
    /// How long a target rests after a rate-limited response without a usable
    /// `Retry-After`. `0s` means it does not rest. Default 1 s.
    pub rate_limit_rest: Duration,
    /// Cap on one rest, whatever `Retry-After` says. Default 300 s.
    pub max_rate_limit_rest: Duration,
}

impl Default for BalancerConfig {
    fn default() -> Self {
        BalancerConfig {
            name: "default".into(),
            targets: Vec::new(),
            policy: BalancePolicy::P2cEwma,
            ewma_decay: Duration::from_secs(10),
            initial_latency: Duration::from_millis(250),
            outlier: OutlierConfig::default(),
            rate_limit_rest: Duration::from_secs(1),
            max_rate_limit_rest: Duration::from_secs(300),
        }
    }
}

/// Why a [`BalancerConfig`] was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BalanceConfigError {
    /// A field is out of range; `field` is its path below the balancer, e.g.
    /// `targets[1].weight` or `outlier.max_ejection_percent`.
    #[error("balancer `{balancer}`: {field}: {reason}")]
    Field {
        /// The balancer's name.
        balancer: String,
        /// The field at fault.
        field: String,
        /// What is wrong with it, with the numbers.
        reason: String,
    },
    /// [`HealthChecker::spawn`](super::HealthChecker::spawn) was given a different number of
    /// upstreams than the balancer has targets.
    #[error("balancer `{balancer}` has {targets} targets but {upstreams} upstreams were given")]
    UpstreamCount {
        /// The balancer's name.
        balancer: String,
        /// Targets in the balancer.
        targets: usize,
        /// Upstreams given.
        upstreams: usize,
    },
}

impl BalancerConfig {
    /// Checks every field.
    ///
    /// # Errors
    /// [`BalanceConfigError::Field`] naming the first field out of range: no targets, an
    /// empty or duplicate name, a weight of 0, a zero duration where one must be > 0, a
    /// threshold of 0, `max_ejection_time < base_ejection_time`, `max_ejection_percent`
    /// above 100, a health-check path that is not an absolute path.
    pub fn validate(&self) -> Result<(), BalanceConfigError> {
        // Destructured so that a new field cannot be silently left unchecked.
        let BalancerConfig {
            name,
            targets,
            policy: _,
            ewma_decay,
            initial_latency: _,
            outlier,
            rate_limit_rest: _,
            max_rate_limit_rest: _,
        } = self;
        let err = |field: String, reason: String| BalanceConfigError::Field {
            balancer: name.clone(),
            field,
            reason,
        };
        let positive = |field: &str, d: Duration| {
            if d.is_zero() {
                Err(err(field.into(), "must be more than 0".into()))
            } else {
                Ok(())
            }
        };
        if targets.is_empty() {
            return Err(err(
                "targets".into(),
                "at least one target is needed".into(),
            ));
        }
        for (i, t) in targets.iter().enumerate() {
            let TargetConfig {
                name: tname,
                weight,
                health_check,
            } = t;
            if tname.is_empty() {
                return Err(err(
                    format!("targets[{i}].name"),
                    "must not be empty".into(),
                ));
            }
            if targets[..i].iter().any(|o| &o.name == tname) {
                return Err(err(
                    format!("targets[{i}].name"),
                    format!("`{tname}` is used by an earlier target; names must be unique"),
                ));
            }
            if *weight == 0 {
                return Err(err(
                    format!("targets[{i}].weight"),
                    "must be at least 1 (remove the target to stop its traffic)".into(),
                ));
            }
            if let Some(hc) = health_check {
                let HealthCheckConfig {
                    interval,
                    timeout,
                    method: _,
                    path,
                    headers: _,
                    body: _,
                    healthy_threshold,
                    unhealthy_threshold,
                } = hc;
                let f = |leaf: &str| format!("targets[{i}].health_check.{leaf}");
                positive(&f("interval"), *interval)?;
                positive(&f("timeout"), *timeout)?;
                if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
                    return Err(err(
                        f("path"),
                        format!("`{path}` is not a path starting with `/`"),
                    ));
                }
                for (leaf, v) in [
                    ("healthy_threshold", healthy_threshold),
                    ("unhealthy_threshold", unhealthy_threshold),
                ] {
                    if *v == 0 {
                        return Err(err(f(leaf), "must be at least 1".into()));
                    }
                }
            }
        }
        positive("ewma_decay", *ewma_decay)?;
        let OutlierConfig {
            consecutive_failures,
            success_rate,
            base_ejection_time,
            max_ejection_time,
            max_ejection_percent,
        } = outlier;
        if *consecutive_failures == Some(0) {
            return Err(err(
                "outlier.consecutive_failures".into(),
                "must be at least 1 (leave it out to turn the rule off)".into(),
            ));
        }
        positive("outlier.base_ejection_time", *base_ejection_time)?;
        if max_ejection_time < base_ejection_time {
            return Err(err(
                "outlier.max_ejection_time".into(),
                format!("{max_ejection_time:?} is below base_ejection_time {base_ejection_time:?}"),
            ));
        }
        if *max_ejection_percent > 100 {
            return Err(err(
                "outlier.max_ejection_percent".into(),
                format!("{max_ejection_percent} is not in 0..=100"),
            ));
        }
        if let Some(sr) = success_rate {
            let SuccessRateConfig {
                interval,
                minimum_hosts,
                request_volume,
                stdev_factor,
            } = sr;
            positive("outlier.success_rate.interval", *interval)?;
            if *minimum_hosts < 2 {
                return Err(err(
                    "outlier.success_rate.minimum_hosts".into(),
                    format!("{minimum_hosts} is below 2 (a mean of one is itself)"),
                ));
            }
            if *request_volume == 0 {
                return Err(err(
                    "outlier.success_rate.request_volume".into(),
                    "must be at least 1".into(),
                ));
            }
            if !(stdev_factor.is_finite() && *stdev_factor > 0.0) {
                return Err(err(
                    "outlier.success_rate.stdev_factor".into(),
                    format!("{stdev_factor} is not a finite number above 0"),
                ));
            }
        }
        Ok(())
    }
}
