//! OpenAI `chat.completion.chunk` (and legacy `text_completion` chunk) shapes.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Few, First, Indexed};

/// A chunk's identity, read from the first chunk only (every chunk repeats it).
#[derive(Deserialize)]
pub(crate) struct Head<'a> {
    #[serde(borrow, default)]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) created: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) model: Option<&'a RawValue>,
}

/// One chunk, less its identity ([`Head`]).
#[derive(Deserialize)]
pub(crate) struct Chunk<'a> {
    #[serde(borrow, default)]
    pub(crate) choices: Option<First<Choice<'a>>>,
    #[serde(borrow, default)]
    pub(crate) usage: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) error: Option<&'a RawValue>,
}

impl Chunk<'_> {
    /// `choices` is missing or empty (the usage chunk; Azure's first chunk).
    pub(crate) fn no_choices(&self) -> bool {
        self.choices.as_ref().is_none_or(|c| c.len == 0)
    }
}

/// One choice.
#[derive(Deserialize)]
pub(crate) struct Choice<'a> {
    #[serde(default)]
    pub(crate) index: Option<u32>,
    #[serde(borrow, default)]
    pub(crate) delta: Option<Delta<'a>>,
    /// Legacy completions' text.
    #[serde(borrow, default)]
    pub(crate) text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) finish_reason: Option<Cow<'a, str>>,
}

impl Indexed for Choice<'_> {
    fn index(&self) -> u32 {
        self.index.unwrap_or(0)
    }
}

/// A choice's delta.
#[derive(Deserialize)]
pub(crate) struct Delta<'a> {
    #[serde(borrow, default)]
    pub(crate) content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) refusal: Option<&'a RawValue>,
    /// vLLM, DeepSeek.
    #[serde(borrow, default)]
    pub(crate) reasoning_content: Option<&'a RawValue>,
    /// OpenRouter, newer vLLM.
    #[serde(borrow, default)]
    pub(crate) reasoning: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) tool_calls: Option<Few<ToolCall<'a>>>,
}

/// One tool call fragment: `id`, `type` and `function.name` only in a call's first fragment.
#[derive(Deserialize)]
pub(crate) struct ToolCall<'a> {
    #[serde(default)]
    pub(crate) index: Option<u32>,
    #[serde(borrow, default)]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) function: Option<Function<'a>>,
}

/// A fragment's function.
#[derive(Deserialize)]
pub(crate) struct Function<'a> {
    #[serde(borrow, default)]
    pub(crate) name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) arguments: Option<&'a RawValue>,
}
