//! The price catalog: list prices per (provider, model), shipped in `prices.toml` and
//! overridden or extended by the config's `[[price]]` entries, and the exact cost of a
//! request's [`Tokens`].
//!
//! Money is integers throughout. A price of "$X per million tokens" is held as X micro-dollars
//! per million tokens, which is the same number as pico-dollars per token, so a price with up
//! to six decimals (`$0.0375`) is exact. A request's cost is the sum over token kinds of
//! `count × pico-dollars`, in `u128` (no overflow for any real count), rounded **once**, half
//! up, to whole micro-dollars. Nothing is rounded per token kind, so the sum of the parts never
//! drifts from the whole.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::record::{Cost, Pricing, Tokens};

/// The catalog shipped with Sluice.
pub const SHIPPED_PRICES: &str = include_str!("prices.toml");

/// A price in micro-dollars per million tokens (= pico-dollars per token).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(pub u64);

impl Rate {
    /// Parses a decimal number of dollars per million tokens (`"2.50"`, `"0.0375"`), exactly;
    /// at most six decimals.
    pub fn parse_usd_per_million(s: &str) -> Result<Rate, String> {
        let t = s.trim();
        let (int, frac) = t.split_once('.').unwrap_or((t, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(format!(
                "`{s}` is not a price; write dollars per million tokens, e.g. 2.50"
            ));
        }
        let frac_digits = frac.trim_end_matches('0');
        if frac_digits.len() > 6 {
            return Err(format!(
                "`{s}` has more than six decimals; prices are kept to the micro-dollar per \
                 million tokens"
            ));
        }
        let whole: u64 = if int.is_empty() {
            0
        } else {
            int.parse()
                .map_err(|_| format!("`{s}` is too large for a price"))?
        };
        let mut micros: u64 = 0;
        for (i, d) in frac_digits.bytes().enumerate() {
            micros += u64::from(d - b'0') * 10u64.pow(5 - i as u32);
        }
        whole
            .checked_mul(1_000_000)
            .and_then(|w| w.checked_add(micros))
            .map(Rate)
            .ok_or_else(|| format!("`{s}` is too large for a price"))
    }
}

impl fmt::Display for Rate {
    /// Dollars per million tokens, without trailing zeros beyond the cents: `2.50`, `0.0375`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / 1_000_000;
        let frac = format!("{:06}", self.0 % 1_000_000);
        let trimmed = frac.trim_end_matches('0');
        let shown = if trimmed.len() < 2 {
            &frac[..2]
        } else {
            trimmed
        };
        write!(f, "{whole}.{shown}")
    }
}

impl<'de> Deserialize<'de> for Rate {
    /// A TOML number (`2.5`) or string (`"2.50"`) of dollars per million tokens. A float is
    /// read through its shortest decimal spelling, which is what was written in the file.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a price in dollars per million tokens, e.g. 2.50")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Rate, E> {
                Rate::parse_usd_per_million(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Rate, E> {
                if v < 0 {
                    return Err(E::custom(format!("{v} is negative; a price is at least 0")));
                }
                self.visit_u64(v as u64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Rate, E> {
                if !v.is_finite() || v < 0.0 {
                    return Err(E::custom(format!("{v} is not a price")));
                }
                Rate::parse_usd_per_million(&format!("{v}")).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Rate, E> {
                Rate::parse_usd_per_million(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// One price entry as written in `prices.toml` or in the config's `[[price]]`.
///
/// ```toml
/// [[price]]
/// provider = "openai"
/// models = ["gpt-4o", "gpt-4o-2024-*"]    # exact names, or prefixes ending in `*`
/// input = 2.50                            # USD per million tokens
/// cache_read = 1.25
/// output = 10.00
/// source = "https://platform.openai.com/docs/pricing"
/// as_of = "2025-06-03"
/// [[price.tier]]                          # optional long-context tier
/// above_input_tokens = 200000
/// input = 5.00
/// output = 15.00
/// ```
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PriceOverride {
    /// The price list: `openai`, `anthropic`, `gemini`, or an OpenAI-compatible host's name.
    pub provider: String,
    /// One model: an exact name or a prefix ending in `*`. Give this or `models`.
    #[serde(default)]
    pub model: Option<String>,
    /// Several models (exact names or prefixes ending in `*`).
    #[serde(default)]
    pub models: Vec<String>,
    /// The prices below the first tier.
    #[serde(flatten)]
    pub rates: RatesOverride,
    /// Long-context tiers.
    #[serde(default, rename = "tier")]
    pub tiers: Vec<TierOverride>,
    /// Where the prices come from (a URL).
    #[serde(default)]
    pub source: Option<String>,
    /// When they were read (`YYYY-MM-DD`).
    #[serde(default)]
    pub as_of: Option<String>,
}

/// The prices of one tier; a price left out is unknown (never zero).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct RatesOverride {
    /// Uncached prompt tokens.
    #[serde(default)]
    pub input: Option<Rate>,
    /// Generated tokens.
    #[serde(default)]
    pub output: Option<Rate>,
    /// Prompt tokens read from the provider's cache.
    #[serde(default)]
    pub cache_read: Option<Rate>,
    /// Prompt tokens written to the cache with the 5-minute TTL (Anthropic's default).
    #[serde(default)]
    pub cache_write_5m: Option<Rate>,
    /// Prompt tokens written to the cache with the 1-hour TTL.
    #[serde(default)]
    pub cache_write_1h: Option<Rate>,
    /// Reasoning tokens; the output price when left out.
    #[serde(default)]
    pub reasoning: Option<Rate>,
}

/// A long-context tier: above `above_input_tokens` prompt tokens, the whole request is priced
/// at these prices.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TierOverride {
    /// The threshold, in prompt tokens (cached ones included).
    pub above_input_tokens: u64,
    /// The tier's prices.
    #[serde(flatten)]
    pub rates: RatesOverride,
}

/// A validated catalog entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriceEntry {
    /// `provider/first-model`, prefixed `config/` for an override: what a record names as the
    /// entry that priced it.
    pub id: Arc<str>,
    /// The price list.
    pub provider: String,
    /// The models it covers.
    pub models: Vec<String>,
    /// Prices below the first tier.
    pub rates: RatesOverride,
    /// Long-context tiers, by ascending threshold.
    pub tiers: Vec<(u64, RatesOverride)>,
    /// Where the prices come from.
    pub source: Option<String>,
    /// When they were read.
    pub as_of: Option<String>,
    /// From the config's `[[price]]` rather than the shipped file.
    pub from_config: bool,
}

impl PriceEntry {
    /// The prices that apply to a request with `input_tokens` prompt tokens.
    pub fn rates_for(&self, input_tokens: u64) -> &RatesOverride {
        self.tiers
            .iter()
            .rev()
            .find(|(above, _)| input_tokens > *above)
            .map_or(&self.rates, |(_, r)| r)
    }
}

/// The exact cost of `tokens` at `entry`'s prices, or `None` when the usage needs a price the
/// entry does not have (e.g. cache reads on an entry without `cache_read`): such a request is
/// recorded as unpriced, never as free.
///
/// Uncached input is `input - cache_read - cache_write`, 1-hour writes are priced apart from
/// 5-minute ones, reasoning tokens at `reasoning` (else `output`), visible output at `output`.
/// See the module docs for the integer arithmetic and its single rounding.
pub fn price(tokens: &Tokens, entry: &PriceEntry) -> Option<Cost> {
    let r = entry.rates_for(tokens.input);
    let cache_write_1h = tokens.cache_write_1h.min(tokens.cache_write);
    let reasoning = tokens.reasoning.min(tokens.output);
    let parts = [
        (
            tokens
                .input
                .saturating_sub(tokens.cache_read)
                .saturating_sub(tokens.cache_write),
            r.input,
        ),
        (tokens.cache_read, r.cache_read),
        (tokens.cache_write - cache_write_1h, r.cache_write_5m),
        (cache_write_1h, r.cache_write_1h),
        (tokens.output - reasoning, r.output),
        (reasoning, r.reasoning.or(r.output)),
    ];
    let mut pico: u128 = 0;
    for (count, rate) in parts {
        if count == 0 {
            continue;
        }
        pico += u128::from(count) * u128::from(rate?.0);
    }
    // Round half up, once.
    let micros = (pico + 500_000) / 1_000_000;
    Some(Cost::from_micros(i64::try_from(micros).unwrap_or(i64::MAX)))
}

/// Why a price list is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PriceError {
    /// The TOML does not parse or has a field of the wrong kind.
    #[error("{origin}: {message}")]
    Parse {
        /// `prices.toml` or `config [[price]]`.
        origin: &'static str,
        /// The parser's message (names the field).
        message: String,
    },
    /// An entry is incomplete or contradicts itself.
    #[error("{origin} price[{index}].{field}: {reason}")]
    Invalid {
        /// `prices.toml` or `config [[price]]`.
        origin: &'static str,
        /// The entry's position, from 0.
        index: usize,
        /// The field at fault.
        field: &'static str,
        /// What is wrong and what to write instead.
        reason: String,
    },
}

impl PriceError {
    /// A low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            PriceError::Parse { .. } => "price_parse",
            PriceError::Invalid { .. } => "price_invalid",
        }
    }
}

/// One source's entries, indexed for lookup.
#[derive(Clone, Debug, Default)]
struct Index {
    entries: Vec<PriceEntry>,
    /// provider → exact model → entry.
    exact: HashMap<String, HashMap<String, usize>>,
    /// provider → (prefix, entry), longest prefix first.
    prefixes: HashMap<String, Vec<(String, usize)>>,
}

impl Index {
    fn build(list: Vec<PriceOverride>, origin: &'static str) -> Result<Index, PriceError> {
        let from_config = origin != "prices.toml";
        let mut index = Index::default();
        for (i, raw) in list.into_iter().enumerate() {
            let invalid = |field: &'static str, reason: String| PriceError::Invalid {
                origin,
                index: i,
                field,
                reason,
            };
            if raw.provider.trim().is_empty() {
                return Err(invalid(
                    "provider",
                    "is empty; name the price list, e.g. \"openai\"".into(),
                ));
            }
            let mut models = raw.models.clone();
            match (&raw.model, models.is_empty()) {
                (Some(m), true) => models.push(m.clone()),
                (None, false) => {}
                (Some(_), false) => {
                    return Err(invalid(
                        "model",
                        "give `model` or `models`, not both".into(),
                    ))
                }
                (None, true) => {
                    return Err(invalid(
                        "models",
                        "is missing; list the model names it prices".into(),
                    ))
                }
            }
            let mut tiers: Vec<(u64, RatesOverride)> = raw
                .tiers
                .iter()
                .map(|t| (t.above_input_tokens, t.rates))
                .collect();
            tiers.sort_by_key(|(above, _)| *above);
            if tiers.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(invalid(
                    "tier",
                    "two tiers have the same `above_input_tokens`".into(),
                ));
            }
            if raw.rates == RatesOverride::default() {
                return Err(invalid(
                    "input",
                    "no price is given; set at least `input` and `output` (USD per million tokens)"
                        .into(),
                ));
            }
            let entry_index = index.entries.len();
            for model in &models {
                let (map_key, taken) = if let Some(prefix) = model.strip_suffix('*') {
                    if prefix.contains('*') {
                        return Err(invalid(
                            "models",
                            format!("`{model}`: `*` may only end a name"),
                        ));
                    }
                    let list = index.prefixes.entry(raw.provider.clone()).or_default();
                    let taken = list.iter().find(|(p, _)| p == prefix).map(|(_, e)| *e);
                    list.push((prefix.to_string(), entry_index));
                    (model.clone(), taken)
                } else {
                    if model.is_empty() || model.contains('*') {
                        return Err(invalid(
                            "models",
                            format!("`{model}` is not a model name or prefix"),
                        ));
                    }
                    let map = index.exact.entry(raw.provider.clone()).or_default();
                    (model.clone(), map.insert(model.clone(), entry_index))
                };
                if let Some(other) = taken {
                    let first = &index
                        .entries
                        .get(other)
                        .map_or(format!("price[{i}]"), |e| e.id.to_string());
                    return Err(invalid(
                        "models",
                        format!(
                            "`{map_key}` of provider `{}` is already priced by {first}",
                            raw.provider
                        ),
                    ));
                }
            }
            let id = format!(
                "{}{}/{}",
                if from_config { "config/" } else { "" },
                raw.provider,
                models[0]
            );
            index.entries.push(PriceEntry {
                id: Arc::from(id),
                provider: raw.provider,
                models,
                rates: raw.rates,
                tiers,
                source: raw.source,
                as_of: raw.as_of,
                from_config,
            });
        }
        for list in index.prefixes.values_mut() {
            list.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        }
        Ok(index)
    }

    fn lookup(&self, provider: &str, model: &str) -> Option<&PriceEntry> {
        if let Some(&i) = self.exact.get(provider).and_then(|m| m.get(model)) {
            return Some(&self.entries[i]);
        }
        self.prefixes
            .get(provider)?
            .iter()
            .find(|(p, _)| model.starts_with(p.as_str()))
            .map(|(_, i)| &self.entries[*i])
    }
}

/// The price catalog: the shipped prices with the config's overrides on top.
#[derive(Clone, Debug)]
pub struct Catalog {
    overrides: Index,
    shipped: Index,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    price: Vec<PriceOverride>,
}

impl Catalog {
    /// The shipped prices with `overrides` (the config's `[[price]]`) on top.
    ///
    /// # Errors
    /// An override that is incomplete, names a model twice, or has a malformed price; the
    /// error names the entry and the field.
    pub fn new(overrides: Vec<PriceOverride>) -> Result<Catalog, PriceError> {
        let file: PriceFile = toml::from_str(SHIPPED_PRICES).map_err(|e| PriceError::Parse {
            origin: "prices.toml",
            message: e.to_string(),
        })?;
        Ok(Catalog {
            overrides: Index::build(overrides, "config [[price]]")?,
            shipped: Index::build(file.price, "prices.toml")?,
        })
    }

    /// The shipped prices alone.
    pub fn shipped() -> Catalog {
        // The shipped file is checked by this crate's tests; it cannot fail at run time.
        Catalog::new(Vec::new())
            .unwrap_or_else(|e| panic!("the shipped prices.toml is invalid: {e}"))
    }

    /// The entry that prices `model` on `provider`: a config override if one matches, else the
    /// shipped entry; within each, an exact name before the longest matching prefix. A
    /// `models/` prefix (Gemini's resource name) is ignored.
    pub fn lookup(&self, provider: &str, model: &str) -> Option<&PriceEntry> {
        let model = model.strip_prefix("models/").unwrap_or(model);
        self.overrides
            .lookup(provider, model)
            .or_else(|| self.shipped.lookup(provider, model))
    }

    /// The pricing of a request: [`Pricing::NoUsage`] without tokens, [`Pricing::Unpriced`]
    /// when no entry applies or the entry lacks a price the usage needs, else the cost and the
    /// entry that priced it.
    pub fn pricing(&self, provider: &str, model: &str, tokens: &Tokens) -> Pricing {
        if tokens.is_zero() {
            return Pricing::NoUsage;
        }
        let Some(entry) = self.lookup(provider, model) else {
            return Pricing::Unpriced;
        };
        match price(tokens, entry) {
            Some(cost) => Pricing::Priced {
                entry: entry.id.clone(),
                cost,
            },
            None => Pricing::Unpriced,
        }
    }

    /// Every entry, overrides first.
    pub fn entries(&self) -> impl Iterator<Item = &PriceEntry> {
        self.overrides.entries.iter().chain(&self.shipped.entries)
    }

    /// For `sluice prices [MODEL]`: without a model, every entry; with one, the entry that
    /// applies to it for each provider that prices it.
    pub fn applicable(&self, model: Option<&str>) -> Vec<&PriceEntry> {
        let Some(model) = model else {
            return self.entries().collect();
        };
        let mut providers: Vec<&str> = self.entries().map(|e| e.provider.as_str()).collect();
        providers.sort_unstable();
        providers.dedup();
        providers
            .into_iter()
            .filter_map(|p| self.lookup(p, model))
            .collect()
    }
}

/// A plain-text table of `entries` (what `sluice prices` prints): USD per million tokens, `-`
/// for an unknown price, tiers on their own lines.
pub fn render_prices(entries: &[&PriceEntry]) -> String {
    let fmt_rate = |r: Option<Rate>| r.map_or_else(|| "-".to_string(), |r| r.to_string());
    let mut rows: Vec<[String; 10]> = vec![[
        "ENTRY".into(),
        "MODELS".into(),
        "INPUT".into(),
        "CACHE_READ".into(),
        "WRITE_5M".into(),
        "WRITE_1H".into(),
        "OUTPUT".into(),
        "REASONING".into(),
        "AS_OF".into(),
        "SOURCE".into(),
    ]];
    let row = |label: String, models: String, r: &RatesOverride, e: &PriceEntry| {
        [
            label,
            models,
            fmt_rate(r.input),
            fmt_rate(r.cache_read),
            fmt_rate(r.cache_write_5m),
            fmt_rate(r.cache_write_1h),
            fmt_rate(r.output),
            fmt_rate(r.reasoning.or(r.output)),
            e.as_of.clone().unwrap_or_else(|| "-".into()),
            e.source.clone().unwrap_or_else(|| "-".into()),
        ]
    };
    for e in entries {
        rows.push(row(e.id.to_string(), e.models.join(","), &e.rates, e));
        for (above, r) in &e.tiers {
            let priced = *r != RatesOverride::default();
            let mut tier = row(
                format!("  > {above} input tokens"),
                if priced {
                    String::new()
                } else {
                    "(unpriced)".into()
                },
                r,
                e,
            );
            tier[8].clear();
            tier[9].clear();
            rows.push(tier);
        }
    }
    let mut widths = [0usize; 10];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in r.iter().zip(widths).enumerate() {
            if i == r.len() - 1 {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str(
        "USD per million tokens; `-` = no known price (usage of that kind is recorded unpriced)\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(s: &str) -> Rate {
        Rate::parse_usd_per_million(s).unwrap()
    }

    #[test]
    fn prices_parse_exactly() {
        assert_eq!(rate("2.50"), Rate(2_500_000));
        assert_eq!(rate("0.0375"), Rate(37_500));
        assert_eq!(rate("15"), Rate(15_000_000));
        assert_eq!(rate(".5"), Rate(500_000));
        assert_eq!(rate("0.000001"), Rate(1));
        assert!(Rate::parse_usd_per_million("0.0000001").is_err());
        assert!(Rate::parse_usd_per_million("1e3").is_err());
        assert!(Rate::parse_usd_per_million("").is_err());
        assert_eq!(rate("2.5").to_string(), "2.50");
        assert_eq!(rate("0.0375").to_string(), "0.0375");
        // TOML floats are read through their decimal spelling, not their binary value.
        let p: PriceOverride =
            toml::from_str("provider = \"x\"\nmodel = \"m\"\ninput = 0.075\noutput = 0.3").unwrap();
        assert_eq!(p.rates.input, Some(Rate(75_000)));
        assert_eq!(p.rates.output, Some(Rate(300_000)));
    }

    #[test]
    fn the_shipped_catalog_is_valid_and_cited() {
        let c = Catalog::shipped();
        let n = c.entries().count();
        assert!(n >= 25, "{n} entries");
        for e in c.entries() {
            assert!(
                e.source
                    .as_deref()
                    .is_some_and(|s| s.starts_with("https://")),
                "{}",
                e.id
            );
            let as_of = e.as_of.as_deref().unwrap_or("");
            assert!(
                as_of.len() == 10 && as_of.starts_with("20"),
                "{}: as_of {as_of}",
                e.id
            );
            assert!(
                e.rates.input.is_some() && e.rates.output.is_some(),
                "{}",
                e.id
            );
        }
    }

    #[test]
    fn the_most_specific_match_wins() {
        let c = Catalog::shipped();
        let id = |p: &str, m: &str| c.lookup(p, m).map(|e| e.id.to_string());
        assert_eq!(id("openai", "gpt-4o").as_deref(), Some("openai/gpt-4o"));
        assert_eq!(
            id("openai", "gpt-4o-mini").as_deref(),
            Some("openai/gpt-4o-mini")
        );
        assert_eq!(
            id("openai", "gpt-4o-2024-05-13").as_deref(),
            Some("openai/gpt-4o-2024-05-13")
        );
        assert_eq!(
            id("anthropic", "claude-sonnet-4-5-20250929").as_deref(),
            Some("anthropic/claude-sonnet-4-5*")
        );
        assert_eq!(
            id("anthropic", "claude-opus-4-20250514").as_deref(),
            Some("anthropic/claude-opus-4-1*")
        );
        assert_eq!(
            id("gemini", "models/gemini-2.5-pro").as_deref(),
            Some("gemini/gemini-2.5-pro")
        );
        // Not in the catalog, or on another provider's list.
        assert_eq!(id("openai", "gpt-4o-realtime-preview"), None);
        assert_eq!(id("anthropic", "gpt-4o"), None);
        assert_eq!(id("openai", "gpt-5.5"), None);
    }

    #[test]
    fn overrides_take_precedence_and_extend() {
        let overrides: Vec<PriceOverride> = toml::from_str::<PriceFile>(
            r#"
            [[price]]
            provider = "openai"
            model = "gpt-4o*"
            input = 1.00
            output = 2.00
            [[price]]
            provider = "together"
            models = ["meta-llama/Llama-3.3-70B-Instruct-Turbo"]
            input = "0.88"
            output = "0.88"
            "#,
        )
        .unwrap()
        .price;
        let c = Catalog::new(overrides).unwrap();
        // The override's prefix beats the shipped exact name: the operator's word is final.
        assert_eq!(
            c.lookup("openai", "gpt-4o").unwrap().id.as_ref(),
            "config/openai/gpt-4o*"
        );
        assert!(
            c.lookup("together", "meta-llama/Llama-3.3-70B-Instruct-Turbo")
                .unwrap()
                .from_config
        );
        assert_eq!(
            c.lookup("openai", "gpt-4.1").unwrap().id.as_ref(),
            "openai/gpt-4.1"
        );
    }

    #[test]
    fn bad_overrides_name_the_entry_and_field() {
        let parse = |s: &str| toml::from_str::<PriceFile>(s).map(|f| f.price);
        let e = Catalog::new(
            parse("[[price]]\nprovider = \"openai\"\ninput = 1.0\noutput = 1.0").unwrap(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "config [[price]] price[0].models: is missing; list the model names it prices"
        );
        let e = Catalog::new(
            parse("[[price]]\nprovider = \"a\"\nmodel = \"m\"\ninput = 1.0\n[[price]]\nprovider = \"a\"\nmodel = \"m\"\ninput = 2.0")
                .unwrap(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("price[1].models: `m` of provider `a` is already priced by config/a/m"),
            "{e}"
        );
        assert!(parse("[[price]]\nprovider = \"a\"\nmodel = \"m\"\ninptu = 1.0").is_err());
        assert!(parse("[[price]]\nprovider = \"a\"\nmodel = \"m\"\ninput = -1").is_err());
        let e =
            Catalog::new(parse("[[price]]\nprovider = \"a\"\nmodel = \"m\"").unwrap()).unwrap_err();
        assert_eq!(e.metric_label(), "price_invalid");
    }

    fn entry(c: &Catalog, p: &str, m: &str) -> PriceEntry {
        c.lookup(p, m).unwrap().clone()
    }

    #[test]
    fn openai_cached_tokens_are_a_subset_of_the_prompt() {
        let c = Catalog::shipped();
        // gpt-4o: $2.50 in, $1.25 cached, $10 out. usage: prompt_tokens 10_000 of which
        // cached_tokens 6_000; completion_tokens 1_000.
        let t = Tokens::from_openai(10_000, 1_000, 6_000, 0);
        // 4_000 × 2.50 + 6_000 × 1.25 + 1_000 × 10 = 10_000 + 7_500 + 10_000 µ$ = $0.0275
        assert_eq!(
            price(&t, &entry(&c, "openai", "gpt-4o")),
            Some(Cost::from_micros(27_500))
        );
        // o4-mini with reasoning: reasoning is inside completion_tokens, at the output price.
        // 1_234 prompt (234 cached), 5_678 completion (5_000 reasoning):
        // 1_000 × 1.10 + 234 × 0.275 + 5_678 × 4.40 = 1_100 + 64.35 + 24_983.2 = 26_147.55 µ$
        let t = Tokens::from_openai(1_234, 5_678, 234, 5_000);
        assert_eq!(
            price(&t, &entry(&c, "openai", "o4-mini")),
            Some(Cost::from_micros(26_148))
        );
        // gpt-4o-mini, one token each: 0.15 + 0.60 = 0.75 µ$ → rounds half up to 1.
        let t = Tokens::from_openai(1, 1, 0, 0);
        assert_eq!(
            price(&t, &entry(&c, "openai", "gpt-4o-mini")),
            Some(Cost::from_micros(1))
        );
        // o3 has no verified cached price: a cached request is unpriced, an uncached one is not.
        let o3 = entry(&c, "openai", "o3");
        assert_eq!(price(&Tokens::from_openai(100, 10, 50, 0), &o3), None);
        assert_eq!(
            price(&Tokens::from_openai(100, 10, 0, 0), &o3),
            Some(Cost::from_micros(280))
        );
        assert_eq!(
            c.pricing("openai", "o3", &Tokens::from_openai(100, 10, 50, 0)),
            Pricing::Unpriced
        );
    }

    #[test]
    fn anthropic_cache_reads_and_writes_are_priced_apart() {
        let c = Catalog::shipped();
        let sonnet = entry(&c, "anthropic", "claude-sonnet-4-5-20250929");
        // usage: input_tokens 2_000 (uncached), cache_read_input_tokens 50_000,
        // cache_creation_input_tokens 10_000 of which 4_000 with the 1h TTL; output 3_000.
        let t = Tokens::from_anthropic(2_000, 3_000, 50_000, 10_000, 4_000, 0);
        assert_eq!(t.input, 62_000);
        // 2_000 × 3 + 50_000 × 0.30 + 6_000 × 3.75 + 4_000 × 6 + 3_000 × 15
        // = 6_000 + 15_000 + 22_500 + 24_000 + 45_000 = 112_500 µ$
        assert_eq!(price(&t, &sonnet), Some(Cost::from_micros(112_500)));
        // The same writes all at 5 minutes cost less: 10_000 × 3.75 = 37_500 instead of 46_500.
        let t5 = Tokens::from_anthropic(2_000, 3_000, 50_000, 10_000, 0, 0);
        assert_eq!(price(&t5, &sonnet), Some(Cost::from_micros(103_500)));
        // Haiku 3.5, odd counts: 7 × 0.80 + 11 × 0.08 + 13 × 1.00 + 5 × 4.00 = 5.6 + 0.88 + 13
        // + 20 = 39.48 → 39 µ$
        let t = Tokens::from_anthropic(7, 5, 11, 13, 0, 0);
        assert_eq!(
            price(&t, &entry(&c, "anthropic", "claude-3-5-haiku-20241022")),
            Some(Cost::from_micros(39))
        );
    }

    #[test]
    fn anthropic_long_context_prices_the_whole_request() {
        let c = Catalog::shipped();
        let sonnet = entry(&c, "anthropic", "claude-sonnet-4-20250514");
        // 150_000 uncached + 60_000 cache reads = 210_000 prompt tokens > 200K: every token at
        // the tier: 150_000 × 6 + 60_000 × 0.60 + 2_000 × 22.50 = 900_000 + 36_000 + 45_000.
        let t = Tokens::from_anthropic(150_000, 2_000, 60_000, 0, 0, 0);
        assert_eq!(price(&t, &sonnet), Some(Cost::from_micros(981_000)));
        // Exactly 200K is not above it.
        let t = Tokens::from_anthropic(200_000, 0, 0, 0, 0, 0);
        assert_eq!(price(&t, &sonnet), Some(Cost::from_micros(600_000)));
        // Opus 4.6's long-context price is not known: above 200K it is unpriced.
        let t = Tokens::from_anthropic(200_001, 1, 0, 0, 0, 0);
        assert_eq!(price(&t, &entry(&c, "anthropic", "claude-opus-4-6")), None);
    }

    #[test]
    fn cloud_model_ids_find_their_own_prices() {
        let c = Catalog::shipped();
        let id = |p: &str, m: &str| c.lookup(p, m).map(|e| e.id.to_string());
        for (list, model, want) in [
            (
                "bedrock",
                "anthropic.claude-3-5-haiku-20241022-v1:0",
                "bedrock/anthropic.claude-3-5-haiku*",
            ),
            (
                "bedrock",
                "us.anthropic.claude-sonnet-4-20250514-v1:0",
                "bedrock/anthropic.claude-sonnet-4-2025*",
            ),
            (
                "bedrock",
                "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
                "bedrock/global.anthropic.claude-sonnet-4-5*",
            ),
            (
                "bedrock",
                "eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
                "bedrock/anthropic.claude-sonnet-4-5*",
            ),
            (
                "bedrock",
                "us.amazon.nova-pro-v1:0",
                "bedrock/amazon.nova-pro*",
            ),
            (
                "bedrock",
                "amazon.nova-micro-v1:0",
                "bedrock/amazon.nova-micro*",
            ),
            (
                "vertex",
                "claude-sonnet-4@20250514",
                "vertex/claude-sonnet-4@*",
            ),
            (
                "vertex",
                "claude-3-5-haiku@20241022",
                "vertex/claude-3-5-haiku@*",
            ),
            ("vertex", "gemini-2.5-flash", "vertex/gemini-2.5-flash"),
        ] {
            assert_eq!(id(list, model).as_deref(), Some(want), "{list} {model}");
        }
        // A cloud's ids are not on another list, and its unconfirmed prices are left out.
        assert_eq!(
            id("anthropic", "us.anthropic.claude-sonnet-4-20250514-v1:0"),
            None
        );
        assert_eq!(id("bedrock", "meta.llama3-3-70b-instruct-v1:0"), None);
        assert_eq!(id("vertex", "claude-sonnet-4-5@20250929"), None);
        // A geography profile of Sonnet 4.5 costs 10% more than the global one: 1_000 input,
        // 10_000 cache reads, 2_000 cache writes, 500 output.
        let t = Tokens::from_anthropic(1_000, 500, 10_000, 2_000, 0, 0);
        let global = entry(
            &c,
            "bedrock",
            "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
        );
        let geo = entry(
            &c,
            "bedrock",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        );
        // 1_000 × 3 + 10_000 × 0.30 + 2_000 × 3.75 + 500 × 15 = 3_000 + 3_000 + 7_500 + 7_500
        assert_eq!(price(&t, &global), Some(Cost::from_micros(21_000)));
        assert_eq!(price(&t, &geo), Some(Cost::from_micros(23_100)));
        // Nova's cache reads are not known: a request that read the cache is unpriced.
        let nova = entry(&c, "bedrock", "amazon.nova-lite-v1:0");
        assert_eq!(price(&t, &nova), None);
        let plain = Tokens::from_anthropic(1_000_000, 1_000_000, 0, 0, 0, 0);
        assert_eq!(price(&plain, &nova), Some(Cost::from_micros(300_000)));
    }

    #[test]
    fn gemini_cached_subset_thoughts_as_output_and_long_context() {
        let c = Catalog::shipped();
        // gemini-2.0-flash: promptTokenCount 40_000 incl. cachedContentTokenCount 30_000;
        // candidates 1_000, no thoughts. 10_000 × 0.10 + 30_000 × 0.025 + 1_000 × 0.40
        // = 1_000 + 750 + 400 = 2_150 µ$
        let t = Tokens::from_gemini(40_000, 1_000, 30_000, 0);
        assert_eq!(
            price(&t, &entry(&c, "gemini", "gemini-2.0-flash")),
            Some(Cost::from_micros(2_150))
        );
        // gemini-2.5-flash: thoughts are billed at the output price.
        // 12_345 × 0.30 + (678 + 9_000) × 2.50 = 3_703.5 + 24_195 = 27_898.5 → 27_899 µ$
        let t = Tokens::from_gemini(12_345, 678, 0, 9_000);
        assert_eq!(
            price(&t, &entry(&c, "gemini", "gemini-2.5-flash")),
            Some(Cost::from_micros(27_899))
        );
        // gemini-2.5-pro above 200K: 250_000 × 2.50 + (1_000 + 500) × 15 = 625_000 + 22_500.
        let pro = entry(&c, "gemini", "gemini-2.5-pro");
        let t = Tokens::from_gemini(250_000, 1_000, 0, 500);
        assert_eq!(price(&t, &pro), Some(Cost::from_micros(647_500)));
        // ... and at 200K: 200_000 × 1.25 + 1_500 × 10 = 250_000 + 15_000.
        let t = Tokens::from_gemini(200_000, 1_000, 0, 500);
        assert_eq!(price(&t, &pro), Some(Cost::from_micros(265_000)));
        // 2.5's cache-read price is not verified: cached usage is unpriced, not free.
        assert_eq!(price(&Tokens::from_gemini(1_000, 10, 500, 0), &pro), None);
    }

    #[test]
    fn pricing_says_why_there_is_no_cost() {
        let c = Catalog::shipped();
        assert_eq!(
            c.pricing("openai", "gpt-4o", &Tokens::default()),
            Pricing::NoUsage
        );
        assert_eq!(
            c.pricing("openai", "no-such-model", &Tokens::from_openai(1, 1, 0, 0)),
            Pricing::Unpriced
        );
        match c.pricing("openai", "gpt-4o", &Tokens::from_openai(1_000_000, 0, 0, 0)) {
            Pricing::Priced { entry, cost } => {
                assert_eq!(&*entry, "openai/gpt-4o");
                assert_eq!(cost, Cost::from_micros(2_500_000));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_table_shows_what_applies() {
        let c = Catalog::shipped();
        let t = render_prices(&c.applicable(Some("claude-sonnet-4-5")));
        assert!(t.contains("anthropic/claude-sonnet-4-5*"), "{t}");
        assert!(t.contains("> 200000 input tokens"), "{t}");
        assert!(t.contains("22.50"), "{t}");
        assert_eq!(t.lines().count(), 4, "{t}");
        assert_eq!(c.applicable(Some("nothing-like-it")).len(), 0);
    }
}
