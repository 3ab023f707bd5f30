//! Gemini `GenerateContentResponse` shapes: every `data:` chunk of a `?alt=sse` stream is one.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Few, First, Indexed};

/// One chunk.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Response<'a> {
    #[serde(borrow, default)]
    pub(crate) candidates: Option<First<Candidate<'a>>>,
    #[serde(borrow, default)]
    pub(crate) usage_metadata: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) response_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) model_version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) prompt_feedback: Option<PromptFeedback<'a>>,
    #[serde(borrow, default)]
    pub(crate) error: Option<&'a RawValue>,
}

/// One candidate.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Candidate<'a> {
    #[serde(borrow, default)]
    pub(crate) content: Option<Content<'a>>,
    #[serde(borrow, default)]
    pub(crate) finish_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(crate) index: Option<u32>,
}

impl Indexed for Candidate<'_> {
    fn index(&self) -> u32 {
        self.index.unwrap_or(0)
    }
}

/// A candidate's content.
#[derive(Deserialize)]
pub(crate) struct Content<'a> {
    #[serde(borrow, default)]
    pub(crate) parts: Option<Few<Part<'a>>>,
}

/// One part: text (a thought when `thought` is true) or a whole function call (with its
/// `thoughtSignature`, if any).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Part<'a> {
    #[serde(borrow, default)]
    pub(crate) text: Option<&'a RawValue>,
    #[serde(default)]
    pub(crate) thought: Option<bool>,
    #[serde(borrow, default)]
    pub(crate) function_call: Option<FunctionCall<'a>>,
    /// Gemini 3's signature on a `functionCall` part, to be sent back with the call.
    #[serde(borrow, default)]
    pub(crate) thought_signature: Option<&'a RawValue>,
}

/// A function call, arguments whole (`args` is an object).
#[derive(Deserialize)]
pub(crate) struct FunctionCall<'a> {
    #[serde(borrow, default)]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) args: Option<&'a RawValue>,
}

/// `promptFeedback`: only in the first chunk; a blocked prompt has no candidates.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PromptFeedback<'a> {
    #[serde(borrow, default)]
    pub(crate) block_reason: Option<Cow<'a, str>>,
}
