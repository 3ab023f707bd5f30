//! What the MCP gateway tells about itself: one [`ToolCallRecord`] per tool call (handed to a
//! [`ToolCallSink`]; the default writes it through `tracing` until the ledger takes it),
//! Prometheus families ([`McpMetrics`]) the composition root registers, and a `tracing` span
//! per call named after the tool (`otel.name = "tools/call github__create_issue"`), which
//! the OpenTelemetry layer picks up where one is installed.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sluice_telemetry::untrusted::Untrusted;

/// How a tool call ended (low cardinality: the `outcome` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallOutcome {
    /// A result without `isError`.
    Ok,
    /// A result with `isError: true` (the tool ran and failed).
    ToolError,
    /// The upstream answered with a JSON-RPC error.
    RpcError,
    /// Not granted to the key, or unknown (the client cannot tell which).
    Refused,
    /// The key's tool-call limit was reached.
    Limited,
    /// The server's call timeout passed; the call was cancelled upstream.
    Timeout,
    /// The client went away or cancelled; the call was cancelled upstream.
    Cancelled,
    /// The upstream could not be reached, or broke off, or answered nonsense.
    UpstreamError,
}

impl CallOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::ToolError => "tool_error",
            CallOutcome::RpcError => "rpc_error",
            CallOutcome::Refused => "refused",
            CallOutcome::Limited => "limited",
            CallOutcome::Timeout => "timeout",
            CallOutcome::Cancelled => "cancelled",
            CallOutcome::UpstreamError => "upstream_error",
        }
    }
}

/// One tool call, as the ledger (or the access log) records it. Plain data: no secret (the
/// key's id, never the key; no arguments, no result).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCallRecord {
    /// The caller's key id.
    pub key_id: Option<String>,
    /// The server (`github`), or empty when the name matched none.
    pub server: String,
    /// The server's own tool name (`create_issue`); for a refused call, the name the client
    /// asked for (capped when logged).
    pub tool: String,
    /// How it ended.
    pub outcome: CallOutcome,
    /// The JSON-RPC error code, when it ended with one.
    pub error_code: Option<i64>,
    /// From the request to the end of the answer.
    pub latency: Duration,
    /// The protocol version the client spoke.
    pub protocol: &'static str,
    /// The client's `traceparent`, for the call's span (see [`Caller::traceparent`]).
    ///
    /// [`Caller::traceparent`]: crate::Caller::traceparent
    pub traceparent: Option<http::HeaderValue>,
}

/// Where tool-call records go. Called once per call, on the request path: must not block.
pub trait ToolCallSink: Send + Sync + 'static {
    /// Takes one record.
    fn record(&self, rec: &ToolCallRecord);
}

/// Writes each record as one `tracing` event (target `sluice::mcp::call`, level info).
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingSink;

impl ToolCallSink for TracingSink {
    fn record(&self, r: &ToolCallRecord) {
        tracing::info!(
            target: "sluice::mcp::call",
            key = r.key_id.as_deref().unwrap_or("-"),
            server = %Untrusted::new(&r.server),
            tool = %Untrusted::new(&r.tool),
            outcome = r.outcome.as_str(),
            error_code = r.error_code,
            latency_us = r.latency.as_micros() as u64,
            protocol = r.protocol,
            "mcp tool call"
        );
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    server: String,
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerTool {
    server: String,
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerReason {
    server: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

/// The MCP gateway's Prometheus families. Cheap to clone (shared handles); register them once
/// with [`McpMetrics::register`].
#[derive(Clone, Debug)]
pub struct McpMetrics {
    calls: Family<CallLabels, Counter>,
    call_seconds: Family<ServerTool, Histogram>,
    upstream_errors: Family<ServerReason, Counter>,
    sessions: Family<Outcome, Counter>,
}

impl Default for McpMetrics {
    fn default() -> Self {
        McpMetrics::new()
    }
}

impl McpMetrics {
    /// Unregistered families.
    pub fn new() -> McpMetrics {
        McpMetrics {
            calls: Family::default(),
            call_seconds: Family::new_with_constructor(|| {
                // 1 ms to ~65 s.
                Histogram::new(exponential_buckets(0.001, 2.0, 17))
            }),
            upstream_errors: Family::default(),
            sessions: Family::default(),
        }
    }

    /// Adds the families to `registry` (prefix `sluice_mcp_`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "sluice_mcp_calls",
            "MCP tool calls by server, tool and outcome (a refused call's tool is `-`)",
            self.calls.clone(),
        );
        registry.register(
            "sluice_mcp_call_duration_seconds",
            "MCP tool call latency, request to last byte, by server and tool",
            self.call_seconds.clone(),
        );
        registry.register(
            "sluice_mcp_upstream_errors",
            "Failed exchanges with upstream MCP servers (fan-outs and calls), by server and reason",
            self.upstream_errors.clone(),
        );
        registry.register(
            "sluice_mcp_sessions",
            "MCP client sessions: created, or refused (by reason)",
            self.sessions.clone(),
        );
    }

    /// Counts a finished tool call. A refused call's tool is `-`: clients choose those names,
    /// and they must not choose label values.
    pub(crate) fn call(&self, r: &ToolCallRecord) {
        let tool = if r.outcome == CallOutcome::Refused {
            "-".to_string()
        } else {
            r.tool.clone()
        };
        self.calls
            .get_or_create(&CallLabels {
                server: r.server.clone(),
                tool: tool.clone(),
                outcome: r.outcome.as_str(),
            })
            .inc();
        if r.outcome != CallOutcome::Refused {
            self.call_seconds
                .get_or_create(&ServerTool {
                    server: r.server.clone(),
                    tool,
                })
                .observe(r.latency.as_secs_f64());
        }
    }

    /// Counts a failed exchange with `server`.
    pub(crate) fn upstream_error(&self, server: &str, reason: &'static str) {
        self.upstream_errors
            .get_or_create(&ServerReason {
                server: server.to_string(),
                reason,
            })
            .inc();
    }

    /// Counts a session created (`created`) or refused (the [`SessionError`] label).
    ///
    /// [`SessionError`]: crate::SessionError
    pub(crate) fn session(&self, outcome: &'static str) {
        self.sessions.get_or_create(&Outcome { outcome }).inc();
    }
}

/// Settles one tool call exactly once: the record, the metrics, the span's end. Dropped
/// without [`CallFinish::finish`] (the client went away), it settles as cancelled.
pub(crate) struct CallFinish {
    pub(crate) record: Option<ToolCallRecord>,
    pub(crate) started: tokio::time::Instant,
    pub(crate) sink: Arc<dyn ToolCallSink>,
    pub(crate) metrics: McpMetrics,
    pub(crate) span: tracing::Span,
}

impl CallFinish {
    /// Settles with `outcome`.
    pub(crate) fn finish(&mut self, outcome: CallOutcome, error_code: Option<i64>) {
        let Some(mut r) = self.record.take() else {
            return;
        };
        r.outcome = outcome;
        r.error_code = error_code;
        r.latency = self.started.elapsed();
        self.span.record("outcome", outcome.as_str());
        self.metrics.call(&r);
        self.sink.record(&r);
    }
}

impl Drop for CallFinish {
    fn drop(&mut self) {
        self.finish(CallOutcome::Cancelled, None);
    }
}

impl std::fmt::Debug for CallFinish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallFinish")
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_register_and_refused_tools_are_not_labels() {
        let m = McpMetrics::new();
        let mut reg = Registry::default();
        m.register(&mut reg);
        let rec = |tool: &str, outcome| ToolCallRecord {
            key_id: Some("k".into()),
            server: "github".into(),
            tool: tool.into(),
            outcome,
            error_code: None,
            latency: Duration::from_millis(3),
            protocol: "2025-11-25",
            traceparent: None,
        };
        m.call(&rec("create_issue", CallOutcome::Ok));
        m.call(&rec("made-up-by-a-client", CallOutcome::Refused));
        m.upstream_error("github", "timeout");
        m.session("created");
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert!(out.contains(
            r#"sluice_mcp_calls_total{server="github",tool="create_issue",outcome="ok"} 1"#
        ));
        assert!(
            out.contains(r#"sluice_mcp_calls_total{server="github",tool="-",outcome="refused"} 1"#)
        );
        assert!(!out.contains("made-up-by-a-client"));
        assert!(out.contains("sluice_mcp_call_duration_seconds_bucket"));
        assert!(
            out.contains(r#"sluice_mcp_upstream_errors_total{server="github",reason="timeout"} 1"#)
        );
        assert!(out.contains(r#"sluice_mcp_sessions_total{outcome="created"} 1"#));
    }
}
