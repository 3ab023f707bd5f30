//! Load generation for Sluice on our own upstream client, so a run holds real connections the
//! way the gateway does and measures what matters for LLM traffic: time to first byte and first
//! event, gaps between events, and how fast a client's departure reaches the upstream.
#![forbid(unsafe_code)]

pub mod stream;
pub mod summary;

pub use stream::{StreamOpts, StreamReport};
pub use summary::Summary;

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The target URL is unusable.
    #[error("bad URL: {0}")]
    Url(String),
    /// The client could not be built.
    #[error("cannot build the client: {0}")]
    Client(String),
    /// The mock's stats could not be read.
    #[error("cannot read the mock's stats: {0}")]
    Stats(String),
}
