//! `sluice demo`: seed 000's incident, reproduced in-process in about a minute.
//!
//! A mock upstream and an ephemeral gateway per scenario, all on 127.0.0.1:0. K long streams
//! run through the gateway; the first one carries `x-mock: degrade=…`, which throttles every
//! write on the upstream connection it lands on (the incident's retransmitting TCP link).
//! Meanwhile one short probe at a time goes through the same gateway. Three scenarios:
//!
//! - **baseline**: no long streams, default lanes;
//! - **trap**: the incident's pool, one HTTP/2 connection for everything (every route pinned
//!   to lane `stream`, which has exactly one connection) and nothing watching its health, so
//!   the probes queue behind the streams on the degraded connection;
//! - **lanes**: Sluice's defaults: streams on lane `stream`, probes on lane `short`, so the
//!   degraded connection carries no probe.
//!
//! Then a cancel check: a stream opened through the gateway and dropped, and the time until
//! the mock saw the cancel.

use std::sync::Arc;
use std::time::Duration;

use crate::Server;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use http_body_util::BodyExt;
use serde::Serialize;
use sluice_bench::{probe, ProbeOpts, ProbeReport, Progress};
use sluice_gateway::config::Config;
use sluice_mock::{MockConfig, MockServer};
use sluice_upstream::{Protocol, Upstream, UpstreamConfig};
use tokio::time::{sleep, Instant};

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The mock did not start.
    #[error("cannot start the mock: {0}")]
    Mock(#[from] sluice_mock::MockError),
    /// A gateway config was rejected (a bug in the demo).
    #[error("the {scenario} gateway's config is invalid: {reason}")]
    Config {
        /// Which scenario.
        scenario: &'static str,
        /// The checker's message.
        reason: String,
    },
    /// A gateway did not start.
    #[error("cannot start the gateway: {0}")]
    Gateway(#[from] sluice_gateway::StartError),
    /// A scenario could not run.
    #[error(transparent)]
    Bench(#[from] sluice_bench::BenchError),
    /// The cancel check could not open its stream.
    #[error("cancel check: {0}")]
    Cancel(String),
}

/// The sizes and times of a demo run.
#[derive(Clone, Debug, Serialize)]
pub struct DemoPlan {
    /// Long streams kept running in the trap and lanes scenarios (K).
    pub streams: usize,
    /// Bytes of text per token of a long stream: large tokens fill the slow link quickly.
    pub token_bytes: u32,
    /// Gap between a long stream's tokens, in milliseconds (they generate faster than the
    /// degraded link drains, so the connection stays backlogged).
    pub interval_ms: u64,
    /// The degraded connection's rate, bytes per second.
    pub degrade_bytes_per_s: u64,
    /// How long the baseline probes.
    pub baseline: Duration,
    /// How long the trap and lanes scenarios probe.
    pub duration: Duration,
    /// Pause between probes.
    pub probe_interval: Duration,
    /// Budget of one probe.
    pub probe_timeout: Duration,
    /// Longest wait for the K streams to start before probing.
    pub warmup: Duration,
    /// Streams opened and dropped by the cancel check.
    pub cancels: usize,
}

impl DemoPlan {
    /// The full demo: 40 streams like the seed, about a minute.
    pub fn full() -> DemoPlan {
        DemoPlan {
            streams: 40,
            token_bytes: 1000,
            interval_ms: 10,
            degrade_bytes_per_s: 50_000,
            baseline: Duration::from_secs(5),
            duration: Duration::from_secs(25),
            probe_interval: Duration::from_secs(1),
            probe_timeout: Duration::from_secs(10),
            warmup: Duration::from_secs(8),
            cancels: 5,
        }
    }

    /// `--quick`: 10 streams, a few seconds per scenario.
    pub fn quick() -> DemoPlan {
        DemoPlan {
            streams: 10,
            token_bytes: 1000,
            baseline: Duration::from_secs(2),
            duration: Duration::from_secs(6),
            probe_interval: Duration::from_millis(500),
            probe_timeout: Duration::from_secs(5),
            warmup: Duration::from_secs(3),
            cancels: 3,
            ..DemoPlan::full()
        }
    }
}

/// A gateway configuration of the demo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// One upstream HTTP/2 connection for everything, no health checks.
    Trap,
    /// Sluice's default lanes.
    Lanes,
}

impl Setup {
    /// The gateway's TOML, routing everything to the mock at `mock_url` over h2c.
    pub fn config_toml(self, mock_url: &str) -> String {
        let (pool, route) = match self {
            // The incident's Go pool: one connection takes every request while it has a
            // free stream slot, and nothing checks how fast it is. (With Sluice's PING
            // health checks on, the lone connection would be marked degraded and the probes
            // would wait for a connection that may not be opened: a different failure.)
            Setup::Trap => (
                "pool = { stream = { min_connections = 1, max_connections = 1, \
                 max_streams_per_connection = 100 }, short = { min_connections = 1, \
                 max_connections = 1, max_streams_per_connection = 100 }, \
                 ping_interval = \"1h\", stall_timeout = \"1h\" }",
                "lane = \"stream\"",
            ),
            Setup::Lanes => ("", ""),
        };
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\nshutdown_grace = \"1s\"\n\n\
             [[upstream]]\nname = \"mock\"\nbase_url = \"{mock_url}/v1\"\nprotocol = \"h2c\"\n{pool}\n\n\
             [[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\n{route}\n"
        )
    }

    fn name(self) -> &'static str {
        match self {
            Setup::Trap => "trap",
            Setup::Lanes => "lanes",
        }
    }
}

/// A mock and a gateway in front of it, both on ephemeral ports.
pub struct Stack {
    /// The upstream.
    pub mock: MockServer,
    /// The gateway, routing every model to the mock.
    pub gateway: Server,
}

impl Stack {
    /// Starts a fresh mock and a gateway configured as `setup`.
    ///
    /// # Errors
    /// [`DemoError`] if either does not start.
    pub async fn start(setup: Setup) -> Result<Stack, DemoError> {
        let mock = MockServer::start(MockConfig {
            listen: "127.0.0.1:0".parse().expect("a literal address"),
            ..MockConfig::default()
        })
        .await?;
        let text = setup.config_toml(&mock.url());
        let cfg = Config::from_toml(&text, &|_| None).map_err(|e| DemoError::Config {
            scenario: setup.name(),
            reason: e.to_string(),
        })?;
        let gateway = Server::start(cfg).await?;
        Ok(Stack { mock, gateway })
    }

    /// The gateway's chat completions URL.
    pub fn chat_url(&self) -> http::Uri {
        format!("http://{}/v1/chat/completions", self.gateway.addr())
            .parse()
            .expect("an address makes a valid URI")
    }

    /// Stops the gateway, then the mock.
    pub async fn stop(self) {
        self.gateway.shutdown().await;
        self.mock.shutdown().await;
    }
}

/// Everything the demo measured.
#[derive(Clone, Debug, Serialize)]
pub struct DemoReport {
    /// What was run.
    pub plan: DemoPlan,
    /// Probes with no background load.
    pub baseline: ProbeReport,
    /// Probes sharing the one upstream connection with the long streams.
    pub trap: ProbeReport,
    /// Probes on lane `short` while the streams run on lane `stream`.
    pub lanes: ProbeReport,
    /// Client drop → the mock seeing the cancel, per stream, in milliseconds.
    pub cancel_ms: Vec<f64>,
    /// The one-line conclusion.
    pub verdict: String,
}

fn header(name: &'static str, value: String) -> (HeaderName, HeaderValue) {
    (
        HeaderName::from_static(name),
        HeaderValue::try_from(value).expect("the demo's header values are ASCII"),
    )
}

/// Runs the probe experiment against `stack` with `streams` long streams.
///
/// # Errors
/// [`DemoError::Bench`] if the scenario cannot run (its stats cannot be read).
pub async fn probe_scenario(
    stack: &Stack,
    plan: &DemoPlan,
    streams: usize,
    duration: Duration,
    progress: Arc<Progress>,
) -> Result<ProbeReport, DemoError> {
    let stream_spec = format!(
        "tokens=10000000, interval_ms={}, token_bytes={}",
        plan.interval_ms, plan.token_bytes
    );
    let opts = ProbeOpts {
        url: stack.chat_url(),
        // HTTP/1.1 to the gateway: a client connection per request, so the only place the
        // probes can meet the streams is the gateway's upstream pool, the thing on trial.
        protocol: Protocol::Http1,
        shared_client: false,
        streams,
        stream_body: Bytes::from_static(br#"{"model":"gpt-4o","stream":true}"#),
        stream_headers: vec![header("x-mock", stream_spec.clone())],
        first_stream_headers: vec![header(
            "x-mock",
            format!("{stream_spec}, degrade={}", plan.degrade_bytes_per_s),
        )],
        probe_body: Bytes::from_static(
            br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":16}"#,
        ),
        probe_headers: vec![],
        probe_interval: plan.probe_interval,
        probe_timeout: plan.probe_timeout,
        duration,
        warmup: plan.warmup,
        mock_stats: Some(
            format!("{}/__mock/stats", stack.mock.url())
                .parse()
                .expect("an address makes a valid URI"),
        ),
        progress,
    };
    Ok(probe::run(opts).await?)
}

/// Opens `n` streams through the gateway one after another, drops each after its first bytes,
/// and returns how long the mock took to see each cancel, in milliseconds.
///
/// # Errors
/// [`DemoError::Cancel`] if a stream cannot be opened.
pub async fn cancel_check(stack: &Stack, n: usize) -> Result<Vec<f64>, DemoError> {
    let client = Upstream::new(UpstreamConfig {
        name: "demo-client".into(),
        base_url: format!("http://{}", stack.gateway.addr())
            .parse()
            .expect("an address makes a valid URI"),
        protocol: Protocol::Http1,
        ..UpstreamConfig::default()
    })
    .map_err(|e| DemoError::Cancel(e.to_string()))?;
    let mut out = Vec::new();
    for _ in 0..n {
        let mut req = http::Request::post("/v1/chat/completions")
            .body(Bytes::from_static(br#"{"model":"gpt-4o","stream":true}"#))
            .expect("a valid request");
        req.headers_mut().insert(
            "x-mock",
            HeaderValue::from_static("tokens=100000, interval_ms=10"),
        );
        let resp = client
            .send(req, Instant::now() + Duration::from_secs(5))
            .await
            .map_err(|e| DemoError::Cancel(e.to_string()))?;
        let id: u64 = resp
            .headers()
            .get("x-mock-request-id")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .ok_or_else(|| DemoError::Cancel("no x-mock-request-id".into()))?;
        let mut body = resp.into_body();
        // The stream is live end to end once its first bytes arrived.
        let _ = tokio::time::timeout(Duration::from_secs(5), body.frame()).await;
        drop(body);
        let dropped = Instant::now();
        // The mock records the cancel when it notices; poll its records, bounded.
        let deadline = dropped + Duration::from_secs(5);
        let seen = loop {
            let snap = stack.mock.stats().snapshot();
            if let Some(at) = snap.request(id).and_then(|r| r.cancelled_at) {
                break Some(at);
            }
            if Instant::now() >= deadline {
                break None;
            }
            sleep(Duration::from_micros(200)).await;
        };
        let seen = seen.ok_or_else(|| DemoError::Cancel("the mock never saw the cancel".into()))?;
        out.push(seen.saturating_duration_since(dropped).as_secs_f64() * 1000.0);
    }
    Ok(out)
}

/// Runs the whole demo. `phase` is told what starts next (for a progress line); `progress`
/// counts the probes of the running scenario.
///
/// # Errors
/// [`DemoError`] if a mock or gateway does not start or a scenario cannot run.
pub async fn run(
    plan: DemoPlan,
    phase: &(dyn Fn(&str) + Sync),
    progress: Arc<Progress>,
) -> Result<DemoReport, DemoError> {
    phase("baseline: probes alone");
    let stack = Stack::start(Setup::Lanes).await?;
    let baseline = probe_scenario(&stack, &plan, 0, plan.baseline, progress.clone()).await?;
    stack.stop().await;

    phase(&format!(
        "trap: {} long streams and the probes on ONE upstream HTTP/2 connection, degraded to {} B/s",
        plan.streams, plan.degrade_bytes_per_s
    ));
    let stack = Stack::start(Setup::Trap).await?;
    let trap = probe_scenario(&stack, &plan, plan.streams, plan.duration, progress.clone()).await?;
    stack.stop().await;

    phase(&format!(
        "lanes: {} long streams on lane `stream` (one connection degraded), probes on lane `short`",
        plan.streams
    ));
    let stack = Stack::start(Setup::Lanes).await?;
    let lanes = probe_scenario(&stack, &plan, plan.streams, plan.duration, progress).await?;
    phase("cancel: streams dropped by the client");
    let cancel_ms = cancel_check(&stack, plan.cancels).await?;
    stack.stop().await;

    let mut report = DemoReport {
        plan,
        baseline,
        trap,
        lanes,
        cancel_ms,
        verdict: String::new(),
    };
    report.verdict = verdict(&report);
    Ok(report)
}

/// Milliseconds for people: `0.9 ms`, `37 ms`, `2,400 ms`.
pub fn fmt_ms(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{} ms", thousands(ms.round() as u64))
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The one-line conclusion, e.g. `lanes: probe p95 0.9 ms vs 2,400 ms on the shared
/// connection (2,600x); cancel reached the upstream in 0.4 ms`.
pub fn verdict(r: &DemoReport) -> String {
    let (lanes, trap) = (r.lanes.latency.p95_ms, r.trap.latency.p95_ms);
    let mut v = format!(
        "lanes: probe p95 {} vs {} on the shared connection",
        fmt_ms(lanes),
        fmt_ms(trap)
    );
    if lanes > 0.0 && trap > lanes {
        v.push_str(&format!(" ({}x)", thousands((trap / lanes).round() as u64)));
    } else {
        v.push_str(" (NO improvement: lanes were not faster)");
    }
    match median(&r.cancel_ms) {
        Some(c) => v.push_str(&format!("; cancel reached the upstream in {}", fmt_ms(c))),
        None => v.push_str("; cancel not measured"),
    }
    v
}

/// The results as a table shaped like the seed's.
pub fn table(r: &DemoReport) -> String {
    let mut t = format!(
        "{:<36} {:>8} {:>9} {:>6} {:>9} {:>10} {:>10} {:>10}  shared with a long stream\n",
        "scenario", "requests", "successes", "failed", "cancelled", "mean", "p95", "max",
    );
    for (name, p) in r.scenarios() {
        let shared = match p.shared_pct() {
            Some(pct) => format!(
                "{}/{} ({pct:.0}%)",
                p.shared_with_long_stream, p.probes_located
            ),
            None => "unknown".into(),
        };
        t.push_str(&format!(
            "{:<36} {:>8} {:>9} {:>6} {:>9} {:>10} {:>10} {:>10}  {}\n",
            name,
            p.requests,
            p.successes,
            p.errors + p.timeouts,
            p.cancelled_at_end,
            fmt_ms(p.latency.mean_ms),
            fmt_ms(p.latency.p95_ms),
            fmt_ms(p.latency.max_ms),
            shared
        ));
    }
    t
}

impl DemoReport {
    /// The three scenarios as an HTML report page, one section each.
    pub fn page(&self) -> sluice_bench::Page {
        let cancel = median(&self.cancel_ms).map_or_else(|| "not measured".into(), fmt_ms);
        sluice_bench::Page {
            title: "sluice demo".into(),
            facts: vec![
                ("verdict".into(), self.verdict.clone()),
                (
                    "long streams".into(),
                    format!(
                        "{} of {} B tokens every {} ms; the first degrades its connection to {} B/s",
                        self.plan.streams,
                        self.plan.token_bytes,
                        self.plan.interval_ms,
                        self.plan.degrade_bytes_per_s
                    ),
                ),
                ("cancel reached the upstream in (median)".into(), cancel),
            ],
            sections: self
                .scenarios()
                .into_iter()
                .map(|(name, p)| p.section(name))
                .collect(),
            json: serde_json::to_value(self).ok(),
        }
    }

    /// The scenarios with the names the table gives them.
    pub fn scenarios(&self) -> [(&'static str, &ProbeReport); 3] {
        [
            ("baseline: no background streams", &self.baseline),
            ("trap: one shared HTTP/2 connection", &self.trap),
            ("lanes: Sluice (stream / short)", &self.lanes),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_read_well() {
        assert_eq!(fmt_ms(0.93), "0.9 ms");
        assert_eq!(fmt_ms(37.4), "37 ms");
        assert_eq!(fmt_ms(2400.2), "2,400 ms");
        assert_eq!(fmt_ms(1234567.0), "1,234,567 ms");
    }

    #[test]
    fn both_configs_are_valid() {
        for s in [Setup::Trap, Setup::Lanes] {
            let c = Config::from_toml(&s.config_toml("http://127.0.0.1:9"), &|_| None).unwrap();
            let pinned = c.routes[0].lane;
            assert_eq!(pinned.is_some(), s == Setup::Trap, "{s:?}");
        }
    }
}
