//! Token usage, normalised across providers.
//!
//! The rules (see /work/shared/reference/provider-formats.md §3): `input` counts every prompt
//! token including cached ones (Anthropic reports `input_tokens` without the cache reads and
//! writes, so they are added); `output` includes reasoning tokens; Anthropic's streamed
//! `message_delta.usage` and Gemini's `usageMetadata` are cumulative (keep the last, never
//! sum).
//!
//! Each family's usage shape in [`crate::shape`] converts to and from [`Usage`] (`to_usage`,
//! `from_usage`); whole responses and streams read usage through this module, so both apply
//! the same rules.

use serde::Deserialize;

use crate::api::Family;
use crate::shape::{anthropic, gemini, openai};

mod flat_openai;
pub(crate) mod record;

pub use record::Usage;

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
pub fn scan(family: Family, body: &[u8]) -> Option<Usage> {
    let key: &[u8] = match family {
        Family::Gemini => b"\"usageMetadata\"",
        _ => b"\"usage\"",
    };
    let key_len = key.len();
    // A bound on the work an odd body can cause.
    const MAX_TRIES: usize = 4;
    let mut end = body.len();
    for _ in 0..MAX_TRIES {
        let Some(pos) = rfind_key(&body[..end], key) else {
            break;
        };
        end = pos;
        let rest = &body[pos + key_len..];
        let Some(colon) = rest.iter().position(|b| !b.is_ascii_whitespace()) else {
            continue;
        };
        if rest[colon] != b':' {
            continue;
        }
        let found = read(family, &rest[colon + 1..]);
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The usage object at the start of `value` (what follows it is ignored), in `family`'s
/// shape: OpenAI's chat [`openai::UsageBody`] or Responses API [`openai::ResponsesUsage`],
/// Anthropic's [`anthropic::UsageBody`], Gemini's [`gemini::UsageMetadata`]. `None` unless it
/// is one (a shape's required counts are missing, a count is not a whole number, ...), so that
/// usage in a shape we do not understand is ignored rather than failing what carries it.
///
/// Whole bodies ([`scan`]) and stream events read usage through here; Anthropic streams
/// report it in parts ([`AnthropicStreamUsage`]).
pub(crate) fn read(family: Family, value: &[u8]) -> Option<Usage> {
    match family {
        Family::OpenAi => flat_openai::read(value)
            .or_else(|| first_value::<openai::UsageBody>(value).map(|u| u.to_usage()))
            .or_else(|| first_value::<openai::ResponsesUsage>(value).map(|u| u.to_usage())),
        Family::Anthropic => first_value::<anthropic::UsageBody>(value).map(|u| u.to_usage()),
        Family::Gemini => first_value::<gemini::UsageMetadata>(value).map(|u| u.to_usage()),
    }
}

/// Anthropic's usage as its stream reports it: `message_start` gives all of it, each
/// `message_delta` the cumulative `output_tokens` and, in newer API versions, the input
/// counts again; a count a `message_delta` leaves out keeps its earlier value.
#[derive(Clone, Debug, Default)]
pub(crate) struct AnthropicStreamUsage {
    counts: anthropic::UsageBody,
    seen: bool,
}

impl AnthropicStreamUsage {
    /// Applies the `usage` object at the start of `value` (of `message_start`'s message or a
    /// `message_delta`): the usage so far, or `None` (and nothing changes) if it is not one.
    pub(crate) fn apply(&mut self, value: &[u8]) -> Option<Usage> {
        let update = first_value::<anthropic::UsageUpdate>(value)?;
        self.counts.update(&update);
        self.seen = true;
        Some(self.counts.to_usage())
    }

    /// The usage so far; `None` before any usage object.
    pub(crate) fn usage(&self) -> Option<Usage> {
        self.seen.then(|| self.counts.to_usage())
    }
}

/// Where the last `"u…"` key (`key` is quoted, its first letter `u`) starts in `hay`.
///
/// The `u`s are found from the end with a vectorised byte search and each is checked for the
/// key: `memmem`'s reverse finder has no vector path and walked the ~100 bytes after a chat
/// completion's usage key a byte at a time (~0.5 K instructions), where `u` is rare (none in
/// the usage object's own keys).
fn rfind_key(hay: &[u8], key: &[u8]) -> Option<usize> {
    debug_assert!(key.len() > 2 && key[1] == b'u');
    memchr::memrchr_iter(key[1], hay)
        .filter_map(|u| u.checked_sub(1))
        .find(|&start| hay[start..].starts_with(key))
}

/// Parses the JSON value at the start of `value`, ignoring what follows it (so it works on the
/// rest of a document after a key).
fn first_value<'de, T: Deserialize<'de>>(value: &'de [u8]) -> Option<T> {
    T::deserialize(&mut serde_json::Deserializer::from_slice(value)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_each_family() {
        let o = br#"{"id":"x","choices":[{"message":{"content":"the \"usage\": {\"prompt_tokens\":9}"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":2}}}"#;
        assert_eq!(
            scan(Family::OpenAi, o),
            Some(Usage {
                cache_write: 0,
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
                cache_write: 0,
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
                cache_write: 0,
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
                cache_write: 0,
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

    #[test]
    fn the_last_key_is_found_as_a_byte_search_finds_it() {
        let naive = |hay: &[u8], key: &[u8]| hay.windows(key.len()).rposition(|w| w == key);
        let pieces: [&[u8]; 8] = [
            b"\"usage\"",
            b"\"usageMetadata\"",
            b"u",
            b"\"",
            b"\"usag",
            b"sage\"",
            b"{\"prompt_tokens\":1}",
            b"uu\"u",
        ];
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            let mut hay = Vec::new();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            for i in 0..(x % 9) {
                hay.extend_from_slice(pieces[((x >> (4 * i)) % 8) as usize]);
            }
            for key in [&b"\"usage\""[..], b"\"usageMetadata\""] {
                assert_eq!(
                    rfind_key(&hay, key),
                    naive(&hay, key),
                    "{}",
                    String::from_utf8_lossy(&hay)
                );
            }
        }
    }

    #[test]
    fn reads_a_value_and_ignores_what_follows() {
        let u = read(Family::OpenAi, br#"{"prompt_tokens":76,"completion_tokens":24,"total_tokens":100,"prompt_tokens_details":{"cached_tokens":6},"completion_tokens_details":{"reasoning_tokens":2}}, "x": 1}"#);
        assert_eq!(
            u,
            Some(Usage {
                cache_write: 0,
                input: 76,
                output: 24,
                cached_input: 6,
                reasoning: 2
            })
        );
        assert_eq!(read(Family::OpenAi, b"null"), None);
        assert_eq!(read(Family::OpenAi, br#"{"prompt_tokens":1.5}"#), None);
        let g = read(Family::Gemini, br#"{"promptTokenCount":12,"candidatesTokenCount":6,"thoughtsTokenCount":4,"totalTokenCount":22}"#).unwrap();
        assert_eq!((g.input, g.output, g.reasoning), (12, 10, 4));
    }

    #[test]
    fn anthropic_stream_usage_is_cumulative() {
        let mut a = AnthropicStreamUsage::default();
        assert_eq!(a.usage(), None);
        assert_eq!(a.apply(br#""usage""#), None);
        assert_eq!(a.usage(), None);
        assert!(a.apply(br#"{"input_tokens":377,"cache_creation_input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}"#).is_some());
        assert!(a.apply(br#"{"output_tokens":30}"#).is_some());
        let last =
            a.apply(br#"{"output_tokens":65,"output_tokens_details":{"thinking_tokens":7}}"#);
        let want = Usage {
            cache_write: 10,
            input: 392,
            output: 65,
            cached_input: 5,
            reasoning: 7,
        };
        assert_eq!(last, Some(want));
        assert_eq!(a.usage(), Some(want));
    }
}
