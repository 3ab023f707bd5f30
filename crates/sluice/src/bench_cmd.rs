//! `sluice bench`: load scenarios against a gateway or the mock.
//!
//! Every scenario follows one convention: durations are humantime values (`--duration 30s`,
//! `--timeout 500ms`; the old `--duration-s`, `--timeout-ms`, ... stay as hidden aliases in
//! their old units), `--json` prints the report as JSON, `--report FILE.html` writes a
//! self-contained HTML page, and the run fails (exit 3, after the report) when more than
//! `--max-error-rate` of its requests failed.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use sluice_bench::{
    check_error_rate, probe, rps, stream, Causes, Load, Page, ProbeOpts, ProbeReport, Progress,
    RpsOpts, RpsReport, StreamOpts, StreamReport, Summary, DEFAULT_MAX_ERROR_RATE,
};
use sluice_upstream::Protocol;

/// `sluice bench` scenarios.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// N concurrent streaming requests: time to first byte and first event, event gaps,
    /// completions, and (with --close-after-events and --mock-stats) disconnect → cancel latency.
    Stream(Box<StreamArgs>),
    /// Short requests at a fixed concurrency (closed loop) or a fixed arrival rate (--rate,
    /// open model, latency from each request's intended start): latency percentiles,
    /// throughput, and failures by cause.
    Rps(Box<RpsArgs>),
    /// Seed 000's experiment: K long streams kept running while one short probe at a time is
    /// sent every interval; probe latency, and (with --mock-stats) whether each probe shared
    /// an upstream connection with a long stream.
    Probe(Box<ProbeArgs>),
    /// N clients through a gateway route of two in-process mocks while the primary
    /// misbehaves in turn (503s, resets, silence, a slow first token, cuts before the first
    /// content, flapping): client-visible errors, p50/p99 latency and attempts per request,
    /// per phase.
    Failover(Box<FailoverArgs>),
    /// Three in-process mock replicas, one slow: p50/p99 and each replica's share of the
    /// requests under p2c_ewma, least_in_flight and weighted_round_robin, against the two
    /// healthy replicas alone; then one replica killed and restarted mid-run: client-visible
    /// errors, time to eject, time to bring back.
    Lb(Box<LbArgs>),
}

/// Options of `sluice bench lb`.
#[derive(Debug, clap::Args)]
pub struct LbArgs {
    /// 4 clients and 1 s per phase (about 10 s in all) instead of 8 clients and 60 s.
    #[arg(long)]
    quick: bool,
    /// Clients sending back to back (half of them stream).
    #[arg(long)]
    clients: Option<usize>,
    /// How long each phase sends, e.g. 20s (the kill phase runs on until the replica is
    /// back, or the 5 s goal has passed).
    #[arg(long, value_parser = duration)]
    duration: Option<Duration>,
    /// How the slow replica is slow: `first-byte` (its first byte --slow-by later) or
    /// `throughput` (every write on its connections throttled to --slow-bytes-per-s).
    #[arg(long, value_enum, default_value = "first-byte")]
    slow: SlowKind,
    /// With --slow first-byte: how much later its first byte comes.
    #[arg(long, value_parser = duration, default_value = "200ms")]
    slow_by: Duration,
    /// With --slow throughput: the bytes per second its connections carry.
    #[arg(long, default_value_t = 10_000)]
    slow_bytes_per_s: u64,
    /// When the replica is stopped, after the kill phase began (default: a quarter of
    /// --duration).
    #[arg(long, value_parser = duration)]
    kill_at: Option<Duration>,
    /// How long it stays down before a new one starts on its port (default: a quarter of
    /// --duration).
    #[arg(long, value_parser = duration)]
    down_for: Option<Duration>,
    /// The upstreams' health-check interval (default 1s; --quick 200ms).
    #[arg(long, value_parser = duration, conflicts_with = "no_health_check")]
    health_interval: Option<Duration>,
    /// No active health checks: outlier ejection alone takes the killed replica out and
    /// brings it back.
    #[arg(long)]
    no_health_check: bool,
    /// Run only one part: `balance` (the baseline and the three policies) or `kill`.
    #[arg(long, value_enum)]
    only: Option<LbPart>,
    #[command(flatten)]
    out: Output,
}

/// `--slow`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum SlowKind {
    /// The first byte later (`ttft_ms`).
    FirstByte,
    /// The connection throttled (`degrade`).
    Throughput,
}

/// `--only`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LbPart {
    /// The baseline and the three policies.
    Balance,
    /// The replica killed and restarted.
    Kill,
}

/// Options of `sluice bench failover`.
#[derive(Debug, clap::Args)]
pub struct FailoverArgs {
    /// 4 clients and 1 s per phase (about 10 s in all) instead of 8 clients and 3 s.
    #[arg(long)]
    quick: bool,
    /// Clients sending back to back (half of them stream).
    #[arg(long)]
    clients: Option<usize>,
    /// How long each phase sends, e.g. 5s.
    #[arg(long, value_parser = duration)]
    duration: Option<Duration>,
    /// The primary's first-byte and first-token timeout, e.g. 500ms.
    #[arg(long, value_parser = duration)]
    first_token_timeout: Option<Duration>,
    /// Run only this phase (repeatable; the healthy baseline always runs): 503, reset,
    /// silence, slow-first-token, cut-before-content, flapping.
    #[arg(long = "phase", value_name = "NAME")]
    phases: Vec<String>,
    #[command(flatten)]
    out: Output,
}

/// The run failed its checks (too many failed requests, a goal missed): the report was
/// printed, and the process exits with status 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RunFailed(pub String);

/// The exit status for a run that completed but failed its checks.
pub const EXIT_RUN_FAILED: u8 = 3;

/// Options every scenario shares: how to report, and when the run fails.
#[derive(Debug, clap::Args)]
pub struct Output {
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML page (latency histogram, latency over time,
    /// throughput per second) to this file.
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,
    /// Fail (exit 3) when more than this share (0 to 1) of the requests failed.
    /// Default 0.5 (failover and lb: 0, per phase and kind of request).
    #[arg(long, value_name = "SHARE", value_parser = share)]
    max_error_rate: Option<f64>,
}

impl Output {
    /// The threshold, with the scenario's default.
    pub fn max_error_rate_or(&self, default: f64) -> f64 {
        self.max_error_rate.unwrap_or(default)
    }

    /// `--json`.
    pub fn json(&self) -> bool {
        self.json
    }

    /// Writes `page` to `--report`, if given.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn write_report(&self, page: impl FnOnce() -> Page) -> anyhow::Result<()> {
        if let Some(path) = &self.report {
            write_page(path, &page())?;
        }
        Ok(())
    }
}

fn write_page(path: &Path, page: &Page) -> anyhow::Result<()> {
    page.write(path)
        .with_context(|| format!("cannot write the report to {}", path.display()))?;
    eprintln!("report written to {}", path.display());
    Ok(())
}

/// A share in 0..=1 (`--max-error-rate`).
fn share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a share between 0 and 1 (0.05 allows 5% of the requests to fail)"
        )),
    }
}

/// A duration with its unit, parsed by humantime: `30s`, `500ms`, `1m30s`, `1.5s`. A bare
/// number is refused: seconds or milliseconds?
pub fn duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.parse::<f64>().is_ok() {
        return Err(format!(
            "`{t}` has no unit: write {t}s for seconds or {t}ms for milliseconds"
        ));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("`{t}` is not a duration such as 30s, 500ms or 1m30s ({e})"))
}

/// The duration given by the new flag or its hidden old alias (in `unit` seconds).
fn either(
    new: Option<Duration>,
    old: Option<f64>,
    old_flag: &str,
    unit: f64,
) -> anyhow::Result<Option<Duration>> {
    match (new, old) {
        (Some(d), _) => Ok(Some(d)),
        (None, Some(v)) => Duration::try_from_secs_f64(v * unit)
            .map(Some)
            .with_context(|| format!("{old_flag} {v} is not a duration")),
        (None, None) => Ok(None),
    }
}

/// Fails the run when too many requests failed.
fn check(
    what: &str,
    failed: u64,
    ended: u64,
    max: f64,
    causes: &std::collections::BTreeMap<String, u64>,
) -> anyhow::Result<()> {
    let c = Causes {
        counts: causes.clone(),
        samples: Vec::new(),
    };
    check_error_rate(what, failed, ended, max, &c).map_err(|e| RunFailed(e.to_string()).into())
}

/// Options of `sluice bench rps`.
#[derive(Debug, clap::Args)]
pub struct RpsArgs {
    /// Full URL of the endpoint (POST).
    #[arg(long, default_value = "http://127.0.0.1:8080/v1/chat/completions")]
    url: http::Uri,
    /// Protocol to the target: http1, h2c, h2, auto.
    #[arg(long, default_value = "http1")]
    protocol: String,
    /// Connections to the target (HTTP/2: all requests multiplexed over them; HTTP/1.1: the
    /// most open at once). Default: the concurrency for HTTP/1.1, 4 for HTTP/2.
    #[arg(long)]
    connections: Option<usize>,
    /// Requests in flight (closed loop). Ignored with --rate.
    #[arg(long, short = 'c', default_value_t = 50)]
    concurrency: usize,
    /// Arrivals per second (open model): requests are sent on schedule whatever the server
    /// does, and latency is measured from when each was due.
    #[arg(long)]
    rate: Option<f64>,
    /// With --rate: the most requests in flight; later ones are sent late (and that lateness
    /// counts in their latency).
    #[arg(long, default_value_t = 10_000)]
    max_in_flight: usize,
    /// Stop after this many requests.
    #[arg(long, short = 'n')]
    requests: Option<u64>,
    /// Stop starting requests after this long, e.g. 30s (default 10s when -n is not given).
    #[arg(long, value_parser = duration, conflicts_with = "duration_s")]
    duration: Option<Duration>,
    #[arg(long, hide = true)]
    duration_s: Option<f64>,
    /// Request body; default an OpenAI chat request of --payload-bytes.
    #[arg(long)]
    body: Option<String>,
    /// Size of the default body.
    #[arg(long, default_value_t = 8192)]
    payload_bytes: usize,
    /// Extra header, `name: value` (repeatable).
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// Per-request timeout, send to the end of the body.
    #[arg(long, value_parser = duration, default_value = "5s", conflicts_with = "timeout_ms")]
    timeout: Duration,
    #[arg(long, hide = true)]
    timeout_ms: Option<u64>,
    #[command(flatten)]
    out: Output,
}

/// Options of `sluice bench probe`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// Full URL both the long streams and the probes POST to.
    #[arg(long, default_value = "http://127.0.0.1:8080/v1/chat/completions")]
    url: http::Uri,
    /// Protocol to the target: http1, h2c, h2, auto.
    #[arg(long, default_value = "http1")]
    protocol: String,
    /// Send the probes through the long streams' client (one pool; on HTTP/2 one connection,
    /// like the incident's shared Go Transport) instead of a client of their own.
    #[arg(long)]
    shared_client: bool,
    /// Long streams kept open.
    #[arg(long, short = 'k', default_value_t = 40)]
    streams: usize,
    /// Body of a long stream.
    #[arg(
        long,
        default_value = r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"write a long story"}]}"#
    )]
    stream_body: String,
    /// Header of every long stream, `name: value` (repeatable). The default asks `sluice
    /// mock` for a stream that outlasts any run (ten million tokens, 50 ms apart); a real
    /// provider ignores it.
    #[arg(
        long = "stream-header",
        default_value = "x-mock: tokens=10000000, interval_ms=50"
    )]
    stream_headers: Vec<String>,
    /// Header of the first long stream only (replaces a same-named --stream-header), e.g.
    /// `x-mock: tokens=10000000, interval_ms=10, token_bytes=1000, degrade=50000`.
    #[arg(long = "first-stream-header")]
    first_stream_headers: Vec<String>,
    /// Body of a probe.
    #[arg(
        long,
        default_value = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":16}"#
    )]
    probe_body: String,
    /// Header of every probe (repeatable).
    #[arg(long = "probe-header")]
    probe_headers: Vec<String>,
    /// Pause between the end of a probe and the next.
    #[arg(long, value_parser = duration, default_value = "1s")]
    probe_interval: Duration,
    /// How long one probe may take.
    #[arg(long, value_parser = duration, default_value = "10s")]
    probe_timeout: Duration,
    /// How long to probe.
    #[arg(long, value_parser = duration, default_value = "60s")]
    duration: Duration,
    /// The longest wait for the long streams to start before probing.
    #[arg(long, value_parser = duration, default_value = "10s")]
    warmup: Duration,
    /// The mock's stats URL (e.g. http://127.0.0.1:9090/__mock/stats), to tell which probes
    /// shared a connection with a long stream.
    #[arg(long)]
    mock_stats: Option<http::Uri>,
    #[command(flatten)]
    out: Output,
}

/// Options of `sluice bench stream`.
#[derive(Debug, clap::Args)]
pub struct StreamArgs {
    /// Full URL of the streaming endpoint.
    #[arg(long, default_value = "http://127.0.0.1:8080/v1/chat/completions")]
    url: http::Uri,
    /// Protocol to the target: http1, h2c, h2, auto.
    #[arg(long, default_value = "http1")]
    protocol: String,
    /// Streams open at once (HTTP/1.1: one connection each).
    #[arg(long, short = 'c', default_value_t = 100)]
    concurrency: usize,
    /// Streams in all.
    #[arg(long, short = 'n', default_value_t = 1000)]
    requests: usize,
    /// Spread the first streams' starts over this long.
    #[arg(long, value_parser = duration, default_value = "1s", conflicts_with = "ramp_ms")]
    ramp: Duration,
    #[arg(long, hide = true)]
    ramp_ms: Option<u64>,
    /// Request body.
    #[arg(
        long,
        default_value = r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#
    )]
    body: String,
    /// Extra header, `name: value` (repeatable), e.g. `x-mock: tokens=20, interval_ms=50`.
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// Close each stream after this many events.
    #[arg(long)]
    close_after_events: Option<u64>,
    /// The share of streams (0.0 to 1.0) that --close-after-events applies to; the rest are
    /// read to their end.
    #[arg(long, default_value_t = 1.0)]
    close_share: f64,
    /// The mock's stats URL (e.g. http://127.0.0.1:9090/__mock/stats) for cancel latency.
    #[arg(long)]
    mock_stats: Option<http::Uri>,
    /// How long one stream may take.
    #[arg(long, value_parser = duration, default_value = "60s", conflicts_with = "timeout_s")]
    timeout: Duration,
    #[arg(long, hide = true)]
    timeout_s: Option<u64>,
    /// Stop starting streams after this long.
    #[arg(long, value_parser = duration, default_value = "120s", conflicts_with = "max_duration_s")]
    duration: Duration,
    #[arg(long, hide = true)]
    max_duration_s: Option<u64>,
    #[command(flatten)]
    out: Output,
}

/// The protocol named by `--protocol`.
pub fn protocol(s: &str) -> anyhow::Result<Protocol> {
    Ok(match s {
        "http1" => Protocol::Http1,
        "h2c" => Protocol::H2c,
        "h2" => Protocol::H2,
        "auto" => Protocol::Auto,
        other => anyhow::bail!("--protocol `{other}` is not one of http1, h2c, h2, auto"),
    })
}

fn parse_headers(raw: &[String]) -> anyhow::Result<Vec<(HeaderName, HeaderValue)>> {
    raw.iter()
        .map(|h| {
            let (k, v) = h
                .split_once(':')
                .with_context(|| format!("header `{h}` is not `name: value`"))?;
            Ok((
                HeaderName::from_bytes(k.trim().as_bytes())
                    .with_context(|| format!("bad header name in `{h}`"))?,
                HeaderValue::from_str(v.trim())
                    .with_context(|| format!("bad header value in `{h}`"))?,
            ))
        })
        .collect()
}

/// Runs a scenario and prints its report.
///
/// # Errors
/// The scenario could not run, or [`RunFailed`] after the report when it failed its checks.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Stream(a) => run_stream(*a),
        BenchCommand::Rps(a) => run_rps(*a),
        BenchCommand::Probe(a) => run_probe(*a),
        BenchCommand::Failover(a) => run_failover(*a),
        BenchCommand::Lb(a) => run_lb(*a),
    }
}

fn run_lb(a: LbArgs) -> anyhow::Result<()> {
    use sluice::lb::{self, LbPlan, Slow};
    let mut plan = if a.quick {
        LbPlan::quick()
    } else {
        LbPlan::full()
    };
    if let Some(c) = a.clients {
        anyhow::ensure!(
            c >= 2,
            "--clients must be at least 2 (one streaming, one not)"
        );
        plan.clients = c;
    }
    if let Some(d) = a.duration {
        anyhow::ensure!(!d.is_zero(), "--duration must be above 0");
        plan.duration = d;
        // --quick's kill times are fitted to its 1 s phases; a duration of one's own
        // brings back the defaults (quarters of it).
        plan.kill_at = None;
        plan.down_for = None;
    }
    plan.slow = match a.slow {
        SlowKind::FirstByte => {
            anyhow::ensure!(!a.slow_by.is_zero(), "--slow-by must be above 0");
            Slow::FirstByte(a.slow_by)
        }
        SlowKind::Throughput => {
            anyhow::ensure!(a.slow_bytes_per_s > 0, "--slow-bytes-per-s must be above 0");
            Slow::Throughput(a.slow_bytes_per_s)
        }
    };
    if a.kill_at.is_some() {
        plan.kill_at = a.kill_at;
    }
    if a.down_for.is_some() {
        plan.down_for = a.down_for;
    }
    if let Some(i) = a.health_interval {
        anyhow::ensure!(
            i >= Duration::from_millis(50),
            "--health-interval must be at least 50ms"
        );
        plan.health_interval = Some(i);
    }
    if a.no_health_check {
        plan.health_interval = None;
    }
    match a.only {
        Some(LbPart::Balance) => plan.kill = false,
        Some(LbPart::Kill) => plan.balance = false,
        None => {}
    }
    let progress = Arc::new(Progress::default());
    let human = !a.out.json;
    let report = runtime()?.block_on(async {
        let ticker = Ticker::start(progress.clone(), "requests");
        let announce = |what: &str| {
            ticker.clear();
            if human {
                eprintln!("{what} ...");
            }
        };
        let r = lb::run(plan, &announce, progress.clone()).await;
        ticker.stop();
        r
    })?;
    if a.out.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
        println!();
        println!("{}", report.verdict());
    }
    a.out.write_report(|| report.page())?;
    let failures = report.failures(a.out.max_error_rate_or(0.0));
    if failures.is_empty() {
        Ok(())
    } else {
        Err(RunFailed(failures.join("; ")).into())
    }
}

fn run_failover(a: FailoverArgs) -> anyhow::Result<()> {
    use sluice::failover::{self, FailoverPlan};
    let mut plan = if a.quick {
        FailoverPlan::quick()
    } else {
        FailoverPlan::full()
    };
    if let Some(c) = a.clients {
        anyhow::ensure!(
            c >= 2,
            "--clients must be at least 2 (one streaming, one not)"
        );
        plan.clients = c;
    }
    if let Some(d) = a.duration {
        anyhow::ensure!(!d.is_zero(), "--duration must be above 0");
        plan.phase_duration = d;
    }
    if let Some(t) = a.first_token_timeout {
        anyhow::ensure!(
            t >= Duration::from_millis(50),
            "--first-token-timeout must be at least 50ms"
        );
        plan.first_token_timeout = t;
    }
    let plan = plan.only(&a.phases)?;
    let progress = Arc::new(Progress::default());
    let human = !a.out.json;
    let report = runtime()?.block_on(async {
        let ticker = Ticker::start(progress.clone(), "requests");
        let phase = |p: &failover::Phase| {
            ticker.clear();
            if human {
                eprintln!("phase {}: {} ...", p.name, p.what);
            }
        };
        let r = failover::run(plan, &phase, progress.clone()).await;
        ticker.stop();
        r
    })?;
    if a.out.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
        println!();
        println!("{}", report.verdict());
    }
    a.out.write_report(|| report.page())?;
    let failures = report.failures(a.out.max_error_rate_or(0.0));
    if failures.is_empty() {
        Ok(())
    } else {
        Err(RunFailed(failures.join("; ")).into())
    }
}

/// A multi-threaded tokio runtime.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Runtime::new().context("cannot start the tokio runtime")
}

fn run_rps(a: RpsArgs) -> anyhow::Result<()> {
    let protocol = protocol(&a.protocol)?;
    let load = match a.rate {
        Some(rate_per_s) => Load::Open {
            rate_per_s,
            max_in_flight: a.max_in_flight,
        },
        None => Load::Closed {
            concurrency: a.concurrency,
        },
    };
    let connections = a.connections.unwrap_or(match protocol {
        Protocol::Http1 | Protocol::Auto => match load {
            Load::Closed { concurrency } => concurrency,
            Load::Open { max_in_flight, .. } => max_in_flight.min(1000),
        },
        Protocol::H2 | Protocol::H2c => 4,
    });
    let duration = match (
        either(a.duration, a.duration_s, "--duration-s", 1.0)?,
        a.requests,
    ) {
        (Some(d), _) => Some(d),
        (None, None) => Some(Duration::from_secs(10)),
        (None, Some(_)) => None,
    };
    let timeout =
        either(None, a.timeout_ms.map(|v| v as f64), "--timeout-ms", 1e-3)?.unwrap_or(a.timeout);
    let progress = Arc::new(Progress::default());
    let opts = RpsOpts {
        url: a.url,
        protocol,
        connections,
        load,
        requests: a.requests,
        duration,
        body: a
            .body
            .map_or_else(|| rps::chat_body(a.payload_bytes), Bytes::from),
        headers: parse_headers(&a.headers)?,
        timeout,
        progress: progress.clone(),
    };
    let report = runtime()?.block_on(async {
        let ticker = Ticker::start(progress, "requests");
        let r = rps::run(opts).await;
        ticker.stop();
        r
    })?;
    if a.out.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_rps(&report);
    }
    a.out.write_report(|| report.page("sluice bench rps"))?;
    check(
        "requests",
        report.failed(),
        report.successes + report.failed(),
        a.out.max_error_rate_or(DEFAULT_MAX_ERROR_RATE),
        &report.failure_causes,
    )
}

/// `  failed: connect_refused 38195, status_503 2` and one message per cause.
fn print_failures(
    failed: u64,
    causes: &std::collections::BTreeMap<String, u64>,
    samples: &[String],
) {
    if failed == 0 {
        return;
    }
    let c = Causes {
        counts: causes.clone(),
        samples: Vec::new(),
    };
    println!("  failed by cause: {}", c.line());
    for e in samples {
        println!("  e.g. {e}");
    }
}

fn print_rps(r: &RpsReport) {
    let load = match (r.concurrency, r.target_rate_per_s) {
        (_, Some(rate)) => format!("open model at {rate} req/s, latency from the intended start"),
        (Some(c), _) => format!("closed loop, {c} in flight"),
        _ => String::new(),
    };
    println!(
        "rps ({load}): {} sent, {} ok, {} timeouts, {} errors; {:.0} ok/s in {:.1} s",
        r.sent,
        r.successes,
        r.timeouts,
        r.errors,
        r.throughput_per_s,
        r.wall_ms / 1000.0
    );
    print_failures(r.failed(), &r.failure_causes, &r.error_samples);
    header_row();
    row("latency", &r.latency);
}

fn run_probe(a: ProbeArgs) -> anyhow::Result<()> {
    let progress = Arc::new(Progress::default());
    let opts = ProbeOpts {
        url: a.url,
        protocol: protocol(&a.protocol)?,
        shared_client: a.shared_client,
        streams: a.streams,
        stream_body: Bytes::from(a.stream_body),
        stream_headers: parse_headers(&a.stream_headers)?,
        first_stream_headers: parse_headers(&a.first_stream_headers)?,
        probe_body: Bytes::from(a.probe_body),
        probe_headers: parse_headers(&a.probe_headers)?,
        probe_interval: a.probe_interval,
        probe_timeout: a.probe_timeout,
        duration: a.duration,
        warmup: a.warmup,
        mock_stats: a.mock_stats,
        progress: progress.clone(),
    };
    let report = runtime()?.block_on(async {
        let ticker = Ticker::start(progress, "probes");
        let r = probe::run(opts).await;
        ticker.stop();
        r
    })?;
    if a.out.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_probe(&report);
    }
    a.out.write_report(|| report.page("sluice bench probe"))?;
    check(
        "probes",
        report.failed() as u64,
        report.ended() as u64,
        a.out.max_error_rate_or(DEFAULT_MAX_ERROR_RATE),
        &report.failure_causes,
    )
}

fn print_probe(r: &ProbeReport) {
    println!(
        "long streams: {} kept open ({} active when probing began, {} started in all)",
        r.long_streams, r.long_streams_active_at_start, r.long_streams_started
    );
    if r.long_streams_ended > r.long_streams {
        let c = Causes {
            counts: r.long_stream_failures.clone(),
            samples: Vec::new(),
        };
        println!(
            "  warning: {} long streams ended during the run ({}): they are not long; \
             make them outlast the run (e.g. --stream-header 'x-mock: tokens=10000000, interval_ms=50')",
            r.long_streams_ended,
            if c.counts.is_empty() { "none failed".to_string() } else { format!("failed: {}", c.line()) }
        );
    }
    println!(
        "{:>8} {:>9} {:>7} {:>9} {:>10} {:>10} {:>10} {:>10}  shared with a long stream",
        "requests", "successes", "failed", "cancelled", "mean ms", "p50 ms", "p95 ms", "max ms",
    );
    let shared = match r.shared_pct() {
        Some(p) => format!(
            "{}/{} ({p:.0}%)",
            r.shared_with_long_stream, r.probes_located
        ),
        None => "unknown (no --mock-stats)".into(),
    };
    println!(
        "{:>8} {:>9} {:>7} {:>9} {:>10.1} {:>10.1} {:>10.1} {:>10.1}  {}",
        r.requests,
        r.successes,
        r.failed(),
        r.cancelled_at_end,
        r.latency.mean_ms,
        r.latency.p50_ms,
        r.latency.p95_ms,
        r.latency.max_ms,
        shared
    );
    print_failures(r.failed() as u64, &r.failure_causes, &r.error_samples);
}

fn run_stream(a: StreamArgs) -> anyhow::Result<()> {
    let headers = parse_headers(&a.headers)?;
    let ms = |v: Option<u64>| v.map(|v| v as f64);
    let opts = StreamOpts {
        url: a.url,
        protocol: protocol(&a.protocol)?,
        concurrency: a.concurrency,
        requests: a.requests,
        ramp: either(None, ms(a.ramp_ms), "--ramp-ms", 1e-3)?.unwrap_or(a.ramp),
        body: Bytes::from(a.body),
        headers,
        close_after_events: a.close_after_events,
        close_share: a.close_share,
        timeout: either(None, ms(a.timeout_s), "--timeout-s", 1.0)?.unwrap_or(a.timeout),
        mock_stats: a.mock_stats,
        max_duration: either(None, ms(a.max_duration_s), "--max-duration-s", 1.0)?
            .unwrap_or(a.duration),
    };
    let report = runtime()?.block_on(stream::run(opts))?;
    if a.out.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    a.out.write_report(|| report.page("sluice bench stream"))?;
    check(
        "streams",
        report.failed() as u64,
        report.started as u64,
        a.out.max_error_rate_or(DEFAULT_MAX_ERROR_RATE),
        &report.failure_causes,
    )
}

fn row(name: &str, s: &Summary) {
    println!(
        "{name:<16} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        s.count, s.p50_ms, s.p90_ms, s.p99_ms, s.p999_ms, s.max_ms
    );
}

fn header_row() {
    println!(
        "{:<16} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "ms", "count", "p50", "p90", "p99", "p99.9", "max"
    );
}

fn print_table(r: &StreamReport) {
    println!(
        "streams: {} started, {} completed, {} closed early, {} errors, {} timeouts; {} events ({:.0}/s) in {:.1} s",
        r.started, r.completed, r.closed_early, r.errors, r.timeouts, r.events, r.events_per_s, r.wall_ms / 1000.0
    );
    print_failures(r.failed() as u64, &r.failure_causes, &r.error_samples);
    header_row();
    row("ttfb", &r.ttfb);
    row("first event", &r.first_event);
    row("event gap", &r.event_gaps);
    if let Some(c) = &r.cancel_latency {
        row("cancel latency", c);
    }
}

/// A live progress line on stdout, redrawn every 250 ms, only when stdout is a terminal (a
/// pipe or file gets just the report).
pub struct Ticker {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Ticker {
    /// Starts redrawing `label: <progress line>` (inside a tokio runtime).
    pub fn start(progress: Arc<Progress>, label: &'static str) -> Ticker {
        if !std::io::stdout().is_terminal() {
            return Ticker { task: None };
        }
        let t0 = tokio::time::Instant::now();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let line = progress.line(t0.elapsed().as_secs_f64());
                let mut out = std::io::stdout().lock();
                // \r and erase-line: redraw in place.
                let _ = write!(out, "\r\x1b[K{label}: {line}");
                let _ = out.flush();
            }
        });
        Ticker { task: Some(task) }
    }

    /// Erases the line (before other output).
    pub fn clear(&self) {
        if self.task.is_some() {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r\x1b[K");
            let _ = out.flush();
        }
    }

    /// Stops redrawing and erases the line.
    pub fn stop(mut self) {
        self.clear();
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_their_unit() {
        assert_eq!(duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration(" 500ms "), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(
            duration("20").unwrap_err(),
            "`20` has no unit: write 20s for seconds or 20ms for milliseconds"
        );
        assert!(duration("soon").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn old_spellings_keep_their_units() {
        let ms = either(None, Some(250.0), "--timeout-ms", 1e-3).unwrap();
        assert_eq!(ms, Some(Duration::from_millis(250)));
        let new = either(Some(Duration::from_secs(2)), None, "--duration-s", 1.0).unwrap();
        assert_eq!(new, Some(Duration::from_secs(2)));
        assert!(either(None, Some(-1.0), "--duration-s", 1.0).is_err());
        assert_eq!(share("0.05"), Ok(0.05));
        assert!(share("1.5").is_err());
    }
}
