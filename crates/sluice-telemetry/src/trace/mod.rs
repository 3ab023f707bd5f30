//! OpenTelemetry traces: one span per request, a child span per upstream attempt and, under
//! the attempt that answered, one per upstream phase (acquire, dns, connect, tls, first byte);
//! attributes from the GenAI semantic conventions; the W3C `traceparent` continued from the
//! client and sent upstream; OTLP/HTTP protobuf export, batched on its own task.
//!
//! The request path pays for what it samples only: with no `[telemetry] endpoint` nothing is
//! done; an unsampled request costs a header lookup and a random number. Finished spans go
//! into a bounded queue without waiting (full: dropped and counted), so a slow or dead
//! collector never slows a request; the exporter task sends them in batches.
//!
//! The small API the request path calls (through `RequestRecord`): `Tracer::start_request` when
//! the request begins (it rewrites `traceparent` so the upstream continues the trace under the
//! request span), `RequestSpan::observe_body` / `observe_sse` for usage, and `Tracer::finish`
//! once, from `RequestRecord::finish`, with the attempts and phases.

mod context;
mod export;
mod genai;
mod otlp;
mod span;

use std::sync::Arc;

use http::HeaderMap;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use sluice_providers::Operation;
use tokio::time::Instant;

pub use context::TraceContext;
pub use export::{poster, Poster};
pub use span::{AttemptSpan, RequestSpan};

use export::{Exporter, SpanQueue};
use sluice_config::TelemetryConfig;
use span::{AttrValue, Clock, SpanData, SpanKind, StatusCode};

/// What the request span records when the request ends.
#[derive(Debug)]
pub struct RequestEnd<'a> {
    pub request_id: &'a str,
    pub route: &'a str,
    pub model: &'a str,
    pub upstream: &'a str,
    pub status: u16,
    pub end_reason: &'static str,
    /// The request failed (the span's status is an error).
    pub error: bool,
    pub started: Instant,
    pub attempts: Vec<AttemptSpan>,
}

/// The trace side of the gateway: sampling, span ids and the export queue.
#[derive(Debug)]
pub struct Tracer {
    ratio: f64,
    rng: Mutex<fastrand::Rng>,
    queue: Arc<SpanQueue>,
}

impl Tracer {
    /// Starts the exporter task (on the current runtime) when `cfg` names an endpoint, and
    /// registers its counters. `None` when traces are off.
    pub fn start(cfg: &TelemetryConfig, registry: &mut Registry) -> Option<Tracer> {
        let endpoint = cfg.endpoint.clone()?;
        let queue = Arc::new(SpanQueue::new(cfg.queue_size, cfg.batch_size));
        queue.register(registry);
        match Exporter::new(cfg, endpoint, queue.clone()) {
            Ok(exporter) => {
                tokio::spawn(exporter.run());
            }
            Err(e) => {
                // Validation accepted the URL, so this is the connection layer refusing it:
                // the gateway runs without traces rather than not at all.
                tracing::error!(error = %e, "telemetry.endpoint: traces are off");
                return None;
            }
        }
        Some(Tracer {
            ratio: cfg.sampling_ratio,
            rng: Mutex::new(fastrand::Rng::new()),
            queue,
        })
    }

    /// Begins a request's span when the request is sampled: the client's `traceparent`
    /// decides (its sampled flag), else `sampling_ratio` on a new trace id. A sampled
    /// request's `traceparent` is replaced by the request span's, so the upstream continues
    /// the trace under it; an unsampled one's headers are left as they came.
    pub fn start_request(
        &self,
        headers: &mut HeaderMap,
        op: Operation,
    ) -> Option<Box<RequestSpan>> {
        let parent = headers
            .get("traceparent")
            .and_then(|v| TraceContext::parse(v.as_bytes()));
        let (trace_id, span_id) = {
            let mut rng = self.rng.lock();
            let trace_id = match &parent {
                Some(p) => p.trace_id,
                None => context::new_trace_id(&mut rng),
            };
            (trace_id, context::new_span_id(&mut rng))
        };
        let sampled = match &parent {
            Some(p) => p.sampled(),
            None => context::ratio_sampled(&trace_id, self.ratio),
        };
        if !sampled {
            return None;
        }
        let ours = TraceContext {
            trace_id,
            span_id,
            flags: 0x01,
        };
        headers.insert("traceparent", ours.header());
        Some(Box::new(RequestSpan {
            trace_id,
            span_id,
            parent_span_id: parent.map(|p| p.span_id),
            clock: Clock::now(),
            operation: genai::operation_name(op),
            provider: genai::provider_name(op.family()),
            usage: genai::Usage::default(),
        }))
    }

    /// Ends a request's span: it, its attempts and their phases go to the export queue, or
    /// are dropped and counted when it is full. Never waits.
    pub fn finish(&self, span: Box<RequestSpan>, end: RequestEnd<'_>) {
        let spans = request_spans(&span, end, Instant::now(), &mut self.rng.lock());
        self.queue.push(spans);
    }
}

/// A tool call of the MCP gateway, as its span records it (GenAI conventions: `execute_tool`).
#[derive(Debug)]
pub struct ToolCallEnd<'a> {
    /// The client's `traceparent`, when it sent one: the span continues its trace.
    pub traceparent: Option<&'a [u8]>,
    /// The server's name and its own tool name.
    pub server: &'a str,
    pub tool: &'a str,
    /// The caller's key id (never the key).
    pub key_id: Option<&'a str>,
    /// How it ended (`ok`, `refused`, `timeout`, ...).
    pub outcome: &'static str,
    /// The call failed (the span's status is an error).
    pub error: bool,
    /// From the request to the end of the answer; the span ends now.
    pub latency: std::time::Duration,
}

impl Tracer {
    /// Ends a tool call's span (`execute_tool server__tool`): sampled as a request is (the
    /// client's `traceparent`, else `sampling_ratio`), queued without waiting.
    pub fn tool_call(&self, end: ToolCallEnd<'_>) {
        let parent = end.traceparent.and_then(TraceContext::parse);
        let (trace_id, span_id) = {
            let mut rng = self.rng.lock();
            let trace_id = match &parent {
                Some(p) => p.trace_id,
                None => context::new_trace_id(&mut rng),
            };
            (trace_id, context::new_span_id(&mut rng))
        };
        let sampled = match &parent {
            Some(p) => p.sampled(),
            None => context::ratio_sampled(&trace_id, self.ratio),
        };
        if !sampled {
            return;
        }
        let name = if end.server.is_empty() {
            end.tool.to_string()
        } else {
            format!("{}__{}", end.server, end.tool)
        };
        let mut attrs: Vec<(&'static str, AttrValue)> = vec![
            ("gen_ai.operation.name", "execute_tool".into()),
            ("gen_ai.tool.name", name.as_str().into()),
            ("sluice.mcp.server", end.server.into()),
            ("sluice.end_reason", end.outcome.into()),
        ];
        if let Some(k) = end.key_id {
            attrs.push(("sluice.key_id", k.into()));
        }
        if end.error {
            attrs.push(("error.type", end.outcome.into()));
        }
        let now = Instant::now();
        let clock = Clock::now();
        let span = SpanData {
            trace_id,
            span_id,
            parent_span_id: parent.as_ref().map(|p| p.span_id),
            parent_is_remote: parent.is_some(),
            name: format!("execute_tool {name}"),
            kind: SpanKind::Internal,
            start_unix_nanos: clock.unix_nanos(now.checked_sub(end.latency).unwrap_or(now)),
            end_unix_nanos: clock.unix_nanos(now),
            attributes: attrs,
            status: if end.error {
                StatusCode::Error
            } else {
                StatusCode::Unset
            },
            status_message: if end.error {
                end.outcome.to_string()
            } else {
                String::new()
            },
        };
        self.queue.push(vec![span]);
    }
}

/// The request span, then a child per attempt, then the phases of the attempt with timings.
fn request_spans(
    span: &RequestSpan,
    end: RequestEnd<'_>,
    now: Instant,
    rng: &mut fastrand::Rng,
) -> Vec<SpanData> {
    let clock = span.clock;
    let t = |i: Instant| clock.unix_nanos(i);
    let mut attrs: Vec<(&'static str, AttrValue)> = vec![
        ("gen_ai.operation.name", span.operation.into()),
        ("gen_ai.provider.name", span.provider.into()),
        ("sluice.request_id", end.request_id.into()),
        ("sluice.end_reason", end.end_reason.into()),
        ("http.response.status_code", u64::from(end.status).into()),
    ];
    if !end.model.is_empty() {
        attrs.push(("gen_ai.request.model", end.model.into()));
    }
    if !end.route.is_empty() {
        attrs.push(("sluice.route", end.route.into()));
    }
    if !end.upstream.is_empty() {
        attrs.push(("sluice.upstream", end.upstream.into()));
    }
    let u = &span.usage;
    if let Some(m) = &u.response_model {
        attrs.push(("gen_ai.response.model", m.clone().into()));
    }
    if let Some(n) = u.input_tokens {
        attrs.push(("gen_ai.usage.input_tokens", n.into()));
    }
    if let Some(n) = u.output_tokens {
        attrs.push(("gen_ai.usage.output_tokens", n.into()));
    }
    if end.error {
        attrs.push(("error.type", end.end_reason.into()));
    }
    let name = if end.model.is_empty() {
        span.operation.to_string()
    } else {
        format!("{} {}", span.operation, end.model)
    };
    let mut out = Vec::with_capacity(1 + end.attempts.len() * 3);
    out.push(SpanData {
        trace_id: span.trace_id,
        span_id: span.span_id,
        parent_span_id: span.parent_span_id,
        parent_is_remote: span.parent_span_id.is_some(),
        name,
        kind: SpanKind::Server,
        start_unix_nanos: t(end.started),
        end_unix_nanos: t(now),
        attributes: attrs,
        status: if end.error {
            StatusCode::Error
        } else {
            StatusCode::Unset
        },
        status_message: if end.error {
            end.end_reason.to_string()
        } else {
            String::new()
        },
    });
    for (i, a) in end.attempts.iter().enumerate() {
        let attempt_id = context::new_span_id(rng);
        let mut attrs: Vec<(&'static str, AttrValue)> = vec![
            ("gen_ai.operation.name", span.operation.into()),
            ("gen_ai.provider.name", span.provider.into()),
            ("sluice.upstream", a.upstream.as_str().into()),
            ("sluice.attempt", (i as u64 + 1).into()),
            ("sluice.attempt.outcome", a.outcome.into()),
        ];
        if !end.model.is_empty() {
            attrs.push(("gen_ai.request.model", end.model.into()));
        }
        if let Some(s) = a.status {
            attrs.push(("http.response.status_code", u64::from(s).into()));
        }
        let failed = a.outcome != "ok";
        if failed {
            attrs.push(("error.type", a.cause.into()));
        }
        out.push(SpanData {
            trace_id: span.trace_id,
            span_id: attempt_id,
            parent_span_id: Some(span.span_id),
            parent_is_remote: false,
            name: format!("attempt {}", a.upstream),
            kind: SpanKind::Client,
            start_unix_nanos: t(a.started),
            end_unix_nanos: t(a.started + a.duration),
            attributes: attrs,
            status: if failed {
                StatusCode::Error
            } else {
                StatusCode::Unset
            },
            status_message: if failed {
                format!("{}: {}", a.outcome, a.cause)
            } else {
                String::new()
            },
        });
        if let Some(p) = a.timings {
            for (name, from, len) in phases(&p) {
                out.push(SpanData {
                    trace_id: span.trace_id,
                    span_id: context::new_span_id(rng),
                    parent_span_id: Some(attempt_id),
                    parent_is_remote: false,
                    name: name.to_string(),
                    kind: SpanKind::Internal,
                    start_unix_nanos: t(a.started + from),
                    end_unix_nanos: t(a.started + from + len),
                    attributes: Vec::new(),
                    status: StatusCode::Unset,
                    status_message: String::new(),
                });
            }
        }
    }
    out
}

/// The upstream phases laid out from the start of the attempt: waiting for a slot, then
/// (for a new connection) name resolution, TCP connect and TLS, then waiting for the
/// response head after the request was written.
fn phases(
    p: &sluice_upstream::PhaseTimings,
) -> Vec<(&'static str, std::time::Duration, std::time::Duration)> {
    let mut out = Vec::with_capacity(5);
    let mut at = std::time::Duration::ZERO;
    for (name, d) in [
        ("acquire", Some(p.acquire)),
        ("dns", p.dns),
        ("connect", p.connect),
        ("tls", p.tls),
    ] {
        if let Some(d) = d {
            out.push((name, at, d));
            at += d;
        }
    }
    out.push((
        "first_byte",
        p.written,
        p.first_byte.saturating_sub(p.written),
    ));
    out
}

impl Drop for Tracer {
    fn drop(&mut self) {
        // The exporter sends what is queued, then ends.
        self.queue.close();
    }
}

#[cfg(test)]
mod tool_call_tests {
    use super::*;

    fn tracer(ratio: f64) -> Tracer {
        Tracer {
            ratio,
            rng: Mutex::new(fastrand::Rng::with_seed(7)),
            queue: Arc::new(SpanQueue::new(16, 16)),
        }
    }

    fn end<'a>(traceparent: Option<&'a [u8]>, outcome: &'static str) -> ToolCallEnd<'a> {
        ToolCallEnd {
            traceparent,
            server: "github",
            tool: "create_issue",
            key_id: Some("team-a"),
            outcome,
            error: outcome != "ok",
            latency: std::time::Duration::from_millis(12),
        }
    }

    #[test]
    fn a_tool_call_span_continues_the_clients_trace_and_is_named_after_the_tool() {
        let t = tracer(0.0);
        let parent = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        t.tool_call(end(Some(parent), "timeout"));
        let spans = t.queue.take_batch();
        assert_eq!(spans.len(), 1);
        let s = &spans[0];
        assert_eq!(s.name, "execute_tool github__create_issue");
        assert_eq!(hex(&s.trace_id), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(
            s.parent_span_id.map(|p| hex(&p)).as_deref(),
            Some("b7ad6b7169203331")
        );
        assert!(s.parent_is_remote);
        assert_eq!(s.status, StatusCode::Error);
        assert_eq!(s.end_unix_nanos - s.start_unix_nanos, 12_000_000);
        let names: Vec<&str> = s.attributes.iter().map(|(k, _)| *k).collect();
        assert!(names.contains(&"gen_ai.tool.name") && names.contains(&"error.type"));
    }

    #[test]
    fn an_unsampled_parent_or_ratio_records_nothing() {
        let t = tracer(0.0);
        t.tool_call(end(
            Some(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"),
            "ok",
        ));
        t.tool_call(end(None, "ok"));
        assert!(t.queue.take_batch().is_empty());
        let all = tracer(1.0);
        all.tool_call(end(None, "ok"));
        let spans = all.queue.take_batch();
        assert_eq!(spans.len(), 1);
        assert!(spans[0].parent_span_id.is_none());
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
