//! The crate's errors: building the gateway ([`McpError`]) and talking to an upstream server
//! ([`UpstreamError`]). Client-facing refusals are JSON-RPC errors ([`crate::jsonrpc::Rejection`]),
//! decided where the request is handled.

use std::time::Duration;

/// The gateway could not be built from its config.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// `mcp.session_secret` is missing (validation requires it; embedders may not).
    #[error("mcp.session_secret is not set: session ids cannot be signed")]
    NoSecret,
    /// A server's TLS settings could not be loaded.
    #[error("mcp.server `{server}`: {reason}")]
    Tls {
        /// The server.
        server: String,
        /// What failed (names the file, never a secret).
        reason: String,
    },
    /// A server's credential cannot be sent as a header.
    #[error("mcp.server `{server}`: the credential is not a valid header value")]
    BadCredential {
        /// The server.
        server: String,
    },
}

/// An exchange with an upstream MCP server failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// TCP connect or TLS handshake failed (or the stdio process could not start).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// No answer within the deadline.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The connection broke before the answer was complete.
    #[error("the connection broke: {0}")]
    Broken(String),
    /// An HTTP status that carries no JSON-RPC answer.
    #[error("answered HTTP {0}")]
    Status(u16),
    /// The upstream no longer knows the session (404 on a request that carried one).
    #[error("the upstream session has ended")]
    SessionGone,
    /// A message larger than `mcp.max_message_bytes`.
    #[error("a message exceeded {0} bytes")]
    TooLarge(usize),
    /// Not a Streamable HTTP answer (wrong content type, no JSON-RPC response in it).
    #[error("not a valid MCP answer: {0}")]
    Protocol(String),
    /// The server speaks only the other era (a 2026-07-28-only server asked to `initialize`,
    /// or a handshake-only one sent a 2026-07-28 request).
    #[error("the server does not speak this protocol era")]
    WrongEra,
    /// A stdio server is not running (starting, restarting, or given up on).
    #[error("the server process is not running")]
    NotRunning,
}

impl UpstreamError {
    /// A short, fixed label for metrics and `_meta` degradation notes.
    pub fn metric_label(&self) -> &'static str {
        match self {
            UpstreamError::Connect(_) => "connect",
            UpstreamError::Timeout(_) => "timeout",
            UpstreamError::Broken(_) => "broken",
            UpstreamError::Status(_) => "status",
            UpstreamError::SessionGone => "session_gone",
            UpstreamError::TooLarge(_) => "too_large",
            UpstreamError::Protocol(_) => "protocol",
            UpstreamError::WrongEra => "wrong_era",
            UpstreamError::NotRunning => "not_running",
        }
    }
}
