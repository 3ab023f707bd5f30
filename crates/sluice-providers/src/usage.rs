//! Token usage, normalised across providers.
//!
//! The rules (see /work/shared/reference/provider-formats.md §3): `input` counts every prompt
//! token including cached ones (Anthropic reports `input_tokens` without the cache reads and
//! writes, so they are added); `output` includes reasoning tokens; Anthropic's streamed
//! `message_delta.usage` and Gemini's `usageMetadata` are cumulative (keep the last, never
//! sum).

/// One request's token usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub input: u64,
    /// Generated tokens, reasoning included.
    pub output: u64,
    /// Prompt tokens read from the provider's cache (a subset of `input`).
    pub cached_input: u64,
    /// Reasoning ("thinking") tokens (a subset of `output`).
    pub reasoning: u64,
}

impl Usage {
    /// Adds another attempt's or continuation's usage.
    pub fn add(&mut self, other: &Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cached_input += other.cached_input;
        self.reasoning += other.reasoning;
    }
}
