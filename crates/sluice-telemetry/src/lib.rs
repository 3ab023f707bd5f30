//! What the gateway tells about itself. Telemetry observes; it never changes what flows, and
//! it decides nothing (a key's spend is settled by the gateway and handed to the record).
//!
//! Modules, in the order a request meets them:
//! - [`end_reason`]: how a request ended, the one vocabulary of outcomes ([`EndReason::ALL`]
//!   is what every table iterates);
//! - [`record`]: one request's record, written by the request path as it goes and finished
//!   exactly once: then it feeds
//! - [`metrics`] (the Prometheus registry, with `metric_handles` for the families counted on
//!   every request), [`live`] (the dashboard's counters and latency windows), [`trace`]
//!   (OpenTelemetry spans, exported over OTLP/HTTP) and [`access_log`] (one line per request,
//!   written by its own thread);
//! - [`pools`]: the upstream pools' metrics, read at scrape time;
//! - [`untrusted`]: how client-supplied text is capped and escaped before it is logged or
//!   echoed;
//! - [`view`]: the plain snapshots the admin plane reads (readiness, which config runs).
#![forbid(unsafe_code)]

pub mod access_log;
pub mod end_reason;
pub mod live;
mod metric_handles;
pub mod metrics;
pub mod pools;
pub mod record;
pub mod trace;
pub mod untrusted;
pub mod view;

pub use end_reason::EndReason;
pub use metrics::Telemetry;
pub use record::{AttemptLog, KeyFacts, RequestRecord};
