//! Why decoding stopped, and why a decoder could not be built.

use bytes::Bytes;

/// Decoding stopped. Both variants are final: after either, the decoder yields nothing more.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// An event (or a line outside any event) grew past `max_event_bytes` before its terminating
    /// blank line. Its bytes have been dropped, so the stream cannot be resumed.
    #[error(
        "an SSE event exceeded the {limit}-byte limit before its terminating blank line; \
         raise max_event_bytes if the upstream really sends events this large, otherwise the \
         upstream is not ending its events with a blank line"
    )]
    EventTooLarge {
        /// The configured `max_event_bytes`.
        limit: usize,
    },
    /// The input ended in the middle of an event or of a line: the upstream was cut off rather
    /// than finishing cleanly. Per the spec the unfinished event is not dispatched.
    #[error(
        "the SSE stream ended in the middle of an event or line ({} unfinished bytes were not \
         dispatched); the upstream or the connection was cut off before finishing the stream",
        raw.len()
    )]
    Truncated {
        /// The unfinished bytes, exactly as received, so a relay can still forward them.
        raw: Bytes,
    },
}

impl DecodeError {
    /// A short, fixed label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            DecodeError::EventTooLarge { .. } => "sse_event_too_large",
            DecodeError::Truncated { .. } => "sse_truncated",
        }
    }
}

/// A `max_event_bytes` outside the accepted range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "max_event_bytes must be between 1 and {max} bytes (64 MiB), got {got}; \
     larger events would let one upstream hold that much memory per stream"
)]
pub struct LimitError {
    /// The rejected value.
    pub got: usize,
    /// The largest accepted value, [`MAX_EVENT_BYTES_CEILING`](crate::MAX_EVENT_BYTES_CEILING).
    pub max: usize,
}
