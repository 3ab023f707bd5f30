//! A ConverseStream (event-stream messages) translated into the client's SSE events, by the
//! same client writers the SSE translators use (`crate::stream::client`).
//!
//! The stream, per botocore's `ConverseStreamOutput`: `messageStart {role}`; per content block
//! an optional `contentBlockStart` (tool calls only: `{toolUse: {toolUseId, name}}`),
//! `contentBlockDelta`s (`{text}`, `{toolUse: {input}}` fragments of the arguments' JSON,
//! `{reasoningContent: {text | signature | redactedContent}}`), `contentBlockStop`; then
//! `messageStop {stopReason}` and last `metadata {usage, metrics}`. Each event's type is its
//! `:event-type` header and its payload the member's JSON. An exception is a message with
//! `:message-type: exception` and `:exception-type` (`throttlingException`, ...).
//!
//! Like the SSE translators, a stream that ends before `messageStop` ends the client's stream
//! with `upstream_stream_truncated`; an exception ends it with the exception's type as the
//! code and the status it stands for ([`super::error::exception_class`]); a payload that is
//! not the JSON its type names, or bytes that are not event-stream framing (a bad CRC), end
//! it with `upstream_malformed_event`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::classify_stream_exception;
use super::shape::TokenUsage;
use crate::api::{Family, Operation};
use crate::error::ProviderError;
use crate::eventstream::{Decoder, Message};
use crate::finish::Finish;
use crate::stream::client::anthropic::AnthropicWriter;
use crate::stream::client::gemini::GeminiWriter;
use crate::stream::client::openai::OpenAiWriter;
use crate::stream::client::responses::ResponsesWriter;
use crate::stream::client::{Guard, ToolPart, Writer, WriterConfig};
use crate::stream::fault::Fault;
use crate::stream::json::{JsonStr, JsonString};
use crate::stream::upstream::json_text;
use crate::stream::{Emitted, SpliceState};
use crate::usage::Usage;

const PROVIDER: &str = "bedrock";

/// How to translate one ConverseStream.
#[derive(Clone, Copy, Debug)]
pub struct BedrockStreamOptions<'a> {
    /// The client's operation: [`Operation::Messages`] gets Anthropic events,
    /// [`Operation::Responses`] Responses API events, the Gemini operations Gemini chunks,
    /// anything else OpenAI chat chunks.
    pub op: Operation,
    /// The model id sent to Bedrock: what the client's events name as the model (Converse
    /// does not name one).
    pub model: &'a str,
    /// The id the client's events carry (Converse has none: e.g. `msg_` or `chatcmpl-` and
    /// the response's `x-amzn-RequestId`). `None`: `msg_sluice`, `chatcmpl-sluice`,
    /// `resp_sluice` (Gemini chunks carry no id).
    pub id: Option<&'a str>,
    /// The client asked for usage in its stream (OpenAI `include_usage`).
    pub client_wants_usage: bool,
    /// Keep the assistant text emitted so far ([`BedrockStream::text`]).
    pub track_text: bool,
    /// Seconds since the epoch: the `created` of OpenAI chunks.
    pub created: u64,
    /// This stream continues a cut one (see [`crate::stream`]'s module docs).
    pub continuation: bool,
    /// With `continuation`: the cut stream's splice state.
    pub splice: Option<&'a SpliceState>,
}

impl<'a> BedrockStreamOptions<'a> {
    /// A plain stream: no usage asked, no text tracking, `created` 0, no id, no continuation.
    pub fn new(op: Operation, model: &'a str) -> Self {
        BedrockStreamOptions {
            op,
            model,
            id: None,
            client_wants_usage: false,
            track_text: false,
            created: 0,
            continuation: false,
            splice: None,
        }
    }

    fn writer_config(&self) -> WriterConfig {
        let splice = self.splice.filter(|_| self.continuation).cloned();
        let (model, created) = match &splice {
            Some(s) => (JsonString::escape(&s.model), s.created),
            None => (JsonString::escape(self.model), self.created),
        };
        WriterConfig {
            model,
            created,
            client_wants_usage: self.client_wants_usage,
            track_text: self.track_text,
            continuation: self.continuation,
            splice,
        }
    }
}

// === wire shapes (borrowed: strings copied to the client stay escaped JSON) ===

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart<'a> {
    content_block_index: u32,
    #[serde(borrow, default)]
    start: Option<StartBody<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartBody<'a> {
    #[serde(borrow, default)]
    tool_use: Option<ToolUseStart<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolUseStart<'a> {
    #[serde(borrow, default)]
    tool_use_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDelta<'a> {
    content_block_index: u32,
    #[serde(borrow)]
    delta: DeltaBody<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeltaBody<'a> {
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_use: Option<ToolUseDelta<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<ReasoningDelta<'a>>,
}

#[derive(Deserialize)]
struct ToolUseDelta<'a> {
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ReasoningDelta<'a> {
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStop {
    content_block_index: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageStop<'a> {
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    usage: Option<TokenUsage>,
}

fn parse<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, &'static str> {
    serde_json::from_str(text).map_err(|_| "an event that is not the JSON its type names")
}

// === impl Reader ===

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    Text(u32),
    Tool(u32),
    Reasoning(u32),
}

/// What the upstream has said so far.
#[derive(Debug, Default)]
struct Reader {
    id: Option<JsonString>,
    block: Option<Block>,
    started: bool,
    finished: bool,
    done: bool,
    usage: Option<TokenUsage>,
    error: Option<ProviderError>,
}

impl Reader {
    fn start<W: Writer>(&mut self, w: &mut W, out: &mut Vec<Emitted>) {
        if !self.started {
            self.started = true;
            w.start(self.id.as_ref().map(JsonString::as_json), None, out);
        }
    }

    fn message<W: Writer>(
        &mut self,
        m: &Message,
        w: &mut W,
        out: &mut Vec<Emitted>,
    ) -> Result<(), &'static str> {
        match m.header_str(":message-type").unwrap_or("event") {
            "event" => {}
            "exception" => {
                let kind = m.header_str(":exception-type").unwrap_or("exception");
                let e = classify_stream_exception(kind, &m.payload);
                w.fail(&Fault::with(e.status.as_u16(), kind, &e.message), out);
                self.error = Some(e);
                return Ok(());
            }
            _ => {
                // `:message-type: error`: a framing-level error with its code and message in
                // headers.
                let code = m.header_str(":error-code").unwrap_or("upstream_error");
                let message = m
                    .header_str(":error-message")
                    .unwrap_or("the Bedrock stream reported an error");
                let payload = serde_json::json!({ "message": message }).to_string();
                let e = classify_stream_exception(code, payload.as_bytes());
                w.fail(&Fault::with(e.status.as_u16(), code, message), out);
                self.error = Some(e);
                return Ok(());
            }
        }
        let kind = m.header_str(":event-type").unwrap_or("");
        let text = json_text(&m.payload)?;
        match kind {
            "contentBlockDelta" => {
                let d: BlockDelta<'_> = parse(text)?;
                let index = d.content_block_index;
                self.start(w, out);
                if let Some(t) = JsonStr::opt(d.delta.text) {
                    self.block = Some(Block::Text(index));
                    w.text(t, out);
                } else if let Some(t) = d.delta.tool_use {
                    if self.block != Some(Block::Tool(index)) {
                        return Err("tool arguments for a block that did not start as a tool call");
                    }
                    w.tool(
                        index,
                        ToolPart {
                            args: JsonStr::opt(t.input),
                            ..ToolPart::default()
                        },
                        out,
                    );
                } else if let Some(r) = d.delta.reasoning_content {
                    self.block = Some(Block::Reasoning(index));
                    if let Some(t) = JsonStr::opt(r.text) {
                        w.reasoning(t, out);
                    }
                }
            }
            "contentBlockStart" => {
                let b: BlockStart<'_> = parse(text)?;
                self.start(w, out);
                if let Some(t) = b.start.and_then(|s| s.tool_use) {
                    let name = JsonStr::opt(t.name).ok_or("a toolUse start without a name")?;
                    self.block = Some(Block::Tool(b.content_block_index));
                    w.tool(
                        b.content_block_index,
                        ToolPart {
                            id: JsonStr::opt(t.tool_use_id),
                            name: Some(name),
                            args: None,
                        },
                        out,
                    );
                }
            }
            "contentBlockStop" => {
                let b: BlockStop = parse(text)?;
                if let Some(Block::Text(i) | Block::Tool(i)) = self.block {
                    if i == b.content_block_index {
                        w.block_stop(out);
                    }
                }
                self.block = None;
            }
            "messageStart" => self.start(w, out),
            "messageStop" => {
                let s: MessageStop<'_> = parse(text)?;
                self.start(w, out);
                self.finished = true;
                w.finish(
                    Finish::from_bedrock(s.stop_reason.as_deref().unwrap_or("end_turn")),
                    out,
                );
            }
            "metadata" => {
                let m: Metadata = parse(text)?;
                if let Some(u) = m.usage {
                    self.usage = Some(u);
                    w.usage(u.to_usage());
                }
                if self.finished && !self.done {
                    self.done = true;
                    w.done(out);
                }
            }
            // New event types may be added.
            _ => {}
        }
        Ok(())
    }

    fn end<W: Writer>(&mut self, w: &mut W, out: &mut Vec<Emitted>) {
        if self.done {
            return;
        }
        if self.finished {
            // `metadata` (usage only) is missing: the answer itself is complete.
            self.done = true;
            w.done(out);
        } else {
            w.fail(&Fault::truncated(PROVIDER), out);
        }
    }
}

// === impl BedrockStream ===

/// Reader and writer for one client family.
struct Pair<W> {
    reader: Reader,
    writer: Guard<W>,
}

/// The writer-specific part of [`BedrockStream`], behind one vtable.
trait Translate: Send {
    fn message(&mut self, m: &Message, out: &mut Vec<Emitted>);
    fn fail(&mut self, fault: &Fault, out: &mut Vec<Emitted>);
    fn end(&mut self, out: &mut Vec<Emitted>);
    fn usage(&self) -> Option<TokenUsage>;
    fn error(&self) -> Option<&ProviderError>;
    fn closed(&self) -> bool;
    fn text(&self) -> &str;
    fn held_bytes(&self) -> usize;
    fn splice_state(&self) -> Option<SpliceState>;
}

impl<W: Writer> Translate for Pair<W> {
    fn message(&mut self, m: &Message, out: &mut Vec<Emitted>) {
        if self.writer.closed() {
            return;
        }
        if let Err(what) = self.reader.message(m, &mut self.writer, out) {
            self.writer.fail(&Fault::malformed(PROVIDER, what), out);
        }
    }
    fn fail(&mut self, fault: &Fault, out: &mut Vec<Emitted>) {
        self.writer.fail(fault, out);
    }
    fn end(&mut self, out: &mut Vec<Emitted>) {
        if !self.writer.closed() {
            self.reader.end(&mut self.writer, out);
        }
    }
    fn usage(&self) -> Option<TokenUsage> {
        self.reader.usage
    }
    fn error(&self) -> Option<&ProviderError> {
        self.reader.error.as_ref()
    }
    fn closed(&self) -> bool {
        self.writer.closed()
    }
    fn text(&self) -> &str {
        self.writer.text_so_far()
    }
    fn held_bytes(&self) -> usize {
        self.writer.held_bytes()
    }
    fn splice_state(&self) -> Option<SpliceState> {
        self.writer
            .splice_state(self.reader.usage.map(|u| u.to_usage()))
    }
}

/// InvokeModelWithResponseStream for an Anthropic client: each `chunk` unwrapped into the
/// Anthropic SSE event it carries ([`super::invoke_stream_event`]), for the Anthropic
/// passthrough after it to read (which gives the kinds and reads the usage: the events here
/// are all [`crate::stream::EventKind::Content`]); an exception or a chunk that cannot be
/// unwrapped an Anthropic error event that ends the stream.
#[derive(Default)]
struct Invoke {
    error: Option<ProviderError>,
    closed: bool,
}

impl Translate for Invoke {
    fn message(&mut self, m: &Message, out: &mut Vec<Emitted>) {
        if self.closed {
            return;
        }
        if m.header_str(":message-type") == Some("exception") {
            let kind = m.header_str(":exception-type").unwrap_or("exception");
            let e = classify_stream_exception(kind, &m.payload);
            let code = e.code.clone().unwrap_or_else(|| kind.to_string());
            self.fail(&Fault::with(e.status.as_u16(), &code, &e.message), out);
            self.error = Some(e);
            return;
        }
        match super::invoke_stream_event(m) {
            Ok(Some(bytes)) => out.push(Emitted {
                bytes,
                kind: crate::stream::EventKind::Content,
            }),
            Ok(None) => {}
            Err(e) => self.fail(&Fault::malformed(PROVIDER, &e.to_string()), out),
        }
    }
    fn fail(&mut self, fault: &Fault, out: &mut Vec<Emitted>) {
        if !self.closed {
            self.closed = true;
            out.push(Emitted {
                bytes: fault.event(Family::Anthropic),
                kind: crate::stream::EventKind::Error,
            });
        }
    }
    // The Anthropic passthrough after this sees whether `message_stop` came.
    fn end(&mut self, _out: &mut Vec<Emitted>) {}
    fn usage(&self) -> Option<TokenUsage> {
        None
    }
    fn error(&self) -> Option<&ProviderError> {
        self.error.as_ref()
    }
    fn closed(&self) -> bool {
        self.closed
    }
    fn text(&self) -> &str {
        ""
    }
    fn held_bytes(&self) -> usize {
        0
    }
    fn splice_state(&self) -> Option<SpliceState> {
        None
    }
}

/// Translates one Bedrock ConverseStream response body into the client's SSE events
/// (complete events in [`Emitted`], with the same [`crate::stream::EventKind`]s the SSE
/// translators give, so the relay's hold and commit logic applies unchanged).
///
/// Feed it the body's bytes as they arrive ([`feed`](Self::feed)), or messages decoded
/// elsewhere ([`message`](Self::message)), then call [`end`](Self::end) at the body's end.
/// Bounded: the decoder holds at most one event-stream message (16 MiB cap) plus the chunk
/// being fed, and the writer what [`crate::stream::StreamTranslator::held_bytes`] says.
pub struct BedrockStream {
    decoder: Decoder,
    inner: Box<dyn Translate>,
}

impl std::fmt::Debug for BedrockStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BedrockStream")
            .field("buffered", &self.decoder.buffered())
            .field("closed", &self.inner.closed())
            .finish()
    }
}

impl BedrockStream {
    /// A translator for `opts`.
    pub fn new(opts: &BedrockStreamOptions<'_>) -> BedrockStream {
        let reader = Reader {
            id: opts.id.map(JsonString::escape),
            ..Reader::default()
        };
        let cfg = opts.writer_config();
        fn pair<W: Writer + 'static>(reader: Reader, w: W) -> Box<dyn Translate> {
            Box::new(Pair {
                reader,
                writer: Guard(w),
            })
        }
        let inner = match opts.op {
            Operation::Responses => pair(reader, ResponsesWriter::new(cfg)),
            op => match op.family() {
                Family::Anthropic => pair(reader, AnthropicWriter::new(cfg)),
                Family::Gemini => pair(reader, GeminiWriter::new(cfg)),
                Family::OpenAi => pair(reader, OpenAiWriter::new(cfg)),
            },
        };
        BedrockStream {
            decoder: Decoder::new(),
            inner,
        }
    }

    /// InvokeModelWithResponseStream's body for an Anthropic client: the Anthropic events its
    /// chunks carry, as the Anthropic API would have sent them (see [`super::invoke_request`]);
    /// an exception, a chunk that is not base64 JSON or broken framing ends the stream with an
    /// Anthropic error event. Usage and text are the Anthropic passthrough's to read after it.
    pub fn invoke() -> BedrockStream {
        BedrockStream {
            decoder: Decoder::new(),
            inner: Box::new(Invoke::default()),
        }
    }

    /// Body bytes in; the client events of every message they complete appended to `out`.
    /// Framing that cannot be decoded (a bad CRC, an oversized message) ends the client's
    /// stream with an `upstream_malformed_event` error event; later bytes are ignored.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Emitted>) {
        if self.inner.closed() {
            return;
        }
        self.decoder.push(chunk);
        loop {
            match self.decoder.next_message() {
                Ok(Some(m)) => {
                    self.inner.message(&m, out);
                    if self.inner.closed() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    self.inner
                        .fail(&Fault::malformed(PROVIDER, &e.to_string()), out);
                    return;
                }
            }
        }
    }

    /// One decoded event-stream message in.
    pub fn message(&mut self, m: &Message, out: &mut Vec<Emitted>) {
        self.inner.message(m, out);
    }

    /// The body ended: closes the client's stream (a clean end after `messageStop`, else an
    /// error event).
    pub fn end(&mut self, out: &mut Vec<Emitted>) {
        if self.inner.closed() {
            return;
        }
        if let Err(e) = self.decoder.finish() {
            let message = format!("the Bedrock stream ended inside a message: {e}");
            let fault = Fault::with(502, "upstream_stream_truncated", &message);
            self.inner.fail(&fault, out);
            return;
        }
        self.inner.end(out);
    }

    /// The usage Bedrock reported (its `metadata` event), normalised.
    pub fn usage(&self) -> Option<Usage> {
        self.inner.usage().map(|u| u.to_usage())
    }

    /// Bedrock's own token counts, with the cache writes [`Usage`] does not keep.
    pub fn token_usage(&self) -> Option<TokenUsage> {
        self.inner.usage()
    }

    /// The exception that ended the stream, classified for the policy stage.
    pub fn error(&self) -> Option<&ProviderError> {
        self.inner.error()
    }

    /// The assistant text emitted so far (with `track_text`).
    pub fn text(&self) -> &str {
        self.inner.text()
    }

    /// Bytes held beyond ids and counters: undecoded framing plus what the writer holds.
    pub fn held_bytes(&self) -> usize {
        self.decoder.buffered() + self.inner.held_bytes()
    }

    /// What a continuation of this stream needs, once the client has seen its start.
    pub fn splice_state(&self) -> Option<SpliceState> {
        self.inner.splice_state()
    }

    /// Whether the client's stream is over (finished or failed).
    pub fn is_closed(&self) -> bool {
        self.inner.closed()
    }
}
