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

use crate::summary::Summary;
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
    /// A sample of error messages (at most 5).
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
}

#[derive(Default)]
struct Samples {
    ttfb: Vec<Duration>,
    first_event: Vec<Duration>,
    gaps: Vec<Duration>,
    events: u64,
    completed: usize,
    closed: usize,
    errors: usize,
    timeouts: usize,
    error_samples: Vec<String>,
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
    Error(String),
    Timeout,
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
    let t0 = Instant::now();
    let stop_at = t0 + opts.max_duration;
    let mut workers = JoinSet::new();
    let n = opts.concurrency.max(1);
    for w in 0..n {
        let (target, path, next, samples, opts) = (
            target.clone(),
            path.clone(),
            next.clone(),
            samples.clone(),
            opts.clone(),
        );
        workers.spawn(async move {
            sleep(opts.ramp.mul_f64(w as f64 / n as f64)).await;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= opts.requests || Instant::now() >= stop_at {
                    break;
                }
                let mut local = Samples::default();
                let close_after = opts
                    .close_after_events
                    .filter(|_| closes(i, opts.close_share));
                let outcome = tokio::time::timeout(
                    opts.timeout,
                    one_stream(&target, &path, &opts, close_after, &mut local),
                )
                .await
                .unwrap_or(Outcome::Timeout);
                let mut s = samples.lock().unwrap_or_else(|e| e.into_inner());
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
                    Outcome::Error(e) => {
                        s.errors += 1;
                        if s.error_samples.len() < 5 {
                            s.error_samples.push(e);
                        }
                    }
                    Outcome::Timeout => s.timeouts += 1,
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
    Ok(StreamReport {
        started: s.completed + s.closed + s.errors + s.timeouts,
        completed: s.completed,
        closed_early: s.closed,
        errors: s.errors,
        timeouts: s.timeouts,
        error_samples: s.error_samples,
        events: s.events,
        events_per_s: s.events as f64 / wall.as_secs_f64().max(1e-9),
        ttfb: Summary::of(s.ttfb),
        first_event: Summary::of(s.first_event),
        event_gaps: Summary::of(s.gaps),
        cancel_latency,
        wall_ms: wall.as_secs_f64() * 1000.0,
    })
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
        Err(e) => return Outcome::Error(e.to_string()),
    };
    s.ttfb.push(start.elapsed());
    if !resp.status().is_success() {
        return Outcome::Error(format!("status {}", resp.status()));
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
            Some(Err(e)) => return Outcome::Error(e.to_string()),
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
