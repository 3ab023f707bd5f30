//! Stream translation: upstream SSE events in, client SSE events out, one event at a time.
//!
//! Every stream goes through a [`StreamTranslator`], translated or not: when the client's and
//! the upstream's families match, the translator forwards each event as the upstream's exact
//! bytes (a `Bytes` slice, no copy, no JSON parse after the commit point — DESIGN invariant 7)
//! and only classifies what the relay must know. Each emitted event carries an [`EventKind`]:
//! the relay holds [`EventKind::Preamble`] events until the first [`EventKind::Content`] (or a
//! [`EventKind::Trailer`] of an empty answer) commits the stream; before that a failure may
//! still be retried invisibly (DESIGN invariant 9).

use bytes::Bytes;
use sluice_sse::Event;

use crate::api::Operation;
use crate::provider::ProviderKind;
use crate::usage::Usage;

/// What an emitted event is, for the relay's commit logic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Before any content: OpenAI's role-only first chunk, Anthropic's `message_start`,
    /// `content_block_start`, `ping`. Held until the stream commits (bounded).
    Preamble,
    /// Content: a text, refusal or tool-call delta. The first one commits the stream.
    Content,
    /// The end of the answer: finish reasons, usage, `message_delta`/`message_stop`,
    /// `[DONE]`. Commits an answer that had no content.
    Trailer,
    /// An error event inside the stream; [`crate::error::classify_stream_error`] says which.
    Error,
}

/// One client event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emitted {
    /// The complete SSE event, ready to write (the upstream's own bytes when passed through).
    pub bytes: Bytes,
    /// What it is.
    pub kind: EventKind,
}

/// How to translate one stream.
#[derive(Clone, Copy, Debug)]
pub struct StreamOptions<'a> {
    /// The client's operation.
    pub op: Operation,
    /// The provider streaming.
    pub provider: &'a ProviderKind,
    /// The model name sent upstream (what the client's events name as the model).
    pub model: &'a str,
    /// The client asked for usage in its stream (OpenAI `include_usage`); if not, a usage
    /// chunk the gateway asked for on its own is removed from the client's stream.
    pub client_wants_usage: bool,
    /// Keep the assistant text emitted so far ([`StreamTranslator::text`]), for continuation.
    /// Off by default: passthrough streams then parse nothing after their commit.
    pub track_text: bool,
}

/// Translates one upstream stream into the client's events.
///
/// Holds only what it must between events (a tool call's partial arguments when the client's
/// format needs them whole, ids and indexes), never the whole stream.
pub trait StreamTranslator: Send {
    /// One upstream event in; zero or more client events appended to `out`.
    fn event(&mut self, event: &Event, out: &mut Vec<Emitted>);

    /// The upstream's stream ended cleanly (EOF after a complete event): whatever the client's
    /// format still needs to close the answer (Gemini streams have no end marker: an OpenAI
    /// client still gets its finish chunk and `[DONE]`).
    fn end(&mut self, out: &mut Vec<Emitted>);

    /// The usage seen so far (cumulative rules applied), if any.
    fn usage(&self) -> Option<Usage>;

    /// The assistant text emitted so far (only with [`StreamOptions::track_text`]).
    fn text(&self) -> &str;
}

/// The translator for a stream: a passthrough (same family) or a translating one.
pub fn translator(opts: &StreamOptions<'_>) -> Box<dyn StreamTranslator> {
    let _ = opts;
    todo!("sluice-providers: translator")
}
