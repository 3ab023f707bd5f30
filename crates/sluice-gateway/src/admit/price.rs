//! What a request's tokens cost: the config's `[[price]]` entries first (globs on the model,
//! first match wins, any provider), then the shipped price catalog (`sluice-ledger`'s
//! `prices.toml`, by provider and model). One pricing serves the budgets and the ledger, so a
//! key's spend in its budget counters and in its ledger records is the same number.
//!
//! Exact: prices are held in micro-dollars per million tokens and a request's cost is summed
//! in integers, rounded once (the ledger's `price`).

use std::sync::Arc;

use sluice_ledger::{Catalog, PriceEntry, Pricing, Tokens};
use sluice_providers::Usage;

use crate::config::PriceConfig;

/// The shipped catalog, parsed once per process.
pub(crate) fn shipped_catalog() -> Arc<Catalog> {
    static SHIPPED: std::sync::LazyLock<Arc<Catalog>> =
        std::sync::LazyLock::new(|| Arc::new(Catalog::shipped()));
    SHIPPED.clone()
}

/// The price list an upstream's models are priced by: its provider's, or, for an
/// OpenAI-compatible host the catalog knows, that host's.
pub(crate) fn price_list(u: &crate::config::UpstreamConfig) -> &'static str {
    use sluice_providers::ProviderKind;
    // The clouds' own lists: their model ids (`us.anthropic.claude-…-v1:0`,
    // `claude-…@2025…`) and prices are their own, and records are booked under the cloud.
    match &u.cloud {
        Some(crate::config::CloudAuth::Bedrock(_)) => return "bedrock",
        Some(crate::config::CloudAuth::Vertex(_)) => return "vertex",
        _ => {}
    }
    let host = u.base_url.host().unwrap_or_default();
    match &u.provider {
        Some(ProviderKind::Anthropic { .. }) => "anthropic",
        Some(ProviderKind::Gemini) => "gemini",
        Some(ProviderKind::OpenAi | ProviderKind::Azure { .. }) | None
            if host.ends_with("groq.com") =>
        {
            "groq"
        }
        Some(ProviderKind::OpenAi | ProviderKind::Azure { .. }) => "openai",
        None if host.ends_with("anthropic.com") => "anthropic",
        None if host.ends_with("googleapis.com") => "gemini",
        None => "openai",
    }
}

/// The prices in force: the config's, then the catalog's.
#[derive(Debug)]
pub(crate) struct Pricer {
    /// The config's entries, in file order, with their globs.
    config: Vec<(Vec<String>, PriceEntry)>,
    catalog: Arc<Catalog>,
}

impl Default for Pricer {
    fn default() -> Self {
        Pricer::new(&[], Arc::new(Catalog::shipped()))
    }
}

impl Pricer {
    pub(crate) fn new(prices: &[PriceConfig], catalog: Arc<Catalog>) -> Self {
        let config = prices
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let entry = PriceEntry {
                    id: Arc::from(format!("config/price[{i}]")),
                    provider: "*".into(),
                    models: p.models.clone(),
                    rates: p.rates,
                    tiers: Vec::new(),
                    source: None,
                    as_of: None,
                    from_config: true,
                };
                (p.models.clone(), entry)
            })
            .collect();
        Pricer { config, catalog }
    }

    /// Whether the config prices anything itself (then spend is tracked per key even
    /// without a budget).
    pub(crate) fn is_configured(&self) -> bool {
        !self.config.is_empty()
    }

    /// The pricing of `usage` on `model` served by `provider` (a price list's name:
    /// `openai`, `anthropic`, `gemini`, `groq`, ...).
    pub(crate) fn pricing(&self, provider: &str, model: &str, usage: &Usage) -> Pricing {
        let tokens = tokens(usage);
        if tokens.is_zero() {
            return Pricing::NoUsage;
        }
        let configured = self
            .config
            .iter()
            .find(|(globs, _)| globs.iter().any(|g| crate::config::glob_match(g, model)));
        match configured {
            Some((_, entry)) => match sluice_ledger::price(&tokens, entry) {
                Some(cost) => Pricing::Priced {
                    entry: entry.id.clone(),
                    cost,
                },
                None => Pricing::Unpriced,
            },
            None => self.catalog.pricing(provider, model, &tokens),
        }
    }

    /// The spend of `usage`, in micro-dollars; 0 when unpriced.
    pub(crate) fn spend_micros(&self, provider: &str, model: &str, usage: &Usage) -> u64 {
        match self.pricing(provider, model, usage) {
            Pricing::Priced { cost, .. } => u64::try_from(cost.micros).unwrap_or(0),
            Pricing::Unpriced | Pricing::NoUsage => 0,
        }
    }
}

/// The ledger's tokens for the providers' usage: the same convention (input includes the cache
/// reads and writes, output the reasoning).
pub(crate) fn tokens(u: &Usage) -> Tokens {
    Tokens {
        input: u.input,
        output: u.output,
        cache_read: u.cached_input.min(u.input),
        cache_write: u.cache_write.min(u.input),
        cache_write_1h: 0,
        reasoning: u.reasoning.min(u.output),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, cached_input: u64) -> Usage {
        Usage {
            input,
            output,
            cached_input,
            reasoning: 0,
            cache_write: 0,
        }
    }

    #[test]
    fn the_config_prices_first_then_the_catalog_and_unknown_models_are_free_of_nothing() {
        let config = sluice_config::Config::from_toml(
            "[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"u\"\n[[price]]\nmodels = [\"gpt-4o*\"]\ninput = 2.5\noutput = 10.0\ncached_input = 1.25\n",
            &|_| None,
        )
        .unwrap();
        let t = Pricer::new(&config.prices, Arc::new(Catalog::shipped()));
        // 600 × 2.5 + 400 × 1.25 + 200 × 10 = 1500 + 500 + 2000 micro-dollars.
        assert_eq!(
            t.spend_micros("openai", "gpt-4o-mini", &usage(1000, 200, 400)),
            4000
        );
        // Not in the config: the catalog prices it (Claude Sonnet 4 lists at $3 / $15).
        let sonnet = t.pricing(
            "anthropic",
            "claude-sonnet-4-20250514",
            &usage(1000, 100, 0),
        );
        match sonnet {
            Pricing::Priced { entry, cost } => {
                assert!(!entry.starts_with("config/"), "{entry}");
                assert_eq!(cost.micros, 3000 + 1500);
            }
            other => panic!("{other:?}"),
        }
        // Nobody prices it: recorded as unpriced, spend 0 (never a guess).
        assert!(matches!(
            t.pricing("openai", "no-such-model", &usage(10, 10, 0)),
            Pricing::Unpriced
        ));
        assert_eq!(
            t.spend_micros("openai", "no-such-model", &usage(10, 10, 0)),
            0
        );
        assert!(matches!(
            t.pricing("openai", "gpt-4o", &usage(0, 0, 0)),
            Pricing::NoUsage
        ));
    }
}
