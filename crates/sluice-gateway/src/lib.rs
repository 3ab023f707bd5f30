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
/// The access log (`sluice-telemetry`), under the name the gateway's API has always used.
pub use sluice_telemetry::access_log;

mod admin;
pub mod admit;
mod body_budget;
mod client_ip;
mod clock;
pub mod error;
mod generation;
pub mod head;
mod headers;
mod ingress;
mod outbound;
mod outcome;
mod policy;
mod probe;
mod relay;
pub mod reload;
mod request;
pub mod route;
mod targets;
pub mod workers;

pub use ingress::{Gateway, ReloadHandle, StartError};
pub use reload::{ConfigSource, Overrides, ReloadError, ReloadOutcome};
