//! From text to a validated [`Config`]: parse, expand `${VAR}`, deserialize the raw structs,
//! then validate them into the public types.
//!
//! Every raw struct is taken apart by exhaustive destructuring, so adding a field to the file
//! format without validating it is a compile error, not a silently ignored setting.

use std::path::Path;
use std::time::{Duration, SystemTime};

use toml::de::DeTable;

use super::diagnostics::{deserialize_error, line_of, locate, syntax_error};
use super::interpolate::{self, Unresolved};
use super::limits;
use super::raw::{
    BalanceName, LogFormatName, ProviderName, RawAuth, RawBudget, RawClientResets,
    RawClientTimeouts, RawConfig, RawHealthCheck, RawLane, RawOutlier, RawPool, RawRetry, RawRoute,
    RawServer, RawSessionHeader, RawTarget, RawTimeouts, RawTls, RawUpstream,
};
use super::units::{DurationValue, SizeValue};
use super::{
    Checked, ClientResets, ClientTimeouts, Config, ConfigError, ConfigWarning, EnvMode, IpNet,
    KeyConfig, KeyMode, OnClientDisconnect, RouteConfig, ServerConfig, SessionHeaderToBody,
    TargetConfig, Timeouts, TlsFiles, UpstreamAuth, UpstreamConfig, UpstreamProtocol,
};

/// The ceiling of `max_event_bytes`: the SSE decoder's own limit.
const MAX_EVENT_BYTES_CEILING: u64 = sluice_sse::MAX_EVENT_BYTES_CEILING as u64;

/// Parses and validates `text`; every error and warning carries its line when the path is in
/// the file.
pub(super) fn check(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    mode: EnvMode,
    now: SystemTime,
) -> Result<Checked, ConfigError> {
    let mut doc = DeTable::parse(text).map_err(|e| syntax_error(text, &e))?;
    // The deserializer consumes the document; this copy keeps its spans (those of the file as
    // written: expansion changes values, not spans) to put a line on every later error.
    let original = doc.clone();
    let line = |path: &str| locate(original.get_ref(), path).map(|s| line_of(text, s.start));
    let with_line = |mut e: ConfigError| {
        if let Some(l) = line(&e.path) {
            e.line = Some(l);
        }
        e
    };
    let unresolved = interpolate::expand_document(doc.get_mut(), env, mode).map_err(with_line)?;
    let raw: RawConfig = serde_path_to_error::deserialize(toml::de::Deserializer::from(doc))
        .map_err(|e| with_line(deserialize_error(text, e)))?;
    let mut ctx = Ctx {
        env,
        mode,
        now,
        warnings: unresolved
            .iter()
            .map(|u| {
                ConfigWarning::new(
                    &u.path,
                    format!(
                        "the environment variable `{}` is not set; `{}` stands in for it \
                         (--skip-env)",
                        u.var,
                        interpolate::placeholder(&u.var)
                    ),
                )
            })
            .collect(),
        unresolved,
    };
    let config = validate(raw, &mut ctx).map_err(|e| with_line(ctx.explain(e)))?;
    let mut warnings = ctx.warnings;
    for w in &mut warnings {
        w.line = line(&w.path);
    }
    // In file order, as a reader goes through it (the sort is stable for one line).
    warnings.sort_by_key(|w| w.line.unwrap_or(usize::MAX));
    Ok(Checked { config, warnings })
}

/// What validation needs besides the raw structs, and what it gathers besides errors.
struct Ctx<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    mode: EnvMode,
    now: SystemTime,
    unresolved: Vec<Unresolved>,
    warnings: Vec<ConfigWarning>,
}

impl Ctx<'_> {
    /// The unset variable in the value at `path`, if any (under `--skip-env`).
    fn unresolved_at(&self, path: &str) -> Option<&Unresolved> {
        self.unresolved.iter().find(|u| {
            u.path == path
                || u.path
                    .strip_prefix(path)
                    .is_some_and(|rest| rest.starts_with(['.', '[']))
        })
    }

    /// An error on a value that held an unset variable says so: the placeholder is the likely
    /// cause, and a default is the fix.
    fn explain(&self, mut e: ConfigError) -> ConfigError {
        let hit = self.unresolved.iter().find(|u| {
            u.path == e.path
                || u.path.starts_with(&format!("{}.", e.path))
                || e.path.starts_with(&format!("{}.", u.path))
        });
        if let Some(u) = hit {
            e.reason.push_str(&format!(
                " (this value uses ${{{var}}}, which is not set: --skip-env checked it with \
                 `{ph}`; give it a default, ${{{var}:-...}}, to check it without the variable)",
                var = u.var,
                ph = interpolate::placeholder(&u.var)
            ));
        }
        e
    }

    fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(ConfigWarning::new(path, message));
    }
}

fn validate(raw: RawConfig, ctx: &mut Ctx<'_>) -> Result<Config, ConfigError> {
    let RawConfig {
        server,
        upstreams,
        routes,
        telemetry,
        state,
        keys,
        key_settings,
        prices,
        mcp,
        ledger,
        teams,
    } = raw;
    let server = server_config(server, ctx)?;
    let mut ups: Vec<UpstreamConfig> = Vec::with_capacity(upstreams.len());
    for (i, u) in upstreams.into_iter().enumerate() {
        let path = format!("upstream[{i}]");
        let u = upstream_config(&path, u, ctx)?;
        if ups.iter().any(|o| o.name == u.name) {
            return Err(ConfigError::new(
                format!("{path}.name"),
                format!("`{}` is already the name of another upstream", u.name),
            ));
        }
        ups.push(u);
    }
    if routes.is_empty() {
        return Err(ConfigError::new(
            "route",
            "no [[route]]: every request would be rejected; add one with `models` and `upstream`",
        ));
    }
    let super::raw::RawKeySettings { file: key_file } = key_settings.unwrap_or_default();
    let default_mode = if keys.is_empty() && key_file.is_none() {
        KeyMode::Off
    } else {
        KeyMode::Required
    };
    let mut out_routes = Vec::with_capacity(routes.len());
    for (i, r) in routes.into_iter().enumerate() {
        let path = format!("route[{i}]");
        let named = r.name.is_some();
        let mut r = route_config(&path, r, &ups, default_mode, ctx)?;
        let taken = |name: &str| out_routes.iter().any(|o: &RouteConfig| o.name == name);
        if !named && taken(&r.name) {
            // A default name (the first glob) that another route already has: number it.
            r.name = format!("{}#{i}", r.name);
        }
        if taken(&r.name) {
            return Err(ConfigError::new(
                format!("{path}.name"),
                format!(
                    "`{}` is already the name of another route; give each route a unique `name`",
                    r.name
                ),
            ));
        }
        out_routes.push(r);
    }
    let route_names: Vec<String> = out_routes.iter().map(|r| r.name.clone()).collect();
    let mut out_keys: Vec<KeyConfig> = Vec::with_capacity(keys.len());
    // Key files may hold many thousands: duplicates are found by lookup, not by scanning.
    let mut ids: std::collections::HashSet<String> = Default::default();
    let mut hashes: std::collections::HashMap<[u8; 32], String> = Default::default();
    let mut add_key = |k: KeyConfig, at: &dyn Fn(&str) -> ConfigError| {
        if !ids.insert(k.id.clone()) {
            return Err(at(&format!("`{}` is already the id of another key", k.id)));
        }
        if let Some(other) = hashes.insert(k.hash, k.id.clone()) {
            return Err(at(&format!(
                "the same hash as key `{other}`: two ids cannot share one secret"
            )));
        }
        out_keys.push(k);
        Ok(())
    };
    for (i, k) in keys.into_iter().enumerate() {
        let path = format!("key[{i}]");
        let k = limits::key(&path, k, &route_names)?;
        add_key(k, &|reason| ConfigError::new(format!("{path}.id"), reason))?;
    }
    if let Some(file) = &key_file {
        if ctx.unresolved_at("keys.file").is_some() {
            ctx.warn(
                "keys.file",
                "not read: the file's path needs a variable that is not set (--skip-env)",
            );
        } else {
            let name = file.display().to_string();
            for (i, k) in limits::key_file(file)?.into_iter().enumerate() {
                let path = format!("key[{i}]");
                let in_file =
                    |e: ConfigError| ConfigError::new("keys.file", format!("{name}: {e}"));
                let k = limits::key(&path, k, &route_names).map_err(in_file)?;
                add_key(k, &|reason| {
                    in_file(ConfigError::new(format!("{path}.id"), reason))
                })?;
            }
        }
    }
    for (i, r) in out_routes.iter().enumerate() {
        if r.keys == KeyMode::Off {
            continue;
        }
        if out_keys.is_empty() && key_file.is_none() {
            ctx.warn(
                format!("route[{i}].keys"),
                format!(
                    "`{}` but no key is defined: add [[key]] entries or `keys.file`",
                    r.keys.as_str()
                ),
            );
        }
        if r.keys != KeyMode::Required {
            continue;
        }
        // Keys are never forwarded on such a route, so a passthrough upstream gets none.
        let passthrough = r
            .targets
            .iter()
            .chain(&r.fallbacks)
            .filter(|t| t.auth.is_none())
            .find(|t| ups[t.upstream.index()].auth == UpstreamAuth::Passthrough);
        if let Some(t) = passthrough {
            ctx.warn(
                format!("route[{i}].keys"),
                format!(
                    "upstream `{}` uses passthrough auth, but client keys are not forwarded \
                     on a route with virtual keys: give it `auth` with its own key",
                    ups[t.upstream.index()].name
                ),
            );
        }
    }
    let mut out_prices = Vec::with_capacity(prices.len());
    for (i, p) in prices.into_iter().enumerate() {
        out_prices.push(limits::price(&format!("price[{i}]"), p)?);
    }
    let state = limits::state(state.unwrap_or_default())?;
    cluster_slots(&state, &out_routes, &out_keys)?;
    let mut out_teams: Vec<crate::TeamConfig> = Vec::with_capacity(teams.len());
    for (i, t) in teams.into_iter().enumerate() {
        let t = limits::team(&format!("team[{i}]"), t)?;
        if out_teams.iter().any(|o| o.id == t.id) {
            return Err(ConfigError::new(
                format!("team[{i}].id"),
                format!("`{}` is defined twice", t.id),
            ));
        }
        out_teams.push(t);
    }
    let mcp = {
        let (env, mode) = (ctx.env, ctx.mode);
        let unresolved: Vec<String> = ctx.unresolved.iter().map(|u| u.path.clone()).collect();
        let is_unresolved = |p: &str| unresolved.iter().any(|u| u == p);
        super::mcp::mcp_config(
            mcp,
            &mut super::mcp::McpCtx {
                env,
                mode,
                unresolved: &is_unresolved,
                warnings: &mut ctx.warnings,
            },
        )?
    };
    Ok(Config {
        server,
        upstreams: ups,
        routes: out_routes,
        telemetry: super::telemetry::telemetry_config(telemetry)?,
        keys: out_keys,
        prices: out_prices,
        state,
        mcp,
        teams: out_teams,
        ledger: ledger
            .map(|l| {
                l.validate().map_err(|e| {
                    let text = e.to_string();
                    let (path, reason) = text.split_once(": ").unwrap_or(("ledger", &text));
                    ConfigError::new(path, reason)
                })?;
                Ok(l)
            })
            .transpose()?,
    })
}

/// On a Redis Cluster each admission must touch one hash slot (one round trip, one node): a
/// key's counters share one by construction, but a route's counter is a slot of its own, so a
/// keyed request on a route with limits of its own would need two. Refused unless the prefix
/// pins every counter to one slot.
fn cluster_slots(
    state: &crate::StateSettings,
    routes: &[RouteConfig],
    keys: &[crate::KeyConfig],
) -> Result<(), ConfigError> {
    let sluice_state::BackendConfig::Redis(r) = &state.store.backend else {
        return Ok(());
    };
    let cluster = r.url.starts_with("redis+cluster://") || r.url.starts_with("rediss+cluster://");
    let pinned = r
        .prefix
        .find('{')
        .is_some_and(|i| r.prefix[i + 1..].find('}').is_some_and(|j| j > 0));
    if !cluster || pinned || keys.is_empty() {
        return Ok(());
    }
    if let Some(route) = routes
        .iter()
        .find(|r| !r.limits.is_empty() && r.keys != crate::KeyMode::Off)
    {
        return Err(ConfigError::new(
            "state.redis",
            format!(
                "on a Redis Cluster, route `{}` has limits of its own and takes keys: its counter \
                 and a key's live in different hash slots, and one admission must be one round \
                 trip; set state.prefix = \"{{sluice}}\" (every counter in one slot, on one \
                 node), or move the route's limits to its keys",
                route.name
            ),
        ));
    }
    Ok(())
}

fn route_config(
    path: &str,
    raw: RawRoute,
    ups: &[UpstreamConfig],
    default_mode: KeyMode,
    ctx: &mut Ctx<'_>,
) -> Result<RouteConfig, ConfigError> {
    let RawRoute {
        name,
        models,
        upstream,
        targets,
        fallbacks,
        on_client_disconnect,
        lane,
        retry,
        idempotent,
        timeout,
        drop_unsupported_params,
        continuation,
        balance,
        outlier,
        keys,
        limits: route_limits,
    } = raw;
    if models.is_empty() || models.iter().any(|m| m.is_empty()) {
        return Err(ConfigError::new(
            format!("{path}.models"),
            "needs at least one non-empty model glob, e.g. [\"gpt-4o*\"]",
        ));
    }
    let targets =
        match (upstream, targets) {
            (Some(upstream), None) => vec![target(
                path,
                ups,
                RawTarget {
                    upstream,
                    model: None,
                    weight: None,
                    context_window: None,
                    key_env: None,
                },
                ctx,
            )?],
            (None, Some(ts)) if !ts.is_empty() => ts
                .into_iter()
                .enumerate()
                .map(|(j, t)| target(&format!("{path}.targets[{j}]"), ups, t, ctx))
                .collect::<Result<_, _>>()?,
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    format!("{path}.targets"),
                    "give either `upstream` (one target) or `targets`, not both",
                ))
            }
            (None, _) => return Err(ConfigError::new(
                format!("{path}.upstream"),
                "a route needs `upstream = \"name\"` or `targets = [{ upstream = \"name\" }, ...]`",
            )),
        };
    let fallbacks = fallbacks
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(j, t)| target(&format!("{path}.fallbacks[{j}]"), ups, t, ctx))
        .collect::<Result<Vec<_>, _>>()?;
    let retry = retry_config(&format!("{path}.retry"), retry.unwrap_or_default())?;
    let timeout = match timeout {
        None => None,
        v => Some(duration(&format!("{path}.timeout"), v, Duration::ZERO)?),
    };
    Ok(RouteConfig {
        name: name.unwrap_or_else(|| models[0].clone()),
        models,
        targets,
        fallbacks,
        on_client_disconnect: on_client_disconnect.unwrap_or(OnClientDisconnect::Cancel),
        lane: lane.map(Into::into),
        retry,
        idempotent: idempotent.unwrap_or(false),
        timeout,
        drop_unsupported_params: drop_unsupported_params.unwrap_or(false),
        continuation: continuation.unwrap_or(false),
        balance: match balance {
            None | Some(BalanceName::P2cEwma) => sluice_upstream::BalancePolicy::P2cEwma,
            Some(BalanceName::LeastInFlight) => sluice_upstream::BalancePolicy::LeastInFlight,
            Some(BalanceName::WeightedRoundRobin) => {
                sluice_upstream::BalancePolicy::WeightedRoundRobin
            }
            Some(BalanceName::Priority) => sluice_upstream::BalancePolicy::Priority,
        },
        outlier: outlier_config(&format!("{path}.outlier"), outlier.unwrap_or_default())?,
        keys: keys.unwrap_or(default_mode),
        limits: limits::route_limits(&format!("{path}.limits"), route_limits.unwrap_or_default())?,
    })
}

/// One target of a route: an upstream that exists, a model name, a weight.
fn target(
    path: &str,
    ups: &[UpstreamConfig],
    raw: RawTarget,
    ctx: &mut Ctx<'_>,
) -> Result<TargetConfig, ConfigError> {
    let RawTarget {
        upstream,
        model,
        weight,
        context_window,
        key_env,
    } = raw;
    let idx = ups.iter().position(|u| u.name == upstream).ok_or_else(|| {
        let known: Vec<&str> = ups.iter().map(|u| u.name.as_str()).collect();
        let mut reason = format!(
            "no upstream named `{upstream}` (defined: {})",
            known
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(best) = super::diagnostics::closest(&upstream, &known) {
            reason.push_str(&format!("; did you mean `{best}`?"));
        }
        ConfigError::new(format!("{path}.upstream"), reason)
    })?;
    if model.as_deref() == Some("") {
        return Err(ConfigError::new(
            format!("{path}.model"),
            "must not be empty",
        ));
    }
    if weight == Some(0) {
        return Err(ConfigError::new(
            format!("{path}.weight"),
            "must be at least 1 (remove the target to send it nothing)",
        ));
    }
    let auth = match key_env {
        None => None,
        Some(var) => Some(UpstreamAuth::ApiKey {
            secret: secret(&format!("{path}.key_env"), &var, ctx)?,
        }),
    };
    Ok(TargetConfig {
        upstream: crate::UpstreamId::new(idx),
        model,
        weight: weight.unwrap_or(1),
        context_window,
        auth,
    })
}

fn outlier_config(
    path: &str,
    raw: RawOutlier,
) -> Result<sluice_upstream::OutlierConfig, ConfigError> {
    let RawOutlier {
        consecutive_failures,
        base_ejection_time,
        max_ejection_time,
        max_ejection_percent,
        success_rate,
    } = raw;
    let d = sluice_upstream::OutlierConfig::default();
    if consecutive_failures == Some(0) {
        return Err(ConfigError::new(
            format!("{path}.consecutive_failures"),
            "must be at least 1",
        ));
    }
    let base = duration(
        &format!("{path}.base_ejection_time"),
        base_ejection_time,
        d.base_ejection_time,
    )?;
    let max = duration(
        &format!("{path}.max_ejection_time"),
        max_ejection_time,
        d.max_ejection_time.max(base),
    )?;
    if max < base {
        return Err(ConfigError::new(
            format!("{path}.max_ejection_time"),
            "must be at least base_ejection_time",
        ));
    }
    let pct = max_ejection_percent.unwrap_or(d.max_ejection_percent);
    if pct > 100 {
        return Err(ConfigError::new(
            format!("{path}.max_ejection_percent"),
            "must be 0 to 100",
        ));
    }
    Ok(sluice_upstream::OutlierConfig {
        consecutive_failures: consecutive_failures.or(d.consecutive_failures),
        success_rate: match success_rate {
            Some(false) => None,
            _ => d.success_rate,
        },
        base_ejection_time: base,
        max_ejection_time: max,
        max_ejection_percent: pct,
    })
}

fn health_check_config(
    path: &str,
    raw: RawHealthCheck,
) -> Result<sluice_upstream::HealthCheckConfig, ConfigError> {
    let RawHealthCheck {
        path: check_path,
        interval,
        timeout,
        healthy_threshold,
        unhealthy_threshold,
    } = raw;
    let d = sluice_upstream::HealthCheckConfig::default();
    let check_path = check_path.unwrap_or(d.path.clone());
    if !check_path.starts_with('/') {
        return Err(ConfigError::new(
            format!("{path}.path"),
            "must start with `/` (it is below the base_url, e.g. \"/models\")",
        ));
    }
    for (field, v) in [
        ("healthy_threshold", healthy_threshold),
        ("unhealthy_threshold", unhealthy_threshold),
    ] {
        if v == Some(0) {
            return Err(ConfigError::new(
                format!("{path}.{field}"),
                "must be at least 1",
            ));
        }
    }
    Ok(sluice_upstream::HealthCheckConfig {
        interval: duration(&format!("{path}.interval"), interval, d.interval)?,
        timeout: duration(&format!("{path}.timeout"), timeout, d.timeout)?,
        path: check_path,
        healthy_threshold: healthy_threshold.unwrap_or(d.healthy_threshold),
        unhealthy_threshold: unhealthy_threshold.unwrap_or(d.unhealthy_threshold),
        ..d
    })
}

fn retry_config(path: &str, raw: RawRetry) -> Result<crate::RetryConfig, ConfigError> {
    let RawRetry {
        attempts,
        backoff,
        max_backoff,
        max_retry_after,
    } = raw;
    let d = crate::RetryConfig::default();
    let attempts = attempts.unwrap_or(d.attempts);
    if !(1..=10).contains(&attempts) {
        return Err(ConfigError::new(
            format!("{path}.attempts"),
            "must be 1 to 10 (attempts per target tier, the first included)",
        ));
    }
    Ok(crate::RetryConfig {
        attempts,
        backoff: duration(&format!("{path}.backoff"), backoff, d.backoff)?,
        max_backoff: duration(&format!("{path}.max_backoff"), max_backoff, d.max_backoff)?,
        max_retry_after: duration(
            &format!("{path}.max_retry_after"),
            max_retry_after,
            d.max_retry_after,
        )?,
    })
}

fn budget_config(path: &str, raw: RawBudget) -> Result<crate::BudgetConfig, ConfigError> {
    let RawBudget {
        ratio,
        min_per_second,
    } = raw;
    let d = crate::BudgetConfig::default();
    let ratio = ratio.unwrap_or(d.ratio);
    if !(ratio.is_finite() && (0.0..=10.0).contains(&ratio)) {
        return Err(ConfigError::new(
            format!("{path}.ratio"),
            "must be a number from 0 to 10 (retries per request over 10 s)",
        ));
    }
    Ok(crate::BudgetConfig {
        ratio,
        min_per_second: min_per_second.unwrap_or(d.min_per_second),
    })
}

fn duration(
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

fn size(path: &str, v: Option<SizeValue>, default: u64) -> Result<u64, ConfigError> {
    match v {
        None => Ok(default),
        Some(SizeValue(0)) => Err(ConfigError::new(path, "must be greater than zero")),
        Some(SizeValue(n)) => Ok(n),
    }
}

fn server_config(raw: RawServer, ctx: &mut Ctx<'_>) -> Result<ServerConfig, ConfigError> {
    let RawServer {
        listen,
        tls,
        heartbeat,
        max_request_body,
        max_response_body,
        shutdown_grace,
        max_event_bytes,
        server_timing,
        access_log,
        access_log_queue,
        log_format,
        log_level,
        admin_listen,
        admin_token,
        max_connections,
        max_connections_per_ip,
        workers,
        max_header_bytes,
        max_concurrent_streams,
        max_connection_request_rate,
        memory_budget,
        trusted_proxies,
        client_timeouts,
        client_resets,
    } = raw;
    let listen = listen
        .as_deref()
        .unwrap_or("127.0.0.1:8080")
        .parse()
        .map_err(|_| {
            ConfigError::new(
                "server.listen",
                "must be IP:PORT, e.g. \"127.0.0.1:8080\" or \"[::]:8443\"",
            )
        })?;
    let tls = match tls {
        None => None,
        Some(RawTls { cert, key }) => {
            let files = TlsFiles { cert, key };
            server_tls(&files, ctx)?;
            Some(files)
        }
    };
    let max_event_bytes = size("server.max_event_bytes", max_event_bytes, 1 << 20)?;
    if max_event_bytes > MAX_EVENT_BYTES_CEILING {
        return Err(ConfigError::new(
            "server.max_event_bytes",
            "must be at most 64MiB",
        ));
    }
    let admin_listen = admin_listen
        .map(|a| {
            a.parse().map_err(|_| {
                ConfigError::new(
                    "server.admin_listen",
                    "must be IP:PORT, e.g. \"127.0.0.1:9901\"",
                )
            })
        })
        .transpose()?;
    let admin_token = admin_token
        .map(|t| {
            let token = super::AdminToken::new(&t).ok_or_else(|| {
                ConfigError::new(
                    "server.admin_token",
                    "must be non-empty printable ASCII without spaces; set it from the \
                     environment, e.g. admin_token = \"${SLUICE_ADMIN_TOKEN}\"",
                )
            })?;
            if t.len() < super::admin::MIN_TOKEN_LEN && ctx.unresolved_at("server.admin_token").is_none() {
                ctx.warn(
                    "server.admin_token",
                    format!(
                        "shorter than {} characters: easy to guess; use e.g. `openssl rand -hex 32`",
                        super::admin::MIN_TOKEN_LEN
                    ),
                );
            }
            Ok(token)
        })
        .transpose()?;
    let max_request_body = size("server.max_request_body", max_request_body, 16 << 20)?;
    let max_response_body = size("server.max_response_body", max_response_body, 8 << 20)?;
    let memory_budget = size("server.memory_budget", memory_budget, 512 << 20)?;
    if memory_budget < max_request_body.max(max_response_body) {
        return Err(ConfigError::new(
            "server.memory_budget",
            format!(
                "{memory_budget} bytes is less than one request or response body may be \
                 (max_request_body {max_request_body}, max_response_body {max_response_body}); \
                 raise it or lower those"
            ),
        ));
    }
    let max_header_bytes = size("server.max_header_bytes", max_header_bytes, 32 << 10)?;
    if !(8 << 10..=1 << 20).contains(&max_header_bytes) {
        return Err(ConfigError::new(
            "server.max_header_bytes",
            "must be from 8KiB to 1MiB",
        ));
    }
    let positive = |path: &str, v: Option<usize>| match v {
        Some(0) => Err(ConfigError::new(path, "must be at least 1")),
        v => Ok(v),
    };
    let trusted_proxies = trusted_proxies
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            IpNet::parse(p).map_err(|e| ConfigError::new(format!("server.trusted_proxies[{i}]"), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let server = ServerConfig {
        admin_listen,
        admin_token,
        listen,
        tls,
        heartbeat: duration("server.heartbeat", heartbeat, Duration::from_secs(15))?,
        max_request_body,
        max_response_body,
        shutdown_grace: duration(
            "server.shutdown_grace",
            shutdown_grace,
            Duration::from_secs(30),
        )?,
        max_event_bytes: usize::try_from(max_event_bytes).unwrap_or(usize::MAX),
        server_timing: server_timing.unwrap_or(false),
        access_log: match access_log.as_deref() {
            None | Some("stdout") => crate::AccessLogSink::Stdout,
            Some("off") => crate::AccessLogSink::Off,
            Some("") => {
                return Err(ConfigError::new(
                    "server.access_log",
                    "write \"stdout\", \"off\" or a file path",
                ))
            }
            Some(path) => crate::AccessLogSink::File(path.into()),
        },
        access_log_queue: match access_log_queue {
            Some(0) => {
                return Err(ConfigError::new(
                    "server.access_log_queue",
                    "must be at least 1",
                ))
            }
            v => v.unwrap_or(crate::DEFAULT_QUEUE),
        },
        log_format: match log_format {
            None | Some(LogFormatName::Text) => crate::LogFormat::Text,
            Some(LogFormatName::Json) => crate::LogFormat::Json,
        },
        log_level: log_level.unwrap_or_else(|| "info".into()),
        max_connections: positive("server.max_connections", max_connections)?,
        max_connections_per_ip: positive("server.max_connections_per_ip", max_connections_per_ip)?,
        workers: match workers.unwrap_or(0) {
            n if n > MAX_WORKERS => {
                return Err(ConfigError::new(
                    "server.workers",
                    format!(
                        "{n} threads is more than {MAX_WORKERS} (about one per CPU given to \
                         the gateway; 0, the default, for one shared runtime)"
                    ),
                ))
            }
            n => n,
        },
        max_header_bytes: u32::try_from(max_header_bytes).unwrap_or(u32::MAX),
        max_concurrent_streams: positive(
            "server.max_concurrent_streams",
            max_concurrent_streams.map(|n| n as usize),
        )?
        .map_or(200, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        max_connection_request_rate: positive(
            "server.max_connection_request_rate",
            max_connection_request_rate.map(|n| n as usize),
        )?
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        memory_budget,
        trusted_proxies,
        client_timeouts: client_timeouts_config(client_timeouts.unwrap_or_default())?,
        client_resets: client_resets_config(client_resets.unwrap_or_default())?,
    };
    let admin = server.admin_addr();
    if admin.port() != 0 && admin == server.listen {
        return Err(ConfigError::new(
            "server.admin_listen",
            format!("{admin} is also server.listen; the admin plane needs its own port, e.g. 127.0.0.1:9901"),
        ));
    }
    server.check_admin_exposure()?;
    Ok(server)
}

fn client_timeouts_config(raw: RawClientTimeouts) -> Result<ClientTimeouts, ConfigError> {
    let RawClientTimeouts {
        header,
        body_idle,
        body,
        keep_alive,
        send,
    } = raw;
    let d = ClientTimeouts::default();
    let p = |f: &str| format!("server.client_timeouts.{f}");
    Ok(ClientTimeouts {
        header: duration(&p("header"), header, d.header)?,
        body_idle: duration(&p("body_idle"), body_idle, d.body_idle)?,
        body: duration(&p("body"), body, d.body)?,
        keep_alive: duration(&p("keep_alive"), keep_alive, d.keep_alive)?,
        send: duration(&p("send"), send, d.send)?,
    })
}

fn client_resets_config(raw: RawClientResets) -> Result<ClientResets, ConfigError> {
    let RawClientResets {
        per_connection,
        per_ip,
        window,
        block,
    } = raw;
    let d = ClientResets::default();
    let p = |f: &str| format!("server.client_resets.{f}");
    let count = |f: &str, v: Option<u32>, def: u32| match v {
        Some(0) => Err(ConfigError::new(p(f), "must be at least 1")),
        v => Ok(v.unwrap_or(def)),
    };
    Ok(ClientResets {
        per_connection: count("per_connection", per_connection, d.per_connection)?,
        per_ip: count("per_ip", per_ip, d.per_ip)?,
        window: duration(&p("window"), window, d.window)?,
        block: duration(&p("block"), block, d.block)?,
    })
}

/// Loads the listener's certificate and key exactly as startup does, and warns of expiry.
fn server_tls(files: &TlsFiles, ctx: &mut Ctx<'_>) -> Result<(), ConfigError> {
    if let Some(u) = ctx.unresolved_at("server.tls") {
        let (path, var) = (u.path.clone(), u.var.clone());
        ctx.warn(
            path,
            format!("not checked: the file's path needs `{var}`, which is not set (--skip-env)"),
        );
        return Ok(());
    }
    super::tls::server_config(files).map_err(|e| {
        let path = match e.field() {
            Some(f) => format!("server.tls.{f}"),
            None => "server.tls".to_string(),
        };
        ConfigError::new(path, e.to_string())
    })?;
    // Loading just succeeded, so reading the chain again succeeds too.
    if let Ok(certs) = super::tls::read_certs(&files.cert) {
        for w in super::tls::expiry_warnings(&files.cert, &certs, ctx.now) {
            ctx.warn("server.tls.cert", w);
        }
    }
    Ok(())
}

fn upstream_config(
    path: &str,
    raw: RawUpstream,
    ctx: &mut Ctx<'_>,
) -> Result<UpstreamConfig, ConfigError> {
    let RawUpstream {
        name,
        base_url,
        protocol,
        auth,
        ca_file,
        session_header_to_body,
        timeouts,
        pool,
        retry_budget,
        provider,
        api_version,
        anthropic_version,
        prefill,
        health_check,
    } = raw;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(ConfigError::new(
            format!("{path}.name"),
            "must be non-empty and use only letters, digits, `-`, `_` and `.`",
        ));
    }
    // Only the syntax here: scheme, host, query and their fit with `protocol` are checked once,
    // by the connection layer below.
    let base: http::Uri = base_url.parse().map_err(|e| {
        ConfigError::new(
            format!("{path}.base_url"),
            format!("`{base_url}` is not a URL ({e}); write e.g. \"http://127.0.0.1:9090/v1\""),
        )
    })?;
    let auth = match auth {
        None | Some(RawAuth::Passthrough {}) => UpstreamAuth::Passthrough,
        Some(RawAuth::Bearer { env }) => UpstreamAuth::Bearer {
            secret: secret(&format!("{path}.auth.env"), &env, ctx)?,
        },
        Some(RawAuth::Header { header, env }) => UpstreamAuth::Header {
            name: header_name(&format!("{path}.auth.header"), &header)?,
            secret: secret(&format!("{path}.auth.env"), &env, ctx)?,
        },
        Some(RawAuth::ApiKey { env }) => UpstreamAuth::ApiKey {
            secret: secret(&format!("{path}.auth.env"), &env, ctx)?,
        },
    };
    let provider = provider_kind(path, provider, api_version, anthropic_version)?;
    if let (Some(p), UpstreamAuth::ApiKey { secret }) = (&provider, &auth) {
        if p.auth_headers(secret).is_err() {
            return Err(ConfigError::new(
                format!("{path}.auth.env"),
                "the key holds a character a header cannot carry (a newline or control \
                 character)",
            ));
        }
    }
    let session_header_to_body = match session_header_to_body {
        None => None,
        Some(RawSessionHeader {
            header,
            json_pointer,
        }) => {
            let header = header_name(&format!("{path}.session_header_to_body.header"), &header)?;
            if !json_pointer.starts_with('/') || json_pointer.len() < 2 {
                return Err(ConfigError::new(
                    format!("{path}.session_header_to_body.json_pointer"),
                    "must be a JSON pointer into the body, e.g. \"/session_id\"",
                ));
            }
            Some(SessionHeaderToBody {
                header,
                json_pointer,
            })
        }
    };
    let timeouts = timeouts_config(path, timeouts.unwrap_or_default())?;
    let (pool, long_max_tokens) = pool_config(path, pool.unwrap_or_default())?;
    let retry_budget = budget_config(
        &format!("{path}.retry_budget"),
        retry_budget.unwrap_or_default(),
    )?;
    let config = UpstreamConfig {
        name,
        base_url: base,
        protocol: protocol.unwrap_or(UpstreamProtocol::Auto),
        auth,
        ca_file,
        session_header_to_body,
        timeouts,
        pool,
        long_max_tokens,
        retry_budget,
        prefill: prefill.unwrap_or(matches!(
            provider,
            Some(sluice_providers::ProviderKind::Anthropic { .. })
        )),
        provider,
        health_check: health_check
            .map(|h| health_check_config(&format!("{path}.health_check"), h))
            .transpose()?,
    };
    // The connection layer checks its own settings (scheme and protocol, pool sizes, windows,
    // ca_file); building it opens nothing, so check-config and startup reject exactly the same
    // things.
    let mut settings = config.upstream_settings();
    let ca_path = format!("{path}.ca_file");
    if let Some(u) = ctx.unresolved_at(&ca_path) {
        let var = u.var.clone();
        ctx.warn(
            &ca_path,
            format!("not checked: the file's path needs `{var}`, which is not set (--skip-env)"),
        );
        settings.ca_file = None;
    }
    if let Err(e) = sluice_upstream::Upstream::new(settings.clone()) {
        return Err(upstream_error(path, e));
    }
    if let Some(ca) = &settings.ca_file {
        if let Ok(certs) = super::tls::read_certs(ca) {
            for w in super::tls::expiry_warnings(ca, &certs, ctx.now) {
                ctx.warn(&ca_path, w);
            }
        }
    }
    Ok(config)
}

/// The connection layer's verdict, at the field it concerns.
fn upstream_error(path: &str, e: sluice_upstream::UpstreamConfigError) -> ConfigError {
    use sluice_upstream::UpstreamConfigError as E;
    let at = |field: &str| format!("{path}.{field}");
    match e {
        E::BaseUrl { url, reason, .. } if reason.starts_with("protocol") => ConfigError::new(
            at("protocol"),
            format!("{} (base_url is `{url}`)", reason.to_lowercase()),
        ),
        E::BaseUrl { url, reason, .. } => ConfigError::new(
            at("base_url"),
            format!("`{url}`: {reason}; write e.g. \"http://127.0.0.1:9090/v1\""),
        ),
        E::Field { field, reason, .. } => {
            let field = match field {
                "connect_timeout" => "timeouts.connect",
                other => other,
            };
            ConfigError::new(at(field), reason)
        }
        E::Pool { field, reason, .. } => ConfigError::new(at(&field), reason),
        E::CaFile {
            path: file, reason, ..
        } => ConfigError::new(at("ca_file"), format!("{file}: {reason}")),
    }
}

/// `provider` with its per-provider settings: `api_version` for Azure (required),
/// `anthropic_version` for Anthropic (default `2023-06-01`).
fn provider_kind(
    path: &str,
    provider: Option<ProviderName>,
    api_version: Option<String>,
    anthropic_version: Option<String>,
) -> Result<Option<sluice_providers::ProviderKind>, ConfigError> {
    use sluice_providers::ProviderKind as K;
    let stray = |field: &str, for_: &str| {
        ConfigError::new(
            format!("{path}.{field}"),
            format!("only applies to `provider = \"{for_}\"`; remove it"),
        )
    };
    if api_version.is_some() && provider != Some(ProviderName::Azure) {
        return Err(stray("api_version", "azure"));
    }
    if anthropic_version.is_some() && provider != Some(ProviderName::Anthropic) {
        return Err(stray("anthropic_version", "anthropic"));
    }
    Ok(match provider {
        None => None,
        Some(ProviderName::Openai) => Some(K::OpenAi),
        Some(ProviderName::Gemini) => Some(K::Gemini),
        Some(ProviderName::Azure) => {
            let api_version = api_version.filter(|v| !v.is_empty()).ok_or_else(|| {
                ConfigError::new(
                    format!("{path}.api_version"),
                    "Azure OpenAI needs the api-version query, e.g. api_version = \"2024-10-21\"",
                )
            })?;
            Some(K::Azure { api_version })
        }
        Some(ProviderName::Anthropic) => {
            let version = anthropic_version
                .unwrap_or_else(|| sluice_providers::provider::DEFAULT_ANTHROPIC_VERSION.into());
            if http::HeaderValue::from_str(&version).is_err() {
                return Err(ConfigError::new(
                    format!("{path}.anthropic_version"),
                    "is not a valid header value",
                ));
            }
            Some(K::Anthropic { version })
        }
    })
}

fn header_name(path: &str, h: &str) -> Result<http::HeaderName, ConfigError> {
    http::HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes())
        .map_err(|_| ConfigError::new(path, format!("`{h}` is not a header name")))
}

/// The key in the variable named by `auth.env`.
fn secret(path: &str, var: &str, ctx: &mut Ctx<'_>) -> Result<String, ConfigError> {
    match (ctx.env)(var).filter(|s| !s.is_empty()) {
        Some(s) => Ok(s),
        None => match ctx.mode {
            EnvMode::Required => Err(ConfigError::new(
                path,
                format!(
                    "the environment variable `{var}` (the upstream's key) is not set or empty"
                ),
            )),
            EnvMode::Skip => {
                ctx.warn(
                    path,
                    format!(
                        "the environment variable `{var}` (the upstream's key) is not set; not \
                         checked (--skip-env)"
                    ),
                );
                Ok(interpolate::placeholder(var))
            }
        },
    }
}

fn timeouts_config(path: &str, raw: RawTimeouts) -> Result<Timeouts, ConfigError> {
    let RawTimeouts {
        connect,
        first_byte,
        first_token,
        idle,
        total,
    } = raw;
    let t = |field: &str, v, d| duration(&format!("{path}.timeouts.{field}"), v, d);
    let first_byte = t("first_byte", first_byte, Duration::from_secs(60))?;
    let timeouts = Timeouts {
        connect: t("connect", connect, Duration::from_secs(5))?,
        first_byte,
        first_token: t("first_token", first_token, first_byte)?,
        // Reasoning models are silent for minutes mid-stream (see the README's "Limits and
        // timeouts"); a dead HTTP/2 upstream is caught sooner by the pool's PING.
        idle: t("idle", idle, Duration::from_secs(300))?,
        total: t("total", total, Duration::from_secs(600))?,
    };
    for (field, d) in [
        ("connect", timeouts.connect),
        ("first_byte", timeouts.first_byte),
        ("first_token", timeouts.first_token),
        ("idle", timeouts.idle),
    ] {
        if d > timeouts.total {
            return Err(ConfigError::new(
                format!("{path}.timeouts.{field}"),
                format!(
                    "{} is longer than total ({}); it could never fire",
                    humantime::format_duration(d),
                    humantime::format_duration(timeouts.total)
                ),
            ));
        }
    }
    Ok(timeouts)
}

fn pool_config(
    path: &str,
    raw: RawPool,
) -> Result<(sluice_upstream::PoolConfig, u64), ConfigError> {
    use sluice_upstream::{Lane, LaneConfig, PoolConfig};
    let RawPool {
        stream,
        short,
        ping_interval,
        degraded_rtt_factor,
        degraded_rtt_floor,
        stall_timeout,
        max_connection_age,
        max_requests_per_connection,
        idle_timeout,
        long_max_tokens,
        dns_refresh,
    } = raw;
    let d = PoolConfig::default();
    let lane = |name: &str, kind: Lane, raw: Option<RawLane>| -> Result<LaneConfig, ConfigError> {
        let def = LaneConfig::default_for(kind);
        let RawLane {
            min_connections,
            max_connections,
            max_streams_per_connection,
            max_pending,
            acquire_timeout,
        } = raw.unwrap_or_default();
        Ok(LaneConfig {
            min_connections: min_connections.unwrap_or(def.min_connections),
            max_connections: max_connections.or(def.max_connections),
            max_streams_per_connection: max_streams_per_connection
                .unwrap_or(def.max_streams_per_connection),
            max_pending: max_pending.unwrap_or(def.max_pending),
            acquire_timeout: duration(
                &format!("{path}.pool.{name}.acquire_timeout"),
                acquire_timeout,
                def.acquire_timeout,
            )?,
        })
    };
    let p = |field: &str| format!("{path}.pool.{field}");
    let pool = PoolConfig {
        stream: lane("stream", Lane::Stream, stream)?,
        short: lane("short", Lane::Short, short)?,
        ping_interval: duration(&p("ping_interval"), ping_interval, d.ping_interval)?,
        degraded_rtt_factor: degraded_rtt_factor.unwrap_or(d.degraded_rtt_factor),
        degraded_rtt_floor: duration(
            &p("degraded_rtt_floor"),
            degraded_rtt_floor,
            d.degraded_rtt_floor,
        )?,
        stall_timeout: duration(&p("stall_timeout"), stall_timeout, d.stall_timeout)?,
        max_connection_age: match max_connection_age {
            None => None,
            v => Some(duration(&p("max_connection_age"), v, Duration::ZERO)?),
        },
        max_requests_per_connection,
        idle_timeout: duration(&p("idle_timeout"), idle_timeout, d.idle_timeout)?,
        dns_refresh: duration(&p("dns_refresh"), dns_refresh, d.dns_refresh)?,
    };
    Ok((pool, long_max_tokens.unwrap_or(4096)))
}

/// Reads a file for [`check`].
pub(super) fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            path.display().to_string(),
            format!("cannot read the config file: {e}"),
        )
    })
}

/// Most `server.workers`: past a few per CPU, threads only add switching.
const MAX_WORKERS: usize = 1024;
