//! The composition root: the gateway (the data plane) and its admin plane beside it, started
//! together and stopped together. The admin plane reads the gateway only through the
//! gateway's [`AdminView`], adapted here to `sluice-admin`'s [`AdminSource`]. The MCP gateway
//! (`sluice-mcp`), when `[mcp]` has servers, is mounted on the gateway's listener at `/mcp`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_admin::{AdminHandle, AdminSource};
use sluice_config::Config;
use sluice_gateway::workers::Workers;
use sluice_gateway::Mount;

use crate::mcp::McpMount;
use sluice_gateway::{
    AdminView, ConfigSource, Gateway, ReloadError, ReloadHandle, ReloadOutcome, StartError,
};
use sluice_telemetry::view::{GenerationView, Readiness};
use sluice_telemetry::Telemetry;
use tokio_util::sync::CancellationToken;

/// A running Sluice: the gateway and its admin plane (`/metrics`, `/admin/*`, `/readyz`, the
/// dashboard), on their own listeners.
#[derive(Debug)]
pub struct Server {
    gateway: Gateway,
    /// Stops when the server is dropped or has shut down; it answers (`/readyz` says
    /// draining) while the gateway drains.
    admin: AdminHandle,
}

impl Server {
    /// Starts the gateway on the current runtime, then its admin plane. Without a config
    /// file, a reload answers [`ReloadError::NoSource`]: see [`Server::start_with_source`].
    ///
    /// # Errors
    /// [`StartError`]: an address taken (the gateway's or the admin plane's), TLS files that
    /// do not load, an upstream's settings rejected.
    pub async fn start(config: Config) -> Result<Server, StartError> {
        Server::launch(config, None, None).await
    }

    /// [`Server::start`] with the file `config` was read from, which a reload reads again.
    ///
    /// # Errors
    /// As [`Server::start`].
    pub async fn start_with_source(
        config: Config,
        source: ConfigSource,
    ) -> Result<Server, StartError> {
        Server::launch(config, Some(source), None).await
    }

    /// [`Server::start_with_source`] (or [`Server::start`] without a file), serving client
    /// connections on `workers`' threads (what `sluice serve` does): see
    /// [`Gateway::start_on_workers`].
    ///
    /// # Errors
    /// As [`Server::start`].
    pub async fn start_on_workers(
        config: Config,
        source: Option<ConfigSource>,
        workers: Arc<Workers>,
    ) -> Result<Server, StartError> {
        Server::launch(config, source, Some(workers)).await
    }

    /// The MCP gateway (when `[mcp]` has servers) mounted at `/mcp`, then the gateway, then
    /// the admin plane.
    async fn launch(
        config: Config,
        source: Option<ConfigSource>,
        workers: Option<Arc<Workers>>,
    ) -> Result<Server, StartError> {
        let admin = config.server.admin_addr();
        let mcp = McpMount::build(&config).map_err(|e| StartError::Mount {
            section: "mcp",
            reason: e.to_string(),
        })?;
        let mounts: Vec<Arc<dyn Mount>> = match &mcp {
            Some(m) => vec![m.clone() as Arc<dyn Mount>],
            None => Vec::new(),
        };
        let gateway = Gateway::start_mounted(config, source, workers, mounts).await?;
        if let Some(m) = &mcp {
            m.observe(gateway.telemetry().clone());
        }
        Server::compose(gateway, admin, mcp).await
    }

    async fn compose(
        gateway: Gateway,
        admin_addr: SocketAddr,
        mcp: Option<Arc<McpMount>>,
    ) -> Result<Server, StartError> {
        let view: Arc<dyn AdminSource> = Arc::new(View {
            gateway: gateway.admin_view(),
            mcp,
        });
        let admin = sluice_admin::start(view, admin_addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: admin_addr,
                source,
            })?;
        Ok(Server { gateway, admin })
    }

    /// The gateway's bound address.
    pub fn addr(&self) -> SocketAddr {
        self.gateway.addr()
    }

    /// The admin plane's bound address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin.addr()
    }

    /// The gateway.
    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// The metrics registry.
    pub fn telemetry(&self) -> &Arc<Telemetry> {
        self.gateway.telemetry()
    }

    /// See [`Gateway::reload`].
    ///
    /// # Errors
    /// [`ReloadError`]: the running config stays in force.
    pub async fn reload(&self) -> Result<ReloadOutcome, ReloadError> {
        self.gateway.reload().await
    }

    /// See [`Gateway::reload_handle`].
    pub fn reload_handle(&self) -> ReloadHandle {
        self.gateway.reload_handle()
    }

    /// See [`Gateway::watch_config`].
    pub fn watch_config(&mut self, every: Duration) {
        self.gateway.watch_config(every);
    }

    /// See [`Gateway::stop_token`].
    pub fn stop_token(&self) -> CancellationToken {
        self.gateway.stop_token()
    }

    /// Graceful shutdown of the gateway (see [`Gateway::shutdown`]); the admin plane stops
    /// after it.
    pub async fn shutdown(self) {
        self.gateway.shutdown().await;
    }

    /// Waits until the gateway has stopped; the admin plane stops with it.
    pub async fn wait(self) {
        self.gateway.wait().await;
    }
}

/// The gateway's view (and the MCP gateway's, when mounted), as the admin plane asks for it.
struct View {
    gateway: AdminView,
    mcp: Option<Arc<McpMount>>,
}

impl AdminSource for View {
    fn config(&self) -> Arc<Config> {
        self.gateway.config()
    }

    fn generation(&self) -> GenerationView {
        self.gateway.generation()
    }

    fn telemetry(&self) -> Arc<Telemetry> {
        self.gateway.telemetry()
    }

    fn readiness(&self) -> Readiness {
        self.gateway.readiness()
    }

    fn pools(&self) -> Value {
        self.gateway.pools()
    }

    fn targets(&self) -> Value {
        self.gateway.targets()
    }

    fn pending(&self) -> usize {
        self.gateway.pending()
    }

    fn reload(&self) -> sluice_admin::Pending {
        Box::pin(self.gateway.reload())
    }

    fn keys(&self, rest: &str) -> sluice_admin::Pending {
        Box::pin(self.gateway.keys(rest))
    }

    fn usage(&self, query: &str) -> sluice_admin::Pending {
        Box::pin(self.gateway.usage(query))
    }

    fn cache(&self, method: &http::Method, query: &str) -> sluice_admin::Pending {
        Box::pin(self.gateway.cache(method, query))
    }

    fn mcp(&self) -> Option<Value> {
        self.mcp.as_ref().map(|m| m.admin_snapshot())
    }
}
