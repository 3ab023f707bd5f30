//! The provider wire formats the mock speaks, generated lazily so that ten thousand slow streams
//! cost a few hundred bytes each, not their whole output.
//!
//! Content is a pure function of the request body: the same request gives the same bytes, so
//! tests can compare a stream relayed by the gateway with one fetched directly.

pub(crate) mod anthropic;
pub(crate) mod bedrock;
pub(crate) mod errors;
pub(crate) mod gemini;
pub(crate) mod openai;
pub(crate) mod request;
pub(crate) mod responses;
pub(crate) mod thinking;

use std::ops::Range;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};

use crate::knobs::Behavior;

/// Event type (the SSE `event:` field) and data of one event.
pub(crate) type SseItem = (Option<&'static str>, String);

/// A stream's events, produced one at a time by index.
pub(crate) trait EventSeq: Send + Sync {
    /// How many events the stream has.
    fn len(&self) -> usize;
    /// The `i`-th event, `i < len()`.
    fn event(&self, i: usize) -> SseItem;
    /// The indices of the content events (text deltas, tool-call pieces): `stream_error_after`
    /// counts these, and cuts the stream at most at the end of this range.
    fn content(&self) -> Range<usize>;
}

/// A stream cut after some events and ended with one more (an in-stream error).
pub(crate) struct CutWith {
    pub(crate) inner: Box<dyn EventSeq>,
    /// How many of `inner`'s events are sent before `last`.
    pub(crate) at: usize,
    pub(crate) last: SseItem,
}

impl EventSeq for CutWith {
    fn len(&self) -> usize {
        self.at + 1
    }

    fn event(&self, i: usize) -> SseItem {
        if i < self.at {
            self.inner.event(i)
        } else {
            self.last.clone()
        }
    }

    fn content(&self) -> Range<usize> {
        let c = self.inner.content();
        c.start.min(self.at)..c.end.min(self.at)
    }
}

/// Which provider API a path speaks: it decides the shape of bodies, streams and errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// OpenAI: Chat Completions, Completions, Embeddings, Models, Responses.
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages (and `count_tokens`).
    Anthropic,
    /// Google Gemini (Developer API: `generateContent`, `streamGenerateContent`, ...; Vertex
    /// AI's Gemini paths speak it too).
    Gemini,
    /// AWS Bedrock Runtime (Converse, ConverseStream, InvokeModel): `{"message"}` errors typed
    /// by `x-amzn-ErrorType`, streams in event-stream framing.
    Bedrock,
}

/// A provider-shaped error body for a generic failure (bad input, unknown path, the `status`
/// knob). `code` is OpenAI's `code`; Gemini carries it as an `ErrorInfo.reason`.
pub(crate) fn error_body(api: Api, status: u16, message: &str, code: Option<&str>) -> Bytes {
    let v = match api {
        Api::OpenAi => json!({
            "error": {
                "message": message,
                "type": openai_error_type(status),
                "param": null,
                "code": code,
            }
        }),
        Api::Anthropic => json!({
            "type": "error",
            "error": { "type": anthropic_error_type(status), "message": message }
        }),
        Api::Gemini => {
            let mut details = Vec::new();
            if let Some(code) = code {
                details.push(json!({
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": code,
                    "domain": "sluice-mock",
                }));
            }
            gemini_error(status, message, details)
        }
        Api::Bedrock => json!({ "message": message }),
    };
    Bytes::from(v.to_string())
}

/// Headers an API's errors carry besides the body: Bedrock's `x-amzn-ErrorType`.
pub(crate) fn error_headers(api: Api, status: u16) -> Vec<(&'static str, String)> {
    match api {
        Api::Bedrock => vec![(
            "x-amzn-errortype",
            bedrock::error_type_header(bedrock::exception_for_status(status)),
        )],
        _ => Vec::new(),
    }
}

/// `{"error":{"code","message","status"[,"details"]}}`, Google's error shape.
pub(crate) fn gemini_error(status: u16, message: &str, details: Vec<Value>) -> Value {
    let mut e = json!({
        "code": status,
        "message": message,
        "status": gemini_status(status),
    });
    if !details.is_empty() {
        e["details"] = Value::Array(details);
    }
    json!({ "error": e })
}

/// The google.rpc.Code name Google's HTTP mapping gives a status.
pub(crate) fn gemini_status(status: u16) -> &'static str {
    match status {
        400 | 413 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        405 | 501 => "UNIMPLEMENTED",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

fn openai_error_type(status: u16) -> &'static str {
    match status {
        400 | 404 | 405 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_exceeded",
        _ => "server_error",
    }
}

fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        400 | 405 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 | 503 => "overloaded_error",
        _ => "api_error",
    }
}

/// Why the generation stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    Stop,
    Length,
    Tools,
    /// A stop sequence of the request matched; the text ends just before it.
    StopSequence(String),
    /// The output was filtered (`stream_error_after=N:content_filter`).
    ContentFilter,
}

/// What a request asks the generator for, read from its body by [`request`].
#[derive(Debug, Default)]
pub(crate) struct Ask {
    pub(crate) model: String,
    /// Fixes the content (see [`request_seed`]).
    pub(crate) seed: u64,
    pub(crate) prompt_tokens: u32,
    /// The request's output cap (`max_tokens`, `maxOutputTokens`, ...).
    pub(crate) max_tokens: Option<u64>,
    pub(crate) stop: Vec<String>,
    /// The text of a trailing assistant message to continue from.
    pub(crate) prefill: Option<String>,
    /// The function to call with the `tools` knob: the forced or first declared one.
    pub(crate) tool_name: Option<String>,
}

/// How far the stop-sequence scan reads; beyond it, stop sequences are not looked for (the
/// scan runs before the first byte is sent, so it must stay cheap for huge outputs).
const STOP_SCAN_LIMIT: usize = 16 << 20;

/// What a request asked for, independent of the wire format.
#[derive(Clone, Debug)]
pub(crate) struct Completion {
    pub(crate) model: String,
    seed: u64,
    /// The underlying token that output token 0 comes from (a prefill skips tokens), and how
    /// many of its bytes the prefill already gave.
    first: u32,
    offset: usize,
    /// Output tokens (after a prefill, under the caps).
    pub(crate) n_tokens: u32,
    /// Output token `n_tokens - 1` ends after this many bytes (a stop sequence inside it).
    cut: Option<usize>,
    /// Underlying tokens of the whole answer (the `tokens` knob).
    total: u32,
    pub(crate) finish: Finish,
    pub(crate) prompt_tokens: u32,
    pub(crate) reasoning_tokens: u32,
    /// The `cache_read_tokens` and `cache_write_tokens` knobs.
    pub(crate) cache_read: u32,
    pub(crate) cache_write: u32,
    token_bytes: u32,
    big_event: Option<u64>,
    body_bytes: u64,
    pub(crate) tools: bool,
    tool_name: String,
    /// The reasoning the answer starts with, when the request asked to see it.
    pub(crate) thought: Option<thinking::Thought>,
    /// The `say` knob: the answer's text, cut into tokens of `token_bytes` (default 4).
    say: Option<String>,
}

const WORDS: &[&str] = &[
    "the", "river", "flows", "through", "a", "narrow", "gate", "and", "every", "token", "arrives",
    "on", "time", "while", "short", "calls", "never", "wait", "behind", "long", "streams", "of",
    "quiet", "light", "under", "stone", "bridges", "where", "water", "keeps", "its", "pace",
];

impl Completion {
    /// `body` is the raw request body: its hash seeds the content. `max_tokens` caps the
    /// knob's token count, and then the finish reason is "length", as a real model reports it.
    #[cfg(test)]
    pub(crate) fn new(model: &str, body: &[u8], max_tokens: Option<u64>, b: &Behavior) -> Self {
        let ask = Ask {
            model: model.to_string(),
            seed: fnv1a(body),
            prompt_tokens: (body.len() / 4).max(1) as u32,
            max_tokens,
            ..Ask::default()
        };
        Self::build(ask, b).0
    }

    /// The answer to `ask` under the knobs `b`. The second value says, when `ask` carried a
    /// prefill, whether the answer continued from it (the prefill was a prefix of the whole
    /// answer) or ignored it.
    pub(crate) fn build(ask: Ask, b: &Behavior) -> (Self, Option<bool>) {
        let mut c = Completion {
            model: ask.model,
            seed: ask.seed,
            first: 0,
            offset: 0,
            n_tokens: b.tokens,
            cut: None,
            total: b.tokens,
            finish: if b.tools { Finish::Tools } else { Finish::Stop },
            prompt_tokens: ask.prompt_tokens,
            reasoning_tokens: b.reasoning_tokens,
            cache_read: b.cache_read_tokens,
            cache_write: b.cache_write_tokens,
            token_bytes: b.token_bytes,
            big_event: b.big_event,
            body_bytes: b.body_bytes,
            tools: b.tools,
            tool_name: ask
                .tool_name
                .unwrap_or_else(|| Completion::TOOL_NAME.to_string()),
            thought: None,
            say: b.say.clone(),
        };
        if let Some(say) = &c.say {
            let k = Completion::say_token_bytes(b.token_bytes);
            c.total = say.len().div_ceil(k) as u32;
            c.n_tokens = c.total;
        }
        let continued = ask.prefill.as_deref().map(|p| {
            let at = if c.tools { None } else { c.locate(p) };
            if let Some((first, offset)) = at {
                c.first = first;
                c.offset = offset;
                c.n_tokens = c.total - first;
            }
            at.is_some()
        });
        if let Some(max) = ask.max_tokens {
            if u64::from(c.n_tokens) > max {
                c.n_tokens = max as u32;
                c.finish = Finish::Length;
            }
        }
        if !c.tools {
            c.apply_stop(&ask.stop);
        }
        (c, continued)
    }

    /// Where `prefill` ends in the whole answer: (underlying token, bytes of it consumed), or
    /// `None` when the prefill is not a prefix of the answer.
    fn locate(&self, prefill: &str) -> Option<(u32, usize)> {
        let p = prefill.as_bytes();
        let mut pos = 0;
        for u in 0..self.total {
            if pos == p.len() {
                return Some((u, 0));
            }
            let t = self.raw_token(u);
            let t = t.as_bytes();
            let rest = &p[pos..];
            if rest.len() < t.len() {
                return t.starts_with(rest).then_some((u, rest.len()));
            }
            if !rest.starts_with(t) {
                return None;
            }
            pos += t.len();
        }
        (pos == p.len()).then_some((self.total, 0))
    }

    /// Cuts the output before the earliest match of any of `stops`.
    fn apply_stop(&mut self, stops: &[String]) {
        let stops: Vec<&str> = stops
            .iter()
            .map(String::as_str)
            .filter(|s| !s.is_empty())
            .collect();
        let Some(longest) = stops.iter().map(|s| s.len()).max() else {
            return;
        };
        let mut text = String::new();
        let mut found = None;
        for i in 0..self.n_tokens {
            if text.len() > STOP_SCAN_LIMIT {
                break;
            }
            let start = text.len();
            text.push_str(&self.token(i));
            // Earlier windows had no match, so any match here ends in this token.
            let from = floor_boundary(&text, start.saturating_sub(longest - 1));
            let hit = stops
                .iter()
                .filter_map(|s| text[from..].find(s).map(|at| (from + at, *s)))
                .min_by_key(|(at, _)| *at);
            if let Some(hit) = hit {
                found = Some(hit);
                break;
            }
        }
        let Some((at, stop)) = found else {
            return;
        };
        // Find the token the match starts in and end the output just before the match.
        let mut start = 0;
        for i in 0..self.n_tokens {
            let len = self.token(i).len();
            if at < start + len {
                if at == start {
                    self.n_tokens = i;
                } else {
                    self.n_tokens = i + 1;
                    self.cut = Some(at - start);
                }
                break;
            }
            start += len;
        }
        self.finish = Finish::StopSequence(stop.to_string());
    }

    /// `stream_error_after=N:content_filter`: the output stops after `n` content tokens,
    /// filtered.
    pub(crate) fn filter_after(&mut self, n: u32) {
        if n < self.n_tokens {
            self.n_tokens = n;
            self.cut = None;
        }
        self.finish = Finish::ContentFilter;
    }

    /// The answer starts with a thought (the request asked to see reasoning): its words count
    /// as reasoning tokens, unless the `reasoning_tokens` knob says more.
    pub(crate) fn think(&mut self, kind: request::Kind) {
        self.reasoning_tokens = self.reasoning_tokens.max(thinking::THOUGHT_WORDS);
        self.thought = Some(thinking::thought(kind, self.seed));
    }

    /// A short id suffix, stable for a given request body.
    pub(crate) fn id(&self) -> String {
        format!("{:016x}", self.seed)
    }

    /// A stable creation timestamp (real APIs send the time; the mock sends a fixed one so
    /// that bytes compare equal).
    pub(crate) fn created(&self) -> u64 {
        1_700_000_000 + self.seed % 1_000_000
    }

    /// The underlying token that carries `big_event`'s bytes.
    fn big_index(&self) -> Option<u32> {
        self.big_event.map(|_| self.total / 2)
    }

    /// Bytes a `say` token: `token_bytes`, else 4.
    fn say_token_bytes(token_bytes: u32) -> usize {
        if token_bytes == 0 {
            4
        } else {
            token_bytes as usize
        }
    }

    /// The `u`-th token of the whole answer, before any prefill or cut.
    fn raw_token(&self, u: u32) -> String {
        if let Some(say) = &self.say {
            // ASCII (checked by the knob): any byte cut is a character boundary.
            let k = Completion::say_token_bytes(self.token_bytes);
            let from = (u as usize * k).min(say.len());
            return say[from..(from + k).min(say.len())].to_string();
        }
        let word = WORDS
            [((self.seed >> 7).wrapping_add(u64::from(u) * 7919) % WORDS.len() as u64) as usize];
        let mut t = if u == 0 {
            word.to_string()
        } else {
            format!(" {word}")
        };
        let want = match (self.big_index(), self.big_event) {
            (Some(bi), Some(big)) if bi == u => big as usize,
            _ => self.token_bytes as usize,
        };
        if want > 0 {
            // Padding with a letter keeps the text JSON-safe and the arithmetic exact.
            t.truncate(want);
            t.extend(std::iter::repeat_n('x', want - t.len()));
        }
        t
    }

    /// The `i`-th output token's text.
    pub(crate) fn token(&self, i: u32) -> String {
        let mut t = self.raw_token(self.first + i);
        if i == 0 && self.offset > 0 {
            t.drain(..self.offset);
        }
        if let Some(cut) = self.cut {
            if i + 1 == self.n_tokens {
                t.truncate(cut);
            }
        }
        t
    }

    /// All tokens, padded to `body_bytes` for non-streaming responses.
    pub(crate) fn text(&self) -> String {
        let mut s: String = (0..self.n_tokens).map(|i| self.token(i)).collect();
        let want = self.body_bytes as usize;
        if s.len() < want {
            s.extend(std::iter::repeat_n('x', want - s.len()));
        }
        s
    }

    /// The pieces of a tool call's JSON arguments: an opening, one per token, a closing.
    pub(crate) fn tool_arg_pieces(&self) -> usize {
        self.n_tokens as usize + 2
    }

    /// The `i`-th piece of the tool call's arguments.
    pub(crate) fn tool_arg_piece(&self, i: usize) -> String {
        match i {
            0 => "{\"query\": \"".to_string(),
            i if i == self.tool_arg_pieces() - 1 => "\"}".to_string(),
            i => self.token(i as u32 - 1),
        }
    }

    /// The whole arguments string.
    pub(crate) fn tool_args(&self) -> String {
        (0..self.tool_arg_pieces())
            .map(|i| self.tool_arg_piece(i))
            .collect()
    }

    /// The arguments as a JSON object (Anthropic `input`, Gemini `args`).
    pub(crate) fn tool_input(&self) -> Value {
        serde_json::from_str(&self.tool_args()).unwrap_or(Value::Null)
    }

    pub(crate) fn tool_call_id(&self) -> String {
        format!("call_{:016x}", self.seed.rotate_left(17))
    }

    /// The function the `tools` knob calls when the request declares none.
    pub(crate) const TOOL_NAME: &'static str = "search";

    /// The function the `tools` knob calls.
    pub(crate) fn tool_name(&self) -> &str {
        &self.tool_name
    }

    /// Content tokens (text or tool arguments), without reasoning.
    pub(crate) fn completion_tokens(&self) -> u32 {
        self.n_tokens
    }

    /// Every output token: content plus reasoning (OpenAI `completion_tokens`, Anthropic
    /// `output_tokens`).
    pub(crate) fn output_tokens(&self) -> u32 {
        self.n_tokens.saturating_add(self.reasoning_tokens)
    }

    /// Every prompt token, the cache's reads and writes included (OpenAI `prompt_tokens`,
    /// Gemini `promptTokenCount`).
    pub(crate) fn all_prompt_tokens(&self) -> u32 {
        self.prompt_tokens
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Top-level fields that say how an answer is delivered or where it may end, not what it is:
/// the same conversation gives the same text streamed or not, and under any output cap or stop
/// sequence (they only truncate it, as they would a real model's). A continuation's flags are
/// left out too, so a request and its continuation agree on the answer.
const SEED_SKIPS: &[&str] = &[
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "stop",
    "stop_sequences",
    "continue_final_message",
    "add_generation_prompt",
];

/// The same inside Gemini's `generationConfig`.
const SEED_SKIPS_GENERATION_CONFIG: &[&str] = &[
    "maxOutputTokens",
    "max_output_tokens",
    "stopSequences",
    "stop_sequences",
];

/// A hash of what the request asks for, ignoring [`SEED_SKIPS`] (and
/// [`SEED_SKIPS_GENERATION_CONFIG`]); `extra` mixes in what the path says (Gemini's model).
/// Walks the parsed JSON instead of re-serialising it, to keep small requests cheap.
pub(crate) fn request_seed(req: &Value, extra: &str) -> u64 {
    fn mix(h: &mut u64, bytes: &[u8]) {
        for &b in bytes {
            *h ^= u64::from(b);
            *h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    #[derive(Clone, Copy, PartialEq)]
    enum At {
        Top,
        GenerationConfig,
        Inner,
    }
    fn walk(v: &Value, h: &mut u64, at: At) {
        match v {
            Value::Null => mix(h, b"n"),
            Value::Bool(b) => mix(h, if *b { b"t" } else { b"f" }),
            Value::Number(n) => mix(h, n.to_string().as_bytes()),
            Value::String(s) => {
                mix(h, b"\"");
                mix(h, s.as_bytes());
            }
            Value::Array(a) => {
                mix(h, b"[");
                for x in a {
                    walk(x, h, At::Inner);
                }
            }
            Value::Object(o) => {
                mix(h, b"{");
                for (k, x) in o {
                    let gen_config = k == "generationConfig" || k == "generation_config";
                    let skip = match at {
                        // A generationConfig holding only skipped fields is no config at all.
                        At::Top if gen_config => x.as_object().is_some_and(|g| {
                            g.keys()
                                .all(|k| SEED_SKIPS_GENERATION_CONFIG.contains(&k.as_str()))
                        }),
                        At::Top => SEED_SKIPS.contains(&k.as_str()),
                        At::GenerationConfig => SEED_SKIPS_GENERATION_CONFIG.contains(&k.as_str()),
                        At::Inner => false,
                    };
                    if skip {
                        continue;
                    }
                    mix(h, k.as_bytes());
                    let next = if at == At::Top && gen_config {
                        At::GenerationConfig
                    } else {
                        At::Inner
                    };
                    walk(x, h, next);
                }
            }
        }
    }
    let mut h = 0xcbf2_9ce4_8422_2325;
    mix(&mut h, extra.as_bytes());
    walk(req, &mut h, At::Top);
    h
}

/// The length of `v` serialised as compact JSON, without allocating it.
pub(crate) fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// FNV-1a: tiny, stable across platforms and releases (unlike `DefaultHasher`).
fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The `model` of a request body, and the body as JSON.
pub(crate) fn model_of(v: &Value) -> Option<&str> {
    v.get("model").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_ignores_delivery_fields() {
        let a: Value =
            serde_json::from_str(r#"{"model":"m","messages":[1],"stream":true}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"model":"m","messages":[1]}"#).unwrap();
        let c: Value = serde_json::from_str(r#"{"model":"m","messages":[2]}"#).unwrap();
        assert_eq!(request_seed(&a, ""), request_seed(&b, ""));
        assert_ne!(request_seed(&b, ""), request_seed(&c, ""));
        let capped: Value =
            serde_json::from_str(r#"{"model":"m","messages":[1],"max_tokens":3}"#).unwrap();
        assert_eq!(request_seed(&capped, ""), request_seed(&b, ""));
        assert_ne!(request_seed(&b, "x"), request_seed(&b, ""));
        let g1: Value = serde_json::from_str(
            r#"{"contents":[],"generationConfig":{"maxOutputTokens":3,"topK":1}}"#,
        )
        .unwrap();
        let g2: Value =
            serde_json::from_str(r#"{"contents":[],"generationConfig":{"topK":1}}"#).unwrap();
        assert_eq!(request_seed(&g1, "m"), request_seed(&g2, "m"));
        let g3: Value =
            serde_json::from_str(r#"{"contents":[],"generationConfig":{"maxOutputTokens":3}}"#)
                .unwrap();
        let g4: Value = serde_json::from_str(r#"{"contents":[]}"#).unwrap();
        assert_eq!(request_seed(&g3, "m"), request_seed(&g4, "m"));
    }

    #[test]
    fn content_is_a_function_of_the_body() {
        let b = Behavior::default();
        let a1 = Completion::new("m", b"{\"a\":1}", None, &b);
        let a2 = Completion::new("m", b"{\"a\":1}", None, &b);
        let c = Completion::new("m", b"{\"a\":2}", None, &b);
        assert_eq!(a1.text(), a2.text());
        assert_ne!(a1.id(), c.id());
    }

    #[test]
    fn token_bytes_and_big_event_size_tokens_exactly() {
        let b = Behavior::default()
            .with_spec("tokens=5, token_bytes=10, big_event=1000")
            .unwrap();
        let c = Completion::new("m", b"{}", None, &b);
        assert_eq!(c.token(0).len(), 10);
        assert_eq!(c.token(2).len(), 1000);
        assert_eq!(c.token(4).len(), 10);
    }

    #[test]
    fn max_tokens_caps_and_reports_length() {
        let b = Behavior::default().with_spec("tokens=50").unwrap();
        let c = Completion::new("m", b"{}", Some(3), &b);
        assert_eq!(c.n_tokens, 3);
        assert_eq!(c.finish, Finish::Length);
    }

    #[test]
    fn tool_args_are_valid_json() {
        let b = Behavior::default().with_spec("tools, tokens=4").unwrap();
        let c = Completion::new("m", b"{}", None, &b);
        let v: Value = serde_json::from_str(&c.tool_args()).unwrap();
        assert!(v["query"].as_str().unwrap().split(' ').count() == 4);
    }

    fn ask(prefill: Option<&str>, stop: &[&str], max: Option<u64>) -> Ask {
        Ask {
            model: "m".into(),
            seed: 42,
            prompt_tokens: 1,
            max_tokens: max,
            stop: stop.iter().map(|s| s.to_string()).collect(),
            prefill: prefill.map(str::to_string),
            tool_name: None,
        }
    }

    #[test]
    fn prefill_continues_byte_exact_at_any_cut() {
        let b = Behavior::default().with_spec("tokens=12").unwrap();
        let full = Completion::build(ask(None, &[], None), &b).0.text();
        for cut in 0..=full.len() {
            let (c, continued) = Completion::build(ask(Some(&full[..cut]), &[], None), &b);
            assert_eq!(continued, Some(true), "cut {cut}");
            assert_eq!(format!("{}{}", &full[..cut], c.text()), full, "cut {cut}");
            let pieces: String = (0..c.n_tokens).map(|i| c.token(i)).collect();
            assert_eq!(pieces, c.text());
        }
        let (c, continued) = Completion::build(ask(Some("not the answer"), &[], None), &b);
        assert_eq!(continued, Some(false));
        assert_eq!(c.text(), full);
        let (c, continued) = Completion::build(ask(Some(&format!("{full} more")), &[], None), &b);
        assert_eq!((continued, c.text()), (Some(false), full));
    }

    #[test]
    fn prefill_counts_only_new_tokens_and_max_tokens_caps_them() {
        let b = Behavior::default().with_spec("tokens=10").unwrap();
        let whole = Completion::build(ask(None, &[], None), &b).0;
        let prefix: String = (0..4).map(|i| whole.token(i)).collect();
        let (c, _) = Completion::build(ask(Some(&prefix), &[], None), &b);
        assert_eq!(c.completion_tokens(), 6);
        assert_eq!(c.finish, Finish::Stop);
        let (c, _) = Completion::build(ask(Some(&prefix), &[], Some(2)), &b);
        assert_eq!(c.completion_tokens(), 2);
        assert_eq!(c.finish, Finish::Length);
        assert_eq!(c.text(), whole.token(4) + &whole.token(5));
    }

    #[test]
    fn stop_sequences_cut_before_the_match() {
        let b = Behavior::default().with_spec("tokens=30").unwrap();
        let full = Completion::build(ask(None, &[], None), &b).0.text();
        // A stop that starts mid-token and one that starts on a token boundary.
        let mid = &full[full.len() / 2..full.len() / 2 + 3];
        for stop in [mid, &full[full.find(' ').unwrap()..][..4]] {
            let (c, _) = Completion::build(ask(None, &[stop, "zzz"], None), &b);
            let at = full.find(stop).unwrap();
            assert_eq!(c.text(), &full[..at], "stop {stop:?}");
            assert_eq!(c.finish, Finish::StopSequence(stop.to_string()));
            let pieces: String = (0..c.n_tokens).map(|i| c.token(i)).collect();
            assert_eq!(pieces, c.text());
        }
        let (c, _) = Completion::build(ask(None, &["zzz"], None), &b);
        assert_eq!((c.text(), c.finish), (full, Finish::Stop));
    }

    #[test]
    fn body_bytes_pads_the_text() {
        let b = Behavior::default().with_spec("body_bytes=100000").unwrap();
        assert_eq!(Completion::new("m", b"{}", None, &b).text().len(), 100_000);
    }
}
