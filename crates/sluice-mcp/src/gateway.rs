//! [`McpGateway`]: the service the composition root mounts at `/mcp`. One request's path:
//! the HTTP method (POST a message, GET the server stream, DELETE the session), the body read
//! within `max_message_bytes`, the JSON-RPC framing, the era (the `MCP-Protocol-Version`
//! header: handshake-era requests need a session id, 2026-07-28 requests an envelope), then
//! the JSON-RPC method: answered here (`initialize`, `ping`, `server/discover`), fanned out
//! and merged (`*/list`), or routed to one server (`tools/call`, `prompts/get`, ...).

use std::collections::{HashSet, VecDeque};
use std::fmt::Display;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;
use http::header::{HeaderValue, ACCEPT, ALLOW, RETRY_AFTER};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::Body;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use sluice_config::McpConfig;
use sluice_telemetry::untrusted::Untrusted;
use tokio::time::Instant;

use crate::error::{McpError, UpstreamError};
use crate::federation::{self, Part};
use crate::grants::{CallLimiter, ConfigGrants, KeyGrants};
use crate::jsonrpc::{self, Kind, Message, Rejection};
use crate::protocol::{self, Version};
use crate::relay::{self, CallStream, CancelUpstream, McpBody, MergeStream};
use crate::session::{
    key_tag, unix_now, SessionClaims, SessionCodec, UpstreamEntry, UpstreamState,
};
use crate::telemetry::{
    CallFinish, CallOutcome, McpMetrics, ToolCallRecord, ToolCallSink, TracingSink,
};
use crate::upstream::{CallCtx, Reply, Upstream};

/// Ended sessions remembered by this instance (a DELETEd id is refused here at once; other
/// instances learn it from the upstreams' 404s).
const ENDED_SESSIONS: usize = 10_000;

/// Who is calling, as the gateway's key stage found it.
#[derive(Clone, Default)]
pub struct Caller {
    /// The virtual key's id (`None`: no key; only grants with `keys = ["*"]` apply).
    pub key_id: Option<String>,
    /// The client's own credential, sent as `Authorization` to servers with
    /// `auth = { type = "passthrough" }` (and to nothing else). Never logged.
    pub authorization: Option<HeaderValue>,
    /// The client's W3C `traceparent`: each tool call's span continues its trace.
    pub traceparent: Option<HeaderValue>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("key_id", &self.key_id)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// What the gateway needs from the composition root besides its config.
#[derive(Default)]
pub struct McpDeps {
    /// Who may use what. `None`: [`ConfigGrants`] from `[[mcp.grant]]`.
    pub grants: Option<Arc<dyn KeyGrants>>,
    /// The metric families (register them once with [`McpMetrics::register`]).
    pub metrics: McpMetrics,
    /// Where tool-call records go. `None`: [`TracingSink`].
    pub sink: Option<Arc<dyn ToolCallSink>>,
}

impl std::fmt::Debug for McpDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpDeps").finish_non_exhaustive()
    }
}

/// The MCP gateway: cheap to clone (shared state), one per config generation.
#[derive(Clone)]
pub struct McpGateway {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpGateway")
            .field("servers", &self.inner.upstreams.len())
            .finish_non_exhaustive()
    }
}

struct Inner {
    upstreams: Vec<Arc<Upstream>>,
    codec: SessionCodec,
    grants: Arc<dyn KeyGrants>,
    limiter: CallLimiter,
    metrics: McpMetrics,
    sink: Arc<dyn ToolCallSink>,
    max_message: usize,
    heartbeat: Duration,
    ended: Mutex<Ended>,
}

#[derive(Default)]
struct Ended {
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

/// A request's era and what it brings: a verified session, or a 2026-07-28 envelope.
enum Era {
    Handshake { claims: SessionClaims, origin: u64 },
    Modern { meta: Map<String, Value> },
}

impl Era {
    fn is_modern(&self) -> bool {
        matches!(self, Era::Modern { .. })
    }

    fn label(&self) -> &'static str {
        match self {
            Era::Handshake { claims, .. } => claims.version.as_str(),
            Era::Modern { .. } => Version::V2026_07_28.as_str(),
        }
    }
}

/// One client request being served.
struct Req<'a> {
    caller: &'a Caller,
    era: Era,
    id: Value,
    method: String,
    msg: Message,
    headers: &'a HeaderMap,
    accepts_sse: bool,
}

impl Req<'_> {
    fn ctx(&self) -> CallCtx<'_> {
        let origin = match &self.era {
            Era::Handshake { origin, .. } => *origin,
            Era::Modern { .. } => hash64(&key_tag(self.caller.key_id.as_deref())),
        };
        let params = match &self.era {
            Era::Modern { .. } => self
                .headers
                .iter()
                .filter(|(k, _)| k.as_str().starts_with(protocol::PARAM_PREFIX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            Era::Handshake { .. } => Vec::new(),
        };
        CallCtx {
            authorization: self.caller.authorization.as_ref(),
            params,
            origin,
        }
    }

    fn meta(&self) -> Option<&Map<String, Value>> {
        match &self.era {
            Era::Modern { meta } => Some(meta),
            Era::Handshake { .. } => None,
        }
    }

    /// A JSON-RPC error answer: 2026-07-28 with the SDKs' status table, handshake era 200.
    fn reject(&self, e: &Rejection) -> Response<McpBody> {
        let status = if self.era.is_modern() || e.code == jsonrpc::RATE_LIMITED {
            e.modern_status()
        } else {
            StatusCode::OK
        };
        relay::json_response(status, jsonrpc::error_body(Some(&self.id), e))
    }

    fn answer(&self, mut result: Value) -> Response<McpBody> {
        if self.era.is_modern() {
            if let Some(obj) = result.as_object_mut() {
                if !obj.contains_key("resultType") {
                    federation::add_modern_result_fields(obj);
                }
            }
        }
        relay::json_response(StatusCode::OK, jsonrpc::result_body(&self.id, result))
    }
}

fn hash64<T: Hash + ?Sized>(v: &T) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// A transport-level refusal (before a JSON-RPC id is known).
fn refuse(status: StatusCode, code: i64, message: &str) -> Response<McpBody> {
    relay::json_response(
        status,
        jsonrpc::error_body(None, &Rejection::new(code, message)),
    )
}

impl McpGateway {
    /// The gateway of `cfg`. Starts the stdio servers (on the current tokio runtime: call it
    /// inside one); they are stopped (killed) when the last clone is dropped.
    ///
    /// # Errors
    /// No session secret, an unreadable `ca_file`, a credential that is no header value.
    pub fn new(cfg: &McpConfig, deps: McpDeps) -> Result<McpGateway, McpError> {
        let secret = cfg.session_secret.as_ref().ok_or(McpError::NoSecret)?;
        let upstreams = cfg
            .servers
            .iter()
            .map(|s| Upstream::new(s, cfg.max_message_bytes).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(McpGateway {
            inner: Arc::new(Inner {
                upstreams,
                codec: SessionCodec::new(secret.as_bytes(), cfg.session_ttl),
                grants: deps
                    .grants
                    .unwrap_or_else(|| Arc::new(ConfigGrants::new(&cfg.grants))),
                limiter: CallLimiter::new(&cfg.limits),
                metrics: deps.metrics,
                sink: deps.sink.unwrap_or_else(|| Arc::new(TracingSink)),
                max_message: cfg.max_message_bytes,
                heartbeat: cfg.heartbeat,
                ended: Mutex::new(Ended::default()),
            }),
        })
    }

    /// Serves one request to `/mcp`. Never fails: refusals are HTTP statuses with JSON-RPC
    /// error bodies.
    ///
    /// Cancel safety: dropping the future (the client went away before the answer began)
    /// drops every upstream exchange it started; an unfinished tool call on a handshake-era
    /// upstream session is also cancelled there with `notifications/cancelled`.
    pub async fn handle<B>(&self, req: Request<B>, caller: Caller) -> Response<McpBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Display,
    {
        let (parts, body) = req.into_parts();
        match parts.method {
            Method::POST => {
                let body = match read_capped(body, self.inner.max_message).await {
                    Ok(b) => b,
                    Err(status) => {
                        return refuse(
                            status,
                            jsonrpc::INVALID_REQUEST,
                            if status == StatusCode::PAYLOAD_TOO_LARGE {
                                "the message exceeds mcp.max_message_bytes"
                            } else {
                                "the request body could not be read"
                            },
                        )
                    }
                };
                self.post(&parts.headers, &body, &caller).await
            }
            Method::GET => self.get(&parts.headers, &caller).await,
            Method::DELETE => self.delete(&parts.headers, &caller).await,
            _ => {
                let mut r = relay::empty_response(StatusCode::METHOD_NOT_ALLOWED);
                r.headers_mut()
                    .insert(ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
                r
            }
        }
    }

    /// `/admin/mcp`: each server, its transport, health (from the traffic and, for stdio
    /// servers, the process) and tool count.
    pub fn admin_snapshot(&self) -> Value {
        let servers: Vec<Value> = self
            .inner
            .upstreams
            .iter()
            .map(|u| {
                let mut v = u.health.snapshot();
                v["name"] = json!(u.name);
                if let (Some(obj), Value::Object(t)) = (v.as_object_mut(), u.transport_snapshot()) {
                    obj.extend(t);
                }
                v
            })
            .collect();
        json!({ "servers": servers })
    }

    /// The number of configured servers.
    pub fn server_count(&self) -> usize {
        self.inner.upstreams.len()
    }

    // === POST ===

    async fn post(&self, headers: &HeaderMap, body: &[u8], caller: &Caller) -> Response<McpBody> {
        let msg = match jsonrpc::parse(body) {
            Ok(m) => m,
            Err(rejected) => {
                let (id, e) = *rejected;
                return relay::json_response(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::error_body(id.as_ref(), &e),
                );
            }
        };
        let version_header = headers
            .get(protocol::PROTOCOL_VERSION)
            .map(|v| v.to_str().ok().and_then(Version::parse));
        match version_header {
            Some(Some(v)) if v.is_modern() => self.post_modern(headers, msg, caller).await,
            Some(None) => {
                let raw = headers
                    .get(protocol::PROTOCOL_VERSION)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let id = match &msg.kind {
                    Kind::Request { id, .. } => Some(id.clone()),
                    _ => None,
                };
                relay::json_response(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::error_body(id.as_ref(), &protocol::unsupported_version(raw)),
                )
            }
            _ => self.post_handshake(headers, msg, caller).await,
        }
    }

    async fn post_handshake(
        &self,
        headers: &HeaderMap,
        msg: Message,
        caller: &Caller,
    ) -> Response<McpBody> {
        if let Kind::Request { id, method } = &msg.kind {
            if method == "initialize" {
                let (id, params) = (id.clone(), msg.params().cloned());
                return self.initialize(id, params, caller).await;
            }
        }
        let (claims, origin) = match self.session(headers, caller) {
            Ok(c) => c,
            Err(r) => return r,
        };
        match msg.kind.clone() {
            Kind::Request { id, method } => {
                let accepts_sse = accepts_sse(headers);
                let req = Req {
                    caller,
                    era: Era::Handshake { claims, origin },
                    id,
                    method,
                    msg,
                    headers,
                    accepts_sse,
                };
                self.dispatch(req).await
            }
            Kind::Notification { method } => {
                self.client_notification(claims, origin, msg, &method, caller);
                relay::empty_response(StatusCode::ACCEPTED)
            }
            // Answers to server-to-client requests: none are routed (the gateway offers no
            // sampling, roots or elicitation upstream), so none are expected.
            Kind::Response { .. } => relay::empty_response(StatusCode::ACCEPTED),
        }
    }

    async fn post_modern(
        &self,
        headers: &HeaderMap,
        msg: Message,
        caller: &Caller,
    ) -> Response<McpBody> {
        let (id, method) = match &msg.kind {
            Kind::Request { id, method } => (id.clone(), method.clone()),
            // No client-to-server notifications exist at 2026-07-28 (cancelling is closing the
            // stream); accepted and dropped, as the SDKs do.
            Kind::Notification { .. } => return relay::empty_response(StatusCode::ACCEPTED),
            Kind::Response { .. } => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid request: a 2026-07-28 client sends requests only",
                )
            }
        };
        let envelope = match protocol::check_envelope(&method, msg.params(), headers) {
            Ok(e) => e,
            Err(e) => {
                return relay::json_response(e.modern_status(), jsonrpc::error_body(Some(&id), &e))
            }
        };
        let accepts_sse = accepts_sse(headers);
        self.dispatch(Req {
            caller,
            era: Era::Modern {
                meta: envelope.meta,
            },
            id,
            method,
            msg,
            headers,
            accepts_sse,
        })
        .await
    }

    /// The session of a handshake-era request, verified: 400 without an id, 404 for one that
    /// is forged, altered, expired, ended, or another key's.
    #[allow(clippy::result_large_err)]
    fn session(
        &self,
        headers: &HeaderMap,
        caller: &Caller,
    ) -> Result<(SessionClaims, u64), Response<McpBody>> {
        let Some(id) = headers
            .get(protocol::SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
        else {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                "Bad Request: no valid Mcp-Session-Id; send initialize first",
            ));
        };
        let origin = hash64(id);
        let claims =
            self.inner
                .codec
                .verify(id, key_tag(caller.key_id.as_deref()), SystemTime::now());
        let refused = |label: &'static str| {
            self.inner.metrics.session(label);
            Err(refuse(
                StatusCode::NOT_FOUND,
                jsonrpc::INVALID_REQUEST,
                "Session not found",
            ))
        };
        match claims {
            Err(e) => {
                tracing::debug!(reason = %e, "refused an MCP session id");
                refused(e.metric_label())
            }
            Ok(_) if self.inner.ended.lock().set.contains(&origin) => refused("ended"),
            Ok(c) => Ok((c, origin)),
        }
    }

    // === initialize ===

    async fn initialize(
        &self,
        id: Value,
        params: Option<Value>,
        caller: &Caller,
    ) -> Response<McpBody> {
        let requested = params
            .as_ref()
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = Version::negotiate(requested);
        let client_info = params
            .as_ref()
            .and_then(|p| p.get("clientInfo"))
            .filter(|v| v.is_object())
            .cloned()
            .unwrap_or_else(|| json!({ "name": "unknown", "version": "0" }));
        let key = caller.key_id.as_deref();
        let ctx = CallCtx {
            authorization: caller.authorization.as_ref(),
            params: Vec::new(),
            // Stdio calls of this session are found again by the session id's hash, which is
            // not known yet; initialize sends none.
            origin: 0,
        };
        let servers = self.permitted(key);
        let opened = join_all(servers.iter().map(|u| {
            let (ctx, client_info) = (&ctx, &client_info);
            async move { (u, u.open_session(version, client_info, ctx).await) }
        }))
        .await;
        let mut entries = Vec::with_capacity(opened.len());
        let mut results = Vec::new();
        let mut unavailable = Vec::new();
        for (u, outcome) in opened {
            let state = match outcome {
                Ok((state, result)) => {
                    u.health.ok();
                    results.push(result);
                    state
                }
                Err(e) => {
                    self.upstream_failed(u, &e);
                    unavailable.push(json!({ "server": u.name, "reason": e.metric_label() }));
                    UpstreamState::Unavailable
                }
            };
            entries.push(UpstreamEntry {
                server: u.name.clone(),
                state,
            });
        }
        let claims = SessionClaims {
            issued_at: unix_now(SystemTime::now()),
            version,
            key_tag: key_tag(key),
            upstreams: entries,
        };
        let session_id = match self.inner.codec.mint(&claims) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot mint an MCP session id");
                return relay::json_response(
                    StatusCode::OK,
                    jsonrpc::error_body(
                        Some(&id),
                        &Rejection::new(jsonrpc::INTERNAL_ERROR, "cannot create the session"),
                    ),
                );
            }
        };
        self.inner.metrics.session("created");
        let caps = federation::merged_capabilities(results.iter());
        let result = federation::initialize_result(version, caps, unavailable);
        let mut r = relay::json_response(StatusCode::OK, jsonrpc::result_body(&id, result));
        if let Ok(v) = HeaderValue::from_str(&session_id) {
            r.headers_mut().insert(protocol::SESSION_ID, v);
        }
        r
    }

    fn permitted(&self, key: Option<&str>) -> Vec<&Arc<Upstream>> {
        self.inner
            .upstreams
            .iter()
            .filter(|u| self.inner.grants.may_use_server(key, &u.name))
            .collect()
    }

    fn upstream(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.inner.upstreams.iter().find(|u| u.name == name)
    }

    /// The upstream state of `u` for this request: `None` for a 2026-07-28 request and for a
    /// stdio server (one shared process: no session of the client's to keep); else the
    /// session's part, repaired on this instance if the id says the server was unavailable
    /// (down or slow at `initialize`) or `lost` says the server ended it.
    ///
    /// # Errors
    /// [`UpstreamError::NotRunning`]: unavailable, and not repaired now.
    async fn state_of(
        &self,
        req: &Req<'_>,
        u: &Upstream,
        lost: bool,
    ) -> Result<Option<UpstreamState>, UpstreamError> {
        let Era::Handshake { claims, origin } = &req.era else {
            return Ok(None);
        };
        if u.is_stdio() {
            return Ok(None);
        }
        if !lost {
            if let Some(s) = u.repaired(*origin) {
                return Ok(Some(s));
            }
            match claims.upstream(&u.name).map(|e| &e.state) {
                Some(UpstreamState::Unavailable) | None => {}
                Some(s) => return Ok(Some(s.clone())),
            }
        }
        u.repair(*origin, claims.version, lost, &req.ctx())
            .await
            .map(Some)
            .ok_or(UpstreamError::NotRunning)
    }

    fn upstream_failed(&self, u: &Upstream, e: &UpstreamError) {
        u.health.failed(e.metric_label());
        self.inner.metrics.upstream_error(&u.name, e.metric_label());
        tracing::debug!(server = %u.name, error = %e, "MCP server exchange failed");
    }

    // === methods ===

    async fn dispatch(&self, req: Req<'_>) -> Response<McpBody> {
        let modern = req.era.is_modern();
        match req.method.as_str() {
            "ping" if !modern => req.answer(json!({})),
            "server/discover" if modern => req.answer(federation::discover_result()),
            "initialize" => req.reject(&Rejection::new(
                jsonrpc::INVALID_REQUEST,
                if modern {
                    "2026-07-28 has no initialize; use server/discover"
                } else {
                    "the session is already initialized"
                },
            )),
            "tools/call" => self.call_tool(req).await,
            "prompts/get" => self.get_prompt(req).await,
            "resources/read" => self.read_resource(req).await,
            "completion/complete" => self.complete(req).await,
            "logging/setLevel" if !modern => self.set_level(req).await,
            m => match federation::list_field(m) {
                Some(field) => self.list(req, field).await,
                None => req.reject(&Rejection::new(
                    jsonrpc::METHOD_NOT_FOUND,
                    format!("Method not found: {}", sluice_telemetry::untrusted::echo(m)),
                )),
            },
        }
    }

    /// `*/list`: every permitted server's list, merged.
    async fn list(&self, req: Req<'_>, field: &'static str) -> Response<McpBody> {
        let key = req.caller.key_id.as_deref();
        let ctx = req.ctx();
        let servers = self.permitted(key);
        let method = req.method.as_str();
        let parts = join_all(servers.iter().map(|u| {
            let (req, ctx) = (&req, &ctx);
            async move {
                let mut outcome = match self.state_of(req, u, false).await {
                    Err(e) => Err(e),
                    Ok(state) => u.list(state.as_ref(), method, field, req.meta(), ctx).await,
                };
                if matches!(outcome, Err(UpstreamError::SessionGone)) {
                    // The server lost the session (restarted, expired): a new one, once.
                    outcome = match self.state_of(req, u, true).await {
                        Err(e) => Err(e),
                        Ok(state) => u.list(state.as_ref(), method, field, req.meta(), ctx).await,
                    };
                }
                match &outcome {
                    Ok(l) => {
                        u.health.ok();
                        if field == "tools" {
                            u.health
                                .tools
                                .store(l.items.len() as i64, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    Err(UpstreamError::NotRunning) if !u.is_stdio() => {}
                    Err(e) => self.upstream_failed(u, e),
                }
                Part {
                    server: &u.name,
                    outcome,
                }
            }
        }))
        .await;
        let result = federation::merge_lists(
            field,
            parts,
            self.inner.grants.as_ref(),
            key,
            req.era.is_modern(),
        );
        relay::json_response(StatusCode::OK, jsonrpc::result_body(&req.id, result))
    }

    /// `tools/call`: refused unless granted, limited per key, routed to its server with the
    /// server's own tool name, answered as the server answers (JSON, or SSE with progress).
    async fn call_tool(&self, mut req: Req<'_>) -> Response<McpBody> {
        let key = req.caller.key_id.clone();
        let prefixed = req
            .msg
            .params()
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut record = ToolCallRecord {
            key_id: key.clone(),
            server: String::new(),
            tool: prefixed.clone(),
            outcome: CallOutcome::Refused,
            error_code: None,
            latency: Duration::ZERO,
            protocol: req.era.label(),
            traceparent: req.caller.traceparent.clone(),
        };
        let started = Instant::now();
        let route = federation::split_name(&prefixed).and_then(|(server, tool)| {
            let u = self.upstream(server)?;
            let ok = self.inner.grants.may_use_server(key.as_deref(), server)
                && self.inner.grants.may_use(key.as_deref(), server, tool);
            ok.then(|| (u.clone(), tool.to_string()))
        });
        let Some((upstream, tool)) = route else {
            // Unknown and not granted look the same: a key learns nothing about tools it may
            // not use.
            let e = Rejection::new(
                jsonrpc::INVALID_PARAMS,
                format!(
                    "Unknown tool: {}",
                    sluice_telemetry::untrusted::echo(&prefixed)
                ),
            );
            record.error_code = Some(e.code);
            self.settle(&record, started);
            return req.reject(&e);
        };
        record.server = upstream.name.clone();
        record.tool = tool.clone();
        if let Err(wait) = self.inner.limiter.check(key.as_deref(), started) {
            let e = Rejection::new(
                jsonrpc::RATE_LIMITED,
                "Tool call limit reached for this key",
            )
            .with_data(json!({ "retryAfterMs": wait.as_millis() as u64 }));
            record.outcome = CallOutcome::Limited;
            record.error_code = Some(e.code);
            self.settle(&record, started);
            let mut r = req.reject(&e);
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            r.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
            return r;
        }
        let span = tracing::info_span!(
            "mcp.tool_call",
            otel.name = %format!("tools/call {prefixed}"),
            mcp.server = %upstream.name,
            mcp.tool = %Untrusted::new(&tool),
            outcome = tracing::field::Empty,
        );
        let finish = CallFinish {
            record: Some(record),
            started,
            sink: self.inner.sink.clone(),
            metrics: self.inner.metrics.clone(),
            span,
        };
        if let Some(params) = req.msg.obj.get_mut("params").and_then(Value::as_object_mut) {
            params.insert("name".into(), Value::String(tool.clone()));
        }
        self.route(req, upstream, Some(tool), Some(finish)).await
    }

    /// Sends a request to one server and relays its answer.
    async fn route(
        &self,
        req: Req<'_>,
        upstream: Arc<Upstream>,
        name: Option<String>,
        mut finish: Option<CallFinish>,
    ) -> Response<McpBody> {
        let unavailable = |finish: &mut Option<CallFinish>| {
            let e = Rejection::new(
                jsonrpc::CONNECTION_CLOSED,
                format!("MCP server `{}` is unavailable", upstream.name),
            );
            if let Some(f) = finish {
                f.finish(CallOutcome::UpstreamError, Some(e.code));
            }
            req.reject(&e)
        };
        let Ok(mut state) = self.state_of(&req, &upstream, false).await else {
            return unavailable(&mut finish);
        };
        let ctx = req.ctx();
        let timeout = upstream.timeouts.call;
        // Armed until the answer is complete: a client that goes away before then cancels the
        // call upstream (the guard fires on drop).
        let mut guard = CancelGuard {
            cancel: state.clone().map(|s| CancelUpstream {
                upstream: upstream.clone(),
                state: s,
                authorization: req.caller.authorization.clone(),
                origin: ctx.origin,
            }),
            id: req.id.clone(),
        };
        let mut sent = upstream
            .request(
                state.as_ref(),
                req.msg.obj.clone(),
                &req.method,
                name.as_deref(),
                &ctx,
                timeout,
            )
            .await;
        if matches!(sent, Err(UpstreamError::SessionGone)) {
            // A 404 for the session: the server did not run the call, so it may go again on a
            // new session, once.
            self.inner
                .metrics
                .upstream_error(&upstream.name, UpstreamError::SessionGone.metric_label());
            if let Ok(s) = self.state_of(&req, &upstream, true).await {
                state = s;
                if let (Some(g), Some(s)) = (guard.cancel.as_mut(), &state) {
                    g.state = s.clone();
                }
                sent = upstream
                    .request(
                        state.as_ref(),
                        req.msg.obj.clone(),
                        &req.method,
                        name.as_deref(),
                        &ctx,
                        timeout,
                    )
                    .await;
            }
        }
        let reply = match sent {
            Ok(r) => r,
            Err(UpstreamError::SessionGone) => {
                self.upstream_failed(&upstream, &UpstreamError::SessionGone);
                guard.cancel = None;
                if let Some(f) = &mut finish {
                    f.finish(CallOutcome::UpstreamError, None);
                }
                // The client's session cannot go on with this server: 404 tells it to start
                // a new one.
                return relay::json_response(
                    StatusCode::NOT_FOUND,
                    jsonrpc::error_body(
                        Some(&req.id),
                        &Rejection::new(
                            jsonrpc::INVALID_REQUEST,
                            format!(
                                "Session not found (MCP server `{}` ended it)",
                                upstream.name
                            ),
                        ),
                    ),
                );
            }
            Err(e) => {
                self.upstream_failed(&upstream, &e);
                let (code, outcome) = match e {
                    UpstreamError::Timeout(_) => (jsonrpc::REQUEST_TIMEOUT, CallOutcome::Timeout),
                    _ => (jsonrpc::CONNECTION_CLOSED, CallOutcome::UpstreamError),
                };
                if let Some(f) = &mut finish {
                    f.finish(outcome, Some(code));
                }
                let e = Rejection::new(code, format!("MCP server `{}`: {e}", upstream.name));
                return req.reject(&e);
            }
        };
        upstream.health.ok();
        match reply {
            Reply::Json(status, body) => {
                guard.cancel = None;
                let (outcome, code) = outcome_of(&body);
                if let Some(f) = &mut finish {
                    f.finish(outcome, code);
                }
                if body.is_empty() {
                    let e = Rejection::new(
                        jsonrpc::INTERNAL_ERROR,
                        format!(
                            "MCP server `{}` answered HTTP {}",
                            upstream.name,
                            status.as_u16()
                        ),
                    );
                    return req.reject(&e);
                }
                let status = if req.era.is_modern() {
                    status
                } else {
                    StatusCode::OK
                };
                relay::json_response(status, body)
            }
            Reply::Accepted => {
                guard.cancel = None;
                if let Some(f) = &mut finish {
                    f.finish(CallOutcome::UpstreamError, None);
                }
                req.reject(&Rejection::new(
                    jsonrpc::INTERNAL_ERROR,
                    format!("MCP server `{}` answered a request with 202", upstream.name),
                ))
            }
            Reply::Stream(source) => {
                let mut stream = CallStream::new(
                    source,
                    req.id.clone(),
                    &upstream.name,
                    self.inner.metrics.clone(),
                    timeout,
                    self.inner.heartbeat,
                    finish,
                    guard.cancel.take(),
                )
                .modern(req.era.is_modern());
                if req.accepts_sse {
                    return relay::sse_response(McpBody::call(stream));
                }
                // A client that takes JSON only gets the answer alone (progress is dropped).
                let mut last = None;
                while let Some(ev) = std::future::poll_fn(|cx| stream.poll_next(cx)).await {
                    last = Some(ev);
                }
                let data = last.as_deref().and_then(sse_data).unwrap_or_else(|| {
                    jsonrpc::error_body(
                        Some(&req.id),
                        &Rejection::new(jsonrpc::CONNECTION_CLOSED, "no answer"),
                    )
                });
                relay::json_response(StatusCode::OK, data)
            }
        }
    }

    /// `prompts/get`: routed by the prefixed prompt name.
    async fn get_prompt(&self, mut req: Req<'_>) -> Response<McpBody> {
        let key = req.caller.key_id.clone();
        let prefixed = req
            .msg
            .params()
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let route = federation::split_name(&prefixed).and_then(|(server, name)| {
            let u = self.upstream(server)?;
            self.inner
                .grants
                .may_use_server(key.as_deref(), server)
                .then(|| (u.clone(), name.to_string()))
        });
        let Some((upstream, name)) = route else {
            return req.reject(&Rejection::new(
                jsonrpc::INVALID_PARAMS,
                format!(
                    "Unknown prompt: {}",
                    sluice_telemetry::untrusted::echo(&prefixed)
                ),
            ));
        };
        if let Some(params) = req.msg.obj.get_mut("params").and_then(Value::as_object_mut) {
            params.insert("name".into(), Value::String(name.clone()));
        }
        self.route(req, upstream, Some(name), None).await
    }

    /// `resources/read`: resource URIs are the servers' own, so the read goes to every
    /// permitted server and the first that has the resource answers.
    async fn read_resource(&self, req: Req<'_>) -> Response<McpBody> {
        let key = req.caller.key_id.as_deref();
        let uri = req
            .msg
            .params()
            .and_then(|p| p.get("uri"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let ctx = req.ctx();
        let servers = self.permitted(key);
        let answers = join_all(servers.iter().map(|u| {
            let (req, ctx, uri) = (&req, &ctx, uri.as_deref());
            async move {
                let state = self.state_of(req, u, false).await?;
                let deadline = u.timeouts.list;
                let fut = async {
                    let reply = u
                        .request(
                            state.as_ref(),
                            req.msg.obj.clone(),
                            "resources/read",
                            uri,
                            ctx,
                            deadline,
                        )
                        .await?;
                    u.collect_reply(reply, &req.id).await
                };
                tokio::time::timeout(deadline, fut)
                    .await
                    .map_err(|_| UpstreamError::Timeout(deadline))?
            }
        }))
        .await;
        let mut last_error = None;
        for a in answers {
            match a {
                Ok(Ok(result)) => return req.answer(result),
                Ok(Err(rej)) => last_error = Some(rej),
                Err(_) => {}
            }
        }
        req.reject(
            &last_error
                .unwrap_or_else(|| Rejection::new(jsonrpc::INVALID_PARAMS, "Resource not found")),
        )
    }

    /// `completion/complete`: prompt arguments are routed by the prefixed prompt name; other
    /// references get no suggestions.
    async fn complete(&self, mut req: Req<'_>) -> Response<McpBody> {
        let key = req.caller.key_id.clone();
        let prompt = req
            .msg
            .params()
            .and_then(|p| p.get("ref"))
            .filter(|r| r.get("type").and_then(Value::as_str) == Some("ref/prompt"))
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let route =
            prompt
                .as_deref()
                .and_then(federation::split_name)
                .and_then(|(server, name)| {
                    let u = self.upstream(server)?;
                    self.inner
                        .grants
                        .may_use_server(key.as_deref(), server)
                        .then(|| (u.clone(), name.to_string()))
                });
        let Some((upstream, name)) = route else {
            return req.answer(json!({ "completion": { "values": [], "hasMore": false } }));
        };
        if let Some(r) = req
            .msg
            .obj
            .get_mut("params")
            .and_then(|p| p.get_mut("ref"))
            .and_then(Value::as_object_mut)
        {
            r.insert("name".into(), Value::String(name));
        }
        self.route(req, upstream, None, None).await
    }

    /// `logging/setLevel` (handshake era): sent to every server of the session.
    async fn set_level(&self, req: Req<'_>) -> Response<McpBody> {
        let ctx = req.ctx();
        let Era::Handshake { claims, .. } = &req.era else {
            return req.answer(json!({}));
        };
        let servers = self.permitted(req.caller.key_id.as_deref());
        join_all(servers.iter().filter_map(|u| {
            let entry = claims.upstream(&u.name)?;
            let (ctx, msg, id) = (&ctx, req.msg.obj.clone(), &req.id);
            Some(async move {
                let deadline = u.timeouts.list;
                let _ = tokio::time::timeout(deadline, async {
                    if let Ok(reply) = u
                        .request(
                            Some(&entry.state),
                            msg,
                            "logging/setLevel",
                            None,
                            ctx,
                            deadline,
                        )
                        .await
                    {
                        let _ = u.collect_reply(reply, id).await;
                    }
                })
                .await;
            })
        }))
        .await;
        req.answer(json!({}))
    }

    /// A handshake-era client notification: `notifications/cancelled` goes to every server of
    /// the session (ids are the client's, so only the one running the call acts on it).
    fn client_notification(
        &self,
        claims: SessionClaims,
        origin: u64,
        msg: Message,
        method: &str,
        caller: &Caller,
    ) {
        if method != "notifications/cancelled" {
            return;
        }
        let targets: Vec<(Arc<Upstream>, UpstreamState)> = claims
            .upstreams
            .into_iter()
            .filter_map(|e| {
                let u = self.upstream(&e.server)?.clone();
                Some((u, e.state))
            })
            .collect();
        let authorization = caller.authorization.clone();
        let method = method.to_string();
        // Bounded by each server's list timeout (inside `notify`); the client is answered 202
        // at once.
        tokio::spawn(async move {
            let ctx = CallCtx {
                authorization: authorization.as_ref(),
                params: Vec::new(),
                origin,
            };
            join_all(
                targets
                    .iter()
                    .map(|(u, s)| u.notify(s, msg.obj.clone(), &method, &ctx)),
            )
            .await;
        });
    }

    fn settle(&self, record: &ToolCallRecord, started: Instant) {
        let mut r = record.clone();
        r.latency = started.elapsed();
        self.inner.metrics.call(&r);
        self.inner.sink.record(&r);
    }

    // === GET and DELETE ===

    async fn get(&self, headers: &HeaderMap, caller: &Caller) -> Response<McpBody> {
        if is_modern_header(headers) {
            // 2026-07-28 replaced the GET stream with `subscriptions/listen`.
            let mut r = relay::empty_response(StatusCode::METHOD_NOT_ALLOWED);
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST"));
            return r;
        }
        let (claims, origin) = match self.session(headers, caller) {
            Ok(c) => c,
            Err(r) => return r,
        };
        let ctx = CallCtx {
            authorization: caller.authorization.as_ref(),
            params: Vec::new(),
            origin,
        };
        let key = caller.key_id.as_deref();
        let opened = join_all(claims.upstreams.iter().filter_map(|e| {
            let u = self.upstream(&e.server)?;
            if !self.inner.grants.may_use_server(key, &u.name) {
                return None;
            }
            let ctx = &ctx;
            let state = u.repaired(origin).unwrap_or_else(|| e.state.clone());
            Some(async move { (u, u.open_stream(&state, ctx).await) })
        }))
        .await;
        let mut sources = Vec::new();
        for (u, outcome) in opened {
            match outcome {
                Ok(Some(s)) => sources.push((u.name.clone(), s)),
                Ok(None) => {}
                Err(e) => self.upstream_failed(u, &e),
            }
        }
        if sources.is_empty() {
            let mut r = relay::empty_response(StatusCode::METHOD_NOT_ALLOWED);
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST, DELETE"));
            return r;
        }
        relay::sse_response(McpBody::merge(MergeStream::new(
            sources,
            self.inner.heartbeat,
        )))
    }

    async fn delete(&self, headers: &HeaderMap, caller: &Caller) -> Response<McpBody> {
        if is_modern_header(headers) {
            let mut r = relay::empty_response(StatusCode::METHOD_NOT_ALLOWED);
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST"));
            return r;
        }
        let (claims, origin) = match self.session(headers, caller) {
            Ok(c) => c,
            Err(r) => return r,
        };
        {
            let mut ended = self.inner.ended.lock();
            if ended.set.insert(origin) {
                ended.order.push_back(origin);
                if ended.order.len() > ENDED_SESSIONS {
                    if let Some(old) = ended.order.pop_front() {
                        ended.set.remove(&old);
                    }
                }
            }
        }
        let ctx = CallCtx {
            authorization: caller.authorization.as_ref(),
            params: Vec::new(),
            origin,
        };
        join_all(claims.upstreams.iter().filter_map(|e| {
            let u = self.upstream(&e.server)?;
            let ctx = &ctx;
            let repaired = u.forget_repaired(origin);
            Some(async move {
                u.close_session(&e.state, ctx).await;
                if let Some(r) = repaired {
                    u.close_session(&r, ctx).await;
                }
            })
        }))
        .await;
        relay::empty_response(StatusCode::OK)
    }
}

/// Keeps an upstream call cancellable until its answer is complete.
struct CancelGuard {
    cancel: Option<CancelUpstream>,
    id: Value,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(c) = self.cancel.take() {
            c.fire(&self.id, "the client went away");
        }
    }
}

fn outcome_of(body: &[u8]) -> (CallOutcome, Option<i64>) {
    match jsonrpc::peek(body) {
        jsonrpc::Peeked::Response {
            error: Some(jsonrpc::REQUEST_CANCELLED),
            ..
        } => (CallOutcome::Cancelled, Some(jsonrpc::REQUEST_CANCELLED)),
        jsonrpc::Peeked::Response {
            error: Some(code), ..
        } => (CallOutcome::RpcError, Some(code)),
        jsonrpc::Peeked::Response {
            tool_error: true, ..
        } => (CallOutcome::ToolError, None),
        jsonrpc::Peeked::Response { .. } => (CallOutcome::Ok, None),
        _ => (CallOutcome::UpstreamError, None),
    }
}

/// The data of one SSE event the relay framed (`event: message\ndata: ...\n\n`).
fn sse_data(ev: &[u8]) -> Option<Bytes> {
    let mut dec = sluice_sse::Decoder::new();
    dec.feed(Bytes::copy_from_slice(ev));
    match dec.next_item()? {
        Ok(sluice_sse::Item::Event(e)) => Some(e.data_bytes()),
        _ => None,
    }
}

fn accepts_sse(headers: &HeaderMap) -> bool {
    headers.get_all(ACCEPT).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',').any(|t| {
                let t = t.split(';').next().unwrap_or("").trim();
                t.eq_ignore_ascii_case("text/event-stream") || t == "*/*"
            })
        })
    })
}

fn is_modern_header(headers: &HeaderMap) -> bool {
    headers
        .get(protocol::PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .and_then(Version::parse)
        .is_some_and(Version::is_modern)
}

/// Reads a request body, at most `max` bytes: 413 past it, 400 if it breaks.
async fn read_capped<B>(body: B, max: usize) -> Result<Bytes, StatusCode>
where
    B: Body<Data = Bytes>,
    B::Error: Display,
{
    use http_body_util::BodyExt as _;
    if body.size_hint().lower() > max as u64 {
        return Err(StatusCode::PAYLOAD_TOO_LARGE);
    }
    let mut body = std::pin::pin!(body);
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| StatusCode::BAD_REQUEST)?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(StatusCode::PAYLOAD_TOO_LARGE);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::answer_of;

    #[test]
    fn accept_headers() {
        let mut h = HeaderMap::new();
        assert!(!accepts_sse(&h));
        h.insert(
            ACCEPT,
            "application/json, text/event-stream".parse().unwrap(),
        );
        assert!(accepts_sse(&h));
        h.insert(ACCEPT, "application/json".parse().unwrap());
        assert!(!accepts_sse(&h));
    }

    #[test]
    fn answers_are_found_by_id() {
        let id = json!(3);
        assert!(answer_of(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#, &id)
            .unwrap()
            .is_ok());
        assert!(answer_of(br#"{"jsonrpc":"2.0","id":4,"result":{}}"#, &id).is_none());
        assert!(answer_of(
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}"#,
            &id
        )
        .unwrap()
        .is_err());
    }
}
