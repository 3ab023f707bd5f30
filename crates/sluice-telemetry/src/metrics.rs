//! The metrics registry: every family the gateway exports, and the handles of those counted
//! on every request.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::end_reason::EndReason;
use crate::metric_handles::Handles;

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
struct GuardrailLabels {
    guardrail: String,
    verdict: &'static str,
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
    pub(crate) relayed_bytes: Counter,
    pub(crate) relayed_events: Counter,
    pub(crate) first_byte: Histogram,
    duration: Histogram,
    acquire_wait: Family<UpstreamLane, Histogram>,
    relay_buffer_peak: Histogram,
    attempts: Family<AttemptLabels, Counter>,
    retries: Family<UpstreamLabel, Counter>,
    fallbacks: Family<RouteLabel, Counter>,
    retry_budget_exhausted: Family<UpstreamLabel, Counter>,
    tokens: Family<TokenLabels, Counter>,
    continuations: Family<Reason, Counter>,
    guardrails: Family<GuardrailLabels, Counter>,
    /// The handles of the families every request touches, found without allocating.
    hot: HotHandles,
    /// What the dashboard reads.
    pub live: crate::live::Live,
    /// The access log (one line per request), once the gateway has opened its sink.
    pub(crate) access_log: Option<crate::access_log::AccessLog>,
    /// Trace export, when `[telemetry] endpoint` is set.
    pub(crate) tracer: Option<crate::trace::Tracer>,
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
        let guardrails = Family::<GuardrailLabels, Counter>::default();
        registry.register(
            "guardrail",
            "Guardrail checks, by guardrail and verdict (allow, flag, redact, modify, error, deny)",
            guardrails.clone(),
        );
        Telemetry {
            guardrails,
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
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Adds the upstream pools' metrics (read at scrape time).
    pub fn register_pools(&mut self, pools: crate::pools::PoolCollector) {
        self.registry.register_collector(Box::new(pools));
    }

    /// The tracer, when `[telemetry]` names an endpoint (for spans of mounted services, such
    /// as the MCP gateway's tool calls).
    pub fn tracer(&self) -> Option<&crate::trace::Tracer> {
        self.tracer.as_ref()
    }

    /// Starts trace export as `[telemetry]` says (nothing without an endpoint), with its
    /// counters in this registry. Call on the runtime that will serve.
    pub fn start_tracer(&mut self, cfg: &sluice_config::TelemetryConfig) {
        self.tracer = crate::trace::Tracer::start(cfg, &mut self.registry);
    }

    /// Opens the access log's sink and starts its writer (`server.access_log`).
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn start_access_log(
        &mut self,
        sink: &sluice_config::AccessLogSink,
        format: sluice_config::LogFormat,
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

    /// A request ended: its counters by route and status and by end reason, and its
    /// duration.
    pub fn request_ended(&self, route: &str, status: u16, reason: EndReason, duration: Duration) {
        let route = if route.is_empty() { "-" } else { route };
        self.hot.requests.with(
            &[route.as_bytes(), &status.to_le_bytes()],
            || {
                self.requests
                    .get_or_create(&RouteStatus {
                        route: route.to_string(),
                        status,
                    })
                    .clone()
            },
            |c| c.inc(),
        );
        let label = reason.as_str();
        let counter = || {
            self.end_reasons
                .get_or_create(&Reason { reason: label })
                .clone()
        };
        self.hot.end_reasons[reason as usize]
            .get_or_init(counter)
            .inc();
        if reason == EndReason::ClientGone {
            self.client_cancellations.inc();
        }
        self.duration.observe(duration.as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn stream_started(&self) {
        self.active_streams.inc();
    }

    pub fn stream_ended(&self) {
        self.active_streams.dec();
    }

    pub fn heartbeat(&self) {
        self.heartbeats.inc();
    }

    pub fn relay_buffer_peak(&self, bytes: usize) {
        self.relay_buffer_peak.observe(bytes as f64);
    }

    pub fn backpressure_pause(&self) {
        self.backpressure_pauses.inc();
    }

    pub fn attempt(&self, route: &str, upstream: &str, outcome: &'static str) {
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

    pub fn tokens(&self, route: &str, model: &str, u: &sluice_providers::Usage) {
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

    /// One guardrail check's verdict.
    pub fn guardrail(&self, guardrail: &str, verdict: &'static str) {
        self.guardrails
            .get_or_create(&GuardrailLabels {
                guardrail: guardrail.to_string(),
                verdict,
            })
            .inc();
    }

    pub fn continuation(&self, result: &'static str) {
        self.continuations
            .get_or_create(&Reason { reason: result })
            .inc();
    }

    pub fn retry(&self, upstream: &str) {
        self.live
            .retries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.retries
            .get_or_create(&UpstreamLabel {
                upstream: upstream.to_string(),
            })
            .inc();
    }

    pub fn fallback(&self, route: &str) {
        self.live
            .fallbacks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.fallbacks
            .get_or_create(&RouteLabel {
                route: route.to_string(),
            })
            .inc();
    }

    pub fn retry_budget_exhausted(&self, upstream: &str) {
        self.retry_budget_exhausted
            .get_or_create(&UpstreamLabel {
                upstream: upstream.to_string(),
            })
            .inc();
    }

    pub fn acquire_wait(&self, upstream: &str, lane: &'static str, wait: Duration) {
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
        assert_eq!(EndReason::ALL.len(), EndReason::ContentBlocked as usize + 1);
    }

    #[test]
    fn tokens_are_counted_by_route_model_and_kind_and_unreported_kinds_show_no_series() {
        let t = Telemetry::default();
        let usage = |input, output, cached_input, reasoning| sluice_providers::Usage {
            input,
            output,
            cached_input,
            reasoning,
            cache_write: 0,
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
