//! How long to wait before a retry: exponential backoff with full jitter (AWS's "Exponential
//! Backoff And Jitter": a uniform draw in [0, min(cap, base × 2^n)] spreads a burst of
//! failures out instead of synchronising the retries), or the provider's `Retry-After`.

use std::time::Duration;

pub use crate::config::RetryConfig;

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
