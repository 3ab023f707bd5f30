//! Retry settings: a route's attempts and backoff, an upstream's retry budget. The policy
//! stage of the gateway runs them.

use std::time::Duration;

/// Settings of a route's retries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryConfig {
    /// Attempts per target tier (the first included) for retryable errors, before the request
    /// falls back to the next tier. Default 2.
    pub attempts: u32,
    /// Base of the exponential backoff. Default 100 ms.
    pub backoff: Duration,
    /// Cap of one backoff. Default 2 s.
    pub max_backoff: Duration,
    /// The longest `Retry-After` honoured by waiting; a longer one (or one past the
    /// request's deadline) sends the request to the next tier at once. Default 10 s.
    pub max_retry_after: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            attempts: 2,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            max_retry_after: Duration::from_secs(10),
        }
    }
}

/// Settings of a retry budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetConfig {
    /// Retries allowed per request over the window (0.2: one retry per five requests).
    /// Default 0.2.
    pub ratio: f64,
    /// Retries always allowed per second, whatever the traffic. Default 10.
    pub min_per_second: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            ratio: 0.2,
            min_per_second: 10,
        }
    }
}
