//! Server-sent events, sans-I/O: bytes in, events out, and events back to bytes.
//!
//! The relay must know exactly where every event starts and ends without copying or
//! re-encoding the upstream's bytes, so this crate does no I/O and owns no sockets.
//!
//! - [`Decoder`]: an incremental, zero-copy decoder that follows the WHATWG parsing rules and
//!   reports every item with its raw bytes, so forwarding those reproduces the stream exactly.
//! - [`Encoder`]: writes events and comments with a chosen [`LineEnding`].
#![forbid(unsafe_code)]

mod decode;
mod encode;

pub use decode::{
    Comment, DecodeError, Decoder, Event, Item, LimitError, Skipped, DEFAULT_MAX_EVENT_BYTES,
    MAX_EVENT_BYTES_CEILING,
};
pub use encode::{Encoder, LineEnding, OutEvent};
