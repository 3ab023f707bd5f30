//! Upstream MCP servers: one [`Upstream`] per `[[mcp.server]]`, over Streamable HTTP
//! ([`http`]) or a supervised stdio process ([`stdio`]), with what the gateway asks of them:
//! open a session (`initialize`), send a request and get its answer as JSON or as a stream of
//! messages, send a notification, open the server's stream (GET), end a session (DELETE).
//!
//! Eras: a handshake-era client's sessions become upstream sessions; a 2026-07-28 client's
//! requests go upstream with their `_meta` envelope. An `auto` server that refuses the era it
//! was spoken to in is remembered and bridged: a 2026-07-28-only server gets envelopes from
//! handshake-era clients, and a handshake-only server serves 2026-07-28 clients through a
//! gateway-held session per credential (soft state, rebuilt on loss).
//!
//! Repair: a server that was down or slow at a client's `initialize` is tried again (after a
//! backoff) when a later request of that session needs it, and a session the server lost (404)
//! is reopened and the request sent again once; the new upstream session is this instance's
//! soft state, bounded, used in place of what the session id says.

pub(crate) mod http;
pub(crate) mod stdio;

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use ::http::header::{HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use ::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;
use http_body::Body as _;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use sluice_config::{McpAuth, McpProtocol, McpServerConfig, McpTimeouts, McpTransport};
use sluice_sse::{Decoder, Item};

use crate::error::{McpError, UpstreamError};
use crate::jsonrpc;
use crate::protocol::{self, Version};
use crate::session::UpstreamState;

use self::http::{is_json, is_sse, read_body, HttpClient, PooledBody};
use self::stdio::{StdioReply, StdioServer};

// What an upstream is known to refuse. Only refusals are learned: a server that answers
// `initialize` may still serve 2026-07-28 requests (the SDKs' servers do both).
const ERA_UNKNOWN: u8 = 0;
/// 2026-07-28 requests are refused: 2026-07-28 clients are bridged through a session.
const ERA_HANDSHAKE: u8 = 1;
/// `initialize` is refused: handshake-era clients' requests get envelopes.
const ERA_MODERN: u8 = 2;

/// Bridge sessions (2026-07-28 clients of handshake-only servers) kept per server at most.
const MAX_BRIDGE_SESSIONS: usize = 1024;

/// Repaired sessions kept per server at most (this instance's soft state).
const MAX_REPAIRED: usize = 4096;

/// After a failure, how long before a client session tries to repair its part of this server:
/// a dead server must not make every request wait for its connect timeout.
const REPAIR_BACKOFF: Duration = Duration::from_secs(2);

/// Pages of one list fetched from one server at most: a server whose cursor never ends costs
/// a bounded number of round trips.
const MAX_LIST_PAGES: usize = 16;

/// One configured upstream server.
pub(crate) struct Upstream {
    pub(crate) name: String,
    pub(crate) timeouts: McpTimeouts,
    protocol: McpProtocol,
    credential: Credential,
    transport: Transport,
    /// What an `auto` server turned out to speak.
    era: AtomicU8,
    pub(crate) health: Health,
    /// Gateway-held upstream sessions for 2026-07-28 clients of a handshake-only server, by
    /// credential hash.
    bridge: Mutex<HashMap<u64, (String, Version)>>,
    /// Sessions opened after the client session began (the server was down or slow at its
    /// `initialize`, or later lost the session), by client session; they replace the state in
    /// the session id on this instance.
    repaired: Mutex<HashMap<u64, UpstreamState>>,
    max_message: usize,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

enum Transport {
    Http(HttpClient),
    Stdio(StdioServer),
}

/// The credential sent upstream. Static values are marked sensitive (hyper and our logs never
/// print them).
enum Credential {
    None,
    Passthrough,
    Static(HeaderName, HeaderValue),
}

/// What the admin view shows about a server, learned from the traffic (and the process, for
/// stdio servers).
#[derive(Debug, Default)]
pub(crate) struct Health {
    last_ok: Mutex<Option<SystemTime>>,
    last_error: Mutex<Option<(SystemTime, &'static str)>>,
    consecutive_failures: AtomicU32,
    /// Tools in the last complete `tools/list` (unfiltered); -1 before one.
    pub(crate) tools: AtomicI64,
}

impl Health {
    pub(crate) fn ok(&self) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        *self.last_ok.lock() = Some(SystemTime::now());
    }

    pub(crate) fn failed(&self, reason: &'static str) {
        self.consecutive_failures.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock() = Some((SystemTime::now(), reason));
    }

    /// Whether the last exchange failed less than `d` ago.
    fn failed_within(&self, d: Duration) -> bool {
        self.consecutive_failures.load(Ordering::Relaxed) > 0
            && self
                .last_error
                .lock()
                .is_some_and(|(t, _)| t.elapsed().is_ok_and(|e| e < d))
    }

    pub(crate) fn snapshot(&self) -> Value {
        let unix = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        };
        let failures = self.consecutive_failures.load(Ordering::Relaxed);
        let last_ok = *self.last_ok.lock();
        let last_error = *self.last_error.lock();
        let status = match (last_ok, failures) {
            (_, f) if f >= 3 => "down",
            (_, f) if f > 0 => "degraded",
            (Some(_), _) => "up",
            (None, _) => "unknown",
        };
        let tools = self.tools.load(Ordering::Relaxed);
        json!({
            "status": status,
            "consecutive_failures": failures,
            "last_ok_unix": last_ok.map(unix),
            "last_error": last_error.map(|(t, r)| json!({ "unix": unix(t), "reason": r })),
            "tools": (tools >= 0).then_some(tools),
        })
    }
}

/// What the client's request brings to an upstream exchange besides the message.
#[derive(Clone, Debug, Default)]
pub(crate) struct CallCtx<'a> {
    /// The client's credential, for `passthrough` servers.
    pub(crate) authorization: Option<&'a HeaderValue>,
    /// `Mcp-Param-*` headers of a 2026-07-28 request, passed on.
    pub(crate) params: Vec<(HeaderName, HeaderValue)>,
    /// A hash of the client session (or of the credential, stateless), to find a stdio call
    /// again when the client cancels it.
    pub(crate) origin: u64,
}

/// An answer: a JSON body, a stream of messages, or 202 (for notifications and responses).
pub(crate) enum Reply {
    /// A JSON body (a response or a JSON-RPC error, possibly with a 4xx status).
    Json(StatusCode, Bytes),
    /// An SSE stream (or a stdio server's messages for the request).
    Stream(MessageStream),
    /// Accepted, nothing follows.
    Accepted,
}

/// Messages for one request (or the server's own stream), one JSON-RPC message each.
pub(crate) enum MessageStream {
    /// An SSE body.
    Http {
        body: PooledBody,
        decoder: Box<Decoder>,
        ended: bool,
    },
    /// A stdio server's messages for one request.
    Stdio(StdioReply),
    /// A stdio server's notifications for the gateway's GET stream.
    Channel(tokio::sync::mpsc::Receiver<Bytes>),
}

impl MessageStream {
    fn sse(body: PooledBody, max: usize) -> MessageStream {
        let decoder = Decoder::with_max_event_bytes(max.min(sluice_sse::MAX_EVENT_BYTES_CEILING))
            .unwrap_or_default();
        MessageStream::Http {
            body,
            decoder: Box::new(decoder),
            ended: false,
        }
    }

    /// The next message's JSON; `None` at the end.
    pub(crate) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, UpstreamError>>> {
        match self {
            MessageStream::Stdio(r) => r.poll_next(cx),
            MessageStream::Channel(rx) => rx.poll_recv(cx).map(|m| m.map(Ok)),
            MessageStream::Http {
                body,
                decoder,
                ended,
            } => loop {
                match decoder.next_item() {
                    Some(Ok(Item::Event(ev))) => {
                        // Priming events (empty data, an id for resumption) carry no message.
                        if ev.data().is_empty() {
                            continue;
                        }
                        return Poll::Ready(Some(Ok(ev.data_bytes())));
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(sluice_sse::DecodeError::EventTooLarge { limit })) => {
                        return Poll::Ready(Some(Err(UpstreamError::TooLarge(limit))))
                    }
                    Some(Err(sluice_sse::DecodeError::Truncated { .. })) => {
                        return Poll::Ready(Some(Err(UpstreamError::Broken(
                            "the event stream ended mid-event".into(),
                        ))))
                    }
                    None if *ended => return Poll::Ready(None),
                    None => {}
                }
                match std::pin::Pin::new(&mut *body).poll_frame(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(None) => {
                        decoder.finish();
                        *ended = true;
                    }
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            decoder.feed(data);
                        }
                    }
                    Poll::Ready(Some(Err(e))) => {
                        *ended = true;
                        return Poll::Ready(Some(Err(UpstreamError::Broken(e.to_string()))));
                    }
                }
            },
        }
    }

    /// [`MessageStream::poll_next`] as a future.
    pub(crate) async fn next(&mut self) -> Option<Result<Bytes, UpstreamError>> {
        poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// A list fetched from one server.
pub(crate) struct Listed {
    /// The items (tools, prompts, resources, templates), every page.
    pub(crate) items: Vec<Value>,
    /// The smallest `ttlMs` of the pages (2026-07-28), if any said one.
    pub(crate) ttl_ms: Option<u64>,
}

use crate::jsonrpc::{answer_of, Answer};

impl Upstream {
    /// The upstream of one `[[mcp.server]]`; stdio servers are started (on the current
    /// runtime) and supervised until the returned value is dropped.
    pub(crate) fn new(cfg: &McpServerConfig, max_message: usize) -> Result<Upstream, McpError> {
        let credential = match &cfg.auth {
            McpAuth::None => Credential::None,
            McpAuth::Passthrough => Credential::Passthrough,
            McpAuth::Bearer { secret } => Credential::Static(
                AUTHORIZATION,
                sensitive(&format!("Bearer {secret}"), &cfg.name)?,
            ),
            McpAuth::Header { name, secret } => {
                Credential::Static(name.clone(), sensitive(secret, &cfg.name)?)
            }
        };
        let transport = match &cfg.transport {
            McpTransport::Http { url, ca_file } => Transport::Http(
                HttpClient::new(
                    url,
                    ca_file.as_deref(),
                    cfg.timeouts.connect,
                    cfg.max_idle_connections,
                )
                .map_err(|reason| McpError::Tls {
                    server: cfg.name.clone(),
                    reason,
                })?,
            ),
            McpTransport::Stdio(s) => {
                Transport::Stdio(StdioServer::start(&cfg.name, s, cfg.timeouts, max_message))
            }
        };
        let era = match cfg.protocol {
            McpProtocol::Auto => ERA_UNKNOWN,
            McpProtocol::V2026_07_28 => ERA_MODERN,
            _ => ERA_HANDSHAKE,
        };
        Ok(Upstream {
            name: cfg.name.clone(),
            timeouts: cfg.timeouts,
            protocol: cfg.protocol,
            credential,
            transport,
            era: AtomicU8::new(era),
            health: Health::default(),
            bridge: Mutex::new(HashMap::new()),
            repaired: Mutex::new(HashMap::new()),
            max_message,
        })
    }

    /// Whether this is a stdio server.
    pub(crate) fn is_stdio(&self) -> bool {
        matches!(self.transport, Transport::Stdio(_))
    }

    /// The admin view's extra facts (the process, for stdio servers).
    pub(crate) fn transport_snapshot(&self) -> Value {
        match &self.transport {
            Transport::Http(_) => json!({ "transport": "http" }),
            Transport::Stdio(s) => s.snapshot(),
        }
    }

    fn era(&self) -> u8 {
        self.era.load(Ordering::Relaxed)
    }

    fn learn_era(&self, era: u8) {
        if self.protocol == McpProtocol::Auto {
            self.era.store(era, Ordering::Relaxed);
        }
    }

    /// The handshake version to offer: the configured one, else the client's.
    fn handshake_version(&self, client: Version) -> Version {
        match self.protocol {
            McpProtocol::V2025_06_18 => Version::V2025_06_18,
            McpProtocol::V2025_11_25 => Version::V2025_11_25,
            _ => client,
        }
    }

    // === sessions ===

    /// Opens this server's part of a handshake-era client session: `initialize` (with the
    /// client's info, and no capabilities the gateway cannot route) and
    /// `notifications/initialized`. Returns the state for the session id and the server's
    /// `initialize` result (for the merged capabilities).
    pub(crate) async fn open_session(
        &self,
        client: Version,
        client_info: &Value,
        ctx: &CallCtx<'_>,
    ) -> Result<(UpstreamState, Value), UpstreamError> {
        if let Transport::Stdio(s) = &self.transport {
            let (version, result) = s.ready(self.timeouts.list).await?;
            return Ok((UpstreamState::Sessionless { version }, result));
        }
        if self.era() == ERA_MODERN {
            let result = self.discover(ctx).await.unwrap_or_else(|_| json!({}));
            return Ok((
                UpstreamState::Sessionless {
                    version: Version::V2026_07_28,
                },
                result,
            ));
        }
        let offer = self.handshake_version(client);
        match self.initialize(offer, client_info, ctx).await {
            Err(UpstreamError::WrongEra) => {
                self.learn_era(ERA_MODERN);
                let result = self.discover(ctx).await.unwrap_or_else(|_| json!({}));
                Ok((
                    UpstreamState::Sessionless {
                        version: Version::V2026_07_28,
                    },
                    result,
                ))
            }
            other => other,
        }
    }

    async fn initialize(
        &self,
        offer: Version,
        client_info: &Value,
        ctx: &CallCtx<'_>,
    ) -> Result<(UpstreamState, Value), UpstreamError> {
        let id = Value::String("sluice-init".into());
        let params = json!({
            "protocolVersion": offer.as_str(),
            // NOTE: no sampling, roots or elicitation: the gateway does not route
            // server-to-client requests, so it must not let a server expect them.
            "capabilities": {},
            "clientInfo": client_info,
        });
        let body = jsonrpc::request_body(Some(&id), "initialize", Some(params));
        let deadline = self.timeouts.list;
        let fut = async {
            let (status, headers, reply) = self
                .post(body, None, None, "initialize", None, ctx, true, deadline)
                .await?;
            let session = headers
                .get(protocol::SESSION_ID)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let answer = self.collect(status, reply, &id).await?;
            let result = match answer {
                Ok(r) => r,
                Err(rej) if rej.code == jsonrpc::UNSUPPORTED_PROTOCOL_VERSION => {
                    if !supports_handshake(rej.data.as_ref()) {
                        return Err(UpstreamError::WrongEra);
                    }
                    return Err(UpstreamError::Protocol(rej.message));
                }
                Err(rej) => return Err(UpstreamError::Protocol(rej.message)),
            };
            let version = result
                .get("protocolVersion")
                .and_then(Value::as_str)
                .and_then(Version::parse)
                .filter(|v| !v.is_modern())
                .ok_or_else(|| {
                    UpstreamError::Protocol("initialize answered an unknown protocolVersion".into())
                })?;
            let state = match session {
                Some(id) => UpstreamState::Session { version, id },
                None => UpstreamState::Sessionless { version },
            };
            let note = jsonrpc::request_body(None, "notifications/initialized", None);
            let session_id = match &state {
                UpstreamState::Session { id, .. } => Some(id.as_str()),
                _ => None,
            };
            self.post(
                note,
                session_id,
                Some(version),
                "notifications/initialized",
                None,
                ctx,
                false,
                deadline,
            )
            .await?;
            Ok((state, result))
        };
        tokio::time::timeout(deadline, fut)
            .await
            .map_err(|_| UpstreamError::Timeout(deadline))?
    }

    /// `server/discover` (2026-07-28): the capabilities of a stateless server.
    async fn discover(&self, ctx: &CallCtx<'_>) -> Result<Value, UpstreamError> {
        let id = Value::String("sluice-discover".into());
        let mut msg = Map::new();
        msg.insert("jsonrpc".into(), "2.0".into());
        msg.insert("id".into(), id.clone());
        msg.insert("method".into(), "server/discover".into());
        msg.insert("params".into(), json!({ "_meta": gateway_envelope() }));
        let deadline = self.timeouts.list;
        let fut = async {
            let reply = self
                .send_modern(msg, "server/discover", None, ctx, deadline)
                .await?;
            match self.collect_reply(reply, &id).await? {
                Ok(v) => Ok(v),
                Err(rej) => Err(UpstreamError::Protocol(rej.message)),
            }
        };
        tokio::time::timeout(deadline, fut)
            .await
            .map_err(|_| UpstreamError::Timeout(deadline))?
    }

    /// Ends this server's part of a session (DELETE), bounded by the list timeout.
    pub(crate) async fn close_session(&self, state: &UpstreamState, ctx: &CallCtx<'_>) {
        let (UpstreamState::Session { version, id }, Transport::Http(client)) =
            (state, &self.transport)
        else {
            return;
        };
        let mut headers = self.headers(Some(id), Some(*version), ctx);
        headers.remove(CONTENT_TYPE);
        let req = client.request(Method::DELETE, headers, Bytes::new());
        let deadline = self.timeouts.list;
        let _ = tokio::time::timeout(deadline, async {
            if let Ok(mut resp) = client.send(req).await {
                let _ = read_body(resp.body_mut(), 64 * 1024).await;
            }
        })
        .await;
    }

    /// The repaired state of a client session's part of this server, if this instance made
    /// one.
    pub(crate) fn repaired(&self, origin: u64) -> Option<UpstreamState> {
        self.repaired.lock().get(&origin).cloned()
    }

    /// Opens a new part of a client session (`origin`) with this server: the session id says
    /// it was unavailable, or (`lost`) the server answered 404 for the session, so it is up.
    /// `None` while the server is failing (tried again after [`REPAIR_BACKOFF`]) or when it
    /// fails now.
    pub(crate) async fn repair(
        &self,
        origin: u64,
        version: Version,
        lost: bool,
        ctx: &CallCtx<'_>,
    ) -> Option<UpstreamState> {
        if !lost && self.health.failed_within(REPAIR_BACKOFF) {
            return None;
        }
        let info = json!({ "name": "sluice", "version": env!("CARGO_PKG_VERSION") });
        match self.open_session(version, &info, ctx).await {
            Ok((state, _)) => {
                self.health.ok();
                let mut r = self.repaired.lock();
                if r.len() >= MAX_REPAIRED {
                    r.clear();
                }
                r.insert(origin, state.clone());
                Some(state)
            }
            Err(e) => {
                self.health.failed(e.metric_label());
                None
            }
        }
    }

    /// Forgets a repaired part (the client ended its session); returns it to be closed.
    pub(crate) fn forget_repaired(&self, origin: u64) -> Option<UpstreamState> {
        self.repaired.lock().remove(&origin)
    }

    // === requests ===

    /// Sends a client request (or a list page) for a session of this server (`state`), or for
    /// a 2026-07-28 client (`state` = `None`, `msg` carries the client's envelope). Bounded by
    /// the head wait only: the caller owns the rest of the exchange.
    pub(crate) async fn request(
        &self,
        state: Option<&UpstreamState>,
        msg: Map<String, Value>,
        method: &str,
        name: Option<&str>,
        ctx: &CallCtx<'_>,
        head: Duration,
    ) -> Result<Reply, UpstreamError> {
        if let Transport::Stdio(s) = &self.transport {
            let r = s.request(msg, ctx.origin, self.timeouts.list).await?;
            return Ok(Reply::Stream(MessageStream::Stdio(r)));
        }
        match state {
            Some(UpstreamState::Unavailable) => Err(UpstreamError::NotRunning),
            Some(UpstreamState::Session { version, id }) => {
                let body = to_bytes(&msg);
                let (status, _, reply) = self
                    .post(
                        body,
                        Some(id),
                        Some(*version),
                        method,
                        name,
                        ctx,
                        true,
                        head,
                    )
                    .await?;
                if status == StatusCode::NOT_FOUND {
                    return Err(UpstreamError::SessionGone);
                }
                Ok(reply)
            }
            Some(UpstreamState::Sessionless { version }) if version.is_modern() => {
                let mut msg = msg;
                add_envelope(&mut msg);
                self.send_modern(msg, method, name, ctx, head).await
            }
            Some(UpstreamState::Sessionless { version }) => {
                let body = to_bytes(&msg);
                let (_, _, reply) = self
                    .post(body, None, Some(*version), method, name, ctx, true, head)
                    .await?;
                Ok(reply)
            }
            None => {
                if self.era() != ERA_HANDSHAKE {
                    match self.send_modern(msg.clone(), method, name, ctx, head).await {
                        Err(UpstreamError::WrongEra) => self.learn_era(ERA_HANDSHAKE),
                        other => return other,
                    }
                }
                self.bridge_request(msg, method, name, ctx, head).await
            }
        }
    }

    /// A 2026-07-28 request, its envelope already in `msg`.
    async fn send_modern(
        &self,
        msg: Map<String, Value>,
        method: &str,
        name: Option<&str>,
        ctx: &CallCtx<'_>,
        head: Duration,
    ) -> Result<Reply, UpstreamError> {
        let body = to_bytes(&msg);
        let (status, _, reply) = self
            .post(
                body,
                None,
                Some(Version::V2026_07_28),
                method,
                name,
                ctx,
                true,
                head,
            )
            .await?;
        if self.era() == ERA_UNKNOWN && looks_like_wrong_era(status, &reply) {
            return Err(UpstreamError::WrongEra);
        }
        Ok(reply)
    }

    /// A 2026-07-28 client's request to a handshake-only server, through a session the gateway
    /// holds for the credential (opened on first use, reopened once if the server lost it).
    async fn bridge_request(
        &self,
        mut msg: Map<String, Value>,
        method: &str,
        name: Option<&str>,
        ctx: &CallCtx<'_>,
        head: Duration,
    ) -> Result<Reply, UpstreamError> {
        strip_envelope(&mut msg);
        let cred = credential_hash(ctx.authorization);
        for attempt in 0..2 {
            let cached = self.bridge.lock().get(&cred).cloned();
            let (id, version) = match cached {
                Some(c) => c,
                None => {
                    let info = json!({ "name": "sluice", "version": env!("CARGO_PKG_VERSION") });
                    let (state, _) = self.initialize(Version::V2025_11_25, &info, ctx).await?;
                    let pair = match state {
                        UpstreamState::Session { id, version } => (id, version),
                        UpstreamState::Sessionless { version } => (String::new(), version),
                        UpstreamState::Unavailable => return Err(UpstreamError::NotRunning),
                    };
                    let mut b = self.bridge.lock();
                    if b.len() >= MAX_BRIDGE_SESSIONS {
                        b.clear();
                    }
                    b.insert(cred, pair.clone());
                    pair
                }
            };
            let session = (!id.is_empty()).then_some(id.as_str());
            let (status, _, reply) = self
                .post(
                    to_bytes(&msg),
                    session,
                    Some(version),
                    method,
                    name,
                    ctx,
                    true,
                    head,
                )
                .await?;
            if status == StatusCode::NOT_FOUND && session.is_some() && attempt == 0 {
                self.bridge.lock().remove(&cred);
                continue;
            }
            return Ok(reply);
        }
        Err(UpstreamError::SessionGone)
    }

    /// Sends a client notification (`notifications/cancelled`, `.../roots/list_changed`) to
    /// this server's part of a session, bounded by the list timeout.
    pub(crate) async fn notify(
        &self,
        state: &UpstreamState,
        msg: Map<String, Value>,
        method: &str,
        ctx: &CallCtx<'_>,
    ) {
        let deadline = self.timeouts.list;
        let _ = tokio::time::timeout(deadline, async {
            match (&self.transport, state) {
                (Transport::Stdio(s), _) => s.client_notification(msg, ctx.origin),
                (Transport::Http(_), UpstreamState::Session { version, id }) => {
                    let _ = self
                        .post(
                            to_bytes(&msg),
                            Some(id),
                            Some(*version),
                            method,
                            None,
                            ctx,
                            false,
                            deadline,
                        )
                        .await;
                }
                // Stateless servers keep nothing a notification could act on.
                _ => {}
            }
        })
        .await;
    }

    /// Opens the server's own stream (GET) for a session: `None` when it has none (405, or a
    /// sessionless server).
    pub(crate) async fn open_stream(
        &self,
        state: &UpstreamState,
        ctx: &CallCtx<'_>,
    ) -> Result<Option<MessageStream>, UpstreamError> {
        match (&self.transport, state) {
            (Transport::Stdio(s), _) => Ok(Some(MessageStream::Channel(s.subscribe()))),
            (Transport::Http(client), UpstreamState::Session { version, id }) => {
                let mut headers = self.headers(Some(id), Some(*version), ctx);
                headers.remove(CONTENT_TYPE);
                headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
                let req = client.request(Method::GET, headers, Bytes::new());
                let deadline = self.timeouts.list;
                let resp = tokio::time::timeout(deadline, client.send(req))
                    .await
                    .map_err(|_| UpstreamError::Timeout(deadline))??;
                if resp.status() == StatusCode::NOT_FOUND {
                    return Err(UpstreamError::SessionGone);
                }
                if !resp.status().is_success() || !is_sse(resp.headers()) {
                    return Ok(None);
                }
                Ok(Some(MessageStream::sse(resp.into_body(), self.max_message)))
            }
            _ => Ok(None),
        }
    }

    /// Fetches every page of a list (`tools/list`, ...) for a session (or a 2026-07-28
    /// client's envelope `meta`), bounded by the list timeout as a whole.
    pub(crate) async fn list(
        &self,
        state: Option<&UpstreamState>,
        method: &str,
        field: &str,
        meta: Option<&Map<String, Value>>,
        ctx: &CallCtx<'_>,
    ) -> Result<Listed, UpstreamError> {
        let deadline = self.timeouts.list;
        let fut = async {
            let mut out = Listed {
                items: Vec::new(),
                ttl_ms: None,
            };
            let mut cursor: Option<Value> = None;
            for page in 0..MAX_LIST_PAGES {
                let id = Value::String(format!("sluice-list-{page}"));
                let mut params = Map::new();
                if let Some(m) = meta {
                    params.insert("_meta".into(), Value::Object(m.clone()));
                }
                if let Some(c) = cursor.take() {
                    params.insert("cursor".into(), c);
                }
                let mut msg = Map::new();
                msg.insert("jsonrpc".into(), "2.0".into());
                msg.insert("id".into(), id.clone());
                msg.insert("method".into(), method.into());
                msg.insert("params".into(), Value::Object(params));
                let reply = self
                    .request(state, msg, method, None, ctx, deadline)
                    .await?;
                let mut result = match self.collect_reply(reply, &id).await? {
                    Ok(r) => r,
                    Err(rej) => return Err(UpstreamError::Protocol(rej.message)),
                };
                if let Some(Value::Array(items)) = result.get_mut(field).map(Value::take) {
                    out.items.extend(items);
                }
                if let Some(ttl) = result.get("ttlMs").and_then(Value::as_u64) {
                    out.ttl_ms = Some(out.ttl_ms.map_or(ttl, |t| t.min(ttl)));
                }
                match result.get("nextCursor") {
                    Some(c @ Value::String(_)) => cursor = Some(c.clone()),
                    _ => return Ok(out),
                }
            }
            Ok(out)
        };
        tokio::time::timeout(deadline, fut)
            .await
            .map_err(|_| UpstreamError::Timeout(deadline))?
    }

    /// Collects the answer to request `id` from a reply (the JSON body, or the stream's
    /// messages until the response; notifications on the way are dropped).
    pub(crate) async fn collect_reply(
        &self,
        reply: Reply,
        id: &Value,
    ) -> Result<Answer, UpstreamError> {
        self.collect(StatusCode::OK, reply, id).await
    }

    async fn collect(
        &self,
        _status: StatusCode,
        reply: Reply,
        id: &Value,
    ) -> Result<Answer, UpstreamError> {
        match reply {
            Reply::Accepted => Err(UpstreamError::Protocol(
                "answered a request with 202 Accepted".into(),
            )),
            Reply::Json(status, body) => match answer_of(&body, id) {
                Some(a) => Ok(a),
                None if !status.is_success() => Err(UpstreamError::Status(status.as_u16())),
                None => Err(UpstreamError::Protocol(
                    "no JSON-RPC response in the body".into(),
                )),
            },
            Reply::Stream(mut s) => {
                while let Some(m) = s.next().await {
                    if let Some(a) = answer_of(&m?, id) {
                        return Ok(a);
                    }
                }
                Err(UpstreamError::Broken(
                    "the stream ended without a response".into(),
                ))
            }
        }
    }

    // === HTTP ===

    fn headers(
        &self,
        session: Option<&str>,
        version: Option<Version>,
        ctx: &CallCtx<'_>,
    ) -> HeaderMap {
        let mut h = HeaderMap::with_capacity(8);
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(v) = version {
            h.insert(
                protocol::PROTOCOL_VERSION,
                HeaderValue::from_static(v.as_str()),
            );
        }
        if let Some(s) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
            h.insert(protocol::SESSION_ID, s);
        }
        match &self.credential {
            Credential::None => {}
            Credential::Passthrough => {
                if let Some(a) = ctx.authorization {
                    let mut a = a.clone();
                    a.set_sensitive(true);
                    h.insert(AUTHORIZATION, a);
                }
            }
            Credential::Static(name, value) => {
                h.insert(name.clone(), value.clone());
            }
        }
        h
    }

    /// POSTs one message; returns the status, the response headers and the reply. `expect`:
    /// a request (an answer follows) rather than a notification.
    #[allow(clippy::too_many_arguments)]
    async fn post(
        &self,
        body: Bytes,
        session: Option<&str>,
        version: Option<Version>,
        method: &str,
        name: Option<&str>,
        ctx: &CallCtx<'_>,
        expect: bool,
        head: Duration,
    ) -> Result<(StatusCode, HeaderMap, Reply), UpstreamError> {
        let Transport::Http(client) = &self.transport else {
            return Err(UpstreamError::NotRunning);
        };
        let mut headers = self.headers(session, version, ctx);
        if version.is_some_and(Version::is_modern) {
            if let Ok(v) = HeaderValue::from_str(method) {
                headers.insert(protocol::METHOD, v);
            }
            if let Some(v) =
                name.and_then(|n| HeaderValue::from_str(&protocol::encode_header_value(n)).ok())
            {
                headers.insert(protocol::NAME, v);
            }
            for (k, v) in &ctx.params {
                headers.append(k.clone(), v.clone());
            }
        }
        let req = client.request(Method::POST, headers, body);
        let resp = tokio::time::timeout(head, client.send(req))
            .await
            .map_err(|_| UpstreamError::Timeout(head))??;
        let (parts, mut body) = resp.into_parts();
        let status = parts.status;
        let reply = if status == StatusCode::ACCEPTED {
            let _ = read_body(&mut body, 64 * 1024).await;
            Reply::Accepted
        } else if status.is_success() && is_sse(&parts.headers) && expect {
            Reply::Stream(MessageStream::sse(body, self.max_message))
        } else if is_json(&parts.headers) {
            Reply::Json(status, read_body(&mut body, self.max_message).await?)
        } else if status.is_success() && !expect {
            Reply::Accepted
        } else {
            let _ = read_body(&mut body, 64 * 1024).await;
            if status == StatusCode::NOT_FOUND && session.is_some() {
                return Ok((status, parts.headers, Reply::Json(status, Bytes::new())));
            }
            if status.is_client_error() {
                // Era mismatches show as bare 4xx; the callers that care look at the status.
                return Ok((status, parts.headers, Reply::Json(status, Bytes::new())));
            }
            return Err(http::status_error(status));
        };
        Ok((status, parts.headers, reply))
    }
}

fn sensitive(v: &str, server: &str) -> Result<HeaderValue, McpError> {
    let mut h = HeaderValue::from_str(v).map_err(|_| McpError::BadCredential {
        server: server.to_string(),
    })?;
    h.set_sensitive(true);
    Ok(h)
}

fn to_bytes(msg: &Map<String, Value>) -> Bytes {
    Bytes::from(serde_json::to_vec(msg).unwrap_or_default())
}

/// The envelope the gateway sends in its own name (2026-07-28).
pub(crate) fn gateway_envelope() -> Value {
    json!({
        protocol::META_PROTOCOL_VERSION: Version::V2026_07_28.as_str(),
        protocol::META_CLIENT_CAPABILITIES: {},
        protocol::META_CLIENT_INFO: { "name": "sluice", "version": env!("CARGO_PKG_VERSION") },
    })
}

/// Adds the gateway's envelope to a handshake-era client's request bound for a 2026-07-28
/// server, keeping the client's own `_meta` keys (e.g. `progressToken`).
fn add_envelope(msg: &mut Map<String, Value>) {
    let params = msg
        .entry("params")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(params) = params.as_object_mut() else {
        return;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let (Some(meta), Value::Object(env)) = (meta.as_object_mut(), gateway_envelope()) {
        for (k, v) in env {
            meta.entry(k).or_insert(v);
        }
    }
}

/// Takes the 2026-07-28 envelope out of a request bound for a handshake-era server.
fn strip_envelope(msg: &mut Map<String, Value>) {
    if let Some(meta) = msg
        .get_mut("params")
        .and_then(|p| p.get_mut("_meta"))
        .and_then(Value::as_object_mut)
    {
        meta.retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
    }
}

fn credential_hash(auth: Option<&HeaderValue>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    auth.map(HeaderValue::as_bytes).hash(&mut h);
    h.finish()
}

/// Whether a -32022's `data.supported` names a handshake version (else the server is
/// 2026-07-28 only).
fn supports_handshake(data: Option<&Value>) -> bool {
    data.and_then(|d| d.get("supported"))
        .and_then(Value::as_array)
        .is_some_and(|vs| {
            vs.iter()
                .filter_map(Value::as_str)
                .filter_map(Version::parse)
                .any(|v| !v.is_modern())
        })
}

/// A 2026-07-28 request answered as a handshake-only server answers one: a bare 4xx, an
/// "invalid request" (no session) or a -32022 naming no 2026-07-28 version.
fn looks_like_wrong_era(status: StatusCode, reply: &Reply) -> bool {
    if !status.is_client_error() {
        return false;
    }
    let Reply::Json(_, body) = reply else {
        return false;
    };
    #[derive(serde::Deserialize)]
    struct E {
        error: Option<Rejectionish>,
    }
    #[derive(serde::Deserialize)]
    struct Rejectionish {
        code: i64,
        #[serde(default)]
        data: Option<Value>,
    }
    match serde_json::from_slice::<E>(body) {
        Err(_) => true,
        Ok(E { error: None }) => true,
        Ok(E { error: Some(e) }) => match e.code {
            jsonrpc::INVALID_REQUEST => true,
            jsonrpc::UNSUPPORTED_PROTOCOL_VERSION => !e
                .data
                .as_ref()
                .and_then(|d| d.get("supported"))
                .and_then(Value::as_array)
                .is_some_and(|vs| vs.iter().any(|v| v.as_str() == Some("2026-07-28"))),
            _ => false,
        },
    }
}
