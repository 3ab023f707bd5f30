//! The Sluice server: ingress, routing, the SSE relay and telemetry.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = sluice_gateway::config::Config::load("sluice.toml".as_ref())?;
//! let gateway = sluice_gateway::Gateway::start(config).await?;
//! println!("listening on {}", gateway.addr());
//! gateway.wait().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

/// The configuration (`sluice-config`), under the name the gateway's API has always used.
pub use sluice_config as config;

pub mod access_log;
mod admin;
mod body_budget;
mod client_ip;
pub mod error;
pub mod head;
mod headers;
mod ingress;
pub mod keys;
mod live;
mod metric_handles;
mod models;
mod outbound;
mod policy;
mod pools;
mod probe;
mod proxy;
mod relay;
pub mod reload;
pub mod route;
mod targets;
pub mod telemetry;
pub mod trace;
mod untrusted;
pub mod workers;

pub use ingress::{Gateway, ReloadHandle, StartError};
pub use reload::{ConfigSource, Overrides, ReloadError, ReloadOutcome};
