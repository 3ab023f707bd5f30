//! Load generation for Sluice on our own upstream client, so a run holds real connections the
//! way the gateway does and measures what matters for LLM traffic: time to first byte and first
//! event, gaps between events, how fast a client's departure reaches the upstream, latency
//! under a fixed load or arrival rate, how short calls fare next to long streams, and one chat
//! request judged as its client would (for the scenarios that start their own gateway).
#![forbid(unsafe_code)]

pub mod chat;
mod client;
pub mod failure;
pub mod probe;
pub mod progress;
pub mod report;
pub mod rps;
pub mod stream;
pub mod summary;
pub mod timeline;

pub use chat::ChatResult;
pub use failure::{check_error_rate, Causes, Failure, TooManyFailures, DEFAULT_MAX_ERROR_RATE};
pub use probe::{ProbeOpts, ProbeReport};
pub use progress::Progress;
pub use report::{Mark, Page, Section};
pub use rps::{Load, RpsOpts, RpsReport};
pub use stream::{StreamOpts, StreamReport};
pub use summary::Summary;
pub use timeline::Sample;

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The target URL is unusable.
    #[error("bad URL: {0}")]
    Url(String),
    /// The client could not be built.
    #[error("cannot build the client: {0}")]
    Client(String),
    /// The options contradict each other or are out of range.
    #[error("bad options: {0}")]
    Options(String),
    /// The mock's stats could not be read.
    #[error("cannot read the mock's stats: {0}")]
    Stats(String),
}
