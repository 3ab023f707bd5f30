//! Stream translation: upstream SSE events in, client SSE events out, one event at a time.
//!
//! Every stream goes through a [`StreamTranslator`], translated or not: when the client's and
//! the upstream's families match, the translator forwards each event as the upstream's exact
//! bytes (a `Bytes` slice, no copy, no JSON parse after the commit point — DESIGN invariant 7)
//! and only classifies what the relay must know. Each emitted event carries an [`EventKind`]:
//! the relay holds [`EventKind::Preamble`] events until the first [`EventKind::Content`] (or a
//! [`EventKind::Trailer`] of an empty answer) commits the stream; before that a failure may
//! still be retried invisibly (DESIGN invariant 9). After the commit the relay forwards every
//! event at once, so kinds then only inform logs and metrics.
//!
//! # What [`translator`] returns
//!
//! | client op \ upstream | OpenAI-shaped (OpenAI, Azure, compatible) | Anthropic | Gemini |
//! |---|---|---|---|
//! | `ChatCompletions` | passthrough | translated | translated |
//! | `Messages` | translated | passthrough | translated |
//! | `Responses` | passthrough | translated | translated |
//! | `GenerateContent`, `StreamGenerateContent` | translated | translated | passthrough |
//! | `Completions` | passthrough | — | — |
//!
//! "—": no such translation exists (request translation refuses these pairs); the factory
//! then returns a passthrough that classifies by the upstream's family.
//!
//! A passthrough parses JSON only until the stream commits (the preamble and the first content
//! event); after that it looks at bytes only (`memchr` for `"finish_reason"`, `"usage"`,
//! `[DONE]`, the SSE event type), parses the one event that carries usage, and, when asked to
//! track text, the string value of each delta.
//!
//! A translating translator parses each upstream event once into borrowed, typed shapes
//! (strings stay in their escaped JSON form: text is copied from the upstream's JSON into the
//! client's without unescaping) and writes complete client events, byte for byte what
//! [`sluice_sse::Encoder`] writes. Between events it holds ids, indexes, the stop reason and
//! usage, and at most one tool call's arguments: only when an OpenAI-shaped upstream sends a
//! tool call's arguments before its name, which an Anthropic client needs first
//! ([`StreamTranslator::held_bytes`]); and, for an OpenAI client of an Anthropic upstream, the
//! open thinking block's text until its signature comes, to hand the client the signed block
//! whole (`thinking_blocks`; at most 4 MiB).
//!
//! Reasoning is translated like text, incrementally and apart from it: Anthropic
//! `thinking_delta`s, Gemini thought parts and OpenAI-compatible `reasoning_content` become
//! the client's `reasoning_content` deltas or `thinking` blocks (with the upstream's
//! `signature_delta`, or unsigned); reasoning deltas are content, so they commit the stream. It sees events only: upstream comments (`: ping`) are
//! the relay's to forward or drop.
//!
//! # Upstream errors and cut streams
//!
//! An upstream error event (Anthropic `event: error` after a 200, OpenAI `data: {"error":..}`,
//! a Gemini error chunk) becomes an error event in the client's format
//! ([`crate::error::sse_error_event`]) with [`EventKind::Error`], keeping the upstream's
//! code (`overloaded_error`, ...) and message. A translating translator whose upstream ends
//! without its end marker (no `message_stop`, no `[DONE]` and no finish reason, a Gemini stream
//! without a `finishReason`) ends the client's stream with an error event
//! (`upstream_stream_truncated`) instead of a made-up clean end; an upstream event it cannot
//! parse ends it with `upstream_malformed_event`. No `[DONE]`/`message_stop` follows an error.
//!
//! # Continuation
//!
//! With [`StreamOptions::continuation`], the stream continues an answer the client already
//! has (the policy stage cut the first stream after its commit and asked another attempt to go
//! on from the text sent so far, as an assistant prefill). Before the cut stream is dropped,
//! the gateway takes its [`StreamTranslator::splice_state`] and passes it as
//! [`StreamOptions::splice`]; the continuation's translator then:
//! - drops the new stream's preamble (OpenAI role chunk; Anthropic `message_start`, `ping`,
//!   and the `content_block_start` of a text block that continues the cut text block);
//! - writes the cut stream's ids: OpenAI chunks carry its `id`, `created` and `model`, and tool
//!   calls continue its `tool_calls` indexes; Anthropic content blocks continue its indexes (the
//!   first text goes on in the block the cut left open; if the continuation starts with a tool
//!   call, that block is closed first);
//! - reports usage in the client's stream as the cut stream's plus its own, while
//!   [`StreamTranslator::usage`] reports its own part only, so the gateway adds the parts with
//!   [`Usage::add`] to account for both attempts.
//!
//! A continuation is always re-encoded by the translating path, even when families match (the
//! upstream's extra fields such as `logprobs` or `system_fingerprint` are not carried): it is
//! an opt-in, rare path, and rewriting ids inside the upstream's bytes would cost the same.

pub(crate) mod client;
pub(crate) mod fault;
pub(crate) mod json;
mod passthrough;
mod scan;
mod translate;
pub(crate) mod upstream;
mod wire;

use bytes::Bytes;
use http::StatusCode;
use sluice_sse::Event;

use crate::api::{Family, Operation};
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
    /// The model name sent upstream: what a translated stream's events name as the model
    /// until the upstream names the one that answers (Anthropic `message_start`, an OpenAI
    /// chunk's `model`, Gemini `modelVersion`), as a whole response does.
    pub model: &'a str,
    /// The client asked for usage in its stream (OpenAI `include_usage`); if not, a usage
    /// chunk the gateway asked for on its own is removed from the client's stream.
    pub client_wants_usage: bool,
    /// Keep the assistant text emitted so far ([`StreamTranslator::text`]), for continuation.
    /// Off by default: passthrough streams then parse nothing after their commit.
    pub track_text: bool,
    /// Seconds since the Unix epoch: the `created` of OpenAI chunks translated from another
    /// family (this crate reads no clock). Default 0.
    pub created: u64,
    /// This stream continues an answer the client already has: its preamble is dropped and its
    /// ids and indexes continue the cut stream's (see the [module docs](self)). Default false.
    pub continuation: bool,
    /// With [`continuation`](StreamOptions::continuation): the cut stream's
    /// [`StreamTranslator::splice_state`]. `None` drops the preamble but keeps the new
    /// stream's own ids. Ignored without `continuation`.
    pub splice: Option<&'a SpliceState>,
}

impl<'a> StreamOptions<'a> {
    /// Options for a plain stream: no usage asked by the client, no text tracking, `created`
    /// 0, no continuation.
    pub fn new(op: Operation, provider: &'a ProviderKind, model: &'a str) -> Self {
        StreamOptions {
            op,
            provider,
            model,
            client_wants_usage: false,
            track_text: false,
            created: 0,
            continuation: false,
            splice: None,
        }
    }
}

/// What a continuation needs to know about the stream it continues, in the client's terms:
/// the ids the client has seen and where its content stopped. Taken from the cut stream's
/// translator with [`StreamTranslator::splice_state`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpliceState {
    /// OpenAI clients: the chunks' `id`. Anthropic clients: the `message_start` message id.
    pub id: String,
    /// OpenAI clients: the chunks' `created`.
    pub created: u64,
    /// The `model` the client's events named.
    pub model: String,
    /// Anthropic clients: the index of the text content block the cut left open (started,
    /// not stopped), which the continuation's text goes on in.
    pub open_text_block: Option<u32>,
    /// Anthropic clients: the first content block index not used yet.
    pub next_block: u32,
    /// OpenAI clients: the first `tool_calls` index not used yet.
    pub next_tool_call: u32,
    /// The usage the client's stream has reported so far, earlier parts of a chain of
    /// continuations included (zero if it reported none).
    pub usage: Usage,
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

    /// The usage seen so far (cumulative rules applied), if any. A continuation reports its
    /// own part only.
    fn usage(&self) -> Option<Usage>;

    /// The assistant text emitted so far (only with [`StreamOptions::track_text`]).
    fn text(&self) -> &str;

    /// Bytes held between events beyond ids, indexes and counters: a tool call's arguments
    /// waiting for its name (at most 1 MiB; past that the stream ends with an error), a signed
    /// thinking block's text waiting for its signature (at most 4 MiB, likewise). Zero for a
    /// passthrough. (Not counted: a Gemini stream's latest `usageMetadata`, kept as text to
    /// be parsed once at the end, a part of the last complete event.)
    fn held_bytes(&self) -> usize;

    /// What a continuation of this stream needs ([`StreamOptions::splice`]), once the client
    /// has seen the start of the answer; `None` before that. Exact only with
    /// [`StreamOptions::track_text`] (a passthrough counts tool calls only then; an OpenAI
    /// chat passthrough without it has none to give).
    fn splice_state(&self) -> Option<SpliceState>;

    /// The gateway ends the client's stream with an error of its own (an idle timeout, the
    /// upstream cut, a guardrail, a token cap): the events that say so in the client's API,
    /// going on from the events this translator emitted (a Responses stream's `error` and
    /// `response.failed`, their `sequence_number`s continuing the stream's). Nothing when
    /// the client's stream is already closed (its answer ended, or an error did).
    fn fail(&mut self, status: StatusCode, code: &str, message: &str, out: &mut Vec<Emitted>);

    /// The last `events` this translator emitted never reached the client (the gateway
    /// withdrew them: a guardrail stopped the answer), so a numbered stream's error events
    /// ([`StreamTranslator::fail`]) go on from the last one the client has. Nothing to do for
    /// an unnumbered stream.
    fn withdraw(&mut self, events: usize) {
        let _ = events;
    }
}

/// The error events of a stream that ends before any of its events reached the client (the
/// policy gave up before the commit): [`StreamTranslator::fail`]'s events for a stream with
/// none before them (a Responses client's numbered from 0).
pub fn gateway_error_events(op: Operation, status: StatusCode, code: &str, message: &str) -> Bytes {
    let fault = fault::Fault::with(status.as_u16(), code, message);
    if op == Operation::Responses {
        client::responses::failure_events(0, None, None, &fault)
    } else {
        fault.event(op.family())
    }
}

/// The translator for a stream: a passthrough (same family) or a translating one (see the
/// [module docs](self) for the table).
pub fn translator(opts: &StreamOptions<'_>) -> Box<dyn StreamTranslator> {
    translate::build(opts)
}

/// Classifies one event of `family`'s stream format on its own, as a passthrough does before
/// its stream commits: parses an OpenAI or Gemini data chunk, reads an Anthropic or OpenAI
/// Responses event's type. For the relay and tests; a [`StreamTranslator`] does this itself
/// and stops parsing after the commit.
pub fn classify_event(family: Family, event: &Event) -> EventKind {
    passthrough::classify(family, event)
}
