//! Evidence for tests: what every connection and request did, and when.
//!
//! Timestamps are `tokio::time::Instant`s in the library API (so tests can compare them with
//! their own clock) and milliseconds since the server started in the JSON snapshot.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use tokio::time::Instant;

use crate::shapes::Api;

/// How many request records are kept; older ones are dropped (totals still count them), so a
/// long benchmark cannot grow the mock's memory without bound.
pub const DEFAULT_MAX_RECORDS: usize = 100_000;

/// The wire protocol of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Protocol {
    /// HTTP/1.1, plain or over TLS.
    #[serde(rename = "http/1.1")]
    Http1,
    /// HTTP/2 with prior knowledge over plain TCP.
    #[serde(rename = "h2c")]
    H2c,
    /// HTTP/2 negotiated by ALPN over TLS.
    #[serde(rename = "h2")]
    H2,
}

/// How a request ended, or that it has not ended yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "reason")]
pub enum Outcome {
    /// Still being served.
    InProgress,
    /// The whole response was sent.
    Completed,
    /// The client went away first. The reason says how the mock noticed: `rst_stream`,
    /// `connection_closed`, `write_error` or `client_gone` (HTTP/1.1 body dropped).
    Cancelled(String),
    /// An injected fault ended it: `abort_after`, `reset_before_headers`, `fail_with=reset` or
    /// `close` (and every request the closed connection carried), `silent` giving up.
    Aborted,
    /// Refused before processing (`refuse`, or a stream that arrived after GOAWAY began).
    Refused,
}

/// A request that carried an assistant prefill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PrefillRecord {
    /// Bytes of prefill text.
    pub bytes: usize,
    /// Whether the answer continued from it (it was a prefix of the whole answer); `false`
    /// when the mock answered the whole text instead, or rejected it (`prefill=reject`).
    pub continued: bool,
}

/// What routing learned about a request, for its record. Defined here and carried by
/// `route.rs` beside its reply, so that the stats never depend on how a request is routed.
#[derive(Debug)]
pub(crate) struct Routing {
    pub(crate) api: Api,
    pub(crate) model: Option<String>,
    pub(crate) stream: bool,
    pub(crate) prefill: Option<PrefillRecord>,
    /// The injected fault that decided the reply, if one did.
    pub(crate) fault: Option<String>,
    /// What the cloud authentication (SigV4, a bearer token, a token grant) came to.
    pub(crate) auth: Option<AuthEvent>,
}

/// What a request's cloud authentication came to: a token endpoint's grant, or the check of
/// a model path's credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AuthEvent {
    /// `POST /token` issued a token.
    GoogleTokenIssued,
    /// `POST /{tenant}/oauth2/v2.0/token` issued a token.
    EntraTokenIssued,
    /// A token endpoint refused the grant (or failed it on command).
    TokenRefused,
    /// A Bedrock request's SigV4 signature verified.
    SigV4Accepted,
    /// A Bedrock request's signature was missing, malformed, expired or wrong.
    SigV4Rejected,
    /// A Vertex or Azure request's bearer token was live.
    BearerAccepted,
    /// No credentials on a path that needs them.
    BearerMissing,
    /// A token the mock issued, expired.
    BearerExpired,
    /// A token the mock never issued (or forgot, or revoked).
    BearerUnknown,
    /// An Azure request with an `api-key` (not checked, as the other keys are not).
    ApiKey,
}

impl AuthEvent {
    /// The label in [`ReqRecord::auth`].
    pub(crate) fn label(self) -> &'static str {
        match self {
            AuthEvent::GoogleTokenIssued => "google_token_issued",
            AuthEvent::EntraTokenIssued => "entra_token_issued",
            AuthEvent::TokenRefused => "token_refused",
            AuthEvent::SigV4Accepted => "sigv4_accepted",
            AuthEvent::SigV4Rejected => "sigv4_rejected",
            AuthEvent::BearerAccepted => "bearer_accepted",
            AuthEvent::BearerMissing => "bearer_missing",
            AuthEvent::BearerExpired => "bearer_expired",
            AuthEvent::BearerUnknown => "bearer_unknown",
            AuthEvent::ApiKey => "api_key",
        }
    }

    fn count(self, t: &mut AuthTotals) {
        let field = match self {
            AuthEvent::GoogleTokenIssued => &mut t.google_tokens_issued,
            AuthEvent::EntraTokenIssued => &mut t.entra_tokens_issued,
            AuthEvent::TokenRefused => &mut t.token_requests_refused,
            AuthEvent::SigV4Accepted => &mut t.sigv4_accepted,
            AuthEvent::SigV4Rejected => &mut t.sigv4_rejected,
            AuthEvent::BearerAccepted => &mut t.bearer_accepted,
            AuthEvent::BearerMissing | AuthEvent::BearerUnknown => &mut t.bearer_rejected,
            AuthEvent::BearerExpired => &mut t.bearer_expired,
            AuthEvent::ApiKey => &mut t.api_key_accepted,
        };
        *field += 1;
    }
}

/// The cloud authentication counters (part of [`Totals`]).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct AuthTotals {
    /// Tokens `POST /token` issued (Vertex AI).
    pub google_tokens_issued: u64,
    /// Tokens `POST /{tenant}/oauth2/v2.0/token` issued (Azure OpenAI, Entra ID).
    pub entra_tokens_issued: u64,
    /// Token requests refused (a bad assertion or secret, or an injected failure).
    pub token_requests_refused: u64,
    /// Bedrock requests whose SigV4 signature verified.
    pub sigv4_accepted: u64,
    /// Bedrock requests refused for their signature (missing, wrong, expired, unknown key).
    pub sigv4_rejected: u64,
    /// Vertex and Azure requests with a live bearer token.
    pub bearer_accepted: u64,
    /// Vertex and Azure requests refused with 401 for an expired token.
    pub bearer_expired: u64,
    /// Vertex and Azure requests refused with 401 for no or an unknown token.
    pub bearer_rejected: u64,
    /// Azure requests with an `api-key` instead of a token.
    pub api_key_accepted: u64,
}

/// Why the server closed a connection on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// `h1_idle_timeout`: a kept-alive HTTP/1.1 connection was idle too long.
    IdleTimeout,
    /// `h1_stale_close`: a request arrived on a kept-alive connection idle for too long and
    /// was not processed.
    StaleClose,
    /// `fail_with=close`: a request's fault closed the whole connection.
    FaultClose,
}

/// One connection.
#[derive(Clone, Debug)]
pub struct ConnRecord {
    /// Server-assigned id, also recorded on each of its requests.
    pub id: u64,
    /// Wire protocol.
    pub protocol: Protocol,
    /// Whether TLS carried it.
    pub tls: bool,
    /// When it was accepted.
    pub opened_at: Instant,
    /// When it ended.
    pub closed_at: Option<Instant>,
    /// Streams (HTTP/2) or requests (HTTP/1.1) received.
    pub streams_total: u64,
    /// Streams open right now.
    pub active_streams: u64,
    /// The most streams that were open at the same time.
    pub max_concurrent_streams: u64,
    /// When the server began a GOAWAY (HTTP/1.1: sent `Connection: close`).
    pub goaway_at: Option<Instant>,
    /// Streams refused with REFUSED_STREAM.
    pub refused_streams: u64,
    /// The write throttle in force (`degrade`), bytes per second.
    pub degrade_bytes_per_s: Option<u64>,
    /// Why the server closed it on its own, if it did.
    pub close_reason: Option<CloseReason>,
}

/// One request.
#[derive(Clone, Debug)]
pub struct ReqRecord {
    /// Server-assigned id, sent back as `x-mock-request-id`.
    pub id: u64,
    /// The connection that carried it.
    pub conn_id: u64,
    /// HTTP/2 stream id (0 on HTTP/1.1).
    pub stream_id: u32,
    /// Method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The request headers as received (lower-case names).
    pub headers: Vec<(String, String)>,
    /// The API the path speaks (`None` for a request rejected before routing).
    pub api: Option<Api>,
    /// The body's (Gemini: the path's) `model`, when it had one.
    pub model: Option<String>,
    /// The request body as received, up to [`MockConfig::max_recorded_body`] bytes
    /// (`body_truncated` says when it was longer).
    ///
    /// [`MockConfig::max_recorded_body`]: crate::MockConfig::max_recorded_body
    pub body: Bytes,
    /// Whether `body` is only the beginning of a longer body.
    pub body_truncated: bool,
    /// The assistant prefill it carried, if any.
    pub prefill: Option<PrefillRecord>,
    /// The injected fault that decided its response, if one did: `fail_first`,
    /// `fail_for_ms`, `flap`, `reset_before_headers`, `silent`, `status`, `error:KIND`,
    /// `stream_error:KIND`, `prefill_rejected`.
    pub fault: Option<String>,
    /// What its cloud authentication came to: `google_token_issued`, `entra_token_issued`,
    /// `token_refused`, `sigv4_accepted`, `sigv4_rejected`, `bearer_accepted`,
    /// `bearer_missing`, `bearer_expired`, `bearer_unknown`, `api_key`; `None` on paths
    /// without cloud authentication.
    pub auth: Option<&'static str>,
    /// Whether the response was a stream.
    pub stream: bool,
    /// Response status; 0 when no response was sent (`reset_before_headers`, `silent`, ...).
    pub status: u16,
    /// When the request arrived.
    pub started: Instant,
    /// When the first body byte was handed to the connection.
    pub first_byte_at: Option<Instant>,
    /// When it completed, was aborted or refused.
    pub finished_at: Option<Instant>,
    /// When the mock saw the client go away.
    pub cancelled_at: Option<Instant>,
    /// How it ended.
    pub outcome: Outcome,
    /// SSE events written.
    pub events_sent: u64,
    /// Body bytes written.
    pub bytes_sent: u64,
    /// Total time writes waited because the client (or the degraded link) did not take data.
    pub write_blocked: Duration,
}

/// Counters over the server's whole life (not bounded by the record cap).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Totals {
    /// Connections accepted.
    pub connections: u64,
    /// Requests received (excluding `/__mock/*`).
    pub requests: u64,
    /// Requests completed.
    pub completed: u64,
    /// Requests cancelled by the client.
    pub cancelled: u64,
    /// Requests ended by an injected abort.
    pub aborted: u64,
    /// Requests refused.
    pub refused: u64,
    /// GOAWAYs begun.
    pub goaways: u64,
    /// Requests whose response an injected fault decided (see [`ReqRecord::fault`]).
    pub faults: u64,
    /// Requests that carried an assistant prefill.
    pub prefills: u64,
    /// HTTP/1.1 connections closed by `h1_idle_timeout`.
    pub h1_idle_closes: u64,
    /// HTTP/1.1 connections closed by `h1_stale_close` when a request arrived.
    pub h1_stale_closes: u64,
    /// Requests being served right now.
    pub in_progress: u64,
    /// Cloud authentication: tokens issued, signatures and tokens accepted and refused.
    pub auth: AuthTotals,
}

/// A point-in-time copy of everything recorded.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// When the server started: the zero of the JSON timestamps.
    pub started: Instant,
    /// The same moment as Unix time in milliseconds, so another process can line its own clock
    /// up with the JSON timestamps (e.g. a load generator measuring cancel latency).
    pub started_unix_ms: f64,
    /// Connections, oldest first.
    pub connections: Vec<ConnRecord>,
    /// Requests, oldest first.
    pub requests: Vec<ReqRecord>,
    /// Lifetime counters.
    pub totals: Totals,
}

impl Snapshot {
    /// The request with this id, if still recorded.
    pub fn request(&self, id: u64) -> Option<&ReqRecord> {
        self.requests.iter().find(|r| r.id == id)
    }

    /// The connection with this id, if still recorded.
    pub fn connection(&self, id: u64) -> Option<&ConnRecord> {
        self.connections.iter().find(|c| c.id == id)
    }

    /// The snapshot as the JSON served at `GET /__mock/stats`.
    pub fn to_json(&self) -> serde_json::Value {
        let ms = |t: Instant| t.saturating_duration_since(self.started).as_secs_f64() * 1000.0;
        let oms = |t: Option<Instant>| t.map(ms);
        let conns: Vec<_> = self
            .connections
            .iter()
            .map(|c| {
                serde_json::json!({
                    "id": c.id, "protocol": c.protocol, "tls": c.tls,
                    "opened_at_ms": ms(c.opened_at), "closed_at_ms": oms(c.closed_at),
                    "streams_total": c.streams_total, "active_streams": c.active_streams,
                    "max_concurrent_streams": c.max_concurrent_streams,
                    "goaway_at_ms": oms(c.goaway_at), "refused_streams": c.refused_streams,
                    "degrade_bytes_per_s": c.degrade_bytes_per_s,
                    "close_reason": c.close_reason,
                })
            })
            .collect();
        let reqs: Vec<_> = self
            .requests
            .iter()
            .map(|r| {
                let headers: serde_json::Map<_, _> = r
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect();
                serde_json::json!({
                    "id": r.id, "connection_id": r.conn_id, "stream_id": r.stream_id,
                    "method": r.method, "path": r.path, "headers": headers, "api": r.api,
                    "model": r.model, "stream": r.stream, "status": r.status,
                    "body": String::from_utf8_lossy(&r.body), "body_truncated": r.body_truncated,
                    "prefill": r.prefill, "fault": r.fault, "auth": r.auth,
                    "started_ms": ms(r.started), "first_byte_ms": oms(r.first_byte_at),
                    "finished_ms": oms(r.finished_at), "cancelled_ms": oms(r.cancelled_at),
                    "outcome": r.outcome, "events_sent": r.events_sent,
                    "bytes_sent": r.bytes_sent,
                    "write_blocked_ms": r.write_blocked.as_secs_f64() * 1000.0,
                })
            })
            .collect();
        serde_json::json!({
            "started_unix_ms": self.started_unix_ms,
            "connections": conns,
            "requests": reqs,
            "totals": self.totals,
        })
    }
}

/// The shared recorder. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Stats {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    started: Instant,
    started_unix_ms: f64,
    max_records: usize,
    next_conn: u64,
    next_req: u64,
    conns: VecDeque<Arc<Mutex<ConnRecord>>>,
    reqs: VecDeque<Arc<Mutex<ReqRecord>>>,
    totals: Totals,
}

// A poisoned lock only means a panic elsewhere already failed a test; the records stay usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Stats {
    /// A recorder that keeps at most `max_records` connections and requests each.
    pub fn new(max_records: usize) -> Self {
        Stats {
            inner: Arc::new(Mutex::new(Inner {
                started: Instant::now(),
                started_unix_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64() * 1000.0),
                max_records: max_records.max(1),
                next_conn: 1,
                next_req: 1,
                conns: VecDeque::new(),
                reqs: VecDeque::new(),
                totals: Totals::default(),
            })),
        }
    }

    /// Copies everything recorded so far.
    pub fn snapshot(&self) -> Snapshot {
        let inner = lock(&self.inner);
        Snapshot {
            started: inner.started,
            started_unix_ms: inner.started_unix_ms,
            connections: inner.conns.iter().map(|c| lock(c).clone()).collect(),
            requests: inner.reqs.iter().map(|r| lock(r).clone()).collect(),
            totals: inner.totals.clone(),
        }
    }

    /// The lifetime counters alone, without copying any record.
    pub fn totals(&self) -> Totals {
        lock(&self.inner).totals.clone()
    }

    /// Forgets all records and zeroes the totals. Live connections and requests keep
    /// recording into records that are no longer listed.
    pub fn reset(&self) {
        let mut inner = lock(&self.inner);
        inner.conns.clear();
        inner.reqs.clear();
        inner.totals = Totals::default();
    }

    pub(crate) fn open_conn(&self, protocol: Protocol, tls: bool) -> ConnStats {
        let mut inner = lock(&self.inner);
        let id = inner.next_conn;
        inner.next_conn += 1;
        inner.totals.connections += 1;
        let rec = Arc::new(Mutex::new(ConnRecord {
            id,
            protocol,
            tls,
            opened_at: Instant::now(),
            closed_at: None,
            streams_total: 0,
            active_streams: 0,
            max_concurrent_streams: 0,
            goaway_at: None,
            refused_streams: 0,
            degrade_bytes_per_s: None,
            close_reason: None,
        }));
        if inner.conns.len() >= inner.max_records {
            inner.conns.pop_front();
        }
        inner.conns.push_back(rec.clone());
        ConnStats {
            id,
            rec,
            stats: self.clone(),
        }
    }

    fn bump(&self, f: impl FnOnce(&mut Totals)) {
        f(&mut lock(&self.inner).totals)
    }
}

/// Recording handle of one connection. Marks it closed when dropped.
#[derive(Debug)]
pub(crate) struct ConnStats {
    pub(crate) id: u64,
    rec: Arc<Mutex<ConnRecord>>,
    stats: Stats,
}

impl ConnStats {
    /// Records a new stream and returns the request's recorder. The request is counted as
    /// active until the returned handle is dropped.
    pub(crate) fn open_request(&self, stream_id: u32, parts: &http::request::Parts) -> ReqStats {
        {
            let mut c = lock(&self.rec);
            c.streams_total += 1;
            c.active_streams += 1;
            c.max_concurrent_streams = c.max_concurrent_streams.max(c.active_streams);
        }
        let mut inner = lock(&self.stats.inner);
        let id = inner.next_req;
        inner.next_req += 1;
        inner.totals.requests += 1;
        inner.totals.in_progress += 1;
        let headers = parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let rec = Arc::new(Mutex::new(ReqRecord {
            id,
            conn_id: self.id,
            stream_id,
            method: parts.method.to_string(),
            path: parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.path().to_string(), |p| p.to_string()),
            headers,
            api: None,
            model: None,
            body: Bytes::new(),
            body_truncated: false,
            prefill: None,
            fault: None,
            auth: None,
            stream: false,
            status: 0,
            started: Instant::now(),
            first_byte_at: None,
            finished_at: None,
            cancelled_at: None,
            outcome: Outcome::InProgress,
            events_sent: 0,
            bytes_sent: 0,
            write_blocked: Duration::ZERO,
        }));
        if inner.reqs.len() >= inner.max_records {
            inner.reqs.pop_front();
        }
        inner.reqs.push_back(rec.clone());
        ReqStats {
            id,
            rec,
            conn: self.rec.clone(),
            stats: self.stats.clone(),
        }
    }

    pub(crate) fn goaway(&self) {
        let mut c = lock(&self.rec);
        if c.goaway_at.is_none() {
            c.goaway_at = Some(Instant::now());
            drop(c);
            self.stats.bump(|t| t.goaways += 1);
        }
    }

    pub(crate) fn refused_stream(&self) {
        lock(&self.rec).refused_streams += 1;
        self.stats.bump(|t| {
            t.requests += 1;
            t.refused += 1;
        });
    }

    pub(crate) fn degrade(&self, bytes_per_s: u64) {
        lock(&self.rec).degrade_bytes_per_s = Some(bytes_per_s);
    }

    /// Records that the server closed the connection on its own, and why.
    pub(crate) fn closed_by_server(&self, reason: CloseReason) {
        lock(&self.rec).close_reason = Some(reason);
        self.stats.bump(|t| match reason {
            CloseReason::IdleTimeout => t.h1_idle_closes += 1,
            CloseReason::StaleClose => t.h1_stale_closes += 1,
            CloseReason::FaultClose => {}
        });
    }
}

impl Drop for ConnStats {
    fn drop(&mut self) {
        lock(&self.rec).closed_at = Some(Instant::now());
    }
}

/// Recording handle of one request. If it is dropped while the request is still in progress,
/// the request is recorded as cancelled at that moment: whatever path the client's departure
/// took (a dropped service future, a dropped body), the drop is when the mock learned of it.
#[derive(Debug)]
pub(crate) struct ReqStats {
    pub(crate) id: u64,
    rec: Arc<Mutex<ReqRecord>>,
    conn: Arc<Mutex<ConnRecord>>,
    stats: Stats,
}

impl ReqStats {
    /// Records what routing learned about the request.
    pub(crate) fn set_routed(&self, routed: &Routing) {
        let mut r = lock(&self.rec);
        r.api = Some(routed.api);
        r.model.clone_from(&routed.model);
        r.stream = routed.stream;
        r.prefill = routed.prefill;
        r.fault.clone_from(&routed.fault);
        r.auth = routed.auth.map(AuthEvent::label);
        drop(r);
        self.stats.bump(|t| {
            t.faults += u64::from(routed.fault.is_some());
            t.prefills += u64::from(routed.prefill.is_some());
            if let Some(a) = routed.auth {
                a.count(&mut t.auth);
            }
        });
    }

    /// Keeps the first `max` bytes of the request body as evidence.
    pub(crate) fn set_body(&self, body: &Bytes, max: usize) {
        let mut r = lock(&self.rec);
        if body.len() > max {
            // A copy, so a huge body is not kept alive by its first bytes.
            r.body = Bytes::copy_from_slice(&body[..max]);
            r.body_truncated = true;
        } else {
            r.body = body.clone();
        }
    }

    pub(crate) fn set_status(&self, status: u16) {
        lock(&self.rec).status = status;
    }

    pub(crate) fn sent(&self, bytes: usize, events: u64, blocked: Duration) {
        let mut r = lock(&self.rec);
        if r.first_byte_at.is_none() && bytes > 0 {
            r.first_byte_at = Some(Instant::now());
        }
        r.bytes_sent += bytes as u64;
        r.events_sent += events;
        r.write_blocked += blocked;
    }

    /// Records the end of the request, once; later calls are ignored.
    pub(crate) fn end(&self, outcome: Outcome) {
        let mut r = lock(&self.rec);
        if r.outcome != Outcome::InProgress {
            return;
        }
        let now = Instant::now();
        match outcome {
            Outcome::Cancelled(_) => r.cancelled_at = Some(now),
            _ => r.finished_at = Some(now),
        }
        r.outcome = outcome.clone();
        drop(r);
        self.stats.bump(|t| {
            t.in_progress = t.in_progress.saturating_sub(1);
            match outcome {
                Outcome::Completed => t.completed += 1,
                Outcome::Cancelled(_) => t.cancelled += 1,
                Outcome::Aborted => t.aborted += 1,
                Outcome::Refused => t.refused += 1,
                Outcome::InProgress => {}
            }
        });
    }
}

impl Drop for ReqStats {
    fn drop(&mut self) {
        // A request cut because the server closed its connection on its own (a fault) was
        // not cancelled by the client.
        let server_closed = lock(&self.conn).close_reason.is_some();
        self.end(if server_closed {
            Outcome::Aborted
        } else {
            Outcome::Cancelled("client_gone".into())
        });
        let mut c = lock(&self.conn);
        c.active_streams = c.active_streams.saturating_sub(1);
    }
}
