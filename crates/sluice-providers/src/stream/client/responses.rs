//! The OpenAI Responses API client's stream, from another family's upstream: named events
//! (`event: response.output_text.delta`) whose data repeats the type and counts every event
//! in `sequence_number` from 0.
//!
//! Order, per the Responses API's streaming reference: `response.created`,
//! `response.in_progress`; then per output item `response.output_item.added`, its content
//! events, `response.output_item.done`; then `response.completed` (or
//! `response.incomplete` when the output was cut) with the whole response and its usage.
//! - a message: `response.content_part.added` (one `output_text` part),
//!   `response.output_text.delta`..., `response.output_text.done`,
//!   `response.content_part.done`;
//! - a function call: `response.function_call_arguments.delta`...,
//!   `response.function_call_arguments.done`;
//! - reasoning: `response.reasoning_summary_part.added` (one `summary_text` part),
//!   `response.reasoning_summary_text.delta`..., `response.reasoning_summary_text.done`,
//!   `response.reasoning_summary_part.done`; a signed thinking block's signature goes in the
//!   item's `encrypted_content` at `response.output_item.done` (Anthropic's redacted thinking
//!   is an item with no summary, its data behind [`REDACTED_PREFIX`]), for the client to send
//!   back on its next turn.
//!
//! The `.done` events and `response.completed` repeat what the deltas said (the full text,
//! arguments, items), so this writer keeps the answer's text, reasoning and arguments until
//! the end ([`Writer::held_bytes`] counts them): the format asks for it. An error ends the
//! stream with an `error` event (`{"type":"error","code","message","param"}`) and
//! `response.failed` (the response with `status: "failed"` and its `error`).
//!
//! A continuation is not spliced: a Responses stream has no cut-and-continue support
//! ([`Writer::splice_state`] is `None`).

use super::{ToolPart, Writer, WriterConfig};
use crate::finish::Finish;
use crate::request::responses::REDACTED_PREFIX;
use crate::stream::fault::Fault;
use crate::stream::json::{push_escaped, push_u64, EventEncoder, JsonStr, JsonString};
use crate::stream::{Emitted, EventKind, SpliceState};
use crate::usage::Usage;

/// Most bytes of text, reasoning and arguments held for the `.done` events and
/// `response.completed` (the answer's, escaped); past it the stream ends with an error rather
/// than hold more. The gateway's cap on a whole (non-streamed) answer is 8 MiB by default.
pub(crate) const MAX_HELD: usize = 8 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Message,
    Reasoning,
    Call,
}

/// One output item.
#[derive(Debug)]
struct Item {
    kind: Kind,
    /// The item's id (a JSON literal).
    id: JsonString,
    /// Escaped (inner) text: the message's text, the reasoning's summary text or the call's
    /// arguments.
    text: String,
    /// Reasoning: the escaped `encrypted_content`, if any.
    sealed: Option<String>,
    /// Reasoning: whether its summary part was announced.
    part_open: bool,
    /// Calls: the upstream's key, the call id and the name (literals).
    key: u32,
    call_id: JsonString,
    name: JsonString,
}

/// Writes Responses API events.
pub(crate) struct ResponsesWriter {
    cfg: WriterConfig,
    enc: EventEncoder,
    seq: u64,
    /// The response's id (a literal), once started.
    id: Option<JsonString>,
    items: Vec<Item>,
    /// The item still being written.
    open: Option<usize>,
    finish: Option<Finish>,
    usage: Option<Usage>,
    closed: bool,
    text: String,
    /// Bytes held in the items' `text` and `sealed` (what [`Writer::held_bytes`] says).
    held: usize,
    /// Calls opened so far (their generated ids count them).
    calls: u32,
}

impl ResponsesWriter {
    /// A writer for one stream.
    pub(crate) fn new(cfg: WriterConfig) -> Self {
        ResponsesWriter {
            cfg,
            enc: EventEncoder::default(),
            seq: 0,
            id: None,
            items: Vec::new(),
            open: None,
            finish: None,
            usage: None,
            closed: false,
            text: String::new(),
            held: 0,
            calls: 0,
        }
    }

    /// Whether `more` bytes may still be held; when not, ends the stream with an error.
    fn room(&mut self, more: usize, out: &mut Vec<Emitted>) -> bool {
        if self.held + more <= MAX_HELD {
            self.held += more;
            return true;
        }
        self.fail(
            &Fault::malformed("upstream", "the answer ran over 8 MiB before its end"),
            out,
        );
        false
    }

    fn ensure_started(&mut self, out: &mut Vec<Emitted>) {
        if self.id.is_none() {
            self.start(None, None, out);
        }
    }

    /// The suffix item ids share (the response id without `resp_`, escaped inner).
    fn item_id(&self, kind: &str) -> JsonString {
        let resp = self.id.as_ref().map_or("", |i| i.as_json().inner());
        let mut s = String::with_capacity(resp.len() + 12);
        s.push('"');
        s.push_str(kind);
        s.push('_');
        s.push_str(resp.strip_prefix("resp_").unwrap_or(resp));
        s.push('_');
        push_u64(&mut s, self.items.len() as u64);
        s.push('"');
        JsonString::from_json(JsonStr::from_literal(&s))
    }

    /// `,"item_id":..,"output_index":..`
    fn push_item_ref(doc: &mut String, item: &Item, index: usize) {
        doc.push_str(",\"item_id\":");
        doc.push_str(item.id.literal());
        doc.push_str(",\"output_index\":");
        push_u64(doc, index as u64);
    }

    /// Opens a new output item (closing the one before).
    fn open_item(&mut self, kind: Kind, out: &mut Vec<Emitted>) -> usize {
        self.close_open(out);
        let prefix = match kind {
            Kind::Message => "msg",
            Kind::Reasoning => "rs",
            Kind::Call => "fc",
        };
        let id = self.item_id(prefix);
        self.items.push(Item {
            kind,
            id,
            text: String::new(),
            sealed: None,
            part_open: false,
            key: 0,
            call_id: JsonString::default(),
            name: JsonString::default(),
        });
        let index = self.items.len() - 1;
        self.open = Some(index);
        index
    }

    /// `response.output_item.added` for item `index` (and a message's content part).
    fn announce(&mut self, index: usize, out: &mut Vec<Emitted>) {
        let doc = begin(&mut self.enc, &mut self.seq, "response.output_item.added");
        doc.push_str(",\"output_index\":");
        push_u64(doc, index as u64);
        doc.push_str(",\"item\":");
        push_item(doc, &self.items[index], false);
        doc.push('}');
        self.enc
            .emit(Some("response.output_item.added"), EventKind::Preamble, out);
        if self.items[index].kind == Kind::Message {
            let doc = begin(&mut self.enc, &mut self.seq, "response.content_part.added");
            Self::push_item_ref(doc, &self.items[index], index);
            doc.push_str(",\"content_index\":0,\"part\":{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"\"}}");
            self.enc.emit(
                Some("response.content_part.added"),
                EventKind::Preamble,
                out,
            );
        }
    }

    /// The open reasoning item's index, opening one if needed.
    fn reasoning_item(&mut self, out: &mut Vec<Emitted>) -> usize {
        match self.open {
            Some(i) if self.items[i].kind == Kind::Reasoning => i,
            _ => {
                let i = self.open_item(Kind::Reasoning, out);
                self.announce(i, out);
                i
            }
        }
    }

    /// Closes the open item: its `.done` events.
    fn close_open(&mut self, out: &mut Vec<Emitted>) {
        let Some(index) = self.open.take() else {
            return;
        };
        match self.items[index].kind {
            Kind::Message => {
                let doc = begin(&mut self.enc, &mut self.seq, "response.output_text.done");
                let item = &self.items[index];
                Self::push_item_ref(doc, item, index);
                doc.push_str(",\"content_index\":0,\"text\":\"");
                doc.push_str(&item.text);
                doc.push_str("\",\"logprobs\":[]}");
                self.enc
                    .emit(Some("response.output_text.done"), EventKind::Content, out);
                let doc = begin(&mut self.enc, &mut self.seq, "response.content_part.done");
                let item = &self.items[index];
                Self::push_item_ref(doc, item, index);
                doc.push_str(",\"content_index\":0,\"part\":");
                push_text_part(doc, &item.text);
                doc.push('}');
                self.enc
                    .emit(Some("response.content_part.done"), EventKind::Content, out);
            }
            Kind::Reasoning if self.items[index].part_open => {
                let doc = begin(
                    &mut self.enc,
                    &mut self.seq,
                    "response.reasoning_summary_text.done",
                );
                let item = &self.items[index];
                Self::push_item_ref(doc, item, index);
                doc.push_str(",\"summary_index\":0,\"text\":\"");
                doc.push_str(&item.text);
                doc.push_str("\"}");
                self.enc.emit(
                    Some("response.reasoning_summary_text.done"),
                    EventKind::Content,
                    out,
                );
                let doc = begin(
                    &mut self.enc,
                    &mut self.seq,
                    "response.reasoning_summary_part.done",
                );
                let item = &self.items[index];
                Self::push_item_ref(doc, item, index);
                doc.push_str(
                    ",\"summary_index\":0,\"part\":{\"type\":\"summary_text\",\"text\":\"",
                );
                doc.push_str(&item.text);
                doc.push_str("\"}}");
                self.enc.emit(
                    Some("response.reasoning_summary_part.done"),
                    EventKind::Content,
                    out,
                );
            }
            Kind::Reasoning => {}
            Kind::Call => {
                let doc = begin(
                    &mut self.enc,
                    &mut self.seq,
                    "response.function_call_arguments.done",
                );
                let item = &self.items[index];
                Self::push_item_ref(doc, item, index);
                doc.push_str(",\"name\":");
                doc.push_str(item.name.literal());
                doc.push_str(",\"arguments\":\"");
                doc.push_str(&item.text);
                doc.push_str("\"}");
                self.enc.emit(
                    Some("response.function_call_arguments.done"),
                    EventKind::Content,
                    out,
                );
            }
        }
        let doc = begin(&mut self.enc, &mut self.seq, "response.output_item.done");
        doc.push_str(",\"output_index\":");
        push_u64(doc, index as u64);
        doc.push_str(",\"item\":");
        push_item(doc, &self.items[index], true);
        doc.push('}');
        self.enc
            .emit(Some("response.output_item.done"), EventKind::Content, out);
    }

    /// `"response":{...}` with `status`, the items written so far (closed ones) and usage.
    fn push_response(&mut self, status: &str, detail: Option<&str>, error: Option<&Fault>) {
        let seq_doc = self.enc.doc_mut();
        seq_doc.push_str(",\"response\":{\"id\":");
        seq_doc.push_str(
            self.id
                .as_ref()
                .map_or("\"resp_sluice\"", JsonString::literal),
        );
        seq_doc.push_str(",\"object\":\"response\",\"created_at\":");
        push_u64(seq_doc, self.cfg.created);
        seq_doc.push_str(",\"status\":\"");
        seq_doc.push_str(status);
        seq_doc.push_str("\",\"error\":");
        match error {
            Some(f) => {
                seq_doc.push_str("{\"code\":");
                push_escaped(seq_doc, f.code());
                seq_doc.push_str(",\"message\":");
                push_escaped(seq_doc, f.message());
                seq_doc.push('}');
            }
            None => seq_doc.push_str("null"),
        }
        seq_doc.push_str(",\"incomplete_details\":");
        match detail {
            Some(r) => {
                seq_doc.push_str("{\"reason\":\"");
                seq_doc.push_str(r);
                seq_doc.push_str("\"}");
            }
            None => seq_doc.push_str("null"),
        }
        seq_doc.push_str(",\"model\":");
        seq_doc.push_str(self.cfg.model.literal());
        seq_doc.push_str(",\"output\":[");
        let finished = status != "in_progress";
        let mut first = true;
        for (i, item) in self.items.iter().enumerate() {
            if finished && self.open == Some(i) {
                continue;
            }
            if !finished {
                break;
            }
            if !first {
                seq_doc.push(',');
            }
            first = false;
            push_item(seq_doc, item, true);
        }
        seq_doc.push_str(
            "],\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[],\"usage\":",
        );
        match (&self.usage, finished) {
            (Some(u), true) => push_usage(seq_doc, u),
            _ => seq_doc.push_str("null"),
        }
        seq_doc.push_str("}}");
    }
}

/// An `error` event and `response.failed`, numbered from `seq`, for a stream this writer did
/// not write (a Responses stream passed through, or one that ends before any event reached
/// the client): `id` and `model` as JSON literals, as the stream's `response.created` named
/// them (`resp_sluice` and `null` when none did). The failed response lists no output: the
/// client has the items the stream gave it.
pub(crate) fn failure_events(
    seq: u64,
    id: Option<&str>,
    model: Option<&str>,
    fault: &Fault,
) -> bytes::Bytes {
    let mut enc = EventEncoder::default();
    let mut seq = seq;
    let mut out = Vec::with_capacity(2);
    let doc = begin(&mut enc, &mut seq, "error");
    doc.push_str(",\"code\":");
    push_escaped(doc, fault.code());
    doc.push_str(",\"message\":");
    push_escaped(doc, fault.message());
    doc.push_str(",\"param\":null}");
    enc.emit(Some("error"), EventKind::Error, &mut out);
    let doc = begin(&mut enc, &mut seq, "response.failed");
    doc.push_str(",\"response\":{\"id\":");
    doc.push_str(id.unwrap_or("\"resp_sluice\""));
    doc.push_str(",\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":");
    push_escaped(doc, fault.code());
    doc.push_str(",\"message\":");
    push_escaped(doc, fault.message());
    doc.push_str("},\"incomplete_details\":null,\"model\":");
    doc.push_str(model.unwrap_or("null"));
    doc.push_str(",\"output\":[],\"usage\":null}}");
    enc.emit(Some("response.failed"), EventKind::Error, &mut out);
    let mut bytes = bytes::BytesMut::new();
    for e in out {
        bytes.extend_from_slice(&e.bytes);
    }
    bytes.freeze()
}

/// Starts an event's document: `{"type":..,"sequence_number":..` (the next number).
fn begin<'e>(enc: &'e mut EventEncoder, seq: &mut u64, kind: &str) -> &'e mut String {
    let n = *seq;
    *seq += 1;
    let doc = enc.doc();
    doc.push_str("{\"type\":\"");
    doc.push_str(kind);
    doc.push_str("\",\"sequence_number\":");
    push_u64(doc, n);
    doc
}

/// An item as `output_item.added` (`done` false: empty, in progress) or `.done` and the
/// final response give it.
fn push_item(doc: &mut String, item: &Item, done: bool) {
    doc.push_str("{\"id\":");
    doc.push_str(item.id.literal());
    match item.kind {
        Kind::Message => {
            doc.push_str(",\"type\":\"message\",\"status\":\"");
            doc.push_str(if done { "completed" } else { "in_progress" });
            doc.push_str("\",\"role\":\"assistant\",\"content\":[");
            if done {
                push_text_part(doc, &item.text);
            }
            doc.push_str("]}");
        }
        Kind::Reasoning => {
            doc.push_str(",\"type\":\"reasoning\",\"summary\":[");
            if done && item.part_open {
                doc.push_str("{\"type\":\"summary_text\",\"text\":\"");
                doc.push_str(&item.text);
                doc.push_str("\"}");
            }
            doc.push(']');
            if let (true, Some(sealed)) = (done, &item.sealed) {
                doc.push_str(",\"encrypted_content\":\"");
                doc.push_str(sealed);
                doc.push('"');
            }
            doc.push('}');
        }
        Kind::Call => {
            doc.push_str(",\"type\":\"function_call\",\"status\":\"");
            doc.push_str(if done { "completed" } else { "in_progress" });
            doc.push_str("\",\"arguments\":\"");
            if done {
                doc.push_str(&item.text);
            }
            doc.push_str("\",\"call_id\":");
            doc.push_str(item.call_id.literal());
            doc.push_str(",\"name\":");
            doc.push_str(item.name.literal());
            doc.push('}');
        }
    }
}

/// An `output_text` part holding `text` (escaped inner).
fn push_text_part(doc: &mut String, text: &str) {
    doc.push_str("{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"");
    doc.push_str(text);
    doc.push_str("\"}");
}

/// A Responses `usage` object.
fn push_usage(doc: &mut String, u: &Usage) {
    doc.push_str("{\"input_tokens\":");
    push_u64(doc, u.input);
    doc.push_str(",\"input_tokens_details\":{\"cached_tokens\":");
    push_u64(doc, u.cached_input);
    doc.push_str("},\"output_tokens\":");
    push_u64(doc, u.output);
    doc.push_str(",\"output_tokens_details\":{\"reasoning_tokens\":");
    push_u64(doc, u.reasoning);
    doc.push_str("},\"total_tokens\":");
    push_u64(doc, u.input + u.output);
    doc.push('}');
}

impl Writer for ResponsesWriter {
    fn start(
        &mut self,
        id: Option<JsonStr<'_>>,
        model: Option<JsonStr<'_>>,
        out: &mut Vec<Emitted>,
    ) {
        if self.id.is_some() {
            return;
        }
        self.cfg.answered_by(model);
        let inner = id.map_or("sluice", JsonStr::inner);
        let mut lit = String::with_capacity(inner.len() + 7);
        lit.push('"');
        if !inner.starts_with("resp_") {
            lit.push_str("resp_");
        }
        lit.push_str(inner);
        lit.push('"');
        self.id = Some(JsonString::from_json(JsonStr::from_literal(&lit)));
        for kind in ["response.created", "response.in_progress"] {
            begin(&mut self.enc, &mut self.seq, kind);
            self.push_response("in_progress", None, None);
            self.enc.emit(Some(kind), EventKind::Preamble, out);
        }
    }

    fn text(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if text.is_empty() || !self.room(text.inner().len(), out) {
            return;
        }
        let index = match self.open {
            Some(i) if self.items[i].kind == Kind::Message => i,
            _ => {
                let i = self.open_item(Kind::Message, out);
                self.announce(i, out);
                i
            }
        };
        let doc = begin(&mut self.enc, &mut self.seq, "response.output_text.delta");
        Self::push_item_ref(doc, &self.items[index], index);
        doc.push_str(",\"content_index\":0,\"delta\":");
        doc.push_str(text.literal());
        doc.push_str(",\"logprobs\":[]}");
        self.enc
            .emit(Some("response.output_text.delta"), EventKind::Content, out);
        self.items[index].text.push_str(text.inner());
        if self.cfg.track_text {
            self.text.push_str(&text.unescape());
        }
    }

    fn refusal(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        // Upstreams of other families send no refusal field; one from an OpenAI-compatible
        // server reads as text.
        self.text(text, out);
    }

    fn reasoning_start(&mut self, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        let i = self.open_item(Kind::Reasoning, out);
        self.announce(i, out);
    }

    fn reasoning(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if text.is_empty() || !self.room(text.inner().len(), out) {
            return;
        }
        let index = self.reasoning_item(out);
        if !self.items[index].part_open {
            self.items[index].part_open = true;
            let doc = begin(
                &mut self.enc,
                &mut self.seq,
                "response.reasoning_summary_part.added",
            );
            Self::push_item_ref(doc, &self.items[index], index);
            doc.push_str(
                ",\"summary_index\":0,\"part\":{\"type\":\"summary_text\",\"text\":\"\"}}",
            );
            self.enc.emit(
                Some("response.reasoning_summary_part.added"),
                EventKind::Content,
                out,
            );
        }
        let doc = begin(
            &mut self.enc,
            &mut self.seq,
            "response.reasoning_summary_text.delta",
        );
        Self::push_item_ref(doc, &self.items[index], index);
        doc.push_str(",\"summary_index\":0,\"delta\":");
        doc.push_str(text.literal());
        doc.push('}');
        self.enc.emit(
            Some("response.reasoning_summary_text.delta"),
            EventKind::Content,
            out,
        );
        self.items[index].text.push_str(text.inner());
    }

    fn reasoning_signature(&mut self, signature: JsonStr<'_>, out: &mut Vec<Emitted>) {
        if let Some(i) = self.open.filter(|&i| self.items[i].kind == Kind::Reasoning) {
            if !self.room(signature.inner().len(), out) {
                return;
            }
            self.items[i]
                .sealed
                .get_or_insert_with(String::new)
                .push_str(signature.inner());
        }
    }

    fn reasoning_stop(&mut self, out: &mut Vec<Emitted>) {
        if self
            .open
            .is_some_and(|i| self.items[i].kind == Kind::Reasoning)
        {
            self.close_open(out);
        }
    }

    fn redacted_reasoning(&mut self, data: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if !self.room(REDACTED_PREFIX.len() + data.inner().len(), out) {
            return;
        }
        let i = self.open_item(Kind::Reasoning, out);
        let mut sealed = String::with_capacity(REDACTED_PREFIX.len() + data.inner().len());
        sealed.push_str(REDACTED_PREFIX);
        sealed.push_str(data.inner());
        self.items[i].sealed = Some(sealed);
        self.announce(i, out);
        self.close_open(out);
    }

    fn tool(&mut self, key: u32, part: ToolPart<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        // Only the open call takes more: a closed one has had its `.done` events (a fragment
        // for it after that starts a call of its own, as the other writers do).
        let found = self
            .open
            .filter(|&i| self.items[i].kind == Kind::Call && self.items[i].key == key);
        let index = match found {
            Some(i) => i,
            None => {
                let i = self.open_item(Kind::Call, out);
                let n = self.calls;
                self.calls += 1;
                let item = &mut self.items[i];
                item.key = key;
                item.name = part
                    .name
                    .map_or_else(|| JsonString::escape(""), JsonString::from_json);
                item.call_id = match part.id {
                    Some(id) => JsonString::from_json(id),
                    None => {
                        // Gemini often sends no id: one unique within the response.
                        let resp = self.id.as_ref().map_or("", |i| i.as_json().inner());
                        JsonString::escape(&format!("call_{resp}_{n}"))
                    }
                };
                self.announce(i, out);
                i
            }
        };
        let Some(args) = part.args.filter(|a| !a.is_empty()) else {
            return;
        };
        if !self.room(args.inner().len(), out) {
            return;
        }
        let doc = begin(
            &mut self.enc,
            &mut self.seq,
            "response.function_call_arguments.delta",
        );
        Self::push_item_ref(doc, &self.items[index], index);
        doc.push_str(",\"delta\":");
        doc.push_str(args.literal());
        doc.push('}');
        self.enc.emit(
            Some("response.function_call_arguments.delta"),
            EventKind::Content,
            out,
        );
        self.items[index].text.push_str(args.inner());
    }

    fn block_stop(&mut self, out: &mut Vec<Emitted>) {
        self.close_open(out);
    }

    fn finish(&mut self, reason: Finish, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        self.finish.get_or_insert(reason);
    }

    fn usage(&mut self, usage: Usage) {
        self.usage = Some(usage);
    }

    fn done(&mut self, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        self.close_open(out);
        let (status, detail) =
            crate::response::responses::status(self.finish.unwrap_or(Finish::Stop));
        let kind = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        begin(&mut self.enc, &mut self.seq, kind);
        self.push_response(status, detail, None);
        self.enc.emit(Some(kind), EventKind::Trailer, out);
        self.closed = true;
    }

    fn fail(&mut self, fault: &Fault, out: &mut Vec<Emitted>) {
        let doc = begin(&mut self.enc, &mut self.seq, "error");
        doc.push_str(",\"code\":");
        push_escaped(doc, fault.code());
        doc.push_str(",\"message\":");
        push_escaped(doc, fault.message());
        doc.push_str(",\"param\":null}");
        self.enc.emit(Some("error"), EventKind::Error, out);
        // The items still open are left out of the failed response.
        begin(&mut self.enc, &mut self.seq, "response.failed");
        self.push_response("failed", None, Some(fault));
        self.enc
            .emit(Some("response.failed"), EventKind::Error, out);
        self.closed = true;
    }

    fn closed(&self) -> bool {
        self.closed
    }

    fn text_so_far(&self) -> &str {
        &self.text
    }

    fn held_bytes(&self) -> usize {
        self.held
    }

    fn splice_state(&self, _own: Option<Usage>) -> Option<SpliceState> {
        None
    }

    fn withdraw(&mut self, events: usize) {
        self.seq = self.seq.saturating_sub(events as u64);
    }
}
