//! The library side of the `sluice` binary: what its commands are made of, for tests to call.
#![forbid(unsafe_code)]

pub mod demo;
pub mod failover;
pub mod lb;
