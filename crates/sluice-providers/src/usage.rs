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

/// The usage a provider's JSON body (or a stream event's data) reports, found without parsing
/// the body: the last `"usage"` key (`"usageMetadata"` for Gemini) followed by `:` is
/// located with a SIMD search and only the object after it is deserialised. `None` when
/// there is no such key, or no usage object under it.
///
/// The key is searched for as raw bytes: inside a JSON string the quotes would be escaped,
/// so a hit is a key or a string value equal to `usage`, and the `:` check keeps only keys.
/// The last hit is tried first because every provider writes usage after the content; a
/// nested object under a `usage` key must still have the required counts
/// (`prompt_tokens`; `input_tokens` and `output_tokens`) to be taken for usage.
pub fn scan(family: crate::api::Family, body: &[u8]) -> Option<Usage> {
    use crate::api::Family;
    use serde::Deserialize;

    let key: &[u8] = match family {
        Family::Gemini => b"\"usageMetadata\"",
        _ => b"\"usage\"",
    };
    // A bound on the work an odd body can cause.
    const MAX_TRIES: usize = 4;
    for pos in memchr::memmem::rfind_iter(body, key).take(MAX_TRIES) {
        let rest = &body[pos + key.len()..];
        let Some(colon) = rest.iter().position(|b| !b.is_ascii_whitespace()) else {
            continue;
        };
        if rest[colon] != b':' {
            continue;
        }
        let value = &rest[colon + 1..];
        fn one(value: &[u8]) -> serde_json::Deserializer<serde_json::de::SliceRead<'_>> {
            serde_json::Deserializer::from_slice(value)
        }
        let found = match family {
            Family::OpenAi => crate::shape::openai::UsageBody::deserialize(&mut one(value))
                .map(|u| u.to_usage())
                .or_else(|_| {
                    crate::shape::openai::ResponsesUsage::deserialize(&mut one(value))
                        .map(|u| u.to_usage())
                })
                .ok(),
            Family::Anthropic => crate::shape::anthropic::UsageBody::deserialize(&mut one(value))
                .map(|u| u.to_usage())
                .ok(),
            Family::Gemini => crate::shape::gemini::UsageMetadata::deserialize(&mut one(value))
                .map(|u| u.to_usage())
                .ok(),
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Family;

    #[test]
    fn scans_each_family() {
        let o = br#"{"id":"x","choices":[{"message":{"content":"the \"usage\": {\"prompt_tokens\":9}"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":2}}}"#;
        assert_eq!(
            scan(Family::OpenAi, o),
            Some(Usage {
                input: 7,
                output: 3,
                cached_input: 2,
                reasoning: 0
            })
        );
        let r = br#"{"object":"response","tools":[{"parameters":{"properties":{"usage":{"type":"string"}}}}],"usage":{"input_tokens":5,"output_tokens":4,"output_tokens_details":{"reasoning_tokens":1}},"user":null}"#;
        assert_eq!(
            scan(Family::OpenAi, r),
            Some(Usage {
                input: 5,
                output: 4,
                cached_input: 0,
                reasoning: 1
            })
        );
        let a = br#"{"type":"message","usage":{"input_tokens":3,"cache_read_input_tokens":10,"output_tokens":2}}"#;
        assert_eq!(
            scan(Family::Anthropic, a),
            Some(Usage {
                input: 13,
                output: 2,
                cached_input: 10,
                reasoning: 0
            })
        );
        let g = br#"{"candidates":[],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2,"thoughtsTokenCount":5,"totalTokenCount":11}}"#;
        assert_eq!(
            scan(Family::Gemini, g),
            Some(Usage {
                input: 4,
                output: 7,
                cached_input: 0,
                reasoning: 5
            })
        );
        assert_eq!(scan(Family::OpenAi, br#"{"text":"usage"}"#), None);
        assert_eq!(scan(Family::OpenAi, br#"{"usage":null}"#), None);
        assert_eq!(scan(Family::OpenAi, b"not json \"usage\": {"), None);
    }
}
