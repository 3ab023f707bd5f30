//! Anthropic Messages shapes (APY = `anthropics/anthropic-sdk-python: src/anthropic/types/`):
//! the request the gateway writes when it translates *to* Anthropic, the `message` response
//! it reads and writes, usage and token counts.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::usage::record::Usage;

/// A request to `POST /messages` or `/messages/count_tokens`, as written by a translation
/// (APY `message_create_params.py`, `message_count_tokens_params.py`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct MessagesRequest {
    /// The model.
    pub model: String,
    /// The conversation (`user`/`assistant`, alternating after merging).
    pub messages: Vec<Message>,
    /// Required by `/messages`; count_tokens takes none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The system prompt, one text block per system message of the client.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<Block>,
    /// `temperature` (0–1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<serde_json::Number>,
    /// `top_p`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<serde_json::Number>,
    /// `top_k`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u64>,
    /// `stop_sequences`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// `stream`.
    #[serde(skip_serializing_if = "crate::shape::is_false")]
    pub stream: bool,
    /// Tool definitions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// `{"type":"auto"|"any"|"tool"|"none", "name"?, "disable_parallel_tool_use"?}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// `{"user_id"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    /// `{"format":{"type":"json_schema","schema"}}` (APY `output_config_param.py`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_config: Option<Value>,
    /// `{"type":"enabled","budget_tokens"}` or `{"type":"adaptive"}` (APY
    /// `thinking_config_*_param.py`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Value>,
}

/// `metadata` (APY `metadata_param.py`).
#[derive(Clone, Debug, Serialize)]
pub struct Metadata {
    /// An opaque end-user id.
    pub user_id: String,
}

/// A message of the conversation.
#[derive(Clone, Debug, Serialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: &'static str,
    /// Its blocks (never an empty text block: Anthropic refuses those).
    pub content: Vec<Block>,
}

/// A content block of a request (APY `*_block_param.py`), tagged by `type`.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Text (non-empty).
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// Base64 or URL.
        source: Source,
    },
    /// A document (PDF).
    Document {
        /// Base64 or URL.
        source: Source,
    },
    /// A call the model made earlier.
    ToolUse {
        /// Its id (`^[a-zA-Z0-9_-]+$`).
        id: String,
        /// The tool.
        name: String,
        /// The arguments: an object.
        input: Value,
    },
    /// Signed thinking from an earlier turn, sent back exactly (APY
    /// `thinking_block_param.py`).
    Thinking {
        /// The thinking text.
        thinking: String,
        /// Anthropic's signature over it.
        signature: String,
    },
    /// Encrypted thinking from an earlier turn, opaque.
    RedactedThinking {
        /// As Anthropic sent it.
        data: String,
    },
    /// A tool's result, in the user message right after the call.
    ToolResult {
        /// The call it answers.
        tool_use_id: String,
        /// Text and image blocks; omitted when empty.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        content: Vec<Block>,
        /// The tool failed.
        #[serde(skip_serializing_if = "crate::shape::is_false")]
        is_error: bool,
    },
}

/// Where an image's or document's bytes are (APY `base64_image_source_param.py`,
/// `url_image_source_param.py`).
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Source {
    /// Inline.
    Base64 {
        /// `image/jpeg|png|gif|webp`, `application/pdf`.
        media_type: String,
        /// The base64 bytes.
        data: String,
    },
    /// Fetched by Anthropic.
    Url {
        /// `https://...`.
        url: String,
    },
}

/// A tool definition (APY `tool_param.py`).
#[derive(Clone, Debug, Serialize)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of its input (required; `{"type":"object"}` when the client gave none).
    pub input_schema: Value,
    /// Strict schema adherence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A `message` response body (APY `message.py`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MessageResponse {
    /// `msg_...`.
    #[serde(default)]
    pub id: String,
    /// `"message"`.
    #[serde(rename = "type", default = "message_type")]
    pub kind: String,
    /// `"assistant"`.
    #[serde(default = "assistant_role")]
    pub role: String,
    /// The answer's blocks.
    #[serde(default)]
    pub content: Vec<ResponseBlock>,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// `end_turn`, `max_tokens`, `stop_sequence`, `tool_use`, `pause_turn`, `refusal`, ...
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// The stop sequence that was hit.
    #[serde(default)]
    pub stop_sequence: Option<String>,
    /// Token usage.
    pub usage: UsageBody,
}

fn message_type() -> String {
    "message".to_string()
}

fn assistant_role() -> String {
    "assistant".to_string()
}

/// A content block of a response (APY `content_block.py`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call.
    ToolUse {
        /// `toolu_...`.
        id: String,
        /// The tool.
        name: String,
        /// The arguments (an object).
        #[serde(default)]
        input: Value,
    },
    /// Extended thinking (OpenAI clients get its text as `reasoning_content`).
    Thinking {
        /// The thinking text.
        #[serde(default)]
        thinking: String,
        /// Its signature.
        #[serde(default)]
        signature: String,
    },
    /// Encrypted thinking.
    RedactedThinking {
        /// Opaque.
        #[serde(default)]
        data: String,
    },
    /// Server-tool blocks and anything newer: not translated.
    #[serde(other)]
    Other,
}

/// `usage` of a message (APY `usage.py`): `input_tokens` excludes the cache reads and
/// writes, which are reported beside it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageBody {
    /// Prompt tokens neither read from nor written to the cache.
    pub input_tokens: u64,
    /// Generated tokens, thinking included.
    pub output_tokens: u64,
    /// Prompt tokens written to the cache.
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
    /// `thinking_tokens` (new in 2026).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_details: Option<OutputTokensDetails>,
}

/// `usage.output_tokens_details`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputTokensDetails {
    /// Thinking tokens (counted in `output_tokens`).
    #[serde(default)]
    pub thinking_tokens: Option<u64>,
}

impl UsageBody {
    /// Normalised usage: input is the sum of the uncached, cache-written and cache-read
    /// tokens (the docs call total input "the summation").
    pub fn to_usage(&self) -> Usage {
        let writes = self.cache_creation_input_tokens.unwrap_or(0);
        let reads = self.cache_read_input_tokens.unwrap_or(0);
        Usage {
            input: self.input_tokens + writes + reads,
            output: self.output_tokens,
            cached_input: reads,
            reasoning: self
                .output_tokens_details
                .as_ref()
                .and_then(|d| d.thinking_tokens)
                .unwrap_or(0),
            cache_write: writes,
        }
    }

    /// The body for normalised usage (what an Anthropic client reads): the cache reads and
    /// writes move out of `input_tokens` into their own counts (writes are 0 from providers
    /// that do not report them).
    pub fn from_usage(u: &Usage) -> UsageBody {
        UsageBody {
            input_tokens: u.input.saturating_sub(u.cached_input + u.cache_write),
            output_tokens: u.output,
            cache_creation_input_tokens: Some(u.cache_write),
            cache_read_input_tokens: Some(u.cached_input),
            // Reasoning tokens (counted in `output_tokens`) when there were any.
            output_tokens_details: (u.reasoning > 0).then_some(OutputTokensDetails {
                thinking_tokens: Some(u.reasoning),
            }),
        }
    }
}

/// `usage` as a stream reports it, in `message_start`'s message and in each `message_delta`
/// (APY `usage.py`, `message_delta_usage.py`): a `message_delta` repeats only some counts, so
/// every count may be absent. Counts are cumulative: [`UsageBody::update`] replaces the
/// earlier ones with those given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct UsageUpdate {
    /// Prompt tokens neither read from nor written to the cache.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Prompt tokens written to the cache.
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
    /// Generated tokens so far, thinking included.
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// `thinking_tokens`.
    #[serde(default)]
    pub output_tokens_details: Option<OutputTokensDetails>,
}

impl UsageBody {
    /// Applies a stream's usage update: each count it gives replaces this one.
    pub fn update(&mut self, u: &UsageUpdate) {
        if let Some(n) = u.input_tokens {
            self.input_tokens = n;
        }
        if let Some(n) = u.cache_creation_input_tokens {
            self.cache_creation_input_tokens = Some(n);
        }
        if let Some(n) = u.cache_read_input_tokens {
            self.cache_read_input_tokens = Some(n);
        }
        if let Some(n) = u.output_tokens {
            self.output_tokens = n;
        }
        if let Some(n) = u
            .output_tokens_details
            .as_ref()
            .and_then(|d| d.thinking_tokens)
        {
            self.output_tokens_details = Some(OutputTokensDetails {
                thinking_tokens: Some(n),
            });
        }
    }
}

/// A `/messages/count_tokens` response (APY `message_tokens_count.py`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCount {
    /// The prompt's tokens.
    pub input_tokens: u64,
}

/// An id Anthropic accepts for a `tool_use` block (`^[a-zA-Z0-9_-]+$`): other providers' ids
/// with any other character get it replaced by `_`, the same way in the call and in its
/// result, so they still pair up.
pub fn tool_use_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_tokens_count_as_input() {
        let u: UsageBody = serde_json::from_str(
            r#"{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000}"#,
        )
        .unwrap();
        let n = u.to_usage();
        assert_eq!(
            n,
            Usage {
                input: 1110,
                output: 5,
                cached_input: 1000,
                reasoning: 0,
                cache_write: 100,
            }
        );
        let back = UsageBody::from_usage(&n);
        assert_eq!(back.cache_creation_input_tokens, Some(100));
        assert_eq!(
            back.input_tokens
                + back.cache_read_input_tokens.unwrap()
                + back.cache_creation_input_tokens.unwrap(),
            1110
        );
    }

    #[test]
    fn unknown_blocks_are_kept_apart() {
        let m: MessageResponse = serde_json::from_str(
            r#"{"id":"m","content":[{"type":"server_tool_use","id":"x"},{"type":"text","text":"hi"}],"usage":{"input_tokens":1,"output_tokens":1}}"#,
        )
        .unwrap();
        assert_eq!(m.content[0], ResponseBlock::Other);
        assert_eq!(tool_use_id("call.1:x"), "call_1_x");
    }
}
