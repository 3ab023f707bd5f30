//! Writing the client's stream: one writer per client family, fed by an upstream reader
//! (`super::upstream`) in one vocabulary, so each translation pair is a reader and a writer.

pub(crate) mod anthropic;
pub(crate) mod gemini;
pub(crate) mod openai;
pub(crate) mod responses;

use super::fault::Fault;
use super::json::{JsonStr, JsonString};
use super::{Emitted, SpliceState, StreamOptions};
use crate::finish::Finish;
use crate::usage::Usage;

/// A piece of a tool call, as the upstream gave it. `key` (given beside it) names the call
/// in the upstream's terms (OpenAI `index`, Anthropic block index, Gemini call counter).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ToolPart<'a> {
    /// The call's id (first piece only).
    pub(crate) id: Option<JsonStr<'a>>,
    /// The function's name (first piece only, normally).
    pub(crate) name: Option<JsonStr<'a>>,
    /// A fragment of the arguments' JSON text (Gemini: all of it).
    pub(crate) args: Option<JsonStr<'a>>,
}

/// What an upstream reader tells the client's writer. Every method appends complete client
/// events to `out`. After [`Writer::done`] or [`Writer::fail`] the writer is closed and the
/// translator stops feeding it.
pub(crate) trait Writer: Send {
    /// The upstream's answer started (`id`: the upstream's message/chunk id; `model`: the
    /// model that answers, as the upstream names it, which the client's events name as a
    /// whole response does).
    fn start(
        &mut self,
        id: Option<JsonStr<'_>>,
        model: Option<JsonStr<'_>>,
        out: &mut Vec<Emitted>,
    );
    /// Assistant text.
    fn text(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>);
    /// An OpenAI refusal message (`delta.refusal`).
    fn refusal(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>);
    /// A signed reasoning block starts (Anthropic `thinking`): its text will be followed by
    /// [`Writer::reasoning_signature`] and closed by [`Writer::reasoning_stop`]. Reasoning
    /// without it (Gemini thoughts, OpenAI-compatible `reasoning_content`) is unsigned.
    fn reasoning_start(&mut self, out: &mut Vec<Emitted>);
    /// Reasoning ("thinking") text.
    fn reasoning(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>);
    /// The current reasoning block's signature (Anthropic `signature_delta`).
    fn reasoning_signature(&mut self, signature: JsonStr<'_>, out: &mut Vec<Emitted>);
    /// The upstream closed a reasoning block.
    fn reasoning_stop(&mut self, out: &mut Vec<Emitted>);
    /// Encrypted reasoning (Anthropic `redacted_thinking`), whole and opaque.
    fn redacted_reasoning(&mut self, data: JsonStr<'_>, out: &mut Vec<Emitted>);
    /// A piece of tool call `key`.
    fn tool(&mut self, key: u32, part: ToolPart<'_>, out: &mut Vec<Emitted>);
    /// The upstream closed its current content block (Anthropic `content_block_stop`; a whole
    /// Gemini function call).
    fn block_stop(&mut self, out: &mut Vec<Emitted>);
    /// The model stopped.
    fn finish(&mut self, reason: Finish, out: &mut Vec<Emitted>);
    /// The upstream's cumulative usage so far.
    fn usage(&mut self, usage: Usage);
    /// The upstream's answer is complete: close the client's stream.
    fn done(&mut self, out: &mut Vec<Emitted>);
    /// End the client's stream with an error event.
    fn fail(&mut self, fault: &Fault, out: &mut Vec<Emitted>);
    /// Whether the client's stream is over.
    fn closed(&self) -> bool;
    /// The text emitted (with `track_text`).
    fn text_so_far(&self) -> &str;
    /// Bytes held for a tool call that cannot be written yet.
    fn held_bytes(&self) -> usize;
    /// The state a continuation needs; `own` is this stream's upstream usage.
    fn splice_state(&self, own: Option<Usage>) -> Option<SpliceState>;
    /// The last `events` written never reached the client
    /// ([`super::StreamTranslator::withdraw`]).
    fn withdraw(&mut self, events: usize) {
        let _ = events;
    }
}

/// What every writer takes from the options.
#[derive(Clone, Debug)]
pub(crate) struct WriterConfig {
    /// The `model` the client's events name.
    pub(crate) model: JsonString,
    /// OpenAI `created`.
    pub(crate) created: u64,
    pub(crate) client_wants_usage: bool,
    pub(crate) track_text: bool,
    /// Drop the preamble (a continuation).
    pub(crate) continuation: bool,
    /// The stream this one continues.
    pub(crate) splice: Option<SpliceState>,
}

impl WriterConfig {
    /// The upstream named the model that answers: the client's events name it (not in a
    /// continuation, whose events keep the cut stream's model).
    pub(crate) fn answered_by(&mut self, model: Option<JsonStr<'_>>) {
        if let Some(m) = model.filter(|m| !m.is_empty() && self.splice.is_none()) {
            self.model = JsonString::from_json(m);
        }
    }

    /// From the options; a continuation's splice state overrides `model` and `created`.
    pub(crate) fn new(opts: &StreamOptions<'_>) -> Self {
        let splice = opts.splice.filter(|_| opts.continuation).cloned();
        let (model, created) = match &splice {
            Some(s) => (JsonString::escape(&s.model), s.created),
            None => (JsonString::escape(opts.model), opts.created),
        };
        WriterConfig {
            model,
            created,
            client_wants_usage: opts.client_wants_usage,
            track_text: opts.track_text,
            continuation: opts.continuation,
            splice,
        }
    }
}

/// Appends `a` + `b` field by field.
pub(crate) fn sum(a: Usage, b: Option<Usage>) -> Usage {
    let mut total = a;
    if let Some(b) = b {
        total.add(&b);
    }
    total
}

/// A writer that ignores everything once its stream is closed (an error may close it in the
/// middle of an upstream event that has more to say).
pub(crate) struct Guard<W>(pub(crate) W);

impl<W: Writer> Writer for Guard<W> {
    fn start(
        &mut self,
        id: Option<JsonStr<'_>>,
        model: Option<JsonStr<'_>>,
        out: &mut Vec<Emitted>,
    ) {
        if !self.0.closed() {
            self.0.start(id, model, out);
        }
    }
    fn text(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.text(text, out);
        }
    }
    fn refusal(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.refusal(text, out);
        }
    }
    fn reasoning_start(&mut self, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.reasoning_start(out);
        }
    }
    fn reasoning(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.reasoning(text, out);
        }
    }
    fn reasoning_signature(&mut self, signature: JsonStr<'_>, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.reasoning_signature(signature, out);
        }
    }
    fn reasoning_stop(&mut self, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.reasoning_stop(out);
        }
    }
    fn redacted_reasoning(&mut self, data: JsonStr<'_>, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.redacted_reasoning(data, out);
        }
    }
    fn tool(&mut self, key: u32, part: ToolPart<'_>, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.tool(key, part, out);
        }
    }
    fn block_stop(&mut self, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.block_stop(out);
        }
    }
    fn finish(&mut self, reason: Finish, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.finish(reason, out);
        }
    }
    fn usage(&mut self, usage: Usage) {
        self.0.usage(usage);
    }
    fn done(&mut self, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.done(out);
        }
    }
    fn fail(&mut self, fault: &Fault, out: &mut Vec<Emitted>) {
        if !self.0.closed() {
            self.0.fail(fault, out);
        }
    }
    fn closed(&self) -> bool {
        self.0.closed()
    }
    fn text_so_far(&self) -> &str {
        self.0.text_so_far()
    }
    fn held_bytes(&self) -> usize {
        self.0.held_bytes()
    }
    fn splice_state(&self, own: Option<Usage>) -> Option<SpliceState> {
        self.0.splice_state(own)
    }
    fn withdraw(&mut self, events: usize) {
        self.0.withdraw(events);
    }
}
