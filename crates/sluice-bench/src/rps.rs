//! The `rps` scenario: many short (non-streaming) requests, either a fixed number in flight
//! (closed loop) or a fixed arrival rate (open model), with a per-request timeout.
//!
//! The open model schedules request `i` at `t0 + i / rate` and measures its latency from that
//! intended start, not from when it was actually sent. A closed loop (or an open loop that
//! measures from the send) stops sending while the server stalls and so never records the
//! requests that would have waited: "coordinated omission". Here a stall shows up as the
//! latency of every request that was due during it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request};
use http_body_util::BodyExt;
use serde::Serialize;
use sluice_upstream::{Protocol, Upstream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};

use crate::failure::{Causes, ConnectBackoff, Failure};
use crate::progress::Progress;
use crate::report::{num, Page, Section};
use crate::summary::Summary;
use crate::timeline::{per_second, Sample, Second};
use crate::{client, BenchError};

/// Most samples kept; beyond it requests are still counted but not sampled, so a long run at
/// a high rate holds a bounded amount of memory (2 M samples = 48 MB).
pub const MAX_SAMPLES: usize = 2_000_000;

/// How requests are issued.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// `concurrency` workers, each sending its next request when the previous one ended.
    Closed {
        /// Requests in flight.
        concurrency: usize,
    },
    /// A request every `1 / rate_per_s`, whatever the server does; at most `max_in_flight`
    /// at once (a request due while that many are in flight is sent late, and its latency,
    /// measured from when it was due, shows the wait).
    Open {
        /// Arrivals per second (> 0).
        rate_per_s: f64,
        /// Bound on requests in flight.
        max_in_flight: usize,
    },
}

/// What to run.
#[derive(Clone, Debug)]
pub struct RpsOpts {
    /// The full URL of the endpoint (POST).
    pub url: http::Uri,
    /// Wire protocol to the target.
    pub protocol: Protocol,
    /// Connections to the target (HTTP/2: opened up front and shared by all requests;
    /// HTTP/1.1: the most open at once, one request each).
    pub connections: usize,
    /// Closed loop or open model.
    pub load: Load,
    /// Stop after this many requests (at least one of `requests` and `duration` is required).
    pub requests: Option<u64>,
    /// Stop starting requests after this long.
    pub duration: Option<Duration>,
    /// Request body.
    pub body: Bytes,
    /// Extra request headers.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Per-request budget, from send to the end of the response body.
    pub timeout: Duration,
    /// Live counters (for a progress line).
    pub progress: Arc<Progress>,
}

/// What happened.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RpsReport {
    /// `closed` or `open`.
    pub mode: String,
    /// Requests in flight (closed loop).
    pub concurrency: Option<usize>,
    /// Arrivals per second asked for (open model).
    pub target_rate_per_s: Option<f64>,
    /// Requests sent.
    pub sent: u64,
    /// 2xx responses read to their end within the timeout.
    pub successes: u64,
    /// Requests over their timeout.
    pub timeouts: u64,
    /// Failed requests other than timeouts (connect, status, reset).
    pub errors: u64,
    /// Every failure (timeouts included) by cause: `connect_refused`, `status_503`, ...
    pub failure_causes: std::collections::BTreeMap<String, u64>,
    /// The first message of each cause.
    pub error_samples: Vec<String>,
    /// Latency of the successes: from the send (closed loop) or the intended start (open
    /// model) to the end of the response body.
    pub latency: Summary,
    /// Successes per second over the run.
    pub throughput_per_s: f64,
    /// Wall time of the run.
    pub wall_ms: f64,
    /// Per second of the run: requests that ended, and the latency of their successes.
    pub per_second: Vec<Second>,
    /// Every request (up to [`MAX_SAMPLES`]), for the HTML report; not in the JSON.
    #[serde(skip)]
    pub samples: Vec<Sample>,
}

impl RpsReport {
    /// Failures of every kind (timeouts included).
    pub fn failed(&self) -> u64 {
        self.timeouts + self.errors
    }
}

/// How one request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx response, read to its end.
    Ok,
    /// Anything else: its cause, and what happened.
    Failed(Failure, String),
}

impl Outcome {
    /// Over the per-request timeout.
    pub fn timeout() -> Outcome {
        Outcome::Failed(Failure::Timeout, "over the per-request timeout".into())
    }

    fn failure(&self) -> Option<Failure> {
        match self {
            Outcome::Ok => None,
            Outcome::Failed(f, _) => Some(*f),
        }
    }
}

/// When request `i` of an open-model run is due: `i / rate_per_s` after `t0`.
pub fn intended_start(t0: Instant, i: u64, rate_per_s: f64) -> Instant {
    t0 + Duration::from_secs_f64(i as f64 / rate_per_s)
}

/// Samples and counts, shared by the workers.
#[derive(Debug)]
pub(crate) struct Tally {
    /// The run's clock starts here.
    t0: Instant,
    samples: Vec<Sample>,
    successes: u64,
    causes: Causes,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            t0: Instant::now(),
            samples: Vec::new(),
            successes: 0,
            causes: Causes::default(),
        }
    }
}

impl Tally {
    /// A request that started (or was due) at `start` ended after `latency`.
    fn record(&mut self, outcome: Outcome, start: Instant, latency: Duration) {
        let ok = outcome == Outcome::Ok;
        match outcome {
            Outcome::Ok => self.successes += 1,
            Outcome::Failed(f, message) => self.causes.record(f, || message),
        }
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(Sample {
                start_ms: ms(start.saturating_duration_since(self.t0)),
                latency_ms: ms(latency),
                ok,
            });
        }
    }

    fn ended(&self) -> u64 {
        self.successes + self.causes.total()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// When to stop starting requests.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    pub(crate) requests: Option<u64>,
    pub(crate) until: Option<Instant>,
}

impl Bound {
    fn allows(&self, i: u64, at: Instant) -> bool {
        self.requests.is_none_or(|n| i < n) && self.until.is_none_or(|u| at < u)
    }
}

type Shared = Arc<Mutex<Tally>>;

fn lock(t: &Shared) -> std::sync::MutexGuard<'_, Tally> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `call` on the open model: request `i` is due at [`intended_start`]; its latency is
/// measured from then; `timeout` bounds each call from its actual send. After a failed
/// connect, sends wait for `backoff` (the wait counts in their latency: the target was down).
/// Returns the number sent.
#[allow(clippy::too_many_arguments)] // internal; every argument is one knob of the loop
pub(crate) async fn open_loop<F, Fut>(
    rate_per_s: f64,
    max_in_flight: usize,
    bound: Bound,
    timeout: Duration,
    call: F,
    tally: Shared,
    progress: Arc<Progress>,
    backoff: Arc<ConnectBackoff>,
) -> u64
where
    F: Fn() -> Fut,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let t0 = lock(&tally).t0;
    let permits = Arc::new(Semaphore::new(max_in_flight.max(1)));
    let mut tasks = JoinSet::new();
    let mut i = 0u64;
    loop {
        let due = intended_start(t0, i, rate_per_s);
        if !bound.allows(i, due) {
            break;
        }
        sleep_until(due).await;
        // Waiting for a permit delays the send, not the clock the latency is measured on.
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let (fut, tally, progress, backoff) =
            (call(), tally.clone(), progress.clone(), backoff.clone());
        progress.sent();
        tasks.spawn(async move {
            // A request that the pause kept from being sent within its timeout failed with
            // the cause of the pause.
            let outcome = match backoff.wait_by(due + timeout).await {
                Ok(()) => tokio::time::timeout(timeout, fut)
                    .await
                    .unwrap_or_else(|_| Outcome::timeout()),
                Err(f) => Outcome::Failed(
                    f,
                    "not sent: the target was failing to connect (backing off)".into(),
                ),
            };
            let latency = due.elapsed();
            progress.ended(outcome == Outcome::Ok);
            backoff.record(outcome.failure());
            lock(&tally).record(outcome, due, latency);
            drop(permit);
        });
        i += 1;
        // Reap finished tasks as we go so the set stays as small as what is in flight.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    i
}

/// Runs `call` in a closed loop: `concurrency` workers, each sending when its previous
/// request ended (and, after a failed connect, `backoff` allows); latency from the send.
/// Returns the number sent.
pub(crate) async fn closed_loop<F, Fut>(
    concurrency: usize,
    bound: Bound,
    timeout: Duration,
    call: F,
    tally: Shared,
    progress: Arc<Progress>,
    backoff: Arc<ConnectBackoff>,
) -> u64
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let next = Arc::new(AtomicU64::new(0));
    let call = Arc::new(call);
    let mut workers = JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (next, call, tally, progress, backoff) = (
            next.clone(),
            call.clone(),
            tally.clone(),
            progress.clone(),
            backoff.clone(),
        );
        workers.spawn(async move {
            loop {
                // A pause after failed connects is not part of any request; it ends with
                // the run.
                match bound.until {
                    Some(u) => {
                        let _ = tokio::time::timeout_at(u, backoff.wait()).await;
                    }
                    None => backoff.wait().await,
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let start = Instant::now();
                if !bound.allows(i, start) {
                    backoff.abandon();
                    break;
                }
                progress.sent();
                let outcome = tokio::time::timeout(timeout, call())
                    .await
                    .unwrap_or_else(|_| Outcome::timeout());
                progress.ended(outcome == Outcome::Ok);
                backoff.record(outcome.failure());
                lock(&tally).record(outcome, start, start.elapsed());
            }
        });
    }
    while workers.join_next().await.is_some() {}
    // Every request sent has ended and been recorded (the counter overshoots once per
    // worker when it stops, so it is not the count).
    lock(&tally).ended()
}

/// Runs the scenario.
///
/// # Errors
/// [`BenchError`] when the URL or options are unusable (no bound, a rate ≤ 0); failures of
/// individual requests are counted in the report instead.
pub async fn run(opts: RpsOpts) -> Result<RpsReport, BenchError> {
    if opts.requests.is_none() && opts.duration.is_none() {
        return Err(BenchError::Options(
            "give a request count, a duration, or both".into(),
        ));
    }
    let in_flight = match opts.load {
        Load::Closed { concurrency } => concurrency.max(1),
        Load::Open {
            rate_per_s,
            max_in_flight,
        } => {
            if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
                return Err(BenchError::Options(format!(
                    "the rate must be above 0 per second, not {rate_per_s}"
                )));
            }
            max_in_flight.max(1)
        }
    };
    let streams = u32::try_from(in_flight.div_ceil(opts.connections.max(1)))
        .unwrap_or(u32::MAX)
        .clamp(1, 1000);
    let lane = client::lane(opts.connections, streams, in_flight, opts.timeout);
    let target = client::build(&opts.url, opts.protocol, lane)?;
    let request = Arc::new(RequestTemplate {
        target,
        path: client::path_of(&opts.url),
        body: opts.body.clone(),
        headers: opts.headers.clone(),
        timeout: opts.timeout,
    });
    let call = move || {
        let r = request.clone();
        async move { r.send().await }
    };
    let tally = Shared::default();
    let t0 = lock(&tally).t0;
    let backoff = Arc::new(ConnectBackoff::default());
    let bound = Bound {
        requests: opts.requests,
        until: opts.duration.map(|d| t0 + d),
    };
    let progress = opts.progress.clone();
    let sent = match opts.load {
        Load::Closed { concurrency } => {
            closed_loop(
                concurrency,
                bound,
                opts.timeout,
                call,
                tally.clone(),
                progress,
                backoff,
            )
            .await
        }
        Load::Open {
            rate_per_s,
            max_in_flight,
        } => {
            open_loop(
                rate_per_s,
                max_in_flight,
                bound,
                opts.timeout,
                call,
                tally.clone(),
                progress,
                backoff,
            )
            .await
        }
    };
    let wall = t0.elapsed();
    let t = std::mem::take(&mut *lock(&tally));
    let (mode, concurrency, target_rate_per_s) = match opts.load {
        Load::Closed { concurrency } => ("closed", Some(concurrency), None),
        Load::Open { rate_per_s, .. } => ("open", None, Some(rate_per_s)),
    };
    let timeouts = t.causes.count(Failure::Timeout);
    Ok(RpsReport {
        mode: mode.into(),
        concurrency,
        target_rate_per_s,
        sent,
        successes: t.successes,
        timeouts,
        errors: t.causes.total() - timeouts,
        failure_causes: t.causes.counts,
        error_samples: t.causes.samples,
        throughput_per_s: t.successes as f64 / wall.as_secs_f64().max(1e-9),
        latency: Summary::of_ms(t.samples.iter().filter(|s| s.ok).map(|s| s.latency_ms)),
        wall_ms: ms(wall),
        per_second: per_second(&t.samples),
        samples: t.samples,
    })
}

/// One request of the run, cloned per send.
struct RequestTemplate {
    target: Upstream,
    path: String,
    body: Bytes,
    headers: Vec<(HeaderName, HeaderValue)>,
    timeout: Duration,
}

impl RequestTemplate {
    async fn send(&self) -> Outcome {
        let mut req = Request::post(self.path.as_str())
            .body(self.body.clone())
            .expect("a path from a valid URI");
        req.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let resp = match self.target.send(req, Instant::now() + self.timeout).await {
            Ok(r) => r,
            // The client's own deadline is the same budget as ours: a timeout (see `of`).
            Err(e) => return Outcome::Failed(Failure::of(&e), e.to_string()),
        };
        let status = resp.status();
        // Read the body even on errors: the connection is reusable only once it is drained.
        if let Err(e) = resp.into_body().collect().await {
            return Outcome::Failed(Failure::Body, e.to_string());
        }
        if status.is_success() {
            Outcome::Ok
        } else {
            Outcome::Failed(Failure::Status(status.as_u16()), format!("status {status}"))
        }
    }
}

/// An OpenAI chat request of about `bytes` bytes (at least the JSON around the padding), the
/// shape of seed 001's traffic: `{"model":"gpt-4o","messages":[{"role":"user","content":"…"}]}`.
pub fn chat_body(bytes: usize) -> Bytes {
    let head = r#"{"model":"gpt-4o","messages":[{"role":"user","content":""#;
    let tail = r#""}]}"#;
    let pad = bytes.saturating_sub(head.len() + tail.len());
    let mut s = String::with_capacity(head.len() + pad + tail.len());
    s.push_str(head);
    // A repeating sentence, not one byte repeated, so compression-happy proxies do not make
    // the payload free.
    let filler = "the quick brown fox jumps over the lazy dog ";
    s.extend(filler.chars().cycle().take(pad));
    s.push_str(tail);
    Bytes::from(s)
}

impl RpsReport {
    /// The run as an HTML report page (see [`crate::report`]).
    pub fn page(&self, title: &str) -> Page {
        let load = match (self.concurrency, self.target_rate_per_s) {
            (_, Some(rate)) => format!("open model, {rate} requests per second"),
            (Some(c), _) => format!("closed loop, {c} in flight"),
            _ => String::new(),
        };
        let latency = if self.target_rate_per_s.is_some() {
            "intended start to the end of the body"
        } else {
            "send to the end of the body"
        };
        Page {
            title: title.to_string(),
            facts: vec![
                ("load".into(), load),
                ("sent".into(), self.sent.to_string()),
                ("ok".into(), self.successes.to_string()),
                (
                    "failed".into(),
                    failed_line(self.failed(), &self.failure_causes),
                ),
                (
                    "latency p50 / p99 / max".into(),
                    format!(
                        "{} / {} / {} ms",
                        num(self.latency.p50_ms),
                        num(self.latency.p99_ms),
                        num(self.latency.max_ms)
                    ),
                ),
                (
                    "throughput".into(),
                    format!(
                        "{} ok/s over {} s",
                        num(self.throughput_per_s),
                        num(self.wall_ms / 1000.0)
                    ),
                ),
            ],
            sections: vec![Section {
                title: "requests".into(),
                latency: latency.into(),
                samples: self.samples.clone(),
                ..Section::default()
            }],
            json: serde_json::to_value(self).ok(),
        }
    }
}

/// `12 (status_503 10, timeout 2)`, or `0`.
pub(crate) fn failed_line(
    n: impl std::fmt::Display,
    causes: &std::collections::BTreeMap<String, u64>,
) -> String {
    if causes.is_empty() {
        return n.to_string();
    }
    let c = Causes {
        counts: causes.clone(),
        samples: Vec::new(),
    };
    format!("{n} ({})", c.line())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intended_starts_are_evenly_spaced() {
        let t0 = Instant::now();
        assert_eq!(intended_start(t0, 0, 100.0), t0);
        assert_eq!(intended_start(t0, 1, 100.0), t0 + Duration::from_millis(10));
        assert_eq!(
            intended_start(t0, 250, 100.0),
            t0 + Duration::from_millis(2500)
        );
        assert_eq!(intended_start(t0, 3, 0.5), t0 + Duration::from_secs(6));
    }

    #[test]
    fn chat_body_has_the_size_asked_for_and_is_json() {
        let b = chat_body(8192);
        assert_eq!(b.len(), 8192);
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["model"], "gpt-4o");
        assert_eq!(v["messages"][0]["role"], "user");
        // Smaller than the JSON around the padding: just that JSON.
        assert!(serde_json::from_slice::<serde_json::Value>(&chat_body(1)).is_ok());
    }

    fn one_slow_call() -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>> {
        || {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Outcome::Ok
            })
        }
    }

    /// A server that takes 100 ms, one request at a time, asked for 100 requests per second:
    /// the open model measures from when each request was due, so the queue it builds shows;
    /// a closed loop would report a flat 100 ms.
    #[tokio::test(start_paused = true)]
    async fn open_model_measures_from_the_intended_start() {
        let tally = Shared::default();
        let bound = Bound {
            requests: Some(10),
            until: None,
        };
        let sent = open_loop(
            100.0,
            1,
            bound,
            Duration::from_secs(10),
            one_slow_call(),
            tally.clone(),
            Arc::default(),
            Arc::default(),
        )
        .await;
        assert_eq!(sent, 10);
        let t = lock(&tally);
        assert_eq!(t.successes, 10);
        // Request i is due at 10·i ms and ends at 100·(i+1) ms.
        let mut l: Vec<f64> = t.samples.iter().map(|s| s.latency_ms).collect();
        l.sort_by(f64::total_cmp);
        let want: Vec<f64> = (0..10u64)
            .map(|i| (100 * (i + 1) - 10 * i) as f64)
            .collect();
        assert_eq!(l, want);
    }

    #[tokio::test(start_paused = true)]
    async fn open_model_with_room_keeps_the_rate() {
        let tally = Shared::default();
        let t0 = Instant::now();
        let bound = Bound {
            requests: None,
            until: Some(t0 + Duration::from_secs(1)),
        };
        let sent = open_loop(
            50.0,
            100,
            bound,
            Duration::from_secs(10),
            one_slow_call(),
            tally.clone(),
            Arc::default(),
            Arc::default(),
        )
        .await;
        // Due at 0, 20, …, 980 ms: 50 requests, each exactly the server's 100 ms.
        assert_eq!(sent, 50);
        let t = lock(&tally);
        assert!(t.samples.iter().all(|s| s.latency_ms == 100.0));
        // Due every 20 ms: the samples keep the schedule.
        assert_eq!(t.samples[49].start_ms, 980.0);
    }

    #[tokio::test(start_paused = true)]
    async fn closed_loop_measures_from_the_send_and_times_out() {
        let tally = Shared::default();
        let bound = Bound {
            requests: Some(6),
            until: None,
        };
        let sent = closed_loop(
            2,
            bound,
            Duration::from_secs(10),
            one_slow_call(),
            tally.clone(),
            Arc::default(),
            Arc::default(),
        )
        .await;
        assert_eq!(sent, 6);
        assert!(lock(&tally).samples.iter().all(|s| s.latency_ms == 100.0));
        let slow = Shared::default();
        let n = closed_loop(
            1,
            Bound {
                requests: Some(2),
                until: None,
            },
            Duration::from_millis(50),
            one_slow_call(),
            slow.clone(),
            Arc::default(),
            Arc::default(),
        )
        .await;
        assert_eq!(n, 2);
        assert_eq!(lock(&slow).causes.count(Failure::Timeout), 2);
        assert_eq!(lock(&slow).successes, 0);
    }
}
