//! The JSON shapes each provider documents, as serde types: what translation reads and
//! writes. One module per family; each type cites where its shape comes from (see
//! /work/shared/reference/provider-formats.md for the sources).
//!
//! Types that are read from an upstream accept what the provider may omit (`Option`,
//! `#[serde(default)]`) and ignore fields they do not need; types that are written skip
//! absent fields, so a translated body carries only what was asked for.
//!
//! The three request types repeat the sampling parameters (temperature, top_p, top_k, stop
//! sequences) on purpose: each is its provider's documented shape, and their names, casing
//! and place differ (`stop`, `stop_sequences`, `generationConfig.stopSequences`); one shared
//! struct would tie together what the providers may change apart. Streams read upstream
//! events through their own borrowed shapes (`stream::wire`, which says why).

pub mod anthropic;
pub mod gemini;
pub mod openai;

/// `true` for `skip_serializing_if`.
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}
