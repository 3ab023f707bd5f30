//! From text to a validated [`Config`]: parse, expand `${VAR}`, deserialize the raw structs,
//! then validate them into the public types.
//!
//! Every raw struct is taken apart by exhaustive destructuring, so adding a field to the file
//! format without validating it is a compile error, not a silently ignored setting.

mod cloud;
mod cloud_url;
mod route;
mod server;
mod upstream;

use route::route_config;
use server::server_config;
use upstream::upstream_config;

use std::path::Path;
use std::time::{Duration, SystemTime};

use toml::de::DeTable;

use super::diagnostics::{deserialize_error, line_of, locate, syntax_error};
use super::interpolate::{self, Unresolved};
use super::limits;
use super::raw::{
    BalanceName, LogFormatName, ProviderName, RawAuth, RawBudget, RawClientResets,
    RawClientTimeouts, RawConfig, RawHealthCheck, RawLane, RawOutlier, RawPool,
    RawReasoningBudgets, RawRetry, RawRoute, RawRouteCache, RawServer, RawSessionHeader, RawTarget,
    RawTimeouts, RawTls, RawUpstream,
};
use super::units::{DurationValue, SizeValue};
use super::{
    Checked, ClientResets, ClientTimeouts, Config, ConfigError, ConfigWarning, EnvMode, IpNet,
    KeyConfig, KeyMode, OnClientDisconnect, RouteConfig, ServerConfig, SessionHeaderToBody,
    TargetConfig, Timeouts, TlsFiles, UpstreamAuth, UpstreamConfig, UpstreamProtocol,
};

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
        guardrails,
    } = raw;
    let server = server_config(server, ctx)?;
    // Before the routes, which name them.
    let guardrails = super::guardrail::guardrails(guardrails)?;
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
        let mut r = route_config(&path, r, &ups, default_mode, &guardrails, ctx)?;
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
        let k = limits::key(&path, k, &route_names, &guardrails)?;
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
                let k = limits::key(&path, k, &route_names, &guardrails).map_err(in_file)?;
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
        guardrails,
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

/// Reads a file for [`check`].
pub(super) fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            path.display().to_string(),
            format!("cannot read the config file: {e}"),
        )
    })
}
