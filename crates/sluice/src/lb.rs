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

use bytes::Bytes;
use http_body_util::BodyExt;
use serde::Serialize;
use sluice_bench::chat::{self, ChatResult, Kind};
use sluice_bench::report::num;
use sluice_bench::{Causes, Mark, Page, Progress, Sample, Section, Summary};
use sluice_gateway::config::Config;
use sluice_gateway::Gateway;
use sluice_mock::{Behavior, MockConfig, MockServer, ReqRecord, Stats};
use sluice_upstream::{BalancePolicy, Upstream};
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, Instant};

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
        let mut text =
            String::from("[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n");
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
) -> Result<(Gateway, String), LbError> {
    let text = plan.config_toml(replicas, policy);
    let cfg = Config::from_toml(&text, &|_| None).map_err(|e| LbError::Config(e.to_string()))?;
    Ok((Gateway::start(cfg).await?, text))
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

/// One reading of `/admin/targets` for one target.
#[derive(Clone, Debug)]
struct TargetSample {
    at: Instant,
    usable: bool,
    health: String,
    requests: u64,
}

/// Reads target `name` of the first route from `/admin/targets`.
async fn read_target(admin: &Upstream, name: &str) -> Option<TargetSample> {
    let req = http::Request::get("/admin/targets")
        .body(Bytes::new())
        .expect("a valid request");
    let at = Instant::now();
    let resp = admin.send(req, at + Duration::from_secs(2)).await.ok()?;
    let body = tokio::time::timeout(Duration::from_secs(2), resp.into_body().collect())
        .await
        .ok()?
        .ok()?
        .to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let t = v["routes"][0]["targets"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == name)?;
    Some(TargetSample {
        at,
        usable: t["usable"].as_bool()?,
        health: t["health"].as_str()?.to_string(),
        requests: t["requests"].as_u64()?,
    })
}

/// Starts a mock on `addr` again, retrying while the port is still being released.
async fn restart(addr: SocketAddr, spec: &str) -> Result<MockServer, LbError> {
    let give_up = Instant::now() + Duration::from_secs(5);
    loop {
        match replica(addr, spec).await {
            Ok(m) => return Ok(m),
            Err(e) if Instant::now() >= give_up => return Err(e),
            Err(_) => sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Requests in `records` in flight at `at`, streams and calls.
fn in_flight_at(records: &[ReqRecord], at: Instant) -> (u64, u64) {
    let mut n = (0, 0);
    for r in records {
        let ended = r.finished_at.or(r.cancelled_at);
        if r.started <= at && ended.is_none_or(|e| e >= at) {
            if r.stream {
                n.0 += 1;
            } else {
                n.1 += 1;
            }
        }
    }
    n
}

/// The kill phase: three healthy replicas behind p2c_ewma; `c` stopped at `kill_at` and
/// started again `down_for` later on the same port.
async fn kill_phase(
    plan: &LbPlan,
    progress: &Arc<Progress>,
    t0: Instant,
    announce: &(dyn Fn(&str) + Sync),
) -> Result<PhaseRun, LbError> {
    let a = replica(any_port(), SHAPE).await?;
    let b = replica(any_port(), SHAPE).await?;
    let c = replica(any_port(), SHAPE).await?;
    let c_addr = c.addr();
    let urls = [("a", a.url()), ("b", b.url()), ("c", c.url())];
    let (gw, config) = gateway(plan, &urls, BalancePolicy::P2cEwma).await?;
    let client =
        chat::client(gw.addr(), plan.clients).map_err(|e| LbError::Client(e.to_string()))?;
    let admin = chat::client(gw.admin_addr(), 1).map_err(|e| LbError::Client(e.to_string()))?;

    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = start_clients(&client, plan.clients, "kill", &stop, progress);
    let poller = {
        let (admin, stop) = (admin.clone(), stop.clone());
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(POLL_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                if let Some(s) = read_target(&admin, "c").await {
                    samples.push(s);
                }
            }
            samples
        })
    };

    sleep_until(start + plan.kill_at()).await;
    announce("stopping replica c");
    let old_stats = c.stats().clone();
    let killed = Instant::now();
    c.shutdown().await;
    sleep_until(killed + plan.down_for()).await;
    // The gateway's attempts on c up to now: the mock saw those made while it was up.
    let before_restart = read_target(&admin, "c").await;
    announce("starting replica c again on its port");
    let c2 = restart(c_addr, SHAPE).await?;
    let restarted = Instant::now();
    // Run to the planned end, and on (if c is not back by then) until it serves again or
    // the goal has passed; once it is back, a little longer, to see it take its share.
    let planned_end = start + plan.duration;
    let give_up = restarted + BACK_GOAL + Duration::from_secs(1);
    let mut back_seen: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if back_seen.is_none() && !chat_records(c2.stats()).is_empty() {
            back_seen = Some(now);
        }
        let end = match back_seen {
            Some(back) => planned_end.max(back + TAIL),
            None => planned_end.max(give_up),
        };
        if now >= end {
            break;
        }
        sleep(POLL_INTERVAL.min(end - now)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let done = join_clients(tasks).await;
    let duration = start.elapsed();
    let samples = poller.await.unwrap_or_default();
    gw.shutdown().await;

    let old = chat_records(&old_stats);
    let new = chat_records(c2.stats());
    let a_rec = chat_records(a.stats());
    let b_rec = chat_records(b.stats());
    let (streams_in_flight, calls_in_flight) = in_flight_at(&old, killed);

    let after = |t: Instant| samples.iter().filter(move |s| s.at >= t);
    let since = |from: Instant, s: &TargetSample| ms(s.at.saturating_duration_since(from));
    let down_samples: Vec<&TargetSample> = after(killed).filter(|s| s.at < restarted).collect();
    let final_count = before_restart
        .as_ref()
        .map(|s| s.requests)
        .or_else(|| down_samples.last().map(|s| s.requests));
    let attempts_lost = final_count.map_or(0, |n| n.saturating_sub(old.len() as u64));
    let no_more_attempts_ms = down_samples
        .iter()
        .find(|s| Some(s.requests) == final_count)
        .map(|s| since(killed, s));
    let first_new = new.iter().map(|r| r.started).min();
    let served_after_restart = new.len() as u64;
    let others_after: u64 = [&a_rec, &b_rec]
        .iter()
        .map(|rs| rs.iter().filter(|r| r.started >= restarted).count() as u64)
        .sum();
    let mut kill = KillReport {
        replica: "c".into(),
        killed_at_ms: ms(killed - start),
        restarted_at_ms: ms(restarted - start),
        calls_in_flight_at_kill: calls_in_flight,
        streams_in_flight_at_kill: streams_in_flight,
        out_of_rotation_ms: down_samples
            .iter()
            .find(|s| !s.usable)
            .map(|s| since(killed, s)),
        unhealthy_ms: down_samples
            .iter()
            .find(|s| s.health == "unhealthy")
            .map(|s| since(killed, s)),
        no_more_attempts_ms,
        attempts_lost,
        back_ms: first_new.map(|t| ms(t.saturating_duration_since(restarted))),
        healthy_again_ms: after(restarted)
            .find(|s| s.usable && s.health == "healthy")
            .map(|s| since(restarted, s)),
        served_after_restart,
        share_after_restart: served_after_restart as f64
            / (served_after_restart + others_after).max(1) as f64,
        poll_interval_ms: ms(POLL_INTERVAL),
        goal_met: true,
        missed: Vec::new(),
    };

    let mut kinds = Vec::new();
    for kind in [Kind::Stream, Kind::Call] {
        let mine: Vec<&ChatResult> = done.iter().filter(|d| d.kind == kind).collect();
        let is = |r: &&ReqRecord| r.stream == (kind == Kind::Stream);
        let counts = vec![
            (
                "a".to_string(),
                false,
                a_rec.iter().filter(is).count() as u64,
            ),
            (
                "b".to_string(),
                false,
                b_rec.iter().filter(is).count() as u64,
            ),
            (
                "c".to_string(),
                false,
                (old.iter().filter(is).count() + new.iter().filter(is).count()) as u64,
            ),
        ];
        kinds.push(kind_report(kind, &mine, shares(&counts)));
    }
    judge_kill(&mut kill, &mut kinds);
    let marks = vec![
        Mark {
            at_ms: ms(start - t0),
            label: "kill phase".into(),
        },
        Mark {
            at_ms: ms(killed - t0),
            label: "c stopped".into(),
        },
        Mark {
            at_ms: ms(restarted - t0),
            label: "c restarted".into(),
        },
    ];
    a.shutdown().await;
    b.shutdown().await;
    c2.shutdown().await;
    Ok(PhaseRun {
        report: PhaseReport {
            name: "kill".into(),
            policy: BalancePolicy::P2cEwma.as_str(),
            replicas: vec!["a".into(), "b".into(), "c (killed)".into()],
            start_ms: ms(start - t0),
            duration_ms: ms(duration),
            kinds,
            kill: Some(kill),
        },
        done,
        marks,
        config,
    })
}

fn judge_kill(kill: &mut KillReport, kinds: &mut [KindReport]) {
    for k in kinds.iter_mut() {
        let allowed = match k.kind {
            Kind::Call => 0,
            Kind::Stream => kill.streams_in_flight_at_kill,
        };
        if k.requests == 0 {
            k.missed.push("no request ended".into());
        }
        if k.errors > allowed {
            k.missed.push(match k.kind {
                Kind::Call => format!("{} client-visible errors", k.errors),
                Kind::Stream => format!(
                    "{} client-visible errors, more than the {allowed} streams in flight on c at the kill",
                    k.errors
                ),
            });
        }
        k.goal_met = Some(k.missed.is_empty());
    }
    match kill.back_ms {
        None => kill
            .missed
            .push("c served no request after its restart".into()),
        Some(b) if b > ms(BACK_GOAL) => kill.missed.push(format!(
            "back {} ms after the restart, over the goal of {} ms",
            num(b),
            num(ms(BACK_GOAL))
        )),
        Some(_) => {}
    }
    kill.goal_met = kill.missed.is_empty() && kinds.iter().all(|k| k.missed.is_empty());
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
        let r = kill_phase(&plan, &progress, t0, announce).await?;
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

fn row_goal(p: &PhaseReport, k: &KindReport) -> String {
    match k.goal_met {
        Some(true) if p.name == BalancePolicy::P2cEwma.as_str() => {
            format!("met (≤ {P99_GOAL_RATIO}×)")
        }
        Some(true) if p.name == "baseline" || p.kill.is_some() => "met".into(),
        Some(true) => "- (contrast)".into(),
        Some(false) => format!("MISSED: {}", k.missed.join("; ")),
        None => "-".into(),
    }
}

impl LbReport {
    /// The results table: one row per phase and kind, then the kill phase's findings.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let balance: Vec<&PhaseReport> = self.phases.iter().filter(|p| p.kill.is_none()).collect();
        if !balance.is_empty() {
            t.push_str(&format!(
                "balancing: replica c is slow ({})\n",
                self.plan.slow.describe()
            ));
            t.push_str(&format!(
                "{:<21} {:<13} {:<6} {:>8} {:>6} {:>8} {:>8} {:>9}  {:<22} {}\n",
                "phase",
                "replicas",
                "kind",
                "requests",
                "errors",
                "p50 ms",
                "p99 ms",
                "p99/base",
                "share a / b / c",
                "goal"
            ));
            for p in &balance {
                for k in &p.kinds {
                    t.push_str(&format!(
                        "{:<21} {:<13} {:<6} {:>8} {:>6} {:>8} {:>8} {:>9}  {:<22} {}\n",
                        p.name,
                        p.replicas
                            .iter()
                            .map(|r| r.replace(" (slow)", "*"))
                            .collect::<Vec<_>>()
                            .join(","),
                        k.kind.name(),
                        k.requests,
                        k.errors,
                        num(k.latency.p50_ms),
                        num(k.latency.p99_ms),
                        k.p99_vs_baseline
                            .map_or_else(|| "-".into(), |r| format!("{r:.2}×")),
                        k.replicas
                            .iter()
                            .map(|r| pct(r.share))
                            .collect::<Vec<_>>()
                            .join(" / "),
                        row_goal(p, k)
                    ));
                }
            }
            t.push_str("(* the slow replica)\n");
        }
        for p in &self.phases {
            let Some(kill) = &p.kill else { continue };
            if !t.is_empty() {
                t.push('\n');
            }
            t.push_str(&format!(
                "kill: p2c_ewma over a, b, c; c stopped at {} s, started again at {} s; {}\n",
                secs(kill.killed_at_ms),
                secs(kill.restarted_at_ms),
                match self.plan.health_interval {
                    Some(i) => format!("health checks every {}", humantime::format_duration(i)),
                    None => "no health checks".into(),
                }
            ));
            t.push_str(&format!(
                "{:<6} {:>8} {:>6} {:>8} {:>8}  {:<22} {:>18}  {}\n",
                "kind",
                "requests",
                "errors",
                "p50 ms",
                "p99 ms",
                "share a / b / c",
                "in flight on c",
                "goal"
            ));
            for k in &p.kinds {
                let in_flight = match k.kind {
                    Kind::Stream => kill.streams_in_flight_at_kill,
                    Kind::Call => kill.calls_in_flight_at_kill,
                };
                t.push_str(&format!(
                    "{:<6} {:>8} {:>6} {:>8} {:>8}  {:<22} {:>18}  {}\n",
                    k.kind.name(),
                    k.requests,
                    k.errors,
                    num(k.latency.p50_ms),
                    num(k.latency.p99_ms),
                    k.replicas
                        .iter()
                        .map(|r| pct(r.share))
                        .collect::<Vec<_>>()
                        .join(" / "),
                    in_flight,
                    row_goal(p, k)
                ));
            }
            t.push_str(&format!("{}\n", kill.eject_line()));
            t.push_str(&format!("{}\n", kill.back_line()));
        }
        t
    }

    /// The one-line conclusion.
    pub fn verdict(&self) -> String {
        let mut parts = Vec::new();
        let find = |name: &str| self.phases.iter().find(|p| p.name == name);
        for name in [
            BalancePolicy::P2cEwma.as_str(),
            BalancePolicy::WeightedRoundRobin.as_str(),
        ] {
            if let Some(p) = find(name) {
                let ratios: Vec<String> = p
                    .kinds
                    .iter()
                    .map(|k| {
                        k.p99_vs_baseline.map_or_else(
                            || format!("{} -", k.kind.name()),
                            |r| format!("{} {r:.2}×", k.kind.name()),
                        )
                    })
                    .collect();
                parts.push(format!("{name} p99 {} the baseline's", ratios.join(", ")));
            }
        }
        if let Some(p) = find("kill") {
            if let Some(k) = &p.kill {
                let errors = |kind: Kind| {
                    p.kinds
                        .iter()
                        .find(|r| r.kind == kind)
                        .map_or(0, |r| r.errors)
                };
                parts.push(format!(
                    "killed replica: {} call errors, {} stream errors; back {}",
                    errors(Kind::Call),
                    errors(Kind::Stream),
                    k.back_ms.map_or_else(
                        || "never".to_string(),
                        |b| format!("{} s after its restart", secs(b))
                    )
                ));
            }
        }
        let rows: Vec<&KindReport> = self.phases.iter().flat_map(|p| &p.kinds).collect();
        let met = rows.iter().filter(|k| k.goal_met == Some(true)).count();
        let kill_met = self
            .phases
            .iter()
            .filter_map(|p| p.kill.as_ref())
            .all(|k| k.goal_met);
        parts.push(format!(
            "goals met in {met}/{} rows{}",
            rows.len(),
            if kill_met {
                ""
            } else {
                "; the kill goals MISSED"
            }
        ));
        parts.join("; ")
    }

    /// What fails the run, one line per row: more client-visible errors than
    /// `max_error_rate` allows (in the kill phase streams may also fail, up to the number in
    /// flight on the killed replica), no request at all, or a killed replica that never
    /// served again. (The p99 and the back-in-5-s goals are timing, and only reported.)
    pub fn failures(&self, max_error_rate: f64) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.phases {
            for k in &p.kinds {
                let allowed_cut = match (&p.kill, k.kind) {
                    (Some(kill), Kind::Stream) => kill.streams_in_flight_at_kill,
                    _ => 0,
                };
                let too_many =
                    k.errors as f64 > allowed_cut as f64 + max_error_rate * k.requests as f64;
                if too_many || k.requests == 0 {
                    out.push(format!(
                        "{} {}: {} of {} requests failed{} ({})",
                        p.name,
                        k.kind.name(),
                        k.errors,
                        k.requests,
                        if allowed_cut > 0 {
                            format!(" ({allowed_cut} were in flight on the killed replica)")
                        } else {
                            String::new()
                        },
                        Causes {
                            counts: k.error_causes.clone(),
                            samples: Vec::new()
                        }
                        .line()
                    ));
                }
            }
            if let Some(kill) = &p.kill {
                if kill.back_ms.is_none() {
                    out.push(format!(
                        "kill: replica {} served no request after its restart",
                        kill.replica
                    ));
                }
            }
        }
        out
    }

    /// The run as an HTML report: streams and calls, with the phases, the kill and the
    /// restart marked.
    pub fn page(&self) -> Page {
        let section = |kind: Kind, title: &str, latency: &str| Section {
            title: title.into(),
            latency: latency.into(),
            samples: self
                .samples
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, s)| *s)
                .collect(),
            marks: self.marks.clone(),
            facts: self
                .phases
                .iter()
                .flat_map(|p| {
                    p.kinds
                        .iter()
                        .filter(|k| k.kind == kind)
                        .map(move |k| (p, k))
                })
                .map(|(p, k)| {
                    (
                        p.name.clone(),
                        format!(
                            "{} requests, {} errors, p50 {} ms, p99 {} ms{}, shares {}{}",
                            k.requests,
                            k.errors,
                            num(k.latency.p50_ms),
                            num(k.latency.p99_ms),
                            k.p99_vs_baseline
                                .map_or_else(String::new, |r| format!(" ({r:.2}× baseline)")),
                            k.replicas
                                .iter()
                                .map(|r| format!("{} {}", r.name, pct(r.share)))
                                .collect::<Vec<_>>()
                                .join(", "),
                            if k.missed.is_empty() {
                                String::new()
                            } else {
                                format!("; MISSED: {}", k.missed.join("; "))
                            }
                        ),
                    )
                })
                .collect(),
        };
        let mut facts = vec![
            ("verdict".into(), self.verdict()),
            (
                "clients".into(),
                format!(
                    "{} (half streaming), {} ms per phase",
                    self.plan.clients,
                    num(ms(self.plan.duration))
                ),
            ),
            (
                "slow replica".into(),
                format!("c: {}", self.plan.slow.describe()),
            ),
        ];
        for kill in self.phases.iter().filter_map(|p| p.kill.as_ref()) {
            facts.push(("kill: eject".into(), kill.eject_line()));
            facts.push(("kill: back".into(), kill.back_line()));
        }
        Page {
            title: "sluice bench lb".into(),
            facts,
            sections: vec![
                section(Kind::Stream, "streams", "send to the first content"),
                section(Kind::Call, "calls", "send to the end of the body"),
            ],
            json: serde_json::to_value(self).ok(),
        }
    }
}

fn secs(ms: f64) -> String {
    format!("{:.2}", ms / 1000.0)
}

impl KillReport {
    /// How fast the gateway stopped sending to the dead replica.
    pub fn eject_line(&self) -> String {
        let t =
            |v: Option<f64>| v.map_or_else(|| "never".to_string(), |v| format!("{} ms", num(v)));
        format!(
            "no more attempts {} after the kill; out of rotation after {} (unhealthy after {}); {} attempts never reached it (sent as it died or while down); /admin/targets read every {} ms",
            t(self.no_more_attempts_ms),
            t(self.out_of_rotation_ms),
            t(self.unhealthy_ms),
            self.attempts_lost,
            num(self.poll_interval_ms)
        )
    }

    /// How fast it came back.
    pub fn back_line(&self) -> String {
        format!(
            "back in rotation {} after the restart (healthy in /admin/targets after {}); it served {} requests ({} of all) after; goal ≤ {} s: {}",
            self.back_ms
                .map_or_else(|| "never".to_string(), |v| format!("{} ms", num(v))),
            self.healthy_again_ms
                .map_or_else(|| "never".to_string(), |v| format!("{} ms", num(v))),
            num(self.served_after_restart as f64),
            pct(self.share_after_restart),
            BACK_GOAL.as_secs(),
            if self.back_ms.is_some_and(|b| b <= ms(BACK_GOAL)) {
                "met"
            } else {
                "MISSED"
            }
        )
    }
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
