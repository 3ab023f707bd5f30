//! The Gemini-native client's stream (`streamGenerateContent?alt=sse`): unnamed `data:`
//! events, each a whole `GenerateContentResponse` holding the new parts, the last one with
//! the `finishReason` and the `usageMetadata`. Gemini has no end marker: the stream ends.
//!
//! Text goes out as it comes (a `text` part per delta), reasoning as `thought` parts; a
//! signed thinking block (Anthropic's) ends with a `thought` part that carries its signature
//! as `thoughtSignature`, which the SDK keeps on the part and sends back, and which the next
//! request restores as the signed block. A function call goes out whole, as Gemini sends
//! them (`functionCall` with `id`, `name` and `args` as an object): its argument fragments
//! are held until the upstream closes the call ([`MAX_HELD_ARGS`]).

use super::{ToolPart, Writer, WriterConfig};
use crate::api::Family;
use crate::finish::Finish;
use crate::stream::fault::Fault;
use crate::stream::json::{push_u64, EventEncoder, JsonStr, JsonString};
use crate::stream::{Emitted, EventKind, SpliceState};
use crate::usage::Usage;

/// Most bytes of one function call's arguments held until the call is whole.
pub(crate) const MAX_HELD_ARGS: usize = 1 << 20;

/// A function call being received.
#[derive(Debug)]
struct Call {
    key: u32,
    id: JsonString,
    name: JsonString,
    /// The arguments' JSON text, escaped (the fragments' inner literals).
    args: String,
}

/// Writes Gemini `GenerateContentResponse` chunks.
pub(crate) struct GeminiWriter {
    cfg: WriterConfig,
    enc: EventEncoder,
    /// `responseId` (a literal), once started.
    id: Option<JsonString>,
    call: Option<Call>,
    calls: u32,
    /// The open reasoning block's signature (escaped), if the upstream signs it.
    signature: Option<String>,
    finish: Option<Finish>,
    tools_seen: bool,
    usage: Option<Usage>,
    closed: bool,
    text: String,
}

impl GeminiWriter {
    /// A writer for one stream.
    pub(crate) fn new(cfg: WriterConfig) -> Self {
        GeminiWriter {
            cfg,
            enc: EventEncoder::default(),
            id: None,
            call: None,
            calls: 0,
            signature: None,
            finish: None,
            tools_seen: false,
            usage: None,
            closed: false,
            text: String::new(),
        }
    }

    fn ensure_started(&mut self, out: &mut Vec<Emitted>) {
        if self.id.is_none() {
            self.start(None, None, out);
        }
    }

    /// Starts a chunk: `{"candidates":[{"content":{"role":"model","parts":[`.
    fn chunk(&mut self) -> &mut String {
        let doc = self.enc.doc();
        doc.push_str("{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[");
        doc
    }

    /// Ends a chunk begun by [`Self::chunk`] (its parts written) and emits it.
    fn emit(&mut self, finish: Option<&str>, kind: EventKind, out: &mut Vec<Emitted>) {
        let doc = self.enc.doc_mut();
        doc.push_str("]}");
        if let Some(f) = finish {
            doc.push_str(",\"finishReason\":\"");
            doc.push_str(f);
            doc.push('"');
        }
        doc.push_str(",\"index\":0}]");
        if finish.is_some() {
            let u = self.usage.unwrap_or_default();
            doc.push_str(",\"usageMetadata\":{\"promptTokenCount\":");
            push_u64(doc, u.input);
            doc.push_str(",\"candidatesTokenCount\":");
            push_u64(doc, u.output.saturating_sub(u.reasoning));
            doc.push_str(",\"thoughtsTokenCount\":");
            push_u64(doc, u.reasoning);
            doc.push_str(",\"cachedContentTokenCount\":");
            push_u64(doc, u.cached_input);
            doc.push_str(",\"totalTokenCount\":");
            push_u64(doc, u.input + u.output);
            doc.push('}');
        }
        doc.push_str(",\"modelVersion\":");
        doc.push_str(self.cfg.model.literal());
        doc.push_str(",\"responseId\":");
        doc.push_str(self.id.as_ref().map_or("\"\"", JsonString::literal));
        doc.push('}');
        self.enc.emit(None, kind, out);
    }

    /// The held call, whole: one `functionCall` part.
    fn flush_call(&mut self, out: &mut Vec<Emitted>) {
        let Some(call) = self.call.take() else {
            return;
        };
        // The arguments' text as JSON: checked to be an object before it goes in raw.
        let raw = JsonStr::from_literal(&format!("\"{}\"", call.args))
            .unescape()
            .into_owned();
        let raw = if raw.trim().is_empty() {
            "{}"
        } else {
            raw.as_str()
        };
        let ok = serde_json::from_str::<&serde_json::value::RawValue>(raw)
            .is_ok_and(|v| v.get().trim_start().starts_with('{'));
        if !ok {
            self.fail(
                &Fault::malformed("upstream", "a tool call's arguments are not a JSON object"),
                out,
            );
            return;
        }
        let doc = self.chunk();
        doc.push_str("{\"functionCall\":{\"id\":");
        doc.push_str(call.id.literal());
        doc.push_str(",\"name\":");
        doc.push_str(call.name.literal());
        doc.push_str(",\"args\":");
        doc.push_str(raw.trim());
        doc.push_str("}}");
        self.emit(None, EventKind::Content, out);
    }
}

impl Writer for GeminiWriter {
    fn start(
        &mut self,
        id: Option<JsonStr<'_>>,
        model: Option<JsonStr<'_>>,
        _out: &mut Vec<Emitted>,
    ) {
        if self.id.is_some() {
            return;
        }
        self.cfg.answered_by(model);
        self.id = Some(id.map_or_else(|| JsonString::escape("sluice"), JsonString::from_json));
    }

    fn text(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if text.is_empty() {
            return;
        }
        let doc = self.chunk();
        doc.push_str("{\"text\":");
        doc.push_str(text.literal());
        doc.push('}');
        self.emit(None, EventKind::Content, out);
        if self.cfg.track_text {
            self.text.push_str(&text.unescape());
        }
    }

    fn refusal(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.text(text, out);
    }

    fn reasoning_start(&mut self, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        self.signature = Some(String::new());
    }

    fn reasoning(&mut self, text: JsonStr<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        if text.is_empty() {
            return;
        }
        let doc = self.chunk();
        doc.push_str("{\"text\":");
        doc.push_str(text.literal());
        doc.push_str(",\"thought\":true}");
        self.emit(None, EventKind::Content, out);
    }

    fn reasoning_signature(&mut self, signature: JsonStr<'_>, _out: &mut Vec<Emitted>) {
        if let Some(s) = self.signature.as_mut() {
            s.push_str(signature.inner());
        }
    }

    fn reasoning_stop(&mut self, out: &mut Vec<Emitted>) {
        let Some(signature) = self.signature.take().filter(|s| !s.is_empty()) else {
            return;
        };
        let doc = self.chunk();
        doc.push_str("{\"text\":\"\",\"thought\":true,\"thoughtSignature\":\"");
        doc.push_str(&signature);
        doc.push_str("\"}");
        self.emit(None, EventKind::Content, out);
    }

    fn redacted_reasoning(&mut self, _data: JsonStr<'_>, _out: &mut Vec<Emitted>) {
        // No text to show and no Gemini field to carry it in (as in whole responses).
    }

    fn tool(&mut self, key: u32, part: ToolPart<'_>, out: &mut Vec<Emitted>) {
        self.ensure_started(out);
        self.tools_seen = true;
        if self.call.as_ref().is_some_and(|c| c.key != key) {
            self.flush_call(out);
            if self.closed {
                // The finished call was refused: the stream has ended.
                return;
            }
        }
        if self.call.is_none() {
            let n = self.calls;
            self.calls += 1;
            let id = match part.id {
                Some(id) => JsonString::from_json(id),
                None => {
                    let mut s = String::from("call_");
                    push_u64(&mut s, u64::from(n));
                    JsonString::escape(&s)
                }
            };
            self.call = Some(Call {
                key,
                id,
                name: JsonString::escape(""),
                args: String::new(),
            });
        }
        let Some(call) = self.call.as_mut() else {
            return;
        };
        if let Some(name) = part.name {
            call.name = JsonString::from_json(name);
        }
        if let Some(args) = part.args {
            if call.args.len() + args.inner().len() > MAX_HELD_ARGS {
                self.call = None;
                self.fail(
                    &Fault::malformed("upstream", "a tool call's arguments ran over 1 MiB"),
                    out,
                );
                return;
            }
            call.args.push_str(args.inner());
        }
    }

    fn block_stop(&mut self, out: &mut Vec<Emitted>) {
        self.flush_call(out);
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
        self.flush_call(out);
        if self.closed {
            return;
        }
        let reason = self
            .finish
            .unwrap_or(Finish::Stop)
            .after_tools(self.tools_seen)
            .as_gemini();
        let doc = self.chunk();
        doc.push_str("{\"text\":\"\"}");
        self.emit(Some(reason), EventKind::Trailer, out);
        self.closed = true;
    }

    fn fail(&mut self, fault: &Fault, out: &mut Vec<Emitted>) {
        out.push(Emitted {
            bytes: fault.event(Family::Gemini),
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
        self.call.as_ref().map_or(0, |c| c.args.len())
            + self.signature.as_ref().map_or(0, String::len)
    }

    fn splice_state(&self, _own: Option<Usage>) -> Option<SpliceState> {
        // A Gemini stream is not continued after a cut (as a Responses stream).
        None
    }
}
