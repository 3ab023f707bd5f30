//! The seam between the admin plane and the gateway: what the admin plane may ask, answered
//! with plain snapshots. The `sluice` binary implements it over the gateway's `AdminView`.
//!
//! NOTE: a trait, not the gateway's view type, because `sluice-admin` must not depend on the
//! data plane (the layering puts it beside the gateway, on config and telemetry only). Its
//! calls are off the request path (a scrape, a dashboard tick), so the `dyn` costs nothing
//! that matters.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use sluice_config::Config;
use sluice_telemetry::view::{AdminReply, GenerationView, Readiness};
use sluice_telemetry::Telemetry;

/// A boxed answer to come.
pub type Pending = Pin<Box<dyn Future<Output = AdminReply> + Send>>;

/// What the admin plane reads of a running gateway. Every call is about the config
/// generation in force at that moment.
pub trait AdminSource: Send + Sync + 'static {
    /// The config in force (its admin token guards every admin path but the open ones).
    fn config(&self) -> Arc<Config>;
    /// Which config runs, and whether shutdown has begun.
    fn generation(&self) -> GenerationView;
    /// The metrics registry and the dashboard's live counters.
    fn telemetry(&self) -> Arc<Telemetry>;
    /// `GET /readyz`'s verdict.
    fn readiness(&self) -> Readiness;
    /// `GET /admin/pools`.
    fn pools(&self) -> Value;
    /// `GET /admin/targets`.
    fn targets(&self) -> Value;
    /// Requests waiting for an upstream connection or stream slot.
    fn pending(&self) -> usize;
    /// `POST /admin/reload`.
    fn reload(&self) -> Pending;
    /// `GET /admin/keys{rest}`.
    fn keys(&self, rest: &str) -> Pending;
    /// `GET /admin/usage?{query}`: the ledger's totals (JSON, or CSV with `format=csv`).
    fn usage(&self, query: &str) -> Pending;
    /// `/admin/cache?{query}`: `GET` the response cache's counters, `DELETE` purges a route
    /// (`?route=`) or a key's namespace (`?key=`).
    fn cache(&self, method: &http::Method, query: &str) -> Pending;
    /// `GET /admin/mcp`: the MCP gateway's servers, their health and tool counts; `None` when
    /// no MCP gateway is mounted.
    fn mcp(&self) -> Option<Value>;
}
