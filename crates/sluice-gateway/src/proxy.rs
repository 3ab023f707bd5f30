//! One request, left to right once: endpoint, bounded body, model, route, upstream request;
//! and its response right to left once: the SSE relay or a bounded non-streaming body.

use std::borrow::Cow;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use serde::Deserialize;
use sluice_sse::Decoder;
use sluice_upstream::{Lane, PhaseTimings, Upstream, UpstreamError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::error::GatewayError;
use crate::headers::{self, REQUEST_ID};
use crate::relay::{RelayTimers, SseRelay};
use crate::route::{self, Api, Endpoint};
use crate::telemetry::{EndReason, RequestLog, Telemetry};

/// Everything requests share.
pub(crate) struct State {
    pub(crate) config: Config,
    /// Parallel to `config.upstreams`.
    pub(crate) upstreams: Vec<Upstream>,
    pub(crate) telemetry: Arc<Telemetry>,
    /// Cancelled when the shutdown grace period is over: streams still running end with an
    /// error event.
    pub(crate) streams_deadline: CancellationToken,
    /// Set when shutdown begins: new model requests get 503.
    pub(crate) draining: CancellationToken,
    models_body: Bytes,
    request_ids: AtomicU64,
    id_prefix: String,
}

impl State {
    pub(crate) fn new(config: Config, upstreams: Vec<Upstream>, telemetry: Arc<Telemetry>) -> Self {
        let mut ids: Vec<&str> = config
            .routes
            .iter()
            .flat_map(|r| r.models.iter())
            .map(String::as_str)
            .filter(|m| !m.contains(['*', '?']))
            .collect();
        ids.dedup();
        let data: Vec<_> = ids
            .iter()
            .map(|id| serde_json::json!({ "id": id, "object": "model", "created": 0, "owned_by": "sluice" }))
            .collect();
        let models_body =
            Bytes::from(serde_json::json!({ "object": "list", "data": data }).to_string());
        // A per-process prefix keeps generated ids unique across restarts without a RNG crate.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        State {
            config,
            upstreams,
            telemetry,
            streams_deadline: CancellationToken::new(),
            draining: CancellationToken::new(),
            models_body,
            request_ids: AtomicU64::new(0),
            id_prefix: format!("sl-{:x}{:x}", nanos as u64, std::process::id()),
        }
    }

    fn request_id(&self, req: &http::request::Parts) -> HeaderValue {
        if let Some(v) = req.headers.get(REQUEST_ID) {
            if !v.is_empty() && v.len() <= 200 {
                return v.clone();
            }
        }
        let n = self.request_ids.fetch_add(1, Ordering::Relaxed);
        HeaderValue::from_str(&format!("{}-{n}", self.id_prefix))
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

fn error_response(api: Api, e: &GatewayError, request_id: &HeaderValue) -> Response<GatewayBody> {
    let mut r = full(e.status(), "application/json", e.body(api));
    r.headers_mut().insert(REQUEST_ID, request_id.clone());
    r
}

/// The fields routing needs; serde skips the rest without building it.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    stream: Option<bool>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    max_output_tokens: Option<u64>,
}

impl Probe<'_> {
    /// Streams and long generations are long calls: they take the `stream` lane, so they never
    /// share a connection with short calls.
    fn lane(&self, long_max_tokens: u64) -> Lane {
        let tokens = self
            .max_tokens
            .or(self.max_completion_tokens)
            .or(self.max_output_tokens)
            .unwrap_or(0);
        if self.stream == Some(true) || tokens > long_max_tokens {
            Lane::Stream
        } else {
            Lane::Short
        }
    }
}

/// Why a request ended before its response started: what the client gets, and the end reason
/// that is logged.
struct Failure {
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
}

/// Records the failure once and answers in the client API's error format.
fn fail(
    api: Api,
    log: &mut RequestLog,
    f: Failure,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    log.status = f.error.status().as_u16();
    log.finish(f.reason);
    tracing::debug!(request_id = %log.request_id, error = %f.error, "request failed");
    error_response(api, &f.error, request_id)
}

/// Serves one request. Never fails: every error becomes a response in the client's format.
pub(crate) async fn handle<B>(state: Arc<State>, req: Request<B>) -> Response<GatewayBody>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let request_id = state.request_id(&parts);
    let mut log = RequestLog::new(
        state.telemetry.clone(),
        request_id.to_str().unwrap_or("-").to_string(),
        started,
    );
    let api = route::api_of(parts.uri.path());
    let (api, upstream_path) = match route::endpoint(&parts.method, parts.uri.path()) {
        Err(e) => return fail(api, &mut log, Failure::bad_request(e), &request_id),
        Ok(Endpoint::Model { api, upstream_path }) => (api, upstream_path),
        Ok(local) => {
            let r = local_endpoint(&state, local, &request_id);
            log.status = r.status().as_u16();
            log.finish(EndReason::Completed);
            return r;
        }
    };
    if state.draining.is_cancelled() {
        let f = Failure::new(GatewayError::ShuttingDown, EndReason::Shutdown);
        return fail(api, &mut log, f, &request_id);
    }
    match forward(&state, &parts, body, upstream_path, &request_id, &mut log).await {
        Ok(fwd) => respond(&state, api, fwd, log, &parts.headers, &request_id).await,
        Err(f) => fail(api, &mut log, f, &request_id),
    }
}

/// The endpoints the gateway answers itself.
fn local_endpoint(state: &State, ep: Endpoint, request_id: &HeaderValue) -> Response<GatewayBody> {
    match ep {
        Endpoint::Health => full(
            StatusCode::OK,
            "application/json",
            Bytes::from_static(b"{\"status\":\"ok\"}"),
        ),
        Endpoint::Metrics => full(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Bytes::from(state.telemetry.encode()),
        ),
        Endpoint::AdminPools => {
            let pairs: Vec<(String, Upstream)> = state
                .config
                .upstreams
                .iter()
                .map(|u| u.name.clone())
                .zip(state.upstreams.iter().cloned())
                .collect();
            let body = crate::pools::snapshot_json(&pairs).to_string();
            full(StatusCode::OK, "application/json", Bytes::from(body))
        }
        // Model calls are proxied and never get here.
        Endpoint::Models | Endpoint::Model { .. } => {
            let mut r = full(
                StatusCode::OK,
                "application/json",
                state.models_body.clone(),
            );
            r.headers_mut().insert(REQUEST_ID, request_id.clone());
            r
        }
    }
}

/// What `forward` learned, for the response leg.
struct Forwarded {
    resp: Response<sluice_upstream::ResponseBody>,
    upstream: usize,
    on_disconnect: crate::config::OnClientDisconnect,
    first_by: Instant,
    total_by: Instant,
    /// Names only, for the "upstream rejected a session" diagnostic.
    session_headers_sent: Vec<String>,
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
    match Limited::new(body, limit as usize).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(Failure::bad_request(GatewayError::BodyRead(e.to_string()))),
    }
}

/// The request as the upstream gets it: path under its base URL, end-to-end headers, its
/// credentials, the request id, the lane, and the session header copied into the body if
/// configured.
fn upstream_request(
    parts: &http::request::Parts,
    mut body: Bytes,
    upstream_path: &'static str,
    ucfg: &crate::config::UpstreamConfig,
    lane: Lane,
    request_id: &HeaderValue,
) -> Result<Request<Bytes>, Failure> {
    if let Some(rule) = &ucfg.session_header_to_body {
        if parts.headers.contains_key(&rule.header) {
            let bad = |e: String| Failure::bad_request(GatewayError::BadJson(e));
            let mut v: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?;
            headers::session_header_to_body(rule, &parts.headers, &mut v)
                .map_err(|e| bad(e.to_string()))?;
            body = Bytes::from(v.to_string());
        }
    }
    let mut up_req = Request::new(body);
    *up_req.method_mut() = parts.method.clone();
    *up_req.uri_mut() = match parts.uri.query() {
        Some(q) => format!("{upstream_path}?{q}")
            .parse()
            .unwrap_or_else(|_| http::Uri::from_static(upstream_path)),
        None => http::Uri::from_static(upstream_path),
    };
    *up_req.headers_mut() =
        headers::upstream_request_headers(&parts.headers, &ucfg.auth, request_id);
    up_req.extensions_mut().insert(lane);
    Ok(up_req)
}

/// Left to right: body, model, route, upstream request, response headers.
async fn forward<B>(
    state: &State,
    parts: &http::request::Parts,
    body: B,
    upstream_path: &'static str,
    request_id: &HeaderValue,
    log: &mut RequestLog,
) -> Result<Forwarded, Failure>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let bytes = read_request_body(parts, body, state.config.server.max_request_body).await?;
    let probe: Probe<'_> = serde_json::from_slice(&bytes)
        .map_err(|e| Failure::bad_request(GatewayError::BadJson(e.to_string())))?;
    let model = probe
        .model
        .as_deref()
        .ok_or_else(|| Failure::bad_request(GatewayError::MissingModel))?;
    log.model = model.to_string();
    let route = state
        .config
        .route_for(model)
        .ok_or_else(|| Failure::bad_request(GatewayError::UnknownModel(model.to_string())))?;
    let ucfg = &state.config.upstreams[route.upstream];
    log.route.clone_from(&ucfg.name);
    let lane = route
        .lane
        .unwrap_or_else(|| probe.lane(ucfg.long_max_tokens));
    let up_req = upstream_request(parts, bytes.clone(), upstream_path, ucfg, lane, request_id)?;
    let session_headers_sent = headers::session_header_names(up_req.headers())
        .into_iter()
        .map(str::to_string)
        .collect();
    let t = ucfg.timeouts;
    let total_by = log.started() + t.total;
    let first_by = (log.started() + t.first_byte).min(total_by);
    let resp = match state.upstreams[route.upstream].send(up_req, first_by).await {
        Ok(r) => r,
        Err(UpstreamError::Deadline) => {
            let upstream = ucfg.name.clone();
            let error = if first_by == total_by {
                GatewayError::TotalTimeout {
                    upstream,
                    timeout: t.total,
                }
            } else {
                GatewayError::FirstByteTimeout {
                    upstream,
                    timeout: t.first_byte,
                }
            };
            return Err(Failure::new(error, EndReason::FirstByteTimeout));
        }
        Err(source) => {
            tracing::warn!(request_id = %log.request_id, upstream = %ucfg.name, error = %source, "upstream request failed");
            let error = GatewayError::Upstream {
                upstream: ucfg.name.clone(),
                source,
            };
            return Err(Failure::new(error, EndReason::UpstreamError));
        }
    };
    let timings = resp.extensions().get::<PhaseTimings>().copied();
    if let Some(p) = timings {
        state
            .telemetry
            .acquire_wait(&ucfg.name, lane.as_str(), p.acquire);
    }
    log.timings = timings;
    Ok(Forwarded {
        resp,
        upstream: route.upstream,
        on_disconnect: route.on_client_disconnect,
        first_by,
        total_by,
        session_headers_sent,
    })
}

/// Right to left: the SSE relay, or the whole (bounded) body.
async fn respond(
    state: &State,
    api: Api,
    fwd: Forwarded,
    mut log: RequestLog,
    client_headers: &http::HeaderMap,
    request_id: &HeaderValue,
) -> Response<GatewayBody> {
    let ucfg = &state.config.upstreams[fwd.upstream];
    let want_timing = state.config.server.server_timing
        || client_headers
            .get("x-sluice-timing")
            .is_some_and(|v| v.as_bytes() == b"1");
    let (rparts, mut rbody) = fwd.resp.into_parts();
    log.status = rparts.status.as_u16();
    let is_sse = rparts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    let mut out_headers = headers::client_response_headers(&rparts.headers, request_id);
    let server_timing = |t: PhaseTimings| HeaderValue::from_str(&t.server_timing_header()).ok();
    if want_timing {
        if let Some(v) = log.timings.and_then(server_timing) {
            out_headers.insert("server-timing", v);
        }
    }

    if is_sse && rparts.status.is_success() {
        out_headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        out_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        out_headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        let decoder =
            Decoder::with_max_event_bytes(state.config.server.max_event_bytes).unwrap_or_default();
        let timers = RelayTimers {
            first_event_by: fwd.first_by,
            idle: ucfg.timeouts.idle,
            total_by: fwd.total_by,
            heartbeat: state.config.server.heartbeat,
        };
        let relay = SseRelay::new(
            rbody,
            decoder,
            api,
            log,
            state.telemetry.clone(),
            timers,
            state.streams_deadline.clone().cancelled_owned(),
            fwd.on_disconnect,
        );
        let mut r = Response::new(GatewayBody::Relay(Box::new(relay)));
        *r.status_mut() = rparts.status;
        *r.headers_mut() = out_headers;
        return r;
    }

    // Non-streaming (or an upstream error, which is already in the provider's format): read it
    // whole, bounded in size and by the total deadline, so a too-large body can still be a
    // clean 502 instead of a cut.
    let max = state.config.server.max_response_body;
    let upstream = ucfg.name.clone();
    let read = tokio::time::timeout_at(fwd.total_by, read_bounded(&mut rbody, max)).await;
    let bytes = match read {
        Ok(Ok(b)) => b,
        Err(_) => {
            let error = GatewayError::TotalTimeout {
                upstream,
                timeout: ucfg.timeouts.total,
            };
            return fail(
                api,
                &mut log,
                Failure::new(error, EndReason::TotalTimeout),
                request_id,
            );
        }
        Ok(Err(None)) => {
            let error = GatewayError::ResponseTooLarge {
                upstream,
                limit: max,
            };
            let f = Failure::new(error, EndReason::ResponseTooLarge);
            return fail(api, &mut log, f, request_id);
        }
        Ok(Err(Some(source))) => {
            let error = GatewayError::UpstreamBody { upstream, source };
            return fail(
                api,
                &mut log,
                Failure::new(error, EndReason::UpstreamReset),
                request_id,
            );
        }
    };
    // The body has ended: its timings now include the last byte.
    log.timings = Some(rbody.timings());
    if want_timing {
        if let Some(v) = server_timing(rbody.timings()) {
            out_headers.insert("server-timing", v);
        }
    }
    if rparts.status.is_client_error() && contains_ci(&bytes, b"session") {
        // Names only: the values are credentials or identifiers.
        tracing::warn!(
            request_id = %log.request_id,
            upstream = %ucfg.name,
            status = rparts.status.as_u16(),
            session_headers_sent = ?fwd.session_headers_sent,
            "upstream rejected a request mentioning a session"
        );
    }
    log.first_byte();
    log.sent(bytes.len(), 0);
    log.finish(EndReason::Completed);
    let mut r = Response::new(GatewayBody::Full(Some(bytes)));
    *r.status_mut() = rparts.status;
    *r.headers_mut() = out_headers;
    r
}

/// Reads a whole body up to `max` bytes. `Err(None)`: over the limit; `Err(Some(e))`: the
/// upstream broke off. Keeps the body (unlike `Limited`), so its timings stay readable.
async fn read_bounded(
    body: &mut sluice_upstream::ResponseBody,
    max: u64,
) -> Result<Bytes, Option<sluice_upstream::BodyError>> {
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(Some)?.into_data() {
            if (buf.len() + data.len()) as u64 > max {
                return Err(None);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}
