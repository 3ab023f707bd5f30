//! Hot reload: a new config is checked exactly as startup checks it, then swapped in for new
//! requests; requests already running keep the generation they started with to their end.
//!
//! Three triggers end in [`Reloader::apply_text`]: `SIGHUP` to `sluice serve`,
//! `POST /admin/reload`, and `sluice serve --watch` (the file polled every second).
//!
//! What a reload keeps: an upstream whose connection settings are unchanged keeps its pool
//! (connections, shards, counters) and retry budget; a route whose tier-0 targets are
//! unchanged keeps its balancer (latency EWMA, ejections) and health-check tasks; the keys'
//! state store (counters, budgets, idempotency records) and metric families always carry on.
//! A changed or removed upstream's old pool takes no new request and closes when the last
//! request of the old generation ends (each bounded by its deadline).
//!
//! What needs a restart (refused, naming the field, the running config stays): the listeners
//! (`server.listen`, `server.admin_listen`, `server.tls`), the client-side limits and timeouts
//! the ingress holds, the logs, `[telemetry]` and `[state]`. See [`restart_field`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};

use crate::config::{Config, ConfigError, EnvMode, ServerConfig};
use crate::generation::Generation;
use crate::generation::{build, BuildError, Changes, GenerationCell, Parts};
use sluice_telemetry::pools::PoolCollector;

/// Where the gateway's config came from, so that a reload reads it again the same way: the
/// file (with `${VAR}` from the process environment, as at startup) and what the command line
/// put in place of the file's values.
#[derive(Clone, Debug)]
pub struct ConfigSource {
    /// The TOML file.
    pub path: PathBuf,
    /// Command-line values that win over the file's, at startup and at every reload.
    pub overrides: Overrides,
    /// The file's text the running config was made from, if known: `--watch` compares the
    /// file with it, so that an edit made while the gateway was starting is reloaded rather
    /// than taken for what runs.
    pub text: Option<String>,
}

/// Values given on the command line instead of the file's.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// Instead of `server.listen`.
    pub listen: Option<SocketAddr>,
    /// Instead of `server.admin_listen`.
    pub admin_listen: Option<SocketAddr>,
    /// Instead of `server.log_format`.
    pub log_format: Option<sluice_telemetry::access_log::LogFormat>,
}

impl Overrides {
    /// Puts the overriding values into `cfg`.
    pub fn apply(&self, cfg: &mut Config) {
        if let Some(listen) = self.listen {
            cfg.server.listen = listen;
        }
        if let Some(admin) = self.admin_listen {
            cfg.server.admin_listen = Some(admin);
        }
        if let Some(f) = self.log_format {
            cfg.server.log_format = f;
        }
    }
}

/// A reload that was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// The config version now in force (1 at start, +1 per reload).
    pub version: u64,
    /// Its hash, as `/admin/config` shows it.
    pub hash: String,
    /// Upstreams added, removed, changed (any setting, credentials included).
    pub upstreams: Changes,
    /// Routes added, removed, changed.
    pub routes: Changes,
    /// Upstreams whose old pool drains: removed, or changed in their connection settings
    /// (`base_url`, `protocol`, `ca_file`, `timeouts.connect`, `[upstream.pool]`). Every other
    /// upstream kept its connections.
    pub draining: Vec<String>,
}

impl ReloadOutcome {
    /// The JSON `POST /admin/reload` answers.
    pub fn json(&self) -> Value {
        json!({
            "version": self.version,
            "hash": self.hash,
            "upstreams": self.upstreams.json(),
            "routes": self.routes.json(),
            "draining": self.draining,
        })
    }
}

/// Why a reload was refused. The running config stays in force, unchanged.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new config does not validate (as `sluice check-config` would say).
    #[error("{0}")]
    Invalid(ConfigError),
    /// The new config changes a setting that only a restart applies.
    #[error("{field}: changing it needs a restart (the running config stays; restart to apply)")]
    NeedsRestart {
        /// The first such field, e.g. `server.listen`.
        field: &'static str,
    },
    /// The gateway was started from a config in memory, not from a file.
    #[error("no config file to reload: the gateway was started from a config in memory")]
    NoSource,
    /// The config validated but its upstreams or balancers could not be built.
    #[error("{0}")]
    Build(#[from] BuildError),
}

impl ReloadError {
    /// `sluice_config_reloads_total{result}`: `invalid` for a config refused, `error` when the
    /// gateway could not apply one.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReloadError::Invalid(_) | ReloadError::NeedsRestart { .. } => "invalid",
            ReloadError::NoSource | ReloadError::Build(_) => "error",
        }
    }

    /// The `error.code` of `POST /admin/reload`'s answer.
    pub fn code(&self) -> &'static str {
        match self {
            ReloadError::Invalid(_) => "invalid_config",
            ReloadError::NeedsRestart { .. } => "needs_restart",
            ReloadError::NoSource => "no_config_file",
            ReloadError::Build(_) => "reload_failed",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// `sluice_config_reloads_total{result}` and `sluice_config_version`.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReloadMetrics {
    reloads: Family<ResultLabel, Counter>,
    version: Gauge,
}

impl ReloadMetrics {
    pub(crate) fn register(registry: &mut Registry) -> ReloadMetrics {
        let m = ReloadMetrics::default();
        registry.register(
            "config_reloads",
            "Config reloads by result: ok, invalid (refused, the running config stays), error",
            m.reloads.clone(),
        );
        registry.register(
            "config_version",
            "The config version in force: 1 at start, +1 per successful reload",
            m.version.clone(),
        );
        // Every result shows from the start, at 0.
        for result in ["ok", "invalid", "error"] {
            let _ = m.reloads.get_or_create(&ResultLabel { result });
        }
        m.version.set(1);
        m
    }

    fn count(&self, result: &'static str) {
        self.reloads.get_or_create(&ResultLabel { result }).inc();
    }
}

/// The running config and how to replace it.
pub(crate) struct Reloader {
    cell: Arc<GenerationCell>,
    source: Option<ConfigSource>,
    pools: PoolCollector,
    metrics: ReloadMetrics,
    /// One reload at a time: two would both build from the same generation.
    lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("version", &self.cell.load().info.version)
            .field("source", &self.source)
            .finish()
    }
}

impl Reloader {
    pub(crate) fn new(
        cell: Arc<GenerationCell>,
        source: Option<ConfigSource>,
        pools: PoolCollector,
        metrics: ReloadMetrics,
    ) -> Reloader {
        Reloader {
            cell,
            source,
            pools,
            metrics,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The generation new requests get.
    pub(crate) fn current(&self) -> Arc<Generation> {
        self.cell.load_full()
    }

    pub(crate) fn source(&self) -> Option<&ConfigSource> {
        self.source.as_ref()
    }

    /// Reads the config file again and applies it.
    ///
    /// # Errors
    /// [`ReloadError`]: counted and logged; the running config stays.
    pub(crate) async fn reload(&self) -> Result<ReloadOutcome, ReloadError> {
        let text = match &self.source {
            None => Err(ReloadError::NoSource),
            Some(src) => {
                let path = src.path.clone();
                tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
                    .map_err(|e| {
                        ReloadError::Invalid(ConfigError::new(
                            src.path.display().to_string(),
                            format!("cannot read the config file: {e}"),
                        ))
                    })
            }
        };
        match text {
            Ok(text) => self.apply_text(text).await,
            Err(e) => Err(self.refused(e)),
        }
    }

    /// Validates `text` as startup does (environment, key files, TLS files), and if it is
    /// valid and needs no restart, swaps it in for new requests. Every trigger ends here.
    ///
    /// # Errors
    /// [`ReloadError`]: counted and logged; the running config stays.
    pub(crate) async fn apply_text(&self, text: String) -> Result<ReloadOutcome, ReloadError> {
        let _one = self.lock.lock().await;
        let overrides = self
            .source
            .as_ref()
            .map(|s| s.overrides.clone())
            .unwrap_or_default();
        // Key files and TLS files are read: off the runtime's threads.
        let checked = tokio::task::spawn_blocking(move || {
            Config::check_toml(&text, &|k| std::env::var(k).ok(), EnvMode::Required)
        })
        .await
        .unwrap_or_else(|e| Err(ConfigError::new("", format!("validation failed: {e}"))));
        let checked = match checked {
            Ok(c) => c,
            Err(e) => return Err(self.refused(ReloadError::Invalid(e))),
        };
        let file = self.source.as_ref().map(|s| s.path.display().to_string());
        for w in &checked.warnings {
            tracing::warn!(config = file.as_deref().unwrap_or(""), "{w}");
        }
        let mut config = checked.config;
        overrides.apply(&mut config);
        let old = self.cell.load_full();
        if let Some(field) = restart_field(&old.config, &config) {
            return Err(self.refused(ReloadError::NeedsRestart { field }));
        }
        // What startup refuses, a reload does too: the file alone cannot see an admin address
        // given on the command line.
        if let Err(e) = config.server.check_admin_exposure() {
            return Err(self.refused(ReloadError::Invalid(e)));
        }
        let keys = old.keys.reconfigure(&config);
        let version = old.info.version + 1;
        let parts = Parts {
            telemetry: old.telemetry.clone(),
            keys,
            shared: old.shared.clone(),
            version,
        };
        let (state, report) = match build(config, Some(&old), parts) {
            Ok(built) => built,
            Err(e) => return Err(self.refused(ReloadError::Build(e))),
        };
        self.pools.set(state.pool_list());
        let outcome = ReloadOutcome {
            version,
            hash: state.info.hash.clone(),
            upstreams: report.upstreams,
            routes: report.routes,
            draining: report.draining,
        };
        self.cell.store(Arc::new(state));
        drop(old);
        self.metrics.count("ok");
        self.metrics.version.set(version as i64);
        tracing::info!(
            version,
            hash = %outcome.hash,
            upstreams = %outcome.upstreams,
            routes = %outcome.routes,
            draining = ?outcome.draining,
            "config reloaded; requests already running finish on the previous config"
        );
        Ok(outcome)
    }

    fn refused(&self, e: ReloadError) -> ReloadError {
        self.metrics.count(e.metric_label());
        tracing::warn!(
            reason = %e,
            version = self.cell.load().info.version,
            "config reload refused; the running config stays"
        );
        e
    }
}

/// Whether two `[state]` sections are the same. Their `Debug` covers every field (the state
/// crate's configs print exhaustively) but the Redis URL's credentials, compared apart.
fn same_state(a: &crate::config::StateSettings, b: &crate::config::StateSettings) -> bool {
    use sluice_state::BackendConfig::Redis;
    let urls_same = match (&a.store.backend, &b.store.backend) {
        (Redis(x), Redis(y)) => x.url == y.url,
        _ => true,
    };
    urls_same && format!("{a:?}") == format!("{b:?}")
}

/// The first setting that differs between `old` and `new` and that only a restart applies, or
/// `None` when a reload can apply `new`.
///
/// Reloaded: `[[upstream]]`, `[[route]]`, `[[key]]` and `keys.file`, `[[price]]`,
/// `[[guardrail]]`, and of
/// `[server]`: `heartbeat`, `max_request_body`, `max_response_body`, `max_event_bytes`,
/// `server_timing` and `admin_token`. Everything else is held by the listeners, the ingress,
/// the logs, the tracer or the state store, built once at startup.
pub(crate) fn restart_field(old: &Config, new: &Config) -> Option<&'static str> {
    // Destructured so that a new setting needs a decision here.
    let Config {
        server,
        upstreams: _,
        routes: _,
        telemetry,
        keys: _,
        teams: _,
        prices: _,
        // Built into each generation: reloaded.
        guardrails: _,
        state,
        // Built once at start and mounted by the `sluice` binary: a change needs a restart.
        mcp,
        ledger,
    } = new;
    let ServerConfig {
        listen,
        tls,
        heartbeat: _,
        max_request_body: _,
        max_response_body: _,
        shutdown_grace,
        max_event_bytes: _,
        server_timing: _,
        access_log,
        access_log_queue,
        log_format,
        log_level,
        admin_listen,
        admin_token: _,
        max_connections,
        max_connections_per_ip,
        workers,
        max_header_bytes,
        max_concurrent_streams,
        resumable_streams,
        resumable_log_bytes,
        max_connection_request_rate,
        memory_budget,
        trusted_proxies,
        client_timeouts,
        client_resets,
    } = server;
    let o = &old.server;
    let same = [
        ("server.listen", *listen == o.listen),
        ("server.tls", *tls == o.tls),
        ("server.admin_listen", *admin_listen == o.admin_listen),
        ("server.shutdown_grace", *shutdown_grace == o.shutdown_grace),
        ("server.access_log", *access_log == o.access_log),
        (
            "server.access_log_queue",
            *access_log_queue == o.access_log_queue,
        ),
        ("server.log_format", *log_format == o.log_format),
        ("server.log_level", *log_level == o.log_level),
        (
            "server.max_connections",
            *max_connections == o.max_connections,
        ),
        (
            "server.max_connections_per_ip",
            *max_connections_per_ip == o.max_connections_per_ip,
        ),
        ("server.workers", *workers == o.workers),
        (
            "server.max_header_bytes",
            *max_header_bytes == o.max_header_bytes,
        ),
        (
            "server.max_concurrent_streams",
            *max_concurrent_streams == o.max_concurrent_streams,
        ),
        (
            "server.resumable_streams",
            *resumable_streams == o.resumable_streams,
        ),
        (
            "server.resumable_log_bytes",
            *resumable_log_bytes == o.resumable_log_bytes,
        ),
        (
            "server.max_connection_request_rate",
            *max_connection_request_rate == o.max_connection_request_rate,
        ),
        ("server.memory_budget", *memory_budget == o.memory_budget),
        (
            "server.trusted_proxies",
            *trusted_proxies == o.trusted_proxies,
        ),
        (
            "server.client_timeouts",
            *client_timeouts == o.client_timeouts,
        ),
        ("server.client_resets", *client_resets == o.client_resets),
        ("telemetry", *telemetry == old.telemetry),
        ("state", same_state(state, &old.state)),
        ("ledger", *ledger == old.ledger),
        (
            "mcp",
            mcp.session_secret == old.mcp.session_secret && mcp.redacted() == old.mcp.redacted(),
        ),
    ];
    same.iter().find(|(_, same)| !same).map(|(field, _)| *field)
}

#[cfg(test)]
mod tests {
    use super::restart_field;
    use crate::config::Config;

    fn config(server: &str, rest: &str) -> Config {
        let text = format!(
            "[server]\n{server}\n[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"u\"\n{rest}"
        );
        Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn restart_only_settings_are_named_and_the_rest_reload() {
        let base = config("", "");
        for (server, rest, field) in [
            ("listen = \"127.0.0.1:1\"", "", "server.listen"),
            ("admin_listen = \"127.0.0.1:2\"", "", "server.admin_listen"),
            ("shutdown_grace = \"1s\"", "", "server.shutdown_grace"),
            ("access_log = \"off\"", "", "server.access_log"),
            ("log_level = \"debug\"", "", "server.log_level"),
            ("max_connections = 10", "", "server.max_connections"),
            ("workers = 3", "", "server.workers"),
            ("memory_budget = \"1GiB\"", "", "server.memory_budget"),
            (
                "trusted_proxies = [\"10.0.0.0/8\"]",
                "",
                "server.trusted_proxies",
            ),
            (
                "client_timeouts = { header = \"1s\" }",
                "",
                "server.client_timeouts",
            ),
            (
                "",
                "[telemetry]\nendpoint = \"http://127.0.0.1:4318\"\n",
                "telemetry",
            ),
            ("", "[state]\nmax_entries = 1000\n", "state"),
            ("", "[state]\nsweep_interval = \"3s\"\n", "state"),
            (
                "",
                "[mcp]\nsession_secret = \"0123456789abcdef0123456789abcdef\"\n\
                 [[mcp.server]]\nname = \"a\"\nurl = \"http://127.0.0.1:9/mcp\"\n",
                "mcp",
            ),
        ] {
            assert_eq!(
                restart_field(&base, &config(server, rest)),
                Some(field),
                "{server}{rest}"
            );
        }
        for server in [
            "heartbeat = \"3s\"",
            "max_request_body = \"1MiB\"",
            "max_event_bytes = \"64KiB\"",
            "server_timing = true",
            "admin_token = \"0123456789abcdef0123456789abcdef\"",
        ] {
            assert_eq!(restart_field(&base, &config(server, "")), None, "{server}");
        }
    }
}
