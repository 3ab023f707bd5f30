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

pub mod admit;
mod body_budget;
mod clock;
pub mod control;
mod ctx;
mod edge;
pub mod error;
mod gateway;
mod generation;
mod headers;
mod outbound;
mod outcome;
mod policy;
mod probe;
mod relay;
mod request;
pub mod route;
pub mod workers;

pub use control::AdminView;
pub use control::{ConfigSource, Overrides, ReloadError, ReloadOutcome};
pub use gateway::{Gateway, ReloadHandle, StartError};
