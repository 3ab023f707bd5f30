//! The OpenAI client's stream: `chat.completion.chunk` events, then `[DONE]`.
//!
//! Shape, per OpenAI's streaming example and the recorded tool-call stream
//! (provider-formats.md §4.1): a role chunk (`{"role":"assistant","content":""}`), content
//! deltas, tool calls with `index`/`id`/`type`/`name` in each call's first fragment and
//! `arguments` fragments after, one chunk with the `finish_reason`, a usage chunk
//! (`"choices":[]`) only when the client asked for it, `data: [DONE]`.
//!
//! Reasoning streams as `delta.reasoning_content` (the field vLLM, DeepSeek and LiteLLM
//! use). Signed reasoning (an Anthropic thinking block) is also handed over whole, once its
//! signature has come, as `delta.thinking_blocks: [{"index", "type": "thinking",
//! "thinking", "signature"}]` (redacted thinking: `{"index", "type": "redacted_thinking",
//! "data"}`), for the client to send back on its next turn: the block's text is held until
//! then ([`MAX_HELD_THINKING`]). `index` counts the blocks of the answer, so the OpenAI
//! SDK's stream accumulator (which merges list entries by `index`) keeps each block apart.

use bytes::Bytes;

use super::{sum, ToolPart, Writer, WriterConfig};
use crate::api::Family;
use crate::finish::Finish;
use crate::shape::openai::UsageBody;
use crate::stream::fault::Fault;
use crate::stream::json::{push_u64, EventEncoder, JsonStr, JsonString};
use crate::stream::{Emitted, EventKind, SpliceState};
use crate::usage::Usage;

const DONE: &[u8] = b"data: [DONE]\n\n";

/// Most bytes of a signed thinking block's text held until its signature comes. Past this
/// the stream ends with an error rather than hold more (a thinking budget of 128 K tokens
/// is about half of it).
pub(crate) const MAX_HELD_THINKING: usize = 4 << 20;

/// Appends OpenAI's chat `usage` object for `u`: the counts of [`UsageBody::from_usage`],
/// written in its field order the way this writer writes every event (no serializer).
fn push_usage(out: &mut String, u: &Usage) {
    let b = UsageBody::from_usage(u);
    out.push_str("{\"prompt_tokens\":");
    push_u64(out, b.prompt_tokens);
    out.push_str(",\"completion_tokens\":");
    push_u64(out, b.completion_tokens);
    out.push_str(",\"total_tokens\":");
    push_u64(out, b.total_tokens);
    out.push_str(",\"prompt_tokens_details\":{\"cached_tokens\":");
    push_u64(
        out,
        b.prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0),
    );
    out.push_str("},\"completion_tokens_details\":{\"reasoning_tokens\":");
    push_u64(
        out,
        b.completion_tokens_details
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0),
    );
    out.push_str("}}");
}

/// Closes a chunk whose delta was just written and that has no finish reason.
const NO_FINISH: &str = ",\"finish_reason\":null}]}";

/// Writes OpenAI chat chunks.
pub(crate) struct OpenAiWriter {
    cfg: WriterConfig,
    enc: EventEncoder,
    /// The chunk's id, once started.
    id: Option<JsonString>,
    /// `{"id":..,"object":"chat.completion.chunk","created":..,"model":..`
    header: String,
    /// `header` + `,"choices":[{"index":0,"delta":`
    prefix: String,
    /// Upstream tool call keys in the order the client saw them; position + `first_tool` is
    /// the client's `index`.
    tool_keys: Vec<u32>,
    first_tool: u32,
    finished: bool,
    closed: bool,
    usage: Option<Usage>,
    /// Usage the client's stream reported before this one (a continuation).
    prior: Usage,
    text: String,
    /// The open signed thinking block's text (escaped), while its signature has not come.
    thinking: Option<String>,
    /// Its signature (escaped).
    signature: String,
    /// Signed blocks handed over so far (their `index`).
    thinking_blocks: u32,
}

impl OpenAiWriter {
    /// A writer for one stream.
    pub(crate) fn new(cfg: WriterConfig) -> Self {
        let (id, first_tool, prior) = match &cfg.splice {
            Some(s) => (Some(JsonString::escape(&s.id)), s.next_tool_call, s.usage),
            None => (None, 0, Usage::default()),
        };
        let mut w = OpenAiWriter {
            cfg,
            enc: EventEncoder::default(),
            id: None,
            header: String::new(),
            prefix: String::new(),
            tool_keys: Vec::new(),
            first_tool,
            finished: false,
            closed: false,
            usage: None,
            prior,
            text: String::new(),
            thinking: None,
            signature: String::new(),
            thinking_blocks: 0,
        };
        if let Some(id) = id {
            w.set_id(id);
        }
        w
    }

    fn set_id(&mut self, id: JsonString) {
        self.header.clear();
        self.header.push_str("{\"id\":");
        self.header.push_str(id.literal());
        self.header
            .push_str(",\"object\":\"chat.completion.chunk\",\"created\":");
        push_u64(&mut self.header, self.cfg.created);
        self.header.push_str(",\"model\":");
        self.header.push_str(self.cfg.model.literal());
        self.prefix.clear();
        self.prefix.push_str(&self.header);
        self.prefix
            .push_str(",\"choices\":[{\"index\":0,\"delta\":");
        self.id = Some(id);
    }

    fn ensure_started(&mut self, out: &mut Vec<Emitted>) {
        if self.id.is_none() {
            self.start(None, None, out);
        }
    }

    /// Starts a chunk: the prefix, ready for the delta object.
    fn chunk(&mut self) -> &mut String {
        let doc = self.enc.doc();
        doc.push_str(&self.prefix);
        doc
    }
}

impl Writer for OpenAiWriter {
    fn start(
        &mut self,
        id: Option<JsonStr<'_>>,
        model: Option<JsonStr<'_>>,
        out: &mut Vec<Emitted>,
    ) {
        if self.id.is_some() {
            // Started already, or a continuation whose id came with its splice state.
            return;
        }
        self.cfg.answered_by(model);
        let id = id.map_or_else(
            || JsonString::escape("chatcmpl-sluice"),
            JsonString::from_json,
        );
        self.set_id(id);
        if self.cfg.continuation {
            return;
        }
        self.chunk()
            .push_str("{\"role\":\"assistant\",\"content\":\"\"}");
        self.enc.doc_mut().push_str(NO_FINISH);
        self.enc.emit(None, EventKind::Preamble, out);
    }

    fn text(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if text.is_empty() {
            return;
        }
        let doc = self.chunk();
        doc.push_str("{\"content\":");
        doc.push_str(text.literal());
        doc.push('}');
        doc.push_str(NO_FINISH);
        self.enc.emit(None, EventKind::Content, out);
        if self.cfg.track_text {
            self.text.push_str(&text.unescape());
        }
    }

    fn refusal(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if text.is_empty() {
            return;
        }
        let doc = self.chunk();
        doc.push_str("{\"refusal\":");
        doc.push_str(text.literal());
        doc.push('}');
        doc.push_str(NO_FINISH);
        self.enc.emit(None, EventKind::Content, out);
    }

    fn reasoning_start(&mut self, out: &mut Vec<Emitted>) {
        self.reasoning_stop(out);
        self.thinking = Some(String::new());
        self.signature.clear();
    }

    fn reasoning_signature(&mut self, signature: JsonStr<'_>, _out: &mut Vec<Emitted>) {
        if self.thinking.is_some() {
            self.signature.push_str(signature.inner());
        }
    }

    fn reasoning_stop(&mut self, out: &mut Vec<Emitted>) {
        let Some(text) = self.thinking.take() else {
            return;
        };
        if self.signature.is_empty() {
            // Unsigned: nothing the client needs to send back.
            return;
        }
        self.ensure_started(out);
        let n = self.thinking_blocks;
        let signature = std::mem::take(&mut self.signature);
        let doc = self.enc.doc();
        doc.push_str(&self.prefix);
        doc.push_str("{\"thinking_blocks\":[{\"index\":");
        push_u64(doc, u64::from(n));
        doc.push_str(",\"type\":\"thinking\",\"thinking\":\"");
        doc.push_str(&text);
        doc.push_str("\",\"signature\":\"");
        doc.push_str(&signature);
        doc.push_str("\"}]}");
        doc.push_str(NO_FINISH);
        self.enc.emit(None, EventKind::Content, out);
        self.thinking_blocks += 1;
    }

    fn redacted_reasoning(&mut self, data: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.reasoning_stop(out);
        self.ensure_started(out);
        let n = self.thinking_blocks;
        let doc = self.enc.doc();
        doc.push_str(&self.prefix);
        doc.push_str("{\"thinking_blocks\":[{\"index\":");
        push_u64(doc, u64::from(n));
        doc.push_str(",\"type\":\"redacted_thinking\",\"data\":");
        doc.push_str(data.literal());
        doc.push_str("}]}");
        doc.push_str(NO_FINISH);
        self.enc.emit(None, EventKind::Content, out);
        self.thinking_blocks += 1;
    }

    fn reasoning(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if text.is_empty() {
            return;
        }
        if let Some(held) = self.thinking.as_mut() {
            if held.len() + text.inner().len() <= MAX_HELD_THINKING {
                held.push_str(text.inner());
            } else {
                self.thinking = None;
                self.fail(
                    &Fault::malformed(
                        "anthropic",
                        "a thinking block ran over 4 MiB before its signature",
                    ),
                    out,
                );
                return;
            }
        }
        // Not in OpenAI's schema: the field vLLM, DeepSeek and LiteLLM use, which OpenAI SDKs
        // keep as an extra field.
        let doc = self.chunk();
        doc.push_str("{\"reasoning_content\":");
        doc.push_str(text.literal());
        doc.push('}');
        doc.push_str(NO_FINISH);
        self.enc.emit(None, EventKind::Content, out);
    }

    fn tool(&mut self, key: u32, part: ToolPart<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        let (pos, first) = match self.tool_keys.iter().position(|&k| k == key) {
            Some(p) => (p, false),
            None => {
                self.tool_keys.push(key);
                (self.tool_keys.len() - 1, true)
            }
        };
        let index = self.first_tool + pos as u32;
        let args = part.args.filter(|a| !a.is_empty());
        if !first && part.name.is_none() && args.is_none() {
            return;
        }
        let doc = self.enc.doc();
        doc.push_str(&self.prefix);
        doc.push_str("{\"tool_calls\":[{\"index\":");
        push_u64(doc, u64::from(index));
        if first {
            doc.push_str(",\"id\":");
            match part.id {
                Some(call) => doc.push_str(call.literal()),
                None => {
                    // Gemini often sends no id: one unique within the response.
                    doc.push_str("\"call_");
                    if let Some(id) = &self.id {
                        doc.push_str(id.as_json().inner());
                    }
                    doc.push('_');
                    push_u64(doc, u64::from(index));
                    doc.push('"');
                }
            }
            doc.push_str(",\"type\":\"function\"");
        }
        doc.push_str(",\"function\":{");
        if let Some(name) = part.name {
            doc.push_str("\"name\":");
            doc.push_str(name.literal());
            doc.push(',');
        }
        doc.push_str("\"arguments\":");
        doc.push_str(args.map_or("\"\"", JsonStr::literal));
        doc.push_str("}}]}");
        doc.push_str(NO_FINISH);
        self.enc.emit(None, EventKind::Content, out);
    }

    fn block_stop(&mut self, _out: &mut Vec<Emitted>) {}

    fn finish(&mut self, reason: Finish, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        self.reasoning_stop(out);
        if self.finished {
            return;
        }
        self.finished = true;
        let reason = reason.after_tools(!self.tool_keys.is_empty());
        let doc = self.chunk();
        doc.push_str("{},\"finish_reason\":\"");
        doc.push_str(reason.as_openai());
        doc.push_str("\"}]}");
        self.enc.emit(None, EventKind::Trailer, out);
    }

    fn usage(&mut self, usage: Usage) {
        self.usage = Some(usage);
    }

    fn done(&mut self, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        self.finish(Finish::Stop, out);
        if self.cfg.client_wants_usage && (self.usage.is_some() || self.prior != Usage::default()) {
            let total = sum(self.prior, self.usage);
            let doc = self.enc.doc();
            doc.push_str(&self.header);
            doc.push_str(",\"choices\":[],\"usage\":");
            push_usage(doc, &total);
            doc.push('}');
            self.enc.emit(None, EventKind::Trailer, out);
        }
        out.push(Emitted {
            bytes: Bytes::from_static(DONE),
            kind: EventKind::Trailer,
        });
        self.closed = true;
    }

    fn fail(&mut self, fault: &Fault, out: &mut Vec<Emitted>) {
        out.push(Emitted {
            bytes: fault.event(Family::OpenAi),
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
        self.thinking.as_ref().map_or(0, String::len) + self.signature.len()
    }

    fn splice_state(&self, own: Option<Usage>) -> Option<SpliceState> {
        let id = self.id.as_ref()?;
        Some(SpliceState {
            id: id.as_json().unescape().into_owned(),
            created: self.cfg.created,
            model: self.cfg.model.as_json().unescape().into_owned(),
            open_text_block: None,
            next_block: 0,
            next_tool_call: self.first_tool + self.tool_keys.len() as u32,
            usage: sum(self.prior, own),
        })
    }
}
