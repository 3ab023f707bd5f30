//! One request, left to right once: endpoint, bounded body, model, route, the policy's
//! attempts; and its response right to left once: the SSE relay or a bounded non-streaming
//! body.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{Either, FutureExt};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use sluice_providers::Family;
use sluice_upstream::{PhaseTimings, Upstream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::body_budget::BodyLease;
use crate::config::Config;
use crate::error::GatewayError;
use crate::headers::{self, REQUEST_ID};
use crate::policy::{Answer, Attempt, AttemptFailure, GiveUp, Policy, RequestCtx, RetryBudget};
use crate::relay::{RelaySetup, RelayTimers, SseRelay};
use crate::route::{self, Endpoint, Operation};
use crate::telemetry::{EndReason, RequestLog, Telemetry};

/// Everything requests share: one config's worth. A reload builds a new `State` and swaps it
/// in for new requests (`crate::reload`); a request keeps the one it started with to its end.
pub(crate) struct State {
    pub(crate) config: Config,
    /// Which config this is: its version (1 at start, +1 per reload), hash and load time.
    pub(crate) generation: crate::reload::Generation,
    /// Parallel to `config.upstreams`.
    pub(crate) upstreams: Vec<Upstream>,
    /// Parallel to `config.routes`: each route's tier-0 balancer (kept across a reload when
    /// the route's targets did not change).
    pub(crate) targets: Vec<Arc<crate::targets::RouteTargets>>,
    /// Parallel to `config.upstreams` (kept across a reload with their upstream).
    pub(crate) budgets: Vec<Arc<RetryBudget>>,
    pub(crate) telemetry: Arc<Telemetry>,
    /// Cancelled when the shutdown grace period is over: streams still running end with an
    /// error event. The same token in every generation.
    pub(crate) streams_deadline: CancellationToken,
    /// Set when shutdown begins: new model requests get 503. The same token in every
    /// generation.
    pub(crate) draining: CancellationToken,
    /// What an upstream without `provider` speaks: the client's own API.
    pub(crate) passthrough: crate::outbound::PassthroughProviders,
    /// The upstreams' own model lists, for `GET /v1/models`.
    pub(crate) models: crate::models::ModelCache,
    /// Virtual keys, limits, budgets and idempotency records.
    pub(crate) keys: crate::keys::Keys,
    /// Shared by every generation, so request ids stay unique across reloads.
    request_ids: Arc<AtomicU64>,
    id_prefix: Arc<str>,
    /// Parallel to `config.upstreams`: each name as a header value (`x-sluice-upstream`),
    /// made once instead of once a response.
    upstream_headers: Vec<Option<HeaderValue>>,
}

/// The parts of a [`State`] besides its config: built by `crate::reload::build`.
pub(crate) struct StateParts {
    pub(crate) generation: crate::reload::Generation,
    pub(crate) upstreams: Vec<Upstream>,
    pub(crate) targets: Vec<Arc<crate::targets::RouteTargets>>,
    pub(crate) budgets: Vec<Arc<RetryBudget>>,
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) keys: crate::keys::Keys,
}

impl State {
    /// A state for `config`; `prev` (the running generation, on a reload) hands over what
    /// outlives a config: the shutdown tokens and the request id sequence.
    pub(crate) fn new(config: Config, parts: StateParts, prev: Option<&State>) -> Self {
        let StateParts {
            generation,
            upstreams,
            targets,
            budgets,
            telemetry,
            keys,
        } = parts;
        let (streams_deadline, draining, request_ids, id_prefix) = match prev {
            Some(p) => (
                p.streams_deadline.clone(),
                p.draining.clone(),
                p.request_ids.clone(),
                p.id_prefix.clone(),
            ),
            None => {
                // A per-process prefix keeps generated ids unique across restarts without a
                // RNG crate.
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                (
                    CancellationToken::new(),
                    CancellationToken::new(),
                    Arc::new(AtomicU64::new(0)),
                    Arc::from(format!("sl-{:x}{:x}", nanos as u64, std::process::id())),
                )
            }
        };
        let upstream_headers = config
            .upstreams
            .iter()
            .map(|u| HeaderValue::from_str(&u.name).ok())
            .collect();
        State {
            upstream_headers,
            config,
            generation,
            upstreams,
            targets,
            budgets,
            telemetry,
            streams_deadline,
            draining,
            passthrough: Default::default(),
            models: Default::default(),
            keys,
            request_ids,
            id_prefix,
        }
    }

    /// Upstream `i`'s name as a header value; `None` if a name cannot be one.
    pub(crate) fn upstream_header(&self, i: usize) -> Option<HeaderValue> {
        self.upstream_headers.get(i).cloned().flatten()
    }

    /// The request's id, the client's or a new one. Marked never to be indexed: HPACK (an
    /// HTTP/2 client's response, an HTTP/2 upstream's request) would otherwise add each new id
    /// to the connection's table, to be evicted unused, after comparing it with every id
    /// still there (see `headers::never_index`).
    pub(crate) fn request_id(&self, req: &http::request::Parts) -> HeaderValue {
        let mut id = self.new_request_id(req);
        id.set_sensitive(true);
        id
    }

    fn new_request_id(&self, req: &http::request::Parts) -> HeaderValue {
        if let Some(v) = headers::get(&req.headers, &REQUEST_ID) {
            if !v.is_empty() && v.len() <= 200 {
                return v.clone();
            }
        }
        let n = self.request_ids.fetch_add(1, Ordering::Relaxed);
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n);
        let mut id = Vec::with_capacity(self.id_prefix.len() + 1 + digits.len());
        id.extend_from_slice(self.id_prefix.as_bytes());
        id.push(b'-');
        id.extend_from_slice(digits.as_bytes());
        // Built in place, not copied into the header value.
        HeaderValue::from_maybe_shared(Bytes::from(id))
            .unwrap_or_else(|_| HeaderValue::from_static("sl-unknown"))
    }
}

/// The response body: a complete buffer or the SSE relay.
pub(crate) enum GatewayBody {
    Full(Option<Bytes>),
    Relay(Box<SseRelay>),
}

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            GatewayBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            GatewayBody::Relay(r) => Pin::new(r.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GatewayBody::Full(b) => b.is_none(),
            GatewayBody::Relay(r) => r.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GatewayBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            GatewayBody::Full(None) => SizeHint::with_exact(0),
            GatewayBody::Relay(_) => SizeHint::default(),
        }
    }
}

fn full(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<GatewayBody> {
    let mut r = Response::new(GatewayBody::Full(Some(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn error_response(
    family: Family,
    e: &GatewayError,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    let mut r = full(e.status(), "application/json", e.body(family));
    r.headers_mut().insert(REQUEST_ID, request_id.clone());
    if let GatewayError::Keys(k) = e {
        k.add_headers(r.headers_mut());
    }
    r
}

/// Why a request ended before its response started: what the client gets, and the end reason
/// that is logged.
pub(crate) struct Failure {
    error: GatewayError,
    reason: EndReason,
}

impl Failure {
    fn new(error: GatewayError, reason: EndReason) -> Self {
        Failure { error, reason }
    }

    fn bad_request(error: GatewayError) -> Self {
        Failure::new(error, EndReason::BadRequest)
    }

    fn keys(error: crate::keys::KeyError) -> Self {
        let reason = error.end_reason();
        Failure::new(GatewayError::Keys(Box::new(error)), reason)
    }
}

/// What the admit stage decided for a request that may go on.
enum Admitted {
    /// Forward it: its policy, ready to run attempts.
    Run(Box<Policy>),
    /// Answer it with a stored response (an `Idempotency-Key` replay).
    Replay(Response<GatewayBody>),
}

/// Records the failure once and answers in the client API's error format.
fn fail(
    family: Family,
    log: &mut RequestLog,
    f: Failure,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    log.status = f.error.status().as_u16();
    // The whole story (addresses, OS errors) goes to the log; the client gets `message()`.
    log.error = Some(f.error.to_string());
    log.finish(f.reason);
    error_response(family, &f.error, request_id)
}

/// What the request path decided before its first attempt.
pub(crate) enum Admission {
    /// The answer is known already: an error, a local endpoint, a replay.
    Answer(Response<GatewayBody>),
    /// Go on to the attempts: [`Run::serve`].
    Run(Run),
}

/// An admitted request, ready for its attempts.
pub(crate) struct Run {
    state: Arc<State>,
    policy: Box<Policy>,
    log: Box<RequestLog>,
}

impl Run {
    /// Runs the attempts and answers. Never fails: every error becomes a response in the
    /// client's format.
    ///
    /// Apart from [`admission`]: this future is what a request holds while it waits for its
    /// upstream (a stream, until its response head), so none of the admission stage's room
    /// (the client's request, its body being read) is in it.
    pub(crate) fn serve(self) -> impl Future<Output = Response<GatewayBody>> + Send + 'static {
        serve(self.state, self.policy, self.log)
    }
}

/// What the edge decided about a request, handed to the request path as arguments (an entry
/// each in the request's extensions was a map and two boxes per request, held by a stream
/// until its commit).
pub(crate) struct EdgeFacts {
    /// The client's address (see `client_ip`).
    pub(crate) client_ip: std::net::IpAddr,
    /// When the request arrived: its log, trace and deadline count from here.
    pub(crate) started: Instant,
    /// The request's memory charge: its body, then a non-streaming answer read whole.
    pub(crate) lease: Arc<BodyLease>,
}

/// The request path up to its first attempt: endpoint, bounded body, model, route, the key's
/// verdict, idempotency, limits. Never fails: every error becomes an answer in the client's
/// format.
pub(crate) async fn admission<B>(state: Arc<State>, req: Request<B>, edge: EdgeFacts) -> Admission
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = edge.started;
    let (mut parts, body) = req.into_parts();
    let request_id = state.request_id(&parts);
    // Boxed: it travels by value through three async layers (the serve stages and the
    // relay), and each would otherwise keep room for its 448 bytes in its own state.
    let mut log = Box::new(RequestLog::new(
        state.telemetry.clone(),
        request_id.to_str().unwrap_or("-").to_string(),
        started,
    ));
    log.client_ip = Some(edge.client_ip);
    let family = route::family_of(parts.uri.path());
    let op = match route::endpoint(&parts.method, parts.uri.path()) {
        Err(e) => {
            let f = Failure::bad_request(e);
            return Admission::Answer(fail(family, &mut log, f, &request_id));
        }
        Ok(Endpoint::Model(op)) => op,
        Ok(ep @ (Endpoint::Models | Endpoint::ModelInfo)) => {
            // Boxed: a rare wait (it may ask the upstreams), which would otherwise take room
            // in every request's future.
            let r = Box::pin(models_endpoint(&state, ep, parts.uri.path(), &request_id)).await;
            log.status = r.status().as_u16();
            log.finish(EndReason::Completed);
            return Admission::Answer(r);
        }
        Ok(local) => {
            let r = local_endpoint(local, &request_id);
            log.status = r.status().as_u16();
            // Probes of a load balancer are not requests worth a log line each.
            log.quiet = local == Endpoint::Health;
            log.finish(EndReason::Completed);
            return Admission::Answer(r);
        }
    };
    let family = op.family();
    log.start_trace(&mut parts.headers, op);
    if state.draining.is_cancelled() {
        let f = Failure::new(GatewayError::ShuttingDown, EndReason::Shutdown);
        return Admission::Answer(fail(family, &mut log, f, &request_id));
    }
    // Before the body is read: a key no route would take gets its 401 now.
    let identity = state.keys.identify(&parts.headers);
    if let Err(e) = state.keys.screen(&identity) {
        return Admission::Answer(fail(family, &mut log, Failure::keys(e), &request_id));
    }
    let req = ClientRequest {
        parts,
        body,
        lease: edge.lease,
    };
    let admitted = admit(&state, req, op, request_id.clone(), identity, &mut log).await;
    match admitted {
        Ok(Admitted::Run(policy)) => Admission::Run(Run { state, policy, log }),
        Ok(Admitted::Replay(r)) => {
            log.status = r.status().as_u16();
            log.finish(EndReason::Completed);
            Admission::Answer(r)
        }
        Err(f) => Admission::Answer(fail(family, &mut log, f, &request_id)),
    }
}

/// The endpoints the gateway answers itself.
fn local_endpoint(ep: Endpoint, request_id: &HeaderValue) -> Response<GatewayBody> {
    match ep {
        Endpoint::Health => full(
            StatusCode::OK,
            "application/json",
            Bytes::from_static(b"{\"status\":\"ok\"}"),
        ),
        // Model calls are proxied, and model lists answered by `models_endpoint`.
        Endpoint::Models | Endpoint::ModelInfo | Endpoint::Model(_) => error_response(
            Family::OpenAi,
            &GatewayError::NotFound("/".into()),
            request_id,
        ),
    }
}

/// `GET /v1/models` and `GET /v1/models/{id}`, in OpenAI's shape.
async fn models_endpoint(
    state: &State,
    ep: Endpoint,
    path: &str,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    let body = match ep {
        Endpoint::ModelInfo => {
            let id = route::model_id(path).unwrap_or_default();
            match crate::models::one(state, id).await {
                Some(b) => b,
                None => {
                    let e = GatewayError::UnknownModel(id.to_string());
                    return error_response(Family::OpenAi, &e, request_id);
                }
            }
        }
        _ => crate::models::list(state).await,
    };
    let mut r = full(StatusCode::OK, "application/json", body);
    r.headers_mut().insert(REQUEST_ID, request_id.clone());
    r
}

/// Reads the whole body (bounded, so every request can be replayed and routed by model).
async fn read_request_body<B>(
    parts: &http::request::Parts,
    body: B,
    limit: u64,
) -> Result<Bytes, Failure>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let too_large = || {
        Failure::new(
            GatewayError::BodyTooLarge { limit },
            EndReason::BodyTooLarge,
        )
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    match collect(Limited::new(body, limit as usize)).await {
        Ok(b) => Ok(b),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => match crate::ingress::client_body_error(&*e) {
            // A timeout or the memory budget, decided by the ingress.
            Some(g) => {
                let reason = EndReason::of_error(&g);
                Err(Failure::new(g, reason))
            }
            None => Err(Failure::bad_request(GatewayError::BodyRead(e.to_string()))),
        },
    }
}

/// Seconds since the Unix epoch (for `created` fields and HTTP-date `Retry-After`).
/// A body's data in one buffer: the piece itself when it came in one (a small call's body
/// comes with its head), without `Collected`'s list and trailer map; trailers are dropped.
async fn collect<B>(body: B) -> Result<Bytes, B::Error>
where
    B: Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut more: Option<bytes::BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if let Some(m) = more.as_mut() {
            m.extend_from_slice(&data);
        } else if let Some(f) = first.take() {
            let mut m = bytes::BytesMut::with_capacity(f.len() + data.len());
            m.extend_from_slice(&f);
            m.extend_from_slice(&data);
            more = Some(m);
        } else {
            first = Some(data);
        }
    }
    Ok(match more {
        Some(m) => m.freeze(),
        None => first.unwrap_or_default(),
    })
}

pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Whether a response is an SSE stream.
pub(crate) fn is_event_stream(h: &HeaderMap) -> bool {
    headers::find(h, &header::CONTENT_TYPE).is_some_and(|v| {
        // The prefix on the bytes first: checking a whole JSON type is text cost more.
        let b = v.as_bytes();
        let start = b.iter().position(|c| !matches!(c, b' ' | b'\t'));
        start.is_some_and(|i| b[i..].starts_with(b"text/event-stream")) && v.to_str().is_ok()
    })
}

/// The request's deadline: the route's (or its first upstream's) total timeout, shortened by
/// the client's own timeout header if it sent one (`x-sluice-timeout: 30s`, or the seconds
/// the OpenAI and Anthropic SDKs send in `x-stainless-timeout`).
fn deadline(state: &State, route: usize, h: &HeaderMap, started: Instant) -> Instant {
    let r = &state.config.routes[route];
    let total = r
        .timeout
        .unwrap_or(state.config.upstreams[r.primary_upstream()].timeouts.total);
    let client = headers::get(h, &X_SLUICE_TIMEOUT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| crate::config::parse_duration(v).ok())
        .or_else(|| {
            headers::get(h, &X_STAINLESS_TIMEOUT)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(|s| Duration::from_secs_f64(s.min(86_400.0)))
        })
        .filter(|d| !d.is_zero());
    started + client.map_or(total, |c| c.min(total))
}

/// The client's request as admission takes it: its head, its body, and the memory charge the
/// body is read under.
struct ClientRequest<B> {
    parts: http::request::Parts,
    body: B,
    lease: Arc<BodyLease>,
}

/// Left to right: body, model, route, the key's verdict, idempotency, limits; builds the
/// request's policy.
async fn admit<B>(
    state: &Arc<State>,
    req: ClientRequest<B>,
    op: Operation,
    request_id: HeaderValue,
    identity: crate::keys::Identity,
    log: &mut RequestLog,
) -> Result<Admitted, Failure>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let ClientRequest {
        mut parts,
        body,
        lease,
    } = req;
    let bytes = read_request_body(&parts, body, state.config.server.max_request_body).await?;
    let probe = crate::probe::routing_fields(&bytes).map_err(Failure::bad_request)?;
    let model = probe
        .model
        .as_deref()
        .ok_or_else(|| Failure::bad_request(GatewayError::MissingModel))?;
    // Capped: a client's 10 MB `model` is not kept whole for the log line.
    log.model = crate::untrusted::prefix(model, 1024).to_string();
    let route_idx = state.config.route_index(model).ok_or_else(|| {
        let shown = crate::untrusted::prefix(model, 1024).to_string();
        Failure::bad_request(GatewayError::UnknownModel(shown))
    })?;
    let route = &state.config.routes[route_idx];
    log.route.clone_from(&route.name);
    let idempotent = route.idempotent
        || crate::headers::get(&parts.headers, &crate::keys::IDEMPOTENCY_KEY).is_some();
    let max_tokens = probe.max_tokens_any();
    let stream = probe.stream == Some(true);
    let deadline = deadline(state, route_idx, &parts.headers, log.started());
    let keys = &state.keys;
    let key = keys
        .authorize(route_idx, model, identity, &mut parts.headers)
        .map_err(Failure::keys)?;
    let idempotency = keys
        .idempotency(
            key.as_deref(),
            &parts.headers,
            parts.uri.path(),
            &bytes,
            stream,
            deadline,
        )
        .await
        .map_err(Failure::keys)?;
    let guard = match idempotency {
        crate::keys::IdempotencyStart::None => None,
        crate::keys::IdempotencyStart::Run(g) => Some(g),
        crate::keys::IdempotencyStart::Replay(stored) => {
            return Ok(Admitted::Replay(crate::keys::replay(stored, &request_id)));
        }
    };
    let reserve = crate::keys::reservation(max_tokens, bytes.len());
    let ticket = keys
        .admit(route_idx, key.as_ref(), model, reserve)
        .await
        .map_err(Failure::keys)?;
    if let Some(mut t) = ticket {
        t.set_idempotency(guard);
        log.ticket = Some(Box::new(t));
    } else if let Some(g) = guard {
        // Held by a ticket of its own: released or completed as any other.
        log.ticket = Some(Box::new(keys.bare_ticket(route_idx, g)));
    }
    let known = crate::policy::Known {
        model: model.to_string(),
        include_usage: probe.stream_options.as_ref().and_then(|o| o.include_usage),
    };
    drop(probe);
    let ctx = RequestCtx {
        parts,
        body: bytes,
        request_id,
        op,
        stream,
        max_tokens,
        idempotent,
        known,
        started: log.started(),
        lease,
    };
    Ok(Admitted::Run(Box::new(Policy::new(
        state.clone(),
        route_idx,
        ctx,
        deadline,
    ))))
}

/// What the client gets when the policy gave up.
pub(crate) struct Reply {
    pub(crate) reason: EndReason,
    pub(crate) status: StatusCode,
    pub(crate) code: String,
    pub(crate) message: String,
    /// The upstream that failed last, if any attempt was made.
    pub(crate) upstream: Option<usize>,
    /// The upstream's own answer, passed on (non-streaming responses).
    pub(crate) answer: Option<Box<Answer>>,
    /// The gateway's error in full, for the log (the client gets `message`).
    pub(crate) detail: Option<String>,
}

/// Turns a give-up into the client's error: the upstream's last answer, or the gateway's
/// error for the last failure.
pub(crate) fn give_up_reply(policy: &Policy, g: GiveUp) -> Reply {
    let upstream = g.failure.as_ref().map(|(u, _)| *u);
    match policy.give_up_error(g) {
        Ok(e) => {
            let reason = EndReason::of_error(&e);
            Reply {
                reason,
                status: e.status(),
                code: e.code().to_string(),
                message: e.message(),
                upstream,
                answer: None,
                detail: Some(e.to_string()),
            }
        }
        Err((_, answer)) => {
            let (code, message) = answer.code_and_message();
            let client = policy.ctx.op.family();
            let status = if answer.family == client {
                answer.status
            } else {
                sluice_providers::error::client_error(client, &answer.error).0
            };
            Reply {
                reason: EndReason::UpstreamError,
                status,
                code,
                message,
                upstream,
                answer: Some(answer),
                detail: None,
            }
        }
    }
}

/// Runs the request and answers, with its `x-ratelimit-*` headers; a non-streaming success
/// with an `Idempotency-Key` is stored for replay.
fn serve(
    state: Arc<State>,
    policy: Box<Policy>,
    mut log: Box<RequestLog>,
) -> impl Future<Output = Response<GatewayBody>> + Send + 'static {
    let Some(ticket) = log.ticket.as_mut() else {
        return Either::Left(serve_attempts(state, policy, log));
    };
    let limit_headers = ticket.headers();
    // A stream's record is released when it ends (its ticket drops it); only whole bodies
    // are replayed.
    let guard = if policy.ctx.stream {
        None
    } else {
        ticket.take_idempotency()
    };
    // Only a stored answer needs the keys after the attempts.
    let keys = guard.as_ref().map(|_| state.keys.clone());
    // Then, not an `async` block: the answer's place would be held beside the attempts
    // while they wait.
    Either::Right(
        serve_attempts(state, policy, log)
            .then(move |r| with_limits(r, limit_headers, guard.zip(keys))),
    )
}

/// The key's `x-ratelimit-*` headers on the answer; a whole answer stored for replay.
async fn with_limits(
    mut r: Response<GatewayBody>,
    limit_headers: Vec<(HeaderName, HeaderValue)>,
    store: Option<(sluice_state::IdempotencyGuard, crate::keys::Keys)>,
) -> Response<GatewayBody> {
    let h = r.headers_mut();
    h.reserve(limit_headers.len());
    for (name, value) in limit_headers {
        h.insert(name, value);
    }
    if let Some((g, keys)) = store {
        let stored = crate::keys::to_store(&r);
        // Boxed: a rare wait, which would otherwise take room in every keyed request's
        // future.
        Box::pin(crate::keys::complete(&keys, g, stored)).await;
    }
    r
}

/// Runs the policy's attempts and answers: the relay for a stream, the whole body otherwise.
async fn serve_attempts(
    state: Arc<State>,
    mut policy: Box<Policy>,
    mut log: Box<RequestLog>,
) -> Response<GatewayBody> {
    let family = policy.ctx.op.family();
    let request_id = policy.ctx.request_id.clone();
    loop {
        let mut attempt = match policy.next().await {
            Ok(a) => a,
            Err(g) => {
                log.attempts = policy.records();
                let reply = give_up_reply(&policy, g);
                if let Some(u) = reply.upstream {
                    log.upstream = state.config.upstreams[u].name.clone();
                }
                if let Some(a) = &reply.answer {
                    session_diagnostic(&state, &policy, a, &log);
                }
                return answer_failure(family, reply, &mut log, &request_id);
            }
        };
        let upstream = attempt.upstream;
        log.upstream = state.config.upstreams[upstream].name.clone();
        log.timings = attempt.resp.extensions().get::<PhaseTimings>().copied();
        if is_event_stream(attempt.resp.headers()) {
            return stream_response(&state, policy, attempt, log);
        }
        match read_whole(&state, &mut policy, &mut attempt, &mut log).await {
            Ok(mut r) => {
                log.attempts = policy.records();
                let name = state.upstream_header(upstream);
                served_headers(&mut r, name, log.attempts.len());
                log.finish(EndReason::Completed);
                return r;
            }
            Err(Whole::Failed(t, started, f)) => policy.failed(t, started, f),
            Err(Whole::Final(f)) => {
                log.attempts = policy.records();
                return fail(family, &mut log, f, &request_id);
            }
        }
    }
}

/// An upstream 4xx that mentions a session is logged with the request id and the names (never
/// the values) of the session headers that were sent: the usual cause is a session header a
/// hop dropped. Computed only on this rare path.
fn session_diagnostic(state: &State, policy: &Policy, a: &Answer, log: &RequestLog) {
    if !a.status.is_client_error() || !contains_ci(&a.body, b"session") {
        return;
    }
    let ucfg = state
        .config
        .upstreams
        .iter()
        .find(|u| u.name == log.upstream);
    let Some(ucfg) = ucfg else { return };
    let sent = headers::upstream_request_headers(
        &policy.ctx.parts.headers,
        headers::Target {
            auth: &ucfg.auth,
            provider: &a.provider,
            translated: a.family != policy.ctx.op.family(),
        },
        &policy.ctx.request_id,
    );
    let names = headers::session_header_names(&sent);
    tracing::warn!(
        request_id = %log.request_id,
        upstream = %ucfg.name,
        status = a.status.as_u16(),
        session_headers_sent = ?names,
        "upstream rejected a request mentioning a session"
    );
}

fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// The client's error response when every attempt failed.
fn answer_failure(
    family: Family,
    mut reply: Reply,
    log: &mut RequestLog,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    log.status = reply.status.as_u16();
    log.error = reply.detail.take();
    log.finish(reply.reason);
    match reply.answer {
        // The upstream's own error, in its own words (the client speaks its format).
        Some(a) if a.family == family => {
            let mut h = headers::client_response_headers(a.headers.clone(), request_id);
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(a.body.len()));
            let mut r = Response::new(GatewayBody::Full(Some(a.body)));
            *r.status_mut() = a.status;
            *r.headers_mut() = h;
            attempts_header(&mut r, log);
            r
        }
        // Another family's error, re-expressed in the client's (Anthropic 529 → OpenAI 503).
        Some(a) => {
            let (status, body) = sluice_providers::error::client_error(family, &a.error);
            let mut r = full(status, "application/json", body);
            r.headers_mut().insert(REQUEST_ID, request_id.clone());
            if let Some(ra) = a.error.retry_after {
                let secs = ra.as_secs() + u64::from(ra.subsec_nanos() > 0);
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            attempts_header(&mut r, log);
            r
        }
        None => {
            let body = sluice_providers::error::error_body(
                family,
                reply.status,
                &reply.code,
                &reply.message,
            );
            let mut r = full(reply.status, "application/json", body);
            r.headers_mut().insert(REQUEST_ID, request_id.clone());
            attempts_header(&mut r, log);
            r
        }
    }
}

/// `x-sluice-upstream` (who answered) and `x-sluice-attempts` (how many tries it took).
// Header names as constants: a `&str` name is parsed and validated on every use.
const X_SLUICE_TIMEOUT: HeaderName = HeaderName::from_static("x-sluice-timeout");
const X_STAINLESS_TIMEOUT: HeaderName = HeaderName::from_static("x-stainless-timeout");
const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
const X_SLUICE_DROPPED_PARAMS: HeaderName = HeaderName::from_static("x-sluice-dropped-params");
const X_SLUICE_TIMING: HeaderName = HeaderName::from_static("x-sluice-timing");
const X_SLUICE_UPSTREAM: HeaderName = HeaderName::from_static("x-sluice-upstream");
const X_SLUICE_ATTEMPTS: HeaderName = HeaderName::from_static("x-sluice-attempts");

fn attempts_header(r: &mut Response<GatewayBody>, log: &RequestLog) {
    let name = if log.upstream.is_empty() {
        None
    } else {
        HeaderValue::from_str(&log.upstream).ok()
    };
    served_headers(r, name, log.attempts.len());
}

/// `x-sluice-upstream` and `x-sluice-attempts`, from the upstream's name as a header value
/// (made once per config for the success path, see [`State::upstream_header`]).
fn served_headers(r: &mut Response<GatewayBody>, name: Option<HeaderValue>, attempts: usize) {
    if let Some(v) = name {
        r.headers_mut().insert(X_SLUICE_UPSTREAM, v);
    }
    if attempts > 0 {
        r.headers_mut()
            .insert(X_SLUICE_ATTEMPTS, attempts_value(attempts));
    }
}

/// `attempts` as a header value: a static one for the usual few (formatting one allocates).
fn attempts_value(attempts: usize) -> HeaderValue {
    static FEW: [HeaderValue; 4] = [
        HeaderValue::from_static("0"),
        HeaderValue::from_static("1"),
        HeaderValue::from_static("2"),
        HeaderValue::from_static("3"),
    ];
    match FEW.get(attempts) {
        Some(v) => v.clone(),
        None => HeaderValue::from(attempts),
    }
}

/// Starts the relay for a stream; the client gets the headers now and heartbeats while the
/// stream has not committed.
fn stream_response(
    state: &State,
    policy: Box<Policy>,
    attempt: Attempt,
    log: Box<RequestLog>,
) -> Response<GatewayBody> {
    let family = policy.ctx.op.family();
    let want_timing = wants_timing(state, &policy.ctx.parts.headers);
    let mut out_headers =
        headers::client_response_headers(attempt.resp.headers().clone(), &policy.ctx.request_id);
    if want_timing {
        if let Some(v) = log.timings.and_then(server_timing) {
            out_headers.insert(SERVER_TIMING, v);
        }
    }
    out_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    out_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    out_headers.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    if let Some(v) = crate::outbound::dropped_header(&attempt.built) {
        out_headers.insert(X_SLUICE_DROPPED_PARAMS, v);
    }
    if attempt.built.translated {
        out_headers.remove(header::CONTENT_ENCODING);
    }
    let status = attempt.resp.status();
    let ucfg = &state.config.upstreams[attempt.upstream];
    let setup = RelaySetup {
        family,
        max_event_bytes: state.config.server.max_event_bytes,
        timers: RelayTimers {
            idle: ucfg.timeouts.idle,
            total_by: policy.deadline,
            heartbeat: state.config.server.heartbeat,
        },
        shutdown: state.streams_deadline.clone().cancelled_owned(),
        on_disconnect: policy.route().on_client_disconnect,
        telemetry: state.telemetry.clone(),
        token_cap: log.ticket.as_ref().and_then(|t| t.stream_cap()).map(|cap| {
            crate::relay::TokenCap {
                cap,
                input_estimate: crate::keys::input_estimate(policy.ctx.body.len()),
            }
        }),
    };
    let mut log = log;
    log.status = status.as_u16();
    log.stream_started();
    let relay = SseRelay::new(setup, policy, attempt, log);
    let mut r = Response::new(GatewayBody::Relay(Box::new(relay)));
    *r.status_mut() = status;
    *r.headers_mut() = out_headers;
    r
}

fn wants_timing(state: &State, h: &HeaderMap) -> bool {
    state.config.server.server_timing
        || headers::get(h, &X_SLUICE_TIMING).is_some_and(|v| v.as_bytes() == b"1")
}

fn server_timing(t: PhaseTimings) -> Option<HeaderValue> {
    HeaderValue::from_str(&t.server_timing_header()).ok()
}

/// Why a non-streaming body did not become a response.
enum Whole {
    /// The attempt failed after its headers; the policy may try again.
    Failed(crate::policy::TargetRef, Instant, AttemptFailure),
    /// Nothing to retry: answer with this.
    Final(Failure),
}

/// Non-streaming: reads the whole body, bounded in size and by the deadline, so a too-large
/// body can still be a clean 502 instead of a cut. `attempt` is borrowed and read in place:
/// moved in and taken apart, its parts would take room in this future twice.
async fn read_whole(
    state: &State,
    policy: &mut Policy,
    attempt: &mut Attempt,
    log: &mut RequestLog,
) -> Result<Response<GatewayBody>, Whole> {
    let ucfg = &state.config.upstreams[attempt.upstream];
    let max = state.config.server.max_response_body;
    let upstream = ucfg.name.clone();
    let idle = ucfg.timeouts.idle;
    let read = tokio::time::timeout_at(
        policy.deadline,
        read_bounded(attempt.resp.body_mut(), max, idle, &policy.ctx.lease),
    )
    .await;
    let bytes = match read {
        Ok(Ok(b)) => b,
        Ok(Err(Unread::Idle)) => {
            let error = GatewayError::IdleTimeout {
                upstream,
                timeout: idle,
            };
            return Err(Whole::Final(Failure::new(error, EndReason::IdleTimeout)));
        }
        Ok(Err(Unread::OverBudget(o))) => {
            let error = GatewayError::OverBudget { limit: o.limit };
            return Err(Whole::Final(Failure::new(error, EndReason::OverBudget)));
        }
        Err(_) => {
            let error = GatewayError::TotalTimeout {
                upstream,
                timeout: policy.deadline.saturating_duration_since(log.started()),
            };
            return Err(Whole::Final(Failure::new(error, EndReason::TotalTimeout)));
        }
        Ok(Err(Unread::TooLarge)) => {
            let error = GatewayError::ResponseTooLarge {
                upstream,
                limit: max,
            };
            return Err(Whole::Final(Failure::new(
                error,
                EndReason::ResponseTooLarge,
            )));
        }
        Ok(Err(Unread::Broken(source))) => {
            log.timings = Some(attempt.resp.body().timings());
            return Err(Whole::Failed(
                attempt.target,
                attempt.started,
                AttemptFailure::body(source),
            ));
        }
    };
    // The body has ended: its timings now include the last byte.
    let timings = attempt.resp.body().timings();
    log.timings = Some(timings);
    let built = &attempt.built;
    let op = policy.ctx.op;
    let translated = sluice_providers::response::translate_response(
        bytes,
        &sluice_providers::response::ResponseOptions {
            op,
            provider: &built.provider,
            model: &built.model,
            // A body passed through has its own `created`: no clock read for it.
            now_unix: if sluice_providers::response::passes_through(op, &built.provider) {
                0
            } else {
                now_unix()
            },
        },
    );
    let bytes = match translated {
        Ok(c) => {
            log.usage = c.usage;
            log.usage_label = policy.usage_label(attempt.target);
            c.body
        }
        Err(source) => {
            let error = GatewayError::ResponseMalformed { upstream, source };
            return Err(Whole::Final(Failure::new(error, EndReason::UpstreamError)));
        }
    };
    let status = attempt.resp.status();
    let mut out_headers = headers::client_response_headers(
        std::mem::take(attempt.resp.headers_mut()),
        &policy.ctx.request_id,
    );
    if built.translated {
        // The body is ours now: the upstream's encoding and type no longer describe it.
        out_headers.remove(header::CONTENT_ENCODING);
        out_headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some(v) = crate::outbound::dropped_header(built) {
        out_headers.insert(X_SLUICE_DROPPED_PARAMS, v);
    }
    if wants_timing(state, &policy.ctx.parts.headers) {
        if let Some(v) = server_timing(timings) {
            out_headers.insert(SERVER_TIMING, v);
        }
    }
    log.first_byte();
    log.sent(bytes.len(), 0);
    log.observe_body(&bytes);
    log.status = status.as_u16();
    policy.succeeded(attempt.target, attempt.started, log.status);
    let mut r = Response::new(GatewayBody::Full(Some(bytes)));
    *r.status_mut() = status;
    *r.headers_mut() = out_headers;
    Ok(r)
}

/// Why a non-streaming body was not read whole.
enum Unread {
    /// Over `max_response_body`.
    TooLarge,
    /// The upstream broke off.
    Broken(sluice_upstream::BodyError),
    /// No byte for the upstream's `idle` timeout.
    Idle,
    /// The memory budget could not take it.
    OverBudget(crate::body_budget::OverBudget),
}

/// Reads a whole body up to `max` bytes, each piece within `idle` of the last, charged to the
/// request's memory lease. Keeps the body (unlike `Limited`),
/// so its timings stay readable.
async fn read_bounded(
    body: &mut sluice_upstream::ResponseBody,
    max: u64,
    idle: Duration,
    lease: &BodyLease,
) -> Result<Bytes, Unread> {
    let mut buf = bytes::BytesMut::new();
    let give_back = |charged: usize| lease.release(charged as u64);
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(_) => {
                give_back(buf.len());
                return Err(Unread::Idle);
            }
        };
        let data = match frame {
            Ok(f) => f.into_data(),
            Err(e) => {
                give_back(buf.len());
                return Err(Unread::Broken(e));
            }
        };
        if let Ok(data) = data {
            if (buf.len() + data.len()) as u64 > max {
                give_back(buf.len());
                return Err(Unread::TooLarge);
            }
            if let Err(o) = lease.charge(data.len() as u64) {
                give_back(buf.len());
                return Err(Unread::OverBudget(o));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_told_by_its_type_as_the_text_reading_told_it() {
        let was = |h: &HeaderMap| {
            h.get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
        };
        let types: [&[u8]; 12] = [
            b"text/event-stream",
            b"text/event-stream; charset=utf-8",
            b"  \t text/event-stream",
            b"application/json",
            b"",
            b" ",
            b"text/event-strea",
            b"TEXT/EVENT-STREAM",
            b"text/event-stream\x80",
            b"\x80text/event-stream",
            b"text/event-streamy",
            b"x text/event-stream",
        ];
        for t in types {
            for other in [None, Some("x-a"), Some("content-length")] {
                let mut h = HeaderMap::new();
                if let Some(n) = other {
                    h.insert(HeaderName::from_static(n), HeaderValue::from_static("1"));
                }
                h.insert(header::CONTENT_TYPE, HeaderValue::from_bytes(t).unwrap());
                // A second value is not read, by either.
                h.append(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                );
                assert_eq!(is_event_stream(&h), was(&h), "{t:?}");
                h.remove(header::CONTENT_TYPE);
                h.insert(header::CONTENT_TYPE, HeaderValue::from_bytes(t).unwrap());
                assert_eq!(is_event_stream(&h), was(&h), "{t:?} alone");
            }
        }
        assert!(!is_event_stream(&HeaderMap::new()));
    }

    #[test]
    fn an_attempt_count_is_its_decimal_whether_kept_or_formatted() {
        for n in [0, 1, 2, 3, 4, 9, 10, 123, usize::MAX] {
            assert_eq!(attempts_value(n), HeaderValue::from(n), "{n}");
        }
    }
}
