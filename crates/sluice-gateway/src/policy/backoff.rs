//! How long to wait before a retry: exponential backoff with full jitter (AWS's "Exponential
//! Backoff And Jitter": a uniform draw in [0, min(cap, base × 2^n)] spreads a burst of
//! failures out instead of synchronising the retries), or the provider's `Retry-After`.

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

/// The wait before retry number `n` (1 for the first retry).
pub(crate) fn full_jitter(cfg: &RetryConfig, n: u32, rng: &mut fastrand::Rng) -> Duration {
    let exp = cfg
        .backoff
        .saturating_mul(1u32 << n.saturating_sub(1).min(20));
    let cap = exp.min(cfg.max_backoff);
    let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.u64(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_under_the_cap() {
        let cfg = RetryConfig::default();
        let mut rng = fastrand::Rng::with_seed(7);
        for n in 1..40 {
            let d = full_jitter(&cfg, n, &mut rng);
            let cap = (cfg.backoff * 2u32.pow((n - 1).min(20))).min(cfg.max_backoff);
            assert!(d <= cap, "retry {n}: {d:?} > {cap:?}");
        }
    }
}
