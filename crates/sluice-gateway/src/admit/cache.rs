//! The response cache at admission (DESIGN.md invariant 14): what a request on a route with
//! `cache = { ... }` finds, waits for, or records for the next one.
//!
//! Per request (only on a route with a cache; others never reach this module):
//! 1. [`Keys::cache_start`] reads `Cache-Control` and `x-sluice-cache-ttl`, builds the key
//!    (endpoint, model, the canonical body, the namespace: the key's id, or the route's name
//!    when it shares answers), looks it up and, on a miss, joins the single flight;
//! 2. a [`CacheStart::Hit`] is answered by the request path without an upstream call; a
//!    [`CacheStart::Run`] travels with the request in its `Finish` guard: the relay hands it
//!    each event sent ([`CacheRun::event`]), and the answer is stored only when it is a
//!    complete success ([`CacheRun::store_stream`], [`CacheRun::store_whole`]: a 200 that
//!    ended with its terminal event and a finish reason, not content-filtered, within
//!    `max_bytes`); anything else ends the flight unstored.
//!
//! Nothing here fails a request but an unreadable `x-sluice-cache-ttl` (400): a store that is
//! down is a miss, a body that is not JSON is not cached.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::StatusCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use sluice_providers::{Operation, Usage};
use sluice_state::{
    CacheConfig, CacheDirectives, CacheKey, CacheStatus, CachedBody, CachedEvent, CachedResponse,
    CachedUsage, Flight, FlightGuard, InvalidCacheTtl, Lookup, PutOutcome, PutPolicy,
    ResponseCache, Waited,
};
use tokio::time::Instant;

use super::Keys;

mod shape;

/// How many times a request joins a flight whose leader went away before it goes upstream
/// on its own (each time one of the waiters leads the next flight).
const MAX_REJOINS: usize = 3;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteOutcome {
    route: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}

/// The cache's metric families. A clone shares them (what a reload keeps).
#[derive(Clone, Debug, Default)]
pub(crate) struct CacheMetrics {
    lookups: Family<RouteOutcome, Counter>,
    stores: Family<RouteOutcome, Counter>,
    saved_tokens: Family<RouteLabel, Counter>,
}

impl CacheMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "cache",
            "Requests on routes with a response cache, by route and outcome (hit, miss, bypass)",
            self.lookups.clone(),
        );
        registry.register(
            "cache_stores",
            "Answers offered to the response cache, by route and outcome (stored, queued, \
             too_large, not_cacheable, unavailable, dropped; incomplete, content_filter, \
             not_ok: never offered)",
            self.stores.clone(),
        );
        registry.register(
            "cache_saved_tokens",
            "Tokens (input and output) that cache hits did not spend upstream, by route",
            self.saved_tokens.clone(),
        );
    }

    fn lookup(&self, route: &str, status: CacheStatus) {
        self.lookups
            .get_or_create(&RouteOutcome {
                route: route.to_string(),
                outcome: status.as_str(),
            })
            .inc();
    }

    fn store(&self, route: &str, outcome: &'static str) {
        self.stores
            .get_or_create(&RouteOutcome {
                route: route.to_string(),
                outcome,
            })
            .inc();
    }

    /// A hit: what it saved.
    pub(crate) fn saved(&self, route: &str, usage: &CachedUsage) {
        self.saved_tokens
            .get_or_create(&RouteLabel {
                route: route.to_string(),
            })
            .inc_by(usage.input + usage.output);
    }
}

/// What a request on a caching route may do, as admission found it.
pub(crate) enum CacheStart {
    /// A stored answer (or the answer of the identical request it waited for), and its age.
    Hit(Arc<CachedResponse>, Duration),
    /// Go upstream, and offer the answer to the cache (unless `no-store`).
    Run(Option<Box<CacheRun>>, CacheStatus),
}

/// What [`Keys::cache_start`] needs of the request.
pub(crate) struct CacheAsk<'a> {
    pub(crate) route: &'a str,
    pub(crate) config: &'a CacheConfig,
    pub(crate) op: Operation,
    pub(crate) model: &'a str,
    pub(crate) body: &'a [u8],
    /// The virtual key's id, if the request has one.
    pub(crate) key_id: Option<&'a str>,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) stream: bool,
    /// OpenAI `stream_options.include_usage`: a stream with the usage chunk and one without
    /// are different answers to replay, so they are stored apart.
    pub(crate) include_usage: bool,
    /// The names of the request's guardrails (the route's and its key's), `a,b`; empty
    /// without any. Part of the key: an answer stored under some guardrails (the text they
    /// let through, the prompt they rewrote) is not served to a request under others.
    pub(crate) guardrails: &'a str,
    /// The request's deadline: no wait for a flight beyond it.
    pub(crate) deadline: Instant,
    pub(crate) started: Instant,
}

impl Keys {
    /// Looks the request up and, on a miss, joins its flight (see the module's doc).
    ///
    /// # Errors
    /// An `x-sluice-cache-ttl` that is not a duration (the client's 400).
    pub(crate) async fn cache_start(
        &self,
        ask: CacheAsk<'_>,
    ) -> Result<CacheStart, InvalidCacheTtl> {
        let metrics = &self.inner.cache_metrics;
        let directives = CacheDirectives::from_headers(ask.headers)?;
        let status = if directives.lookup {
            CacheStatus::Miss
        } else {
            CacheStatus::Bypass
        };
        let key = match (directives.lookup || directives.store)
            .then(|| cache_key(&ask))
            .flatten()
        {
            Some(key) => key,
            None => {
                // `no-store`, or a body without a canonical form: nothing to look up or keep.
                metrics.lookup(ask.route, CacheStatus::Bypass);
                return Ok(CacheStart::Run(None, CacheStatus::Bypass));
            }
        };
        let run = |flight: Option<FlightGuard>| {
            directives.store.then(|| {
                Box::new(CacheRun {
                    cache: self.inner.cache.clone(),
                    metrics: metrics.clone(),
                    key: key.clone(),
                    policy: ask.config.policy(directives.ttl),
                    flight,
                    op: ask.op,
                    started: ask.started,
                    events: Vec::new(),
                    bytes: 0,
                    spoiled: None,
                })
            })
        };
        if !directives.lookup {
            metrics.lookup(ask.route, status);
            return Ok(CacheStart::Run(run(None), status));
        }
        let cache = &self.inner.cache;
        let wait_until = ask.deadline.min(Instant::now() + ask.config.wait);
        for _ in 0..MAX_REJOINS {
            if let Lookup::Hit(entry, age) = cache.get(&key).await {
                // Stored by a request of the other kind (a stream for a whole body, or the
                // reverse): assembled or re-emitted; if it cannot be, answered upstream, and
                // this request's answer replaces it.
                if let Some(entry) = as_asked(ask.op, ask.stream, entry) {
                    metrics.lookup(ask.route, CacheStatus::Hit);
                    metrics.saved(ask.route, &entry.usage);
                    return Ok(CacheStart::Hit(entry, age));
                }
            }
            match cache.begin(&key) {
                Flight::Leader(guard) => {
                    metrics.lookup(ask.route, status);
                    return Ok(CacheStart::Run(run(Some(guard)), status));
                }
                Flight::Follower(waiter) => match waiter.wait(wait_until).await {
                    Waited::Filled(entry) => {
                        if let Some(entry) = as_asked(ask.op, ask.stream, entry) {
                            metrics.lookup(ask.route, CacheStatus::Hit);
                            metrics.saved(ask.route, &entry.usage);
                            return Ok(CacheStart::Hit(entry, Duration::ZERO));
                        }
                        break;
                    }
                    // The leader went away without an answer: one of its waiters leads next.
                    Waited::Abandoned => continue,
                    // An answer that is not stored (an error, a cut stream, a filter), one of
                    // the other kind, or no answer in time: go upstream.
                    Waited::Uncacheable | Waited::TimedOut => break,
                },
            }
        }
        metrics.lookup(ask.route, status);
        Ok(CacheStart::Run(run(None), status))
    }
}

/// A stored answer in the form the request asked for (a stream, or one body), converted if
/// it was stored in the other.
fn as_asked(
    op: Operation,
    stream: bool,
    entry: Arc<CachedResponse>,
) -> Option<Arc<CachedResponse>> {
    if entry.is_stream() == stream {
        Some(entry)
    } else {
        shape::convert(op, &entry)
    }
}

/// The request's cache key, or `None` when its body has no canonical form (not JSON: such a
/// request is not cached).
fn cache_key(ask: &CacheAsk<'_>) -> Option<CacheKey> {
    let canonical = sluice_providers::cache_key::canonical_body(ask.body).ok()?;
    let namespace: Arc<str> = match (ask.config.shared, ask.key_id) {
        (true, _) => format!("route:{}", ask.route).into(),
        (false, Some(id)) => format!("key:{id}").into(),
        // A keyless route has one caller as far as the gateway knows.
        (false, None) => Arc::from("anonymous"),
    };
    let mut endpoint = match (ask.op.as_str(), ask.stream && ask.include_usage) {
        (op, false) => std::borrow::Cow::Borrowed(op),
        (op, true) => std::borrow::Cow::Owned(format!("{op}+usage")),
    };
    if !ask.guardrails.is_empty() {
        // Only with guardrails: the keys of routes without any stay what they were.
        endpoint = std::borrow::Cow::Owned(format!("{endpoint}|guardrails={}", ask.guardrails));
    }
    Some(CacheKey {
        digest: sluice_providers::cache_key::cache_key(
            &endpoint, ask.model, &canonical, &namespace,
        ),
        route: Arc::from(ask.route),
        namespace,
    })
}

// === impl CacheRun ===

/// Why an answer was not offered to the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spoiled {
    /// Not a 200.
    NotOk,
    /// A stream without its terminal event or finish reason, an error event inside it, a
    /// continuation spliced in, or a body that is not the API's answer.
    Incomplete,
    /// The output was filtered or refused.
    ContentFilter,
    /// Larger than the route's `max_bytes` while it was being recorded.
    TooLarge,
}

impl Spoiled {
    fn metric_label(self) -> &'static str {
        match self {
            Spoiled::NotOk => "not_ok",
            Spoiled::Incomplete => "incomplete",
            Spoiled::ContentFilter => "content_filter",
            Spoiled::TooLarge => "too_large",
        }
    }
}

/// A request that may store its answer: the key, the rules, the flight it leads (if any),
/// and a stream's events recorded as they are sent. Travels in the request's `Finish`;
/// dropped unstored (the client went away) it abandons its flight, whose waiters then lead
/// another.
pub(crate) struct CacheRun {
    cache: ResponseCache,
    metrics: CacheMetrics,
    key: CacheKey,
    policy: PutPolicy,
    flight: Option<FlightGuard>,
    op: Operation,
    started: Instant,
    events: Vec<CachedEvent>,
    bytes: usize,
    spoiled: Option<Spoiled>,
}

impl std::fmt::Debug for CacheRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheRun")
            .field("key", &self.key)
            .field("leader", &self.flight.is_some())
            .field("events", &self.events.len())
            .finish()
    }
}

impl CacheRun {
    /// A stream's event as sent to the client. Past `max_bytes` the recording stops (the
    /// answer cannot be stored) and its memory is freed.
    pub(crate) fn event(&mut self, bytes: &Bytes) {
        if self.spoiled.is_some() {
            return;
        }
        self.bytes += bytes.len();
        if self.bytes > self.policy.max_bytes {
            self.spoil(Spoiled::TooLarge);
            return;
        }
        self.events.push(CachedEvent {
            bytes: bytes.clone(),
            offset: self.started.elapsed(),
        });
    }

    /// The answer cannot be stored whatever follows (an error event after the commit, a
    /// continuation spliced in).
    pub(crate) fn spoil_incomplete(&mut self) {
        self.spoil(Spoiled::Incomplete);
    }

    fn spoil(&mut self, why: Spoiled) {
        if self.spoiled.is_none() {
            self.spoiled = Some(why);
            self.events = Vec::new();
        }
    }

    /// The stream ended cleanly: stores it if it is a complete success.
    pub(crate) fn store_stream(mut self, status: u16, usage: Option<Usage>) {
        let events = std::mem::take(&mut self.events);
        let verdict = match self.spoiled {
            Some(why) => Err(why),
            None if status != 200 => Err(Spoiled::NotOk),
            None => stream_verdict(self.op, &events),
        };
        let entry = CachedResponse {
            status: StatusCode::OK,
            headers: vec![(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"))],
            body: CachedBody::Events(events),
            usage: cached_usage(usage),
            stored_at: std::time::SystemTime::now(),
        };
        self.offer(verdict.map(|()| entry));
    }

    /// A whole answer was read: stores it if it is a complete success.
    pub(crate) fn store_whole(
        self,
        status: StatusCode,
        headers: &HeaderMap,
        body: &Bytes,
        usage: Option<Usage>,
    ) {
        let verdict = if status != StatusCode::OK {
            Err(Spoiled::NotOk)
        } else {
            whole_verdict(self.op, body)
        };
        let kept: Vec<(HeaderName, HeaderValue)> = headers
            .get(CONTENT_TYPE)
            .map(|v| (CONTENT_TYPE, v.clone()))
            .into_iter()
            .collect();
        let entry = CachedResponse {
            status,
            headers: kept,
            body: CachedBody::Whole(body.clone()),
            usage: cached_usage(usage),
            stored_at: std::time::SystemTime::now(),
        };
        self.offer(verdict.map(|()| entry));
    }

    /// The request ended without an answer to keep (an error, a cut): its flight's waiters
    /// go upstream themselves.
    pub(crate) fn fail(mut self) {
        self.metrics
            .store(&self.key.route, Spoiled::NotOk.metric_label());
        if let Some(f) = self.flight.take() {
            f.uncacheable();
        }
    }

    fn offer(mut self, verdict: Result<CachedResponse, Spoiled>) {
        let outcome = match verdict {
            Ok(entry) => match self.flight.take() {
                Some(f) => f.complete(entry, self.policy),
                None => self.cache.put_detached(&self.key, entry, self.policy),
            },
            Err(why) => {
                if let Some(f) = self.flight.take() {
                    f.uncacheable();
                }
                self.metrics.store(&self.key.route, why.metric_label());
                return;
            }
        };
        if outcome != PutOutcome::Stored && outcome != PutOutcome::Queued {
            tracing::debug!(route = %self.key.route, outcome = outcome.metric_label(), "answer not cached");
        }
        self.metrics.store(&self.key.route, outcome.metric_label());
    }
}

fn cached_usage(usage: Option<Usage>) -> CachedUsage {
    usage.map_or_else(CachedUsage::default, |u| CachedUsage {
        input: u.input,
        output: u.output,
        cached_input: u.cached_input,
        reasoning: u.reasoning,
    })
}

/// The usage a hit saved, in the providers' terms (for the ledger and the key's metrics).
pub(crate) fn saved_usage(u: &CachedUsage) -> Usage {
    Usage {
        input: u.input,
        output: u.output,
        cached_input: u.cached_input,
        reasoning: u.reasoning,
        // Not kept: a hit writes nothing to the provider's cache.
        cache_write: 0,
    }
}

// === /admin/cache ===

/// Answers `/admin/cache`:
/// - `GET`: the cache's counters (entries and bytes in memory; with Redis, shared by every
///   instance, the live entries per route come from its index), hits, misses and hit rate
///   since start, and each caching route's entries and settings;
/// - `DELETE ?route=NAME`: removes every answer the route stored;
/// - `DELETE ?key=ID`: removes every answer of the virtual key's namespace (`?namespace=`
///   names any namespace, e.g. `route:NAME` for a sharing route's).
pub(crate) async fn admin_cache(
    keys: &Keys,
    config: &crate::config::Config,
    method: &http::Method,
    query: &str,
) -> super::AdminReply {
    use serde_json::json;
    use sluice_state::CacheScope;
    let reply = |status: StatusCode, v: serde_json::Value| super::AdminReply {
        status,
        body: Bytes::from(v.to_string()),
    };
    let cache = &keys.inner.cache;
    if method == http::Method::DELETE {
        let mut scope = None;
        for pair in query.split('&') {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value: Arc<str> = Arc::from(value);
            scope = match name {
                "route" if !value.is_empty() => Some(CacheScope::Route(value)),
                "key" if !value.is_empty() => {
                    Some(CacheScope::Namespace(format!("key:{value}").into()))
                }
                "namespace" if !value.is_empty() => Some(CacheScope::Namespace(value)),
                _ => scope,
            };
        }
        let Some(scope) = scope else {
            return reply(
                StatusCode::BAD_REQUEST,
                json!({ "error": "say what to purge: ?route=NAME, ?key=ID or ?namespace=NAME" }),
            );
        };
        return match cache.purge(&scope).await {
            Ok(n) => reply(StatusCode::OK, json!({ "purged": n })),
            Err(e) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "error": "the cache's store did not answer", "reason": e.metric_label() }),
            ),
        };
    }
    if method != http::Method::GET && method != http::Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({ "error": "GET /admin/cache, or DELETE /admin/cache?route=NAME|key=ID" }),
        );
    }
    let stats = cache.stats();
    let mut routes = Vec::new();
    for r in &config.routes {
        let Some(c) = &r.cache else { continue };
        let entries = cache
            .count(&CacheScope::Route(Arc::from(r.name.as_str())))
            .await
            .ok();
        routes.push(json!({
            "route": r.name,
            "entries": entries,
            "ttl_ms": c.ttl.as_millis() as u64,
            "shared": c.shared,
            "max_bytes": c.max_bytes,
            "replay": c.replay.as_str(),
        }));
    }
    reply(
        StatusCode::OK,
        json!({
            "backend": if stats.shared { "redis" } else { "memory" },
            "entries": stats.entries,
            "bytes": stats.bytes,
            "hits": stats.hits,
            "misses": stats.misses,
            "hit_rate": stats.hit_rate(),
            "stores": stats.stores,
            "refused_too_large": stats.refused_too_large,
            "refused_not_cacheable": stats.refused_not_cacheable,
            "evictions": stats.evictions,
            "expired": stats.expired,
            "purged": stats.purged,
            "errors": stats.errors,
            "puts_dropped": stats.puts_dropped,
            "flights_led": stats.leaders,
            "flight_waiters": stats.followers,
            "flight_waiters_served": stats.followers_served,
            "routes": routes,
        }),
    )
}

// === what counts as a complete success ===

/// Whether a stream's events (in the client's API) are a complete success: its terminal event
/// (`[DONE]`, `message_stop`, `response.completed`), a finish reason, no error event, and no
/// content filter. Read once, when a stream on a caching route ends.
fn stream_verdict(op: Operation, events: &[CachedEvent]) -> Result<(), Spoiled> {
    let mut decoder = sluice_sse::Decoder::new();
    for e in events {
        decoder.feed(e.bytes.clone());
    }
    decoder.finish();
    let mut terminal = false;
    let mut finish: Option<bool> = None; // Some(filtered)
    while let Some(item) = decoder.next_item() {
        let Ok(sluice_sse::Item::Event(ev)) = item else {
            continue;
        };
        if terminal {
            // Nothing may follow the terminal event.
            return Err(Spoiled::Incomplete);
        }
        let kind = ev.event_type();
        let data = ev.data();
        if kind == b"error" {
            return Err(Spoiled::Incomplete);
        }
        match op {
            Operation::ChatCompletions | Operation::Completions => {
                if data == b"[DONE]" {
                    terminal = true;
                    continue;
                }
                let v: serde_json::Value =
                    serde_json::from_slice(data).map_err(|_| Spoiled::Incomplete)?;
                if v.get("error").is_some() {
                    return Err(Spoiled::Incomplete);
                }
                for c in v["choices"].as_array().into_iter().flatten() {
                    if let Some(r) = c["finish_reason"].as_str() {
                        let filtered = r == "content_filter";
                        finish = Some(finish.unwrap_or(false) || filtered);
                    }
                }
            }
            Operation::Messages => match kind {
                b"message_stop" => terminal = true,
                b"message_delta" => {
                    let v: serde_json::Value =
                        serde_json::from_slice(data).map_err(|_| Spoiled::Incomplete)?;
                    if let Some(r) = v["delta"]["stop_reason"].as_str() {
                        finish = Some(r == "refusal");
                    }
                }
                _ => {}
            },
            Operation::Responses => match kind {
                b"response.completed" => {
                    terminal = true;
                    finish = Some(false);
                }
                b"response.failed" | b"response.incomplete" => return Err(Spoiled::Incomplete),
                _ => {}
            },
            // Not streamed, or (Gemini) no end marker to tell a whole stream by: not kept.
            Operation::Embeddings
            | Operation::CountTokens
            | Operation::GenerateContent
            | Operation::StreamGenerateContent => return Err(Spoiled::Incomplete),
        }
    }
    match (terminal, finish) {
        (true, Some(false)) => Ok(()),
        (true, Some(true)) => Err(Spoiled::ContentFilter),
        _ => Err(Spoiled::Incomplete),
    }
}

/// Whether a whole 200 body is a complete success: the API's answer, not filtered.
fn whole_verdict(op: Operation, body: &[u8]) -> Result<(), Spoiled> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|_| Spoiled::Incomplete)?;
    if !v.is_object() || v.get("error").is_some_and(|e| !e.is_null()) {
        return Err(Spoiled::Incomplete);
    }
    match op {
        Operation::ChatCompletions | Operation::Completions => {
            let choices = v["choices"].as_array().ok_or(Spoiled::Incomplete)?;
            if choices
                .iter()
                .any(|c| c["finish_reason"].as_str() == Some("content_filter"))
            {
                return Err(Spoiled::ContentFilter);
            }
            Ok(())
        }
        Operation::Messages => match v["stop_reason"].as_str() {
            Some("refusal") => Err(Spoiled::ContentFilter),
            Some(_) => Ok(()),
            None => Err(Spoiled::Incomplete),
        },
        Operation::Responses => match v["status"].as_str() {
            Some("completed") => Ok(()),
            _ if v["incomplete_details"]["reason"].as_str() == Some("content_filter") => {
                Err(Spoiled::ContentFilter)
            }
            _ => Err(Spoiled::Incomplete),
        },
        Operation::Embeddings | Operation::CountTokens => Ok(()),
        Operation::GenerateContent | Operation::StreamGenerateContent => {
            match v
                .pointer("/candidates/0/finishReason")
                .and_then(|r| r.as_str())
            {
                Some("STOP") => Ok(()),
                Some("SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII") => {
                    Err(Spoiled::ContentFilter)
                }
                _ => Err(Spoiled::Incomplete),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(raw: &[&str]) -> Vec<CachedEvent> {
        raw.iter()
            .map(|s| CachedEvent {
                bytes: Bytes::copy_from_slice(s.as_bytes()),
                offset: Duration::ZERO,
            })
            .collect()
    }

    #[test]
    fn only_a_stream_that_ended_with_its_finish_reason_and_terminal_event_is_complete() {
        let chat = |finish: &str| {
            events(&[
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
                &format!(
                    "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":{finish}}}]}}\n\n"
                ),
                "data: [DONE]\n\n",
            ])
        };
        let op = Operation::ChatCompletions;
        assert_eq!(stream_verdict(op, &chat("\"stop\"")), Ok(()));
        assert_eq!(
            stream_verdict(op, &chat("\"content_filter\"")),
            Err(Spoiled::ContentFilter)
        );
        assert_eq!(stream_verdict(op, &chat("null")), Err(Spoiled::Incomplete));
        let mut cut = chat("\"stop\"");
        cut.pop();
        assert_eq!(stream_verdict(op, &cut), Err(Spoiled::Incomplete));
        let mut errored = chat("\"stop\"");
        errored.insert(
            1,
            events(&["data: {\"error\":{\"message\":\"x\"}}\n\n"]).remove(0),
        );
        assert_eq!(stream_verdict(op, &errored), Err(Spoiled::Incomplete));

        let messages = |stop: &str, last: &str| {
            events(&[
                "event: message_start\ndata: {\"type\":\"message_start\"}\n\n",
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n",
                &format!(
                    "event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{stop}\"}}}}\n\n"
                ),
                last,
            ])
        };
        let stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let op = Operation::Messages;
        assert_eq!(stream_verdict(op, &messages("end_turn", stop)), Ok(()));
        assert_eq!(
            stream_verdict(op, &messages("refusal", stop)),
            Err(Spoiled::ContentFilter)
        );
        let error = "event: error\ndata: {\"type\":\"error\"}\n\n";
        assert_eq!(
            stream_verdict(op, &messages("end_turn", error)),
            Err(Spoiled::Incomplete)
        );
        let op = Operation::Responses;
        let done = events(&["event: response.completed\ndata: {}\n\n"]);
        assert_eq!(stream_verdict(op, &done), Ok(()));
        let partial = events(&["event: response.incomplete\ndata: {}\n\n"]);
        assert_eq!(stream_verdict(op, &partial), Err(Spoiled::Incomplete));
    }

    #[test]
    fn a_whole_answer_is_complete_unless_filtered_or_not_the_apis_answer() {
        let op = Operation::ChatCompletions;
        let ok = br#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}"#;
        assert_eq!(whole_verdict(op, ok), Ok(()));
        let filtered = br#"{"choices":[{"finish_reason":"content_filter"}]}"#;
        assert_eq!(whole_verdict(op, filtered), Err(Spoiled::ContentFilter));
        assert_eq!(whole_verdict(op, b"not json"), Err(Spoiled::Incomplete));
        let op = Operation::Messages;
        assert_eq!(whole_verdict(op, br#"{"stop_reason":"end_turn"}"#), Ok(()));
        assert_eq!(
            whole_verdict(op, br#"{"stop_reason":"refusal"}"#),
            Err(Spoiled::ContentFilter)
        );
        let op = Operation::Responses;
        assert_eq!(whole_verdict(op, br#"{"status":"completed"}"#), Ok(()));
        assert_eq!(
            whole_verdict(
                op,
                br#"{"status":"incomplete","incomplete_details":{"reason":"content_filter"}}"#
            ),
            Err(Spoiled::ContentFilter)
        );
        assert_eq!(
            whole_verdict(Operation::Embeddings, br#"{"data":[]}"#),
            Ok(())
        );
    }
}
