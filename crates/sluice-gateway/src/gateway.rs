//! The data plane's handle: start (the listener, the first generation, the edge), reload,
//! shutdown. The admin plane is not started here: it sits beside the gateway and reads it
//! through [`Gateway::admin_view`]; the `sluice` binary composes the two.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::config::Config;
use crate::control::{
    AdminView, ConfigSource, ReloadError, ReloadMetrics, ReloadOutcome, Reloader,
};
use crate::edge::EdgeSetup;
use crate::generation::{build, GenerationCell, Parts, Shared};
use sluice_telemetry::Telemetry;

/// Why the gateway could not start. Nothing is left half-started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The listener's TLS files are unusable.
    #[error("server.tls: {0}")]
    Tls(String),
    /// An upstream's settings were rejected.
    #[error("{0}")]
    Upstream(#[from] sluice_upstream::UpstreamConfigError),
    /// A route's balancer settings were rejected.
    #[error("{0}")]
    Balance(#[from] sluice_upstream::BalanceConfigError),
    /// The access log's file cannot be opened.
    #[error("server.access_log: cannot open {sink}")]
    AccessLog {
        /// The sink as configured.
        sink: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The admin address is reachable from other hosts and no `server.admin_token` is set.
    #[error("server.admin_listen: {0} is not loopback: set server.admin_token")]
    AdminUnprotected(SocketAddr),
    /// The state store's settings were rejected.
    #[error("state: {0}")]
    State(#[from] sluice_state::ConfigError),
    /// The ledger's sink could not be opened (a SQLite file that cannot be created, a
    /// PostgreSQL schema newer than this build).
    #[error("ledger: {0}")]
    Ledger(#[from] sluice_ledger::SinkError),
    /// A service to mount on the listener could not be built (its config section and why).
    #[error("{section}: {reason}")]
    Mount {
        /// The config section (`mcp`).
        section: &'static str,
        /// What is wrong, as the service says it.
        reason: String,
    },
}

impl From<crate::generation::BuildError> for StartError {
    fn from(e: crate::generation::BuildError) -> Self {
        match e {
            crate::generation::BuildError::Upstream(e) => StartError::Upstream(e),
            crate::generation::BuildError::Balance(e) => StartError::Balance(e),
        }
    }
}

/// A running gateway.
#[derive(Debug)]
pub struct Gateway {
    addr: SocketAddr,
    telemetry: Arc<Telemetry>,
    reloader: Arc<Reloader>,
    /// Stops the config file's watch (`--watch`) when the gateway is dropped.
    watcher: Option<DropGuard>,
    stop: CancellationToken,
    task: JoinHandle<()>,
    /// The ledger's writer, flushed within the shutdown grace when the gateway stops.
    ledger: Option<sluice_ledger::Ledger>,
    /// The ledger's sink for usage queries (its own connections, beside the writer's).
    usage: Option<Arc<sluice_ledger::Sink>>,
    grace: Duration,
}

/// Reloads a running gateway's config; a clone of the gateway's (for signal handlers).
#[derive(Clone, Debug)]
pub struct ReloadHandle(Arc<Reloader>);

impl ReloadHandle {
    /// Reads the config file again and applies it: see [`Gateway::reload`].
    ///
    /// # Errors
    /// [`ReloadError`]: the running config stays.
    pub async fn reload(&self) -> Result<ReloadOutcome, ReloadError> {
        self.0.reload().await
    }
}

impl Gateway {
    /// Builds the upstreams, binds the listener and starts serving on the current runtime.
    /// Without a config file, [`Gateway::reload`] (and `POST /admin/reload`) answer
    /// [`ReloadError::NoSource`]: see [`Gateway::start_with_source`].
    ///
    /// # Errors
    /// [`StartError`] if the address is taken, the TLS files do not load, or an upstream's
    /// settings are rejected.
    pub async fn start(config: Config) -> Result<Gateway, StartError> {
        Gateway::launch(config, None, None, Vec::new()).await
    }

    /// [`Gateway::start`] with the file `config` was read from, which a reload reads again.
    ///
    /// # Errors
    /// As [`Gateway::start`].
    pub async fn start_with_source(
        config: Config,
        source: ConfigSource,
    ) -> Result<Gateway, StartError> {
        Gateway::launch(config, Some(source), None, Vec::new()).await
    }

    /// [`Gateway::start_with_source`] (or [`Gateway::start`] without a file), serving each
    /// client connection on one of `workers`'
    /// threads instead of the current runtime (what `sluice serve` does; see
    /// [`Workers`](crate::workers::Workers)). The accept loop, the admin plane and the
    /// background tasks stay on the current runtime. Keep `workers` until
    /// [`Gateway::wait`] or [`Gateway::shutdown`] has returned.
    ///
    /// # Errors
    /// As [`Gateway::start`].
    pub async fn start_on_workers(
        config: Config,
        source: Option<ConfigSource>,
        workers: Arc<crate::workers::Workers>,
    ) -> Result<Gateway, StartError> {
        Gateway::launch(config, source, Some(workers), Vec::new()).await
    }

    /// [`Gateway::start_on_workers`] (on the current runtime without `workers`), with services
    /// mounted on the listener beside the model API (the MCP gateway at `/mcp`; see
    /// [`Mount`](crate::Mount)). Each is attached (metrics, ledger) before the listener serves.
    ///
    /// # Errors
    /// As [`Gateway::start`].
    pub async fn start_mounted(
        config: Config,
        source: Option<ConfigSource>,
        workers: Option<Arc<crate::workers::Workers>>,
        mounts: Vec<Arc<dyn crate::Mount>>,
    ) -> Result<Gateway, StartError> {
        Gateway::launch(config, source, workers, mounts).await
    }

    async fn launch(
        config: Config,
        source: Option<ConfigSource>,
        workers: Option<Arc<crate::workers::Workers>>,
        mounts: Vec<Arc<dyn crate::Mount>>,
    ) -> Result<Gateway, StartError> {
        let tls = config
            .server
            .tls
            .as_ref()
            .map(crate::edge::tls_acceptor)
            .transpose()
            .map_err(StartError::Tls)?;
        let listen = config.server.listen;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: listen,
            source,
        })?;
        let admin_addr = config.server.admin_addr();
        if config.server.check_admin_exposure().is_err() {
            return Err(StartError::AdminUnprotected(admin_addr));
        }
        let mut telemetry = Telemetry::new();
        telemetry
            .start_access_log(
                &config.server.access_log,
                config.server.log_format,
                config.server.access_log_queue,
            )
            .map_err(|source| StartError::AccessLog {
                sink: format!("{:?}", config.server.access_log),
                source,
            })?;
        telemetry.start_tracer(&config.telemetry);
        // Registered once, filled by each generation.
        let pools = sluice_telemetry::pools::PoolCollector::new(Vec::new());
        telemetry.register_pools(pools.clone());
        let reload_metrics = ReloadMetrics::register(telemetry.registry_mut());
        let keys = crate::admit::Keys::start(&config).await?;
        keys.register_metrics(telemetry.registry_mut());
        let grace = config.server.shutdown_grace;
        let edge = EdgeSetup::new(&config.server, telemetry.registry_mut());
        let (ledger, usage) = match start_ledger(&config, source.as_ref()).await? {
            Some((l, u)) => (Some(l), u),
            None => (None, None),
        };
        if let Some(l) = &ledger {
            telemetry
                .registry_mut()
                .register_collector(Box::new(LedgerCollector(l.handle())));
        }
        let books = ledger.as_ref().map(|l| l.handle());
        for m in &mounts {
            m.attach(telemetry.registry_mut(), books.as_ref());
        }
        let telemetry = Arc::new(telemetry);
        let shared = Arc::new(Shared::new(books, crate::mount::Mounts::new(mounts)));
        let parts = Parts {
            telemetry: telemetry.clone(),
            keys,
            shared: shared.clone(),
            version: 1,
        };
        let (state, _) = build(config, None, parts)?;
        pools.set(state.pool_list());
        let cell = Arc::new(GenerationCell::from_pointee(state));
        let reloader = Arc::new(Reloader::new(cell.clone(), source, pools, reload_metrics));
        let ingress = edge.into_ingress(cell, &shared);
        let stop = CancellationToken::new();
        let task = tokio::spawn(crate::edge::serve(
            listener,
            tls,
            ingress,
            workers,
            stop.clone(),
            grace,
        ));
        Ok(Gateway {
            addr,
            telemetry,
            reloader,
            watcher: None,
            stop,
            task,
            ledger,
            usage,
            grace,
        })
    }

    /// Reads the config file again and, if it is valid and needs no restart, applies it to new
    /// requests; requests already running finish on the config they started with. What
    /// `SIGHUP`, `POST /admin/reload` and `--watch` do.
    ///
    /// # Errors
    /// [`ReloadError`]: invalid (with the field and reason), a setting that needs a restart,
    /// or no config file. The running config stays in force.
    pub async fn reload(&self) -> Result<ReloadOutcome, ReloadError> {
        self.reloader.reload().await
    }

    /// A handle that reloads this gateway's config (for signal handlers).
    pub fn reload_handle(&self) -> ReloadHandle {
        ReloadHandle(self.reloader.clone())
    }

    /// Polls the config file every `every` and reloads it when it has changed (and stayed
    /// the same for one more poll, so a file caught half-written is not loaded). Stops when
    /// the gateway shuts down or is dropped. Does nothing without a config file.
    pub fn watch_config(&mut self, every: Duration) {
        let stop = self.stop.child_token();
        tokio::spawn(crate::control::watch_file(
            self.reloader.clone(),
            every,
            stop.clone(),
        ));
        self.watcher = Some(stop.drop_guard());
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the admin plane may see of this gateway (`sluice-admin` serves it; the `sluice`
    /// binary composes the two).
    pub fn admin_view(&self) -> AdminView {
        AdminView::new(self.reloader.clone(), self.usage.clone())
    }

    /// The metrics registry.
    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    /// Graceful shutdown: stop accepting, GOAWAY to HTTP/2 clients, let streams run for up to
    /// `shutdown_grace`, then end the rest with an error event. Returns when every connection
    /// has closed.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
        if let Some(l) = self.ledger {
            l.shutdown(self.grace).await;
        }
    }

    /// A handle that starts the graceful shutdown when cancelled (for signal handlers).
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Waits until the gateway has stopped.
    pub async fn wait(self) {
        let _ = self.task.await;
        if let Some(l) = self.ledger {
            l.shutdown(self.grace).await;
        }
    }
}

/// The ledger for `config`: as `[ledger]` says, with a relative SQLite path taken from the
/// config file's directory; without `[ledger]`, the default sink (SQLite next to the config
/// file) when there is a file, and none for a config in memory (tests, embedders), which has
/// no place for one.
/// Also a second sink on the same store for usage queries (`None` for one that cannot answer
/// them: OTLP).
async fn start_ledger(
    config: &Config,
    source: Option<&ConfigSource>,
) -> Result<Option<StartedLedger>, StartError> {
    let dir = source.and_then(|s| s.path.parent()).map(|p| {
        if p.as_os_str().is_empty() {
            std::path::Path::new(".")
        } else {
            p
        }
    });
    let (cfg, dir, explicit) = match (&config.ledger, dir) {
        (Some(l), dir) => (l.clone(), dir.unwrap_or(std::path::Path::new(".")), true),
        (None, Some(dir)) => (sluice_ledger::LedgerConfig::default(), dir, false),
        (None, None) => return Ok(None),
    };
    if cfg.sink == sluice_ledger::SinkConfig::None {
        return Ok(None);
    }
    // OTLP logs go to the collector `[telemetry]` sends traces to.
    let otlp = match (
        &cfg.sink,
        sluice_telemetry::trace::poster(&config.telemetry, "/v1/logs"),
    ) {
        (sluice_ledger::SinkConfig::Otlp, Some(Ok(post))) => Some(post),
        (sluice_ledger::SinkConfig::Otlp, Some(Err(e))) => return Err(StartError::Upstream(e)),
        _ => None,
    };
    match sluice_ledger::Sink::open(&cfg.sink, dir, otlp).await {
        Ok(sink) => {
            tracing::info!(sink = sink.kind(), "ledger: recording every request");
            let queries = match cfg.sink {
                sluice_ledger::SinkConfig::Otlp => None,
                _ => sluice_ledger::Sink::open(&cfg.sink, dir, None)
                    .await
                    .ok()
                    .map(Arc::new),
            };
            Ok(Some((sluice_ledger::Ledger::start(&cfg, sink), queries)))
        }
        Err(e) if explicit => Err(e.into()),
        // The default sink only: a config directory that cannot take the file (a read-only
        // mount) must not stop a gateway that never asked for a ledger.
        Err(e) => {
            tracing::warn!(
                error = %e,
                "ledger: the default SQLite file next to the config cannot be opened; running \
                 without a ledger (set [ledger] sink to a writable path)"
            );
            Ok(None)
        }
    }
}

/// The ledger's writer and its query sink.
type StartedLedger = (sluice_ledger::Ledger, Option<Arc<sluice_ledger::Sink>>);

/// `sluice_ledger_records_total{outcome}` and `sluice_ledger_queued`, read at scrape time.
#[derive(Debug)]
struct LedgerCollector(sluice_ledger::LedgerHandle);

impl prometheus_client::collector::Collector for LedgerCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let s = self.0.stats();
        let mut records = encoder.encode_descriptor(
            "ledger_records",
            "Request records by outcome: written, dropped (queue full, sink failed, closed), \
             lost at shutdown; unpriced ones counted apart",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (outcome, n) in [
            ("written", s.written),
            ("dropped_full", s.dropped_full),
            ("dropped_sink", s.dropped_sink),
            ("dropped_closed", s.dropped_closed),
            ("lost_at_shutdown", s.lost_at_shutdown),
            ("unpriced", s.unpriced),
        ] {
            ConstCounter::new(n).encode(records.encode_family(&[("outcome", outcome)])?)?;
        }
        let queued = encoder.encode_descriptor(
            "ledger_queued",
            "Request records waiting for the ledger's writer",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        ConstGauge::new(i64::try_from(s.queued).unwrap_or(i64::MAX)).encode(queued)?;
        Ok(())
    }
}
