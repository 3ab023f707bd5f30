//! The neutral conversation a cross-family request passes through: a client's body is read
//! into a [`ChatRequest`] once (OpenAI chat or Anthropic messages), then written in the
//! upstream's format (OpenAI, Anthropic or Gemini). Two readers and three writers instead of
//! one translator per pair.
//!
//! It holds what at least two families can express. What only the client's family has is
//! named in [`ChatRequest::foreign`], and every writer refuses (or, with
//! `drop_unsupported`, drops) those, so nothing changes meaning silently.

use serde_json::{Number, Value};

use crate::api::Family;
use crate::reasoning::{BudgetTable, Reasoning};

/// Who said it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    User,
    Assistant,
}

/// A client's request, neutral.
#[derive(Clone, Debug)]
pub(crate) struct ChatRequest {
    /// The client's family (names parameters in errors the way the client wrote them).
    pub source: Family,
    pub model: String,
    /// System prompt texts in order (OpenAI system/developer messages, Anthropic `system`).
    pub system: Vec<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    /// `parallel_tool_calls` (OpenAI) / `!disable_parallel_tool_use` (Anthropic).
    pub parallel_tool_calls: Option<bool>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<Number>,
    pub top_p: Option<Number>,
    pub top_k: Option<u64>,
    pub stop: Vec<String>,
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
    pub response_format: Option<ResponseFormat>,
    pub n: Option<u64>,
    pub seed: Option<i64>,
    pub frequency_penalty: Option<Number>,
    pub presence_penalty: Option<Number>,
    pub logprobs: bool,
    pub top_logprobs: Option<u64>,
    /// OpenAI `user` / Anthropic `metadata.user_id`.
    pub user: Option<String>,
    /// The conversation ends with an assistant message the model must continue (Anthropic
    /// prefill, or the gateway's continuation prefill).
    pub prefill: bool,
    /// Client parameters no other family has, as the client named them.
    pub foreign: Vec<String>,
    /// Where the client marked a cache breakpoint (Anthropic `cache_control`): only Bedrock
    /// writes them (`cachePoint` blocks); the other writers ignore them as a caching hint.
    pub cache_points: CachePoints,
    /// How hard to think (OpenAI `reasoning_effort`, Anthropic `thinking`); `None`: the
    /// model's default.
    pub reasoning: Option<Reasoning>,
    /// Effort levels as token budgets (the route's, or the default table).
    pub budgets: BudgetTable,
}

/// Cache breakpoints, each as the number of items before it, so they survive the readers
/// dropping empty items: a point after the first `n` system texts, after the first `n`
/// function tools, or after the first `n` parts of message `m` (its index in
/// [`ChatRequest::messages`] as read, before any merging).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CachePoints {
    pub system: Vec<usize>,
    pub tools: Vec<usize>,
    /// `(message index, parts before the point)`.
    pub messages: Vec<(usize, usize)>,
}

impl ChatRequest {
    pub fn new(source: Family) -> ChatRequest {
        ChatRequest {
            source,
            model: String::new(),
            system: Vec::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            tool_choice: None,
            parallel_tool_calls: None,
            max_tokens: None,
            temperature: None,
            top_p: None,
            top_k: None,
            stop: Vec::new(),
            stream: false,
            include_usage: false,
            response_format: None,
            n: None,
            seed: None,
            frequency_penalty: None,
            presence_penalty: None,
            logprobs: false,
            top_logprobs: None,
            user: None,
            prefill: false,
            foreign: Vec::new(),
            cache_points: CachePoints::default(),
            reasoning: None,
            budgets: BudgetTable::DEFAULT,
        }
    }

    /// Appends the gateway's continuation prefill: to the final assistant message when
    /// there is one (the client's own prefill comes first), else as a new one.
    pub fn append_prefill(&mut self, text: &str) {
        match self.messages.last_mut() {
            Some(m) if m.role == Role::Assistant => m.parts.push(Part::Text(text.to_string())),
            _ => self.messages.push(Message {
                role: Role::Assistant,
                parts: vec![Part::Text(text.to_string())],
            }),
        }
        self.prefill = true;
    }

    /// Whether the conversation ends with an assistant message.
    pub fn ends_with_assistant(&self) -> bool {
        self.messages
            .last()
            .is_some_and(|m| m.role == Role::Assistant)
    }

    /// The client's name for the parallel-calls switch.
    pub fn parallel_param(&self) -> &'static str {
        match self.source {
            Family::Anthropic => "tool_choice.disable_parallel_tool_use",
            _ => "parallel_tool_calls",
        }
    }
}

/// One message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Message {
    pub role: Role,
    pub parts: Vec<Part>,
}

/// One piece of a message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Part {
    /// Non-empty text.
    Text(String),
    Image(Media),
    /// A PDF.
    Document(Media),
    /// OpenAI `input_audio` (`format`: `wav`, `mp3`).
    Audio {
        data: String,
        format: String,
    },
    ToolCall(ToolCall),
    ToolResult(ToolResult),
    /// Reasoning from an earlier assistant turn with the provider's signature over it
    /// (Anthropic `thinking` blocks; OpenAI clients send them back as `thinking_blocks`).
    /// Only the provider that signed it takes it back: Anthropic refuses a tool-using
    /// assistant turn without its signed thinking when thinking is on. An empty signature
    /// marks reasoning no provider signed (another family's, shown to an Anthropic client).
    Thinking {
        text: String,
        signature: String,
    },
    /// Anthropic's encrypted thinking (`redacted_thinking`), opaque.
    RedactedThinking(String),
}

/// Where an image's or document's bytes are.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Media {
    Url(String),
    Base64 { media_type: String, data: String },
}

/// A call the model made.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolCall {
    pub id: String,
    pub name: String,
    /// A JSON object.
    pub arguments: Value,
}

/// A tool's answer to one call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolResult {
    pub call_id: String,
    /// The function's name, from the call earlier in the conversation (Gemini needs it).
    pub name: Option<String>,
    /// Text and images.
    pub content: Vec<Part>,
    pub is_error: bool,
}

impl ToolResult {
    /// The text parts, joined by newlines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for p in &self.content {
            if let Part::Text(t) = p {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(t);
            }
        }
        out
    }

    /// Whether it holds anything but text.
    pub fn has_non_text(&self) -> bool {
        self.content.iter().any(|p| !matches!(p, Part::Text(_)))
    }
}

/// A tool definition.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    pub parameters: Option<Value>,
    pub strict: Option<bool>,
}

/// Which tools the model may or must call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ToolChoice {
    Auto,
    Required,
    None,
    Function(String),
}

/// Structured output.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ResponseFormat {
    /// Any JSON object (OpenAI `json_object`).
    JsonObject,
    /// JSON matching a schema.
    JsonSchema {
        name: Option<String>,
        schema: Value,
        strict: Option<bool>,
    },
}

/// Consecutive messages of one role merged into one (Anthropic combines them anyway; Gemini
/// wants a parallel batch of function responses in one Content), after dropping messages
/// left empty.
pub(crate) fn merge_turns(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    for m in messages {
        if m.parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(prev) if prev.role == m.role => prev.parts.extend(m.parts),
            _ => out.push(m),
        }
    }
    out
}
