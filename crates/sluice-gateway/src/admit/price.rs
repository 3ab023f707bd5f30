//! The price table: what a request's tokens cost, in micro-units of the table's currency.
//!
//! A price per million tokens is exactly a price in micro-units per token (2.50 per million
//! tokens = 2.5 micro-units per token), so a request's spend is a dot product, rounded once.

use sluice_providers::Usage;

use crate::config::PriceConfig;

/// The configured prices, first match wins.
#[derive(Debug, Default)]
pub(crate) struct PriceTable {
    prices: Vec<PriceConfig>,
}

impl PriceTable {
    pub(crate) fn new(prices: Vec<PriceConfig>) -> Self {
        PriceTable { prices }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// The spend of `usage` on `model`, in micro-units; 0 when no price matches.
    pub(crate) fn spend_micros(&self, model: &str, usage: &Usage) -> u64 {
        let Some(p) = self
            .prices
            .iter()
            .find(|p| p.models.iter().any(|g| crate::config::glob_match(g, model)))
        else {
            return 0;
        };
        let cached = usage.cached_input.min(usage.input);
        let fresh = usage.input - cached;
        let micros = fresh as f64 * p.input
            + cached as f64 * p.cached_input
            + usage.output as f64 * p.output;
        // Saturating: a price times a count cannot be negative; NaN is impossible (validated).
        micros.round().clamp(0.0, u64::MAX as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spend_counts_cached_input_at_its_own_price() {
        let t = PriceTable::new(vec![PriceConfig {
            models: vec!["gpt-4o*".into()],
            input: 2.5,
            output: 10.0,
            cached_input: 1.25,
        }]);
        let u = Usage {
            cache_write: 0,
            input: 1000,
            output: 200,
            cached_input: 400,
            reasoning: 0,
        };
        // 600 × 2.5 + 400 × 1.25 + 200 × 10 = 1500 + 500 + 2000
        assert_eq!(t.spend_micros("gpt-4o-mini", &u), 4000);
        assert_eq!(t.spend_micros("claude", &u), 0);
    }
}
