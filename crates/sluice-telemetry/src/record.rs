//! One request's record: what the request path writes as the request goes (route, model,
//! attempts, timings, usage) and, once, its outcome: metrics, the trace, the dashboard's
//! counters and the access-log line. It observes; settling a key's spend is the gateway's
//! (the record is handed the result).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::end_reason::EndReason;
use crate::metrics::Telemetry;

/// The key a request was made with, as its log line shows it.
#[derive(Clone, Copy, Debug)]
pub struct KeyFacts<'a> {
    /// The key's id (never its secret).
    pub id: &'a str,
    /// Its team, if any.
    pub team: Option<&'a str>,
    /// Its owner, if any.
    pub owner: Option<&'a str>,
}

/// One attempt of a request, as its log line shows it.
#[derive(Clone, Debug)]
pub struct AttemptLog {
    pub upstream: String,
    /// `ok` or the failure class.
    pub outcome: &'static str,
    pub cause: &'static str,
    pub status: Option<u16>,
    /// When the attempt began (its trace span's start).
    pub started: Instant,
    pub duration: Duration,
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
pub struct RequestRecord {
    telemetry: Arc<Telemetry>,
    pub request_id: String,
    pub route: String,
    /// The upstream that answered (the last one tried).
    pub upstream: String,
    /// The price list of the upstream that answered (`openai`, `anthropic`, ...), for the
    /// books.
    pub provider: &'static str,
    /// The client's operation, once the endpoint is known.
    pub op: Option<sluice_providers::Operation>,
    /// Answered by replaying a stored response (`Idempotency-Key`).
    pub replay: bool,
    /// On a route with a response cache: `hit`, `miss` or `bypass` (the access log's
    /// `cache` field, as the answer's `x-sluice-cache` header).
    pub cache_status: Option<sluice_state::CacheStatus>,
    /// The target that served renamed the model: `usage_label` is the model it served (else
    /// the client's `model` was sent as it was).
    pub renamed: bool,
    pub model: String,
    /// The client's address (see `client_ip`), when the request came through the ingress.
    pub client_ip: Option<std::net::IpAddr>,
    /// What went wrong, in full (addresses and OS errors included: the client got the
    /// public version).
    pub error: Option<String>,
    pub status: u16,
    started: Instant,
    first_byte: Option<Duration>,
    pub bytes: u64,
    pub events: u64,
    /// The upstream phases, once the upstream answered (and `last_byte` once its body ended).
    pub timings: Option<sluice_upstream::PhaseTimings>,
    /// Every attempt, in order.
    pub attempts: Vec<AttemptLog>,
    /// The tokens the upstream reported.
    pub usage: Option<sluice_providers::Usage>,
    /// The usage is what was seen before the stream ended early (client gone, cut).
    pub usage_partial: bool,
    /// The `model` label of the token metrics (see `Policy::usage_label`).
    pub usage_label: String,
    /// The guardrails' verdicts and times (`no-secrets(redact:0.1ms),...`), when the route
    /// has any. Boxed: most requests have none.
    pub guardrails: Option<Box<String>>,
    /// Not written to the access log (health checks: a load balancer's probes would drown
    /// the requests).
    pub quiet: bool,
    /// The request's trace span, when it is sampled.
    span: Option<Box<crate::trace::RequestSpan>>,
    /// Set while the request is a stream being relayed (the dashboard's stream ages).
    stream: Option<crate::live::StreamTicket>,
    finished: bool,
}

impl RequestRecord {
    pub fn new(telemetry: Arc<Telemetry>, request_id: String, started: Instant) -> Self {
        RequestRecord {
            telemetry,
            request_id,
            route: String::new(),
            upstream: String::new(),
            provider: "",
            op: None,
            replay: false,
            cache_status: None,
            renamed: false,
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
            guardrails: None,
            quiet: false,
            span: None,
            stream: None,
            finished: false,
        }
    }

    /// Begins the request's trace span if tracing is on and the request is sampled; a
    /// sampled request's `traceparent` is rewritten so the upstream continues the trace.
    pub fn start_trace(&mut self, headers: &mut http::HeaderMap, op: sluice_providers::Operation) {
        if let Some(t) = &self.telemetry.tracer {
            self.span = t.start_request(headers, op);
        }
    }

    /// The response is a stream now being relayed: counted among the live streams until
    /// this log drops, and its upstream first byte is recorded.
    pub fn stream_started(&mut self) {
        self.telemetry
            .live
            .first_byte
            .observe(self.started.elapsed());
        self.stream = Some(self.telemetry.live.stream(self.started));
    }

    /// A non-streaming response body: read for the trace's usage and response model (only
    /// when the request is traced).
    pub fn observe_body(&mut self, body: &[u8]) {
        if let Some(s) = &mut self.span {
            s.observe_body(body);
        }
    }

    /// Relayed SSE bytes: read for the trace's usage and response model (only when the
    /// request is traced).
    pub fn observe_sse(&mut self, bytes: &[u8]) {
        if let Some(s) = &mut self.span {
            s.observe_sse(bytes);
        }
    }

    /// When the request arrived.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// From the request's arrival to its first byte (or first event) sent, once sent.
    pub fn first_byte_after(&self) -> Option<Duration> {
        self.first_byte
    }

    /// Whether the response is a stream being relayed.
    pub fn is_stream(&self) -> bool {
        self.stream.is_some()
    }

    /// Marks the first byte (or first event) now, once.
    pub fn first_byte(&mut self) {
        if self.first_byte.is_none() {
            let t = self.started.elapsed();
            self.first_byte = Some(t);
            self.telemetry.first_byte.observe(t.as_secs_f64());
            if self.stream.is_some() {
                self.telemetry.live.first_event.observe(t);
            }
        }
    }

    pub fn sent(&mut self, bytes: usize, events: u64) {
        self.bytes += bytes as u64;
        self.events += events;
        self.telemetry.relayed_bytes.inc_by(bytes as u64);
        self.telemetry.relayed_events.inc_by(events);
    }

    /// Records the outcome without a key: see [`RequestRecord::finish_keyed`].
    pub fn finish(&mut self, reason: EndReason) {
        self.finish_keyed(reason, None, None);
    }

    /// Records the outcome, once (later calls do nothing): metrics, the trace, the
    /// dashboard's counters and the request's single log line, with the key that made the
    /// request and what it spent, as its admission settled them.
    pub fn finish_keyed(
        &mut self,
        reason: EndReason,
        key: Option<KeyFacts<'_>>,
        spend_micros: Option<u64>,
    ) {
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
        let duration = self.started.elapsed();
        t.request_ended(&self.route, self.status, reason, duration);
        if let Some(u) = &self.usage {
            t.tokens(&self.route, &self.usage_label, u);
        }
        if let Some(u) = &self.usage {
            t.live
                .tokens
                .fetch_add(u.input + u.output, Ordering::Relaxed);
        }
        if let Some(k) = &key {
            let (input, output) = self.usage.map_or((0, 0), |u| (u.input, u.output));
            t.live
                .key_usage(k.id, input, output, spend_micros.unwrap_or(0));
        }
        self.write_access_log(reason, duration, key, spend_micros);
    }

    /// What the request cost, in micro-dollars, for the dashboard's spend rate (once, by
    /// whoever priced it).
    pub fn add_spend(&self, micros: u64) {
        self.telemetry
            .live
            .spend_micros
            .fetch_add(micros, Ordering::Relaxed);
    }

    /// Whether [`RequestRecord::finish_keyed`] has run.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The request's access log line (client values escaped and capped), handed to the
    /// writer without waiting.
    fn write_access_log(
        &self,
        reason: EndReason,
        duration: Duration,
        key: Option<KeyFacts<'_>>,
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
        if let Some(c) = self.cache_status {
            l.word("cache", c.as_str());
        }
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
            l.str("key", k.id);
            if let Some(team) = k.team {
                l.str("team", team);
            }
            if let Some(owner) = k.owner {
                l.str("owner", owner);
            }
        }
        if let Some(s) = spend_micros.filter(|s| *s > 0) {
            l.u64("spend_micros", s);
        }
        if let Some(g) = &self.guardrails {
            l.str("guardrails", g);
        }
        if let Some(e) = &self.error {
            l.message("error", e);
        }
        log.send(l);
    }
}

impl RequestRecord {
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

impl Drop for RequestRecord {
    fn drop(&mut self) {
        self.finish(EndReason::ClientGone);
    }
}
