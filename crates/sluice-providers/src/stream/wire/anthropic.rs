//! Anthropic Messages stream event shapes (one per `event:` type).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// Any event, for its `type` when the SSE event has no name.
#[derive(Deserialize)]
pub(crate) struct TypeOnly<'a> {
    #[serde(borrow, rename = "type")]
    pub(crate) kind: Cow<'a, str>,
}

/// `message_start`.
#[derive(Deserialize)]
pub(crate) struct MessageStart<'a> {
    #[serde(borrow)]
    pub(crate) message: StartMessage<'a>,
}

/// `message_start.message`.
#[derive(Deserialize)]
pub(crate) struct StartMessage<'a> {
    #[serde(borrow, default)]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) usage: Option<&'a RawValue>,
}

/// `content_block_start`.
#[derive(Deserialize)]
pub(crate) struct BlockStart<'a> {
    pub(crate) index: u32,
    #[serde(borrow)]
    pub(crate) content_block: Block<'a>,
}

/// `content_block_start.content_block`.
#[derive(Deserialize)]
pub(crate) struct Block<'a> {
    #[serde(borrow, rename = "type")]
    pub(crate) kind: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) text: Option<&'a RawValue>,
    /// A `thinking` block's first text (empty in Anthropic's streams).
    #[serde(borrow, default)]
    pub(crate) thinking: Option<&'a RawValue>,
    /// `redacted_thinking`'s encrypted thinking.
    #[serde(borrow, default)]
    pub(crate) data: Option<&'a RawValue>,
}

/// `content_block_delta`.
#[derive(Deserialize)]
pub(crate) struct BlockDelta<'a> {
    pub(crate) index: u32,
    #[serde(borrow)]
    pub(crate) delta: DeltaBody<'a>,
}

/// `content_block_delta.delta`.
#[derive(Deserialize)]
pub(crate) struct DeltaBody<'a> {
    #[serde(borrow, rename = "type")]
    pub(crate) kind: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(crate) text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) partial_json: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) thinking: Option<&'a RawValue>,
    /// `signature_delta`: the thinking block's signature, just before its stop.
    #[serde(borrow, default)]
    pub(crate) signature: Option<&'a RawValue>,
}

/// `message_delta`.
#[derive(Deserialize)]
pub(crate) struct MessageDelta<'a> {
    #[serde(borrow)]
    pub(crate) delta: StopDelta<'a>,
    #[serde(borrow, default)]
    pub(crate) usage: Option<&'a RawValue>,
}

/// `message_delta.delta`.
#[derive(Deserialize)]
pub(crate) struct StopDelta<'a> {
    #[serde(borrow, default)]
    pub(crate) stop_reason: Option<Cow<'a, str>>,
}
