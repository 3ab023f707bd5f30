//! `[mcp]`: the MCP gateway (`sluice-mcp`): the upstream MCP servers it federates, the secret
//! its session ids are signed with, which keys may use which tools, and per-key tool-call
//! limits.
//!
//! ```toml
//! [mcp]
//! session_secret = "${SLUICE_MCP_SECRET}"   # at least 32 bytes; shared by every instance
//!
//! [[mcp.server]]
//! name = "github"
//! url = "https://api.githubcopilot.com/mcp/"
//! auth = { type = "bearer", env = "GITHUB_TOKEN" }
//!
//! [[mcp.server]]
//! name = "files"
//! command = ["mcp-server-filesystem", "/srv/data"]
//! env = { LOG_LEVEL = "warn" }
//!
//! [[mcp.grant]]
//! keys = ["team-*"]
//! server = "github"
//! tools = ["create_issue", "list_*"]
//!
//! [[mcp.limit]]
//! keys = ["*"]
//! calls = { limit = 60, per = "1m" }
//! ```
//!
//! The raw structs live here too (not in `raw`), so the whole section is one file; they are
//! taken apart by exhaustive destructuring like the rest of the config.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::units::{DurationValue, SizeValue};
use super::{ConfigError, ConfigWarning, EnvMode};

/// Shortest accepted `mcp.session_secret`: an HMAC-SHA256 key should carry at least the
/// hash's 256 bits.
pub const MIN_SESSION_SECRET_BYTES: usize = 32;

/// `[mcp]`. Disabled (no server) by default.
#[derive(Clone, Debug, Default)]
pub struct McpConfig {
    /// The HMAC key that signs client session ids. Every instance that should serve the
    /// sessions of another must share it. Required when `servers` is not empty.
    pub session_secret: Option<McpSecret>,
    /// A session id older than this is refused (404, the client starts a new session).
    /// Default 24 h.
    pub session_ttl: Duration,
    /// Largest JSON-RPC message accepted from a client or an upstream (a request body, an SSE
    /// event, a JSON response). Default 4 MiB.
    pub max_message_bytes: usize,
    /// An SSE comment (`: ping`) this often on a client stream while upstreams are silent, so
    /// a disconnected client is noticed and proxies keep the stream open. Default 15 s.
    pub heartbeat: Duration,
    /// Upstream MCP servers, in file order; names unique.
    pub servers: Vec<McpServerConfig>,
    /// Which keys may use which servers and tools. No grant: no caller sees any tool.
    pub grants: Vec<McpGrant>,
    /// Tool calls per key; the first entry whose `keys` match a caller applies.
    pub limits: Vec<McpLimit>,
}

impl McpConfig {
    /// Whether any server is configured (the `/mcp` endpoint serves nothing otherwise).
    pub fn is_enabled(&self) -> bool {
        !self.servers.is_empty()
    }
}

/// A secret from the config (`mcp.session_secret`); `Debug` shows `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct McpSecret(Vec<u8>);

impl McpSecret {
    /// Wraps raw secret bytes (tests and embedders; the config checks the length).
    pub fn new(bytes: impl Into<Vec<u8>>) -> McpSecret {
        McpSecret(bytes.into())
    }

    /// The secret's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for McpSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("McpSecret(<redacted>)")
    }
}

/// `[[mcp.server]]`: one upstream MCP server.
#[derive(Clone, Debug)]
pub struct McpServerConfig {
    /// Unique name: letters, digits, `-` and `_`, without `__` (the separator of the
    /// prefixed tool names clients see, `github__create_issue`). At most 32 characters.
    pub name: String,
    /// How the server is reached.
    pub transport: McpTransport,
    /// The credential sent to it. Default none.
    pub auth: McpAuth,
    /// The protocol revision spoken to it. Default `auto`.
    pub protocol: McpProtocol,
    /// Timeouts.
    pub timeouts: McpTimeouts,
    /// Idle connections kept for reuse (HTTP servers). Default 8.
    pub max_idle_connections: usize,
}

/// How an upstream MCP server is reached: `url = ...` or `command = [...]`.
#[derive(Clone, Debug)]
pub enum McpTransport {
    /// Streamable HTTP at this URL (`http` or `https`).
    Http {
        /// The MCP endpoint, e.g. `https://mcp.example.com/mcp`.
        url: http::Uri,
        /// Extra trust root (PEM) besides the webpki roots.
        ca_file: Option<PathBuf>,
    },
    /// A local process speaking newline-delimited JSON-RPC on stdin/stdout, started and
    /// supervised by Sluice.
    Stdio(McpStdio),
}

/// `command = [...]`: a local MCP server process.
#[derive(Clone)]
pub struct McpStdio {
    /// The program (looked up on `PATH` if it has no `/`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set for it (values may be secrets: never printed). The process gets these
    /// and the variables named in `inherit_env`, nothing else from Sluice's environment.
    pub env: Vec<(String, String)>,
    /// Variables copied from Sluice's environment. Default `["PATH", "HOME", "LANG"]`.
    pub inherit_env: Vec<String>,
    /// Working directory. Default Sluice's.
    pub cwd: Option<PathBuf>,
    /// When and how fast to restart it.
    pub restart: McpRestart,
}

impl std::fmt::Debug for McpStdio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("McpStdio")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &env)
            .field("inherit_env", &self.inherit_env)
            .field("cwd", &self.cwd)
            .field("restart", &self.restart)
            .finish()
    }
}

/// `restart = { policy, backoff, max_backoff }` of a `command` server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpRestart {
    /// When the process is started again after it exits. Default `on_failure`.
    pub policy: McpRestartPolicy,
    /// Wait before the first restart; doubled after each exit that came sooner than
    /// `max_backoff` after its start. Default 500 ms.
    pub backoff: Duration,
    /// The longest wait between restarts. Default 30 s.
    pub max_backoff: Duration,
}

impl Default for McpRestart {
    fn default() -> Self {
        McpRestart {
            policy: McpRestartPolicy::OnFailure,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// `restart.policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = super::schema::interpolable)]
pub enum McpRestartPolicy {
    /// Restart whenever it exits.
    Always,
    /// Restart when it exits with a failure (non-zero status, a signal, a broken pipe).
    OnFailure,
    /// Never restart: the server stays down (and says so in `/admin/mcp`).
    Never,
}

/// The credential sent to an upstream MCP server.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum McpAuth {
    /// None.
    #[default]
    None,
    /// The client's own credential, as the gateway's key stage hands it over
    /// (`Caller::authorization`), sent as `Authorization`.
    Passthrough,
    /// `Authorization: Bearer <secret>`.
    Bearer {
        /// Read at load time from the variable `auth.env` names.
        secret: String,
    },
    /// `<header>: <secret>`.
    Header {
        /// Header name, lower case.
        name: http::HeaderName,
        /// Read at load time from the environment.
        secret: String,
    },
}

impl std::fmt::Debug for McpAuth {
    // Secrets never reach logs, not even through `{:?}` of the config.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpAuth::None => f.write_str("None"),
            McpAuth::Passthrough => f.write_str("Passthrough"),
            McpAuth::Bearer { .. } => f.write_str("Bearer(<redacted>)"),
            McpAuth::Header { name, .. } => write!(f, "Header({name}: <redacted>)"),
        }
    }
}

/// The MCP revision spoken to an upstream: `auto` or a version string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum McpProtocol {
    /// Speak the client's era (sessions for a handshake-era client, per-request envelopes for
    /// a 2026-07-28 client); an upstream that refuses it is remembered and bridged.
    #[default]
    Auto,
    /// `2025-06-18`: sessions, `initialize`.
    V2025_06_18,
    /// `2025-11-25`: sessions, `initialize`.
    V2025_11_25,
    /// `2026-07-28`: stateless, version and capabilities in each request's `_meta`.
    V2026_07_28,
}

impl McpProtocol {
    /// As written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            McpProtocol::Auto => "auto",
            McpProtocol::V2025_06_18 => "2025-06-18",
            McpProtocol::V2025_11_25 => "2025-11-25",
            McpProtocol::V2026_07_28 => "2026-07-28",
        }
    }
}

/// `timeouts = { ... }` of an MCP server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpTimeouts {
    /// TCP connect plus TLS handshake (HTTP), or process start (stdio). Default 5 s.
    pub connect: Duration,
    /// `initialize` and each `*/list` of a fan-out: past it the server is left out of the
    /// answer (which says so). Default 10 s.
    pub list: Duration,
    /// A whole tool call (or any other routed request), progress included: past it the
    /// client gets a JSON-RPC timeout error and the call is cancelled upstream. Default 5 min.
    pub call: Duration,
}

impl Default for McpTimeouts {
    fn default() -> Self {
        McpTimeouts {
            connect: Duration::from_secs(5),
            list: Duration::from_secs(10),
            call: Duration::from_secs(300),
        }
    }
}

/// `[[mcp.grant]]`: keys matching `keys` may see and call the tools matching `tools` on the
/// servers matching `server`. Grants add up; nothing is granted by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpGrant {
    /// Globs on the caller's key id. `*` matches every caller, including one without a key
    /// (when the route needs none).
    pub keys: Vec<String>,
    /// Glob on the server name.
    pub server: String,
    /// Globs on the server's own tool names (without the `server__` prefix). Default `["*"]`.
    pub tools: Vec<String>,
}

/// `[[mcp.limit]]`: tool calls per key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpLimit {
    /// Globs on the caller's key id (`*`: every caller; each key id counts on its own).
    pub keys: Vec<String>,
    /// At most `calls.limit` tool calls per `calls.per`, for each matching key.
    pub calls: McpRate,
}

/// A rate: `{ limit = 60, per = "1m" }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpRate {
    /// Events per period, at least 1.
    pub limit: u64,
    /// The period.
    pub per: Duration,
}

// === raw ===

/// `[mcp]`: the MCP gateway at `/mcp`. Off without a `[[mcp.server]]`.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcp {
    /// The HMAC key that signs client session ids: at least 32 bytes, the same on every
    /// instance that should serve another's sessions. Required with `[[mcp.server]]`; set it
    /// from the environment, `"${SLUICE_MCP_SECRET}"`.
    session_secret: Option<String>,
    /// A session id older than this is refused (404; the client starts a new session).
    #[schemars(extend("default" = "24h"))]
    session_ttl: Option<DurationValue>,
    /// Largest JSON-RPC message accepted from a client or an upstream, 1KiB to 64MiB.
    #[schemars(extend("default" = "4MiB"))]
    max_message_bytes: Option<SizeValue>,
    /// An SSE comment (`: ping`) this often on a client stream while upstreams are silent.
    #[schemars(extend("default" = "15s"))]
    heartbeat: Option<DurationValue>,
    /// Upstream MCP servers; their tools are offered as `{server}__{tool}`.
    #[serde(default, rename = "server")]
    servers: Vec<RawMcpServer>,
    /// Which keys may see and call which servers' tools. Grants add up; without one no
    /// caller sees any tool.
    #[serde(default, rename = "grant")]
    grants: Vec<RawMcpGrant>,
    /// Tool calls per key; the first entry whose `keys` match a caller applies.
    #[serde(default, rename = "limit")]
    limits: Vec<RawMcpLimit>,
}

/// `[[mcp.server]]`: one upstream MCP server, reached over HTTP (`url`) or started as a local
/// process (`command`); give one of the two.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawMcpServer {
    /// Unique name: 1 to 32 letters, digits, `-` or `_`, without `__`.
    name: String,
    /// The Streamable HTTP endpoint, `http://` or `https://`, e.g.
    /// `https://mcp.example.com/mcp`.
    url: Option<String>,
    /// The program and its arguments, e.g. `["npx", "-y", "@modelcontextprotocol/server-github"]`:
    /// a local process speaking JSON-RPC on stdin/stdout, started and supervised by Sluice.
    command: Option<Vec<String>>,
    /// `command` servers: variables set for the process (values may be secrets: never
    /// printed). It gets these and `inherit_env`, nothing else from Sluice's environment.
    env: Option<BTreeMap<String, String>>,
    /// `command` servers: variables copied from Sluice's environment. Default `["PATH",
    /// "HOME", "LANG"]`.
    inherit_env: Option<Vec<String>>,
    /// `command` servers: the working directory. Default: Sluice's.
    cwd: Option<PathBuf>,
    /// `command` servers: when and how fast the process is restarted.
    restart: Option<RawMcpRestart>,
    /// `url` servers: the credential sent to the server. Default: none.
    auth: Option<RawMcpAuth>,
    /// The MCP revision spoken to the server: `auto` (the client's era; an upstream that
    /// refuses it is remembered and bridged), `2025-06-18`, `2025-11-25` or `2026-07-28`.
    // `default` (what an absent Option is anyway) tells schemars the key is optional, which
    // it cannot see through `schema_with`.
    #[serde(default)]
    #[schemars(extend("default" = "auto"), schema_with = "super::schema::mcp_protocol")]
    protocol: Option<String>,
    /// Timeouts.
    timeouts: Option<RawMcpTimeouts>,
    /// `https://` servers: an extra trust root (PEM) besides the webpki roots.
    ca_file: Option<PathBuf>,
    /// `url` servers: idle connections kept for reuse.
    #[schemars(extend("default" = 8))]
    max_idle_connections: Option<usize>,
}

/// `mcp.server.restart = { policy, backoff, max_backoff }` of a `command` server.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawMcpRestart {
    /// When the process is started again after it exits.
    #[schemars(extend("default" = "on_failure"))]
    policy: Option<McpRestartPolicy>,
    /// Wait before the first restart; doubled after each exit that came sooner than
    /// `max_backoff` after its start.
    #[schemars(extend("default" = "500ms"))]
    backoff: Option<DurationValue>,
    /// The longest wait between restarts (at least `backoff`).
    #[schemars(extend("default" = "30s"))]
    max_backoff: Option<DurationValue>,
}

/// `mcp.server.auth`: `{ type = "...", ... }`, with the fields each type takes and no others.
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum RawMcpAuth {
    /// No credential.
    None {},
    /// The client's own credential, sent as `Authorization`.
    Passthrough {},
    /// `Authorization: Bearer <secret>`.
    Bearer {
        /// The environment variable holding the secret (its name, not the secret).
        env: String,
    },
    /// `<header>: <secret>`.
    Header {
        /// The header's name.
        header: String,
        /// The environment variable holding the secret (its name, not the secret).
        env: String,
    },
}

/// `mcp.server.timeouts`.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawMcpTimeouts {
    /// TCP connect plus TLS handshake (HTTP), or process start (stdio).
    #[schemars(extend("default" = "5s"))]
    connect: Option<DurationValue>,
    /// `initialize` and each `*/list` of a fan-out: past it the server is left out of the
    /// answer (which says so).
    #[schemars(extend("default" = "10s"))]
    list: Option<DurationValue>,
    /// A whole tool call, progress included: past it the client gets a JSON-RPC timeout error
    /// and the call is cancelled upstream.
    #[schemars(extend("default" = "5m"))]
    call: Option<DurationValue>,
}

/// `[[mcp.grant]]`: keys matching `keys` may see and call the tools matching `tools` on the
/// servers matching `server`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawMcpGrant {
    /// Globs on the caller's key id; `*` matches every caller, one without a key included.
    keys: Vec<String>,
    /// Glob on the server name.
    server: String,
    /// Globs on the server's own tool names (without the `server__` prefix). Default `["*"]`.
    tools: Option<Vec<String>>,
}

/// `[[mcp.limit]]`: tool calls per key.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawMcpLimit {
    /// Globs on the caller's key id (`*`: every caller; each key id counts on its own).
    keys: Vec<String>,
    /// At most `limit` tool calls per `per`, for each matching key.
    calls: RawMcpRate,
}

/// `mcp.limit.calls = { limit = 60, per = "1m" }`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawMcpRate {
    /// Tool calls per period, 1 to 2^40.
    #[schemars(range(min = 1, max = 1_099_511_627_776_u64))]
    limit: u64,
    /// The period.
    per: DurationValue,
}

// === validation ===

/// What validating `[mcp]` needs from the rest of loading.
pub(crate) struct McpCtx<'a> {
    pub(crate) env: &'a dyn Fn(&str) -> Option<String>,
    pub(crate) mode: EnvMode,
    /// Whether the value at a path held a `${VAR}` that is not set (under `--skip-env`).
    pub(crate) unresolved: &'a dyn Fn(&str) -> bool,
    pub(crate) warnings: &'a mut Vec<ConfigWarning>,
}

/// `[mcp]` into [`McpConfig`].
pub(crate) fn mcp_config(
    raw: Option<RawMcp>,
    ctx: &mut McpCtx<'_>,
) -> Result<McpConfig, ConfigError> {
    let RawMcp {
        session_secret,
        session_ttl,
        max_message_bytes,
        heartbeat,
        servers,
        grants,
        limits,
    } = raw.unwrap_or_default();
    let mut out = McpConfig {
        session_secret: None,
        session_ttl: positive(
            "mcp.session_ttl",
            session_ttl,
            Duration::from_secs(24 * 3600),
        )?,
        max_message_bytes: match max_message_bytes {
            None => 4 << 20,
            Some(SizeValue(n)) if (1024..=(64 << 20)).contains(&n) => n as usize,
            Some(_) => {
                return Err(ConfigError::new(
                    "mcp.max_message_bytes",
                    "must be between 1KiB and 64MiB",
                ))
            }
        },
        heartbeat: positive("mcp.heartbeat", heartbeat, Duration::from_secs(15))?,
        servers: Vec::with_capacity(servers.len()),
        grants: Vec::with_capacity(grants.len()),
        limits: Vec::with_capacity(limits.len()),
    };
    match session_secret {
        Some(_) if (ctx.unresolved)("mcp.session_secret") => {
            ctx.warnings.push(ConfigWarning::new(
                "mcp.session_secret",
                "not checked: its variable is not set (--skip-env)",
            ));
            out.session_secret = Some(McpSecret(vec![0; MIN_SESSION_SECRET_BYTES]));
        }
        Some(s) if s.len() < MIN_SESSION_SECRET_BYTES => {
            return Err(ConfigError::new(
                "mcp.session_secret",
                format!(
                    "is {} bytes; use at least {MIN_SESSION_SECRET_BYTES} random bytes \
                     (e.g. `openssl rand -base64 48`), the same on every instance",
                    s.len()
                ),
            ))
        }
        Some(s) => out.session_secret = Some(McpSecret(s.into_bytes())),
        None => {}
    }
    for (i, s) in servers.into_iter().enumerate() {
        let path = format!("mcp.server[{i}]");
        let s = server_config(&path, s, ctx)?;
        if out.servers.iter().any(|o| o.name == s.name) {
            return Err(ConfigError::new(
                format!("{path}.name"),
                format!("`{}` is already the name of another MCP server", s.name),
            ));
        }
        out.servers.push(s);
    }
    if !out.servers.is_empty() && out.session_secret.is_none() {
        return Err(ConfigError::new(
            "mcp.session_secret",
            "is required with [[mcp.server]]: session ids are signed with it; set \
             session_secret = \"${SLUICE_MCP_SECRET}\" (at least 32 random bytes, the same on \
             every instance)",
        ));
    }
    for (i, g) in grants.into_iter().enumerate() {
        let path = format!("mcp.grant[{i}]");
        let RawMcpGrant {
            keys,
            server,
            tools,
        } = g;
        globs(&format!("{path}.keys"), &keys)?;
        if server.is_empty() {
            return Err(ConfigError::new(
                format!("{path}.server"),
                "must not be empty (a server name, or a glob such as \"*\")",
            ));
        }
        let matched = out
            .servers
            .iter()
            .any(|s| crate::glob_match(&server, &s.name));
        if !matched {
            let names: Vec<&str> = out.servers.iter().map(|s| s.name.as_str()).collect();
            let mut msg = format!("`{server}` matches no [[mcp.server]]");
            if let Some(best) = super::diagnostics::closest(&server, &names) {
                msg.push_str(&format!("; did you mean `{best}`?"));
            }
            ctx.warnings
                .push(ConfigWarning::new(format!("{path}.server"), msg));
        }
        let tools = tools.unwrap_or_else(|| vec!["*".to_string()]);
        globs(&format!("{path}.tools"), &tools)?;
        out.grants.push(McpGrant {
            keys,
            server,
            tools,
        });
    }
    if !out.servers.is_empty() && out.grants.is_empty() {
        ctx.warnings.push(ConfigWarning::new(
            "mcp.grant",
            "no [[mcp.grant]]: no caller sees or may call any MCP tool",
        ));
    }
    for (i, l) in limits.into_iter().enumerate() {
        let path = format!("mcp.limit[{i}]");
        let RawMcpLimit { keys, calls } = l;
        globs(&format!("{path}.keys"), &keys)?;
        let RawMcpRate { limit, per } = calls;
        if limit == 0 || limit > 1 << 40 {
            return Err(ConfigError::new(
                format!("{path}.calls.limit"),
                "must be 1 to 2^40 (remove the limit to allow any number)",
            ));
        }
        let per = positive(&format!("{path}.calls.per"), Some(per), Duration::ZERO)?;
        out.limits.push(McpLimit {
            keys,
            calls: McpRate { limit, per },
        });
    }
    Ok(out)
}

fn server_config(
    path: &str,
    raw: RawMcpServer,
    ctx: &mut McpCtx<'_>,
) -> Result<McpServerConfig, ConfigError> {
    let RawMcpServer {
        name,
        url,
        command,
        env,
        inherit_env,
        cwd,
        restart,
        auth,
        protocol,
        timeouts,
        ca_file,
        max_idle_connections,
    } = raw;
    let name_ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !name.contains("__");
    if !name_ok {
        return Err(ConfigError::new(
            format!("{path}.name"),
            format!(
                "`{name}`: use 1 to 32 letters, digits, `-` or `_`, without `__` (clients see \
                 its tools as `{{name}}__{{tool}}`)"
            ),
        ));
    }
    let stdio_only = |field: &str, set: bool| {
        if set {
            Err(ConfigError::new(
                format!("{path}.{field}"),
                "applies to `command` servers only",
            ))
        } else {
            Ok(())
        }
    };
    let transport = match (url, command) {
        (Some(url), None) => {
            stdio_only("env", env.is_some())?;
            stdio_only("inherit_env", inherit_env.is_some())?;
            stdio_only("cwd", cwd.is_some())?;
            stdio_only("restart", restart.is_some())?;
            let uri: http::Uri = url.parse().map_err(|_| {
                ConfigError::new(format!("{path}.url"), format!("`{url}` is not a URL"))
            })?;
            let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
            if !scheme_ok || uri.host().is_none() {
                return Err(ConfigError::new(
                    format!("{path}.url"),
                    format!("`{url}`: needs http:// or https:// and a host"),
                ));
            }
            if uri.scheme_str() == Some("http") && ca_file.is_some() {
                return Err(ConfigError::new(
                    format!("{path}.ca_file"),
                    "applies to https:// servers only",
                ));
            }
            McpTransport::Http { url: uri, ca_file }
        }
        (None, Some(command)) => {
            if ca_file.is_some() {
                return Err(ConfigError::new(
                    format!("{path}.ca_file"),
                    "applies to https:// servers only",
                ));
            }
            let mut parts = command.into_iter();
            let program = parts.next().filter(|p| !p.is_empty()).ok_or_else(|| {
                ConfigError::new(
                    format!("{path}.command"),
                    "needs the program, e.g. [\"npx\", \"-y\", \"@modelcontextprotocol/server-github\"]",
                )
            })?;
            let env: Vec<(String, String)> = env.unwrap_or_default().into_iter().collect();
            if let Some((k, _)) = env
                .iter()
                .find(|(k, _)| k.is_empty() || k.contains(['=', '\0']))
            {
                return Err(ConfigError::new(
                    format!("{path}.env"),
                    format!("`{k}` is not a variable name"),
                ));
            }
            let RawMcpRestart {
                policy,
                backoff,
                max_backoff,
            } = restart.unwrap_or_default();
            let d = McpRestart::default();
            let backoff = positive(&format!("{path}.restart.backoff"), backoff, d.backoff)?;
            let max_backoff = positive(
                &format!("{path}.restart.max_backoff"),
                max_backoff,
                d.max_backoff,
            )?;
            if max_backoff < backoff {
                return Err(ConfigError::new(
                    format!("{path}.restart.max_backoff"),
                    "must be at least `backoff`",
                ));
            }
            McpTransport::Stdio(McpStdio {
                program,
                args: parts.collect(),
                env,
                inherit_env: inherit_env
                    .unwrap_or_else(|| vec!["PATH".into(), "HOME".into(), "LANG".into()]),
                cwd,
                restart: McpRestart {
                    policy: policy.unwrap_or(d.policy),
                    backoff,
                    max_backoff,
                },
            })
        }
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                format!("{path}.command"),
                "give either `url` (Streamable HTTP) or `command` (a local stdio server), not both",
            ))
        }
        (None, None) => {
            return Err(ConfigError::new(
                format!("{path}.url"),
                "an MCP server needs `url = \"https://...\"` or `command = [\"program\", ...]`",
            ))
        }
    };
    let auth = match auth {
        None | Some(RawMcpAuth::None {}) => McpAuth::None,
        Some(RawMcpAuth::Passthrough {}) => McpAuth::Passthrough,
        Some(RawMcpAuth::Bearer { env }) => McpAuth::Bearer {
            secret: secret(&format!("{path}.auth.env"), &env, ctx)?,
        },
        Some(RawMcpAuth::Header { header, env }) => {
            let name = http::HeaderName::from_bytes(header.as_bytes()).map_err(|_| {
                ConfigError::new(
                    format!("{path}.auth.header"),
                    format!("`{header}` is not a header name"),
                )
            })?;
            McpAuth::Header {
                name,
                secret: secret(&format!("{path}.auth.env"), &env, ctx)?,
            }
        }
    };
    if matches!(transport, McpTransport::Stdio(_)) && auth != McpAuth::None {
        return Err(ConfigError::new(
            format!("{path}.auth"),
            "a `command` server takes its credentials from `env`, not `auth`",
        ));
    }
    let protocol = match protocol.as_deref() {
        None | Some("auto") => McpProtocol::Auto,
        Some("2025-06-18") => McpProtocol::V2025_06_18,
        Some("2025-11-25") => McpProtocol::V2025_11_25,
        Some("2026-07-28") => McpProtocol::V2026_07_28,
        Some(other) => {
            return Err(ConfigError::new(
                format!("{path}.protocol"),
                format!(
                    "`{other}`: use \"auto\", \"2025-06-18\", \"2025-11-25\" or \"2026-07-28\""
                ),
            ))
        }
    };
    let RawMcpTimeouts {
        connect,
        list,
        call,
    } = timeouts.unwrap_or_default();
    let d = McpTimeouts::default();
    let timeouts = McpTimeouts {
        connect: positive(&format!("{path}.timeouts.connect"), connect, d.connect)?,
        list: positive(&format!("{path}.timeouts.list"), list, d.list)?,
        call: positive(&format!("{path}.timeouts.call"), call, d.call)?,
    };
    Ok(McpServerConfig {
        name,
        transport,
        auth,
        protocol,
        timeouts,
        max_idle_connections: max_idle_connections.unwrap_or(8),
    })
}

fn positive(
    path: &str,
    v: Option<DurationValue>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(DurationValue(d)) if d.is_zero() => {
            Err(ConfigError::new(path, "must be greater than zero"))
        }
        Some(DurationValue(d)) => Ok(d),
    }
}

fn globs(path: &str, globs: &[String]) -> Result<(), ConfigError> {
    if globs.is_empty() || globs.iter().any(|g| g.is_empty()) {
        return Err(ConfigError::new(
            path,
            "needs at least one non-empty glob, e.g. [\"*\"]",
        ));
    }
    Ok(())
}

fn secret(path: &str, var: &str, ctx: &mut McpCtx<'_>) -> Result<String, ConfigError> {
    match (ctx.env)(var).filter(|s| !s.is_empty()) {
        Some(s) => Ok(s),
        None if ctx.mode == EnvMode::Skip => {
            ctx.warnings.push(ConfigWarning::new(
                path,
                format!("the environment variable `{var}` is not set; not checked (--skip-env)"),
            ));
            Ok(super::interpolate::placeholder(var))
        }
        None => Err(ConfigError::new(
            path,
            format!("the environment variable `{var}` (the MCP server's credential) is not set or empty"),
        )),
    }
}

// === redacted view ===

impl McpConfig {
    /// `[mcp]` as it may be shown: every default filled in, no secret (the session secret, the
    /// servers' credentials and their `env` values are left out).
    pub fn redacted(&self) -> Value {
        let McpConfig {
            session_secret,
            session_ttl,
            max_message_bytes,
            heartbeat,
            servers,
            grants,
            limits,
        } = self;
        let dur = |d: &Duration| humantime::format_duration(*d).to_string();
        json!({
            "session_secret": session_secret.as_ref().map(|_| "<redacted>"),
            "session_ttl": dur(session_ttl),
            "max_message_bytes": max_message_bytes,
            "heartbeat": dur(heartbeat),
            "server": servers.iter().map(|s| {
                let McpServerConfig { name, transport, auth, protocol, timeouts, max_idle_connections } = s;
                let mut v = json!({
                    "name": name,
                    "auth": match auth {
                        McpAuth::None => json!("none"),
                        McpAuth::Passthrough => json!("passthrough"),
                        McpAuth::Bearer { .. } => json!({ "type": "bearer", "secret": "<redacted>" }),
                        McpAuth::Header { name, .. } => json!({ "type": "header", "header": name.as_str(), "secret": "<redacted>" }),
                    },
                    "protocol": protocol.as_str(),
                    "timeouts": {
                        "connect": dur(&timeouts.connect),
                        "list": dur(&timeouts.list),
                        "call": dur(&timeouts.call),
                    },
                    "max_idle_connections": max_idle_connections,
                });
                match transport {
                    McpTransport::Http { url, ca_file } => {
                        v["url"] = json!(url.to_string());
                        v["ca_file"] = json!(ca_file);
                    }
                    McpTransport::Stdio(McpStdio { program, args, env, inherit_env, cwd, restart }) => {
                        let mut command = vec![program.clone()];
                        command.extend(args.iter().cloned());
                        v["command"] = json!(command);
                        v["env"] = json!(env.iter().map(|(k, _)| (k.clone(), "<redacted>")).collect::<BTreeMap<_, _>>());
                        v["inherit_env"] = json!(inherit_env);
                        v["cwd"] = json!(cwd);
                        v["restart"] = json!({
                            "policy": format!("{:?}", restart.policy),
                            "backoff": dur(&restart.backoff),
                            "max_backoff": dur(&restart.max_backoff),
                        });
                    }
                }
                v
            }).collect::<Vec<_>>(),
            "grant": grants.iter().map(|g| json!({ "keys": g.keys, "server": g.server, "tools": g.tools })).collect::<Vec<_>>(),
            "limit": limits.iter().map(|l| json!({ "keys": l.keys, "calls": { "limit": l.calls.limit, "per": dur(&l.calls.per) } })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, ConfigError, EnvMode, McpAuth, McpProtocol, McpTransport};

    const BASE: &str = "[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n\
                        [[route]]\nmodels = [\"*\"]\nupstream = \"u\"\n\n";
    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn load(mcp: &str) -> Result<Config, ConfigError> {
        let text = format!("{BASE}{mcp}");
        Config::from_toml(&text, &|k| match k {
            "SLUICE_MCP_SECRET" => Some(SECRET.to_string()),
            "GH_TOKEN" => Some("ghp_secret_value".to_string()),
            _ => None,
        })
    }

    #[test]
    fn absent_section_is_disabled() {
        let c = load("").unwrap();
        assert!(!c.mcp.is_enabled());
        assert!(c.mcp.servers.is_empty());
    }

    #[test]
    fn full_section_validates() {
        let c = load(
            r#"
[mcp]
session_secret = "${SLUICE_MCP_SECRET}"
session_ttl = "1h"

[[mcp.server]]
name = "github"
url = "https://mcp.example.com/mcp"
auth = { type = "bearer", env = "GH_TOKEN" }
protocol = "2025-11-25"
timeouts = { call = "30s" }

[[mcp.server]]
name = "files"
command = ["python3", "server.py", "--stdio"]
env = { TOKEN = "abc" }
restart = { policy = "always", backoff = "100ms" }

[[mcp.grant]]
keys = ["team-*"]
server = "github"
tools = ["create_*"]

[[mcp.limit]]
keys = ["*"]
calls = { limit = 10, per = "1m" }
"#,
        )
        .unwrap();
        let m = &c.mcp;
        assert!(m.is_enabled());
        assert_eq!(
            m.session_secret.as_ref().unwrap().as_bytes(),
            SECRET.as_bytes()
        );
        assert_eq!(m.session_ttl.as_secs(), 3600);
        assert_eq!(m.servers.len(), 2);
        assert_eq!(m.servers[0].protocol, McpProtocol::V2025_11_25);
        assert_eq!(m.servers[0].timeouts.call.as_secs(), 30);
        assert!(matches!(m.servers[0].auth, McpAuth::Bearer { .. }));
        let McpTransport::Stdio(s) = &m.servers[1].transport else {
            panic!()
        };
        assert_eq!(s.program, "python3");
        assert_eq!(s.args, ["server.py", "--stdio"]);
        assert_eq!(m.grants[0].tools, ["create_*"]);
        assert_eq!(m.limits[0].calls.limit, 10);
        // Secrets stay out of Debug and the redacted view.
        let dbg = format!("{m:?}");
        assert!(
            !dbg.contains("ghp_secret_value") && !dbg.contains(SECRET) && !dbg.contains("abc\"")
        );
        let shown = c.redacted().to_string();
        assert!(!shown.contains("ghp_secret_value") && !shown.contains(SECRET));
        assert!(shown.contains("\"mcp\""));
    }

    #[test]
    fn mistakes_are_refused_with_their_path() {
        let cases = [
            ("[[mcp.server]]\nname = \"a\"\nurl = \"http://x/mcp\"\n", "mcp.session_secret"),
            ("[mcp]\nsession_secret = \"short\"\n", "mcp.session_secret"),
            (
                "[mcp]\nsession_secret = \"${SLUICE_MCP_SECRET}\"\n[[mcp.server]]\nname = \"a__b\"\nurl = \"http://x/mcp\"\n",
                "mcp.server[0].name",
            ),
            (
                "[mcp]\nsession_secret = \"${SLUICE_MCP_SECRET}\"\n[[mcp.server]]\nname = \"a\"\n",
                "mcp.server[0].url",
            ),
            (
                "[mcp]\nsession_secret = \"${SLUICE_MCP_SECRET}\"\n[[mcp.server]]\nname = \"a\"\nurl = \"ftp://x\"\n",
                "mcp.server[0].url",
            ),
            (
                "[mcp]\nsession_secret = \"${SLUICE_MCP_SECRET}\"\n[[mcp.server]]\nname = \"a\"\nurl = \"http://x/mcp\"\nprotocol = \"2024-01-01\"\n",
                "mcp.server[0].protocol",
            ),
            (
                "[mcp]\nsession_secret = \"${SLUICE_MCP_SECRET}\"\n[[mcp.server]]\nname = \"a\"\nurl = \"http://x/mcp\"\n[[mcp.server]]\nname = \"a\"\nurl = \"http://y/mcp\"\n",
                "mcp.server[1].name",
            ),
            (
                "[mcp]\nsession_secret = \"${SLUICE_MCP_SECRET}\"\n[[mcp.server]]\nname = \"a\"\nurl = \"http://x/mcp\"\nauth = { type = \"bearer\", env = \"NOPE\" }\n",
                "mcp.server[0].auth.env",
            ),
            (
                "[mcp]\nsession_secret = \"${SLUICE_MCP_SECRET}\"\n[[mcp.server]]\nname = \"a\"\ncommand = []\n",
                "mcp.server[0].command",
            ),
            (
                "[mcp]\nsession_secret = \"${SLUICE_MCP_SECRET}\"\n[[mcp.server]]\nname = \"a\"\nurl = \"http://x/mcp\"\nenv = { A = \"b\" }\n",
                "mcp.server[0].env",
            ),
            ("[[mcp.grant]]\nkeys = []\nserver = \"a\"\n", "mcp.grant[0].keys"),
            (
                "[[mcp.limit]]\nkeys = [\"*\"]\ncalls = { limit = 0, per = \"1m\" }\n",
                "mcp.limit[0].calls.limit",
            ),
        ];
        for (text, path) in cases {
            let e = load(text).expect_err(text);
            assert_eq!(e.path, path, "{text}: {e}");
        }
        let e = load("[mcp]\nsesion_secret = \"x\"\n").unwrap_err();
        assert!(e.reason.contains("session_secret"), "{e}");
    }

    #[test]
    fn skip_env_checks_without_secrets() {
        let text = format!(
            "{BASE}[mcp]\nsession_secret = \"${{SLUICE_MCP_SECRET}}\"\n[[mcp.server]]\nname = \"a\"\n\
             url = \"http://x/mcp\"\nauth = {{ type = \"bearer\", env = \"NOPE\" }}\n"
        );
        let checked = Config::check_toml(&text, &|_| None, EnvMode::Skip).unwrap();
        assert!(checked.config.mcp.is_enabled());
        assert!(checked
            .warnings
            .iter()
            .any(|w| w.path == "mcp.session_secret"));
        // No grant: said, not refused.
        assert!(checked.warnings.iter().any(|w| w.path == "mcp.grant"));
    }
}
