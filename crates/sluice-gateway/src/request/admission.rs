//! The request path up to its first attempt: endpoint, bounded body, model, route, the key's
//! verdict, idempotency, limits.

use super::*;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use sluice_providers::Family;
use tokio::time::Instant;

use crate::body_budget::BodyLease;
use crate::ctx::RequestCtx;
use crate::error::GatewayError;
use crate::headers::{self, REQUEST_ID};
use crate::policy::Policy;
use crate::route::{self, Endpoint, Operation};
use sluice_telemetry::{EndReason, RequestRecord};

use crate::admit::Identity;
use crate::mount::{Mount, MountBody, MountCaller};
use crate::outcome::Finish;

/// What the admit stage decided for a request that may go on.
pub(crate) enum Admitted {
    /// Forward it: its policy, ready to run attempts, on a route with a cache what the
    /// cache did (`miss` or `bypass`), and on a route with guardrails their header.
    Run(
        Box<Policy>,
        Option<sluice_state::CacheStatus>,
        Option<HeaderValue>,
    ),
    /// Answer it with a stored response (an `Idempotency-Key` replay).
    Replay(Response<GatewayBody>),
    /// Answer it from the response cache.
    Cached(super::cached::Hit),
    /// A reconnect to a resumable stream: its log from the event asked.
    Resumed(Response<GatewayBody>),
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
    pub(super) state: Arc<Generation>,
    pub(super) policy: Box<Policy>,
    log: Box<Finish>,
    /// On a route with a cache: `miss` or `bypass`, for the answer's `x-sluice-cache`.
    cache: Option<sluice_state::CacheStatus>,
    /// On a route with guardrails: the input checks' `x-sluice-guardrails`.
    guardrails: Option<HeaderValue>,
}

impl Run {
    /// Runs the attempts and answers. Never fails: every error becomes a response in the
    /// client's format.
    ///
    /// Apart from [`admission`]: this future is what a request holds while it waits for its
    /// upstream (a stream, until its response head), so none of the admission stage's room
    /// (the client's request, its body being read) is in it.
    pub(crate) fn serve(self) -> impl Future<Output = Response<GatewayBody>> + Send + 'static {
        use futures_util::future::{Either, FutureExt};
        let served = serve(self.state, self.policy, self.log);
        match (self.cache, self.guardrails) {
            // A route without a cache or guardrails: this one branch is all it pays.
            (None, None) => Either::Left(served),
            (cache, guardrails) => Either::Right(served.map(move |mut r| {
                if let Some(status) = cache {
                    r.headers_mut()
                        .insert(sluice_state::CACHE_STATUS_HEADER, status.header_value());
                }
                if let Some(v) = guardrails {
                    // One value: the input checks' verdicts first, then the answer's (a whole
                    // body's) or the guardrails watching a stream.
                    let h = r.headers_mut();
                    let mut all = v.as_bytes().to_vec();
                    for o in h.get_all(crate::guard::X_SLUICE_GUARDRAILS) {
                        all.push(b',');
                        all.extend_from_slice(o.as_bytes());
                    }
                    if let Ok(one) = HeaderValue::from_bytes(&all) {
                        h.insert(crate::guard::X_SLUICE_GUARDRAILS, one);
                    }
                }
                r
            })),
        }
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
pub(crate) async fn admission<B>(
    state: Arc<Generation>,
    req: Request<B>,
    edge: EdgeFacts,
) -> Admission
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = edge.started;
    let (mut parts, body) = req.into_parts();
    let request_id = state.request_id(&parts);
    // Boxed: it travels by value through three async layers (the serve stages and the
    // relay), and each would otherwise keep room for its 448 bytes in its own state.
    let mut log = Box::new(Finish::new(
        RequestRecord::new(
            state.telemetry.clone(),
            request_id.to_str().unwrap_or("-").to_string(),
            started,
        ),
        None,
    ));
    log.client_ip = Some(edge.client_ip);
    if let Some(m) = state.shared.mounts.find(parts.uri.path()) {
        // Boxed: a mounted service's wait would otherwise take room in every request's future.
        let r = Box::pin(mounted(&state, m.clone(), parts, body, &request_id)).await;
        log.status = r.status().as_u16();
        log.finish(EndReason::Completed);
        return Admission::Answer(r);
    }
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
        Ok(Endpoint::StoredResponse) => {
            let r = super::background::stored(&state, &parts, &request_id)
                .unwrap_or_else(|f| fail(family, &mut log, *f, &request_id));
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
    // A model call: on the books from here, whatever becomes of it.
    log.op = Some(op);
    log.book(state.books.clone());
    log.start_trace(&mut parts.headers, op);
    if state.draining() {
        let f = Failure::new(GatewayError::ShuttingDown, EndReason::Shutdown);
        return Admission::Answer(fail(family, &mut log, f, &request_id));
    }
    if family == Family::Gemini {
        gemini_key_from_query(&mut parts);
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
        Ok(Admitted::Run(policy, cache, guardrails)) => {
            let background = policy
                .ctx
                .parts
                .extensions
                .get::<crate::resume::Background>()
                .map(|b| b.0.clone());
            // Only a background response needs the model apart from the log: a plain
            // request pays no copy of it.
            let model = background.as_ref().map(|_| log.model.clone());
            let run = Run {
                state,
                policy,
                log,
                cache,
                guardrails,
            };
            match (background, model) {
                (Some(s), Some(model)) => {
                    Admission::Answer(super::background::start(run, s, model))
                }
                _ => Admission::Run(run),
            }
        }
        Ok(Admitted::Cached(hit)) => {
            // A hit counted against the key's limits like any request: it says so too.
            let limit_headers = log.ticket().map(|t| t.headers());
            let mut r = super::cached::answer(hit, &request_id, log);
            for (name, value) in limit_headers.into_iter().flatten() {
                r.headers_mut().insert(name, value);
            }
            Admission::Answer(r)
        }
        Ok(Admitted::Resumed(r)) => {
            log.status = r.status().as_u16();
            log.finish(EndReason::Completed);
            Admission::Answer(r)
        }
        Ok(Admitted::Replay(r)) => {
            log.replay = true;
            log.status = r.status().as_u16();
            log.finish(EndReason::Completed);
            Admission::Answer(r)
        }
        Err(f) => Admission::Answer(fail(family, &mut log, f, &request_id)),
    }
}

/// A request to a mounted service: its caller identified by the key table (as a model call's
/// is), then handed over whole; the answer is the service's, with the request id.
async fn mounted<B>(
    state: &Generation,
    mount: Arc<dyn Mount>,
    parts: http::request::Parts,
    body: B,
    request_id: &HeaderValue,
) -> Response<GatewayBody>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let caller = match state.keys.identify(&parts.headers) {
        Identity::Anonymous => MountCaller::Anonymous,
        Identity::Unknown => MountCaller::Unknown,
        Identity::Key(k) => MountCaller::Key(k.config.id.as_str().into()),
        Identity::Revoked(k) => MountCaller::Revoked(k.config.id.as_str().into()),
    };
    let body = MountBody::new(body.map_err(Into::into));
    let (mut head, body) = mount
        .serve(Request::from_parts(parts, body), caller)
        .await
        .into_parts();
    head.headers.insert(REQUEST_ID, request_id.clone());
    Response::from_parts(head, GatewayBody::Mounted(body))
}

/// The endpoints the gateway answers itself.
pub(crate) fn local_endpoint(ep: Endpoint, request_id: &HeaderValue) -> Response<GatewayBody> {
    match ep {
        Endpoint::Health => full(
            StatusCode::OK,
            "application/json",
            Bytes::from_static(b"{\"status\":\"ok\"}"),
        ),
        // Model calls are proxied, model lists answered by `models_endpoint`, stored
        // responses by `background::stored`.
        Endpoint::Models | Endpoint::ModelInfo | Endpoint::Model(_) | Endpoint::StoredResponse => {
            error_response(
                Family::OpenAi,
                &GatewayError::NotFound("/".into()),
                request_id,
            )
        }
    }
}

/// `GET /v1/models` and `GET /v1/models/{id}`, in OpenAI's shape.
pub(crate) async fn models_endpoint(
    state: &Generation,
    ep: Endpoint,
    path: &str,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    let body = match ep {
        Endpoint::ModelInfo => {
            let id = route::model_id(path).unwrap_or_default();
            match crate::request::models::one(state, id).await {
                Some(b) => b,
                None => {
                    let e = GatewayError::UnknownModel(id.to_string());
                    return error_response(Family::OpenAi, &e, request_id);
                }
            }
        }
        _ => crate::request::models::list(state).await,
    };
    let mut r = full(StatusCode::OK, "application/json", body);
    r.headers_mut().insert(REQUEST_ID, request_id.clone());
    r
}

/// Reads the whole body (bounded, so every request can be replayed and routed by model).
pub(crate) async fn read_request_body<B>(
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
        Err(e) => match crate::error::client_body_error(&*e) {
            // A timeout or the memory budget, decided by the ingress.
            Some(g) => {
                let reason = g.end_reason();
                Err(Failure::new(g, reason))
            }
            None => Err(Failure::bad_request(GatewayError::BodyRead(e.to_string()))),
        },
    }
}

/// A body's data in one buffer: the piece itself when it came in one (a small call's body
/// comes with its head), without `Collected`'s list and trailer map; trailers are dropped.
pub(crate) async fn collect<B>(body: B) -> Result<Bytes, B::Error>
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

/// The request's deadline: the route's (or its first upstream's) total timeout, shortened by
/// the client's own timeout header if it sent one (`x-sluice-timeout: 30s`, or the seconds
/// the OpenAI and Anthropic SDKs send in `x-stainless-timeout`).
pub(crate) fn deadline(
    state: &Generation,
    route: usize,
    h: &HeaderMap,
    started: Instant,
) -> Instant {
    let r = &state.config.routes[route];
    let total = r
        .timeout
        .unwrap_or(state.config.upstream(r.primary_upstream()).timeouts.total);
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
pub(crate) struct ClientRequest<B> {
    parts: http::request::Parts,
    body: B,
    lease: Arc<BodyLease>,
}

/// Left to right: body, model, route, the key's verdict, idempotency, limits; builds the
/// request's policy.
pub(crate) async fn admit<B>(
    state: &Arc<Generation>,
    req: ClientRequest<B>,
    op: Operation,
    request_id: HeaderValue,
    identity: crate::admit::Identity,
    log: &mut Finish,
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
    let background = super::background::take_background(op, &bytes);
    let bytes = background.clone().unwrap_or(bytes);
    let probe = crate::probe::routing_fields(&bytes).map_err(Failure::bad_request)?;
    // Gemini's model is in the path (`/v1beta/models/{model}:generateContent`); other
    // operations never look.
    let path_model = matches!(
        op,
        Operation::GenerateContent | Operation::StreamGenerateContent
    )
    .then(|| sluice_providers::api::gemini_operation_for_path(parts.uri.path()))
    .flatten()
    .map(|(_, m)| m.to_string());
    let model = path_model
        .as_deref()
        .or(probe.model.as_deref())
        .ok_or_else(|| Failure::bad_request(GatewayError::MissingModel))?;
    // Capped: a client's 10 MB `model` is not kept whole for the log line.
    log.model = sluice_telemetry::untrusted::prefix(model, 1024).to_string();
    let route_idx = state.config.route_index(model).ok_or_else(|| {
        let shown = sluice_telemetry::untrusted::prefix(model, 1024).to_string();
        Failure::bad_request(GatewayError::UnknownModel(shown))
    })?;
    let route = &state.config.routes[route_idx];
    log.route.clone_from(&route.name);
    let idempotent = route.idempotent
        || crate::headers::get(&parts.headers, &crate::admit::IDEMPOTENCY_KEY).is_some();
    let max_tokens = probe.max_tokens_any();
    let stream = op.streams_by_path().unwrap_or(probe.stream == Some(true));
    let deadline = deadline(state, route_idx, &parts.headers, log.started());
    let keys = &state.keys;
    // A stream this request makes or reads is owned by the key it presented, as
    // `background::stored` sees it, whatever the route's key mode; the route's own verdict
    // (below) may be `None` for a known key. Only a request whose stream may be resumable
    // (or a background one) asks.
    // Only a stream can be resumable (a reconnect is the same streaming request sent again):
    // a call answered whole does not look at the headers for it.
    let resumable = if stream {
        crate::resume::applies(route.resumable, &parts.headers)
    } else {
        None
    };
    let owner = (resumable.is_some() || background.is_some())
        .then(|| crate::admit::Keys::stream_owner(&identity));
    let key = keys
        .authorize(route_idx, model, identity, &mut parts.headers)
        .map_err(Failure::keys)?;
    let last = resumable
        .and_then(|_| parts.headers.get(crate::resume::LAST_EVENT_ID))
        .filter(|_| background.is_none());
    if let Some(last) = last {
        let owner = owner.unwrap_or(Ok(None)).map_err(Failure::keys)?;
        // Boxed: a wait (Redis) that only reconnects make.
        let r = Box::pin(super::resume::resume(
            state,
            last,
            owner.as_deref().map(|k| k.id()),
            &request_id,
        ))
        .await
        .map_err(|f| *f)?;
        return Ok(Admitted::Resumed(r));
    }
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
        crate::admit::IdempotencyStart::None => None,
        crate::admit::IdempotencyStart::Run(g) => Some(g),
        crate::admit::IdempotencyStart::Replay(stored) => {
            let r = crate::admit::replay(stored, &request_id);
            return Ok(Admitted::Replay(r.map(|b| GatewayBody::Full(Some(b)))));
        }
    };
    let reserve = crate::admit::reservation(max_tokens, bytes.len());
    let ticket = keys
        .admit(route_idx, key.as_ref(), model, reserve)
        .await
        .map_err(Failure::keys)?;
    if let Some(mut t) = ticket {
        t.set_idempotency(guard);
        log.set_ticket(t);
    } else if let Some(g) = guard {
        // Held by a ticket of its own: released or completed as any other.
        log.set_ticket(keys.bare_ticket(route_idx, g));
    }
    // After the limits, before any upstream attempt (and the cache): the route's input
    // guardrails. A route without any pays this emptiness check.
    let mut guarded: Option<Bytes> = None;
    let mut guard_header = None;
    let guardrails = match key.as_deref() {
        Some(k) if !k.config.guardrails.is_empty() => {
            let mut all = route.guardrails.clone();
            all.extend(
                k.config
                    .guardrails
                    .iter()
                    .filter(|i| !route.guardrails.contains(i)),
            );
            all
        }
        _ => route.guardrails.clone(),
    };
    if !guardrails.is_empty() {
        // Boxed: a wait (an external checker) that routes without guardrails never make.
        let checked = Box::pin(crate::guard::check_input(
            &state.guards,
            &guardrails,
            &bytes,
            model,
            deadline,
            &state.telemetry,
        ))
        .await;
        checked.verdicts.record(log);
        guard_header = checked.verdicts.header();
        if let Some(b) = checked.blocked {
            let error = GatewayError::ContentBlocked {
                guardrail: b.guardrail,
                reason: b.reason,
            };
            return Err(Failure::new(error, EndReason::ContentBlocked).with_header(guard_header));
        }
        guarded = checked.body;
    }
    let include_usage = probe.stream_options.as_ref().and_then(|o| o.include_usage);
    // After the limits: a hit counts as a request (and gives its token reservation back).
    // A background response is answered with its id, never from the cache.
    let route_cache = route.cache.as_ref().filter(|_| background.is_none());
    let cache = match route_cache {
        None => None,
        Some(config) => {
            let guardrail_names = if guardrails.is_empty() {
                String::new()
            } else {
                state.guards.names(&guardrails)
            };
            let ask = crate::admit::CacheAsk {
                route: &route.name,
                config,
                op,
                model,
                body: &bytes,
                key_id: key.as_deref().map(|k| k.id()),
                headers: &parts.headers,
                stream,
                include_usage: include_usage == Some(true),
                guardrails: &guardrail_names,
                deadline,
                started: log.started(),
            };
            // Boxed: a wait (Redis, a flight) that routes without a cache never make.
            let start = Box::pin(keys.cache_start(ask))
                .await
                .map_err(|e| Failure::bad_request(GatewayError::CacheTtl(e)))?;
            match start {
                crate::admit::CacheStart::Hit(entry, age) => {
                    let price_list = state.upstream(route.primary_upstream()).price_list;
                    let guardrails = if guardrails.is_empty() {
                        None
                    } else {
                        state.guards.hit_header(&guardrails, guard_header.as_ref())
                    };
                    return Ok(Admitted::Cached(super::cached::Hit {
                        entry,
                        age,
                        replay: config.replay,
                        price_list,
                        guardrails,
                    }));
                }
                crate::admit::CacheStart::Run(run, status) => {
                    log.cache = run;
                    log.cache_status = Some(status);
                    Some(status)
                }
            }
        }
    };
    let known = crate::ctx::Known {
        model: model.to_string(),
        include_usage,
    };
    drop(probe);
    match owner {
        None => {}
        Some(owner) if background.is_some() => {
            let owner = owner.map_err(Failure::keys)?;
            let owner = owner.as_deref().map(|k| k.id());
            let s = super::background::make_stream(state, route, owner).map_err(|f| *f)?;
            parts.extensions.insert(crate::resume::Background(s));
        }
        // The relay makes the stream once the upstream answers: it takes its owner here.
        // A call answered whole makes none, and pays no extension for it.
        Some(_) if !stream => {}
        Some(owner) => {
            parts.extensions.insert(match owner {
                Ok(Some(k)) => crate::resume::Owner::Key(std::sync::Arc::from(k.id())),
                Ok(None) => crate::resume::Owner::Anyone,
                Err(_) => crate::resume::Owner::Refused,
            });
        }
    }
    let ctx = RequestCtx {
        parts,
        // The guardrails' rewrite (redacted or modified texts) is what goes upstream.
        body: guarded.unwrap_or(bytes),
        request_id,
        op,
        stream,
        max_tokens,
        idempotent,
        known,
        started: log.started(),
        lease,
        guardrails,
    };
    Ok(Admitted::Run(
        Box::new(Policy::new(state.clone(), route_idx, ctx, deadline)),
        cache,
        guard_header,
    ))
}

/// A Gemini client's key may come as `?key=` (the REST API's other spelling): it becomes the
/// `x-goog-api-key` header the key table reads (unless that header is there), and the query
/// is dropped, so neither the key nor a second `alt=sse` reaches the upstream (its path has
/// its own).
fn gemini_key_from_query(parts: &mut http::request::Parts) {
    let Some(query) = parts.uri.query() else {
        return;
    };
    let key = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("key="))
        .filter(|k| !k.is_empty())
        .and_then(|k| http::HeaderValue::from_str(k).ok());
    if let Some(mut key) = key {
        if !parts.headers.contains_key("x-goog-api-key") {
            key.set_sensitive(true);
            parts.headers.insert("x-goog-api-key", key);
        }
    }
    let mut uri = std::mem::take(&mut parts.uri).into_parts();
    let path = uri.path_and_query.as_ref().map(|pq| pq.path().to_string());
    uri.path_and_query = path.and_then(|p| http::uri::PathAndQuery::try_from(p).ok());
    parts.uri = http::Uri::from_parts(uri).unwrap_or_default();
}
