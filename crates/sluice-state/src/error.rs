//! The errors of the state store: a shared store that did not answer, or a request the store
//! cannot take. Refusals by a limit are not errors (see [`crate::Refusal`]).

use std::time::Duration;

/// Why a state operation failed.
///
/// With [`crate::FailureMode::FailOpen`] (the default) the store answers from local memory
/// instead of returning the first three variants for admissions and idempotency; with
/// [`crate::FailureMode::FailClosed`] the gateway maps them to 503.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The shared store did not answer within the configured call deadline.
    #[error("the shared state store did not answer within {0:?}")]
    Timeout(Duration),
    /// The shared store is marked down (recent calls failed); it is probed in the background and
    /// used again as soon as it answers.
    #[error("the shared state store is unavailable")]
    Unavailable,
    /// The shared store answered with an error, or the connection failed.
    #[error("the shared state store failed: {0}")]
    Redis(#[source] redis::RedisError),
    /// The in-memory store holds its configured maximum of live entries (see
    /// [`crate::MemoryConfig::max_entries`]); expired entries were swept first.
    #[error("the in-memory state store is full ({0} live entries)")]
    MemoryFull(usize),
    /// A check the gateway built is unusable (a zero limit or period); a configuration bug.
    #[error("invalid limit check: {0}")]
    InvalidCheck(&'static str),
    /// An `Idempotency-Key` or its scope is empty or longer than [`crate::MAX_IDEMPOTENCY_KEY_LEN`].
    #[error("the idempotency key must be 1 to 255 bytes")]
    InvalidIdempotencyKey,
    /// A record read back from the shared store does not decode (written by another version?).
    #[error("a record in the shared state store is corrupt: {0}")]
    Corrupt(&'static str),
}

impl StateError {
    /// A low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            StateError::Timeout(_) => "state_timeout",
            StateError::Unavailable => "state_unavailable",
            StateError::Redis(_) => "state_error",
            StateError::MemoryFull(_) => "state_memory_full",
            StateError::InvalidCheck(_) => "state_invalid_check",
            StateError::InvalidIdempotencyKey => "invalid_idempotency_key",
            StateError::Corrupt(_) => "state_corrupt",
        }
    }

    /// True when the store could not be reached or was full: the gateway answers 503 (retryable).
    /// False for [`StateError::InvalidCheck`] (a bug: 500) and
    /// [`StateError::InvalidIdempotencyKey`] (the client's fault: 400).
    pub fn is_unavailable(&self) -> bool {
        !matches!(
            self,
            StateError::InvalidCheck(_) | StateError::InvalidIdempotencyKey
        )
    }
}
