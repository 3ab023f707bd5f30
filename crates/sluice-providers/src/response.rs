//! Non-streaming response translation: the upstream's body in the client's format, and the
//! usage it reports.
//!
//! Same family: the upstream's bytes are the client's, and only the usage is read (a
//! targeted scan, [`crate::usage::scan`]). Another family: the body is read into a neutral
//! answer and written in the client's format, with the finish reason mapped (tool calls win
//! over Gemini's `STOP`), tool calls given ids (Gemini's, or made up, carrying any
//! `thoughtSignature` for the return trip), and usage normalised.

pub(crate) mod anthropic;
pub(crate) mod gemini;
pub(crate) mod openai;
pub(crate) mod responses;

use bytes::Bytes;

use crate::api::Operation;
use crate::chat::ToolCall;
use crate::finish::Finish;
use crate::provider::ProviderKind;
use crate::usage::{self, Usage};

/// How to read one upstream response.
#[derive(Clone, Copy, Debug)]
pub struct ResponseOptions<'a> {
    /// The client's operation.
    pub op: Operation,
    /// The provider that answered.
    pub provider: &'a ProviderKind,
    /// The model name sent upstream (the response names what actually answered).
    pub model: &'a str,
    /// Seconds since the epoch: `created` of a translated OpenAI response (this crate reads
    /// no clock). Not read for a body passed through (see [`passes_through`]).
    pub now_unix: u64,
}

/// A translated (or passed-through) response body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientResponse {
    /// The body for the client (the upstream's own bytes when no translation is needed).
    pub body: Bytes,
    /// The usage the response reports, if any.
    pub usage: Option<Usage>,
}

/// Why an upstream's successful response could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    /// Not JSON, or not the shape the provider documents.
    #[error("the upstream's response is not a valid {provider} response: {reason}")]
    Malformed {
        /// The provider.
        provider: &'static str,
        /// What was wrong.
        reason: String,
    },
}

impl ResponseError {
    /// `malformed_response`: for logs and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ResponseError::Malformed { .. } => "malformed_response",
        }
    }
}

/// Whether [`translate_response`] gives a response of `provider` to a client calling `op`
/// as it came (the same family), reading only its usage.
pub fn passes_through(op: Operation, provider: &ProviderKind) -> bool {
    op.family() == provider.family()
}

/// Translates a successful (2xx) non-streaming upstream body for the client.
///
/// The body is taken, not borrowed: one passed through is the client's as it is, where a
/// clone of a body read into one buffer cost it an allocation.
///
/// # Errors
/// [`ResponseError::Malformed`] when a body that must be translated cannot be parsed (a body
/// passed through untouched is never parsed beyond its usage).
pub fn translate_response(
    body: Bytes,
    opts: &ResponseOptions<'_>,
) -> Result<ClientResponse, ResponseError> {
    let upstream = opts.provider.family();
    if passes_through(opts.op, opts.provider) {
        let usage = usage::scan(upstream, &body);
        return Ok(ClientResponse { body, usage });
    }
    let body = &body;
    let malformed = |reason: String| ResponseError::Malformed {
        provider: opts.provider.as_str(),
        reason,
    };
    use crate::api::Family;
    let answer = match (opts.op, upstream) {
        (Operation::CountTokens, Family::Gemini) => {
            let body = gemini::count_tokens(body).map_err(malformed)?;
            return Ok(ClientResponse { body, usage: None });
        }
        (
            Operation::ChatCompletions
            | Operation::Messages
            | Operation::Responses
            | Operation::GenerateContent
            | Operation::StreamGenerateContent,
            Family::OpenAi,
        ) => openai::read(body, opts.model),
        (
            Operation::ChatCompletions
            | Operation::Messages
            | Operation::Responses
            | Operation::GenerateContent
            | Operation::StreamGenerateContent,
            Family::Anthropic,
        ) => anthropic::read(body, opts.model),
        (
            Operation::ChatCompletions
            | Operation::Messages
            | Operation::Responses
            | Operation::GenerateContent
            | Operation::StreamGenerateContent,
            Family::Gemini,
        ) => gemini::read(body, opts.model),
        (op, _) => Err(format!("{} responses are not translated", op.as_str())),
    }
    .map_err(malformed)?;
    let usage = answer.usage;
    let body = match opts.op {
        Operation::Messages => anthropic::write(answer),
        Operation::Responses => responses::write(answer, opts.now_unix),
        Operation::GenerateContent | Operation::StreamGenerateContent => gemini::write(answer),
        _ => openai::write(answer, opts.now_unix),
    }
    .map_err(malformed)?;
    Ok(ClientResponse { body, usage })
}

/// An answer, neutral.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    pub id: String,
    /// What answered.
    pub model: String,
    pub choices: Vec<Choice>,
    pub usage: Option<Usage>,
}

/// One choice of an answer.
#[derive(Clone, Debug)]
pub(crate) struct Choice {
    pub index: u32,
    pub text: String,
    /// Reasoning (Anthropic thinking, Gemini thought summaries): for OpenAI clients, as
    /// `reasoning_content`, the way streams send it; for Anthropic clients, as a thinking
    /// block when the upstream signed none ([`Choice::thinking`] is empty).
    pub reasoning: String,
    /// The upstream's signed reasoning (Anthropic thinking and redacted thinking blocks),
    /// in order: OpenAI clients get it as `thinking_blocks` to send back on their next turn.
    pub thinking: Vec<Thinking>,
    /// OpenAI's refusal message.
    pub refusal: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish: Finish,
    /// The stop sequence that was hit (Anthropic).
    pub stop_sequence: Option<String>,
}

/// One signed reasoning block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Thinking {
    /// Text with the provider's signature over it.
    Signed { text: String, signature: String },
    /// Encrypted (Anthropic `redacted_thinking`): opaque.
    Redacted { data: String },
}

impl Thinking {
    /// As an OpenAI client gets it in `thinking_blocks` (LiteLLM's shape, Anthropic's
    /// block).
    pub(crate) fn to_openai(&self) -> serde_json::Value {
        match self {
            Thinking::Signed { text, signature } => {
                serde_json::json!({"type": "thinking", "thinking": text, "signature": signature})
            }
            Thinking::Redacted { data } => {
                serde_json::json!({"type": "redacted_thinking", "data": data})
            }
        }
    }
}

impl Choice {
    /// A turn that made tool calls ended because of them, whatever the provider said
    /// (Gemini says `STOP`; some OpenAI-compatible servers say `stop`): the rule streams
    /// follow too ([`Finish::after_tools`]).
    pub(crate) fn settle_finish(&mut self) {
        self.finish = self.finish.after_tools(!self.tool_calls.is_empty());
    }
}

fn to_bytes<T: serde::Serialize>(v: &T) -> Result<Bytes, String> {
    serde_json::to_vec(v)
        .map(Bytes::from)
        .map_err(|e| e.to_string())
}
