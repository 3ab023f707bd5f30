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

use crate::metric_handles::Handles;

/// Declares [`EndReason`] with [`EndReason::ALL`] and [`EndReason::as_str`] from one list, so
/// that what the dashboard and the metrics iterate cannot leave a variant out (a hand-kept
/// list once missed six of them).
macro_rules! end_reasons {
    ($($(#[$doc:meta])* $name:ident => $label:literal,)+) => {
        /// How a request ended. Low cardinality: used as a metric label.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum EndReason {
            $($(#[$doc])* $name,)+
        }

        impl EndReason {
            /// Every end reason, in declaration order: `ALL[r as usize] == r`.
            pub const ALL: [EndReason; [$(EndReason::$name),+].len()] = [$(EndReason::$name),+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(EndReason::$name => $label,)+
                }
            }
        }
    };
}

end_reasons! {
    /// The whole response reached the client.
    Completed => "completed",
    /// The client went away first.
    ClientGone => "client_gone",
    /// The upstream reset the stream or closed the connection mid-response.
    UpstreamReset => "upstream_reset",
    /// The upstream ended in the middle of an SSE event.
    UpstreamEofMidEvent => "upstream_eof_mid_event",
    /// No response headers within `first_byte`.
    FirstByteTimeout => "first_byte_timeout",
    /// A stream's first content did not come within `first_token`.
    FirstTokenTimeout => "first_token_timeout",
    /// No event within `idle`.
    IdleTimeout => "idle_timeout",
    /// The exchange exceeded `total`.
    TotalTimeout => "total_timeout",
    /// The request body was over `max_request_body`.
    BodyTooLarge => "body_too_large",
    /// A non-streaming response was over `max_response_body`.
    ResponseTooLarge => "response_too_large",
    /// One SSE event was over `max_event_bytes`.
    EventTooLarge => "event_too_large",
    /// The request was malformed or not routable (4xx from the gateway itself).
    BadRequest => "bad_request",
    /// The upstream could not be reached or failed before answering.
    UpstreamError => "upstream_error",
    /// Ended by a graceful shutdown's deadline.
    Shutdown => "shutdown",
    /// The client did not send its request body in time.
    ClientTimeout => "client_timeout",
    /// The gateway's memory budget for buffered bodies was spent.
    OverBudget => "memory_budget",
    /// Refused for its key: missing, unknown, revoked (401), or not allowed the route or
    /// model (403).
    Unauthorized => "unauthorized",
    /// Refused by a rate, token, concurrency or budget limit (429).
    Limited => "limited",
    /// The state store of limits failed (`fail_closed`) or was full (503).
    StateUnavailable => "state_unavailable",
    /// A stream outgrew its key's token limit (`cut_streams`) and was cut.
    TokenCap => "token_cap",
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
            | E::BadField { .. }
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
            E::ClientBodyTimeout { .. } => EndReason::ClientTimeout,
            E::OverBudget { .. } => EndReason::OverBudget,
            E::TooManyCancels { .. }
            | E::RequestRate { .. }
            | E::BadHost(_)
            | E::MalformedRequest { .. } => EndReason::BadRequest,
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

/// Handles of the families counted on every request (see `crate::metric_handles`).
#[derive(Debug, Default)]
struct HotHandles {
    requests: Handles<Counter>,
    /// Indexed by `EndReason as usize`: a handful of values, no lookup.
    end_reasons: [std::sync::OnceLock<Counter>; EndReason::ALL.len()],
    acquire_wait: Handles<Histogram>,
    attempts: Handles<Counter>,
    /// By route and model: one lookup for the four kinds a call may report.
    tokens: Handles<Arc<TokenHandles>>,
}

/// The token counters of one route and model, by kind (`TOKEN_KINDS`), each taken from the
/// family the first time that kind is counted (so a kind never reported shows no series).
#[derive(Debug, Default)]
struct TokenHandles([std::sync::OnceLock<Counter>; 4]);

/// The `kind` label of each of `TokenHandles`' counters.
const TOKEN_KINDS: [&str; 4] = ["input", "output", "cached", "reasoning"];

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
    continuations: Family<Reason, Counter>,
    /// The handles of the families every request touches, found without allocating.
    hot: HotHandles,
    /// What the dashboard reads.
    pub(crate) live: crate::live::Live,
    /// The access log (one line per request), once the gateway has opened its sink.
    access_log: Option<crate::access_log::AccessLog>,
    /// Trace export, when `[telemetry] endpoint` is set.
    tracer: Option<crate::trace::Tracer>,
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
        let continuations = Family::<Reason, Counter>::default();
        registry.register(
            "continuations",
            "Cut streams continued on a prefill target, by result (ok, failed, unavailable)",
            continuations.clone(),
        );
        Telemetry {
            hot: HotHandles::default(),
            live: crate::live::Live::default(),
            access_log: None,
            tracer: None,
            registry,
            tokens,
            continuations,
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

    /// Starts trace export as `[telemetry]` says (nothing without an endpoint), with its
    /// counters in this registry. Call on the runtime that will serve.
    pub(crate) fn start_tracer(&mut self, cfg: &crate::config::TelemetryConfig) {
        self.tracer = crate::trace::Tracer::start(cfg, &mut self.registry);
    }

    /// Opens the access log's sink and starts its writer (`server.access_log`).
    ///
    /// # Errors
    /// The file cannot be opened.
    pub(crate) fn start_access_log(
        &mut self,
        sink: &crate::access_log::AccessLogSink,
        format: crate::access_log::LogFormat,
        queue: usize,
    ) -> std::io::Result<()> {
        let log = crate::access_log::AccessLog::start(sink, format, queue)?;
        self.registry
            .register_collector(Box::new(crate::access_log::AccessLogCollector(
                log.stats.clone(),
            )));
        self.access_log = Some(log);
        Ok(())
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
        self.hot.attempts.with(
            &[route.as_bytes(), upstream.as_bytes(), outcome.as_bytes()],
            || {
                self.attempts
                    .get_or_create(&AttemptLabels {
                        route: route.to_string(),
                        upstream: upstream.to_string(),
                        outcome,
                    })
                    .clone()
            },
            |c| c.inc(),
        );
    }

    pub(crate) fn tokens(&self, route: &str, model: &str, u: &sluice_providers::Usage) {
        let counts = [u.input, u.output, u.cached_input, u.reasoning];
        if counts.iter().all(|&n| n == 0) {
            return;
        }
        self.hot.tokens.with(
            &[route.as_bytes(), model.as_bytes()],
            || Arc::new(TokenHandles::default()),
            |handles| {
                for ((slot, kind), n) in handles.0.iter().zip(TOKEN_KINDS).zip(counts) {
                    if n > 0 {
                        slot.get_or_init(|| {
                            self.tokens
                                .get_or_create(&TokenLabels {
                                    route: route.to_string(),
                                    model: model.to_string(),
                                    kind,
                                })
                                .clone()
                        })
                        .inc_by(n);
                    }
                }
            },
        );
    }

    pub(crate) fn continuation(&self, result: &'static str) {
        self.continuations
            .get_or_create(&Reason { reason: result })
            .inc();
    }

    pub(crate) fn retry(&self, upstream: &str) {
        self.live
            .retries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.retries
            .get_or_create(&UpstreamLabel {
                upstream: upstream.to_string(),
            })
            .inc();
    }

    pub(crate) fn fallback(&self, route: &str) {
        self.live
            .fallbacks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
        self.hot.acquire_wait.with(
            &[upstream.as_bytes(), lane.as_bytes()],
            || {
                self.acquire_wait
                    .get_or_create(&UpstreamLane {
                        upstream: upstream.to_string(),
                        lane,
                    })
                    .clone()
            },
            |h| h.observe(wait.as_secs_f64()),
        );
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
    /// When the attempt began (its trace span's start).
    pub(crate) started: Instant,
    pub(crate) duration: Duration,
}

impl AttemptLog {
    /// Appends `upstream:status:outcome/cause:12.3ms` (no `fmt`: it is on every log line).
    fn push_to(&self, out: &mut String) {
        out.push_str(&self.upstream);
        out.push(':');
        match self.status {
            Some(s) => crate::access_log::push_u64(out, u64::from(s)),
            None => out.push('-'),
        }
        out.push(':');
        out.push_str(self.outcome);
        if self.outcome != "ok" {
            out.push('/');
            out.push_str(self.cause);
        }
        out.push(':');
        let nanos = u64::try_from(self.duration.as_nanos()).unwrap_or(u64::MAX);
        crate::access_log::push_fixed(out, nanos.saturating_add(50_000) / 100_000, 1);
        out.push_str("ms");
    }
}

impl std::fmt::Display for AttemptLog {
    /// `upstream:status:outcome/cause:12.3ms`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = String::new();
        self.push_to(&mut s);
        f.write_str(&s)
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
    /// The client's address (see `client_ip`), when the request came through the ingress.
    pub(crate) client_ip: Option<std::net::IpAddr>,
    /// What went wrong, in full (addresses and OS errors included: the client got the
    /// public version).
    pub(crate) error: Option<String>,
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
    /// Not written to the access log (health checks: a load balancer's probes would drown
    /// the requests).
    pub(crate) quiet: bool,
    /// The request's trace span, when it is sampled.
    span: Option<Box<crate::trace::RequestSpan>>,
    /// Set while the request is a stream being relayed (the dashboard's stream ages).
    stream: Option<crate::live::StreamTicket>,
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
            client_ip: None,
            error: None,
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
            quiet: false,
            span: None,
            stream: None,
            ticket: None,
            finished: false,
        }
    }

    /// Begins the request's trace span if tracing is on and the request is sampled; a
    /// sampled request's `traceparent` is rewritten so the upstream continues the trace.
    pub(crate) fn start_trace(
        &mut self,
        headers: &mut http::HeaderMap,
        op: crate::route::Operation,
    ) {
        if let Some(t) = &self.telemetry.tracer {
            self.span = t.start_request(headers, op);
        }
    }

    /// The response is a stream now being relayed: counted among the live streams until
    /// this log drops, and its upstream first byte is recorded.
    pub(crate) fn stream_started(&mut self) {
        self.telemetry
            .live
            .first_byte
            .observe(self.started.elapsed());
        self.stream = Some(self.telemetry.live.stream(self.started));
    }

    /// A non-streaming response body: read for the trace's usage and response model (only
    /// when the request is traced).
    pub(crate) fn observe_body(&mut self, body: &[u8]) {
        if let Some(s) = &mut self.span {
            s.observe_body(body);
        }
    }

    /// Relayed SSE bytes: read for the trace's usage and response model (only when the
    /// request is traced).
    pub(crate) fn observe_sse(&mut self, bytes: &[u8]) {
        if let Some(s) = &mut self.span {
            s.observe_sse(bytes);
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
            if self.stream.is_some() {
                self.telemetry.live.first_event.observe(t);
            }
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
        t.live.end(reason);
        if self.stream.is_none() {
            if let Some(p) = &self.timings {
                t.live.first_byte.observe(p.first_byte);
            }
        }
        self.finish_trace(reason);
        let t = &self.telemetry;
        let route = if self.route.is_empty() {
            "-"
        } else {
            self.route.as_str()
        };
        t.hot.requests.with(
            &[route.as_bytes(), &self.status.to_le_bytes()],
            || {
                t.requests
                    .get_or_create(&RouteStatus {
                        route: route.to_string(),
                        status: self.status,
                    })
                    .clone()
            },
            |c| c.inc(),
        );
        let label = reason.as_str();
        let counter = || {
            t.end_reasons
                .get_or_create(&Reason { reason: label })
                .clone()
        };
        t.hot.end_reasons[reason as usize]
            .get_or_init(counter)
            .inc();
        if reason == EndReason::ClientGone {
            t.client_cancellations.inc();
        }
        let duration = self.started.elapsed();
        t.duration.observe(duration.as_secs_f64());
        if let Some(u) = &self.usage {
            t.tokens(&self.route, &self.usage_label, u);
        }
        let (mut key, mut spend) = (None, None);
        if let Some(ticket) = self.ticket.take() {
            key = ticket.key().cloned();
            spend = Some(ticket.settle(crate::keys::Outcome {
                usage: self.usage,
                status: self.status,
                model: &self.model,
                served: &self.usage_label,
            }));
        }
        self.write_access_log(reason, duration, key.as_deref(), spend);
    }

    /// The request's access log line (client values escaped and capped), handed to the
    /// writer without waiting.
    fn write_access_log(
        &self,
        reason: EndReason,
        duration: Duration,
        key: Option<&crate::keys::VirtualKey>,
        spend_micros: Option<u64>,
    ) {
        let Some(log) = self.telemetry.access_log.as_ref().filter(|l| l.enabled()) else {
            return;
        };
        if self.quiet {
            return;
        }
        let mut l = log.line();
        l.now("ts").str("request_id", &self.request_id);
        if let Some(ip) = self.client_ip {
            l.ip("client_ip", ip);
        }
        l.word("route", &self.route)
            .word("upstream", &self.upstream)
            .str("model", &self.model)
            .u64("status", u64::from(self.status))
            .word("end_reason", reason.as_str());
        if let Some(t) = self.first_byte {
            l.ms("ttfb_ms", t);
        }
        l.ms("duration_ms", duration)
            .u64("bytes", self.bytes)
            .u64("events", self.events);
        if let Some(p) = self.timings {
            l.ms("acquire_ms", p.acquire);
            for (k, v) in [
                ("dns_ms", p.dns),
                ("connect_ms", p.connect),
                ("tls_ms", p.tls),
            ] {
                if let Some(v) = v {
                    l.ms(k, v);
                }
            }
            l.ms("written_ms", p.written)
                .ms("upstream_first_byte_ms", p.first_byte);
            if let Some(v) = p.last_byte {
                l.ms("upstream_last_byte_ms", v);
            }
        }
        if !self.attempts.is_empty() {
            l.own("attempts", |out| push_attempts(out, &self.attempts));
        }
        if let Some(u) = &self.usage {
            l.u64("input_tokens", u.input)
                .u64("output_tokens", u.output)
                .u64("cached_tokens", u.cached_input)
                .u64("reasoning_tokens", u.reasoning);
            if self.usage_partial {
                l.bool("usage_partial", true);
            }
        }
        if let Some(k) = key {
            l.str("key", k.id());
            if let Some(team) = k.team() {
                l.str("team", team);
            }
            if let Some(owner) = k.owner() {
                l.str("owner", owner);
            }
        }
        if let Some(s) = spend_micros.filter(|s| *s > 0) {
            l.u64("spend_micros", s);
        }
        if let Some(e) = &self.error {
            l.message("error", e);
        }
        log.send(l);
    }
}

impl RequestLog {
    /// Ends the trace span (once, from `finish`) with the attempts and the phases of the
    /// attempt that answered.
    fn finish_trace(&mut self, reason: EndReason) {
        let (Some(span), Some(tracer)) = (self.span.take(), &self.telemetry.tracer) else {
            return;
        };
        let last = self.attempts.len().saturating_sub(1);
        let attempts = self
            .attempts
            .iter()
            .enumerate()
            .map(|(i, a)| crate::trace::AttemptSpan {
                upstream: a.upstream.clone(),
                started: a.started,
                duration: a.duration,
                outcome: a.outcome,
                cause: a.cause,
                status: a.status,
                timings: if i == last { self.timings } else { None },
            })
            .collect();
        let error = !matches!(
            reason,
            EndReason::Completed | EndReason::ClientGone | EndReason::BadRequest
        ) || self.status >= 500;
        tracer.finish(
            span,
            crate::trace::RequestEnd {
                request_id: &self.request_id,
                route: &self.route,
                model: &self.model,
                upstream: &self.upstream,
                status: self.status,
                end_reason: reason.as_str(),
                error,
                started: self.started,
                attempts,
            },
        );
    }
}

/// Appends `a:503:retryable/overloaded:3.1ms,b:200:ok:40.2ms`.
fn push_attempts(out: &mut String, attempts: &[AttemptLog]) {
    for (i, a) in attempts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        a.push_to(out);
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        self.finish(EndReason::ClientGone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_end_reason_is_listed_once_at_its_own_index() {
        for (i, r) in EndReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r:?}");
        }
        let labels: std::collections::HashSet<_> =
            EndReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), EndReason::ALL.len());
        assert_eq!(EndReason::ALL.len(), EndReason::TokenCap as usize + 1);
    }

    #[test]
    fn tokens_are_counted_by_route_model_and_kind_and_unreported_kinds_show_no_series() {
        let t = Telemetry::default();
        let usage = |input, output, cached_input, reasoning| sluice_providers::Usage {
            input,
            output,
            cached_input,
            reasoning,
        };
        t.tokens("chat", "gpt-4o", &usage(20, 16, 0, 0));
        t.tokens("chat", "gpt-4o", &usage(5, 4, 3, 0));
        t.tokens("chat", "o3", &usage(0, 9, 0, 7));
        t.tokens("chat", "gpt-4o", &usage(0, 0, 0, 0));
        // The same bytes split differently are another route and model.
        t.tokens("chatg", "pt-4o", &usage(1, 0, 0, 0));
        let m = t.encode();
        for line in [
            r#"sluice_tokens_total{route="chat",model="gpt-4o",kind="input"} 25"#,
            r#"sluice_tokens_total{route="chat",model="gpt-4o",kind="output"} 20"#,
            r#"sluice_tokens_total{route="chat",model="gpt-4o",kind="cached"} 3"#,
            r#"sluice_tokens_total{route="chat",model="o3",kind="output"} 9"#,
            r#"sluice_tokens_total{route="chat",model="o3",kind="reasoning"} 7"#,
            r#"sluice_tokens_total{route="chatg",model="pt-4o",kind="input"} 1"#,
        ] {
            assert!(m.contains(line), "{line} not in\n{m}");
        }
        for absent in [
            r#"model="gpt-4o",kind="reasoning""#,
            r#"model="o3",kind="input""#,
            r#"model="o3",kind="cached""#,
        ] {
            assert!(!m.contains(absent), "{absent} in\n{m}");
        }
        assert_eq!(m.matches("sluice_tokens_total{").count(), 6, "{m}");
    }
}
