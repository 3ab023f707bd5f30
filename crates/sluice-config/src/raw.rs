//! The file as written: every table with `deny_unknown_fields`, so a typo is an error (with a
//! suggestion), never a silently ignored setting. Values here are typed as far as serde can
//! check them alone (units, enums); what needs more than one field, the file system or the
//! environment is checked in `validate`.
//!
//! The doc comments here are the user's documentation: they become the descriptions of the
//! JSON Schema (`sluice config schema`) and the configuration reference (`sluice config
//! reference`), and `#[schemars(extend("default" = ...))]` states each literal default as the
//! file would write it (`validate` applies them; a test checks that writing a default changes
//! nothing). Say there what the field means, its unit and its default.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use super::units::{DurationValue, SizeValue};
use super::{OnClientDisconnect, UpstreamProtocol};

/// # sluice.toml
/// The gateway's configuration file. Every table refuses keys it does not know. String values
/// may hold `${VAR}` or `${VAR:-default}`, expanded from the environment at load (`$$` is a
/// literal `$`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    /// The listener and server-wide limits: timeouts, body sizes, logs, the admin plane.
    #[serde(default)]
    pub(super) server: RawServer,
    /// The servers requests are sent to (providers, self-hosted models); routes name them.
    #[serde(default, rename = "upstream")]
    pub(super) upstreams: Vec<RawUpstream>,
    /// Which requests go where, by model name: the first route whose `models` globs match a
    /// request's `model` serves it.
    #[serde(default, rename = "route")]
    pub(super) routes: Vec<RawRoute>,
    /// Where limits, budgets, idempotency records and cached answers live: this process's
    /// memory (the default) or Redis, shared by a fleet.
    pub(super) state: Option<RawState>,
    /// Virtual keys: the keys clients send, with their limits and budget. With any key
    /// defined, routes require one unless their `keys` says otherwise.
    #[serde(default, rename = "key")]
    pub(super) keys: Vec<RawKey>,
    /// Settings of the virtual keys as a whole.
    #[serde(rename = "keys")]
    pub(super) key_settings: Option<RawKeySettings>,
    /// What models' tokens cost, for budgets and the ledger; the first entry whose globs
    /// match a model prices it, before the shipped catalog.
    #[serde(default, rename = "price")]
    pub(super) prices: Vec<RawPrice>,
    /// OpenTelemetry trace export (off without an `endpoint`).
    pub(super) telemetry: Option<RawTelemetry>,
    /// The MCP gateway: upstream MCP servers, grants, limits (off without a server).
    pub(super) mcp: Option<super::mcp::RawMcp>,
    /// The ledger: one record per request (usage, cost, latency), and prompt capture.
    /// Without `[ledger]`, `sluice serve` writes an SQLite file next to the config.
    pub(super) ledger: Option<sluice_ledger::LedgerConfig>,
    /// Teams: limits and a budget shared by the keys that name the team.
    #[serde(default, rename = "team")]
    pub(super) teams: Vec<RawTeam>,
    /// Guardrails: checks on prompts and answers, defined once and named by routes and keys.
    #[serde(default, rename = "guardrail")]
    pub(super) guardrails: Vec<super::guardrail::RawGuardrail>,
}

/// `[state]`: where limits, budgets and idempotency records live. Without `redis`, in this
/// process's memory (limits per instance); with it, in Redis, shared by every instance with
/// the same `redis` and `prefix`. The Redis settings are refused without `redis`.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawState {
    /// Redis URL: `redis://[user:password@]host:port[/db]` (one server),
    /// `redis+sentinel://[user:password@]host:26379[,host:26379...]/<master name>[/db]`
    /// (the primary the sentinels name, followed across failovers) or
    /// `redis+cluster://[user:password@]host:6379[,host:6379...]` (a Redis Cluster). TLS
    /// (`rediss://`) is not built in. Default: none, state in memory.
    pub(super) redis: Option<String>,
    /// Prefix of every key written to Redis; instances that share limits use the same one.
    /// Redis only.
    #[schemars(extend("default" = "sluice"))]
    pub(super) prefix: Option<String>,
    /// Deadline of every call to Redis, admission and settle included. Redis only.
    #[schemars(extend("default" = "5ms"))]
    pub(super) call_timeout: Option<DurationValue>,
    /// Deadline of connecting to Redis (at startup and on reconnect). Redis only.
    #[schemars(extend("default" = "250ms"))]
    pub(super) connect_timeout: Option<DurationValue>,
    /// What to do when Redis is slow or down: `fail_open` answers from local memory (limits
    /// become per instance) and logs a warning; `fail_closed` refuses requests with 503.
    /// Redis only.
    #[schemars(extend("default" = "fail_open"))]
    pub(super) on_failure: Option<FailureName>,
    /// Consecutive failed calls (timeouts, connection errors) that mark Redis down; while
    /// down no request waits for it. Redis only.
    #[schemars(extend("default" = 3))]
    pub(super) trip_after: Option<u32>,
    /// While Redis is down, how often it is pinged to come back. Redis only.
    #[schemars(extend("default" = "500ms"))]
    pub(super) probe_interval: Option<DurationValue>,
    /// A concurrency lease's lifetime without renewal: a crashed instance's slots are free
    /// after this. Redis only.
    #[schemars(extend("default" = "30s"))]
    pub(super) lease_ttl: Option<DurationValue>,
    /// Bound of the queue of settles and releases sent to Redis in the background; when full,
    /// the work is dropped and counted (leases then expire by `lease_ttl`). Redis only.
    #[schemars(extend("default" = 4096))]
    pub(super) settle_queue: Option<usize>,
    /// At most one "Redis is down" warning per this interval. Redis only.
    #[schemars(extend("default" = "10s"))]
    pub(super) warn_interval: Option<DurationValue>,
    /// In memory (or the fail-open fallback): limiter entries (one per key and kind) at most;
    /// an admission that would add one more after a sweep is refused.
    #[schemars(extend("default" = 1_000_000))]
    pub(super) max_entries: Option<usize>,
    /// In memory: how often entries that no longer matter (a full bucket, a past budget
    /// period) are dropped.
    #[schemars(extend("default" = "10s"))]
    pub(super) sweep_interval: Option<DurationValue>,
    /// Replays of responses to requests that carry an `Idempotency-Key`.
    pub(super) idempotency: Option<RawIdempotency>,
    /// The response cache's store (routes turn the cache on with `route.cache`).
    pub(super) cache: Option<RawStateCache>,
}

/// `[state.cache]`: the response cache's bounds.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStateCache {
    /// In memory: answers kept at most; the least recently used go first.
    #[schemars(extend("default" = 100_000))]
    pub(super) max_entries: Option<usize>,
    /// In memory: bytes kept at most (answers plus about 200 bytes of bookkeeping each); the
    /// least recently used go first.
    #[schemars(extend("default" = "128MiB"))]
    pub(super) max_bytes: Option<SizeValue>,
    /// With Redis: stores waiting for Redis at most; beyond, a store is dropped and counted.
    #[schemars(extend("default" = 1024))]
    pub(super) put_queue: Option<usize>,
    /// With Redis: bytes of stores waiting for Redis at most.
    #[schemars(extend("default" = "32MiB"))]
    pub(super) max_queued_bytes: Option<SizeValue>,
}

/// `state.on_failure`: what the store does when Redis is slow or down.
#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = super::schema::interpolable)]
pub(super) enum FailureName {
    /// Answer from local memory (limits become per instance) and log a warning.
    FailOpen,
    /// Refuse requests with 503 until Redis is back.
    FailClosed,
}

/// `[state.idempotency]`: a request with an `Idempotency-Key` that repeats one already done
/// gets the stored response; one that repeats one in flight waits for it.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdempotency {
    /// How long a completed non-streaming response is replayed to a request with the same
    /// `Idempotency-Key`.
    #[schemars(extend("default" = "24h"))]
    pub(super) replay_ttl: Option<DurationValue>,
    /// Largest response (body plus headers) kept for replay; a larger one is not stored, so a
    /// retry runs again.
    #[schemars(extend("default" = "1MiB"))]
    pub(super) max_response_bytes: Option<SizeValue>,
    /// How long an in-flight record blocks duplicates if its owner never completes it (a
    /// crashed instance); about the longest request.
    #[schemars(extend("default" = "10m"))]
    pub(super) in_flight_ttl: Option<DurationValue>,
    /// In memory: records at most (in flight and done).
    #[schemars(extend("default" = 100_000))]
    pub(super) max_records: Option<usize>,
    /// In memory: bytes of stored responses at most; beyond, new responses are not stored.
    #[schemars(extend("default" = "64MiB"))]
    pub(super) max_total_bytes: Option<SizeValue>,
    /// Longest pause between two polls while waiting for an in-flight duplicate.
    #[schemars(extend("default" = "50ms"))]
    pub(super) poll_max_interval: Option<DurationValue>,
}

/// `[keys]`: settings of the virtual keys as a whole.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKeySettings {
    /// A file of `[[key]]` entries (and nothing else), read with the config; a relative path
    /// is taken from the working directory. Its keys add to the config's own.
    pub(super) file: Option<PathBuf>,
}

/// A key file: `[[key]]` entries and nothing else.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKeyFile {
    #[serde(default, rename = "key")]
    pub(super) keys: Vec<RawKey>,
}

/// `[[key]]`: one virtual key. The key itself never appears in the config, only its SHA-256.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKey {
    /// The key's name in logs, metrics and `/admin/keys/{id}`: 1 to 64 letters, digits, `-`,
    /// `_` or `.`; unique.
    pub(super) id: String,
    /// SHA-256 of the key as 64 hex digits, optionally after `sha256:`: `printf %s "$KEY" |
    /// sha256sum`. Unique.
    pub(super) hash: String,
    /// Who holds the key (a label in the ledger and metrics, at most 64 characters).
    pub(super) owner: Option<String>,
    /// The `[[team]]` whose shared limits and budget also apply (at most 64 characters).
    pub(super) team: Option<String>,
    /// A revoked key gets 401 on every route.
    #[schemars(extend("default" = false))]
    pub(super) revoked: Option<bool>,
    /// The routes (by `name`, else their first model glob) the key may use. Default: all.
    pub(super) routes: Option<Vec<String>>,
    /// Globs on the request's `model` the key may ask for. Default: any.
    pub(super) models: Option<Vec<String>>,
    /// Requests per period.
    pub(super) requests: Option<RawRate>,
    /// Tokens (input plus output) per period.
    pub(super) tokens: Option<RawRate>,
    /// Requests in flight at once, at most.
    #[schemars(range(min = 1, max = 1_125_899_906_842_624_u64))]
    pub(super) concurrency: Option<u64>,
    /// Spend per period, in the prices' currency.
    pub(super) budget: Option<RawBudgetLimit>,
    /// Limits of this key on some of its models, on top of its own.
    pub(super) model_limits: Option<Vec<RawModelLimits>>,
    /// Names of `[[guardrail]]` entries this key's requests are checked by, on top of its
    /// route's.
    pub(super) guardrails: Option<Vec<String>>,
}

/// `[[team]]`: limits and a budget the team's keys share.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTeam {
    /// The name keys give in `team`: 1 to 64 characters without control characters or
    /// braces; unique.
    pub(super) id: String,
    /// Requests per period, all the team's keys together.
    pub(super) requests: Option<RawRate>,
    /// Tokens per period, all the team's keys together.
    pub(super) tokens: Option<RawRate>,
    /// Requests in flight at once, all the team's keys together.
    #[schemars(range(min = 1, max = 1_125_899_906_842_624_u64))]
    pub(super) concurrency: Option<u64>,
    /// Spend per period, all the team's keys together.
    pub(super) budget: Option<RawBudgetLimit>,
}

/// A rate: `{ limit = 600, per = "1m" }`, at most `limit` per `per` (a token bucket).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRate {
    /// How many per period: 1 to 2^50.
    #[schemars(range(min = 1, max = 1_125_899_906_842_624_u64))]
    pub(super) limit: u64,
    /// The period, 1ms to 100 years.
    pub(super) per: DurationValue,
    /// `tokens` limits only (opt-in): a stream that outgrows what the limit let it have at
    /// admission is cut with an SSE error event.
    #[serde(default)]
    pub(super) cut_streams: bool,
}

/// A budget: `{ limit = 20.0, per = "1d" }`, currency units per period.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudgetLimit {
    /// Spend per period in the prices' currency, at least 0.000001.
    pub(super) limit: f64,
    /// The period, 1ms to 100 years.
    pub(super) per: DurationValue,
}

/// `[[key.model_limits]]`: limits of one key on some of its models.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModelLimits {
    /// Globs on the request's `model` these limits apply to.
    pub(super) models: Vec<String>,
    /// Requests per period on these models.
    pub(super) requests: Option<RawRate>,
    /// Tokens per period on these models.
    pub(super) tokens: Option<RawRate>,
    /// Requests in flight at once on these models.
    #[schemars(range(min = 1, max = 1_125_899_906_842_624_u64))]
    pub(super) concurrency: Option<u64>,
}

/// `route.limits`: shared by every request of the route, with or without a key.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRouteLimits {
    /// Requests per period on the route.
    pub(super) requests: Option<RawRate>,
    /// Tokens per period on the route.
    pub(super) tokens: Option<RawRate>,
    /// Requests in flight at once on the route.
    #[schemars(range(min = 1, max = 1_125_899_906_842_624_u64))]
    pub(super) concurrency: Option<u64>,
}

/// `[[price]]`: what a model's tokens cost, per million tokens, in one currency (the
/// budgets' currency).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrice {
    /// Globs on the model name (the model sent upstream when a target renames it, else the
    /// client's).
    pub(super) models: Vec<String>,
    /// Per million input tokens not read from a cache.
    pub(super) input: f64,
    /// Per million output tokens (reasoning included).
    pub(super) output: f64,
    /// Per million input tokens read from the provider's cache. Default: `input`.
    pub(super) cached_input: Option<f64>,
    /// Per million input tokens written to the provider's cache. Default: `input`.
    pub(super) cache_write: Option<f64>,
    /// Per million reasoning tokens. Default: `output`.
    pub(super) reasoning: Option<f64>,
}

/// `[telemetry]`: OpenTelemetry trace export (OTLP/HTTP, protobuf). Off without `endpoint`.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    /// The collector: its base URL (`http://127.0.0.1:4318`, `/v1/traces` is appended) or the
    /// full traces URL (any other path); `https://` works. Default: none, no traces.
    pub(super) endpoint: Option<String>,
    /// Share of new traces recorded, 0.0 to 1.0; a request carrying a `traceparent` follows
    /// its sampled flag.
    #[schemars(extend("default" = 1.0))]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub(super) sampling_ratio: Option<f64>,
    /// `service.name` of the spans.
    #[schemars(extend("default" = "sluice"))]
    pub(super) service_name: Option<String>,
    /// Extra headers on each export (e.g. a vendor's API key); values are never printed.
    pub(super) headers: Option<std::collections::BTreeMap<String, String>>,
    /// Spans per export request, 1 to 65,536.
    #[schemars(extend("default" = 512))]
    #[schemars(range(min = 1, max = 65_536))]
    pub(super) batch_size: Option<usize>,
    /// Longest a finished span waits before it is exported.
    #[schemars(extend("default" = "5s"))]
    pub(super) batch_interval: Option<DurationValue>,
    /// Most spans waiting for export (at least `batch_size`, at most 2^20); when full, new
    /// spans are dropped and counted.
    #[schemars(extend("default" = 2048))]
    #[schemars(range(min = 1, max = 1_048_576))]
    pub(super) queue_size: Option<usize>,
    /// Deadline of one export request.
    #[schemars(extend("default" = "10s"))]
    pub(super) export_timeout: Option<DurationValue>,
}

/// `[server]`: the listener and server-wide limits.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    /// Where to listen, `IP:PORT` (HTTP/1.1 and h2c on one port; h2 and http/1.1 by ALPN
    /// with `tls`); `sluice serve --listen` overrides it.
    #[schemars(extend("default" = "127.0.0.1:8080"))]
    pub(super) listen: Option<String>,
    /// Serve TLS with this certificate chain and key. Default: plain TCP.
    pub(super) tls: Option<RawTls>,
    /// An SSE comment (`: ping`) this often on a stream while the upstream is silent (also
    /// before the first token).
    #[schemars(extend("default" = "15s"))]
    pub(super) heartbeat: Option<DurationValue>,
    /// Largest request body accepted; larger gets 413.
    #[schemars(extend("default" = "16MiB"))]
    pub(super) max_request_body: Option<SizeValue>,
    /// Largest non-streaming response body relayed; larger gets 502
    /// `upstream_response_too_large`.
    #[schemars(extend("default" = "8MiB"))]
    pub(super) max_response_body: Option<SizeValue>,
    /// How long streams may run on after SIGTERM before they are ended with an error event.
    #[schemars(extend("default" = "30s"))]
    pub(super) shutdown_grace: Option<DurationValue>,
    /// Largest single SSE event relayed, at most 64MiB; a larger one ends the stream with an
    /// error event.
    #[schemars(extend("default" = "1MiB"))]
    pub(super) max_event_bytes: Option<SizeValue>,
    /// Send a `Server-Timing` header with the upstream phases (acquire, dns, connect, tls,
    /// written, ttfb, last) on every response; without it, only when the client sends
    /// `X-Sluice-Timing: 1`.
    #[schemars(extend("default" = false))]
    pub(super) server_timing: Option<bool>,
    /// Where the access log (one line per request) goes: `stdout`, `off`, or a file path
    /// (appended to, created if missing). A sink that cannot keep up loses lines (counted), never slows requests.
    #[schemars(extend("default" = "stdout"))]
    pub(super) access_log: Option<String>,
    /// Access log lines waiting for the writer, at most; past it lines are dropped (and
    /// counted).
    #[schemars(extend("default" = 16384))]
    #[schemars(range(min = 1))]
    pub(super) access_log_queue: Option<usize>,
    /// `text` (`key=value`) or `json`, for the access log and the operational log alike.
    #[schemars(extend("default" = "text"))]
    pub(super) log_format: Option<LogFormatName>,
    /// The operational log's filter (`info`, `warn`, `sluice=debug,h2=info`, ...);
    /// `RUST_LOG` overrides it.
    #[schemars(extend("default" = "info"))]
    pub(super) log_level: Option<String>,
    /// Where the admin plane listens (`/metrics`, `/admin/*`, the dashboard, `/readyz`),
    /// `IP:PORT`; its own port. Default `127.0.0.1:9901` (an ephemeral loopback port when
    /// `listen`'s port is 0).
    pub(super) admin_listen: Option<String>,
    /// Bearer token the admin plane requires (except on `/healthz`, `/readyz` and the
    /// dashboard's static page); required when `admin_listen` is not loopback. Set it from the
    /// environment, `"${SLUICE_ADMIN_TOKEN}"`; compared in constant time, never shown.
    pub(super) admin_token: Option<String>,
    /// Most client connections open at once (at least 1); past it the longest-idle connection
    /// is closed to make room, or the new one refused. Default: from the open-file limit,
    /// (soft limit − 256) / 2.
    #[schemars(range(min = 1))]
    pub(super) max_connections: Option<usize>,
    /// Most client connections from one peer address (at least 1); `trusted_proxies` are
    /// never capped. Default: no cap.
    #[schemars(range(min = 1))]
    pub(super) max_connections_per_ip: Option<usize>,
    /// Threads that each keep a client connection, and the upstream HTTP/1.1 connections it
    /// opens, from accept to close (as nginx's workers do): more calls per CPU at saturation,
    /// but a connection waits for its own thread when other processes hold the CPUs; for a
    /// host whose CPUs are the gateway's, set it to their number. 0: one runtime whose threads
    /// share all the work. At most 1024; needs a restart.
    #[schemars(extend("default" = 0))]
    #[schemars(range(max = 1024))]
    pub(super) workers: Option<usize>,
    /// Largest request head (HTTP/1.1 request line and headers, or an HTTP/2 header list),
    /// 8KiB to 1MiB; larger gets 431.
    #[schemars(extend("default" = "32KiB"))]
    pub(super) max_header_bytes: Option<SizeValue>,
    /// HTTP/2 streams one client connection may have open at once (at least 1).
    #[schemars(extend("default" = 200))]
    #[schemars(range(min = 1))]
    pub(super) max_concurrent_streams: Option<u32>,
    /// Most resumable streams (running, detached or kept for a reconnect) at once, at least
    /// 1; past it a new stream is served as an ordinary one (`x-sluice-resumable: off`).
    #[schemars(extend("default" = 10000))]
    #[schemars(range(min = 1))]
    pub(super) resumable_streams: Option<u32>,
    /// Most bytes all resumable streams' logs may hold, each stream reserving its route's
    /// `resumable.max_bytes` when it starts; past it a new stream is served as an ordinary
    /// one.
    #[schemars(extend("default" = "1GiB"))]
    pub(super) resumable_log_bytes: Option<SizeValue>,
    /// New requests one client connection may start per second (a token bucket with a burst
    /// of the same size, at least 1); past it requests get a fast 429. Default: no cap.
    #[schemars(range(min = 1))]
    pub(super) max_connection_request_rate: Option<u32>,
    /// Bytes of request and non-streaming response bodies held at once across all requests
    /// (at least `max_request_body` and `max_response_body`); past it new bodies get a fast
    /// 503.
    #[schemars(extend("default" = "512MiB"))]
    pub(super) memory_budget: Option<SizeValue>,
    /// Peers whose `X-Forwarded-For` / `Forwarded` / `X-Real-IP` are believed: addresses or
    /// CIDR ranges (`"10.0.0.0/8"`). Default: none, the client is the TCP peer.
    pub(super) trusted_proxies: Option<Vec<String>>,
    /// How long the gateway waits for a client.
    pub(super) client_timeouts: Option<RawClientTimeouts>,
    /// Limits on requests a client cancels (HTTP/2 RST_STREAM, or a closed connection).
    pub(super) client_resets: Option<RawClientResets>,
}

/// `[server.client_timeouts]`: how long the gateway waits for a client.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClientTimeouts {
    /// A new connection must deliver its first request head within this (TLS handshake
    /// included); on a kept-alive HTTP/1.1 connection, a request head must be complete this
    /// long after its first byte.
    #[schemars(extend("default" = "10s"))]
    pub(super) header: Option<DurationValue>,
    /// Longest gap between two pieces of a request body.
    #[schemars(extend("default" = "15s"))]
    pub(super) body_idle: Option<DurationValue>,
    /// The whole request body, from the request head.
    #[schemars(extend("default" = "60s"))]
    pub(super) body: Option<DurationValue>,
    /// A connection with no request in flight is closed after this long.
    #[schemars(extend("default" = "75s"))]
    pub(super) keep_alive: Option<DurationValue>,
    /// A non-streaming response the client does not take for this long is cut, and its
    /// connection closed.
    #[schemars(extend("default" = "30s"))]
    pub(super) send: Option<DurationValue>,
}

/// `[server.client_resets]`: requests cancelled by their client before their response ended,
/// counted in a sliding `window`.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClientResets {
    /// More cancels than this on one connection within `window`: the connection is closed
    /// with GOAWAY(ENHANCE_YOUR_CALM). At least 1.
    #[schemars(extend("default" = 100))]
    #[schemars(range(min = 1))]
    pub(super) per_connection: Option<u32>,
    /// More cancels than this from one client address within `window`: the address is
    /// blocked for `block` (new connections refused, new requests a fast 429). At least 1.
    #[schemars(extend("default" = 200))]
    #[schemars(range(min = 1))]
    pub(super) per_ip: Option<u32>,
    /// The counting window.
    #[schemars(extend("default" = "10s"))]
    pub(super) window: Option<DurationValue>,
    /// How long a blocked address stays blocked.
    #[schemars(extend("default" = "10s"))]
    pub(super) block: Option<DurationValue>,
}

/// `[server.tls]`: PEM files, loaded (and checked) at startup and on reload.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    /// The certificate chain (PEM), leaf first.
    pub(super) cert: PathBuf,
    /// The private key (PEM).
    pub(super) key: PathBuf,
}

/// `[[upstream]]`: a server requests are sent to.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    /// Unique name, used by routes and in metrics: letters, digits, `-`, `_` and `.`.
    pub(super) name: String,
    /// Base URL including the API prefix, e.g. `http://127.0.0.1:9090/v1`; the client's path
    /// after `/v1` is appended to it. Required, except for `provider = "bedrock"` (default
    /// `https://bedrock-runtime.{region}.amazonaws.com`) and `"vertex"` (default
    /// `https://{location}-aiplatform.googleapis.com`, `https://aiplatform.googleapis.com`
    /// for `global`); an AWS or Google host given for them must name the same region or
    /// location.
    pub(super) base_url: Option<String>,
    /// Wire protocol: `http1`, `h2` (HTTP/2 over TLS by ALPN, https only), `h2c` (HTTP/2
    /// with prior knowledge, http only) or `auto` (https: ALPN offers h2 and http/1.1; http:
    /// HTTP/1.1).
    #[schemars(extend("default" = "auto"))]
    pub(super) protocol: Option<UpstreamProtocol>,
    /// How the gateway authenticates to the upstream. Default: passthrough (the client's
    /// own `Authorization` / `x-api-key` is forwarded).
    pub(super) auth: Option<RawAuth>,
    /// Extra trust roots (PEM) besides the webpki roots, for an https upstream with a private
    /// CA; checked at load, expiry warned of.
    pub(super) ca_file: Option<PathBuf>,
    /// Copy a request header into the JSON body (some providers want the session id there).
    pub(super) session_header_to_body: Option<RawSessionHeader>,
    /// Upstream timeouts.
    pub(super) timeouts: Option<RawTimeouts>,
    /// The connection pool: its two lanes, HTTP/2 health, recycling.
    pub(super) pool: Option<RawPool>,
    /// How many retries requests to this upstream may add: past it, requests fail fast (503
    /// `retry_budget_exhausted`) instead of feeding a retry storm.
    pub(super) retry_budget: Option<RawBudget>,
    /// The wire format the upstream speaks; requests and responses are translated when the
    /// client speaks another API. Default: none, whatever API the client calls passes through
    /// untranslated.
    pub(super) provider: Option<ProviderName>,
    /// Azure OpenAI's `api-version` query, e.g. `2024-10-21`; required with
    /// `provider = "azure"`, refused otherwise.
    pub(super) api_version: Option<String>,
    /// The `anthropic-version` header sent with `provider = "anthropic"` when the client sent
    /// none (refused with another provider). Default `2023-06-01`.
    pub(super) anthropic_version: Option<String>,
    /// The upstream continues a trailing assistant message (assistant prefill), so a cut
    /// stream may be continued there (`route.continuation`). Default: true for `anthropic`,
    /// false otherwise.
    pub(super) prefill: Option<bool>,
    /// Active health check (opt-in): a cheap request every interval; an unhealthy upstream
    /// gets no traffic while another target of its route is usable.
    pub(super) health_check: Option<RawHealthCheck>,
    /// Bedrock: the AWS region requests are signed for. Default: `AWS_REGION`, then
    /// `AWS_DEFAULT_REGION`, then the profile's `region`.
    pub(super) region: Option<String>,
    /// Bedrock: the profile of the shared credentials and config files holding the keys when
    /// `AWS_ACCESS_KEY_ID` is not set. Default: `AWS_PROFILE`, then `default`. Role assumption,
    /// SSO and `credential_process` are not supported yet.
    pub(super) aws_profile: Option<String>,
    /// Vertex AI: the Google Cloud project models are called in. Default: the key file's
    /// `project_id`.
    pub(super) project: Option<String>,
    /// Vertex AI: the region models are called in (`us-east5`, `europe-west1`, `global`, ...).
    pub(super) location: Option<String>,
    /// Vertex AI: the service-account key file (JSON) whose signed JWT is exchanged for access
    /// tokens. Default: `GOOGLE_APPLICATION_CREDENTIALS`.
    pub(super) credentials_file: Option<PathBuf>,
    /// Bedrock: Anthropic clients' bodies go to InvokeModel as they are (OpenAI clients still go
    /// to Converse). Default: false.
    pub(super) invoke_model: Option<bool>,
}

/// `upstream.provider`: the API the upstream speaks.
#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = super::schema::interpolable)]
pub(super) enum ProviderName {
    /// OpenAI's API (and compatible servers).
    Openai,
    /// Azure OpenAI (`api_version` required).
    Azure,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google Gemini's API.
    Gemini,
    Bedrock,
    Vertex,
}

/// `upstream.retry_budget`: retries allowed as a ratio of recent requests, plus a floor.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudget {
    /// Retries allowed per request over the last 10 s, 0 to 10 (0.2: one retry per five
    /// requests).
    #[schemars(extend("default" = 0.2))]
    #[schemars(range(min = 0.0, max = 10.0))]
    pub(super) ratio: Option<f64>,
    /// Retries always allowed per second, whatever the traffic.
    #[schemars(extend("default" = 10))]
    pub(super) min_per_second: Option<u32>,
}

/// `upstream.pool`: the connection pool. Streams and long generations take the `stream`
/// lane, the rest the `short` lane, each on its own connections.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPool {
    /// The lane of streams and long generations.
    pub(super) stream: Option<RawLane>,
    /// The lane of short calls.
    pub(super) short: Option<RawLane>,
    /// HTTP/2: a PING per connection this often, for its RTT; a PING unanswered for max(2 ×
    /// this, 1 s) closes the connection.
    #[schemars(extend("default" = "5s"))]
    pub(super) ping_interval: Option<DurationValue>,
    /// HTTP/2: a connection whose RTT exceeds this many times the lane's best (and
    /// `degraded_rtt_floor`) takes no new streams and is replaced. At least 1.0.
    #[schemars(extend("default" = 3.0))]
    pub(super) degraded_rtt_factor: Option<f64>,
    /// HTTP/2: RTTs at or below this never degrade a connection.
    #[schemars(extend("default" = "50ms"))]
    pub(super) degraded_rtt_floor: Option<DurationValue>,
    /// HTTP/2: a connection with open streams that received no data for this long is
    /// degraded (no new streams, replaced).
    #[schemars(extend("default" = "30s"))]
    pub(super) stall_timeout: Option<DurationValue>,
    /// Drain a connection (no new requests; closed when its last one ends; HTTP/1.1: closed
    /// after that response, or at once when idle) once it is this old, for rotation and DNS
    /// rebalancing. Default: no limit.
    pub(super) max_connection_age: Option<DurationValue>,
    /// Drain a connection once it has carried this many requests (at least 1). Default: no
    /// limit.
    #[schemars(range(min = 1))]
    pub(super) max_requests_per_connection: Option<u64>,
    /// HTTP/1.1: a kept-alive connection idle this long is closed (below the common 60 s
    /// server keep-alives, so the close is ours).
    #[schemars(extend("default" = "50s"))]
    pub(super) idle_timeout: Option<DurationValue>,
    /// Non-streaming requests whose `max_tokens` (or `max_completion_tokens`,
    /// `max_output_tokens`) exceeds this take the `stream` lane: long generations are long
    /// calls.
    #[schemars(extend("default" = 4096))]
    pub(super) long_max_tokens: Option<u64>,
    /// How long the addresses of `base_url`'s host are used before it is resolved again; new
    /// connections go to them round robin.
    #[schemars(extend("default" = "30s"))]
    pub(super) dns_refresh: Option<DurationValue>,
}

/// `upstream.pool.stream` / `upstream.pool.short`: one lane's connections.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLane {
    /// HTTP/2 connections the lane keeps ready (opened lazily). Ignored for HTTP/1.1.
    /// Default 2 on `stream`, 1 on `short`.
    pub(super) min_connections: Option<usize>,
    /// Cap on the lane's open connections, draining ones included (at least 1). Default: 64
    /// for HTTP/2, 4096 for HTTP/1.1 (one request each; also under `auto` once it speaks
    /// HTTP/1.1), both at most (open-file limit − 256) / 4.
    #[schemars(range(min = 1))]
    pub(super) max_connections: Option<usize>,
    /// HTTP/2: our cap on concurrent streams per connection, never above the server's
    /// SETTINGS_MAX_CONCURRENT_STREAMS. Default 50 on `stream`, 100 on `short`.
    #[schemars(range(min = 1))]
    pub(super) max_streams_per_connection: Option<u32>,
    /// Requests allowed to wait for a slot when every connection is at its cap; one more
    /// fails at once (`pool_pending_full`).
    #[schemars(extend("default" = 1024))]
    pub(super) max_pending: Option<usize>,
    /// Longest a request waits for a slot (`pool_acquire_timeout` after it).
    #[schemars(extend("default" = "5s"))]
    pub(super) acquire_timeout: Option<DurationValue>,
}

/// `upstream.auth`: `{ type = "...", ... }`, with the fields each type takes and no others.
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum RawAuth {
    // A struct variant, not a unit one, so that stray fields are refused here too.
    /// Forward the client's own `Authorization` / `x-api-key` (moved to the provider's header
    /// when translating).
    Passthrough {},
    /// Replace them with `Authorization: Bearer <key>`.
    Bearer {
        /// The environment variable holding the key (its name, not the key).
        env: String,
    },
    /// Replace them with `<header>: <key>` (e.g. Anthropic's `x-api-key`).
    Header {
        /// The header's name.
        header: String,
        /// The environment variable holding the key (its name, not the key).
        env: String,
    },
    /// Replace them with the key in the header the upstream's `provider` takes
    /// (`Authorization: Bearer` for OpenAI, `api-key` for Azure, `x-api-key` for Anthropic,
    /// `x-goog-api-key` for Gemini).
    #[serde(rename = "api_key")]
    ApiKey {
        /// The environment variable holding the key (its name, not the key).
        env: String,
    },
    /// Entra ID client credentials from `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`,
    /// `AZURE_CLIENT_SECRET` (and `AZURE_AUTHORITY_HOST`).
    Entra {},
}

/// `upstream.session_header_to_body`: copy a request header into the JSON body.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSessionHeader {
    /// The request header to read.
    pub(super) header: String,
    /// Where to put its value in the body, as a JSON pointer (`/session_id`,
    /// `/metadata/user_id`); missing objects on the way are created.
    pub(super) json_pointer: String,
}

/// `upstream.timeouts`: each at most `total`.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimeouts {
    /// TCP connect plus TLS handshake.
    #[schemars(extend("default" = "5s"))]
    pub(super) connect: Option<DurationValue>,
    /// From sending a request until its response headers.
    #[schemars(extend("default" = "60s"))]
    pub(super) first_byte: Option<DurationValue>,
    /// Streams: from sending a request until its first content (a text or tool-call delta);
    /// a target that misses it is abandoned for the next one while nothing has reached the
    /// client. Default: `first_byte`.
    pub(super) first_token: Option<DurationValue>,
    /// Longest gap between events of a stream, and between two pieces of a non-streaming
    /// body.
    #[schemars(extend("default" = "300s"))]
    pub(super) idle: Option<DurationValue>,
    /// The whole exchange, stream included.
    #[schemars(extend("default" = "10m"))]
    pub(super) total: Option<DurationValue>,
}

/// `[[route]]`: which requests go where. Give either `upstream` or `targets`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    /// The route's name in logs, metrics and keys' `routes`. Default: its first model glob.
    pub(super) name: Option<String>,
    /// Globs on the request's `model` (`*` any run, `?` one character); at least one.
    pub(super) models: Vec<String>,
    /// The one upstream requests go to (a route with one target). Or give `targets`.
    pub(super) upstream: Option<String>,
    /// The targets requests are spread over (tier 0), by `balance`.
    pub(super) targets: Option<Vec<RawTarget>>,
    /// Targets tried in order, each a tier of its own, when tier 0 cannot serve a request
    /// (persistent retryable errors, never-sent failures, a silent target, a larger context
    /// window needed).
    pub(super) fallbacks: Option<Vec<RawTarget>>,
    /// What to do with the upstream when the client goes away mid-stream: `cancel` it at
    /// once, or `drain` it (read to its end, bounded by `timeouts.total`, to record the usage
    /// it reports).
    #[schemars(extend("default" = "cancel"))]
    pub(super) on_client_disconnect: Option<OnClientDisconnect>,
    /// Pins the lane (`stream` or `short`). Default: streams and long generations take
    /// `stream`, the rest `short`.
    pub(super) lane: Option<LaneName>,
    /// Retries and backoff.
    pub(super) retry: Option<RawRetry>,
    /// Requests may be sent again after a maybe-processed failure (a timeout or reset after
    /// the request was written) even without an `Idempotency-Key`.
    #[schemars(extend("default" = false))]
    pub(super) idempotent: Option<bool>,
    /// The whole request's deadline across every attempt, backoff and fallback. Default: the
    /// `timeouts.total` of the first target's upstream.
    pub(super) timeout: Option<DurationValue>,
    /// Parameters a target's provider cannot honour are dropped (and listed in the
    /// `x-sluice-dropped-params` response header) instead of refused with a 400.
    #[schemars(extend("default" = false))]
    pub(super) drop_unsupported_params: Option<bool>,
    /// A stream cut or stalled (no event for the upstream's `timeouts.idle`) after its first
    /// content is continued on a target that takes an assistant prefill (`upstream.prefill`),
    /// spliced into the same client stream; the broken attempt is cancelled upstream.
    #[schemars(extend("default" = false))]
    pub(super) continuation: Option<bool>,
    /// How tier 0's targets share requests.
    #[schemars(extend("default" = "p2c_ewma"))]
    pub(super) balance: Option<BalanceName>,
    /// Passive outlier ejection of tier 0's targets.
    pub(super) outlier: Option<RawOutlier>,
    /// Whether requests need a virtual key: `required`, `optional` or `off`. Default:
    /// `required` when the config defines keys (`[[key]]` or `keys.file`), else `off`.
    pub(super) keys: Option<super::KeyMode>,
    /// Limits shared by every request of the route, with a key or without.
    pub(super) limits: Option<RawRouteLimits>,
    /// The response cache: exact-match answers replayed without an upstream call. Default:
    /// off.
    pub(super) cache: Option<RawRouteCache>,
    /// Thinking tokens per effort level when a request is translated (OpenAI
    /// `reasoning_effort` to an Anthropic or Gemini budget, and back).
    pub(super) reasoning_budgets: Option<RawReasoningBudgets>,
    /// Names of `[[guardrail]]` entries this route's requests and answers are checked by.
    pub(super) guardrails: Option<Vec<String>>,
    /// Prompt-cache breakpoints for clients that mark none: after the tools and after the
    /// system prompt (Anthropic `cache_control`, Bedrock `cachePoint`), on targets that take
    /// them (Anthropic, Vertex AI's Claude, Bedrock). A request that marks any of its own is
    /// sent as it is.
    #[schemars(extend("default" = false))]
    pub(super) cache_breakpoints: Option<bool>,
    /// Resumable streams: every event gets an `id:`; a client that goes away leaves the
    /// generation running (for `keep`), and a reconnect with `Last-Event-ID` gets the events
    /// after that id, then the live rest. Default: off (a request may ask with
    /// `x-sluice-resumable: on`).
    pub(super) resumable: Option<RawResumable>,
}

/// `route.resumable = { keep = "10m", max_bytes = "4MiB" }`.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawResumable {
    /// How long a generation runs on after its client left, and how long its events are kept
    /// for a reconnect after it ended.
    #[schemars(extend("default" = "10m"))]
    pub(super) keep: Option<DurationValue>,
    /// Most bytes of events one stream's log holds. While no client reads, older events are
    /// dropped past it (asking for them gets 410); while one reads, the generation waits.
    #[schemars(extend("default" = "4MiB"))]
    pub(super) max_bytes: Option<SizeValue>,
}

/// `route.cache = { ttl = "1h", shared = false, max_bytes = "1MiB", replay = "instant" }`.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRouteCache {
    /// How long an answer is served; a request's `x-sluice-cache-ttl` may shorten it.
    #[schemars(extend("default" = "1h"))]
    pub(super) ttl: Option<DurationValue>,
    /// Share answers between every key of the route instead of keeping each key's apart.
    /// Only for answers that are the same for everyone by design.
    #[schemars(extend("default" = false))]
    pub(super) shared: Option<bool>,
    /// Largest answer stored (body or events, plus headers); larger ones are not stored.
    #[schemars(extend("default" = "1MiB"))]
    pub(super) max_bytes: Option<SizeValue>,
    /// How a hit on a streaming request is replayed: `instant` (every event at once) or
    /// `paced` (at the original pace).
    // `default` (what an absent Option is anyway) tells schemars the key is optional, which
    // it cannot see through `schema_with`.
    #[serde(default)]
    #[schemars(extend("default" = "instant"), schema_with = "super::schema::cache_replay")]
    pub(super) replay: Option<String>,
    /// Longest a request waits for an identical one in flight before going upstream itself.
    #[schemars(extend("default" = "30s"))]
    pub(super) wait: Option<DurationValue>,
}

/// `route.reasoning_budgets`: thinking tokens per effort level; each at least 1, and no level
/// below the one before it.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReasoningBudgets {
    /// Tokens for `minimal`.
    #[schemars(extend("default" = 1024))]
    #[schemars(range(min = 1))]
    pub(super) minimal: Option<u64>,
    /// Tokens for `low`.
    #[schemars(extend("default" = 2048))]
    #[schemars(range(min = 1))]
    pub(super) low: Option<u64>,
    /// Tokens for `medium`.
    #[schemars(extend("default" = 8192))]
    #[schemars(range(min = 1))]
    pub(super) medium: Option<u64>,
    /// Tokens for `high`.
    #[schemars(extend("default" = 16384))]
    #[schemars(range(min = 1))]
    pub(super) high: Option<u64>,
    /// Tokens for `xhigh`.
    #[schemars(extend("default" = 32768))]
    #[schemars(range(min = 1))]
    pub(super) xhigh: Option<u64>,
}

/// `route.balance`: how tier 0's targets share requests.
#[derive(Deserialize, JsonSchema, Clone, Copy, Debug)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = super::schema::interpolable)]
pub(super) enum BalanceName {
    /// Power of two choices on a latency average (EWMA) weighted by requests in flight.
    P2cEwma,
    /// The target with the fewest requests in flight.
    LeastInFlight,
    /// Round robin by `weight`.
    WeightedRoundRobin,
    /// The first usable target in the order given.
    Priority,
}

/// `route.outlier`: passive outlier ejection. A target that fails is taken out of rotation
/// for a while, then probed by one request before it comes back.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutlier {
    /// Failures in a row that eject a target (at least 1).
    #[schemars(extend("default" = 5))]
    #[schemars(range(min = 1))]
    pub(super) consecutive_failures: Option<u32>,
    /// An ejection lasts this times the target's recent ejections.
    #[schemars(extend("default" = "30s"))]
    pub(super) base_ejection_time: Option<DurationValue>,
    /// Cap on one ejection's length (at least `base_ejection_time`). Default 300 s, or
    /// `base_ejection_time` if longer.
    pub(super) max_ejection_time: Option<DurationValue>,
    /// At most this percentage of the targets are out by ejection at once (at least one of
    /// two or more), 0 to 100.
    #[schemars(extend("default" = 50))]
    #[schemars(range(max = 100))]
    pub(super) max_ejection_percent: Option<u8>,
    /// The success-rate rule (Envoy's: a target whose success rate is far below the others'
    /// is ejected); `false` turns it off.
    #[schemars(extend("default" = true))]
    pub(super) success_rate: Option<bool>,
}

/// `upstream.health_check`: a request every `interval`; a 2xx response is a pass.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealthCheck {
    /// Path (and query) below the upstream's `base_url`, starting with `/`.
    #[schemars(extend("default" = "/models"))]
    pub(super) path: Option<String>,
    /// Time between the starts of two checks.
    #[schemars(extend("default" = "10s"))]
    pub(super) interval: Option<DurationValue>,
    /// Bound on one check: connect, response headers and body.
    #[schemars(extend("default" = "2s"))]
    pub(super) timeout: Option<DurationValue>,
    /// Passes in a row that make an unhealthy upstream healthy (at least 1).
    #[schemars(extend("default" = 2))]
    #[schemars(range(min = 1))]
    pub(super) healthy_threshold: Option<u32>,
    /// Fails in a row that make an upstream unhealthy (at least 1).
    #[schemars(extend("default" = 3))]
    #[schemars(range(min = 1))]
    pub(super) unhealthy_threshold: Option<u32>,
}

/// A target of `route.targets` / `route.fallbacks`: an upstream, and what to call the model
/// there.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    /// The `[[upstream]]` by name.
    pub(super) upstream: String,
    /// The model name sent to this upstream instead of the client's (e.g. `gpt-4o` →
    /// `claude-sonnet-4-5`). Default: the client's.
    pub(super) model: Option<String>,
    /// Share of traffic among the targets of one tier (at least 1).
    #[schemars(extend("default" = 1))]
    #[schemars(range(min = 1))]
    pub(super) weight: Option<u32>,
    /// The model's context window in tokens: a request that exceeded one target's window is
    /// only sent to targets with a larger one. Default: unknown.
    pub(super) context_window: Option<u64>,
    /// The environment variable holding this target's own API key (sent as the provider's
    /// key header), replacing the upstream's `auth`: several keys of one provider become
    /// several targets.
    pub(super) key_env: Option<String>,
}

/// `route.retry`: attempts and backoff on retryable errors.
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetry {
    /// Attempts per target tier, the first included, 1 to 10, before the request falls back
    /// to the next tier.
    #[schemars(extend("default" = 2))]
    #[schemars(range(min = 1, max = 10))]
    pub(super) attempts: Option<u32>,
    /// Base of the exponential backoff (with full jitter).
    #[schemars(extend("default" = "100ms"))]
    pub(super) backoff: Option<DurationValue>,
    /// Cap of one backoff.
    #[schemars(extend("default" = "2s"))]
    pub(super) max_backoff: Option<DurationValue>,
    /// The longest `Retry-After` honoured by waiting; a longer one sends the request to the
    /// next tier at once.
    #[schemars(extend("default" = "10s"))]
    pub(super) max_retry_after: Option<DurationValue>,
}

/// `server.log_format`.
#[derive(Deserialize, JsonSchema, Clone, Copy, Debug)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = super::schema::interpolable)]
pub(super) enum LogFormatName {
    /// `key=value` pairs.
    Text,
    /// One JSON object per line.
    Json,
}

/// `route.lane`.
#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = super::schema::interpolable)]
pub(super) enum LaneName {
    /// The lane of streams and long generations.
    Stream,
    /// The lane of short calls.
    Short,
}

impl From<LaneName> for sluice_upstream::Lane {
    fn from(l: LaneName) -> Self {
        match l {
            LaneName::Stream => sluice_upstream::Lane::Stream,
            LaneName::Short => sluice_upstream::Lane::Short,
        }
    }
}
