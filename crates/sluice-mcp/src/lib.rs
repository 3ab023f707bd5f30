//! Sluice's MCP gateway: one Streamable HTTP endpoint (`/mcp`) in front of many MCP servers.
//!
//! Modules, in the order a request meets them:
//! - [`gateway`]: [`McpGateway::handle`], the service mounted at `/mcp`: HTTP method, body
//!   within `max_message_bytes`, era, then the JSON-RPC method;
//! - [`jsonrpc`]: one message per POST, ids, error codes; upstream messages peeked at, not
//!   built;
//! - [`protocol`]: the revisions (2025-06-18 and 2025-11-25 with sessions, the stateless
//!   2026-07-28), their headers and the 2026-07-28 envelope checks;
//! - [`session`]: session ids that carry the upstream sessions, signed (HMAC-SHA256) so any
//!   instance with the secret serves the next request;
//! - [`grants`]: [`KeyGrants`], the seam to the gateway's keys (which servers and tools a key
//!   sees and calls), and the per-key tool-call limiter;
//! - [`federation`]: fan-out of `initialize` and the lists, the merge (`server__tool` names,
//!   filtered per key, a failed server said in `_meta`), routing by prefix;
//! - `upstream`: the servers, over Streamable HTTP (hyper, rustls) or stdio (supervised
//!   child processes), and the era bridges between them and the clients;
//! - [`relay`]: the response bodies: JSON, one call's SSE (progress as it comes, cancel on
//!   drop, timeout), the merged server streams;
//! - [`telemetry`]: the per-call record and its sink, the metric families, the span per call;
//!   `/admin/mcp` is [`McpGateway::admin_snapshot`].
//!
//! The crate sees no key table and no listener: the composition root authenticates the caller
//! (a [`Caller`]), mounts [`McpGateway::handle`], registers [`McpMetrics`] and routes
//! [`ToolCallRecord`]s.
#![forbid(unsafe_code)]

mod error;
pub mod federation;
pub mod gateway;
pub mod grants;
pub mod jsonrpc;
pub mod protocol;
pub mod relay;
pub mod session;
pub mod telemetry;
mod upstream;

pub use error::{McpError, UpstreamError};
pub use gateway::{Caller, McpDeps, McpGateway};
pub use grants::{CallLimiter, ConfigGrants, KeyGrants};
pub use relay::McpBody;
pub use session::{SessionClaims, SessionCodec, SessionError, UpstreamEntry, UpstreamState};
pub use telemetry::{CallOutcome, McpMetrics, ToolCallRecord, ToolCallSink, TracingSink};
