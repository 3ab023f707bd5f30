//! The MCP gateway (`sluice-mcp`) mounted on the gateway's listener at `/mcp`: the caller's
//! virtual key as the gateway's key table identifies it, each tool call on the books (the
//! ledger, when it is on) and in the `tracing` log, its metric families in the gateway's
//! registry, its span (`execute_tool server__tool`) in the gateway's traces.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use prometheus_client::registry::Registry;
use sluice_config::Config;
use sluice_gateway::{Mount, MountBody, MountCaller, MountFuture, MountedBody};
use sluice_ledger::{Latency, LedgerHandle, RequestRecord};
use sluice_mcp::jsonrpc::{self, Rejection};
use sluice_mcp::{
    CallOutcome, Caller, McpDeps, McpError, McpGateway, McpMetrics, ToolCallRecord, ToolCallSink,
    TracingSink,
};
use sluice_telemetry::trace::ToolCallEnd;
use sluice_telemetry::Telemetry;

/// The path the MCP gateway answers on the gateway's listener.
pub const MCP_PATH: &str = "/mcp";

/// The MCP gateway as a [`Mount`].
pub(crate) struct McpMount {
    gateway: McpGateway,
    metrics: McpMetrics,
    books: Arc<OnceLock<LedgerHandle>>,
    telemetry: Arc<OnceLock<Arc<Telemetry>>>,
}

impl McpMount {
    /// The MCP gateway of `config`, or `None` when `[mcp]` has no server. Starts its stdio
    /// servers: call it on the runtime that should supervise them.
    pub(crate) fn build(config: &Config) -> Result<Option<Arc<McpMount>>, McpError> {
        if !config.mcp.is_enabled() {
            return Ok(None);
        }
        let metrics = McpMetrics::new();
        let books = Arc::new(OnceLock::new());
        let telemetry = Arc::new(OnceLock::new());
        let sink = Arc::new(Books {
            books: books.clone(),
            telemetry: telemetry.clone(),
            seq: AtomicU64::new(0),
        });
        let deps = McpDeps {
            grants: None,
            metrics: metrics.clone(),
            sink: Some(sink),
        };
        let gateway = McpGateway::new(&config.mcp, deps)?;
        Ok(Some(Arc::new(McpMount {
            gateway,
            metrics,
            books,
            telemetry,
        })))
    }

    /// Hands the gateway's telemetry over once it runs: tool calls' spans go to its tracer.
    pub(crate) fn observe(&self, telemetry: Arc<Telemetry>) {
        let _ = self.telemetry.set(telemetry);
    }

    /// `/admin/mcp`.
    pub(crate) fn admin_snapshot(&self) -> serde_json::Value {
        self.gateway.admin_snapshot()
    }
}

impl Mount for McpMount {
    fn path(&self) -> &str {
        MCP_PATH
    }

    fn attach(&self, registry: &mut Registry, ledger: Option<&LedgerHandle>) {
        self.metrics.register(registry);
        if let Some(l) = ledger {
            let _ = self.books.set(l.clone());
        }
    }

    fn serve(&self, req: Request<MountBody>, caller: MountCaller) -> MountFuture {
        let key_id = match caller {
            MountCaller::Key(id) => Some(id),
            MountCaller::Revoked(_) => return Box::pin(std::future::ready(revoked())),
            MountCaller::Anonymous | MountCaller::Unknown => None,
        };
        // A gateway key is the gateway's: never sent on. Anything else in `Authorization` is
        // the client's own credential, for servers configured to pass it through.
        let authorization = match key_id {
            Some(_) => None,
            None => req.headers().get(header::AUTHORIZATION).cloned(),
        };
        let caller = Caller {
            key_id: key_id.map(|k| k.to_string()),
            authorization,
            traceparent: req.headers().get("traceparent").cloned(),
        };
        let gateway = self.gateway.clone();
        Box::pin(async move {
            let (head, body) = gateway.handle(req, caller).await.into_parts();
            Response::from_parts(head, MountedBody::new(body))
        })
    }
}

/// 401 for a revoked key, as a JSON-RPC error (the client's protocol).
fn revoked() -> Response<MountedBody> {
    let body = jsonrpc::error_body(
        None,
        &Rejection::new(
            jsonrpc::INVALID_REQUEST,
            "this key has been revoked; ask the gateway's operator for a new one",
        ),
    );
    let mut r = Response::new(MountedBody::new(
        http_body_util::Full::new(body).map_err(|never| match never {}),
    ));
    *r.status_mut() = StatusCode::UNAUTHORIZED;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Tool-call records: to `tracing` always, and to the ledger when it is on (one record per
/// call: the route `mcp`, the server as the upstream, `server__tool` as the model, the
/// outcome as the end reason).
struct Books {
    books: Arc<OnceLock<LedgerHandle>>,
    telemetry: Arc<OnceLock<Arc<Telemetry>>>,
    seq: AtomicU64,
}

impl ToolCallSink for Books {
    fn record(&self, r: &ToolCallRecord) {
        TracingSink.record(r);
        if let Some(tracer) = self.telemetry.get().and_then(|t| t.tracer()) {
            tracer.tool_call(ToolCallEnd {
                traceparent: r.traceparent.as_ref().map(HeaderValue::as_bytes),
                server: &r.server,
                tool: &r.tool,
                key_id: r.key_id.as_deref(),
                outcome: r.outcome.as_str(),
                error: !matches!(r.outcome, CallOutcome::Ok),
                latency: r.latency,
            });
        }
        let Some(ledger) = self.books.get() else {
            return;
        };
        let ts_us = sluice_ledger::now_us();
        // Unique across the fleet: time, process and a sequence (tool calls have no request
        // id of the gateway's: one HTTP request may carry several).
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let id = format!("mcp-{ts_us:x}-{:x}-{n}", std::process::id());
        let mut rec = RequestRecord::new(ts_us, id.into(), Arc::from("mcp"), "mcp");
        rec.key_id = r.key_id.as_deref().map(Arc::from);
        let name: Arc<str> = if r.server.is_empty() {
            Arc::from(r.tool.as_str())
        } else {
            Arc::from(format!("{}__{}", r.server, r.tool))
        };
        rec.requested_model = Some(name.clone());
        rec.served_model = Some(name);
        rec.upstream = (!r.server.is_empty()).then(|| Arc::from(r.server.as_str()));
        rec.provider = Some(Arc::from("mcp"));
        rec.attempts = 1;
        rec.status = status_of(r.outcome);
        rec.end_reason = r.outcome.as_str();
        rec.stream = false;
        rec.latency = Latency {
            first_byte_us: None,
            first_token_us: None,
            total_us: r.latency.as_micros() as u64,
        };
        ledger.record(rec);
    }
}

/// The HTTP status a tool call's outcome stands for on the books (the client saw JSON-RPC).
fn status_of(o: CallOutcome) -> u16 {
    match o {
        CallOutcome::Ok | CallOutcome::ToolError | CallOutcome::RpcError => 200,
        CallOutcome::Refused => 403,
        CallOutcome::Limited => 429,
        CallOutcome::Timeout => 504,
        CallOutcome::Cancelled => 499,
        CallOutcome::UpstreamError => 502,
    }
}
