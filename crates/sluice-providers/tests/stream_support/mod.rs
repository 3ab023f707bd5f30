//! Shared by the stream tests: running a stream through `sluice_sse::Decoder` and a
//! translator, and reading the client's side back the way an SDK would (accumulating the
//! message) while checking the protocol's rules on the way.
#![allow(dead_code)]

use std::path::PathBuf;

use bytes::Bytes;
use serde_json::Value;
use sluice_providers::stream::{translator, Emitted, EventKind, StreamOptions, StreamTranslator};
use sluice_providers::{Operation, ProviderKind, Usage};
use sluice_sse::{Decoder, Item};

pub mod bedrock;

/// A fixture's bytes.
pub fn fixture(name: &str) -> Bytes {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/streams")
        .join(name);
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// Every fixture file name.
pub fn fixtures() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/streams");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".sse"))
        .collect();
    names.sort();
    names
}

/// The upstream family a fixture speaks, by its name.
pub fn provider_of(name: &str) -> ProviderKind {
    if name.starts_with("anthropic") {
        ProviderKind::Anthropic {
            version: "2023-06-01".into(),
        }
    } else if name.starts_with("gemini") {
        ProviderKind::Gemini
    } else {
        ProviderKind::OpenAi
    }
}

pub const OPS: [Operation; 2] = [Operation::ChatCompletions, Operation::Messages];

/// What a run produced.
pub struct Run {
    pub out: Vec<Emitted>,
    pub usage: Option<Usage>,
    pub text: String,
    /// The most the decoder and the translator held at once between steps.
    pub max_decoder_held: usize,
    pub max_translator_held: usize,
}

/// Feeds `input` split by `sizes` (cycled; empty: one chunk) through a decoder and `t`; calls
/// `end()` when the stream ends cleanly.
pub fn run_with(t: &mut dyn StreamTranslator, input: &Bytes, sizes: &[usize]) -> Run {
    let mut dec = Decoder::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut size = sizes.iter().copied().cycle();
    let mut max_decoder_held = 0;
    let mut max_translator_held = 0;
    let mut clean = true;
    let mut step = |dec: &mut Decoder, out: &mut Vec<Emitted>, t: &mut dyn StreamTranslator| {
        while let Some(item) = dec.next_item() {
            match item {
                Ok(Item::Event(ev)) => t.event(&ev, out),
                Ok(_) => {}
                Err(_) => return false,
            }
            max_decoder_held = max_decoder_held.max(dec.buffered_bytes());
            max_translator_held = max_translator_held.max(t.held_bytes());
        }
        true
    };
    while at < input.len() {
        let n = match size.next() {
            Some(0) | None => input.len() - at,
            Some(n) => n.min(input.len() - at),
        };
        dec.feed(input.slice(at..at + n));
        at += n;
        if !step(&mut dec, &mut out, t) {
            clean = false;
            break;
        }
    }
    if clean {
        dec.finish();
        if step(&mut dec, &mut out, t) {
            t.end(&mut out);
        }
    }
    Run {
        out,
        usage: t.usage(),
        text: t.text().to_owned(),
        max_decoder_held,
        max_translator_held,
    }
}

/// Options for a fixture's upstream and `op`.
pub struct Opts {
    pub op: Operation,
    pub provider: ProviderKind,
    pub wants_usage: bool,
    pub track_text: bool,
}

impl Opts {
    pub fn new(op: Operation, fixture: &str) -> Self {
        Opts {
            op,
            provider: provider_of(fixture),
            wants_usage: false,
            track_text: false,
        }
    }

    pub fn usage(mut self, on: bool) -> Self {
        self.wants_usage = on;
        self
    }

    pub fn track(mut self, on: bool) -> Self {
        self.track_text = on;
        self
    }

    pub fn stream_options(&self) -> StreamOptions<'_> {
        let mut o = StreamOptions::new(self.op, &self.provider, "client-model");
        o.client_wants_usage = self.wants_usage;
        o.track_text = self.track_text;
        o.created = 1_700_000_000;
        o
    }
}

/// Runs a fixture whole.
pub fn run(name: &str, opts: &Opts) -> Run {
    run_chunked(name, opts, &[])
}

pub fn run_chunked(name: &str, opts: &Opts, sizes: &[usize]) -> Run {
    let mut t = translator(&opts.stream_options());
    run_with(t.as_mut(), &fixture(name), sizes)
}

/// One client event, decoded: its name and data. Panics unless `bytes` is exactly one
/// complete SSE event.
pub fn decode_one(bytes: &Bytes) -> (String, String) {
    let mut dec = Decoder::new();
    dec.feed(bytes.clone());
    dec.finish();
    let mut events = Vec::new();
    while let Some(item) = dec.next_item() {
        match item.expect("a complete event") {
            Item::Event(ev) => {
                events.push((ev.event_type_str().into_owned(), ev.data_str().into_owned()))
            }
            other => panic!("not an event: {other:?}"),
        }
    }
    assert_eq!(
        events.len(),
        1,
        "one emitted item must be one event: {bytes:?}"
    );
    events.pop().unwrap()
}

/// An OpenAI chat completion as the SDK accumulates a stream into it.
#[derive(Debug, Default)]
pub struct OpenAiMessage {
    pub id: String,
    pub model: String,
    pub role: Option<String>,
    pub content: String,
    pub reasoning: String,
    /// The `delta.refusal` fragments, joined.
    pub refusal: String,
    /// (id, name, arguments) by index.
    pub tool_calls: Vec<(String, String, String)>,
    pub finish_reason: Option<String>,
    pub usage: Option<Value>,
    pub done: bool,
    pub error: Option<Value>,
    pub chunks: usize,
    /// `delta.thinking_blocks` entries by their `index` (each comes whole, once).
    pub thinking_blocks: Vec<Value>,
}

/// Accumulates OpenAI chunks, checking: every chunk is a JSON `chat.completion.chunk` with the
/// same id; `[DONE]` comes last; after an error nothing follows; a tool call's first fragment
/// has its id, type and name, later ones only arguments.
pub fn openai_message(out: &[Emitted]) -> OpenAiMessage {
    let mut m = OpenAiMessage::default();
    openai_continue(&mut m, out);
    m
}

/// Goes on accumulating into `m` (a continuation's events after the cut stream's).
pub fn openai_continue(m: &mut OpenAiMessage, out: &[Emitted]) {
    for (i, e) in out.iter().enumerate() {
        let (name, data) = decode_one(&e.bytes);
        assert_eq!(name, "message", "OpenAI events are unnamed");
        assert!(!m.done, "nothing after [DONE]");
        assert!(m.error.is_none(), "nothing after an error");
        if data == "[DONE]" {
            assert_eq!(e.kind, EventKind::Trailer);
            assert_eq!(i, out.len() - 1);
            m.done = true;
            continue;
        }
        let v: Value = serde_json::from_str(&data).expect("JSON chunk");
        if let Some(err) = v.get("error") {
            assert_eq!(e.kind, EventKind::Error);
            m.error = Some(err.clone());
            continue;
        }
        m.chunks += 1;
        assert_eq!(v["object"], "chat.completion.chunk");
        assert!(v["created"].is_u64());
        assert!(v["model"].is_string());
        let id = v["id"].as_str().expect("id").to_owned();
        m.model = v["model"].as_str().unwrap().to_owned();
        if m.id.is_empty() {
            m.id = id;
        } else {
            assert_eq!(m.id, id, "one id per stream");
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            assert_eq!(v["choices"], Value::Array(vec![]));
            assert_eq!(e.kind, EventKind::Trailer);
            m.usage = Some(u.clone());
            continue;
        }
        let choice = &v["choices"][0];
        assert_eq!(choice["index"], 0);
        let delta = &choice["delta"];
        if let Some(role) = delta.get("role") {
            assert!(m.role.is_none(), "one role chunk");
            m.role = Some(role.as_str().unwrap().to_owned());
        }
        if let Some(c) = delta.get("content").and_then(Value::as_str) {
            m.content.push_str(c);
        }
        if let Some(c) = delta.get("reasoning_content").and_then(Value::as_str) {
            m.reasoning.push_str(c);
        }
        if let Some(c) = delta.get("refusal").and_then(Value::as_str) {
            m.refusal.push_str(c);
        }
        for b in delta
            .get("thinking_blocks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = b["index"].as_u64().expect("thinking block index") as usize;
            assert_eq!(index, m.thinking_blocks.len(), "one whole block per index");
            let mut b = b.clone();
            b.as_object_mut().unwrap().remove("index");
            m.thinking_blocks.push(b);
        }
        for tc in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = tc["index"].as_u64().expect("index") as usize;
            let args = tc["function"]["arguments"].as_str().unwrap_or("");
            if index == m.tool_calls.len() {
                let id = tc["id"].as_str().expect("id in the first fragment");
                assert_eq!(tc["type"], "function");
                let name = tc["function"]["name"]
                    .as_str()
                    .expect("name in the first fragment");
                m.tool_calls.push((id.into(), name.into(), args.into()));
            } else {
                assert!(index < m.tool_calls.len(), "indexes are dense");
                assert!(tc.get("id").is_none(), "id only in the first fragment");
                m.tool_calls[index].2.push_str(args);
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            assert!(m.finish_reason.is_none(), "one finish reason");
            assert_eq!(e.kind, EventKind::Trailer);
            m.finish_reason = Some(f.to_owned());
        }
    }
}

/// One Anthropic content block as the SDK accumulates it.
#[derive(Debug, Default, Clone)]
pub struct Block {
    pub kind: String,
    pub text: String,
    pub id: String,
    pub name: String,
    pub input_json: String,
    pub stopped: bool,
    /// A thinking block's signature; a redacted one's data.
    pub signature: String,
}

/// An Anthropic message as the SDK accumulates a stream into it.
#[derive(Debug, Default)]
pub struct AnthropicMessage {
    pub id: String,
    pub model: String,
    pub start_usage: Option<Value>,
    pub blocks: Vec<Block>,
    pub stop_reason: Option<String>,
    pub usage: Option<Value>,
    pub stopped: bool,
    pub error: Option<Value>,
}

/// Accumulates Anthropic events, checking: each event's name equals its data's `type`;
/// `message_start` first (unless `continuation`); blocks start at the next index, get deltas
/// only while open and of their kind, and stop at most once; `message_delta` then
/// `message_stop` last; nothing after an error.
pub fn anthropic_message(out: &[Emitted]) -> AnthropicMessage {
    let mut m = AnthropicMessage::default();
    anthropic_continue(&mut m, out);
    m
}

/// Goes on accumulating into `m` (a continuation's events after the cut stream's).
pub fn anthropic_continue(m: &mut AnthropicMessage, out: &[Emitted]) {
    let mut open: Option<usize> = m.blocks.iter().position(|b| !b.stopped);
    for e in out {
        let (name, data) = decode_one(&e.bytes);
        assert!(!m.stopped, "nothing after message_stop");
        assert!(m.error.is_none(), "nothing after an error");
        let v: Value = serde_json::from_str(&data).expect("JSON event");
        if name == "error" {
            assert_eq!(e.kind, EventKind::Error);
            assert_eq!(v["type"], "error");
            m.error = Some(v["error"].clone());
            continue;
        }
        assert_eq!(v["type"], name.as_str(), "event name = data type");
        match name.as_str() {
            "message_start" => {
                assert!(m.id.is_empty(), "one message_start");
                assert_eq!(e.kind, EventKind::Preamble);
                m.id = v["message"]["id"].as_str().unwrap().into();
                m.model = v["message"]["model"].as_str().unwrap().into();
                m.start_usage = Some(v["message"]["usage"].clone());
                assert_eq!(v["message"]["role"], "assistant");
            }
            "content_block_start" => {
                assert!(!m.id.is_empty(), "message_start first");
                assert!(open.is_none(), "blocks do not interleave");
                let index = v["index"].as_u64().unwrap() as usize;
                assert_eq!(index, m.blocks.len(), "blocks start at the next index");
                let cb = &v["content_block"];
                m.blocks.push(Block {
                    kind: cb["type"].as_str().unwrap().into(),
                    id: cb["id"].as_str().unwrap_or("").into(),
                    name: cb["name"].as_str().unwrap_or("").into(),
                    signature: cb["data"].as_str().unwrap_or("").into(),
                    ..Block::default()
                });
                if cb["type"] == "thinking" {
                    assert_eq!(cb["thinking"], "");
                    assert_eq!(cb["signature"], "");
                }
                if cb["type"] == "tool_use" {
                    assert!(cb["id"].is_string() && cb["name"].is_string());
                    assert_eq!(cb["input"], serde_json::json!({}));
                }
                open = Some(index);
            }
            "content_block_delta" => {
                assert_eq!(e.kind, EventKind::Content);
                let index = v["index"].as_u64().unwrap() as usize;
                assert_eq!(Some(index), open, "deltas only for the open block");
                let b = &mut m.blocks[index];
                let d = &v["delta"];
                match d["type"].as_str().unwrap() {
                    "text_delta" => {
                        assert_eq!(b.kind, "text");
                        b.text.push_str(d["text"].as_str().unwrap());
                    }
                    "input_json_delta" => {
                        assert_eq!(b.kind, "tool_use");
                        b.input_json.push_str(d["partial_json"].as_str().unwrap());
                    }
                    // A thinking block's text goes in `text` (its kind tells them apart).
                    "thinking_delta" => {
                        assert_eq!(b.kind, "thinking");
                        b.text.push_str(d["thinking"].as_str().unwrap());
                    }
                    "signature_delta" => {
                        assert_eq!(b.kind, "thinking");
                        b.signature.push_str(d["signature"].as_str().unwrap());
                    }
                    other => panic!("unexpected delta {other}"),
                }
            }
            "content_block_stop" => {
                let index = v["index"].as_u64().unwrap() as usize;
                assert_eq!(Some(index), open, "stop the open block");
                m.blocks[index].stopped = true;
                open = None;
            }
            "message_delta" => {
                assert_eq!(e.kind, EventKind::Trailer);
                assert!(open.is_none(), "blocks stopped before message_delta");
                m.stop_reason = Some(v["delta"]["stop_reason"].as_str().unwrap().into());
                assert!(v["usage"]["output_tokens"].is_u64());
                m.usage = Some(v["usage"].clone());
            }
            "message_stop" => {
                assert_eq!(e.kind, EventKind::Trailer);
                assert!(m.stop_reason.is_some(), "message_delta before message_stop");
                m.stopped = true;
            }
            "ping" => {}
            other => panic!("unexpected event {other}"),
        }
    }
}

/// The events' bytes, concatenated.
pub fn concat(out: &[Emitted]) -> Vec<u8> {
    out.iter().flat_map(|e| e.bytes.to_vec()).collect()
}

/// The kinds, in order.
pub fn kinds(out: &[Emitted]) -> Vec<EventKind> {
    out.iter().map(|e| e.kind).collect()
}
