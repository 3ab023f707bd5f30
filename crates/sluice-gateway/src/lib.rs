//! The Sluice gateway: the data plane (accept, admit, route, attempt, relay) and its control
//! (reload). The admin plane (`sluice-admin`) sits beside it and reads it through
//! [`AdminView`]; the `sluice` binary composes the two.
//!
//! A request meets the modules in this order (each uses only those after it; the layers are
//! written down in `docs/layers.toml` and checked by `crates/sluice/tests/layers.rs`):
//! - [`Gateway`] (`gateway`) and `control` (reload, `--watch`, [`AdminView`]);
//! - `edge`: accept, TLS, protocol, connection limits and timeouts, the client's address;
//! - `request`: admission (endpoint, bounded body, model → route, key, idempotency, limits),
//!   then the attempts and the answer; every error response is built in `request::reply`;
//! - `relay`: a stream's response (hold the preamble, commit at first content, forward);
//! - `policy`: the attempt loop (classify, retry, back off, fall back);
//! - `outbound`: one attempt's request (translation, headers, auth; Bedrock's SigV4 signature,
//!   Vertex AI's paths);
//! - `generation`: one config's worth of state (upstreams by `UpstreamId`, balancers, keys, the
//!   cloud upstreams' access tokens and their refresh tasks);
//! - [`route`]: endpoints, a route's targets, the fuzzed request head;
//! - `ctx` (the client's request, read once) and `outcome` (the `Finish` guard that settles the
//!   key's ticket, then the telemetry record, exactly once);
//! - `probe` (the body's routing fields), [`error`] (the gateway's errors, mapped to status and
//!   body in one place), `guard` (a route's guardrails: input checks, output checks of
//!   bodies and streams, external checkers), [`admit`] (keys, limits, budgets, idempotency);
//! - leaves: `headers`, `clock`, `body_budget`, [`workers`], [`mount`] (services on the
//!   listener beside the model API, such as the MCP gateway).
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

// The handle and its control.
pub mod control;
mod gateway;

// The stages, in the order a request meets them.
mod edge;

mod request;

mod relay;
/// Resumable streams and background responses.
mod resume;

mod policy;

mod outbound;

mod generation;

pub mod route;

mod ctx;
mod outcome;

mod probe;

pub mod error;

mod guard;

pub mod admit;

// Leaves.
mod body_budget;
mod clock;
mod headers;
pub mod mount;
pub mod workers;

pub use control::AdminView;
pub use control::{ConfigSource, Overrides, ReloadError, ReloadOutcome};
pub use gateway::{Gateway, ReloadHandle, StartError};
pub use mount::{Mount, MountBody, MountCaller, MountFuture, MountedBody};
