//! Metrics and the one log line per request. Telemetry observes; it never changes what flows.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

/// How a request ended. Low cardinality: used as a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The whole response reached the client.
    Completed,
    /// The client went away first.
    ClientGone,
    /// The upstream reset the stream or closed the connection mid-response.
    UpstreamReset,
    /// The upstream ended in the middle of an SSE event.
    UpstreamEofMidEvent,
    /// No response headers within `first_byte`.
    FirstByteTimeout,
    /// A stream's first content did not come within `first_token`.
    FirstTokenTimeout,
    /// No event within `idle`.
    IdleTimeout,
    /// The exchange exceeded `total`.
    TotalTimeout,
    /// The request body was over `max_request_body`.
    BodyTooLarge,
    /// A non-streaming response was over `max_response_body`.
    ResponseTooLarge,
    /// One SSE event was over `max_event_bytes`.
    EventTooLarge,
    /// The request was malformed or not routable (4xx from the gateway itself).
    BadRequest,
    /// The upstream could not be reached or failed before answering.
    UpstreamError,
    /// Ended by a graceful shutdown's deadline.
    Shutdown,
    /// Refused for its key: missing, unknown, revoked (401), or not allowed the route or
    /// model (403).
    Unauthorized,
    /// Refused by a rate, token, concurrency or budget limit (429).
    Limited,
    /// The state store of limits failed (`fail_closed`) or was full (503).
    StateUnavailable,
}

impl EndReason {
    /// The end reason of a request that failed with `e` before its response started.
    pub(crate) fn of_error(e: &crate::error::GatewayError) -> EndReason {
        use crate::error::GatewayError as E;
        match e {
            E::NotFound(_)
            | E::MethodNotAllowed { .. }
            | E::BodyRead(_)
            | E::BadJson(_)
            | E::MissingModel
            | E::UnknownModel(_)
            | E::Translate(_) => EndReason::BadRequest,
            E::BodyTooLarge { .. } => EndReason::BodyTooLarge,
            E::FirstByteTimeout { .. } => EndReason::FirstByteTimeout,
            E::FirstTokenTimeout { .. } => EndReason::FirstTokenTimeout,
            E::TotalTimeout { .. } => EndReason::TotalTimeout,
            E::IdleTimeout { .. } => EndReason::IdleTimeout,
            E::ResponseTooLarge { .. } => EndReason::ResponseTooLarge,
            E::UpstreamBody { .. } => EndReason::UpstreamReset,
            E::ShuttingDown => EndReason::Shutdown,
            E::Keys(k) => k.end_reason(),
            E::Upstream { .. }
            | E::StreamFailed { .. }
            | E::RetryBudgetExhausted { .. }
            | E::ResponseMalformed { .. } => EndReason::UpstreamError,
        }
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Completed => "completed",
            EndReason::ClientGone => "client_gone",
            EndReason::UpstreamReset => "upstream_reset",
            EndReason::UpstreamEofMidEvent => "upstream_eof_mid_event",
            EndReason::FirstByteTimeout => "first_byte_timeout",
            EndReason::FirstTokenTimeout => "first_token_timeout",
            EndReason::IdleTimeout => "idle_timeout",
            EndReason::TotalTimeout => "total_timeout",
            EndReason::BodyTooLarge => "body_too_large",
            EndReason::ResponseTooLarge => "response_too_large",
            EndReason::EventTooLarge => "event_too_large",
            EndReason::BadRequest => "bad_request",
            EndReason::UpstreamError => "upstream_error",
            EndReason::Shutdown => "shutdown",
            EndReason::Unauthorized => "unauthorized",
            EndReason::Limited => "limited",
            EndReason::StateUnavailable => "state_unavailable",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLane {
    upstream: String,
    lane: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    route: String,
    upstream: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    route: String,
    model: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabel {
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}

/// The gateway's metrics, registered in one registry (no globals, so tests can read them).
#[derive(Debug)]
pub struct Telemetry {
    registry: Registry,
    requests: Family<RouteStatus, Counter>,
    end_reasons: Family<Reason, Counter>,
    active_streams: Gauge,
    client_cancellations: Counter,
    backpressure_pauses: Counter,
    heartbeats: Counter,
    relayed_bytes: Counter,
    relayed_events: Counter,
    first_byte: Histogram,
    duration: Histogram,
    acquire_wait: Family<UpstreamLane, Histogram>,
    relay_buffer_peak: Histogram,
    attempts: Family<AttemptLabels, Counter>,
    retries: Family<UpstreamLabel, Counter>,
    fallbacks: Family<RouteLabel, Counter>,
    retry_budget_exhausted: Family<UpstreamLabel, Counter>,
    tokens: Family<TokenLabels, Counter>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new()
    }
}

impl Telemetry {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sluice");
        let requests = Family::<RouteStatus, Counter>::default();
        registry.register(
            "requests",
            "Requests by route (upstream) and status",
            requests.clone(),
        );
        let end_reasons = Family::<Reason, Counter>::default();
        registry.register(
            "request_end",
            "Requests by how they ended",
            end_reasons.clone(),
        );
        let active_streams = Gauge::default();
        registry.register(
            "active_streams",
            "SSE streams being relayed",
            active_streams.clone(),
        );
        let client_cancellations = Counter::default();
        registry.register(
            "client_cancellations",
            "Requests whose client went away before the end",
            client_cancellations.clone(),
        );
        let backpressure_pauses = Counter::default();
        registry.register(
            "backpressure_pauses",
            "Times a stream waited at least 10 ms for its client to take data",
            backpressure_pauses.clone(),
        );
        let heartbeats = Counter::default();
        registry.register(
            "heartbeats",
            "Heartbeat comments sent to clients",
            heartbeats.clone(),
        );
        let relayed_bytes = Counter::default();
        registry.register(
            "relayed_bytes",
            "Response body bytes sent to clients",
            relayed_bytes.clone(),
        );
        let relayed_events = Counter::default();
        registry.register(
            "relayed_events",
            "SSE events relayed to clients",
            relayed_events.clone(),
        );
        let first_byte = Histogram::new(exponential_buckets(0.001, 2.0, 18));
        registry.register(
            "first_byte_seconds",
            "Time from request to the first response byte (streams: first event)",
            first_byte.clone(),
        );
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 20));
        registry.register(
            "request_duration_seconds",
            "Time from request to its end",
            duration.clone(),
        );
        let acquire_wait = Family::<UpstreamLane, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 18))
        });
        registry.register(
            "pool_acquire_wait_seconds",
            "Time a request waited for an upstream connection or stream slot",
            acquire_wait.clone(),
        );
        let relay_buffer_peak = Histogram::new(exponential_buckets(1024.0, 2.0, 17));
        registry.register(
            "relay_buffer_peak_bytes",
            "Most bytes a stream's relay held at once (upstream bytes not yet sent as events)",
            relay_buffer_peak.clone(),
        );
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "attempts",
            "Upstream attempts by route, upstream and outcome (ok, or the failure class)",
            attempts.clone(),
        );
        let retries = Family::<UpstreamLabel, Counter>::default();
        registry.register(
            "retries",
            "Attempts that repeated a request within its target tier",
            retries.clone(),
        );
        let fallbacks = Family::<RouteLabel, Counter>::default();
        registry.register(
            "fallbacks",
            "Requests moved to a route's next target tier",
            fallbacks.clone(),
        );
        let retry_budget_exhausted = Family::<UpstreamLabel, Counter>::default();
        registry.register(
            "retry_budget_exhausted",
            "Retries refused because the upstream's retry budget was spent",
            retry_budget_exhausted.clone(),
        );
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "tokens",
            "Tokens the upstreams reported, by route, model and kind (input, output, cached, reasoning)",
            tokens.clone(),
        );
        Telemetry {
            registry,
            tokens,
            attempts,
            retries,
            fallbacks,
            retry_budget_exhausted,
            acquire_wait,
            relay_buffer_peak,
            requests,
            end_reasons,
            active_streams,
            client_cancellations,
            backpressure_pauses,
            heartbeats,
            relayed_bytes,
            relayed_events,
            first_byte,
            duration,
        }
    }

    /// The registry, for stages that register their own metrics at startup.
    pub(crate) fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Adds the upstream pools' metrics (read at scrape time).
    pub(crate) fn register_pools(&mut self, pools: crate::pools::PoolCollector) {
        self.registry.register_collector(Box::new(pools));
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub(crate) fn stream_started(&self) {
        self.active_streams.inc();
    }

    pub(crate) fn stream_ended(&self) {
        self.active_streams.dec();
    }

    pub(crate) fn heartbeat(&self) {
        self.heartbeats.inc();
    }

    pub(crate) fn relay_buffer_peak(&self, bytes: usize) {
        self.relay_buffer_peak.observe(bytes as f64);
    }

    pub(crate) fn backpressure_pause(&self) {
        self.backpressure_pauses.inc();
    }

    pub(crate) fn attempt(&self, route: &str, upstream: &str, outcome: &'static str) {
        self.attempts
            .get_or_create(&AttemptLabels {
                route: route.to_string(),
                upstream: upstream.to_string(),
                outcome,
            })
            .inc();
    }

    pub(crate) fn tokens(&self, route: &str, model: &str, u: &sluice_providers::Usage) {
        for (kind, n) in [
            ("input", u.input),
            ("output", u.output),
            ("cached", u.cached_input),
            ("reasoning", u.reasoning),
        ] {
            if n > 0 {
                self.tokens
                    .get_or_create(&TokenLabels {
                        route: route.to_string(),
                        model: model.to_string(),
                        kind,
                    })
                    .inc_by(n);
            }
        }
    }

    pub(crate) fn retry(&self, upstream: &str) {
        self.retries
            .get_or_create(&UpstreamLabel {
                upstream: upstream.to_string(),
            })
            .inc();
    }

    pub(crate) fn fallback(&self, route: &str) {
        self.fallbacks
            .get_or_create(&RouteLabel {
                route: route.to_string(),
            })
            .inc();
    }

    pub(crate) fn retry_budget_exhausted(&self, upstream: &str) {
        self.retry_budget_exhausted
            .get_or_create(&UpstreamLabel {
                upstream: upstream.to_string(),
            })
            .inc();
    }

    pub(crate) fn acquire_wait(&self, upstream: &str, lane: &'static str, wait: Duration) {
        self.acquire_wait
            .get_or_create(&UpstreamLane {
                upstream: upstream.to_string(),
                lane,
            })
            .observe(wait.as_secs_f64());
    }
}

/// One attempt of a request, as its log line shows it.
#[derive(Clone, Debug)]
pub(crate) struct AttemptLog {
    pub(crate) upstream: String,
    /// `ok` or the failure class.
    pub(crate) outcome: &'static str,
    pub(crate) cause: &'static str,
    pub(crate) status: Option<u16>,
    pub(crate) duration: Duration,
}

impl std::fmt::Display for AttemptLog {
    /// `upstream:status:outcome/cause:12.3ms`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:", self.upstream)?;
        match self.status {
            Some(s) => write!(f, "{s}")?,
            None => f.write_str("-")?,
        }
        if self.outcome == "ok" {
            write!(f, ":ok")?;
        } else {
            write!(f, ":{}/{}", self.outcome, self.cause)?;
        }
        write!(f, ":{:.1}ms", self.duration.as_secs_f64() * 1000.0)
    }
}

/// One request's record, finished exactly once: by whoever decides its outcome, or, if it is
/// dropped unfinished, as `client_gone` (the client's departure is what drops it).
#[derive(Debug)]
pub(crate) struct RequestLog {
    telemetry: Arc<Telemetry>,
    pub(crate) request_id: String,
    pub(crate) route: String,
    /// The upstream that answered (the last one tried).
    pub(crate) upstream: String,
    pub(crate) model: String,
    pub(crate) status: u16,
    started: Instant,
    first_byte: Option<Duration>,
    pub(crate) bytes: u64,
    pub(crate) events: u64,
    /// The upstream phases, once the upstream answered (and `last_byte` once its body ended).
    pub(crate) timings: Option<sluice_upstream::PhaseTimings>,
    /// Every attempt, in order.
    pub(crate) attempts: Vec<AttemptLog>,
    /// The tokens the upstream reported.
    pub(crate) usage: Option<sluice_providers::Usage>,
    /// The usage is what was seen before the stream ended early (client gone, cut).
    pub(crate) usage_partial: bool,
    /// The `model` label of the token metrics (see `Policy::usage_label`).
    pub(crate) usage_label: String,
    /// The request's key and limits, settled (tokens, leases, spend) when it finishes.
    pub(crate) ticket: Option<Box<crate::keys::Ticket>>,
    finished: bool,
}

impl RequestLog {
    pub(crate) fn new(telemetry: Arc<Telemetry>, request_id: String, started: Instant) -> Self {
        RequestLog {
            telemetry,
            request_id,
            route: String::new(),
            upstream: String::new(),
            model: String::new(),
            status: 0,
            started,
            first_byte: None,
            bytes: 0,
            events: 0,
            timings: None,
            attempts: Vec::new(),
            usage: None,
            usage_partial: false,
            usage_label: String::new(),
            ticket: None,
            finished: false,
        }
    }

    /// When the request arrived.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Marks the first byte (or first event) now, once.
    pub(crate) fn first_byte(&mut self) {
        if self.first_byte.is_none() {
            let t = self.started.elapsed();
            self.first_byte = Some(t);
            self.telemetry.first_byte.observe(t.as_secs_f64());
        }
    }

    pub(crate) fn sent(&mut self, bytes: usize, events: u64) {
        self.bytes += bytes as u64;
        self.events += events;
        self.telemetry.relayed_bytes.inc_by(bytes as u64);
        self.telemetry.relayed_events.inc_by(events);
    }

    /// Records the outcome: metrics and the request's single log line.
    pub(crate) fn finish(&mut self, reason: EndReason) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let t = &self.telemetry;
        let route = if self.route.is_empty() {
            "-".to_string()
        } else {
            self.route.clone()
        };
        t.requests
            .get_or_create(&RouteStatus {
                route,
                status: self.status,
            })
            .inc();
        t.end_reasons
            .get_or_create(&Reason {
                reason: reason.as_str(),
            })
            .inc();
        if reason == EndReason::ClientGone {
            t.client_cancellations.inc();
        }
        let duration = self.started.elapsed();
        t.duration.observe(duration.as_secs_f64());
        if let Some(u) = &self.usage {
            t.tokens(&self.route, &self.usage_label, u);
        }
        let u = self.usage.unwrap_or_default();
        let has_usage = self.usage.is_some();
        let mut spend = None;
        let ticket = self.ticket.take();
        let key = ticket.as_ref().and_then(|t| t.key().cloned());
        if let Some(ticket) = ticket {
            spend = Some(ticket.settle(crate::keys::Outcome {
                usage: self.usage,
                status: self.status,
                model: &self.model,
                served: &self.usage_label,
            }));
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let p = self.timings;
        let attempts = AttemptList(&self.attempts);
        tracing::info!(
            target: "sluice::request",
            request_id = %self.request_id,
            route = %self.route,
            upstream = %self.upstream,
            model = %self.model,
            status = self.status,
            end_reason = reason.as_str(),
            ttfb_ms = self.first_byte.map(|d| d.as_secs_f64() * 1000.0),
            duration_ms = duration.as_secs_f64() * 1000.0,
            bytes = self.bytes,
            events = self.events,
            acquire_ms = p.map(|p| ms(p.acquire)),
            dns_ms = p.and_then(|p| p.dns).map(ms),
            connect_ms = p.and_then(|p| p.connect).map(ms),
            tls_ms = p.and_then(|p| p.tls).map(ms),
            written_ms = p.map(|p| ms(p.written)),
            upstream_first_byte_ms = p.map(|p| ms(p.first_byte)),
            upstream_last_byte_ms = p.and_then(|p| p.last_byte).map(ms),
            attempts = %attempts,
            input_tokens = has_usage.then_some(u.input),
            output_tokens = has_usage.then_some(u.output),
            cached_tokens = has_usage.then_some(u.cached_input),
            reasoning_tokens = has_usage.then_some(u.reasoning),
            usage_partial = self.usage_partial,
            key = key.as_ref().map(|k| k.id()),
            team = key.as_ref().and_then(|k| k.team()),
            owner = key.as_ref().and_then(|k| k.owner()),
            spend_micros = spend.filter(|s| *s > 0),
            "request"
        );
    }
}

/// `a:503:retryable/overloaded:3.1ms,b:200:ok:40.2ms` (empty for requests that made none).
struct AttemptList<'a>(&'a [AttemptLog]);

impl std::fmt::Display for AttemptList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        self.finish(EndReason::ClientGone);
    }
}
