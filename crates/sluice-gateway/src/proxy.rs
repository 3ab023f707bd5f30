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
    let path = parts.uri.path().to_string();
    let api = route::api_of(&path);
    let fail = |log: &mut RequestLog, e: GatewayError, reason: EndReason| {
        log.status = e.status().as_u16();
        log.finish(reason);
        tracing::debug!(request_id = %log.request_id, error = %e, "request failed");
        error_response(api, &e, &request_id)
    };
    let endpoint = match route::endpoint(&parts.method, &path) {
        Ok(ep) => ep,
        Err(e) => return fail(&mut log, e, EndReason::BadRequest),
    };
    let (api, upstream_path) = match endpoint {
        Endpoint::Health => {
            log.status = 200;
            log.finish(EndReason::Completed);
            return full(
                StatusCode::OK,
                "application/json",
                Bytes::from_static(b"{\"status\":\"ok\"}"),
            );
        }
        Endpoint::Metrics => {
            log.status = 200;
            log.finish(EndReason::Completed);
            return full(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                Bytes::from(state.telemetry.encode()),
            );
        }
        Endpoint::AdminPools => {
            log.status = 200;
            log.finish(EndReason::Completed);
            let pairs: Vec<(String, Upstream)> = state
                .config
                .upstreams
                .iter()
                .map(|u| u.name.clone())
                .zip(state.upstreams.iter().cloned())
                .collect();
            let body = crate::pools::snapshot_json(&pairs).to_string();
            return full(StatusCode::OK, "application/json", Bytes::from(body));
        }
        Endpoint::Models => {
            log.status = 200;
            log.finish(EndReason::Completed);
            let mut r = full(
                StatusCode::OK,
                "application/json",
                state.models_body.clone(),
            );
            r.headers_mut().insert(REQUEST_ID, request_id.clone());
            return r;
        }
        Endpoint::Model { api, upstream_path } => (api, upstream_path),
    };
    if state.draining.is_cancelled() {
        return fail(&mut log, GatewayError::ShuttingDown, EndReason::Shutdown);
    }

    // The body is read whole (bounded), so every request can be replayed and routed by model.
    let limit = state.config.server.max_request_body;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return fail(
            &mut log,
            GatewayError::BodyTooLarge { limit },
            EndReason::BodyTooLarge,
        );
    }
    let bytes = match Limited::new(body, limit as usize).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return fail(
                &mut log,
                GatewayError::BodyTooLarge { limit },
                EndReason::BodyTooLarge,
            )
        }
        Err(e) => {
            return fail(
                &mut log,
                GatewayError::BodyRead(e.to_string()),
                EndReason::BadRequest,
            )
        }
    };
    let probe: Probe<'_> = match serde_json::from_slice(&bytes) {
        Ok(p) => p,
        Err(e) => {
            return fail(
                &mut log,
                GatewayError::BadJson(e.to_string()),
                EndReason::BadRequest,
            )
        }
    };
    let Some(model) = probe.model.as_deref().map(str::to_string) else {
        return fail(&mut log, GatewayError::MissingModel, EndReason::BadRequest);
    };
    log.model.clone_from(&model);
    let Some(route) = state.config.route_for(&model) else {
        return fail(
            &mut log,
            GatewayError::UnknownModel(model),
            EndReason::BadRequest,
        );
    };
    let on_disconnect = route.on_client_disconnect;
    let ucfg = &state.config.upstreams[route.upstream];
    let upstream = &state.upstreams[route.upstream];
    log.route.clone_from(&ucfg.name);
    let lane = route
        .lane
        .unwrap_or_else(|| probe.lane(ucfg.long_max_tokens));

    let mut body = bytes;
    if let Some(rule) = &ucfg.session_header_to_body {
        if parts.headers.contains_key(&rule.header) {
            let mut v: serde_json::Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => {
                    return fail(
                        &mut log,
                        GatewayError::BadJson(e.to_string()),
                        EndReason::BadRequest,
                    )
                }
            };
            if let Err(e) = headers::session_header_to_body(rule, &parts.headers, &mut v) {
                return fail(
                    &mut log,
                    GatewayError::BadJson(e.to_string()),
                    EndReason::BadRequest,
                );
            }
            body = Bytes::from(v.to_string());
        }
    }

    let mut up_req = Request::new(body);
    *up_req.method_mut() = parts.method.clone();
    *up_req.uri_mut() = match parts.uri.query() {
        Some(q) => format!("{upstream_path}?{q}")
            .parse()
            .unwrap_or_else(|_| upstream_path.parse().expect("static path")),
        None => http::Uri::from_static(upstream_path),
    };
    *up_req.headers_mut() =
        headers::upstream_request_headers(&parts.headers, &ucfg.auth, &request_id);
    up_req.extensions_mut().insert(lane);
    // Names only, kept for the "upstream rejected a session" diagnostic below.
    let session_headers_sent: Vec<String> = headers::session_header_names(up_req.headers())
        .into_iter()
        .map(str::to_string)
        .collect();
    let t = ucfg.timeouts;
    let total_by = started + t.total;
    let first_by = (started + t.first_byte).min(total_by);
    let resp = match upstream.send(up_req, first_by).await {
        Ok(r) => r,
        Err(UpstreamError::Deadline) => {
            let e = if first_by == total_by {
                GatewayError::TotalTimeout {
                    upstream: ucfg.name.clone(),
                    timeout: t.total,
                }
            } else {
                GatewayError::FirstByteTimeout {
                    upstream: ucfg.name.clone(),
                    timeout: t.first_byte,
                }
            };
            return fail(&mut log, e, EndReason::FirstByteTimeout);
        }
        Err(source) => {
            tracing::warn!(request_id = %log.request_id, upstream = %ucfg.name, error = %source, "upstream request failed");
            let e = GatewayError::Upstream {
                upstream: ucfg.name.clone(),
                source,
            };
            return fail(&mut log, e, EndReason::UpstreamError);
        }
    };
    let timings = resp.extensions().get::<PhaseTimings>().copied();
    if let Some(p) = timings {
        state
            .telemetry
            .acquire_wait(&ucfg.name, lane.as_str(), p.acquire);
    }
    log.timings = timings;
    let want_timing = state.config.server.server_timing
        || parts
            .headers
            .get("x-sluice-timing")
            .is_some_and(|v| v.as_bytes() == b"1");
    let (rparts, mut rbody) = resp.into_parts();
    log.status = rparts.status.as_u16();
    let is_sse = rparts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    let mut out_headers = headers::client_response_headers(&rparts.headers, &request_id);
    if want_timing {
        if let Some(v) = timings.and_then(|p| HeaderValue::from_str(&p.server_timing_header()).ok())
        {
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
            first_event_by: first_by,
            idle: t.idle,
            total_by,
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
            on_disconnect,
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
    let read = tokio::time::timeout_at(total_by, read_bounded(&mut rbody, max)).await;
    let bytes = match read {
        Err(_) => {
            let e = GatewayError::TotalTimeout {
                upstream: ucfg.name.clone(),
                timeout: t.total,
            };
            return fail(&mut log, e, EndReason::TotalTimeout);
        }
        Ok(Err(None)) => {
            let e = GatewayError::ResponseTooLarge {
                upstream: ucfg.name.clone(),
                limit: max,
            };
            return fail(&mut log, e, EndReason::ResponseTooLarge);
        }
        Ok(Err(Some(source))) => {
            let e = GatewayError::UpstreamBody {
                upstream: ucfg.name.clone(),
                source,
            };
            return fail(&mut log, e, EndReason::UpstreamReset);
        }
        Ok(Ok(b)) => b,
    };
    // The body has ended: its timings now include the last byte.
    log.timings = Some(rbody.timings());
    if want_timing {
        if let Ok(v) = HeaderValue::from_str(&rbody.timings().server_timing_header()) {
            out_headers.insert("server-timing", v);
        }
    }
    if rparts.status.is_client_error() && contains_ci(&bytes, b"session") {
        // Names only: the values are credentials or identifiers.
        tracing::warn!(
            request_id = %log.request_id,
            upstream = %ucfg.name,
            status = rparts.status.as_u16(),
            session_headers_sent = ?session_headers_sent,
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
