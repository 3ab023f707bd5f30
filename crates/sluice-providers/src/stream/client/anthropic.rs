//! The Anthropic client's stream: named events, `message_start` to `message_stop`.
//!
//! Shape, per the Anthropic SDK's fixtures `basic_response.txt` and `tool_use_response.txt`
//! (provider-formats.md §4.2): `message_start` (usage with the input tokens when known),
//! for each content block `content_block_start`, its deltas (`text_delta`,
//! `input_json_delta`), `content_block_stop`; then `message_delta` with the `stop_reason` and
//! the cumulative usage, and `message_stop`. Blocks never interleave, so a tool call's
//! arguments are streamed as they come once its block is open.
//!
//! Reasoning becomes `thinking` blocks (`thinking_delta`s, then the upstream's
//! `signature_delta` when it signs, as Anthropic does; redacted thinking a
//! `redacted_thinking` block). Another family's reasoning is unsigned: its block's
//! `signature` stays empty, which tells the gateway never to send it to Anthropic.

use super::{sum, ToolPart, Writer, WriterConfig};
use crate::api::Family;
use crate::finish::Finish;
use crate::shape::anthropic::{tool_use_id, UsageBody};
use crate::stream::fault::Fault;
use crate::stream::json::{push_escaped, push_u64, EventEncoder, JsonStr, JsonString};
use crate::stream::{Emitted, EventKind, SpliceState};
use crate::usage::Usage;

/// Most argument bytes held for a tool call whose name has not come yet. Past this the
/// stream ends with an error rather than hold more.
pub(crate) const MAX_HELD_ARGUMENTS: usize = 1 << 20;

/// Appends Anthropic's `usage` object for `u`: the counts of [`UsageBody::from_usage`] (cache
/// reads and writes apart from `input_tokens`), in the
/// order Anthropic's own stream writes them; `output_tokens` 0 unless `output`
/// (`message_start` reports input only).
fn push_usage(out: &mut String, u: &Usage, output: bool) {
    let b = UsageBody::from_usage(u);
    out.push_str("{\"input_tokens\":");
    push_u64(out, b.input_tokens);
    out.push_str(",\"cache_creation_input_tokens\":");
    push_u64(out, b.cache_creation_input_tokens.unwrap_or(0));
    out.push_str(",\"cache_read_input_tokens\":");
    push_u64(out, b.cache_read_input_tokens.unwrap_or(0));
    out.push_str(",\"output_tokens\":");
    push_u64(out, if output { b.output_tokens } else { 0 });
    if let Some(t) = b
        .output_tokens_details
        .and_then(|d| d.thinking_tokens)
        .filter(|_| output)
    {
        out.push_str(",\"output_tokens_details\":{\"thinking_tokens\":");
        push_u64(out, t);
        out.push('}');
    }
    out.push('}');
}

/// Appends a `tool_use` id Anthropic accepts for the upstream's call id: the id a whole
/// response gives the same call ([`tool_use_id`]), so the client's `tool_result` pairs up
/// either way. Ids already in `[A-Za-z0-9_-]` (all of OpenAI's and Gemini's so far) are
/// copied as they are.
fn push_tool_use_id(out: &mut String, id: JsonStr<'_>) {
    let plain = id
        .inner()
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        out.push_str(id.literal());
    } else {
        push_escaped(out, &tool_use_id(&id.unescape()));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpenKind {
    Text,
    /// A thinking block.
    Thinking,
    /// A tool call, by its upstream key.
    Tool(u32),
}

#[derive(Clone, Copy, Debug)]
struct Open {
    index: u32,
    kind: OpenKind,
}

/// A tool call whose arguments began before its name: held until the name comes.
#[derive(Debug)]
struct Pending {
    key: u32,
    id: Option<JsonString>,
    /// The arguments so far, escaped (the inner parts of the fragments' literals).
    args: String,
}

/// Writes Anthropic Messages stream events.
pub(crate) struct AnthropicWriter {
    cfg: WriterConfig,
    enc: EventEncoder,
    id: Option<JsonString>,
    started: bool,
    /// Content has been written: later structural events are not preamble.
    committed: bool,
    closed: bool,
    open: Option<Open>,
    next_index: u32,
    /// A continuation: the cut stream's open text block, until our first content decides
    /// whether to go on in it or close it.
    splice_text: Option<u32>,
    /// Upstream keys of the tool calls started, to notice a fragment for a closed one.
    tool_keys: Vec<u32>,
    pending: Option<Pending>,
    stop: Option<Finish>,
    usage: Option<Usage>,
    prior: Usage,
    text: String,
    /// Answer text has been written (a refusal after it goes on a line of its own).
    wrote_text: bool,
    /// An OpenAI refusal is being written as text.
    in_refusal: bool,
}

impl AnthropicWriter {
    /// A writer for one stream.
    pub(crate) fn new(cfg: WriterConfig) -> Self {
        let (id, next_index, splice_text, prior) = match &cfg.splice {
            Some(s) => (
                Some(JsonString::escape(&s.id)),
                s.next_block,
                s.open_text_block,
                s.usage,
            ),
            None => (None, 0, None, Usage::default()),
        };
        AnthropicWriter {
            cfg,
            enc: EventEncoder::default(),
            id,
            started: false,
            committed: false,
            closed: false,
            open: None,
            next_index,
            splice_text,
            tool_keys: Vec::new(),
            pending: None,
            stop: None,
            usage: None,
            prior,
            text: String::new(),
            wrote_text: false,
            in_refusal: false,
        }
    }

    /// Block starts and stops: held with the preamble until content commits the stream.
    fn structural(&self) -> EventKind {
        if self.committed {
            EventKind::Content
        } else {
            EventKind::Preamble
        }
    }

    fn ensure_started(&mut self, out: &mut Vec<Emitted>) {
        if !self.started {
            self.start(None, None, out);
        }
    }

    fn block_start(
        &mut self,
        out: &mut Vec<Emitted>,
        kind: OpenKind,
        tool: Option<(Option<JsonStr<'_>>, JsonStr<'_>)>,
    ) -> u32 {
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some(Open { index, kind });
        let doc = self.enc.doc();
        doc.push_str("{\"type\":\"content_block_start\",\"index\":");
        push_u64(doc, u64::from(index));
        match tool {
            None if kind == OpenKind::Thinking => doc.push_str(
                ",\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}",
            ),
            None => doc.push_str(",\"content_block\":{\"type\":\"text\",\"text\":\"\"}}"),
            Some((id, name)) => {
                doc.push_str(",\"content_block\":{\"type\":\"tool_use\",\"id\":");
                match id {
                    Some(id) => push_tool_use_id(doc, id),
                    None => {
                        // Gemini often sends no id: one unique within the response.
                        doc.push_str("\"toolu_");
                        if let Some(msg) = &self.id {
                            doc.push_str(msg.as_json().inner());
                        }
                        doc.push('_');
                        push_u64(doc, u64::from(index));
                        doc.push('"');
                    }
                }
                doc.push_str(",\"name\":");
                doc.push_str(name.literal());
                doc.push_str(",\"input\":{}}}");
            }
        }
        let kind = self.structural();
        self.enc.emit(Some("content_block_start"), kind, out);
        index
    }

    fn block_stop_at(&mut self, index: u32, out: &mut Vec<Emitted>) {
        let doc = self.enc.doc();
        doc.push_str("{\"type\":\"content_block_stop\",\"index\":");
        push_u64(doc, u64::from(index));
        doc.push('}');
        let kind = self.structural();
        self.enc.emit(Some("content_block_stop"), kind, out);
    }

    fn close_open(&mut self, out: &mut Vec<Emitted>) {
        if let Some(open) = self.open.take() {
            self.block_stop_at(open.index, out);
        }
    }

    /// A continuation whose first content is not text: the cut text block ends here.
    fn close_splice(&mut self, out: &mut Vec<Emitted>) {
        if let Some(index) = self.splice_text.take() {
            self.block_stop_at(index, out);
        }
    }

    fn delta(&mut self, index: u32, kind: &str, field: &str, value: &str, out: &mut Vec<Emitted>) {
        let doc = self.enc.doc();
        doc.push_str("{\"type\":\"content_block_delta\",\"index\":");
        push_u64(doc, u64::from(index));
        doc.push_str(",\"delta\":{\"type\":\"");
        doc.push_str(kind);
        doc.push_str("\",\"");
        doc.push_str(field);
        doc.push_str("\":");
        doc.push_str(value);
        doc.push_str("}}");
        self.enc
            .emit(Some("content_block_delta"), EventKind::Content, out);
        self.committed = true;
    }

    fn args_delta(&mut self, index: u32, args: &str, out: &mut Vec<Emitted>) {
        self.delta(index, "input_json_delta", "partial_json", args, out);
    }

    /// A held tool call got its name: open its block and send what was held.
    fn flush_pending(&mut self, name: JsonStr<'_>, out: &mut Vec<Emitted>) {
        let Some(p) = self.pending.take() else {
            return;
        };
        let id = p.id.as_ref().map(JsonString::as_json);
        let index = self.block_start(out, OpenKind::Tool(p.key), Some((id, name)));
        if !p.args.is_empty() {
            let mut lit = String::with_capacity(p.args.len() + 2);
            lit.push('"');
            lit.push_str(&p.args);
            lit.push('"');
            self.args_delta(index, &lit, out);
        }
    }

    /// A held tool call that never got a name cannot be told to an Anthropic client.
    fn pending_is_stuck(&mut self, out: &mut Vec<Emitted>) -> bool {
        if self.pending.is_none() {
            return false;
        }
        self.fail(
            &Fault::malformed("OpenAI-compatible", "a tool call has arguments but no name"),
            out,
        );
        true
    }
}

impl Writer for AnthropicWriter {
    fn start(
        &mut self,
        id: Option<JsonStr<'_>>,
        model: Option<JsonStr<'_>>,
        out: &mut Vec<Emitted>,
    ) {
        if self.started {
            return;
        }
        self.started = true;
        self.cfg.answered_by(model);
        if self.id.is_none() {
            self.id =
                Some(id.map_or_else(|| JsonString::escape("msg_sluice"), JsonString::from_json));
        }
        if self.cfg.continuation {
            return;
        }
        let usage = self.usage.unwrap_or_default();
        let doc = self.enc.doc();
        doc.push_str("{\"type\":\"message_start\",\"message\":{\"id\":");
        if let Some(id) = &self.id {
            doc.push_str(id.literal());
        }
        doc.push_str(",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
        doc.push_str(self.cfg.model.literal());
        doc.push_str(",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
        push_usage(doc, &usage, false);
        doc.push_str("}}");
        self.enc
            .emit(Some("message_start"), EventKind::Preamble, out);
    }

    fn text(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if text.is_empty() || self.pending_is_stuck(out) {
            return;
        }
        let index = match self.open {
            Some(Open {
                index,
                kind: OpenKind::Text,
            }) => index,
            _ => {
                self.close_open(out);
                match self.splice_text.take() {
                    Some(index) => {
                        self.open = Some(Open {
                            index,
                            kind: OpenKind::Text,
                        });
                        index
                    }
                    None => self.block_start(out, OpenKind::Text, None),
                }
            }
        };
        self.delta(index, "text_delta", "text", text.literal(), out);
        self.wrote_text = true;
        if self.cfg.track_text {
            self.text.push_str(&text.unescape());
        }
    }

    /// An Anthropic client has no refusal field: the refusal is text, after a newline when
    /// answer text came first, and the natural stop after it is a `refusal` stop, as a whole
    /// response writes `message.refusal`.
    fn refusal(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        if text.is_empty() {
            return;
        }
        if self.wrote_text && !self.in_refusal {
            self.text(JsonStr::from_literal("\"\\n\""), out);
        }
        self.in_refusal = true;
        self.text(text, out);
    }

    fn reasoning_start(&mut self, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if self.pending_is_stuck(out) {
            return;
        }
        self.close_open(out);
        self.close_splice(out);
        self.block_start(out, OpenKind::Thinking, None);
    }

    fn reasoning(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        if text.is_empty() {
            return;
        }
        let index = match self.open {
            Some(Open {
                index,
                kind: OpenKind::Thinking,
            }) => index,
            _ => {
                // Unsigned reasoning (Gemini thoughts, `reasoning_content`): a block of its
                // own, closed by whatever comes next.
                self.reasoning_start(out);
                match self.open {
                    Some(Open { index, .. }) => index,
                    None => return,
                }
            }
        };
        self.delta(index, "thinking_delta", "thinking", text.literal(), out);
    }

    fn reasoning_signature(&mut self, signature: JsonStr<'_>, out: &mut Vec<Emitted>) {
        if let Some(Open {
            index,
            kind: OpenKind::Thinking,
        }) = self.open
        {
            self.delta(
                index,
                "signature_delta",
                "signature",
                signature.literal(),
                out,
            );
        }
    }

    fn reasoning_stop(&mut self, out: &mut Vec<Emitted>) {
        if matches!(
            self.open,
            Some(Open {
                kind: OpenKind::Thinking,
                ..
            })
        ) {
            self.close_open(out);
        }
    }

    fn redacted_reasoning(&mut self, data: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if self.pending_is_stuck(out) {
            return;
        }
        self.close_open(out);
        self.close_splice(out);
        let index = self.next_index;
        self.next_index += 1;
        let doc = self.enc.doc();
        doc.push_str("{\"type\":\"content_block_start\",\"index\":");
        push_u64(doc, u64::from(index));
        doc.push_str(",\"content_block\":{\"type\":\"redacted_thinking\",\"data\":");
        doc.push_str(data.literal());
        doc.push_str("}}");
        // Content: the client has the block whole.
        self.enc
            .emit(Some("content_block_start"), EventKind::Content, out);
        self.committed = true;
        self.block_stop_at(index, out);
    }

    fn tool(&mut self, key: u32, part: ToolPart<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        let args = part.args.filter(|a| !a.is_empty());
        if let Some(Open {
            index,
            kind: OpenKind::Tool(open),
        }) = self.open
        {
            if open == key {
                if let Some(args) = args {
                    self.args_delta(index, args.literal(), out);
                }
                return;
            }
        }
        if let Some(p) = self.pending.as_mut().filter(|p| p.key == key) {
            if p.id.is_none() {
                p.id = part.id.map(JsonString::from_json);
            }
            if let Some(args) = args {
                p.args.push_str(args.inner());
            }
            if p.args.len() > MAX_HELD_ARGUMENTS {
                self.pending = None;
                self.fail(
                    &Fault::malformed(
                        "OpenAI-compatible",
                        "a tool call's arguments came without its name for over 1 MiB",
                    ),
                    out,
                );
            } else if let Some(name) = part.name {
                self.flush_pending(name, out);
            }
            return;
        }
        if self.tool_keys.contains(&key) {
            // Anthropic blocks cannot interleave: this call's block is closed.
            self.fail(
                &Fault::malformed(
                    "OpenAI-compatible",
                    "tool call arguments for an earlier call arrived after a later call began",
                ),
                out,
            );
            return;
        }
        if self.pending_is_stuck(out) {
            return;
        }
        self.close_open(out);
        self.close_splice(out);
        self.tool_keys.push(key);
        match part.name {
            Some(name) => {
                let index = self.block_start(out, OpenKind::Tool(key), Some((part.id, name)));
                if let Some(args) = args {
                    self.args_delta(index, args.literal(), out);
                }
            }
            None => {
                self.pending = Some(Pending {
                    key,
                    id: part.id.map(JsonString::from_json),
                    args: args.map_or_else(String::new, |a| a.inner().to_owned()),
                });
            }
        }
    }

    fn block_stop(&mut self, out: &mut Vec<Emitted>) {
        self.close_open(out);
    }

    fn finish(&mut self, reason: Finish, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if self.pending_is_stuck(out) {
            return;
        }
        self.close_open(out);
        self.close_splice(out);
        let reason = match reason {
            Finish::Stop if self.in_refusal => Finish::ContentFilter,
            other => other,
        };
        self.stop = Some(reason.after_tools(!self.tool_keys.is_empty()));
    }

    fn usage(&mut self, usage: Usage) {
        self.usage = Some(usage);
    }

    fn done(&mut self, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        // Also after a finish: content may follow it (Gemini chunks after the finishReason).
        self.finish(self.stop.unwrap_or(Finish::Stop), out);
        if self.closed {
            return;
        }
        let stop = self.stop.unwrap_or(Finish::Stop);
        let total = sum(self.prior, self.usage);
        let doc = self.enc.doc();
        doc.push_str("{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"");
        doc.push_str(stop.as_anthropic());
        doc.push_str("\",\"stop_sequence\":null},\"usage\":");
        push_usage(doc, &total, true);
        doc.push('}');
        self.enc
            .emit(Some("message_delta"), EventKind::Trailer, out);
        self.enc.doc().push_str("{\"type\":\"message_stop\"}");
        self.enc.emit(Some("message_stop"), EventKind::Trailer, out);
        self.closed = true;
    }

    fn fail(&mut self, fault: &Fault, out: &mut Vec<Emitted>) {
        out.push(Emitted {
            bytes: fault.event(Family::Anthropic),
            kind: EventKind::Error,
        });
        self.closed = true;
    }

    fn closed(&self) -> bool {
        self.closed
    }

    fn text_so_far(&self) -> &str {
        &self.text
    }

    fn held_bytes(&self) -> usize {
        self.pending.as_ref().map_or(0, |p| p.args.len())
    }

    fn splice_state(&self, own: Option<Usage>) -> Option<SpliceState> {
        if !self.started {
            return None;
        }
        let open_text_block = match self.open {
            Some(Open {
                index,
                kind: OpenKind::Text,
            }) => Some(index),
            _ => self.splice_text,
        };
        Some(SpliceState {
            id: self
                .id
                .as_ref()
                .map(|id| id.as_json().unescape().into_owned())
                .unwrap_or_default(),
            created: 0,
            model: self.cfg.model.as_json().unescape().into_owned(),
            open_text_block,
            next_block: self.next_index,
            next_tool_call: 0,
            usage: sum(self.prior, own),
        })
    }
}
