//! Bedrock Converse shapes (botocore `bedrock-runtime` 2023-09-30 `service-2.json`, REST-JSON:
//! blobs are base64 strings, unions are objects with one member): the request a translation
//! writes, the response it reads, and the usage both report.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::usage::record::Usage;

/// `ConverseRequest` / `ConverseStreamRequest` (the body; `modelId` is in the path).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConverseRequest {
    /// The conversation, `user` and `assistant` alternating.
    pub messages: Vec<Message>,
    /// `SystemContentBlock`s: text and cache points.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<SystemBlock>,
    /// `maxTokens`, `temperature`, `topP`, `stopSequences`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inference_config: Option<InferenceConfig>,
    /// Tools and the tool choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_config: Option<ToolConfig>,
    /// Model-specific parameters Converse has no field for (`top_k` for Anthropic models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_model_request_fields: Option<Map<String, Value>>,
    /// `OutputConfig`: structured output (`textFormat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_config: Option<Value>,
}

/// `Message`.
#[derive(Clone, Debug, Serialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: &'static str,
    /// Its blocks (never empty).
    pub content: Vec<ContentBlock>,
}

/// `ContentBlock`, a union: one member per block (`{"text": ..}`, `{"toolUse": {..}}`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ContentBlock {
    /// Text (never blank: Bedrock refuses blank text).
    Text(String),
    /// An image, inline or in S3.
    Image(MediaBlock),
    /// A document (PDF), inline or in S3.
    Document(DocumentBlock),
    /// A call the model made earlier.
    ToolUse(ToolUse),
    /// A tool's answer.
    ToolResult(ToolResult),
    /// A prompt-cache breakpoint.
    CachePoint(CachePoint),
}

/// `SystemContentBlock`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SystemBlock {
    /// System text (non-empty).
    Text(String),
    /// A prompt-cache breakpoint.
    CachePoint(CachePoint),
}

/// `CachePointBlock`: `{"type": "default"}`.
#[derive(Clone, Debug, Serialize)]
pub struct CachePoint {
    /// Always `default`.
    #[serde(rename = "type")]
    pub kind: &'static str,
}

impl CachePoint {
    /// The only kind there is.
    pub const DEFAULT: CachePoint = CachePoint { kind: "default" };
}

/// `ImageBlock`.
#[derive(Clone, Debug, Serialize)]
pub struct MediaBlock {
    /// `png`, `jpeg`, `gif`, `webp`.
    pub format: String,
    /// Where its bytes are.
    pub source: Source,
}

/// `DocumentBlock`.
#[derive(Clone, Debug, Serialize)]
pub struct DocumentBlock {
    /// `pdf`, ...
    pub format: String,
    /// A name, required by Bedrock (and shown to the model).
    pub name: String,
    /// Where its bytes are.
    pub source: Source,
}

/// `ImageSource` / `DocumentSource`: base64 bytes or an S3 object.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// Base64 (a REST-JSON blob).
    Bytes(String),
    /// `{"uri": "s3://bucket/key"}`.
    S3Location {
        /// The `s3://` URI.
        uri: String,
    },
}

/// `ToolUseBlock`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolUse {
    /// `[a-zA-Z0-9_.:-]{1,64}`.
    pub tool_use_id: String,
    /// The tool.
    pub name: String,
    /// The arguments, a JSON object.
    #[serde(default)]
    pub input: Value,
}

/// `ToolResultBlock`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The call it answers.
    pub tool_use_id: String,
    /// Text and images.
    pub content: Vec<ToolResultContent>,
    /// `error` for a failed call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
}

/// `ToolResultContentBlock`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ToolResultContent {
    /// Text.
    Text(String),
    /// An image.
    Image(MediaBlock),
}

/// `InferenceConfiguration`.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceConfig {
    /// Most tokens to generate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<serde_json::Number>,
    /// Nucleus sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<serde_json::Number>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
}

impl InferenceConfig {
    /// Nothing set.
    pub fn is_empty(&self) -> bool {
        self.max_tokens.is_none()
            && self.temperature.is_none()
            && self.top_p.is_none()
            && self.stop_sequences.is_empty()
    }
}

/// `ToolConfiguration`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolConfig {
    /// `Tool`s: `{"toolSpec": ..}` or `{"cachePoint": ..}`.
    pub tools: Vec<Tool>,
    /// `{"auto":{}}`, `{"any":{}}` or `{"tool":{"name"}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
}

/// `Tool`, a union.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Tool {
    /// A function.
    ToolSpec(ToolSpec),
    /// A prompt-cache breakpoint after the tools before it.
    CachePoint(CachePoint),
}

/// `ToolSpecification`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// `[a-zA-Z0-9_-]{1,64}`.
    pub name: String,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `{"json": <JSON Schema>}`.
    pub input_schema: Value,
}

/// `ConverseResponse` (what translation reads of it).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConverseResponse {
    /// `{"message": ..}`.
    #[serde(default)]
    pub output: Option<Output>,
    /// Why it stopped.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<TokenUsage>,
    /// Model-specific fields (Anthropic models: `stop_sequence`).
    #[serde(default)]
    pub additional_model_response_fields: Option<Value>,
}

/// `ConverseOutput`.
#[derive(Clone, Debug, Deserialize)]
pub struct Output {
    /// The answer.
    #[serde(default)]
    pub message: Option<OutputMessage>,
}

/// The answer's message.
#[derive(Clone, Debug, Deserialize)]
pub struct OutputMessage {
    /// Its blocks.
    #[serde(default)]
    pub content: Vec<OutputBlock>,
}

/// A `ContentBlock` of an answer: the members translation reads (others are ignored:
/// citations, images, ...).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputBlock {
    /// Text.
    #[serde(default)]
    pub text: Option<String>,
    /// A call.
    #[serde(default)]
    pub tool_use: Option<ToolUse>,
    /// Reasoning (`{"reasoningText": {"text", "signature"}}` or `redactedContent`).
    #[serde(default)]
    pub reasoning_content: Option<ReasoningContent>,
}

/// `ReasoningContentBlock`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningContent {
    /// The visible reasoning.
    #[serde(default)]
    pub reasoning_text: Option<ReasoningText>,
}

/// `ReasoningTextBlock`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ReasoningText {
    /// The text.
    #[serde(default)]
    pub text: String,
}

/// `TokenUsage`: `inputTokens` excludes the cache reads and writes, which are reported beside
/// it (`totalTokens` = input + output + cache reads + cache writes, AWS's prompt-caching
/// examples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Prompt tokens neither read from nor written to the cache.
    #[serde(default)]
    pub input_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// All of them.
    #[serde(default)]
    pub total_tokens: u64,
    /// Prompt tokens read from the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
    /// Prompt tokens written to the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_input_tokens: Option<u64>,
}

impl TokenUsage {
    /// Normalised usage: input includes the cache reads and writes (as for Anthropic).
    pub fn to_usage(&self) -> Usage {
        let reads = self.cache_read_input_tokens.unwrap_or(0);
        let writes = self.cache_write_input_tokens.unwrap_or(0);
        Usage {
            cache_write: writes,
            input: self.input_tokens + reads + writes,
            output: self.output_tokens,
            cached_input: reads,
            reasoning: 0,
        }
    }

    /// Prompt tokens written to the cache (priced apart by AWS; [`Usage::cache_write`]).
    pub fn cache_write(&self) -> u64 {
        self.cache_write_input_tokens.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_the_cache_as_input() {
        let u: TokenUsage = serde_json::from_str(
            r#"{"inputTokens":4,"outputTokens":251,"totalTokens":1459,"cacheReadInputTokens":0,"cacheWriteInputTokens":1204}"#,
        )
        .unwrap();
        let n = u.to_usage();
        assert_eq!(n.input + n.output, u.total_tokens);
        assert_eq!((n.input, n.cached_input, u.cache_write()), (1208, 0, 1204));
    }

    #[test]
    fn unions_have_one_member() {
        let b = serde_json::to_value([
            ContentBlock::Text("hi".into()),
            ContentBlock::CachePoint(CachePoint::DEFAULT),
            ContentBlock::ToolUse(ToolUse {
                tool_use_id: "t1".into(),
                name: "f".into(),
                input: serde_json::json!({}),
            }),
        ])
        .unwrap();
        assert_eq!(
            b,
            serde_json::json!([
                {"text": "hi"},
                {"cachePoint": {"type": "default"}},
                {"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}
            ])
        );
    }
}
