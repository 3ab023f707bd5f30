//! Usage as each family's stream reports it, read into [`Usage`], and written back in the
//! client's shape (provider-formats.md §3 and §4).
//!
//! Usage is parsed on its own (from the value of the `usage` key), so a usage shape we do not
//! understand (floats, strings) is ignored instead of failing the event it rides in.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::json::push_u64;
use crate::usage::Usage;

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

/// OpenAI chat `usage` (also Responses API `usage`: `input_tokens`, `output_tokens`).
#[derive(Deserialize)]
struct OpenAiUsage {
    #[serde(default, alias = "input_tokens")]
    prompt_tokens: Option<u64>,
    #[serde(default, alias = "output_tokens")]
    completion_tokens: Option<u64>,
    #[serde(default, alias = "input_tokens_details")]
    prompt_tokens_details: Option<Details>,
    #[serde(default, alias = "output_tokens_details")]
    completion_tokens_details: Option<Details>,
}

/// An OpenAI (chat or Responses) usage object. `None` unless it is one.
pub(crate) fn openai(raw: &[u8]) -> Option<Usage> {
    let u: OpenAiUsage = first_value(raw)?;
    Some(Usage {
        input: u.prompt_tokens.unwrap_or(0),
        output: u.completion_tokens.unwrap_or(0),
        cached_input: u
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0),
        reasoning: u
            .completion_tokens_details
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0),
    })
}

/// Anthropic's usage as a stream reports it: `message_start` gives all of it, each
/// `message_delta` the cumulative `output_tokens` and, in newer API versions, the input
/// counts again. Fields a `message_delta` leaves out keep their earlier values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AnthropicUsage {
    input: u64,
    cache_creation: u64,
    cache_read: u64,
    output: u64,
    thinking: u64,
}

#[derive(Deserialize)]
struct AnthropicWire {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    output_tokens_details: Option<ThinkingDetails>,
}

#[derive(Deserialize)]
struct ThinkingDetails {
    #[serde(default)]
    thinking_tokens: Option<u64>,
}

impl AnthropicUsage {
    /// Applies a `usage` object (of `message_start` or `message_delta`). False if it is not
    /// one.
    pub(crate) fn apply(&mut self, raw: &[u8]) -> bool {
        let Some(u) = first_value::<AnthropicWire>(raw) else {
            return false;
        };
        let set = |slot: &mut u64, v: Option<u64>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        set(&mut self.input, u.input_tokens);
        set(&mut self.cache_creation, u.cache_creation_input_tokens);
        set(&mut self.cache_read, u.cache_read_input_tokens);
        set(&mut self.output, u.output_tokens);
        set(
            &mut self.thinking,
            u.output_tokens_details.and_then(|d| d.thinking_tokens),
        );
        true
    }

    /// Normalised: `input` counts the cache reads and writes Anthropic reports apart.
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            input: self.input + self.cache_creation + self.cache_read,
            output: self.output,
            cached_input: self.cache_read,
            reasoning: self.thinking,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiWire {
    #[serde(default)]
    prompt_token_count: Option<u64>,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
    #[serde(default)]
    cached_content_token_count: Option<u64>,
    #[serde(default)]
    tool_use_prompt_token_count: Option<u64>,
}

/// A Gemini `usageMetadata` (cumulative: the caller keeps the last).
pub(crate) fn gemini(raw: &[u8]) -> Option<Usage> {
    let u: GeminiWire = first_value(raw)?;
    let thoughts = u.thoughts_token_count.unwrap_or(0);
    Some(Usage {
        input: u.prompt_token_count.unwrap_or(0) + u.tool_use_prompt_token_count.unwrap_or(0),
        output: u.candidates_token_count.unwrap_or(0) + thoughts,
        cached_input: u.cached_content_token_count.unwrap_or(0),
        reasoning: thoughts,
    })
}

/// Parses the JSON value at the start of `raw`, ignoring what follows it (so it works on the
/// rest of a document after a key).
fn first_value<'de, T: Deserialize<'de>>(raw: &'de [u8]) -> Option<T> {
    let mut de = serde_json::Deserializer::from_slice(raw);
    T::deserialize(&mut de).ok()
}

/// A `RawValue`'s bytes.
pub(crate) fn raw_bytes(raw: &RawValue) -> &[u8] {
    raw.get().as_bytes()
}

/// Appends OpenAI's chat `usage` object.
pub(crate) fn push_openai(out: &mut String, u: &Usage) {
    out.push_str("{\"prompt_tokens\":");
    push_u64(out, u.input);
    out.push_str(",\"completion_tokens\":");
    push_u64(out, u.output);
    out.push_str(",\"total_tokens\":");
    push_u64(out, u.input + u.output);
    out.push_str(",\"prompt_tokens_details\":{\"cached_tokens\":");
    push_u64(out, u.cached_input);
    out.push_str("},\"completion_tokens_details\":{\"reasoning_tokens\":");
    push_u64(out, u.reasoning);
    out.push_str("}}");
}

/// Appends Anthropic's `usage` object: `input_tokens` without the cache reads, which go in
/// `cache_read_input_tokens` (cache writes are not told apart once normalised).
pub(crate) fn push_anthropic(out: &mut String, u: &Usage, output: bool) {
    out.push_str("{\"input_tokens\":");
    push_u64(out, u.input.saturating_sub(u.cached_input));
    out.push_str(",\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":");
    push_u64(out, u.cached_input);
    out.push_str(",\"output_tokens\":");
    push_u64(out, if output { u.output } else { 0 });
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_usage() {
        let u = openai(br#"{"prompt_tokens":76,"completion_tokens":24,"total_tokens":100,"prompt_tokens_details":{"cached_tokens":6},"completion_tokens_details":{"reasoning_tokens":2}}, "x": 1}"#).unwrap();
        assert_eq!(
            u,
            Usage {
                input: 76,
                output: 24,
                cached_input: 6,
                reasoning: 2
            }
        );
        assert!(openai(b"null").is_none());
        assert!(openai(br#"{"prompt_tokens":1.5}"#).is_none());
    }

    #[test]
    fn anthropic_is_cumulative() {
        let mut a = AnthropicUsage::default();
        assert!(a.apply(br#"{"input_tokens":377,"cache_creation_input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}"#));
        assert!(a.apply(br#"{"output_tokens":30}"#));
        assert!(a.apply(br#"{"output_tokens":65}"#));
        assert_eq!(
            a.usage(),
            Usage {
                input: 392,
                output: 65,
                cached_input: 5,
                reasoning: 0
            }
        );
    }

    #[test]
    fn gemini_counts_thoughts_as_output() {
        let u = gemini(br#"{"promptTokenCount":12,"candidatesTokenCount":6,"thoughtsTokenCount":4,"totalTokenCount":22}"#).unwrap();
        assert_eq!((u.input, u.output, u.reasoning), (12, 10, 4));
    }
}
