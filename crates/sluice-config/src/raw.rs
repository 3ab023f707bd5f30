//! The file as written: every table with `deny_unknown_fields`, so a typo is an error (with a
//! suggestion), never a silently ignored setting. Values here are typed as far as serde can
//! check them alone (units, enums); what needs more than one field, the file system or the
//! environment is checked in `validate`.

use std::path::PathBuf;

use serde::Deserialize;

use super::units::{DurationValue, SizeValue};
use super::{OnClientDisconnect, UpstreamProtocol};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) server: RawServer,
    #[serde(default, rename = "upstream")]
    pub(super) upstreams: Vec<RawUpstream>,
    #[serde(default, rename = "route")]
    pub(super) routes: Vec<RawRoute>,
    pub(super) state: Option<RawState>,
    #[serde(default, rename = "key")]
    pub(super) keys: Vec<RawKey>,
    #[serde(rename = "keys")]
    pub(super) key_settings: Option<RawKeySettings>,
    #[serde(default, rename = "price")]
    pub(super) prices: Vec<RawPrice>,
    pub(super) telemetry: Option<RawTelemetry>,
    pub(super) mcp: Option<super::mcp::RawMcp>,
    pub(super) ledger: Option<sluice_ledger::LedgerConfig>,
    #[serde(default, rename = "team")]
    pub(super) teams: Vec<RawTeam>,
}

/// `[state]`: where limits, budgets and idempotency records live.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawState {
    pub(super) redis: Option<String>,
    pub(super) prefix: Option<String>,
    pub(super) call_timeout: Option<DurationValue>,
    pub(super) connect_timeout: Option<DurationValue>,
    pub(super) on_failure: Option<FailureName>,
    pub(super) trip_after: Option<u32>,
    pub(super) probe_interval: Option<DurationValue>,
    pub(super) lease_ttl: Option<DurationValue>,
    pub(super) settle_queue: Option<usize>,
    pub(super) warn_interval: Option<DurationValue>,
    pub(super) max_entries: Option<usize>,
    pub(super) sweep_interval: Option<DurationValue>,
    pub(super) idempotency: Option<RawIdempotency>,
    pub(super) cache: Option<RawStateCache>,
}

/// `[state.cache]`: the response cache's bounds.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStateCache {
    pub(super) max_entries: Option<usize>,
    pub(super) max_bytes: Option<SizeValue>,
    pub(super) put_queue: Option<usize>,
    pub(super) max_queued_bytes: Option<SizeValue>,
}

/// `state.on_failure`, as spelled in the file.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(super) enum FailureName {
    FailOpen,
    FailClosed,
}

/// `[state.idempotency]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdempotency {
    pub(super) replay_ttl: Option<DurationValue>,
    pub(super) max_response_bytes: Option<SizeValue>,
    pub(super) in_flight_ttl: Option<DurationValue>,
    pub(super) max_records: Option<usize>,
    pub(super) max_total_bytes: Option<SizeValue>,
    pub(super) poll_max_interval: Option<DurationValue>,
}

/// `[keys]`: settings of the virtual keys as a whole.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKeySettings {
    pub(super) file: Option<PathBuf>,
}

/// A key file: `[[key]]` entries and nothing else.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKeyFile {
    #[serde(default, rename = "key")]
    pub(super) keys: Vec<RawKey>,
}

/// `[[key]]`: one virtual key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKey {
    pub(super) id: String,
    pub(super) hash: String,
    pub(super) owner: Option<String>,
    pub(super) team: Option<String>,
    pub(super) revoked: Option<bool>,
    pub(super) routes: Option<Vec<String>>,
    pub(super) models: Option<Vec<String>>,
    pub(super) requests: Option<RawRate>,
    pub(super) tokens: Option<RawRate>,
    pub(super) concurrency: Option<u64>,
    pub(super) budget: Option<RawBudgetLimit>,
    pub(super) model_limits: Option<Vec<RawModelLimits>>,
}

/// `[[team]]`: limits and a budget the team's keys share.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTeam {
    pub(super) id: String,
    pub(super) requests: Option<RawRate>,
    pub(super) tokens: Option<RawRate>,
    pub(super) concurrency: Option<u64>,
    pub(super) budget: Option<RawBudgetLimit>,
}

/// `{ limit = 600, per = "1m" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRate {
    pub(super) limit: u64,
    pub(super) per: DurationValue,
    #[serde(default)]
    pub(super) cut_streams: bool,
}

/// `budget = { limit = 20.0, per = "1d" }`: currency units per period.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudgetLimit {
    pub(super) limit: f64,
    pub(super) per: DurationValue,
}

/// `[[key.model_limits]]`: limits of one key on some of its models.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModelLimits {
    pub(super) models: Vec<String>,
    pub(super) requests: Option<RawRate>,
    pub(super) tokens: Option<RawRate>,
    pub(super) concurrency: Option<u64>,
}

/// `route[].limits`: shared by every request of the route, with or without a key.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRouteLimits {
    pub(super) requests: Option<RawRate>,
    pub(super) tokens: Option<RawRate>,
    pub(super) concurrency: Option<u64>,
}

/// `[[price]]`: what a model's tokens cost, per million.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrice {
    pub(super) models: Vec<String>,
    pub(super) input: f64,
    pub(super) output: f64,
    pub(super) cached_input: Option<f64>,
    pub(super) cache_write: Option<f64>,
    pub(super) reasoning: Option<f64>,
}

/// `[telemetry]`: OpenTelemetry trace export.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub(super) endpoint: Option<String>,
    pub(super) sampling_ratio: Option<f64>,
    pub(super) service_name: Option<String>,
    pub(super) headers: Option<std::collections::BTreeMap<String, String>>,
    pub(super) batch_size: Option<usize>,
    pub(super) batch_interval: Option<DurationValue>,
    pub(super) queue_size: Option<usize>,
    pub(super) export_timeout: Option<DurationValue>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) listen: Option<String>,
    pub(super) tls: Option<RawTls>,
    pub(super) heartbeat: Option<DurationValue>,
    pub(super) max_request_body: Option<SizeValue>,
    pub(super) max_response_body: Option<SizeValue>,
    pub(super) shutdown_grace: Option<DurationValue>,
    pub(super) max_event_bytes: Option<SizeValue>,
    pub(super) server_timing: Option<bool>,
    pub(super) access_log: Option<String>,
    pub(super) access_log_queue: Option<usize>,
    pub(super) log_format: Option<LogFormatName>,
    pub(super) log_level: Option<String>,
    pub(super) admin_listen: Option<String>,
    pub(super) admin_token: Option<String>,
    pub(super) max_connections: Option<usize>,
    pub(super) max_connections_per_ip: Option<usize>,
    pub(super) workers: Option<usize>,
    pub(super) max_header_bytes: Option<SizeValue>,
    pub(super) max_concurrent_streams: Option<u32>,
    pub(super) max_connection_request_rate: Option<u32>,
    pub(super) memory_budget: Option<SizeValue>,
    pub(super) trusted_proxies: Option<Vec<String>>,
    pub(super) client_timeouts: Option<RawClientTimeouts>,
    pub(super) client_resets: Option<RawClientResets>,
}

/// `server.client_timeouts`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClientTimeouts {
    pub(super) header: Option<DurationValue>,
    pub(super) body_idle: Option<DurationValue>,
    pub(super) body: Option<DurationValue>,
    pub(super) keep_alive: Option<DurationValue>,
    pub(super) send: Option<DurationValue>,
}

/// `server.client_resets`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClientResets {
    pub(super) per_connection: Option<u32>,
    pub(super) per_ip: Option<u32>,
    pub(super) window: Option<DurationValue>,
    pub(super) block: Option<DurationValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    pub(super) name: String,
    pub(super) base_url: String,
    pub(super) protocol: Option<UpstreamProtocol>,
    pub(super) auth: Option<RawAuth>,
    pub(super) ca_file: Option<PathBuf>,
    pub(super) session_header_to_body: Option<RawSessionHeader>,
    pub(super) timeouts: Option<RawTimeouts>,
    pub(super) pool: Option<RawPool>,
    pub(super) retry_budget: Option<RawBudget>,
    pub(super) provider: Option<ProviderName>,
    pub(super) api_version: Option<String>,
    pub(super) anthropic_version: Option<String>,
    pub(super) prefill: Option<bool>,
    pub(super) health_check: Option<RawHealthCheck>,
    pub(super) region: Option<String>,
    pub(super) aws_profile: Option<String>,
    pub(super) project: Option<String>,
    pub(super) location: Option<String>,
    pub(super) credentials_file: Option<PathBuf>,
    pub(super) invoke_model: Option<bool>,
}

/// `upstream[].provider`, as spelled in the file.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum ProviderName {
    Openai,
    Azure,
    Anthropic,
    Gemini,
    Bedrock,
    Vertex,
}

/// `upstream[].retry_budget`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudget {
    pub(super) ratio: Option<f64>,
    pub(super) min_per_second: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPool {
    pub(super) stream: Option<RawLane>,
    pub(super) short: Option<RawLane>,
    pub(super) ping_interval: Option<DurationValue>,
    pub(super) degraded_rtt_factor: Option<f64>,
    pub(super) degraded_rtt_floor: Option<DurationValue>,
    pub(super) stall_timeout: Option<DurationValue>,
    pub(super) max_connection_age: Option<DurationValue>,
    pub(super) max_requests_per_connection: Option<u64>,
    pub(super) idle_timeout: Option<DurationValue>,
    pub(super) long_max_tokens: Option<u64>,
    pub(super) dns_refresh: Option<DurationValue>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLane {
    pub(super) min_connections: Option<usize>,
    pub(super) max_connections: Option<usize>,
    pub(super) max_streams_per_connection: Option<u32>,
    pub(super) max_pending: Option<usize>,
    pub(super) acquire_timeout: Option<DurationValue>,
}

/// `auth = { type = "...", ... }`: the fields each type takes, and no others.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum RawAuth {
    // A struct variant, not a unit one, so that stray fields are refused here too.
    Passthrough {},
    Bearer {
        env: String,
    },
    Header {
        header: String,
        env: String,
    },
    #[serde(rename = "api_key")]
    ApiKey {
        env: String,
    },
    /// Entra ID client credentials from `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`,
    /// `AZURE_CLIENT_SECRET` (and `AZURE_AUTHORITY_HOST`).
    Entra {},
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSessionHeader {
    pub(super) header: String,
    pub(super) json_pointer: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimeouts {
    pub(super) connect: Option<DurationValue>,
    pub(super) first_byte: Option<DurationValue>,
    pub(super) first_token: Option<DurationValue>,
    pub(super) idle: Option<DurationValue>,
    pub(super) total: Option<DurationValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub(super) name: Option<String>,
    pub(super) models: Vec<String>,
    pub(super) upstream: Option<String>,
    pub(super) targets: Option<Vec<RawTarget>>,
    pub(super) fallbacks: Option<Vec<RawTarget>>,
    pub(super) on_client_disconnect: Option<OnClientDisconnect>,
    pub(super) lane: Option<LaneName>,
    pub(super) retry: Option<RawRetry>,
    pub(super) idempotent: Option<bool>,
    pub(super) timeout: Option<DurationValue>,
    pub(super) drop_unsupported_params: Option<bool>,
    pub(super) continuation: Option<bool>,
    pub(super) balance: Option<BalanceName>,
    pub(super) outlier: Option<RawOutlier>,
    pub(super) keys: Option<super::KeyMode>,
    pub(super) limits: Option<RawRouteLimits>,
    pub(super) cache: Option<RawRouteCache>,
    pub(super) reasoning_budgets: Option<RawReasoningBudgets>,
}

/// `route[].cache = { ttl = "1h", shared = false, max_bytes = "1MiB", replay = "instant" }`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRouteCache {
    pub(super) ttl: Option<DurationValue>,
    pub(super) shared: Option<bool>,
    pub(super) max_bytes: Option<SizeValue>,
    pub(super) replay: Option<String>,
    pub(super) wait: Option<DurationValue>,
}

/// `route[].reasoning_budgets`: thinking tokens per effort level (each defaults to the
/// shipped table's).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReasoningBudgets {
    pub(super) minimal: Option<u64>,
    pub(super) low: Option<u64>,
    pub(super) medium: Option<u64>,
    pub(super) high: Option<u64>,
    pub(super) xhigh: Option<u64>,
}

/// `route[].balance`, as spelled in the file.
#[derive(Deserialize, Clone, Copy, Debug)]
#[serde(rename_all = "snake_case")]
pub(super) enum BalanceName {
    P2cEwma,
    LeastInFlight,
    WeightedRoundRobin,
    Priority,
}

/// `route[].outlier`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutlier {
    pub(super) consecutive_failures: Option<u32>,
    pub(super) base_ejection_time: Option<DurationValue>,
    pub(super) max_ejection_time: Option<DurationValue>,
    pub(super) max_ejection_percent: Option<u8>,
    pub(super) success_rate: Option<bool>,
}

/// `upstream[].health_check`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealthCheck {
    pub(super) path: Option<String>,
    pub(super) interval: Option<DurationValue>,
    pub(super) timeout: Option<DurationValue>,
    pub(super) healthy_threshold: Option<u32>,
    pub(super) unhealthy_threshold: Option<u32>,
}

/// One of `route[].targets` / `route[].fallbacks`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    pub(super) upstream: String,
    pub(super) model: Option<String>,
    pub(super) weight: Option<u32>,
    pub(super) context_window: Option<u64>,
    pub(super) key_env: Option<String>,
}

/// `route[].retry`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetry {
    pub(super) attempts: Option<u32>,
    pub(super) backoff: Option<DurationValue>,
    pub(super) max_backoff: Option<DurationValue>,
    pub(super) max_retry_after: Option<DurationValue>,
}

/// `server.log_format`, as spelled in the file.
#[derive(Deserialize, Clone, Copy, Debug)]
#[serde(rename_all = "lowercase")]
pub(super) enum LogFormatName {
    Text,
    Json,
}

/// `route[].lane`, as spelled in the file.
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum LaneName {
    Stream,
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
