//! The library side of the `sluice` binary: the composition root ([`Server`]: the gateway and
//! its admin plane) and what the commands are made of, for tests to call.
#![forbid(unsafe_code)]

pub mod mcp;
mod server;

pub use server::Server;

pub mod demo;
pub mod failover;
pub mod lb;
