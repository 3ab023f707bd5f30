//! Configuration: TOML in, a validated [`Config`] out.
//!
//! Parsing happens in two steps, as TensorZero does it: `raw` mirrors the file with
//! `#[serde(deny_unknown_fields)]` (a typo is an error, never a silently ignored field), and
//! [`Config::from_toml`] validates it into the types below, naming the field path and the reason
//! of the first problem. Nothing downstream sees a raw value.

mod raw;
mod units;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use units::{parse_duration, parse_size};

/// The whole validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// The listener and server-wide limits.
    pub server: ServerConfig,
    /// Upstreams, in file order; names are unique.
    pub upstreams: Vec<UpstreamConfig>,
    /// Routes, in file order: the first whose globs match the request's model wins.
    pub routes: Vec<RouteConfig>,
}

/// `[server]`.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Where to listen (HTTP/1.1 and h2c on one port; h2 and http/1.1 by ALPN with `tls`).
    /// Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// Certificate chain and key (PEM files) to serve TLS.
    pub tls: Option<TlsFiles>,
    /// An SSE comment (`: ping`) this often while the upstream is silent. Default 15 s.
    pub heartbeat: Duration,
    /// Largest request body accepted; larger gets 413. Default 16 MiB.
    pub max_request_body: u64,
    /// Largest non-streaming response body relayed; larger gets 502. Default 8 MiB.
    pub max_response_body: u64,
    /// How long streams may run on after SIGTERM before they are ended with an error event.
    /// Default 30 s.
    pub shutdown_grace: Duration,
    /// Largest single SSE event relayed; a larger one ends the stream with an error event.
    /// Default 1 MiB, at most 64 MiB.
    pub max_event_bytes: usize,
    /// Send a `Server-Timing` header with the upstream phases (acquire, dns, connect, tls,
    /// written, ttfb) on every response; without it, only when the client sends
    /// `X-Sluice-Timing: 1`. Default false.
    pub server_timing: bool,
}

/// PEM files for the listener's TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
}

/// The wire protocol to an upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 (over TLS for https).
    Http1,
    /// HTTP/2 over TLS, negotiated by ALPN (https only).
    H2,
    /// HTTP/2 with prior knowledge over plain TCP (http only).
    H2c,
    /// https: ALPN offers h2 and http/1.1; http: HTTP/1.1.
    Auto,
}

/// How the gateway authenticates to an upstream.
#[derive(Clone, PartialEq, Eq)]
pub enum UpstreamAuth {
    /// Forward the client's own `Authorization` / `x-api-key` untouched.
    Passthrough,
    /// Replace them with `Authorization: Bearer <secret>`.
    Bearer {
        /// The key, read from the environment at load time.
        secret: String,
    },
    /// Replace them with `<header>: <secret>` (e.g. Anthropic's `x-api-key`).
    Header {
        /// Header name, lower case.
        name: http::HeaderName,
        /// The key, read from the environment at load time.
        secret: String,
    },
}

impl std::fmt::Debug for UpstreamAuth {
    // Secrets never reach logs, not even through `{:?}` of the config.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamAuth::Passthrough => f.write_str("Passthrough"),
            UpstreamAuth::Bearer { .. } => f.write_str("Bearer(<redacted>)"),
            UpstreamAuth::Header { name, .. } => write!(f, "Header({name}: <redacted>)"),
        }
    }
}

/// Copy a request header into the JSON body (some providers want the session id there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionHeaderToBody {
    /// The header to read, lower case.
    pub header: http::HeaderName,
    /// Where to put its value in the body, as an RFC 6901 JSON pointer (e.g. `/session_id`,
    /// `/metadata/user_id`); missing objects on the way are created.
    pub json_pointer: String,
}

/// Upstream timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP connect plus TLS handshake. Default 5 s.
    pub connect: Duration,
    /// From sending a request until its response headers. Default 60 s.
    pub first_byte: Duration,
    /// Streams: from sending a request until its first content (a text or tool-call delta).
    /// A target that misses it is abandoned for the next one while nothing has reached the
    /// client. Default: `first_byte`.
    pub first_token: Duration,
    /// Longest gap between events (or upstream comments) of a stream. Default 30 s.
    pub idle: Duration,
    /// The whole exchange, stream included. Default 10 min.
    pub total: Duration,
}

/// `[[upstream]]`.
#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// Unique name, used by routes and in metrics.
    pub name: String,
    /// Base URL including the API prefix, e.g. `http://127.0.0.1:9090/v1`. The client's path
    /// after `/v1` is appended to it.
    pub base_url: http::Uri,
    /// Wire protocol. Default `auto`.
    pub protocol: UpstreamProtocol,
    /// Authentication. Default passthrough.
    pub auth: UpstreamAuth,
    /// Extra trust root (PEM) besides the webpki roots.
    pub ca_file: Option<PathBuf>,
    /// Optional header → body copy.
    pub session_header_to_body: Option<SessionHeaderToBody>,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Connection pool: per-lane connection counts and caps, health checks, recycling.
    pub pool: sluice_upstream::PoolConfig,
    /// Requests whose `max_tokens` (or `max_completion_tokens`, `max_output_tokens`) exceeds
    /// this go to the `stream` lane even when not streaming: long generations are long calls.
    /// Default 4096.
    pub long_max_tokens: u64,
    /// How many retries requests to this upstream may add (ratio of recent requests plus a
    /// floor per second): past it, requests fail fast instead of feeding a retry storm.
    pub retry_budget: crate::policy::BudgetConfig,
}

impl UpstreamConfig {
    /// The settings of this upstream's connections and pool.
    pub fn upstream_settings(&self) -> sluice_upstream::UpstreamConfig {
        sluice_upstream::UpstreamConfig {
            name: self.name.clone(),
            base_url: self.base_url.clone(),
            protocol: match self.protocol {
                UpstreamProtocol::Http1 => sluice_upstream::Protocol::Http1,
                UpstreamProtocol::H2 => sluice_upstream::Protocol::H2,
                UpstreamProtocol::H2c => sluice_upstream::Protocol::H2c,
                UpstreamProtocol::Auto => sluice_upstream::Protocol::Auto,
            },
            ca_file: self.ca_file.clone(),
            connect_timeout: self.timeouts.connect,
            pool: self.pool.clone(),
            ..sluice_upstream::UpstreamConfig::default()
        }
    }
}

/// What to do with the upstream when the client goes away mid-stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnClientDisconnect {
    /// Cancel the upstream request at once (RST_STREAM / close). The default.
    Cancel,
    /// Read the upstream to its end (bounded by `total`) without forwarding, to record the
    /// usage it reports.
    Drain,
}

/// One place a route can send a request: an upstream, and what to call the model there.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetConfig {
    /// Index into [`Config::upstreams`].
    pub upstream: usize,
    /// The model name sent to this upstream instead of the client's (e.g. `gpt-4o` →
    /// `claude-sonnet-4-5`). Default: the client's.
    pub model: Option<String>,
    /// Share of traffic among the targets of one tier. Default 1.
    pub weight: u32,
    /// The model's context window in tokens: a request that exceeded one target's window is
    /// only sent to targets with a larger one. Default unknown (never "larger").
    pub context_window: Option<u64>,
}

/// `[[route]]`.
#[derive(Clone, Debug)]
pub struct RouteConfig {
    /// The route's name in logs and metrics. Default: its first model glob.
    pub name: String,
    /// Globs on the request's `model` (`*` any run, `?` one character).
    pub models: Vec<String>,
    /// The targets requests are spread over (tier 0). `upstream = "x"` is one target.
    pub targets: Vec<TargetConfig>,
    /// Targets tried in order when tier 0 cannot serve a request (persistent retryable
    /// errors, never-sent failures, a silent target, a larger context window needed).
    pub fallbacks: Vec<TargetConfig>,
    /// Disconnect policy.
    pub on_client_disconnect: OnClientDisconnect,
    /// Pins the lane; by default streams and long generations take `stream`, the rest
    /// `short`.
    pub lane: Option<sluice_upstream::Lane>,
    /// Retries, backoff and the retry budget.
    pub retry: crate::policy::RetryConfig,
    /// Requests on this route may be sent again after a maybe-processed failure (a timeout
    /// or reset after the request was written) even without an `Idempotency-Key`. Default
    /// false.
    pub idempotent: bool,
    /// The whole request's deadline across every attempt, backoff and fallback. Default: the
    /// `timeouts.total` of the first target's upstream.
    pub timeout: Option<Duration>,
}

impl RouteConfig {
    /// Tier `i`'s targets: tier 0 is `targets`, tier `k` is `fallbacks[k - 1]` alone.
    pub fn tier(&self, i: usize) -> &[TargetConfig] {
        match i {
            0 => &self.targets,
            k => self
                .fallbacks
                .get(k - 1)
                .map(std::slice::from_ref)
                .unwrap_or(&[]),
        }
    }

    /// Number of tiers.
    pub fn tiers(&self) -> usize {
        1 + self.fallbacks.len()
    }

    /// The upstream of the first target (what the route's defaults come from).
    pub fn primary_upstream(&self) -> usize {
        self.targets[0].upstream
    }
}

/// Why a configuration was rejected: the field path (`upstream[0].timeouts.idle`) and the
/// reason.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{path}: {reason}")]
pub struct ConfigError {
    /// Where in the file, e.g. `route[1].upstream`.
    pub path: String,
    /// What is wrong and what would be right.
    pub reason: String,
}

impl ConfigError {
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl Config {
    /// Parses and validates a TOML document. `env` looks up environment variables named by
    /// `auth.env` (passed in so tests need no process environment).
    ///
    /// # Errors
    /// The first problem found, with its field path.
    pub fn from_toml(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        raw::parse(text, env)
    }

    /// Reads, parses and validates a file, taking secrets from the process environment.
    ///
    /// # Errors
    /// An unreadable file, or the first problem found in it.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(path.display().to_string(), e.to_string()))?;
        Config::from_toml(&text, &|k| std::env::var(k).ok())
    }

    /// The route for a model, if any.
    pub fn route_for(&self, model: &str) -> Option<&RouteConfig> {
        self.routes
            .iter()
            .find(|r| r.models.iter().any(|g| glob_match(g, model)))
    }
}

/// `*` matches any run of characters (also empty), `?` exactly one; everything else itself.
pub fn glob_match(glob: &str, s: &str) -> bool {
    let (g, s): (Vec<char>, Vec<char>) = (glob.chars().collect(), s.chars().collect());
    // Iterative matcher with one backtrack point: linear for the globs configs use.
    let (mut gi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if gi < g.len() && (g[gi] == '?' || g[gi] == s[si]) {
            gi += 1;
            si += 1;
        } else if gi < g.len() && g[gi] == '*' {
            star = Some((gi, si));
            gi += 1;
        } else if let Some((sg, ss)) = star {
            gi = sg + 1;
            si = ss + 1;
            star = Some((sg, ss + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod glob_tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("gpt-4o*", "gpt-4o"));
        assert!(glob_match("gpt-4o*", "gpt-4o-mini"));
        assert!(!glob_match("gpt-4o*", "gpt-4"));
        assert!(glob_match("*", ""));
        assert!(glob_match("deepseek-*-v?", "deepseek-chat-v3"));
        assert!(!glob_match("deepseek-*-v?", "deepseek-chat-v30"));
        assert!(glob_match("*mini*", "gpt-4o-mini-2024"));
        assert!(glob_match("claude", "claude"));
        assert!(!glob_match("claude", "claude-3"));
    }
}
