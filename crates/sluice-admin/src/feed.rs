//! `GET /admin/feed`: the dashboard's server-sent events.
//!
//! One task samples the gateway once per tick, whatever the number of viewers: the counters
//! for the time series always (a few atomic reads, so the history covers the last minutes
//! when a page opens), and the whole frame (pool snapshot, routes, streams, serialized once
//! to bytes) only while someone watches. Viewers share that frame through a `watch`
//! channel, so a slow viewer skips frames instead of queueing them; at most
//! [`MAX_VIEWERS`] at once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::{Body, Frame};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::source::AdminSource;
use sluice_telemetry::live::{quantile_ms, Live, LATENCY_BUCKETS};
use sluice_telemetry::EndReason;

/// How often the feed samples.
pub(crate) const TICK: Duration = Duration::from_secs(1);
/// Points kept for the plots: ten minutes of ticks.
const HISTORY: usize = 600;
/// Latency quantiles are over this many ticks, so a quiet second does not blank the plot.
const LATENCY_WINDOW: usize = 10;
/// The books' tables are read from the ledger this often while someone watches (three SQL
/// queries).
const BOOKS_EVERY: Duration = Duration::from_secs(30);
/// Over the last this many hours, and the top this many rows.
const BOOKS_HOURS: i64 = 3;
const BOOKS_TOP: usize = 10;

/// Dashboards open at once; more get 503.
pub(crate) const MAX_VIEWERS: usize = 16;

/// One point of the time series.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Point {
    /// Unix time, ms.
    t: u64,
    /// Requests finished per second.
    rps: f64,
    /// Requests that ended in an error per second (not client or request faults).
    errors: f64,
    /// Streams being relayed.
    active: usize,
    /// Requests waiting for an upstream connection or stream slot.
    pending: usize,
    /// Retries + fallbacks per second.
    retries: f64,
    /// Tokens (input plus output) the upstreams reported, per second.
    tokens: f64,
    /// Spend per second, in dollars (as far as priced).
    spend: f64,
    fb_p50: Option<f64>,
    fb_p99: Option<f64>,
    fe_p50: Option<f64>,
    fe_p99: Option<f64>,
}

/// The sampler's memory between ticks.
struct Sampler {
    at: Instant,
    requests: u64,
    errors: u64,
    retries: u64,
    tokens: u64,
    spend_micros: u64,
    fb: VecDeque<[u64; LATENCY_BUCKETS]>,
    fe: VecDeque<[u64; LATENCY_BUCKETS]>,
}

/// The feed shared by the admin routes and the ticker.
pub(crate) struct Feed {
    source: Arc<dyn AdminSource>,
    started: Instant,
    frames: watch::Sender<Bytes>,
    history: Mutex<VecDeque<Point>>,
    /// The top teams, keys and models of the last hours, from the ledger (refreshed every
    /// [`BOOKS_EVERY`] while someone watches; `null` without a ledger).
    books: Mutex<Value>,
    viewers: Arc<Semaphore>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn errors_total(live: &Live) -> u64 {
    EndReason::ALL
        .iter()
        .zip(live.end_reasons.iter())
        .filter(|(r, _)| {
            !matches!(
                r,
                EndReason::Completed | EndReason::ClientGone | EndReason::BadRequest
            )
        })
        .map(|(_, n)| n.load(Ordering::Relaxed))
        .sum()
}

fn window(ring: &VecDeque<[u64; LATENCY_BUCKETS]>) -> [u64; LATENCY_BUCKETS] {
    match (ring.front(), ring.back()) {
        (Some(a), Some(b)) => std::array::from_fn(|i| b[i].saturating_sub(a[i])),
        _ => [0; LATENCY_BUCKETS],
    }
}

impl Feed {
    pub(crate) fn new(source: Arc<dyn AdminSource>) -> Arc<Feed> {
        let (frames, _) = watch::channel(Bytes::new());
        Arc::new(Feed {
            source,
            started: Instant::now(),
            frames,
            history: Mutex::new(VecDeque::with_capacity(HISTORY)),
            books: Mutex::new(Value::Null),
            viewers: Arc::new(Semaphore::new(MAX_VIEWERS)),
        })
    }

    /// Samples every [`TICK`] until `stop`.
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut s = {
            // Not held past this block: that would keep a generation alive across reloads.
            let telemetry = self.source.telemetry();
            let live = &telemetry.live;
            Sampler {
                at: Instant::now(),
                requests: live.requests.load(Ordering::Relaxed),
                errors: errors_total(live),
                retries: live.retries.load(Ordering::Relaxed)
                    + live.fallbacks.load(Ordering::Relaxed),
                tokens: live.tokens.load(Ordering::Relaxed),
                spend_micros: live.spend_micros.load(Ordering::Relaxed),
                fb: VecDeque::from([live.first_byte.read()]),
                fe: VecDeque::from([live.first_event.read()]),
            }
        };
        let mut books_at: Option<Instant> = None;
        let mut tick = tokio::time::interval_at(Instant::now() + TICK, TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let point = self.sample(&mut s);
            let stale = books_at.is_none_or(|t| t.elapsed() >= BOOKS_EVERY);
            if self.frames.receiver_count() > 0 && stale {
                books_at = Some(Instant::now());
                let books = self.books().await;
                *self.books.lock() = books;
            }
            {
                let mut h = self.history.lock();
                if h.len() == HISTORY {
                    h.pop_front();
                }
                h.push_back(point.clone());
            }
            // Only while someone watches: the frame is the costly part.
            if self.frames.receiver_count() > 0 {
                self.frames.send_replace(self.frame_event(&point));
            }
        }
    }

    /// The top teams, keys and models by spend over the last [`BOOKS_HOURS`], from the
    /// ledger's usage query; `null` when there is no ledger to ask.
    async fn books(&self) -> Value {
        let from = unix_ms() as i64 / 1000 - BOOKS_HOURS * 3600;
        let mut out = serde_json::Map::new();
        for group in ["team", "key", "model"] {
            let reply = self
                .source
                .usage(&format!("from={from}&group_by={group}"))
                .await;
            if !reply.status.is_success() {
                return Value::Null;
            }
            let Ok(v) = serde_json::from_slice::<Value>(&reply.body) else {
                return Value::Null;
            };
            let mut rows: Vec<Value> = v["rows"].as_array().cloned().unwrap_or_default();
            rows.retain(|r| !r["group"].is_null());
            rows.sort_by_key(|r| std::cmp::Reverse(r["cost_micros"].as_i64().unwrap_or(0)));
            rows.truncate(BOOKS_TOP);
            out.insert(group.to_string(), Value::Array(rows));
        }
        out.insert("hours".into(), Value::from(BOOKS_HOURS));
        Value::Object(out)
    }

    fn sample(&self, s: &mut Sampler) -> Point {
        let telemetry = self.source.telemetry();
        let live = &telemetry.live;
        let now = Instant::now();
        let secs = now.duration_since(s.at).as_secs_f64().max(1e-3);
        let requests = live.requests.load(Ordering::Relaxed);
        let errors = errors_total(live);
        let retries = live.retries.load(Ordering::Relaxed) + live.fallbacks.load(Ordering::Relaxed);
        let tokens = live.tokens.load(Ordering::Relaxed);
        let spend_micros = live.spend_micros.load(Ordering::Relaxed);
        let rate = |new: u64, old: u64| (new.saturating_sub(old)) as f64 / secs;
        for (ring, h) in [
            (&mut s.fb, &live.first_byte),
            (&mut s.fe, &live.first_event),
        ] {
            ring.push_back(h.read());
            if ring.len() > LATENCY_WINDOW + 1 {
                ring.pop_front();
            }
        }
        let (fb, fe) = (window(&s.fb), window(&s.fe));
        let point = Point {
            t: unix_ms(),
            rps: rate(requests, s.requests),
            errors: rate(errors, s.errors),
            retries: rate(retries, s.retries),
            tokens: rate(tokens, s.tokens),
            spend: rate(spend_micros, s.spend_micros) / 1e6,
            active: live.stream_ages(now).count,
            pending: self.source.pending(),
            fb_p50: quantile_ms(&fb, 0.5),
            fb_p99: quantile_ms(&fb, 0.99),
            fe_p50: quantile_ms(&fe, 0.5),
            fe_p99: quantile_ms(&fe, 0.99),
        };
        s.at = now;
        s.requests = requests;
        s.errors = errors;
        s.retries = retries;
        s.tokens = tokens;
        s.spend_micros = spend_micros;
        point
    }
}

impl Feed {
    /// The whole state as one `tick` event.
    fn frame_event(&self, point: &Point) -> Bytes {
        let telemetry = self.source.telemetry();
        let live = &telemetry.live;
        let config = self.source.config();
        let generation = self.source.generation();
        let ages = live.stream_ages(Instant::now());
        let pools = self.source.pools();
        let end_reasons: serde_json::Map<String, Value> = EndReason::ALL
            .iter()
            .zip(live.end_reasons.iter())
            .map(|(r, n)| (r.as_str().to_string(), n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r, Value::from(n)))
            .collect();
        let routes: Vec<Value> = config
            .routes
            .iter()
            .map(|r| {
                let tier = |ts: &[sluice_config::TargetConfig]| {
                    ts.iter()
                        .map(|t| {
                            json!({
                                "upstream": config.upstream(t.upstream).name,
                                "model": t.model,
                                "weight": t.weight,
                            })
                        })
                        .collect::<Vec<_>>()
                };
                json!({
                    "name": r.name,
                    "models": r.models,
                    "targets": tier(&r.targets),
                    "fallbacks": tier(&r.fallbacks),
                })
            })
            .collect();
        let keys: Vec<Value> = live
            .top_keys(20)
            .into_iter()
            .map(|(k, u)| {
                json!({
                    "key": k,
                    "requests": u.requests,
                    "input_tokens": u.input_tokens,
                    "output_tokens": u.output_tokens,
                    "spend": u.spend_micros as f64 / 1e6,
                })
            })
            .collect();
        let ready = self.source.readiness();
        let frame = json!({
            "t": point.t,
            "uptime_s": self.started.elapsed().as_secs(),
            "version": env!("CARGO_PKG_VERSION"),
            "config_hash": generation.hash,
            "config_version": generation.version,
            "ready": ready.ready,
            "draining": generation.draining,
            "point": point,
            "totals": {
                "requests": live.requests.load(Ordering::Relaxed),
                "retries": live.retries.load(Ordering::Relaxed),
                "fallbacks": live.fallbacks.load(Ordering::Relaxed),
                "errors": errors_total(live),
                "end_reasons": end_reasons,
            },
            "streams": {
                "active": ages.count,
                "oldest_s": ages.oldest.as_secs_f64(),
                "mean_s": ages.mean.as_secs_f64(),
            },
            "routes": routes,
            "upstreams": pools["upstreams"],
            "keys": keys,
            "books": self.books.lock().clone(),
        });
        sse("tick", &frame.to_string())
    }

    /// A viewer's stream: the history, a fresh frame, then every tick's frame. `None` when
    /// [`MAX_VIEWERS`] already watch.
    pub(crate) fn subscribe(self: &Arc<Self>) -> Option<FeedBody> {
        let permit = self.viewers.clone().try_acquire_owned().ok()?;
        let mut rx = self.frames.subscribe();
        rx.mark_unchanged();
        let points: Vec<Point> = self.history.lock().iter().cloned().collect();
        let latest = points.last().cloned().unwrap_or_else(|| Point {
            t: unix_ms(),
            ..Point::default()
        });
        let mut first = Vec::new();
        first.extend_from_slice(b"retry: 2000\n\n");
        first.extend_from_slice(&sse(
            "history",
            &json!({ "tick_ms": TICK.as_millis() as u64, "points": points }).to_string(),
        ));
        first.extend_from_slice(&self.frame_event(&latest));
        Some(FeedBody {
            first: Some(Bytes::from(first)),
            next: Box::pin(next_frame(rx)),
            _permit: permit,
        })
    }
}

fn sse(event: &str, data: &str) -> Bytes {
    // JSON text has no newlines (serde_json escapes them), so one data line suffices.
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

type NextFrame = Pin<Box<dyn Future<Output = Option<(Bytes, watch::Receiver<Bytes>)>> + Send>>;

async fn next_frame(mut rx: watch::Receiver<Bytes>) -> Option<(Bytes, watch::Receiver<Bytes>)> {
    rx.changed().await.ok()?;
    let frame = rx.borrow_and_update().clone();
    Some((frame, rx))
}

/// A viewer's SSE body; dropping it (the viewer left) frees its slot.
pub(crate) struct FeedBody {
    first: Option<Bytes>,
    next: NextFrame,
    _permit: OwnedSemaphorePermit,
}

impl Body for FeedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(b) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        match self.next.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            // The feed stopped (the gateway is going away): end the stream.
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some((frame, rx))) => {
                self.next = Box::pin(next_frame(rx));
                Poll::Ready(Some(Ok(Frame::data(frame))))
            }
        }
    }
}
