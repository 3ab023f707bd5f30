//! `sluice bench failover`: how well the gateway's policy stage hides a misbehaving provider.
//!
//! Per phase, in-process and on ephemeral ports: two `sluice mock`s, a primary and a
//! fallback, and a gateway whose one route sends everything to the primary and falls back to
//! the other (`targets = [primary]`, `fallbacks = [fallback]`). N clients (half streaming,
//! half not) send requests back to back while the primary misbehaves in one way per phase,
//! set as the primary mock's defaults: 503s, resets before the headers, silence, a slow first
//! token, streams cut before their first content, flapping. A first phase with a healthy
//! primary measures the fallback's own latency, which the goals are stated against.
//!
//! Per phase and kind of request: client-visible errors (a non-2xx status, a broken
//! connection, an SSE error event, a stream without its `[DONE]`), p50/p99 latency (streams:
//! to the first content; calls: to the end of the body) and attempts per request, counted from
//! the mocks' records by the `x-request-id` the gateway forwards (the gateway's own
//! `x-sluice-attempts`, sent on non-streaming responses, must agree). The goals: no
//! client-visible error for any fault the policy can rescue, attempts per request at most
//! `retry.attempts` × tiers, and p99 within the first-token timeout plus the healthy p99.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::Server;
use serde::Serialize;
use sluice_bench::chat::{self, ChatResult};
use sluice_bench::report::num;
use sluice_bench::{Causes, Mark, Page, Progress, Sample, Section, Summary};
use sluice_gateway::config::Config;
use sluice_mock::{Behavior, MockConfig, MockServer};
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use sluice_bench::chat::Kind;

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum FailoverError {
    /// A mock did not start, or a phase's fault is not a valid `x-mock` spec.
    #[error("cannot start the mocks: {0}")]
    Mock(String),
    /// The gateway's config was rejected (a bug in the benchmark).
    #[error("the gateway's config is invalid: {0}")]
    Config(String),
    /// The gateway did not start.
    #[error("cannot start the gateway: {0}")]
    Gateway(#[from] sluice_gateway::StartError),
    /// The load client could not be built.
    #[error("cannot build the client: {0}")]
    Client(String),
    /// `--phase` named no known phase.
    #[error("unknown phase `{0}`: the phases are {1}")]
    UnknownPhase(String, String),
}

/// One way the primary misbehaves.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// Short name (`--phase NAME`).
    pub name: &'static str,
    /// The primary mock's defaults in `x-mock` syntax, on top of the common shape.
    pub fault: &'static str,
    /// What the clients would see without the policy.
    pub what: &'static str,
    /// Whether the policy can hide it from the clients entirely.
    pub rescuable: bool,
}

/// The phases, in the order they run; the first is the healthy baseline.
pub fn phases() -> Vec<Phase> {
    vec![
        Phase {
            name: "healthy",
            fault: "",
            what: "nothing: the baseline",
            rescuable: true,
        },
        Phase {
            name: "503",
            fault: "status=503",
            what: "every request answered 503 (Retry-After: 1)",
            rescuable: true,
        },
        Phase {
            name: "reset",
            fault: "reset_before_headers",
            what: "the request is read, then the stream is reset before any header",
            rescuable: true,
        },
        Phase {
            name: "silence",
            fault: "silent",
            what: "the request is read, then nothing at all (first-byte timeout)",
            rescuable: true,
        },
        Phase {
            name: "slow-first-token",
            fault: "ttft_ms=5000",
            what: "the first token (calls: the headers) 5 s late",
            rescuable: true,
        },
        Phase {
            name: "cut-before-content",
            fault: "abort_after=1",
            what: "streams reset after their first event, before any content",
            rescuable: true,
        },
        Phase {
            name: "flapping",
            fault: "flap=300:300",
            what: "healthy 300 ms, 503 for 300 ms, over and over",
            rescuable: true,
        },
    ]
}

/// The healthy shape both mocks answer with: a little time to the first token and eight
/// tokens 5 ms apart.
pub const SHAPE: &str = "ttft_ms=10, tokens=8, interval_ms=5";

/// How long a client waits for one response at most; far above any phase's latency.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(15);

/// The sizes and times of a run.
#[derive(Clone, Debug, Serialize)]
pub struct FailoverPlan {
    /// Clients sending back to back; the even ones stream, the odd ones do not.
    pub clients: usize,
    /// How long each phase sends.
    #[serde(serialize_with = "as_ms")]
    pub phase_duration: Duration,
    /// The primary's `first_byte` and `first_token` timeouts (the fallback's are four times
    /// as long, at least 2 s).
    #[serde(serialize_with = "as_ms")]
    pub first_token_timeout: Duration,
    /// The route's `retry.attempts` (per tier).
    pub retry_attempts: u32,
    /// The phases to run (the healthy baseline first).
    pub phases: Vec<Phase>,
}

fn as_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

impl FailoverPlan {
    /// The default run: 8 clients, 3 s per phase, a 500 ms first-token timeout.
    pub fn full() -> FailoverPlan {
        FailoverPlan {
            clients: 8,
            phase_duration: Duration::from_secs(3),
            first_token_timeout: Duration::from_millis(500),
            retry_attempts: 2,
            phases: phases(),
        }
    }

    /// `--quick`: 4 clients, 1 s per phase, a 300 ms first-token timeout.
    pub fn quick() -> FailoverPlan {
        FailoverPlan {
            clients: 4,
            phase_duration: Duration::from_secs(1),
            first_token_timeout: Duration::from_millis(300),
            ..FailoverPlan::full()
        }
    }

    /// Keeps only the phases named (the healthy baseline always stays).
    ///
    /// # Errors
    /// [`FailoverError::UnknownPhase`] for a name that is not a phase.
    pub fn only(mut self, names: &[String]) -> Result<FailoverPlan, FailoverError> {
        if names.is_empty() {
            return Ok(self);
        }
        let all = phases();
        for n in names {
            if !all.iter().any(|p| p.name == n) {
                let known: Vec<_> = all.iter().map(|p| p.name).collect();
                return Err(FailoverError::UnknownPhase(n.clone(), known.join(", ")));
            }
        }
        self.phases
            .retain(|p| p.name == "healthy" || names.iter().any(|n| n == p.name));
        Ok(self)
    }

    /// Attempts one request may make: `retry.attempts` in each of the two tiers.
    pub fn max_attempts(&self) -> u32 {
        self.retry_attempts * 2
    }

    /// The gateway's TOML for a primary at `primary` and a fallback at `fallback`.
    pub fn config_toml(&self, primary: &str, fallback: &str) -> String {
        let primary_t = format!("{}ms", self.first_token_timeout.as_millis());
        // The fallback is the last resort: a loaded machine must not make it time out too.
        let fallback_t = format!(
            "{}ms",
            (self.first_token_timeout * 4)
                .max(Duration::from_secs(2))
                .as_millis()
        );
        // Every request of a phase fails on the primary by design, so the retry budget (which
        // guards against storms, and has its own tests) is set out of the way. A Retry-After
        // longer than 250 ms sends the request to the fallback at once instead of waiting.
        let upstream = |name: &str, url: &str, t: &str| {
            format!(
                "[[upstream]]\nname = \"{name}\"\nbase_url = \"{url}/v1\"\nprotocol = \"h2c\"\n\
                 timeouts = {{ first_byte = \"{t}\", first_token = \"{t}\" }}\n\
                 retry_budget = {{ ratio = 10.0, min_per_second = 100000 }}\n\n"
            )
        };
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\nshutdown_grace = \"1s\"\n\n{}{}\
             [[route]]\nmodels = [\"*\"]\ntargets = [{{ upstream = \"primary\" }}]\n\
             fallbacks = [{{ upstream = \"fallback\" }}]\n\
             retry = {{ attempts = {}, backoff = \"10ms\", max_backoff = \"100ms\", max_retry_after = \"250ms\" }}\n",
            upstream("primary", primary, &primary_t),
            upstream("fallback", fallback, &fallback_t),
            self.retry_attempts
        )
    }
}

/// One kind of request in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct KindReport {
    /// Streams or calls.
    pub kind: Kind,
    /// Requests that ended.
    pub requests: u64,
    /// Client-visible errors.
    pub errors: u64,
    /// The errors by cause.
    pub error_causes: BTreeMap<String, u64>,
    /// The first message of each cause.
    pub error_samples: Vec<String>,
    /// Latency of the successes (streams: to the first content).
    pub latency: Summary,
    /// Mean attempts per request (upstream requests the mocks saw for it).
    pub attempts_mean: f64,
    /// The most attempts one request took.
    pub attempts_max: u32,
    /// Requests per number of attempts.
    pub attempts: BTreeMap<u32, u64>,
    /// Non-streaming responses whose `x-sluice-attempts` disagreed with the mocks' count.
    pub attempts_header_mismatches: u64,
    /// The p99 goal: the first-token timeout plus the healthy phase's p99 (none for the
    /// healthy phase itself).
    pub p99_bound_ms: Option<f64>,
    /// Whether every goal was met.
    pub goal_met: bool,
    /// The goals missed, in words.
    pub missed: Vec<String>,
}

/// One phase.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseReport {
    /// The phase.
    pub phase: Phase,
    /// When it started, milliseconds after the run began.
    pub start_ms: f64,
    /// Streams, then calls.
    pub kinds: Vec<KindReport>,
}

/// Everything a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct FailoverReport {
    /// What ran.
    pub plan: FailoverPlan,
    /// The gateway's config (with the mocks' addresses of the last phase).
    pub gateway_config: String,
    /// Attempts one request may make.
    pub max_attempts: u32,
    /// Slack on the p99 goal for timers and scheduling, milliseconds.
    pub p99_slack_ms: f64,
    /// The phases.
    pub phases: Vec<PhaseReport>,
    /// Every request, for the HTML report; not in the JSON.
    #[serde(skip)]
    pub samples: Vec<(Kind, Sample)>,
}

/// Two mocks and a gateway, all on ephemeral ports.
struct Stack {
    primary: MockServer,
    fallback: MockServer,
    gateway: Server,
    config: String,
}

async fn mock(spec: &str) -> Result<MockServer, FailoverError> {
    let defaults = Behavior::default()
        .with_spec(spec)
        .map_err(|e| FailoverError::Mock(e.to_string()))?;
    MockServer::start(MockConfig {
        listen: "127.0.0.1:0".parse().expect("a literal address"),
        defaults,
        ..MockConfig::default()
    })
    .await
    .map_err(|e| FailoverError::Mock(e.to_string()))
}

impl Stack {
    async fn start(plan: &FailoverPlan, fault: &str) -> Result<Stack, FailoverError> {
        let primary = mock(&format!("{SHAPE}, {fault}")).await?;
        let fallback = mock(SHAPE).await?;
        let config = plan.config_toml(&primary.url(), &fallback.url());
        let cfg = Config::from_toml(&config, &|_| None)
            .map_err(|e| FailoverError::Config(e.to_string()))?;
        let gateway = Server::start(cfg).await?;
        Ok(Stack {
            primary,
            fallback,
            gateway,
            config,
        })
    }

    /// Upstream requests per `x-request-id`, over both mocks.
    fn attempts(&self) -> HashMap<String, u32> {
        let mut out = HashMap::new();
        for m in [&self.primary, &self.fallback] {
            for r in &m.stats().snapshot().requests {
                if let Some((_, id)) = r.headers.iter().find(|(k, _)| k == "x-request-id") {
                    *out.entry(id.clone()).or_insert(0) += 1;
                }
            }
        }
        out
    }

    async fn stop(self) {
        self.gateway.shutdown().await;
        self.primary.shutdown().await;
        self.fallback.shutdown().await;
    }
}

/// Runs one phase: a fresh stack, `plan.clients` clients for `plan.phase_duration`.
async fn run_phase(
    plan: &FailoverPlan,
    phase: &Phase,
    progress: &Arc<Progress>,
) -> Result<(Vec<ChatResult>, HashMap<String, u32>, String), FailoverError> {
    let stack = Stack::start(plan, phase.fault).await?;
    let client = chat::client(stack.gateway.addr(), plan.clients)
        .map_err(|e| FailoverError::Client(e.to_string()))?;
    let end = Instant::now() + plan.phase_duration;
    let mut tasks = JoinSet::new();
    for c in 0..plan.clients.max(2) {
        let (client, progress, name) = (client.clone(), progress.clone(), phase.name);
        let kind = if c % 2 == 0 { Kind::Stream } else { Kind::Call };
        tasks.spawn(async move {
            let mut done = Vec::new();
            let mut seq = 0u64;
            while Instant::now() < end {
                progress.sent();
                let id = format!("failover-{name}-{c}-{seq}");
                let d = chat::send(&client, kind, &id, CLIENT_TIMEOUT).await;
                progress.ended(d.failure.is_none());
                done.push(d);
                seq += 1;
            }
            done
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r.unwrap_or_default());
    }
    // Attempts abandoned by the policy (a silent primary) are recorded when they arrive,
    // which is before the request that made them ended.
    let attempts = stack.attempts();
    let config = stack.config.clone();
    stack.stop().await;
    Ok((all, attempts, config))
}

/// Runs every phase of `plan`. `phase` is told what starts next.
///
/// # Errors
/// [`FailoverError`] when a mock or the gateway does not start.
pub async fn run(
    plan: FailoverPlan,
    phase_started: &(dyn Fn(&Phase) + Sync),
    progress: Arc<Progress>,
) -> Result<FailoverReport, FailoverError> {
    let t0 = Instant::now();
    let mut phases = Vec::new();
    let mut samples = Vec::new();
    let mut config = String::new();
    let mut healthy_p99: HashMap<&'static str, f64> = HashMap::new();
    let slack = slack_ms(&plan);
    for phase in &plan.phases {
        phase_started(phase);
        let start_ms = ms(t0.elapsed());
        let (done, attempts, cfg) = run_phase(&plan, phase, &progress).await?;
        config = cfg;
        let mut kinds = Vec::new();
        for kind in [Kind::Stream, Kind::Call] {
            let mine: Vec<&ChatResult> = done.iter().filter(|d| d.kind == kind).collect();
            let mut r = kind_report(kind, &mine, &attempts);
            if phase.name == "healthy" {
                healthy_p99.insert(kind.name(), r.latency.p99_ms);
            } else if let Some(p99) = healthy_p99.get(kind.name()) {
                r.p99_bound_ms = Some(ms(plan.first_token_timeout) + p99);
            }
            judge(&mut r, phase, plan.max_attempts(), slack);
            kinds.push(r);
            samples.extend(mine.iter().map(|d| {
                (
                    kind,
                    Sample {
                        start_ms: ms(d.start - t0),
                        latency_ms: ms(d.latency),
                        ok: d.failure.is_none(),
                    },
                )
            }));
        }
        phases.push(PhaseReport {
            phase: phase.clone(),
            start_ms,
            kinds,
        });
    }
    Ok(FailoverReport {
        max_attempts: plan.max_attempts(),
        p99_slack_ms: slack,
        plan,
        gateway_config: config,
        phases,
        samples,
    })
}

/// Timers fire late and two busy cores schedule late: the p99 goal allows a tenth of the
/// first-token timeout (at least 20 ms) on top.
fn slack_ms(plan: &FailoverPlan) -> f64 {
    (ms(plan.first_token_timeout) * 0.1).max(20.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn kind_report(kind: Kind, done: &[&ChatResult], attempts: &HashMap<String, u32>) -> KindReport {
    let mut causes = Causes::default();
    let mut histogram = BTreeMap::new();
    let mut mismatches = 0;
    let mut total_attempts = 0u64;
    for d in done {
        if let Some((f, m)) = &d.failure {
            causes.record(*f, || m.clone());
        }
        let n = attempts.get(&d.id).copied().unwrap_or(0);
        if d.attempts_header.is_some_and(|h| h != n) {
            mismatches += 1;
        }
        total_attempts += u64::from(n);
        *histogram.entry(n).or_insert(0) += 1;
    }
    KindReport {
        kind,
        requests: done.len() as u64,
        errors: causes.total(),
        error_causes: causes.counts,
        error_samples: causes.samples,
        latency: Summary::of(
            done.iter()
                .filter(|d| d.failure.is_none())
                .map(|d| d.latency)
                .collect(),
        ),
        attempts_mean: total_attempts as f64 / (done.len().max(1)) as f64,
        attempts_max: histogram.keys().next_back().copied().unwrap_or(0),
        attempts: histogram,
        attempts_header_mismatches: mismatches,
        p99_bound_ms: None,
        goal_met: true,
        missed: Vec::new(),
    }
}

fn judge(r: &mut KindReport, phase: &Phase, max_attempts: u32, slack: f64) {
    if r.requests == 0 {
        r.missed.push("no request ended".into());
    }
    if phase.rescuable && r.errors > 0 {
        r.missed.push(format!("{} client-visible errors", r.errors));
    }
    if r.attempts_max > max_attempts {
        r.missed.push(format!(
            "{} attempts for one request (at most {max_attempts})",
            r.attempts_max
        ));
    }
    if r.attempts_header_mismatches > 0 {
        r.missed.push(format!(
            "{} x-sluice-attempts headers disagree with the upstreams",
            r.attempts_header_mismatches
        ));
    }
    if let Some(bound) = r.p99_bound_ms {
        if r.latency.p99_ms > bound + slack {
            r.missed.push(format!(
                "p99 {} ms over the bound of {} ms",
                num(r.latency.p99_ms),
                num(bound)
            ));
        }
    }
    r.goal_met = r.missed.is_empty();
}

impl FailoverReport {
    /// The results table.
    pub fn table(&self) -> String {
        let mut t = format!(
            "{:<19} {:<21} {:<6} {:>8} {:>6} {:>9} {:>9} {:>9} {:>17}  {}\n",
            "phase",
            "primary's fault",
            "kind",
            "requests",
            "errors",
            "p50 ms",
            "p99 ms",
            "bound ms",
            "attempts mean/max",
            "goal"
        );
        for p in &self.phases {
            for k in &p.kinds {
                let fault = if p.phase.fault.is_empty() {
                    "-"
                } else {
                    p.phase.fault
                };
                t.push_str(&format!(
                    "{:<19} {:<21} {:<6} {:>8} {:>6} {:>9} {:>9} {:>9} {:>17}  {}\n",
                    p.phase.name,
                    fault,
                    k.kind.name(),
                    k.requests,
                    k.errors,
                    num(k.latency.p50_ms),
                    num(k.latency.p99_ms),
                    k.p99_bound_ms.map_or_else(|| "-".into(), num),
                    format!("{:.2} / {}", k.attempts_mean, k.attempts_max),
                    if k.goal_met {
                        "met".to_string()
                    } else {
                        format!("MISSED: {}", k.missed.join("; "))
                    }
                ));
            }
        }
        t
    }

    /// The one-line conclusion.
    pub fn verdict(&self) -> String {
        let rows: Vec<&KindReport> = self.phases.iter().flat_map(|p| &p.kinds).collect();
        let requests: u64 = rows.iter().map(|k| k.requests).sum();
        let errors: u64 = rows.iter().map(|k| k.errors).sum();
        let max = rows.iter().map(|k| k.attempts_max).max().unwrap_or(0);
        let met = rows.iter().filter(|k| k.goal_met).count();
        format!(
            "{errors} client-visible errors in {requests} requests over {} phases; at most {max} attempts per request (allowed {}); goals met in {met}/{} rows",
            self.phases.len(),
            self.max_attempts,
            rows.len()
        )
    }

    /// What failed the run, one line per row: more client-visible errors than
    /// `max_error_rate` allows in a phase the policy can rescue, no request at all, or more
    /// attempts than the route allows. (The p99 goal is timing, and only reported.)
    pub fn failures(&self, max_error_rate: f64) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.phases {
            for k in &p.kinds {
                let too_many = k.errors as f64 > max_error_rate * k.requests as f64;
                if (p.phase.rescuable && too_many) || k.requests == 0 {
                    out.push(format!(
                        "{} {}: {} of {} requests failed ({})",
                        p.phase.name,
                        k.kind.name(),
                        k.errors,
                        k.requests,
                        Causes {
                            counts: k.error_causes.clone(),
                            samples: Vec::new()
                        }
                        .line()
                    ));
                }
                if k.attempts_max > self.max_attempts {
                    out.push(format!(
                        "{} {}: a request took {} attempts, more than the {} allowed",
                        p.phase.name,
                        k.kind.name(),
                        k.attempts_max,
                        self.max_attempts
                    ));
                }
            }
        }
        out
    }

    /// The run as an HTML report: streams and calls, each with the phases marked.
    pub fn page(&self) -> Page {
        let marks: Vec<Mark> = self
            .phases
            .iter()
            .map(|p| Mark {
                at_ms: p.start_ms,
                label: p.phase.name.to_string(),
            })
            .collect();
        let section = |kind: Kind, title: &str, latency: &str| {
            Section {
            title: title.into(),
            latency: latency.into(),
            samples: self
                .samples
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, s)| *s)
                .collect(),
            marks: marks.clone(),
            facts: self
                .phases
                .iter()
                .flat_map(|p| p.kinds.iter().filter(|k| k.kind == kind).map(move |k| (p, k)))
                .map(|(p, k)| {
                    (
                        p.phase.name.to_string(),
                        format!(
                            "{} requests, {} errors, p50 {} ms, p99 {} ms, {:.2} attempts (max {}){}",
                            k.requests,
                            k.errors,
                            num(k.latency.p50_ms),
                            num(k.latency.p99_ms),
                            k.attempts_mean,
                            k.attempts_max,
                            if k.goal_met { String::new() } else { format!("; MISSED: {}", k.missed.join("; ")) }
                        ),
                    )
                })
                .collect(),
        }
        };
        Page {
            title: "sluice bench failover".into(),
            facts: vec![
                ("verdict".into(), self.verdict()),
                (
                    "clients".into(),
                    format!(
                        "{} (half streaming), {} ms per phase",
                        self.plan.clients,
                        num(ms(self.plan.phase_duration))
                    ),
                ),
                (
                    "first-token timeout".into(),
                    format!("{} ms", num(ms(self.plan.first_token_timeout))),
                ),
            ],
            sections: vec![
                section(Kind::Stream, "streams", "send to the first content"),
                section(Kind::Call, "calls", "send to the end of the body"),
            ],
            json: serde_json::to_value(self).ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_is_valid_and_phases_are_known() {
        let plan = FailoverPlan::full();
        let c = Config::from_toml(
            &plan.config_toml("http://127.0.0.1:9", "http://127.0.0.1:10"),
            &|_| None,
        )
        .unwrap();
        assert_eq!(c.routes[0].tiers(), 2);
        assert_eq!(plan.max_attempts(), 4);
        for p in phases() {
            Behavior::default()
                .with_spec(&format!("{SHAPE}, {}", p.fault))
                .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        }
        let only = FailoverPlan::quick()
            .only(&["silence".to_string()])
            .unwrap();
        let names: Vec<_> = only.phases.iter().map(|p| p.name).collect();
        assert_eq!(names, ["healthy", "silence"]);
        assert!(FailoverPlan::quick().only(&["nope".into()]).is_err());
    }
}
