//! Sluice's configuration: TOML in, a validated [`Config`] out.
//!
//! Loading happens in steps, as TensorZero does it: the document is parsed, `${VAR}` references
//! in its string values are expanded (`interpolate`), `raw` mirrors the file with
//! `#[serde(deny_unknown_fields)]` (a typo is an error with a suggestion, never a silently
//! ignored field), and `validate` turns it into the types below. The first problem found is
//! reported with its field path, its line and what would be right (`diagnostics`). Nothing
//! downstream sees a raw value.
//!
//! Modules, in the order a config file meets them:
//! - `interpolate`: `${VAR}` expansion in string values (or their warnings with `--skip-env`);
//! - `raw`: the file's shape, field for field; `units`: durations and sizes as written;
//! - `validate` (one module per section: `validate::server`, `validate::upstream`,
//!   `validate::route`; with `limits` for keys, prices and `[state]`, `telemetry` for
//!   `[telemetry]`, `tls` for certificate files, `admin` for the admin plane's token and
//!   exposure): raw into checked types, `diagnostics` locating the first problem;
//! - this module: the validated types ([`Config`], [`ServerConfig`], [`UpstreamConfig`],
//!   [`RouteConfig`], ...), route selection by model ([`Config::route_index`]) and the glob
//!   matcher; `retry` and `log` hold the retry and access-log settings the gateway's stages run;
//! - `cloud`: Bedrock, Vertex AI and Entra ID settings, credentials resolved at load;
//! - `mcp`: the `[mcp]` section (raw, validated and redacted), for `sluice-mcp`;
//! - `redacted`: the config as it may be shown, and its fingerprint.
//! - `schema`: the JSON Schema of the file, generated from `raw` (its doc comments are the
//!   descriptions); `reference`: the configuration reference rendered from that schema.
//!
//! Pure apart from reading the files a config names (key files, TLS files): tested with plain
//! data and fuzzed (`fuzz/fuzz_targets/config.rs`).
#![forbid(unsafe_code)]

mod admin;
mod cloud;
mod diagnostics;
mod guardrail;
mod interpolate;
mod limits;
mod log;
mod mcp;
mod raw;
mod redacted;
mod reference;
mod retry;
mod schema;
mod telemetry;
pub mod tls;
mod units;
mod validate;

#[cfg(test)]
mod cloud_tests;
#[cfg(test)]
mod guardrail_tests;
#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod schema_tests;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

pub use admin::{AdminToken, DEFAULT_ADMIN_LISTEN};
pub use cloud::{BedrockAuth, CloudAuth, EntraAuth, VertexAuth};
pub use guardrail::{
    GuardrailConfig, GuardrailKind, HttpCheck, OnError, RulesCheck, DEFAULT_WINDOW, MAX_WINDOW,
};
pub use limits::{
    BudgetLimit, KeyConfig, KeyMode, Limits, ModelLimits, PriceConfig, RateLimit, StateSettings,
    TeamConfig,
};
pub use log::{AccessLogSink, LogFormat, DEFAULT_QUEUE};
pub use mcp::{
    McpAuth, McpConfig, McpGrant, McpLimit, McpProtocol, McpRate, McpRestart, McpRestartPolicy,
    McpSecret, McpServerConfig, McpStdio, McpTimeouts, McpTransport, MIN_SESSION_SECRET_BYTES,
};
pub use reference::{reference_markdown, REFERENCE_COMMAND};
pub use retry::{BudgetConfig, RetryConfig};
pub use schema::{json_schema, json_schema_text};
pub use telemetry::{TelemetryConfig, TraceHeader};
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
    /// `[telemetry]`: OpenTelemetry trace export (off without an endpoint).
    pub telemetry: TelemetryConfig,
    /// Virtual keys: the `[[key]]` entries, then those of `keys.file`; ids and hashes unique.
    pub keys: Vec<KeyConfig>,
    /// The price table, in file order: the first entry whose globs match a model prices it.
    pub prices: Vec<PriceConfig>,
    /// `[state]`: the store of limits, budgets and idempotency records.
    pub state: StateSettings,
    /// `[mcp]`: the MCP gateway's servers, grants and session secret (disabled by default).
    pub mcp: McpConfig,
    /// `[ledger]`: where the request records go (see `sluice_ledger::LedgerConfig`). `None`
    /// when the file has no `[ledger]`: `sluice serve` then writes an SQLite file next to the
    /// config (the default sink), and a gateway started from a config in memory keeps none.
    pub ledger: Option<sluice_ledger::LedgerConfig>,
    /// `[[team]]`: limits and budgets shared by a team's keys, in file order; ids unique.
    pub teams: Vec<TeamConfig>,
    /// `[[guardrail]]`: checks of requests and answers, referenced by name from routes.
    pub guardrails: Vec<GuardrailConfig>,
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
    /// Where the access log (one line per request) goes: `stdout`, a file path (appended to),
    /// or `off`. Written by its own thread; a sink that cannot keep up loses lines (counted),
    /// never slows requests. Default `stdout`.
    pub access_log: AccessLogSink,
    /// Access log lines waiting for the writer, at most; past it lines are dropped (and
    /// counted). Default 16384.
    pub access_log_queue: usize,
    /// `text` (`key=value`) or `json`, for the access log and the operational log alike.
    /// Default `text`.
    pub log_format: LogFormat,
    /// The operational log's filter (`info`, `warn`, `sluice=debug,h2=info`, ...); `RUST_LOG`
    /// overrides it. Default `info`.
    pub log_level: String,
    /// Where the admin plane listens (`/metrics`, `/admin/*`, the dashboard, `/readyz`).
    /// `None`: [`DEFAULT_ADMIN_LISTEN`], or an ephemeral loopback port when `listen`'s port
    /// is 0 (tests); see [`ServerConfig::admin_addr`].
    pub admin_listen: Option<SocketAddr>,
    /// Bearer token the admin plane requires (except on `/healthz` and `/readyz`); required
    /// when the admin address is not loopback.
    pub admin_token: Option<AdminToken>,
    /// Most client connections open at once; past it the longest-idle connection (no request
    /// in flight) is closed to make room, or, if every connection is busy, the new one is
    /// refused. `None`: derived at startup from the open-file limit, (soft limit − 256) / 2,
    /// which leaves the other half for the upstream lanes (each capped at a quarter).
    pub max_connections: Option<usize>,
    /// Most client connections from one peer address. Default none (opt-in); connections
    /// from `trusted_proxies` are never capped by it.
    pub max_connections_per_ip: Option<usize>,
    /// Threads that serve client connections, each a single-threaded runtime that keeps a
    /// connection from accept to close (see `sluice_gateway::workers::Workers`). 0 (the default):
    /// none, every connection on tokio's multi-threaded runtime, whose threads share the
    /// work. Honoured by `sluice serve`; `sluice_gateway::Gateway::start` serves on the caller's
    /// runtime.
    pub workers: usize,
    /// Largest request head: HTTP/1.1 request line and header fields, or an HTTP/2 header
    /// list (as SETTINGS_MAX_HEADER_LIST_SIZE counts it). Larger gets 431. Default 32 KiB.
    pub max_header_bytes: u32,
    /// HTTP/2 streams one client connection may have open at once. Default 200.
    pub max_concurrent_streams: u32,
    /// Most resumable streams (running, detached or kept for a reconnect) at once; past it a
    /// new stream is served as an ordinary one (`x-sluice-resumable: off; reason=capacity`).
    /// Default 10,000.
    pub resumable_streams: usize,
    /// Most bytes all resumable streams' logs may hold, counted as each stream's `max_bytes`
    /// reserved when it starts (so no log is ever cut short for another's sake); past it a
    /// new stream is served as an ordinary one. Default 1 GiB.
    pub resumable_log_bytes: u64,
    /// New requests one client connection may start per second (a token bucket with a burst
    /// of the same size); past it requests get a fast 429. Default none (opt-in): one
    /// multiplexed connection from a busy backend legitimately carries thousands of calls a
    /// second, and abuse is recognised by its resets (`client_resets`) instead.
    pub max_connection_request_rate: Option<u32>,
    /// Bytes of request and non-streaming response bodies the gateway may hold at once,
    /// across all requests; past it new bodies get a fast 503. Default 512 MiB.
    pub memory_budget: u64,
    /// Peers whose `X-Forwarded-For` / `Forwarded` / `X-Real-IP` are believed. Default none:
    /// the client address is the TCP peer's.
    pub trusted_proxies: Vec<IpNet>,
    /// Timeouts on the client side of the gateway.
    pub client_timeouts: ClientTimeouts,
    /// Limits on requests a client cancels (HTTP/2 RST_STREAM, or a closed connection).
    pub client_resets: ClientResets,
}

/// `[server.client_timeouts]`: how long the gateway waits for a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientTimeouts {
    /// A new connection must deliver its first request head within this (TLS handshake and
    /// protocol detection included); on a kept-alive HTTP/1.1 connection, a request head must
    /// be complete this long after its first byte. Default 10 s.
    pub header: Duration,
    /// Longest gap between two pieces of a request body. Default 15 s.
    pub body_idle: Duration,
    /// The whole request body, from the request head. Default 60 s.
    pub body: Duration,
    /// A connection with no request in flight is closed after this long. Default 75 s.
    pub keep_alive: Duration,
    /// A non-streaming response the client does not take for this long is cut, and its
    /// connection closed. Default 30 s.
    pub send: Duration,
}

impl Default for ClientTimeouts {
    fn default() -> Self {
        ClientTimeouts {
            header: Duration::from_secs(10),
            body_idle: Duration::from_secs(15),
            body: Duration::from_secs(60),
            keep_alive: Duration::from_secs(75),
            send: Duration::from_secs(30),
        }
    }
}

/// `[server.client_resets]`: requests cancelled by their client (HTTP/2 RST_STREAM, or the
/// connection closed) before their response ended, counted in a sliding `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientResets {
    /// More cancels than this on one connection within `window`: the connection is closed
    /// with GOAWAY(ENHANCE_YOUR_CALM). Default 100.
    pub per_connection: u32,
    /// More cancels than this from one client address within `window`: the address is
    /// blocked for `block` (new connections refused, new requests a fast 429). Default 200.
    pub per_ip: u32,
    /// The counting window. Default 10 s.
    pub window: Duration,
    /// How long a blocked address stays blocked. Default 10 s.
    pub block: Duration,
}

impl Default for ClientResets {
    fn default() -> Self {
        ClientResets {
            per_connection: 100,
            per_ip: 200,
            window: Duration::from_secs(10),
            block: Duration::from_secs(10),
        }
    }
}

/// A range of `server.trusted_proxies`: `ADDR/PREFIX`, or one address. An IPv4-mapped IPv6
/// peer (`::ffff:10.0.0.1`, as a dual-stack listener reports IPv4 clients) counts as its IPv4
/// address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet(ipnet::IpNet);

impl IpNet {
    /// Parses `ADDR/PREFIX` or `ADDR`.
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(s: &str) -> Result<IpNet, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: std::net::IpAddr = addr.trim().parse().map_err(|_| {
            format!("`{s}` is not an IP address or CIDR range, e.g. \"10.0.0.0/8\"")
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bad_prefix = || format!("`{s}`: the prefix length must be 0 to {max}");
        let prefix = match prefix {
            None => max,
            Some(p) => p.trim().parse::<u8>().map_err(|_| bad_prefix())?,
        };
        ipnet::IpNet::new(addr, prefix)
            .map(IpNet)
            .map_err(|_| bad_prefix())
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.0.contains(&ip)
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

// === impl ServerConfig ===

impl ServerConfig {
    /// The admin plane's address: `admin_listen` if set; else `127.0.0.1:0` (an ephemeral
    /// port) when `listen`'s port is 0, so that gateways started for tests never fight over
    /// one port; else [`DEFAULT_ADMIN_LISTEN`].
    pub fn admin_addr(&self) -> SocketAddr {
        match self.admin_listen {
            Some(a) => a,
            None if self.listen.port() == 0 => SocketAddr::from(([127, 0, 0, 1], 0)),
            None => DEFAULT_ADMIN_LISTEN,
        }
    }
}

/// PEM files for the listener's TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
}

/// The wire protocol to an upstream, spelled in the file as `http1`, `h2`, `h2c` or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = schema::interpolable)]
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
        /// The key, read at load time from the variable `auth.env` names.
        secret: String,
    },
    /// Replace them with `<header>: <secret>` (e.g. Anthropic's `x-api-key`).
    Header {
        /// Header name, lower case.
        name: http::HeaderName,
        /// The key, read from the environment at load time.
        secret: String,
    },
    /// Replace them with the key in the header the upstream's provider takes
    /// (`Authorization: Bearer` for OpenAI, `api-key` for Azure, `x-api-key` for Anthropic,
    /// `x-goog-api-key` for Gemini).
    ApiKey {
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
            UpstreamAuth::ApiKey { .. } => f.write_str("ApiKey(<redacted>)"),
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
    /// Longest gap between events (or upstream comments) of a stream, and between two pieces
    /// of a non-streaming body. Default 300 s.
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
    pub retry_budget: BudgetConfig,
    /// The wire format the upstream speaks. `None`: whatever API the client calls (requests
    /// and responses pass through untranslated). Default `None`.
    pub provider: Option<sluice_providers::ProviderKind>,
    /// A cloud's addressing and credentials: Bedrock (`provider = "bedrock"`: SigV4), Vertex AI
    /// (`provider = "vertex"`: service-account tokens), Azure with `auth = { type = "entra" }`.
    /// Bedrock and Vertex upstreams have no `provider` kind: the gateway picks the wire format
    /// per request (Converse; Gemini or Anthropic by the model's publisher).
    pub cloud: Option<CloudAuth>,
    /// The upstream continues a trailing assistant message (assistant prefill), so a cut
    /// stream may be continued there. Default: true for `anthropic`, false otherwise.
    pub prefill: bool,
    /// Active health check of this upstream (opt-in): a cheap request every interval; an
    /// unhealthy upstream gets no traffic while another target of its route is usable.
    pub health_check: Option<sluice_upstream::HealthCheckConfig>,
}

// === impl UpstreamConfig ===

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

/// What to do with the upstream when the client goes away mid-stream; `cancel` or `drain` in
/// the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = schema::interpolable)]
pub enum OnClientDisconnect {
    /// Cancel the upstream request at once (RST_STREAM / close). The default.
    Cancel,
    /// Read the upstream to its end (bounded by `total`) without forwarding, to record the
    /// usage it reports.
    Drain,
}

/// An upstream's place in [`Config::upstreams`], as a route's targets name it. Typed, so that
/// an index into another list cannot be passed for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UpstreamId(u32);

impl UpstreamId {
    /// The id of `config.upstreams[index]`.
    ///
    /// # Panics
    /// Past `u32::MAX` upstreams.
    pub fn new(index: usize) -> Self {
        UpstreamId(u32::try_from(index).expect("fewer than 2^32 upstreams"))
    }

    /// Its index in [`Config::upstreams`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One place a route can send a request: an upstream, and what to call the model there.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetConfig {
    /// Which of [`Config::upstreams`].
    pub upstream: UpstreamId,
    /// The model name sent to this upstream instead of the client's (e.g. `gpt-4o` →
    /// `claude-sonnet-4-5`). Default: the client's.
    pub model: Option<String>,
    /// Share of traffic among the targets of one tier. Default 1.
    pub weight: u32,
    /// The model's context window in tokens: a request that exceeded one target's window is
    /// only sent to targets with a larger one. Default unknown (never "larger").
    pub context_window: Option<u64>,
    /// This target's own credential (`key_env`), replacing the upstream's: several API keys
    /// of one provider become several targets, and a key that hits its rate limit rests
    /// while the others serve. Default: the upstream's `auth`.
    pub auth: Option<UpstreamAuth>,
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
    pub retry: RetryConfig,
    /// Requests on this route may be sent again after a maybe-processed failure (a timeout
    /// or reset after the request was written) even without an `Idempotency-Key`. Default
    /// false.
    pub idempotent: bool,
    /// The whole request's deadline across every attempt, backoff and fallback. Default: the
    /// `timeouts.total` of the first target's upstream.
    pub timeout: Option<Duration>,
    /// Parameters a target's provider cannot honour are dropped (and listed in the
    /// `x-sluice-dropped-params` response header) instead of refused with a 400. Default
    /// false.
    pub drop_unsupported_params: bool,
    /// A stream cut after its first content is continued on a target that takes an assistant
    /// prefill (`upstream[].prefill`), spliced into the same client stream. Default false.
    pub continuation: bool,
    /// Prompt-cache breakpoints (after the tools and the system prompt) added for clients
    /// that mark none, on Anthropic, Vertex AI Claude and Bedrock targets. Default false.
    pub cache_breakpoints: bool,
    /// How tier 0's targets share requests. Default `p2c_ewma`.
    pub balance: sluice_upstream::BalancePolicy,
    /// Passive outlier ejection of tier 0's targets.
    pub outlier: sluice_upstream::OutlierConfig,
    /// Whether requests need a virtual key. Default `required` when the config defines keys
    /// (`[[key]]` or `keys.file`), else `off`.
    pub keys: KeyMode,
    /// Limits shared by every request of the route, with a key or without.
    pub limits: Limits,
    /// The response cache (`cache = { ttl = "1h" }`): exact-match answers replayed without
    /// an upstream call. Default off: a route without it pays nothing.
    pub cache: Option<sluice_state::CacheConfig>,
    /// Effort levels as thinking budgets when a request is translated (OpenAI
    /// `reasoning_effort` to an Anthropic or Gemini budget, and back). Default
    /// [`sluice_providers::reasoning::BudgetTable::DEFAULT`] (the README's table).
    pub reasoning_budgets: sluice_providers::reasoning::BudgetTable,
    /// The guardrails the route's requests and answers pass (indexes into
    /// [`Config::guardrails`], in the order given). Empty: none, and no cost.
    pub guardrails: Vec<usize>,
    /// Resumable streams (`resumable = { keep = "10m", max_bytes = "4MiB" }`): every event
    /// carries an `id:`, a client that goes away leaves the generation running for `keep`,
    /// and a reconnect with `Last-Event-ID` gets the rest. `None`: off (a request may still
    /// ask with `x-sluice-resumable: on`, and gets [`ResumableConfig::DEFAULT`]).
    pub resumable: Option<ResumableConfig>,
}

/// One route's resumable streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumableConfig {
    /// How long a generation runs on after its client left, and how long its log is kept
    /// after it ended. Default 10 min.
    pub keep: Duration,
    /// Most bytes of events one stream's log holds; past it the oldest events are dropped
    /// (a reconnect asking for them gets 410) while no client reads, and the generation waits
    /// for a reading client. Default 4 MiB.
    pub max_bytes: usize,
}

impl ResumableConfig {
    /// What `resumable = {}` and a request's `x-sluice-resumable: on` get.
    pub const DEFAULT: ResumableConfig = ResumableConfig {
        keep: Duration::from_secs(600),
        max_bytes: 4 << 20,
    };
}

// === impl RouteConfig ===

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
    pub fn primary_upstream(&self) -> UpstreamId {
        self.targets[0].upstream
    }
}

/// Why a configuration was rejected: the field path (`upstream[0].timeouts.idle`), the line
/// when the path is in the file, and the reason with the fix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub struct ConfigError {
    /// Where in the file, e.g. `route[1].upstream`; empty for a TOML syntax error; the file's
    /// name when it cannot be read.
    pub path: String,
    /// The 1-based line in the file, when known.
    pub line: Option<usize>,
    /// What is wrong and what would be right.
    pub reason: String,
}

impl ConfigError {
    /// An error at `path` (a field path such as `server.listen`, or a file name) for
    /// `reason`; the line is found later, where the text is known.
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            line: None,
            reason: reason.into(),
        }
    }
}

/// `line 4: upstream[0].timeouts.idle: reason`, leaving out what is unknown.
fn write_located(
    f: &mut fmt::Formatter<'_>,
    line: Option<usize>,
    path: &str,
    text: &str,
) -> fmt::Result {
    if let Some(line) = line {
        write!(f, "line {line}: ")?;
    }
    if !path.is_empty() {
        write!(f, "{path}: ")?;
    }
    f.write_str(text)
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, self.line, &self.path, &self.reason)
    }
}

/// Something in a valid config that deserves a look: a certificate near its end, or (with
/// [`EnvMode::Skip`]) a value that could not be checked without its environment variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The field, e.g. `server.tls.cert`.
    pub path: String,
    /// The 1-based line in the file, when known.
    pub line: Option<usize>,
    /// What to look at.
    pub message: String,
}

impl ConfigWarning {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigWarning {
            path: path.into(),
            line: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, self.line, &self.path, &self.message)
    }
}

/// How loading treats an environment variable that is not set, in `${VAR}` and in `auth.env`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EnvMode {
    /// An error naming the field and the variable: what `serve` does.
    #[default]
    Required,
    /// A warning; a placeholder stands in for the value, and files whose path needs the
    /// variable are not read. For validating a config in CI without its secrets
    /// (`check-config --skip-env`); never for serving.
    Skip,
}

/// A validated configuration and its warnings.
#[derive(Debug)]
pub struct Checked {
    /// The configuration.
    pub config: Config,
    /// What deserves a look, in file order of discovery.
    pub warnings: Vec<ConfigWarning>,
}

// === impl Config ===

impl Config {
    /// Parses and validates a TOML document. `env` looks up the environment variables named by
    /// `${VAR}` and `auth.env` (passed in so tests need no process environment); an unset one
    /// is an error. Warnings are dropped: see [`Config::check_toml`] to have them.
    ///
    /// # Errors
    /// The first problem found, with its field path and line.
    pub fn from_toml(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Config::check_toml(text, env, EnvMode::Required).map(|c| c.config)
    }

    /// Reads, parses and validates a file, taking variables from the process environment.
    ///
    /// # Errors
    /// An unreadable file, or the first problem found in it.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        Config::check_file(path, EnvMode::Required).map(|c| c.config)
    }

    /// [`Config::from_toml`] with the warnings, and the choice of what an unset variable is.
    /// The listener's TLS files are loaded as startup loads them, and certificates (the
    /// listener's and each `ca_file`'s) that end within [`tls::EXPIRY_WARNING`] are warned of.
    ///
    /// # Errors
    /// The first problem found, with its field path and line.
    pub fn check_toml(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
        mode: EnvMode,
    ) -> Result<Checked, ConfigError> {
        validate::check(text, env, mode, SystemTime::now())
    }

    /// [`Config::check_toml`] on a file, with the process environment.
    ///
    /// # Errors
    /// An unreadable file, or the first problem found in it.
    pub fn check_file(path: &std::path::Path, mode: EnvMode) -> Result<Checked, ConfigError> {
        let text = Config::read_file(path)?;
        Config::check_toml(&text, &|k| std::env::var(k).ok(), mode)
    }

    /// A config file's text, for [`Config::check_toml`].
    ///
    /// # Errors
    /// The file cannot be read (the error names it).
    pub fn read_file(path: &std::path::Path) -> Result<String, ConfigError> {
        validate::read(path)
    }

    /// The index in [`Config::routes`] of the route that serves `model`: the first whose
    /// globs match it. The one route selection: the request path, `GET /v1/models` and the
    /// fuzz target all ask here.
    pub fn route_index(&self, model: &str) -> Option<usize> {
        self.routes
            .iter()
            .position(|r| r.models.iter().any(|g| glob_match(g, model)))
    }

    /// Upstream `id`'s settings.
    pub fn upstream(&self, id: UpstreamId) -> &UpstreamConfig {
        &self.upstreams[id.index()]
    }

    /// The route for a model, if any (see [`Config::route_index`]).
    pub fn route_for(&self, model: &str) -> Option<&RouteConfig> {
        self.route_index(model).map(|i| &self.routes[i])
    }
}

/// `*` matches any run of characters (also empty), `?` exactly one; everything else itself.
pub fn glob_match(glob: &str, s: &str) -> bool {
    // On bytes, with `?` and backtracking stepping whole UTF-8 characters: no copy of `s`, whose
    // length a client chooses (a 10 MB `model` must cost no 40 MB `Vec<char>`).
    let (g, s) = (glob.as_bytes(), s.as_bytes());
    let char_len = |i: usize| match s[i] {
        b if b < 0x80 => 1,
        b if b >= 0xf0 => 4,
        b if b >= 0xe0 => 3,
        _ => 2,
    };
    // Iterative matcher with one backtrack point: linear for the globs configs use.
    let (mut gi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if gi < g.len() && g[gi] == b'?' {
            gi += 1;
            si += char_len(si);
        } else if gi < g.len() && g[gi] == b'*' {
            star = Some((gi, si));
            gi += 1;
        } else if gi < g.len() && g[gi] == s[si] {
            gi += 1;
            si += 1;
        } else if let Some((sg, ss)) = star {
            let next = ss + char_len(ss);
            gi = sg + 1;
            si = next;
            star = Some((sg, next));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|&c| c == b'*')
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
        assert!(glob_match("模?-*", "模型-v1"));
        assert!(glob_match("*é", "aéé"));
        assert!(!glob_match("?", "éé"));
    }
}
