//! The `probe` scenario, seed 000's experiment: K long streams kept running (a finished one is
//! replaced) while one short probe at a time is sent every interval; per probe, its latency and
//! whether it shared an upstream connection with a long stream, read from the mock's stats.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request};
use http_body_util::BodyExt;
use serde::Serialize;
use sluice_upstream::{Protocol, Upstream};
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, timeout_at, Instant};

use crate::failure::{Causes, Failure};
use crate::progress::Progress;
use crate::report::{num, Page, Section};
use crate::stream::{client_for, fetch_json};
use crate::summary::Summary;
use crate::timeline::Sample;
use crate::BenchError;

/// The header naming each long stream (`x-sluice-long-stream: N`) and probe
/// (`x-sluice-probe: N`), so the mock's records identify requests whose response never came.
pub const LONG_STREAM_HEADER: &str = "x-sluice-long-stream";
/// See [`LONG_STREAM_HEADER`].
pub const PROBE_HEADER: &str = "x-sluice-probe";

/// Pause before replacing a long stream that failed, so a refusing target is not hammered.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// What to run.
#[derive(Clone, Debug)]
pub struct ProbeOpts {
    /// The endpoint both the long streams and the probes POST to.
    pub url: http::Uri,
    /// Wire protocol to the target.
    pub protocol: Protocol,
    /// Probes go through the long streams' client (one pool: on HTTP/2 the probes ride the
    /// streams' connection, like the incident's shared Go `Transport`) instead of their own.
    pub shared_client: bool,
    /// Long streams kept open (K).
    pub streams: usize,
    /// Body of a long stream (JSON with `"stream": true`).
    pub stream_body: Bytes,
    /// Headers of every long stream (e.g. `x-mock: tokens=100000, interval_ms=20`).
    pub stream_headers: Vec<(HeaderName, HeaderValue)>,
    /// Headers of the first long stream only, replacing same-named ones (e.g. an `x-mock`
    /// with `degrade=50000`, to slow down the one connection that carries it).
    pub first_stream_headers: Vec<(HeaderName, HeaderValue)>,
    /// Body of a probe (non-streaming).
    pub probe_body: Bytes,
    /// Headers of every probe.
    pub probe_headers: Vec<(HeaderName, HeaderValue)>,
    /// Pause between the end of one probe and the start of the next.
    pub probe_interval: Duration,
    /// Budget of one probe, from send to the end of its body.
    pub probe_timeout: Duration,
    /// How long to probe. No probe starts after it; one still in flight is cancelled and
    /// counted in `cancelled_at_end`, not in the latencies (as in the seed).
    pub duration: Duration,
    /// Longest wait for the K streams to deliver their first event before probing starts.
    pub warmup: Duration,
    /// The mock's `/__mock/stats` URL: without it, sharing is not reported.
    pub mock_stats: Option<http::Uri>,
    /// Live counters of the probes (for a progress line).
    pub progress: Arc<Progress>,
}

/// How one probe ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// A 2xx response read to its end.
    Ok,
    /// A failure (status, reset, connect).
    Error,
    /// Over `probe_timeout`.
    Timeout,
    /// Still running when the run ended; excluded from the latencies.
    CancelledAtEnd,
}

/// One probe.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeSample {
    /// Sequence number (also sent as `x-sluice-probe`).
    pub seq: u64,
    /// When it was sent, since probing began.
    pub sent_at_ms: f64,
    /// Send → end of body (or the timeout, or the cancel).
    pub latency_ms: f64,
    /// How it ended.
    pub outcome: ProbeOutcome,
    /// Why it failed ([`Failure::label`]), when it did.
    pub failure: Option<String>,
    /// Long streams that had delivered an event and not ended when it was sent.
    pub active_long_streams: usize,
    /// Its `x-mock-request-id`, from the response or the mock's records.
    pub mock_request_id: Option<u64>,
    /// The mock connection that carried it.
    pub connection_id: Option<u64>,
    /// Whether a long stream was open on that connection while the probe ran.
    pub shared_with_long_stream: Option<bool>,
    /// Whether that connection was throttled by `degrade`.
    pub on_degraded_connection: Option<bool>,
}

/// What happened.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProbeReport {
    /// Long streams asked for (K).
    pub long_streams: usize,
    /// Long streams started in all (replacements included).
    pub long_streams_started: usize,
    /// Long streams delivering events when probing began.
    pub long_streams_active_at_start: usize,
    /// Long streams that ended on their own (or failed) while the run went on, and were
    /// replaced. More than a few means the streams are not long: the experiment needs them
    /// open for the whole run.
    pub long_streams_ended: usize,
    /// Why long streams failed, by cause.
    pub long_stream_failures: std::collections::BTreeMap<String, u64>,
    /// Probes sent (including one cancelled at the end).
    pub requests: usize,
    /// Probes that succeeded.
    pub successes: usize,
    /// Probes that failed.
    pub errors: usize,
    /// Probes over their timeout.
    pub timeouts: usize,
    /// Probes cancelled because the run ended.
    pub cancelled_at_end: usize,
    /// Failed probes (timeouts included) by cause.
    pub failure_causes: std::collections::BTreeMap<String, u64>,
    /// The first message of each cause.
    pub error_samples: Vec<String>,
    /// Latency of every probe that ended (successes, errors, timeouts at their timeout).
    pub latency: Summary,
    /// Probes whose connection is known from the mock's stats.
    pub probes_located: usize,
    /// Of those, probes that shared their connection with a running long stream.
    pub shared_with_long_stream: usize,
    /// Of those, probes on a `degrade`d connection.
    pub on_degraded_connection: usize,
    /// Every probe.
    pub samples: Vec<ProbeSample>,
    /// Wall time, warm-up included.
    pub wall_ms: f64,
}

impl ProbeReport {
    /// Probes that failed in any way (timeouts included).
    pub fn failed(&self) -> usize {
        self.errors + self.timeouts
    }

    /// Probes that ended (not cancelled at the end).
    pub fn ended(&self) -> usize {
        self.requests - self.cancelled_at_end
    }

    /// Every probe that ended, on the probing clock, for the HTML report.
    pub fn timeline(&self) -> Vec<Sample> {
        self.samples
            .iter()
            .filter(|s| s.outcome != ProbeOutcome::CancelledAtEnd)
            .map(|s| Sample {
                start_ms: s.sent_at_ms,
                latency_ms: s.latency_ms,
                ok: s.outcome == ProbeOutcome::Ok,
            })
            .collect()
    }

    /// Percentage of located probes that shared a connection with a long stream; `None` when
    /// none was located (no stats).
    pub fn shared_pct(&self) -> Option<f64> {
        (self.probes_located > 0)
            .then(|| 100.0 * self.shared_with_long_stream as f64 / self.probes_located as f64)
    }
}

/// Shared state of the long streams.
#[derive(Default)]
struct Streams {
    /// Streams that delivered their first event and have not ended.
    active: AtomicUsize,
    /// Streams started.
    started: AtomicUsize,
    /// Streams that ended or failed before the run did.
    ended: AtomicUsize,
    /// Why streams failed.
    failures: Mutex<Causes>,
    /// Mock request ids of every long stream that got response headers.
    mock_ids: Mutex<Vec<u64>>,
}

fn mock_id(resp: &http::Response<sluice_upstream::ResponseBody>) -> Option<u64> {
    resp.headers()
        .get("x-mock-request-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

fn request(
    path: &str,
    body: &Bytes,
    headers: &[(HeaderName, HeaderValue)],
    tag: (&'static str, u64),
) -> Request<Bytes> {
    let mut req = Request::post(path)
        .body(body.clone())
        .expect("a path from a valid URI");
    let h = req.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (k, v) in headers {
        h.insert(k.clone(), v.clone());
    }
    h.insert(HeaderName::from_static(tag.0), HeaderValue::from(tag.1));
    req
}

/// Keeps one long stream running until the task is aborted: when it ends, another starts.
async fn long_stream_slot(
    slot: usize,
    target: Upstream,
    path: String,
    opts: Arc<ProbeOpts>,
    state: Arc<Streams>,
    end: Instant,
) {
    let mut first = slot == 0;
    loop {
        let n = state.started.fetch_add(1, Ordering::Relaxed) as u64;
        let mut headers = opts.stream_headers.clone();
        if std::mem::take(&mut first) {
            headers.extend(opts.first_stream_headers.iter().cloned());
        }
        let req = request(&path, &opts.stream_body, &headers, (LONG_STREAM_HEADER, n));
        let failure = match target.send(req, end).await {
            Ok(r) if r.status().is_success() => Ok(r),
            Ok(r) => Err((
                Failure::Status(r.status().as_u16()),
                format!("status {}", r.status()),
            )),
            Err(e) => Err((Failure::of(&e), e.to_string())),
        };
        let resp = match failure {
            Ok(r) => r,
            Err((f, message)) => {
                if Instant::now() < end {
                    state.ended.fetch_add(1, Ordering::Relaxed);
                    lock(&state.failures).record(f, || message);
                }
                sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        if let Some(id) = mock_id(&resp) {
            lock(&state.mock_ids).push(id);
        }
        let mut body = resp.into_body();
        // Active from its first data, like the seed ("counted once valid SSE data arrived").
        let mut active = None;
        loop {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if active.is_none() && frame.is_data() {
                        active = Some(ActiveGuard::new(&state.active));
                    }
                }
                Some(Err(e)) => {
                    lock(&state.failures).record(Failure::Body, || e.to_string());
                    break;
                }
                None => break,
            }
        }
        drop(active);
        state.ended.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts a stream as active while it lives, including when its task is aborted.
struct ActiveGuard<'a>(&'a AtomicUsize);

impl<'a> ActiveGuard<'a> {
    fn new(c: &'a AtomicUsize) -> Self {
        c.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(c)
    }
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sends one probe and reads its body: `Ok`, or why not.
async fn one_probe(
    target: &Upstream,
    req: Request<Bytes>,
    deadline: Instant,
    id: &mut Option<u64>,
) -> Result<(), (Failure, String)> {
    // The client's deadline is the probe's budget: `Deadline` is a timeout (see `of`).
    let resp = target
        .send(req, deadline)
        .await
        .map_err(|e| (Failure::of(&e), e.to_string()))?;
    *id = mock_id(&resp);
    let status = resp.status();
    resp.into_body()
        .collect()
        .await
        .map_err(|e| (Failure::Body, e.to_string()))?;
    if status.is_success() {
        Ok(())
    } else {
        Err((Failure::Status(status.as_u16()), format!("status {status}")))
    }
}

/// Runs the scenario.
///
/// # Errors
/// [`BenchError`] when the URL or options are unusable or the mock's stats cannot be read;
/// failed probes and streams are counted in the report instead.
pub async fn run(opts: ProbeOpts) -> Result<ProbeReport, BenchError> {
    if opts.duration.is_zero() {
        return Err(BenchError::Options("the duration must be above 0".into()));
    }
    let t0 = Instant::now();
    let path = crate::client::path_of(&opts.url);
    let streams_client = client_for(&opts.url, opts.protocol, opts.streams + 1)?;
    let probe_client = if opts.shared_client {
        streams_client.clone()
    } else {
        client_for(&opts.url, opts.protocol, 1)?
    };
    let opts = Arc::new(opts);
    let state = Arc::new(Streams::default());
    // Streams may run until probing ends: warm-up plus duration plus one probe's timeout.
    let streams_end = t0 + opts.warmup + opts.duration + opts.probe_timeout;
    let mut slots = JoinSet::new();
    for slot in 0..opts.streams {
        slots.spawn(long_stream_slot(
            slot,
            streams_client.clone(),
            path.clone(),
            opts.clone(),
            state.clone(),
            streams_end,
        ));
    }
    // The first stream carries the connection's fault: let it reach the target first.
    let warm_until = t0 + opts.warmup;
    while state.active.load(Ordering::Relaxed) < opts.streams && Instant::now() < warm_until {
        sleep(Duration::from_millis(10)).await;
    }
    let active_at_start = state.active.load(Ordering::Relaxed);
    let probing = Instant::now();
    let end = probing + opts.duration;
    let mut samples = Vec::new();
    let mut causes = Causes::default();
    let mut seq = 0u64;
    while Instant::now() < end {
        let req = request(
            &path,
            &opts.probe_body,
            &opts.probe_headers,
            (PROBE_HEADER, seq),
        );
        let sent = Instant::now();
        let active = state.active.load(Ordering::Relaxed);
        let budget = sent + opts.probe_timeout;
        let mut id = None;
        opts.progress.sent();
        let result = timeout_at(
            budget.min(end),
            one_probe(&probe_client, req, budget, &mut id),
        )
        .await;
        let (outcome, failure) = match result {
            Ok(Ok(())) => (ProbeOutcome::Ok, None),
            Ok(Err((Failure::Timeout, m))) => (ProbeOutcome::Timeout, Some((Failure::Timeout, m))),
            Ok(Err(f)) => (ProbeOutcome::Error, Some(f)),
            Err(_) if budget <= end => (
                ProbeOutcome::Timeout,
                Some((Failure::Timeout, "over --probe-timeout".to_string())),
            ),
            Err(_) => (ProbeOutcome::CancelledAtEnd, None),
        };
        let failure = failure.map(|(f, m)| {
            let label = f.label().into_owned();
            causes.record(f, || m);
            label
        });
        if outcome != ProbeOutcome::CancelledAtEnd {
            opts.progress.ended(outcome == ProbeOutcome::Ok);
        }
        samples.push(ProbeSample {
            seq,
            sent_at_ms: ms(sent - probing),
            latency_ms: ms(sent.elapsed()),
            outcome,
            failure,
            active_long_streams: active,
            mock_request_id: id,
            connection_id: None,
            shared_with_long_stream: None,
            on_degraded_connection: None,
        });
        seq += 1;
        sleep_until((Instant::now() + opts.probe_interval).min(end)).await;
    }
    // Streams that end from here on were ended by us.
    let long_streams_ended = state.ended.load(Ordering::Relaxed);
    let long_stream_failures = lock(&state.failures).counts.clone();
    // Dropping the tasks drops their response bodies: each long stream is cancelled upstream.
    slots.shutdown().await;
    if let Some(url) = &opts.mock_stats {
        let stats = fetch_json(url).await?;
        let long_ids = lock(&state.mock_ids).clone();
        locate(&stats, &long_ids, &mut samples);
    }
    let count = |o| samples.iter().filter(|s| s.outcome == o).count();
    let located: Vec<_> = samples
        .iter()
        .filter(|s| s.shared_with_long_stream.is_some())
        .collect();
    Ok(ProbeReport {
        long_streams: opts.streams,
        long_streams_started: state.started.load(Ordering::Relaxed),
        long_streams_active_at_start: active_at_start,
        long_streams_ended,
        long_stream_failures,
        requests: samples.len(),
        successes: count(ProbeOutcome::Ok),
        errors: count(ProbeOutcome::Error),
        timeouts: count(ProbeOutcome::Timeout),
        cancelled_at_end: count(ProbeOutcome::CancelledAtEnd),
        failure_causes: causes.counts,
        error_samples: causes.samples,
        // The samples' own values: the report draws them, and its maximum must be this one.
        latency: Summary::of_ms(
            samples
                .iter()
                .filter(|s| s.outcome != ProbeOutcome::CancelledAtEnd)
                .map(|s| s.latency_ms),
        ),
        probes_located: located.len(),
        shared_with_long_stream: located
            .iter()
            .filter(|s| s.shared_with_long_stream == Some(true))
            .count(),
        on_degraded_connection: located
            .iter()
            .filter(|s| s.on_degraded_connection == Some(true))
            .count(),
        wall_ms: ms(t0.elapsed()),
        samples,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One request as the mock recorded it.
struct Rec {
    conn: u64,
    start: f64,
    /// Finished or cancelled; `None` while in progress.
    end: Option<f64>,
}

/// Fills each probe's connection, and whether a long stream ran on that connection while the
/// probe did, from the mock's `/__mock/stats` JSON. Long streams are the requests in
/// `long_ids` and any request tagged [`LONG_STREAM_HEADER`] (one cancelled before its
/// response headers came back has no id on our side); probes without an id are found by their
/// [`PROBE_HEADER`].
pub fn locate(stats: &serde_json::Value, long_ids: &[u64], probes: &mut [ProbeSample]) {
    let empty = Vec::new();
    let requests = stats["requests"].as_array().unwrap_or(&empty);
    let mut recs = HashMap::new();
    let mut long: HashSet<u64> = long_ids.iter().copied().collect();
    let mut probe_ids = HashMap::new();
    for r in requests {
        let (Some(id), Some(conn)) = (r["id"].as_u64(), r["connection_id"].as_u64()) else {
            continue;
        };
        let end = r["cancelled_ms"]
            .as_f64()
            .or_else(|| r["finished_ms"].as_f64());
        let start = r["started_ms"].as_f64().unwrap_or(0.0);
        recs.insert(id, Rec { conn, start, end });
        if r["headers"].get(LONG_STREAM_HEADER).is_some() {
            long.insert(id);
        }
        if let Some(seq) = r["headers"][PROBE_HEADER]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
        {
            probe_ids.insert(seq, id);
        }
    }
    let degraded: HashSet<u64> = stats["connections"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter(|c| c["degrade_bytes_per_s"].as_u64().is_some_and(|r| r > 0))
        .filter_map(|c| c["id"].as_u64())
        .collect();
    let overlaps = |a: &Rec, b: &Rec| {
        a.start <= b.end.unwrap_or(f64::INFINITY) && b.start <= a.end.unwrap_or(f64::INFINITY)
    };
    for p in probes {
        let id = p.mock_request_id.or_else(|| probe_ids.get(&p.seq).copied());
        let Some(rec) = id.and_then(|id| recs.get(&id)) else {
            continue;
        };
        p.mock_request_id = id;
        p.connection_id = Some(rec.conn);
        p.on_degraded_connection = Some(degraded.contains(&rec.conn));
        p.shared_with_long_stream = Some(long.iter().any(|l| {
            recs.get(l)
                .is_some_and(|s| s.conn == rec.conn && overlaps(s, rec))
        }));
    }
}

impl ProbeReport {
    /// The probes as a report section titled `title`.
    pub fn section(&self, title: &str) -> Section {
        let shared = match self.shared_pct() {
            Some(p) => format!(
                "{}/{} ({p:.0}%)",
                self.shared_with_long_stream, self.probes_located
            ),
            None => "unknown (no mock stats)".into(),
        };
        Section {
            title: title.to_string(),
            latency: "probe send to the end of its body".into(),
            samples: self.timeline(),
            marks: Vec::new(),
            facts: vec![
                (
                    "long streams".into(),
                    format!(
                        "{} kept open, {} active when probing began, {} ended during the run",
                        self.long_streams,
                        self.long_streams_active_at_start,
                        self.long_streams_ended
                    ),
                ),
                ("probes".into(), self.requests.to_string()),
                ("ok".into(), self.successes.to_string()),
                (
                    "failed".into(),
                    crate::rps::failed_line(self.failed(), &self.failure_causes),
                ),
                (
                    "cancelled at the end".into(),
                    self.cancelled_at_end.to_string(),
                ),
                (
                    "latency mean / p50 / p95 / max".into(),
                    format!(
                        "{} / {} / {} / {} ms",
                        num(self.latency.mean_ms),
                        num(self.latency.p50_ms),
                        num(self.latency.p95_ms),
                        num(self.latency.max_ms)
                    ),
                ),
                ("shared with a long stream".into(), shared),
            ],
        }
    }

    /// The run as an HTML report page (see [`crate::report`]).
    pub fn page(&self, title: &str) -> Page {
        Page {
            title: title.to_string(),
            facts: Vec::new(),
            sections: vec![self.section("probes")],
            json: serde_json::to_value(self).ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn probe(seq: u64, id: Option<u64>) -> ProbeSample {
        ProbeSample {
            seq,
            sent_at_ms: 0.0,
            latency_ms: 1.0,
            outcome: ProbeOutcome::Ok,
            failure: None,
            active_long_streams: 0,
            mock_request_id: id,
            connection_id: None,
            shared_with_long_stream: None,
            on_degraded_connection: None,
        }
    }

    #[test]
    fn a_probe_shares_only_with_a_long_stream_on_its_connection_at_the_same_time() {
        let stats = json!({
            "connections": [
                {"id": 1, "degrade_bytes_per_s": 50000},
                {"id": 2, "degrade_bytes_per_s": null},
            ],
            "requests": [
                // long stream on conn 1, still running
                {"id": 10, "connection_id": 1, "started_ms": 0.0, "headers": {}},
                // long stream on conn 2 that ended at 100 ms, tagged but never got an id back
                {"id": 11, "connection_id": 2, "started_ms": 0.0, "finished_ms": 100.0,
                 "headers": {"x-sluice-long-stream": "1"}},
                // probe 0 on conn 1: shared, degraded
                {"id": 12, "connection_id": 1, "started_ms": 200.0, "finished_ms": 300.0,
                 "headers": {"x-sluice-probe": "0"}},
                // probe 1 on conn 2 after the stream there ended: not shared
                {"id": 13, "connection_id": 2, "started_ms": 200.0, "finished_ms": 210.0,
                 "headers": {"x-sluice-probe": "1"}},
                // probe 2 on conn 2 while its stream ran, found by its tag alone
                {"id": 14, "connection_id": 2, "started_ms": 50.0,
                 "headers": {"x-sluice-probe": "2"}},
            ],
        });
        let mut probes = vec![
            probe(0, Some(12)),
            probe(1, Some(13)),
            probe(2, None),
            probe(3, None),
        ];
        locate(&stats, &[10], &mut probes);
        assert_eq!(probes[0].connection_id, Some(1));
        assert_eq!(probes[0].shared_with_long_stream, Some(true));
        assert_eq!(probes[0].on_degraded_connection, Some(true));
        assert_eq!(probes[1].shared_with_long_stream, Some(false));
        assert_eq!(probes[1].on_degraded_connection, Some(false));
        assert_eq!(probes[2].mock_request_id, Some(14));
        assert_eq!(probes[2].shared_with_long_stream, Some(true));
        // Never reached the mock: unknown, not "not shared".
        assert_eq!(probes[3].shared_with_long_stream, None);
    }

    #[test]
    fn shared_pct_counts_located_probes_only() {
        let r = ProbeReport {
            probes_located: 4,
            shared_with_long_stream: 1,
            ..ProbeReport::default()
        };
        assert_eq!(r.shared_pct(), Some(25.0));
        assert_eq!(ProbeReport::default().shared_pct(), None);
    }
}
