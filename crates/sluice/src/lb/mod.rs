//! `sluice bench lb`: how the balancer spreads load over replicas that are not alike, and
//! what a replica dying costs the clients.
//!
//! Part one, balancing. Three `sluice mock` replicas, in-process on ephemeral ports: `a` and
//! `b` healthy, `c` slow (its first byte 200 ms late, or every write on its connections
//! throttled). One phase per policy — `p2c_ewma`, `least_in_flight`,
//! `weighted_round_robin` —, each its own gateway over the same three mocks, one after the
//! other, after a baseline: the same gateway over `a` and `b` alone. N clients (half
//! streaming, half not) send back to back. Per phase and kind of request: p50/p99 latency
//! (streams: to the first content; calls: to the end of the body) and each replica's share
//! of the upstream requests, from the mocks' own records. The goal: with one slow replica of
//! three, p2c_ewma's p99 at most 1.3× the baseline's; round robin, which must give the slow
//! replica a third of the requests, is the contrast.
//!
//! Part two, a replica killed. Three healthy replicas behind `p2c_ewma` with active health
//! checks and outlier ejection; `c` is stopped mid-run (every connection cut, the port
//! closed) and a new mock is started on its port some seconds later. Client-visible errors
//! by kind (calls must see none: a connect refused was never sent and goes to another
//! target, and a call cut in flight carries an `Idempotency-Key`, so it may be resent too;
//! a stream cut after its first content can only end with an error event, so streams may
//! fail, at most those in flight on `c` at the kill); when `c` stopped getting attempts
//! (`/admin/targets`, polled); and how long after the restart it served again (its own
//! records). The goal: back in rotation at most 5 s after it recovers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::Server;
use serde::Serialize;
use sluice_bench::chat::{self, ChatResult, Kind};
use sluice_bench::report::num;
use sluice_bench::{Causes, Mark, Progress, Sample, Summary};
use sluice_gateway::config::Config;
use sluice_mock::{Behavior, MockConfig, MockServer, ReqRecord, Stats};
use sluice_upstream::{BalancePolicy, Upstream};
use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};

mod kill;
mod table;

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum LbError {
    /// A mock did not start (or did not start again on its port).
    #[error("cannot start a mock: {0}")]
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
}

/// The healthy shape every replica answers with: 10 ms to the first token, eight tokens
/// 5 ms apart (the same as `sluice bench failover`'s).
pub const SHAPE: &str = crate::failover::SHAPE;

/// How long a client waits for one response at most; far above any phase's latency.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(15);

/// The p2c_ewma goal: its p99 over three replicas, one slow, at most this many times the
/// baseline's p99 over the two healthy ones alone.
pub const P99_GOAL_RATIO: f64 = 1.3;

/// The kill goal: the replica serves again at most this long after it is back up.
pub const BACK_GOAL: Duration = Duration::from_secs(5);

/// How often `/admin/targets` is read during the kill phase: the precision of the times to
/// eject.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How long the kill phase runs on at least after the replica is back.
const TAIL: Duration = Duration::from_millis(500);

/// The path the clients send to, which tells their requests from the health checks in the
/// mocks' records.
const CHAT_PATH: &str = "/v1/chat/completions";

/// How the slow replica is slow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slow {
    /// Its first byte (streams: the first token; calls: the response headers) this much
    /// later than the healthy replicas' (`ttft_ms`).
    FirstByte(Duration),
    /// Every write on its connections throttled to this many bytes per second
    /// (`degrade`): a congested link, slowing every response it carries.
    Throughput(u64),
}

impl Slow {
    /// The slow replica's defaults, in `x-mock` syntax.
    pub fn spec(&self) -> String {
        match self {
            Slow::FirstByte(d) => {
                format!("ttft_ms={}, tokens=8, interval_ms=5", 10 + d.as_millis())
            }
            Slow::Throughput(n) => format!("{SHAPE}, degrade={n}"),
        }
    }

    /// In words, for the table.
    pub fn describe(&self) -> String {
        match self {
            Slow::FirstByte(d) => format!("first byte +{} ms", d.as_millis()),
            Slow::Throughput(n) => format!("throttled to {} B/s", num(*n as f64)),
        }
    }
}

impl Serialize for Slow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut m = s.serialize_map(Some(3))?;
        match self {
            Slow::FirstByte(d) => {
                m.serialize_entry("by", "first_byte")?;
                m.serialize_entry("extra_ms", &ms(*d))?;
            }
            Slow::Throughput(n) => {
                m.serialize_entry("by", "throughput")?;
                m.serialize_entry("bytes_per_s", n)?;
            }
        }
        m.serialize_entry("spec", &self.spec())?;
        m.end()
    }
}

/// The sizes and times of a run.
#[derive(Clone, Debug, Serialize)]
pub struct LbPlan {
    /// Clients sending back to back; the even ones stream, the odd ones do not.
    pub clients: usize,
    /// How long each phase sends (the kill phase runs on until the replica is back, or the
    /// back goal has passed).
    #[serde(serialize_with = "as_ms")]
    pub duration: Duration,
    /// How the slow replica is slow.
    pub slow: Slow,
    /// Part one: the baseline and one phase per policy.
    pub balance: bool,
    /// Part two: the kill phase.
    pub kill: bool,
    /// When `c` is stopped, after the kill phase began; default a quarter of `duration`.
    #[serde(serialize_with = "opt_ms")]
    pub kill_at: Option<Duration>,
    /// How long `c` stays down; default a quarter of `duration`.
    #[serde(serialize_with = "opt_ms")]
    pub down_for: Option<Duration>,
    /// The upstreams' `health_check.interval`; `None`: no active health checks (outlier
    /// ejection alone).
    #[serde(serialize_with = "opt_ms")]
    pub health_interval: Option<Duration>,
}

fn as_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(ms(*d))
}

fn opt_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(ms(*d)),
        None => s.serialize_none(),
    }
}

/// The policies part one compares, in the order they run.
pub const POLICIES: [BalancePolicy; 3] = [
    BalancePolicy::P2cEwma,
    BalancePolicy::LeastInFlight,
    BalancePolicy::WeightedRoundRobin,
];

impl LbPlan {
    /// The default run: 8 clients, 60 s per phase (about 5 minutes), `c`'s first byte
    /// 200 ms late, `c` killed 15 s into the kill phase for 15 s, health checks every second.
    pub fn full() -> LbPlan {
        LbPlan {
            clients: 8,
            duration: Duration::from_secs(60),
            slow: Slow::FirstByte(Duration::from_millis(200)),
            balance: true,
            kill: true,
            kill_at: None,
            down_for: None,
            health_interval: Some(Duration::from_secs(1)),
        }
    }

    /// `--quick`: 4 clients, 1 s per phase, `c` killed 500 ms into the kill phase for 1 s,
    /// health checks every 200 ms (about 8 s in all).
    pub fn quick() -> LbPlan {
        LbPlan {
            clients: 4,
            duration: Duration::from_secs(1),
            kill_at: Some(Duration::from_millis(500)),
            down_for: Some(Duration::from_secs(1)),
            health_interval: Some(Duration::from_millis(200)),
            ..LbPlan::full()
        }
    }

    /// When `c` is stopped, after the kill phase began.
    pub fn kill_at(&self) -> Duration {
        self.kill_at.unwrap_or(self.duration / 4)
    }

    /// How long `c` stays down.
    pub fn down_for(&self) -> Duration {
        self.down_for.unwrap_or(self.duration / 4)
    }

    /// `outlier.base_ejection_time`: as long as a health-check interval (1 s without
    /// them), so that the active checks, not the ejection clock, decide when a recovered
    /// replica comes back.
    pub fn base_ejection_time(&self) -> Duration {
        self.health_interval.unwrap_or(Duration::from_secs(1))
    }

    /// The gateway's TOML: one h2c upstream per replica `(name, url)`, one route over all
    /// of them with `policy`, outlier ejection after 3 failures in a row, and (unless off)
    /// a health check on `/models` every `health_interval` (2 fails out, 2 passes back,
    /// the default 2 s timeout).
    /// Retries keep the route's defaults (2 attempts per tier).
    pub fn config_toml(&self, replicas: &[(&str, String)], policy: BalancePolicy) -> String {
        // The check's timeout stays at its default (2 s), far above the slow replica's delay:
        // health checks must not take the slow replica out, or the policies would not be
        // compared at all. A killed replica fails them at once (connect refused).
        let health = match self.health_interval {
            Some(i) => format!(
                "health_check = {{ path = \"/models\", interval = \"{}ms\", \
                 healthy_threshold = 2, unhealthy_threshold = 2 }}\n",
                i.as_millis()
            ),
            None => String::new(),
        };
        let mut text = String::from(
            "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\nshutdown_grace = \"1s\"\n\n",
        );
        for (name, url) in replicas {
            text.push_str(&format!(
                "[[upstream]]\nname = \"{name}\"\nbase_url = \"{url}/v1\"\nprotocol = \"h2c\"\n{health}\n"
            ));
        }
        let targets: Vec<String> = replicas
            .iter()
            .map(|(n, _)| format!("{{ upstream = \"{n}\" }}"))
            .collect();
        text.push_str(&format!(
            "[[route]]\nmodels = [\"*\"]\ntargets = [{}]\nbalance = \"{}\"\n\
             outlier = {{ consecutive_failures = 3, base_ejection_time = \"{}ms\" }}\n",
            targets.join(", "),
            policy.as_str(),
            self.base_ejection_time().as_millis()
        ));
        text
    }
}

/// Each replica's part of the upstream requests of one kind, as the mocks recorded them
/// (attempts, retries included).
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaShare {
    /// `a`, `b` or `c`.
    pub name: String,
    /// It is the slow one.
    pub slow: bool,
    /// Upstream requests it received.
    pub requests: u64,
    /// Its share of the phase's upstream requests of this kind, 0 to 1.
    pub share: f64,
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
    /// Latency of the successes: streams to the first content, calls to the end of the body.
    pub latency: Summary,
    /// Latency of the successes to the end of the response.
    pub total: Summary,
    /// The replicas' shares of the upstream requests.
    pub replicas: Vec<ReplicaShare>,
    /// p99 over the baseline's p99 of the same kind (not for the baseline itself, nor the
    /// kill phase).
    pub p99_vs_baseline: Option<f64>,
    /// Whether this row's goals were met (`None`: the row has none).
    pub goal_met: Option<bool>,
    /// The goals missed, in words.
    pub missed: Vec<String>,
}

/// What the kill phase saw of the replica it stopped.
#[derive(Clone, Debug, Serialize)]
pub struct KillReport {
    /// The replica stopped and started again.
    pub replica: String,
    /// When it was stopped, milliseconds after the phase began.
    pub killed_at_ms: f64,
    /// When it listened again, milliseconds after the phase began.
    pub restarted_at_ms: f64,
    /// Calls it was serving when it was stopped.
    pub calls_in_flight_at_kill: u64,
    /// Streams it was serving when it was stopped: at most this many streams may fail.
    pub streams_in_flight_at_kill: u64,
    /// From the kill until `/admin/targets` first showed it unusable (ejected or unhealthy).
    pub out_of_rotation_ms: Option<f64>,
    /// From the kill until its health checks had marked it unhealthy.
    pub unhealthy_ms: Option<f64>,
    /// Time to eject, by traffic: from the kill until the first reading of
    /// `/admin/targets` after which its attempt count no longer rose until the restart
    /// (from then on it got no traffic at all); precise to one reading.
    pub no_more_attempts_ms: Option<f64>,
    /// Attempts the gateway sent it that it never received: sent as it died, or while it
    /// was down (each failed, and was retried on another replica unless a stream had
    /// already sent content).
    pub attempts_lost: u64,
    /// From the restart until it received its first request from a client again.
    pub back_ms: Option<f64>,
    /// From the restart until `/admin/targets` showed it healthy and usable.
    pub healthy_again_ms: Option<f64>,
    /// Client requests it served after the restart.
    pub served_after_restart: u64,
    /// Its share of the upstream requests after the restart, 0 to 1.
    pub share_after_restart: f64,
    /// How often `/admin/targets` was read: the precision of the times from it.
    pub poll_interval_ms: f64,
    /// Whether every goal was met: no call errors, no stream errors beyond the streams in
    /// flight on it, back within [`BACK_GOAL`].
    pub goal_met: bool,
    /// The goals missed, in words.
    pub missed: Vec<String>,
}

/// One phase.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseReport {
    /// `baseline`, the policy's name, or `kill`.
    pub name: String,
    /// The route's `balance`.
    pub policy: &'static str,
    /// The route's targets, the slow one marked: `a`, `b`, `c (slow)`.
    pub replicas: Vec<String>,
    /// When it started, milliseconds after the run began.
    pub start_ms: f64,
    /// How long its clients sent.
    pub duration_ms: f64,
    /// Streams, then calls.
    pub kinds: Vec<KindReport>,
    /// The kill phase's findings.
    pub kill: Option<KillReport>,
}

/// Everything a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct LbReport {
    /// What ran.
    pub plan: LbPlan,
    /// The goal on p2c_ewma's p99, as a multiple of the baseline's.
    pub p99_goal_ratio: f64,
    /// The goal on bringing a recovered replica back, milliseconds.
    pub back_goal_ms: f64,
    /// The p2c_ewma phase's gateway config (the others differ in `balance` and targets).
    pub gateway_config: String,
    /// The phases.
    pub phases: Vec<PhaseReport>,
    /// Every request, for the HTML report; not in the JSON.
    #[serde(skip)]
    pub samples: Vec<(Kind, Sample)>,
    /// Labelled instants for the HTML report (phases, the kill, the restart).
    #[serde(skip)]
    pub marks: Vec<Mark>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pct(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

async fn replica(listen: SocketAddr, spec: &str) -> Result<MockServer, LbError> {
    let defaults = Behavior::default()
        .with_spec(spec)
        .map_err(|e| LbError::Mock(e.to_string()))?;
    MockServer::start(MockConfig {
        listen,
        defaults,
        // Only the headers are looked at; the bodies are the clients' two fixed ones.
        max_recorded_body: 256,
        ..MockConfig::default()
    })
    .await
    .map_err(|e| LbError::Mock(e.to_string()))
}

fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

async fn gateway(
    plan: &LbPlan,
    replicas: &[(&str, String)],
    policy: BalancePolicy,
) -> Result<(Server, String), LbError> {
    let text = plan.config_toml(replicas, policy);
    let cfg = Config::from_toml(&text, &|_| None).map_err(|e| LbError::Config(e.to_string()))?;
    Ok((Server::start(cfg).await?, text))
}

/// The clients' requests in a mock's records.
fn chat_records(stats: &Stats) -> Vec<ReqRecord> {
    stats
        .snapshot()
        .requests
        .into_iter()
        .filter(|r| r.path == CHAT_PATH)
        .collect()
}

/// `clients` clients sending back to back until `stop` is set; the even ones stream.
fn start_clients(
    client: &Upstream,
    clients: usize,
    tag: &str,
    stop: &Arc<AtomicBool>,
    progress: &Arc<Progress>,
) -> JoinSet<Vec<ChatResult>> {
    let mut tasks = JoinSet::new();
    for c in 0..clients.max(2) {
        let (client, progress, stop) = (client.clone(), progress.clone(), stop.clone());
        let kind = if c % 2 == 0 { Kind::Stream } else { Kind::Call };
        let tag = tag.to_string();
        tasks.spawn(async move {
            let mut done = Vec::new();
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                progress.sent();
                let id = format!("lb-{tag}-{c}-{seq}");
                let d = chat::send(&client, kind, &id, CLIENT_TIMEOUT).await;
                progress.ended(d.ok());
                done.push(d);
                seq += 1;
            }
            done
        });
    }
    tasks
}

async fn join_clients(mut tasks: JoinSet<Vec<ChatResult>>) -> Vec<ChatResult> {
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r.unwrap_or_default());
    }
    all
}

/// One request's sample on the run's clock.
fn sample(d: &ChatResult, t0: Instant) -> Sample {
    Sample {
        start_ms: ms(d.start - t0),
        latency_ms: ms(d.latency),
        ok: d.ok(),
    }
}

fn kind_report(kind: Kind, done: &[&ChatResult], replicas: Vec<ReplicaShare>) -> KindReport {
    let mut causes = Causes::default();
    for d in done {
        if let Some((f, m)) = &d.failure {
            causes.record(*f, || m.clone());
        }
    }
    let ok = || done.iter().filter(|d| d.ok());
    KindReport {
        kind,
        requests: done.len() as u64,
        errors: causes.total(),
        error_causes: causes.counts,
        error_samples: causes.samples,
        latency: Summary::of(ok().map(|d| d.latency).collect()),
        total: Summary::of(ok().map(|d| d.total).collect()),
        replicas,
        p99_vs_baseline: None,
        goal_met: None,
        missed: Vec::new(),
    }
}

/// Shares of one kind from per-replica counts `(name, slow, requests)`.
fn shares(counts: &[(String, bool, u64)]) -> Vec<ReplicaShare> {
    let all: u64 = counts.iter().map(|c| c.2).sum();
    counts
        .iter()
        .map(|(name, slow, n)| ReplicaShare {
            name: name.clone(),
            slow: *slow,
            requests: *n,
            share: *n as f64 / all.max(1) as f64,
        })
        .collect()
}

/// What one phase hands back to the run.
struct PhaseRun {
    report: PhaseReport,
    done: Vec<ChatResult>,
    marks: Vec<Mark>,
    config: String,
}

/// A balancing phase: a gateway over `mocks` (name, server, slow) with `policy`, the
/// clients for `plan.duration`.
async fn balance_phase(
    plan: &LbPlan,
    name: &str,
    policy: BalancePolicy,
    mocks: &[(&str, &MockServer, bool)],
    progress: &Arc<Progress>,
    t0: Instant,
) -> Result<PhaseRun, LbError> {
    for (_, m, _) in mocks {
        m.stats().reset();
    }
    let urls: Vec<(&str, String)> = mocks.iter().map(|(n, m, _)| (*n, m.url())).collect();
    let (gw, config) = gateway(plan, &urls, policy).await?;
    let client =
        chat::client(gw.addr(), plan.clients).map_err(|e| LbError::Client(e.to_string()))?;
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = start_clients(&client, plan.clients, name, &stop, progress);
    sleep(plan.duration).await;
    stop.store(true, Ordering::Relaxed);
    let done = join_clients(tasks).await;
    let duration = start.elapsed();
    gw.shutdown().await;
    let records: Vec<(String, bool, Vec<ReqRecord>)> = mocks
        .iter()
        .map(|(n, m, slow)| (n.to_string(), *slow, chat_records(m.stats())))
        .collect();
    let mut kinds = Vec::new();
    for kind in [Kind::Stream, Kind::Call] {
        let mine: Vec<&ChatResult> = done.iter().filter(|d| d.kind == kind).collect();
        let counts: Vec<(String, bool, u64)> = records
            .iter()
            .map(|(n, slow, rs)| {
                let k = rs.iter().filter(|r| r.stream == (kind == Kind::Stream));
                (n.clone(), *slow, k.count() as u64)
            })
            .collect();
        kinds.push(kind_report(kind, &mine, shares(&counts)));
    }
    Ok(PhaseRun {
        report: PhaseReport {
            name: name.to_string(),
            policy: policy.as_str(),
            replicas: mocks
                .iter()
                .map(|(n, _, slow)| {
                    if *slow {
                        format!("{n} (slow)")
                    } else {
                        n.to_string()
                    }
                })
                .collect(),
            start_ms: ms(start - t0),
            duration_ms: ms(duration),
            kinds,
            kill: None,
        },
        done,
        marks: vec![Mark {
            at_ms: ms(start - t0),
            label: name.to_string(),
        }],
        config,
    })
}

/// The balancing phases' goals (the kill phase has its own): no errors anywhere; p2c_ewma's p99 within
/// [`P99_GOAL_RATIO`] × the baseline's.
fn judge_balance(phases: &mut [PhaseReport]) {
    let baseline: BTreeMap<&'static str, f64> = phases
        .iter()
        .find(|p| p.name == "baseline")
        .map(|p| {
            p.kinds
                .iter()
                .map(|k| (k.kind.name(), k.latency.p99_ms))
                .collect()
        })
        .unwrap_or_default();
    for p in phases.iter_mut().filter(|p| p.kill.is_none()) {
        for k in &mut p.kinds {
            if k.requests == 0 {
                k.missed.push("no request ended".into());
            }
            if k.errors > 0 {
                k.missed.push(format!("{} client-visible errors", k.errors));
            }
            if p.name != "baseline" {
                if let Some(base) = baseline.get(k.kind.name()).filter(|b| **b > 0.0) {
                    k.p99_vs_baseline = Some(k.latency.p99_ms / base);
                }
            }
            let p2c = p.name == BalancePolicy::P2cEwma.as_str();
            if let (true, Some(r)) = (p2c, k.p99_vs_baseline) {
                if r > P99_GOAL_RATIO {
                    k.missed.push(format!(
                        "p99 {:.2}× the baseline's, over {P99_GOAL_RATIO}×",
                        r
                    ));
                }
            }
            // The other policies are the contrast: only their errors are judged.
            k.goal_met = Some(k.missed.is_empty());
        }
    }
}

/// Runs the parts of `plan`. `announce` is told what happens next (a phase starting, the kill).
///
/// # Errors
/// [`LbError`] when a mock or a gateway does not start.
pub async fn run(
    plan: LbPlan,
    announce: &(dyn Fn(&str) + Sync),
    progress: Arc<Progress>,
) -> Result<LbReport, LbError> {
    let t0 = Instant::now();
    let mut runs: Vec<PhaseRun> = Vec::new();
    let mut gateway_config = String::new();
    if plan.balance {
        let a = replica(any_port(), SHAPE).await?;
        let b = replica(any_port(), SHAPE).await?;
        let c = replica(any_port(), &plan.slow.spec()).await?;
        announce("baseline: p2c_ewma over the two healthy replicas a and b");
        runs.push(
            balance_phase(
                &plan,
                "baseline",
                BalancePolicy::P2cEwma,
                &[("a", &a, false), ("b", &b, false)],
                &progress,
                t0,
            )
            .await?,
        );
        for policy in POLICIES {
            announce(&format!("{policy}: a, b and c ({})", plan.slow.describe()));
            let r = balance_phase(
                &plan,
                policy.as_str(),
                policy,
                &[("a", &a, false), ("b", &b, false), ("c", &c, true)],
                &progress,
                t0,
            )
            .await?;
            if policy == BalancePolicy::P2cEwma {
                gateway_config = r.config.clone();
            }
            runs.push(r);
        }
        a.shutdown().await;
        b.shutdown().await;
        c.shutdown().await;
    }
    if plan.kill {
        announce(&format!(
            "kill: p2c_ewma over a, b and c; c stopped after {} ms, started again {} ms later",
            plan.kill_at().as_millis(),
            plan.down_for().as_millis()
        ));
        let r = kill::kill_phase(&plan, &progress, t0, announce).await?;
        if gateway_config.is_empty() {
            gateway_config = r.config.clone();
        }
        runs.push(r);
    }
    let mut samples = Vec::new();
    let mut marks = Vec::new();
    let mut phases = Vec::new();
    for r in runs {
        samples.extend(r.done.iter().map(|d| (d.kind, sample(d, t0))));
        marks.extend(r.marks);
        phases.push(r.report);
    }
    judge_balance(&mut phases);
    Ok(LbReport {
        plan,
        p99_goal_ratio: P99_GOAL_RATIO,
        back_goal_ms: ms(BACK_GOAL),
        gateway_config,
        phases,
        samples,
        marks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configs_are_valid_and_the_slow_specs_parse() {
        let plan = LbPlan::full();
        let replicas = [
            ("a", "http://127.0.0.1:9".to_string()),
            ("b", "http://127.0.0.1:10".to_string()),
            ("c", "http://127.0.0.1:11".to_string()),
        ];
        for policy in POLICIES {
            let c = Config::from_toml(&plan.config_toml(&replicas, policy), &|_| None)
                .unwrap_or_else(|e| panic!("{policy}: {e}"));
            assert_eq!(c.routes[0].balance, policy);
            assert_eq!(c.routes[0].targets.len(), 3);
            assert!(c.upstreams.iter().all(|u| u.health_check.is_some()));
        }
        let off = LbPlan {
            health_interval: None,
            ..LbPlan::quick()
        };
        let c = Config::from_toml(
            &off.config_toml(&replicas[..2], BalancePolicy::P2cEwma),
            &|_| None,
        )
        .unwrap();
        assert!(c.upstreams.iter().all(|u| u.health_check.is_none()));
        for slow in [
            Slow::FirstByte(Duration::from_millis(200)),
            Slow::Throughput(10_000),
        ] {
            Behavior::default().with_spec(&slow.spec()).unwrap();
        }
        assert_eq!(
            Slow::FirstByte(Duration::from_millis(200)).spec(),
            "ttft_ms=210, tokens=8, interval_ms=5"
        );
        assert_eq!(plan.kill_at(), Duration::from_secs(15));
        assert_eq!(LbPlan::quick().down_for(), Duration::from_secs(1));
    }
}
