//! The `stream` scenario: N concurrent streaming requests, with time to first byte and first
//! event, inter-event gaps, completions, and optionally early closes with the
//! disconnect → upstream-cancel latency read from the mock's stats.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request};
use http_body_util::BodyExt;
use serde::Serialize;
use sluice_sse::{Decoder, Item};
use sluice_upstream::{Protocol, Upstream};
use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};

use crate::failure::{Causes, ConnectBackoff, Failure};
use crate::report::{num, Page, Section};
use crate::summary::Summary;
use crate::timeline::{per_second, Sample, Second};
use crate::BenchError;

/// What to run.
#[derive(Clone, Debug)]
pub struct StreamOpts {
    /// The full URL of the streaming endpoint.
    pub url: http::Uri,
    /// Wire protocol to the target.
    pub protocol: Protocol,
    /// Streams open at once.
    pub concurrency: usize,
    /// Streams in all.
    pub requests: usize,
    /// The first `concurrency` streams start spread over this.
    pub ramp: Duration,
    /// Request body (JSON with `"stream": true`).
    pub body: Bytes,
    /// Extra request headers.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Close each stream after this many events (measures cancellation).
    pub close_after_events: Option<u64>,
    /// The share of streams (0.0–1.0) that `close_after_events` applies to, spread evenly over
    /// the run; the others are read to their end. Default 1.0.
    pub close_share: f64,
    /// Per-request budget: a stream not finished by then counts as a timeout.
    pub timeout: Duration,
    /// The mock's `/__mock/stats` URL, to read when it saw each early close.
    pub mock_stats: Option<http::Uri>,
    /// Stop starting new streams after this long.
    pub max_duration: Duration,
}

/// What happened.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StreamReport {
    /// Streams started.
    pub started: usize,
    /// Streams read to their end.
    pub completed: usize,
    /// Streams closed on purpose after `close_after_events`.
    pub closed_early: usize,
    /// Streams that failed (connect, status, reset).
    pub errors: usize,
    /// Streams over their budget.
    pub timeouts: usize,
    /// Every failure (timeouts included) by cause: `connect_refused`, `status_503`, ...
    pub failure_causes: std::collections::BTreeMap<String, u64>,
    /// The first message of each cause.
    pub error_samples: Vec<String>,
    /// Request sent → response headers.
    pub ttfb: Summary,
    /// Request sent → first complete SSE event.
    pub first_event: Summary,
    /// Gaps between consecutive events of a stream.
    pub event_gaps: Summary,
    /// Events received in all.
    pub events: u64,
    /// Events per second over the run.
    pub events_per_s: f64,
    /// Client close → the mock recording the cancel (needs `mock_stats`).
    pub cancel_latency: Option<Summary>,
    /// Wall time of the run.
    pub wall_ms: f64,
    /// Per second of the run: streams whose first event arrived (or that failed) in it.
    pub per_second: Vec<Second>,
    /// Every stream: its start, its time to first event (or to its failure) and whether it
    /// succeeded; for the HTML report, not in the JSON.
    #[serde(skip)]
    pub samples: Vec<Sample>,
}

impl StreamReport {
    /// Streams that failed in any way (timeouts included).
    pub fn failed(&self) -> usize {
        self.errors + self.timeouts
    }
}

#[derive(Default)]
struct Samples {
    ttfb: Vec<Duration>,
    first_event: Vec<Duration>,
    gaps: Vec<Duration>,
    events: u64,
    completed: usize,
    closed: usize,
    causes: Causes,
    runs: Vec<Sample>,
    /// (mock request id, unix ms of our close)
    closes: Vec<(u64, f64)>,
}

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

enum Outcome {
    Completed,
    Closed(Option<u64>, f64),
    Failed(Failure, String),
}

/// Runs the scenario.
///
/// # Errors
/// [`BenchError`] when the URL or options are unusable; failures of individual streams are
/// counted in the report instead.
pub async fn run(opts: StreamOpts) -> Result<StreamReport, BenchError> {
    let target = client_for(&opts.url, opts.protocol, opts.concurrency)?;
    let path = opts
        .url
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let next = Arc::new(AtomicUsize::new(0));
    let samples = Arc::new(Mutex::new(Samples::default()));
    let backoff = Arc::new(ConnectBackoff::default());
    let t0 = Instant::now();
    let stop_at = t0 + opts.max_duration;
    let mut workers = JoinSet::new();
    let n = opts.concurrency.max(1);
    for w in 0..n {
        let (target, path, next, samples, opts, backoff) = (
            target.clone(),
            path.clone(),
            next.clone(),
            samples.clone(),
            opts.clone(),
            backoff.clone(),
        );
        workers.spawn(async move {
            sleep(opts.ramp.mul_f64(w as f64 / n as f64)).await;
            loop {
                let _ = tokio::time::timeout_at(stop_at, backoff.wait()).await;
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= opts.requests || Instant::now() >= stop_at {
                    backoff.abandon();
                    break;
                }
                let mut local = Samples::default();
                let close_after = opts
                    .close_after_events
                    .filter(|_| closes(i, opts.close_share));
                let start = Instant::now();
                let outcome = tokio::time::timeout(
                    opts.timeout,
                    one_stream(&target, &path, &opts, close_after, &mut local),
                )
                .await
                .unwrap_or_else(|_| {
                    Outcome::Failed(Failure::Timeout, "over the per-stream timeout".into())
                });
                backoff.record(match &outcome {
                    Outcome::Failed(f, _) => Some(*f),
                    _ => None,
                });
                let ok = !matches!(outcome, Outcome::Failed(..));
                let latency = match (ok, local.first_event.first()) {
                    (true, Some(first)) => *first,
                    _ => start.elapsed(),
                };
                let mut s = samples.lock().unwrap_or_else(|e| e.into_inner());
                s.runs.push(Sample {
                    start_ms: ms(start - t0),
                    latency_ms: ms(latency),
                    ok,
                });
                s.ttfb.append(&mut local.ttfb);
                s.first_event.append(&mut local.first_event);
                s.gaps.append(&mut local.gaps);
                s.events += local.events;
                match outcome {
                    Outcome::Completed => s.completed += 1,
                    Outcome::Closed(id, at) => {
                        s.closed += 1;
                        if let Some(id) = id {
                            s.closes.push((id, at));
                        }
                    }
                    Outcome::Failed(f, e) => s.causes.record(f, || e),
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    let wall = t0.elapsed();
    let s = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    let cancel_latency = match (&opts.mock_stats, s.closes.is_empty()) {
        (Some(url), false) => Some(cancel_latencies(url, &s.closes).await?),
        _ => None,
    };
    let timeouts = s.causes.count(Failure::Timeout) as usize;
    let failed = s.causes.total() as usize;
    Ok(StreamReport {
        started: s.completed + s.closed + failed,
        completed: s.completed,
        closed_early: s.closed,
        errors: failed - timeouts,
        timeouts,
        failure_causes: s.causes.counts,
        error_samples: s.causes.samples,
        events: s.events,
        events_per_s: s.events as f64 / wall.as_secs_f64().max(1e-9),
        ttfb: Summary::of(s.ttfb),
        first_event: Summary::of(s.first_event),
        event_gaps: Summary::of(s.gaps),
        cancel_latency,
        wall_ms: ms(wall),
        per_second: per_second(&s.runs),
        samples: s.runs,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A client for the URL's origin. HTTP/1.1 gets one connection per concurrent stream;
/// HTTP/2 multiplexes them with windows sized so every stream can run at full speed.
pub(crate) fn client_for(
    url: &http::Uri,
    protocol: Protocol,
    concurrency: usize,
) -> Result<Upstream, BenchError> {
    // One lane (the default, short) carries everything: HTTP/1.1 gets a connection per
    // concurrent stream, HTTP/2 spreads streams over connections of 100 streams each.
    let concurrency = concurrency.max(1);
    let mut lane = crate::client::lane(concurrency, 100, concurrency, Duration::from_secs(60));
    lane.min_connections = 1;
    crate::client::build(url, protocol, lane)
}

/// Whether stream `i` is one of the `share` that close early: evenly spread, deterministic
/// (stream i closes when the running count of closes steps up at i).
fn closes(i: usize, share: f64) -> bool {
    let share = share.clamp(0.0, 1.0);
    ((i + 1) as f64 * share).floor() > (i as f64 * share).floor()
}

async fn one_stream(
    target: &Upstream,
    path: &str,
    opts: &StreamOpts,
    close_after: Option<u64>,
    s: &mut Samples,
) -> Outcome {
    let mut req = Request::post(path)
        .body(opts.body.clone())
        .expect("valid request");
    req.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (k, v) in &opts.headers {
        req.headers_mut().insert(k.clone(), v.clone());
    }
    let start = Instant::now();
    let resp = match target.send(req, start + opts.timeout).await {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(Failure::of(&e), e.to_string()),
    };
    s.ttfb.push(start.elapsed());
    if !resp.status().is_success() {
        let status = resp.status();
        return Outcome::Failed(Failure::Status(status.as_u16()), format!("status {status}"));
    }
    // LiteLLM returns upstream headers with an `llm_provider-` prefix.
    let mock_id = resp
        .headers()
        .get("x-mock-request-id")
        .or_else(|| resp.headers().get("llm_provider-x-mock-request-id"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let mut body = resp.into_body();
    let mut decoder = Decoder::new();
    let mut last: Option<Instant> = None;
    let mut n = 0u64;
    loop {
        let frame = match body.frame().await {
            Some(Ok(f)) => f,
            Some(Err(e)) => return Outcome::Failed(Failure::Body, e.to_string()),
            None => {
                decoder.finish();
                drain_events(&mut decoder, start, &mut last, &mut n, s);
                return Outcome::Completed;
            }
        };
        if let Ok(d) = frame.into_data() {
            decoder.feed(d);
        }
        drain_events(&mut decoder, start, &mut last, &mut n, s);
        if close_after.is_some_and(|k| n >= k) {
            let at = unix_ms();
            drop(body);
            return Outcome::Closed(mock_id, at);
        }
    }
}

fn drain_events(
    decoder: &mut Decoder,
    start: Instant,
    last: &mut Option<Instant>,
    n: &mut u64,
    s: &mut Samples,
) {
    while let Some(Ok(item)) = decoder.next_item() {
        if let Item::Event(_) = item {
            let now = Instant::now();
            match last {
                None => s.first_event.push(now - start),
                Some(prev) => s.gaps.push(now - *prev),
            }
            *last = Some(now);
            *n += 1;
            s.events += 1;
        }
    }
}

/// Reads the mock's stats and pairs its cancel times with our close times.
async fn cancel_latencies(url: &http::Uri, closes: &[(u64, f64)]) -> Result<Summary, BenchError> {
    let stats = fetch_json(url).await?;
    let started = stats["started_unix_ms"].as_f64().unwrap_or(0.0);
    let cancelled: std::collections::HashMap<u64, f64> = stats["requests"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| Some((r["id"].as_u64()?, r["cancelled_ms"].as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    let samples = closes
        .iter()
        .filter_map(|(id, at)| {
            let seen = started + cancelled.get(id)?;
            Some(Duration::from_secs_f64(((seen - at) / 1000.0).max(0.0)))
        })
        .collect();
    Ok(Summary::of(samples))
}

/// GETs a JSON document (the mock's stats).
pub(crate) async fn fetch_json(url: &http::Uri) -> Result<serde_json::Value, BenchError> {
    let client = client_for(url, Protocol::Http1, 1)?;
    let path = url.path_and_query().map_or("/", |p| p.as_str());
    let req = Request::get(path)
        .body(Bytes::new())
        .expect("valid request");
    let resp = client
        .send(req, Instant::now() + Duration::from_secs(30))
        .await
        .map_err(|e| BenchError::Stats(e.to_string()))?;
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| BenchError::Stats(e.to_string()))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| BenchError::Stats(e.to_string()))
}

impl StreamReport {
    /// The run as an HTML report page (see [`crate::report`]).
    pub fn page(&self, title: &str) -> Page {
        let mut facts = vec![
            ("streams started".into(), self.started.to_string()),
            ("completed".into(), self.completed.to_string()),
            ("closed early".into(), self.closed_early.to_string()),
            (
                "failed".into(),
                crate::rps::failed_line(self.failed(), &self.failure_causes),
            ),
            (
                "first event p50 / p99 / max".into(),
                format!(
                    "{} / {} / {} ms",
                    num(self.first_event.p50_ms),
                    num(self.first_event.p99_ms),
                    num(self.first_event.max_ms)
                ),
            ),
            (
                "event gap p50 / p99 / max".into(),
                format!(
                    "{} / {} / {} ms",
                    num(self.event_gaps.p50_ms),
                    num(self.event_gaps.p99_ms),
                    num(self.event_gaps.max_ms)
                ),
            ),
            (
                "events".into(),
                format!("{} ({}/s)", self.events, num(self.events_per_s)),
            ),
        ];
        if let Some(c) = &self.cancel_latency {
            facts.push((
                "cancel latency p50 / p99".into(),
                format!("{} / {} ms", num(c.p50_ms), num(c.p99_ms)),
            ));
        }
        Page {
            title: title.to_string(),
            facts,
            sections: vec![Section {
                title: "streams".into(),
                latency: "send to the first event".into(),
                samples: self.samples.clone(),
                ..Section::default()
            }],
            json: serde_json::to_value(self).ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::closes;

    #[test]
    fn close_share_is_spread_evenly() {
        let picked: Vec<usize> = (0..10).filter(|&i| closes(i, 0.3)).collect();
        assert_eq!(picked.len(), 3);
        assert_eq!((0..100).filter(|&i| closes(i, 0.25)).count(), 25);
        assert!((0..10).all(|i| closes(i, 1.0)));
        assert!((0..10).all(|i| !closes(i, 0.0)));
        // No two picks in a row at 30 %.
        assert!(picked.windows(2).all(|w| w[1] - w[0] >= 3), "{picked:?}");
    }
}
