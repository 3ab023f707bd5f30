//! Server-sent events, sans-I/O: bytes in, events out, and events back to bytes.
//!
//! The relay must know exactly where every event starts and ends without copying or
//! re-encoding the upstream's bytes, so this crate does no I/O and owns no sockets.
#![forbid(unsafe_code)]

mod encode;

pub use encode::{Encoder, LineEnding, OutEvent};
