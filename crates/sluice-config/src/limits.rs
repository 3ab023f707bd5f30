//! Virtual keys, limits, budgets, prices and the state store: the validated types, and their
//! validation from the raw file (the main config's `[[key]]` entries and the key file's alike).

use std::path::Path;
use std::time::Duration;

use toml::de::DeTable;

use super::diagnostics::{deserialize_error, line_of, locate};
use super::raw::{
    FailureName, RawBudgetLimit, RawIdempotency, RawKey, RawKeyFile, RawModelLimits, RawPrice,
    RawRate, RawRouteLimits, RawState, RawTeam,
};
use super::units::{DurationValue, SizeValue};
use super::ConfigError;

/// Longest key id, in bytes: ids name counters (in Redis too), log fields and admin paths.
const MAX_KEY_ID: usize = 64;

/// Longest `owner` / `team` label.
const MAX_LABEL: usize = 64;

/// A rate: at most `limit` per `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests (or tokens) per period, at least 1.
    pub limit: u64,
    /// The period.
    pub per: Duration,
    /// Tokens only (opt-in): a stream that outgrows what this limit let it have at
    /// admission (its reservation plus what was left) is cut with an SSE error event.
    pub cut_streams: bool,
}

/// A spend limit per fixed period (aligned to the Unix epoch, UTC: `1d` resets at 00:00 UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetLimit {
    /// Spend allowed per period, in micro-units of the price table's currency.
    pub limit_micros: u64,
    /// The period.
    pub per: Duration,
}

/// Limits of one scope (a key, a key on some models, a route). All optional.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Requests per period (GCRA: a burst of `limit`, then one every `per / limit`).
    pub requests: Option<RateLimit>,
    /// Tokens (input plus output) per period: reserved at admission, reconciled at the end.
    pub tokens: Option<RateLimit>,
    /// Requests (streams included) in flight at once.
    pub concurrency: Option<u64>,
}

impl Limits {
    /// No limit at all.
    pub fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none() && self.concurrency.is_none()
    }
}

/// `[[key.model_limits]]`: a key's limits on the models its globs match, shared by those
/// models.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelLimits {
    /// Globs on the request's `model`.
    pub models: Vec<String>,
    /// The limits.
    pub limits: Limits,
}

/// `[[key]]`: a virtual key. The secret itself is never in the config, only its SHA-256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyConfig {
    /// Unique id: names the key's counters, log fields and `GET /admin/keys/{id}`.
    pub id: String,
    /// SHA-256 of the secret the client sends.
    pub hash: [u8; 32],
    /// Who holds it; a label of the key's metrics (keep it low-cardinality).
    pub owner: Option<String>,
    /// The team it belongs to; a label of the key's metrics.
    pub team: Option<String>,
    /// A revoked key gets 401 on every route.
    pub revoked: bool,
    /// The routes it may use (indices into [`super::Config::routes`]); `None`: every route.
    pub routes: Option<Vec<usize>>,
    /// Globs on the models it may use; `None`: every model.
    pub models: Option<Vec<String>>,
    /// Its own limits.
    pub limits: Limits,
    /// Its spend limit.
    pub budget: Option<BudgetLimit>,
    /// Its limits on some models.
    pub model_limits: Vec<ModelLimits>,
    /// Guardrails the key's requests pass on every route, after the route's own (indexes
    /// into [`crate::Config::guardrails`]).
    pub guardrails: Vec<usize>,
}

/// `[[team]]`: limits and a budget shared by every key whose `team` names it, checked in the
/// same admission (one round trip to the store) as the key's own.
#[derive(Clone, Debug, PartialEq)]
pub struct TeamConfig {
    /// The name keys give in `team`.
    pub id: String,
    /// The team's limits (all its keys' requests together).
    pub limits: Limits,
    /// The team's spend limit.
    pub budget: Option<BudgetLimit>,
}

/// Whether a route asks requests for a virtual key; `required`, `optional` or `off` in the
/// file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = super::schema::interpolable)]
pub enum KeyMode {
    /// A valid key is required: missing, unknown and revoked keys get 401. The client's key is
    /// never forwarded upstream. The default when the config defines keys.
    Required,
    /// A known key is used (its limits apply, and it is not forwarded); a request without one,
    /// or with a key the gateway does not know (the upstream's own key, passed through), goes
    /// on without key limits. A revoked key gets 401.
    Optional,
    /// No key check: the route passes the client's credentials as its upstream's `auth` says.
    /// The default when the config defines no keys.
    Off,
}

impl KeyMode {
    /// The file's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyMode::Required => "required",
            KeyMode::Optional => "optional",
            KeyMode::Off => "off",
        }
    }
}

/// `[[price]]`: what the tokens of the models its globs match cost, per million tokens, in
/// one currency (the budgets' currency).
#[derive(Clone, Debug, PartialEq)]
pub struct PriceConfig {
    /// Globs on the model name (the model sent upstream when a target renames it, else the
    /// client's).
    pub models: Vec<String>,
    /// Per million input tokens not read from a cache.
    pub input: f64,
    /// Per million output tokens (reasoning included).
    pub output: f64,
    /// Per million input tokens read from the provider's cache. Default: `input`.
    pub cached_input: f64,
    /// The same prices, exact (the ledger's rates: micro-dollars per million tokens), with
    /// the cache-write price (`cache_write`, default `input`) and the reasoning price
    /// (`reasoning`, default `output`).
    pub rates: sluice_ledger::price::RatesOverride,
}

/// `[state]`: where limits, budgets and idempotency records live, and idempotency settings.
#[derive(Clone, Debug)]
pub struct StateSettings {
    /// The store's configuration (memory by default, or Redis).
    pub store: sluice_state::StateConfig,
    /// How long a completed non-streaming response is replayed to a request with the same
    /// `Idempotency-Key`. Default 24 h.
    pub replay_ttl: Duration,
    /// The response cache's bounds (`[state.cache]`): in memory, entries and bytes; with
    /// Redis, the queue of stores waiting for it.
    pub cache: sluice_state::CacheStoreConfig,
}

impl Default for StateSettings {
    fn default() -> Self {
        StateSettings {
            store: sluice_state::StateConfig::default(),
            replay_ttl: Duration::from_secs(24 * 3600),
            cache: sluice_state::CacheStoreConfig::default(),
        }
    }
}

fn rate(path: &str, raw: Option<RawRate>) -> Result<Option<RateLimit>, ConfigError> {
    let Some(RawRate {
        limit,
        per,
        cut_streams,
    }) = raw
    else {
        return Ok(None);
    };
    if cut_streams && !path.ends_with(".tokens") {
        return Err(ConfigError::new(
            format!("{path}.cut_streams"),
            "only a tokens limit can cut streams (remove it here, or move it to `tokens`)",
        ));
    }
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ConfigError::new(
            format!("{path}.limit"),
            "must be 1 to 2^50 (remove the limit to allow any number)",
        ));
    }
    let per = positive(&format!("{path}.per"), per)?;
    Ok(Some(RateLimit {
        limit,
        per,
        cut_streams,
    }))
}

/// The store's ceiling on limits (it computes in IEEE doubles, exact up to 2^53).
const MAX_LIMIT: u64 = 1 << 50;

fn positive(path: &str, d: DurationValue) -> Result<Duration, ConfigError> {
    if d.0 < Duration::from_millis(1) {
        return Err(ConfigError::new(path, "must be at least 1ms"));
    }
    if d.0 > Duration::from_secs(100 * 365 * 24 * 3600) {
        return Err(ConfigError::new(path, "must be at most 100 years"));
    }
    Ok(d.0)
}

fn concurrency(path: &str, v: Option<u64>) -> Result<Option<u64>, ConfigError> {
    match v {
        Some(0) => Err(ConfigError::new(
            path,
            "must be at least 1 (remove it to allow any number in flight)",
        )),
        Some(n) if n > MAX_LIMIT => Err(ConfigError::new(path, "must be at most 2^50")),
        v => Ok(v),
    }
}

fn globs(path: &str, models: &[String]) -> Result<(), ConfigError> {
    if models.is_empty() || models.iter().any(String::is_empty) {
        return Err(ConfigError::new(
            path,
            "needs at least one non-empty model glob, e.g. [\"gpt-4o*\"]",
        ));
    }
    Ok(())
}

/// `route[].limits`.
pub(super) fn route_limits(path: &str, raw: RawRouteLimits) -> Result<Limits, ConfigError> {
    let RawRouteLimits {
        requests,
        tokens,
        concurrency: c,
    } = raw;
    Ok(Limits {
        requests: rate(&format!("{path}.requests"), requests)?,
        tokens: rate(&format!("{path}.tokens"), tokens)?,
        concurrency: concurrency(&format!("{path}.concurrency"), c)?,
    })
}

/// `[[key]]` at `path` (`key[3]`). `routes` are the route names, in order.
/// `[[team]]`.
pub(super) fn team(path: &str, raw: RawTeam) -> Result<TeamConfig, ConfigError> {
    let RawTeam {
        id,
        requests,
        tokens,
        concurrency: c,
        budget,
    } = raw;
    if id.is_empty()
        || id.len() > MAX_LABEL
        || id.chars().any(|c| c.is_control() || "{}".contains(c))
    {
        return Err(ConfigError::new(
            format!("{path}.id"),
            "must be 1 to 64 characters, without control characters or braces (it names the \
             team's counters and is a metric label)",
        ));
    }
    let limits = Limits {
        requests: rate(&format!("{path}.requests"), requests)?,
        tokens: rate(&format!("{path}.tokens"), tokens)?,
        concurrency: concurrency(&format!("{path}.concurrency"), c)?,
    };
    let budget = budget_limit(&format!("{path}.budget"), budget)?;
    if limits.is_empty() && budget.is_none() {
        return Err(ConfigError::new(
            path,
            "sets nothing; give `requests`, `tokens`, `concurrency` or `budget`, or remove it",
        ));
    }
    Ok(TeamConfig { id, limits, budget })
}

fn budget_limit(
    path: &str,
    budget: Option<RawBudgetLimit>,
) -> Result<Option<BudgetLimit>, ConfigError> {
    let Some(RawBudgetLimit { limit, per }) = budget else {
        return Ok(None);
    };
    let micros = limit * 1e6;
    if !(limit.is_finite() && micros >= 1.0 && micros <= MAX_LIMIT as f64) {
        return Err(ConfigError::new(
            format!("{path}.limit"),
            "must be a positive amount of currency (at least 0.000001), e.g. 20.0",
        ));
    }
    Ok(Some(BudgetLimit {
        limit_micros: micros.round() as u64,
        per: positive(&format!("{path}.per"), per)?,
    }))
}

pub(super) fn key(
    path: &str,
    raw: RawKey,
    routes: &[String],
    defined_guardrails: &[crate::GuardrailConfig],
) -> Result<KeyConfig, ConfigError> {
    let RawKey {
        id,
        hash,
        owner,
        team,
        revoked,
        routes: allowed_routes,
        models,
        requests,
        tokens,
        concurrency: c,
        budget,
        model_limits,
        guardrails,
    } = raw;
    let guardrails = crate::guardrail::references(path, guardrails, defined_guardrails)?;
    if id.is_empty()
        || id.len() > MAX_KEY_ID
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(ConfigError::new(
            format!("{path}.id"),
            "must be 1 to 64 letters, digits, `-`, `_` or `.` (it names the key in logs, \
             metrics and /admin/keys/{id})",
        ));
    }
    let hash = parse_hash(&hash).ok_or_else(|| {
        ConfigError::new(
            format!("{path}.hash"),
            "must be the SHA-256 of the key as 64 hex digits, optionally after `sha256:`; \
             compute it with `printf %s \"$KEY\" | sha256sum` (the key itself never goes in \
             the config)",
        )
    })?;
    for (field, v) in [("owner", &owner), ("team", &team)] {
        if let Some(v) = v {
            if v.len() > MAX_LABEL || v.chars().any(char::is_control) {
                return Err(ConfigError::new(
                    format!("{path}.{field}"),
                    "must be at most 64 characters without control characters (it is a \
                     metric label)",
                ));
            }
        }
    }
    let allowed_routes = match allowed_routes {
        None => None,
        Some(names) => {
            let mut out = Vec::with_capacity(names.len());
            for (j, name) in names.iter().enumerate() {
                let idx = routes.iter().position(|r| r == name).ok_or_else(|| {
                    let known: Vec<&str> = routes.iter().map(String::as_str).collect();
                    let mut reason = format!(
                        "no route named `{name}` (routes are named by `name`, else their first \
                         model glob)"
                    );
                    if let Some(best) = super::diagnostics::closest(name, &known) {
                        reason.push_str(&format!("; did you mean `{best}`?"));
                    }
                    ConfigError::new(format!("{path}.routes[{j}]"), reason)
                })?;
                out.push(idx);
            }
            Some(out)
        }
    };
    if let Some(m) = &models {
        globs(&format!("{path}.models"), m)?;
    }
    let budget = budget_limit(&format!("{path}.budget"), budget)?;
    let mut out_models = Vec::new();
    for (j, m) in model_limits.unwrap_or_default().into_iter().enumerate() {
        let p = format!("{path}.model_limits[{j}]");
        let RawModelLimits {
            models,
            requests,
            tokens,
            concurrency: c,
        } = m;
        globs(&format!("{p}.models"), &models)?;
        let limits = Limits {
            requests: rate(&format!("{p}.requests"), requests)?,
            tokens: rate(&format!("{p}.tokens"), tokens)?,
            concurrency: concurrency(&format!("{p}.concurrency"), c)?,
        };
        if limits.is_empty() {
            return Err(ConfigError::new(
                p,
                "sets no limit; give `requests`, `tokens` or `concurrency`, or remove it",
            ));
        }
        out_models.push(ModelLimits { models, limits });
    }
    Ok(KeyConfig {
        guardrails,
        id,
        hash,
        owner,
        team,
        revoked: revoked.unwrap_or(false),
        routes: allowed_routes,
        models,
        limits: Limits {
            requests: rate(&format!("{path}.requests"), requests)?,
            tokens: rate(&format!("{path}.tokens"), tokens)?,
            concurrency: concurrency(&format!("{path}.concurrency"), c)?,
        },
        budget,
        model_limits: out_models,
    })
}

/// `sha256:<64 hex>` or `<64 hex>`, either case.
fn parse_hash(s: &str) -> Option<[u8; 32]> {
    let hex = s.trim();
    let hex = hex.strip_prefix("sha256:").unwrap_or(hex);
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let digit = |b: u8| (b as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

/// The `[[key]]` entries of a key file (`keys.file`). Its errors are reported at `keys.file`,
/// with the file's own line and field path in the reason.
pub(super) fn key_file(path: &Path) -> Result<Vec<RawKey>, ConfigError> {
    let at = |reason: String| ConfigError::new("keys.file", reason);
    let name = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| at(format!("cannot read the key file {name}: {e}")))?;
    let doc = DeTable::parse(&text).map_err(|e| {
        let e = super::diagnostics::syntax_error(&text, &e);
        at(format!("{name}: {e}"))
    })?;
    let original = doc.clone();
    let raw: RawKeyFile = serde_path_to_error::deserialize(toml::de::Deserializer::from(doc))
        .map_err(|e| {
            let mut e = deserialize_error(&text, e);
            if let Some(span) = locate(original.get_ref(), &e.path) {
                e.line = Some(line_of(&text, span.start));
            }
            at(format!("{name}: {e}"))
        })?;
    Ok(raw.keys)
}

/// `[[price]]` at `path`.
pub(super) fn price(path: &str, raw: RawPrice) -> Result<PriceConfig, ConfigError> {
    let RawPrice {
        models,
        input,
        output,
        cached_input,
        cache_write,
        reasoning,
    } = raw;
    globs(&format!("{path}.models"), &models)?;
    let mut rates = [None; 5];
    for (i, (field, v)) in [
        ("input", Some(input)),
        ("output", Some(output)),
        ("cached_input", cached_input),
        ("cache_write", cache_write),
        ("reasoning", reasoning),
    ]
    .into_iter()
    .enumerate()
    {
        if let Some(v) = v {
            if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
                return Err(ConfigError::new(
                    format!("{path}.{field}"),
                    "must be a price per million tokens from 0 up, e.g. 2.5",
                ));
            }
            // Exact from here on: f64's shortest decimal form is the number as written.
            let rate = sluice_ledger::Rate::parse_usd_per_million(&v.to_string())
                .map_err(|e| ConfigError::new(format!("{path}.{field}"), e))?;
            rates[i] = Some(rate);
        }
    }
    let [input_rate, output_rate, cached, write, reasoning_rate] = rates;
    let (input_rate, output_rate) = (
        input_rate.unwrap_or(sluice_ledger::Rate(0)),
        output_rate.unwrap_or(sluice_ledger::Rate(0)),
    );
    Ok(PriceConfig {
        models,
        input,
        output,
        cached_input: cached_input.unwrap_or(input),
        rates: sluice_ledger::price::RatesOverride {
            input: Some(input_rate),
            output: Some(output_rate),
            cache_read: Some(cached.unwrap_or(input_rate)),
            cache_write_5m: Some(write.unwrap_or(input_rate)),
            cache_write_1h: Some(write.unwrap_or(input_rate)),
            reasoning: Some(reasoning_rate.unwrap_or(output_rate)),
        },
    })
}

/// `[state]`.
pub(super) fn state(raw: RawState) -> Result<StateSettings, ConfigError> {
    let RawState {
        redis,
        prefix,
        call_timeout,
        connect_timeout,
        on_failure,
        trip_after,
        probe_interval,
        lease_ttl,
        settle_queue,
        warn_interval,
        max_entries,
        sweep_interval,
        idempotency,
        cache,
    } = raw;
    let d = |field: &str, v: Option<DurationValue>, default: Duration| match v {
        None => Ok(default),
        Some(v) => positive(&format!("state.{field}"), v),
    };
    let memory_d = sluice_state::MemoryConfig::default();
    let memory = sluice_state::MemoryConfig {
        max_entries: max_entries.unwrap_or(memory_d.max_entries),
        sweep_interval: d("sweep_interval", sweep_interval, memory_d.sweep_interval)?,
    };
    let redis_only = [
        ("prefix", prefix.is_some()),
        ("call_timeout", call_timeout.is_some()),
        ("connect_timeout", connect_timeout.is_some()),
        ("on_failure", on_failure.is_some()),
        ("trip_after", trip_after.is_some()),
        ("probe_interval", probe_interval.is_some()),
        ("lease_ttl", lease_ttl.is_some()),
        ("settle_queue", settle_queue.is_some()),
        ("warn_interval", warn_interval.is_some()),
    ];
    let backend = match redis {
        None => {
            if let Some((field, _)) = redis_only.iter().find(|(_, set)| *set) {
                return Err(ConfigError::new(
                    format!("state.{field}"),
                    "only applies with `redis = \"redis://...\"`; set it or remove this",
                ));
            }
            sluice_state::BackendConfig::Memory
        }
        Some(url) => {
            let r = sluice_state::RedisConfig::default();
            sluice_state::BackendConfig::Redis(sluice_state::RedisConfig {
                url,
                prefix: prefix.unwrap_or(r.prefix),
                call_timeout: d("call_timeout", call_timeout, r.call_timeout)?,
                connect_timeout: d("connect_timeout", connect_timeout, r.connect_timeout)?,
                on_failure: match on_failure {
                    None => r.on_failure,
                    Some(FailureName::FailOpen) => sluice_state::FailureMode::FailOpen,
                    Some(FailureName::FailClosed) => sluice_state::FailureMode::FailClosed,
                },
                trip_after: trip_after.unwrap_or(r.trip_after),
                probe_interval: d("probe_interval", probe_interval, r.probe_interval)?,
                lease_ttl: d("lease_ttl", lease_ttl, r.lease_ttl)?,
                settle_queue: settle_queue.unwrap_or(r.settle_queue),
                warn_interval: d("warn_interval", warn_interval, r.warn_interval)?,
            })
        }
    };
    let RawIdempotency {
        replay_ttl,
        max_response_bytes,
        in_flight_ttl,
        max_records,
        max_total_bytes,
        poll_max_interval,
    } = idempotency.unwrap_or_default();
    let i = sluice_state::IdempotencyConfig::default();
    let size = |field: &str, v: Option<SizeValue>, default: usize| match v {
        None => Ok(default),
        Some(SizeValue(0)) => Err(ConfigError::new(
            format!("state.idempotency.{field}"),
            "must be greater than zero",
        )),
        Some(SizeValue(n)) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
    };
    let idem = |field: &str, v, default| d(&format!("idempotency.{field}"), v, default);
    let idempotency = sluice_state::IdempotencyConfig {
        max_response_bytes: size(
            "max_response_bytes",
            max_response_bytes,
            i.max_response_bytes,
        )?,
        in_flight_ttl: idem("in_flight_ttl", in_flight_ttl, i.in_flight_ttl)?,
        max_records: max_records.unwrap_or(i.max_records),
        max_total_bytes: size("max_total_bytes", max_total_bytes, i.max_total_bytes)?,
        poll_max_interval: idem("poll_max_interval", poll_max_interval, i.poll_max_interval)?,
    };
    let store = sluice_state::StateConfig {
        backend,
        memory,
        idempotency,
    };
    // The store's own checks, at the field they concern (its fields are named relative to
    // `[state]`, with `redis.` for the Redis ones, which sit directly in `[state]` here).
    store.validate().map_err(|e| {
        let field = match e.field {
            "redis.url" => "redis",
            f => f
                .strip_prefix("redis.")
                .or_else(|| f.strip_prefix("memory."))
                .unwrap_or(f),
        };
        ConfigError::new(format!("state.{field}"), e.reason)
    })?;
    Ok(StateSettings {
        store,
        replay_ttl: idem(
            "replay_ttl",
            replay_ttl,
            StateSettings::default().replay_ttl,
        )?,
        cache: cache_store(cache.unwrap_or_default())?,
    })
}

/// `[state.cache]`, checked by the state crate (fields named `state.cache.…`).
fn cache_store(
    raw: super::raw::RawStateCache,
) -> Result<sluice_state::CacheStoreConfig, ConfigError> {
    let super::raw::RawStateCache {
        max_entries,
        max_bytes,
        put_queue,
        max_queued_bytes,
    } = raw;
    let d = sluice_state::CacheStoreConfig::default();
    let bytes = |v: Option<SizeValue>, default: usize| {
        v.map_or(default, |SizeValue(n)| {
            usize::try_from(n).unwrap_or(usize::MAX)
        })
    };
    let config = sluice_state::CacheStoreConfig {
        max_entries: max_entries.unwrap_or(d.max_entries),
        max_bytes: bytes(max_bytes, d.max_bytes),
        put_queue: put_queue.unwrap_or(d.put_queue),
        max_queued_bytes: bytes(max_queued_bytes, d.max_queued_bytes),
    };
    config
        .validate()
        .map_err(|e| ConfigError::new(format!("state.{}", e.field), e.reason))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::parse_hash;

    #[test]
    fn hashes_with_or_without_prefix() {
        let hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let h = parse_hash(hex).unwrap();
        assert_eq!(h[0], 0x9f);
        assert_eq!(h[31], 0x08);
        assert_eq!(
            parse_hash(&format!("sha256:{}", hex.to_uppercase())),
            Some(h)
        );
        assert_eq!(parse_hash(&hex[1..]), None);
        assert_eq!(parse_hash(&format!("{}zz", &hex[2..])), None);
    }
}
