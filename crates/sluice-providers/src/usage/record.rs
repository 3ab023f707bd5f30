//! The usage record itself, a leaf: it imports nothing from this crate, so the provider shapes
//! ([`crate::shape`]) can convert to and from it while [`crate::usage`] reads those shapes,
//! without a circle between the two modules.

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
    /// Prompt tokens written to the provider's cache (a subset of `input`; Anthropic's
    /// `cache_creation_input_tokens`, Bedrock's `cacheWriteInputTokens`), priced apart.
    pub cache_write: u64,
}

impl Usage {
    /// Adds another attempt's or continuation's usage.
    pub fn add(&mut self, other: &Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cached_input += other.cached_input;
        self.reasoning += other.reasoning;
        self.cache_write += other.cache_write;
    }
}
