//! The Sluice server: ingress, routing, the SSE relay and telemetry.
#![forbid(unsafe_code)]

pub mod config;
