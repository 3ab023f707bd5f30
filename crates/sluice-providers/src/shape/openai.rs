//! OpenAI Chat Completions shapes (OAS = `openai/openai-openapi: openapi.yaml`,
//! `components.schemas.*`): the request parts the gateway writes when it translates *to* an
//! OpenAI-shaped upstream, the `chat.completion` response it reads and writes, and usage.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::usage::record::Usage;

/// A request to `POST /chat/completions`, as written by a translation (OAS
/// `CreateChatCompletionRequest`). Only fields some other family can express exist here.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ChatRequest {
    /// The model.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// `max_completion_tokens` (includes reasoning; `max_tokens` is deprecated and refused
    /// by o-series models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    /// `temperature` (0–2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<serde_json::Number>,
    /// `top_p`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<serde_json::Number>,
    /// `top_k`: not in OpenAI's API (which refuses it with a 400); vLLM and other
    /// OpenAI-compatible servers honour it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u64>,
    /// `stop` sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// `stream`.
    #[serde(skip_serializing_if = "crate::shape::is_false")]
    pub stream: bool,
    /// `stream_options` (`include_usage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Tool definitions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// `"none"`, `"auto"`, `"required"` or `{"type":"function","function":{"name"}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// `parallel_tool_calls` (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// `response_format`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    /// `user`: the end user, for abuse monitoring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `reasoning_effort`: `minimal`, `low`, `medium`, `high`, `xhigh` (OAS
    /// `ReasoningEffort`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<&'static str>,
    /// vLLM: continue the final assistant message instead of starting a new one (prefill).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continue_final_message: Option<bool>,
    /// vLLM: `false` with `continue_final_message` (they cannot be used together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add_generation_prompt: Option<bool>,
}

/// `stream_options` (OAS `ChatCompletionStreamOptions`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StreamOptions {
    /// A last chunk with `choices: []` and the usage.
    #[serde(default)]
    pub include_usage: bool,
}

/// One message (OAS `ChatCompletionRequestMessage`), tagged by `role`.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions.
    System {
        /// Text, or text parts.
        content: Content,
    },
    /// The user's turn.
    User {
        /// Text, or parts (text, images, files, audio).
        content: Content,
    },
    /// The model's earlier turn. `content` is `null` when there are only tool calls: an
    /// empty string there is a text block some providers refuse.
    Assistant {
        /// The text, if any.
        content: Option<String>,
        /// The calls it made.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result for one call.
    Tool {
        /// The call this answers.
        tool_call_id: String,
        /// The result (text).
        content: Content,
    },
}

/// A message's content: a plain string or typed parts.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Content {
    /// One text.
    Text(String),
    /// Typed parts.
    Parts(Vec<ContentPart>),
}

/// A content part (OAS `ChatCompletionRequestMessageContentPart*`).
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image by URL or as a `data:` URL holding base64.
    ImageUrl {
        /// `{"url": ...}`.
        image_url: ImageUrl,
    },
    /// A file (PDF) as a `data:` URL.
    File {
        /// `{"file_data", "filename"}`.
        file: FileData,
    },
}

/// `image_url` of an image part.
#[derive(Clone, Debug, Serialize)]
pub struct ImageUrl {
    /// `https://...` or `data:image/png;base64,...`.
    pub url: String,
}

/// `file` of a file part.
#[derive(Clone, Debug, Serialize)]
pub struct FileData {
    /// `data:application/pdf;base64,...`.
    pub file_data: String,
    /// A file name (required by OpenAI with `file_data`).
    pub filename: String,
}

/// A tool definition (OAS `ChatCompletionTool`).
#[derive(Clone, Debug, Serialize)]
pub struct Tool {
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function.
    pub function: Function,
}

/// A function definition (OAS `FunctionObject`).
#[derive(Clone, Debug, Serialize)]
pub struct Function {
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of its arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// Strict schema adherence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A tool call, in a request's history or a response (OAS `ChatCompletionMessageToolCall`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Its id, echoed by the `tool` message that answers it.
    #[serde(default)]
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function and its arguments.
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_string()
}

/// The function a tool call calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    #[serde(default)]
    pub name: String,
    /// The arguments: a JSON **string** (which the model may have made invalid).
    #[serde(default)]
    pub arguments: String,
}

/// A `chat.completion` response body (OAS `CreateChatCompletionResponse`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatCompletion {
    /// `chatcmpl-...`.
    #[serde(default)]
    pub id: String,
    /// `"chat.completion"`.
    #[serde(default = "chat_completion_object")]
    pub object: String,
    /// Unix seconds.
    #[serde(default)]
    pub created: u64,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// One per `n`.
    #[serde(default)]
    pub choices: Vec<Choice>,
    /// Token usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageBody>,
}

fn chat_completion_object() -> String {
    "chat.completion".to_string()
}

/// One choice of a `chat.completion`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Choice {
    /// Its position.
    #[serde(default)]
    pub index: u32,
    /// The answer.
    pub message: ResponseMessage,
    /// `stop`, `length`, `tool_calls`, `content_filter` (see [`crate::finish`]).
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Log probabilities (never produced by a translation: `logprobs` is refused for other
    /// families).
    #[serde(default)]
    pub logprobs: Option<Value>,
}

/// The assistant message of a choice.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResponseMessage {
    /// `"assistant"`.
    #[serde(default = "assistant_role")]
    pub role: String,
    /// The text; `null` with only tool calls.
    #[serde(default)]
    pub content: Option<String>,
    /// A refusal message, instead of content.
    #[serde(default)]
    pub refusal: Option<String>,
    /// Reasoning text: not in OpenAI's schema, the field vLLM, DeepSeek and LiteLLM use
    /// (what streams send as `delta.reasoning_content`); written only for reasoning
    /// translated from another family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Reasoning text as OpenRouter and newer vLLM name it (read only).
    #[serde(default, skip_serializing)]
    pub reasoning: Option<String>,
    /// Signed reasoning for the client to send back with this message on its next turn
    /// (Anthropic's `thinking` / `redacted_thinking` blocks, as LiteLLM gives them to OpenAI
    /// clients): not in OpenAI's schema; the OpenAI SDKs keep it as an extra field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_blocks: Option<Vec<Value>>,
    /// The calls the model made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

fn assistant_role() -> String {
    "assistant".to_string()
}

/// `usage` of a chat completion, legacy completion or embeddings response (OAS
/// `CompletionUsage`, `CreateEmbeddingResponse.usage`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageBody {
    /// All prompt tokens, cached ones included. Required: it tells a usage object from any
    /// other object under a `"usage"` key.
    pub prompt_tokens: u64,
    /// Generated tokens, reasoning included (absent for embeddings).
    #[serde(default)]
    pub completion_tokens: u64,
    /// `prompt_tokens + completion_tokens`.
    #[serde(default)]
    pub total_tokens: u64,
    /// `cached_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// `reasoning_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// `usage.prompt_tokens_details`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens read from the cache.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

/// `usage.completion_tokens_details`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionTokensDetails {
    /// Reasoning tokens (counted in `completion_tokens`).
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

impl UsageBody {
    /// Normalised usage.
    pub fn to_usage(&self) -> Usage {
        Usage {
            input: self.prompt_tokens,
            output: self.completion_tokens,
            cached_input: self
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
            reasoning: self
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
            cache_write: 0,
        }
    }

    /// The body for normalised usage (what an OpenAI client reads).
    pub fn from_usage(u: &Usage) -> UsageBody {
        UsageBody {
            prompt_tokens: u.input,
            completion_tokens: u.output,
            total_tokens: u.input + u.output,
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: Some(u.cached_input),
            }),
            completion_tokens_details: Some(CompletionTokensDetails {
                reasoning_tokens: Some(u.reasoning),
            }),
        }
    }
}

/// `usage` of a Responses API response (OAS `ResponseUsage`): named like Anthropic's fields,
/// but `input_tokens` includes the cached ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ResponsesUsage {
    /// All input tokens.
    pub input_tokens: u64,
    /// All output tokens, reasoning included.
    pub output_tokens: u64,
    /// `cached_tokens`.
    #[serde(default)]
    pub input_tokens_details: Option<PromptTokensDetails>,
    /// `reasoning_tokens`.
    #[serde(default)]
    pub output_tokens_details: Option<CompletionTokensDetails>,
}

impl ResponsesUsage {
    /// Normalised usage.
    pub fn to_usage(&self) -> Usage {
        Usage {
            input: self.input_tokens,
            output: self.output_tokens,
            cached_input: self
                .input_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
            reasoning: self
                .output_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
            cache_write: 0,
        }
    }
}

/// A `data:` URL's media type and base64 payload (`data:image/png;base64,iVBOR...`), as
/// OpenAI carries inline images and files. `None` for any other URL.
pub fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?;
    Some((media_type, data))
}

/// `data:{media_type};base64,{data}`.
pub fn data_url(media_type: &str, data: &str) -> String {
    let mut s = String::with_capacity(media_type.len() + data.len() + 13);
    s.push_str("data:");
    s.push_str(media_type);
    s.push_str(";base64,");
    s.push_str(data);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls() {
        assert_eq!(
            parse_data_url("data:image/png;base64,iVBOR"),
            Some(("image/png", "iVBOR"))
        );
        assert_eq!(parse_data_url("https://x/y.png"), None);
        assert_eq!(parse_data_url("data:text/plain,hello"), None);
        assert_eq!(data_url("image/gif", "R0lG"), "data:image/gif;base64,R0lG");
    }

    #[test]
    fn usage_details_may_be_null() {
        let u: UsageBody = serde_json::from_str(
            r#"{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":null}"#,
        )
        .unwrap();
        assert_eq!(
            u.to_usage(),
            Usage {
                input: 10,
                output: 5,
                cached_input: 0,
                reasoning: 0,
                cache_write: 0,
            }
        );
    }
}
