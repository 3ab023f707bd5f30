//! The provider wire formats the mock speaks, generated lazily so that ten thousand slow streams
//! cost a few hundred bytes each, not their whole output.
//!
//! Content is a pure function of the request body: the same request gives the same bytes, so
//! tests can compare a stream relayed by the gateway with one fetched directly.

pub(crate) mod anthropic;
pub(crate) mod openai;
pub(crate) mod responses;

use bytes::Bytes;
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
}

/// Which error format a path speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    OpenAi,
    Anthropic,
}

/// A provider-shaped error body.
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
    };
    Bytes::from(v.to_string())
}

fn openai_error_type(status: u16) -> &'static str {
    match status {
        400 | 404 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_exceeded",
        _ => "server_error",
    }
}

fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 | 503 => "overloaded_error",
        _ => "api_error",
    }
}

/// Why the generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    Stop,
    Length,
    Tools,
}

/// What a request asked for, independent of the wire format.
#[derive(Clone, Debug)]
pub(crate) struct Completion {
    pub(crate) model: String,
    seed: u64,
    pub(crate) n_tokens: u32,
    pub(crate) finish: Finish,
    pub(crate) prompt_tokens: u32,
    token_bytes: u32,
    big_event: Option<u64>,
    body_bytes: u64,
    pub(crate) tools: bool,
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
        Self::with_seed(model, fnv1a(body), body.len(), max_tokens, b)
    }

    /// `seed` fixes the content (see [`request_seed`]); `prompt_len` (bytes) sizes the prompt's
    /// token count.
    pub(crate) fn with_seed(
        model: &str,
        seed: u64,
        prompt_len: usize,
        max_tokens: Option<u64>,
        b: &Behavior,
    ) -> Self {
        let mut n_tokens = b.tokens;
        let mut finish = if b.tools { Finish::Tools } else { Finish::Stop };
        if let Some(max) = max_tokens {
            if u64::from(n_tokens) > max {
                n_tokens = max as u32;
                finish = Finish::Length;
            }
        }
        Completion {
            model: model.to_string(),
            seed,
            n_tokens,
            finish,
            prompt_tokens: (prompt_len / 4).max(1) as u32,
            token_bytes: b.token_bytes,
            big_event: b.big_event,
            body_bytes: b.body_bytes,
            tools: b.tools,
        }
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

    /// The index of the token that carries `big_event`'s bytes.
    fn big_index(&self) -> Option<u32> {
        self.big_event.map(|_| self.n_tokens / 2)
    }

    /// The `i`-th token's text.
    pub(crate) fn token(&self, i: u32) -> String {
        let word = WORDS
            [((self.seed >> 7).wrapping_add(u64::from(i) * 7919) % WORDS.len() as u64) as usize];
        let mut t = if i == 0 {
            word.to_string()
        } else {
            format!(" {word}")
        };
        let want = match (self.big_index(), self.big_event) {
            (Some(bi), Some(big)) if bi == i => big as usize,
            _ => self.token_bytes as usize,
        };
        if want > 0 {
            // Padding with a letter keeps the text JSON-safe and the arithmetic exact.
            t.truncate(want);
            t.extend(std::iter::repeat_n('x', want - t.len()));
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

    pub(crate) fn tool_call_id(&self) -> String {
        format!("call_{:016x}", self.seed.rotate_left(17))
    }

    pub(crate) const TOOL_NAME: &'static str = "search";

    pub(crate) fn completion_tokens(&self) -> u32 {
        self.n_tokens
    }
}

/// A hash of what the request asks for, ignoring how the answer is delivered (`stream`,
/// `stream_options`): the same prompt gives the same text streamed or not. Walks the parsed
/// JSON instead of re-serialising it, to keep small requests cheap.
pub(crate) fn request_seed(req: &Value) -> u64 {
    fn mix(h: &mut u64, bytes: &[u8]) {
        for &b in bytes {
            *h ^= u64::from(b);
            *h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn walk(v: &Value, h: &mut u64, top: bool) {
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
                    walk(x, h, false);
                }
            }
            Value::Object(o) => {
                mix(h, b"{");
                for (k, x) in o {
                    if top && (k == "stream" || k == "stream_options") {
                        continue;
                    }
                    mix(h, k.as_bytes());
                    walk(x, h, false);
                }
            }
        }
    }
    let mut h = 0xcbf2_9ce4_8422_2325;
    walk(req, &mut h, true);
    h
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

/// Reads an unsigned integer field.
pub(crate) fn u64_field(v: &Value, name: &str) -> Option<u64> {
    v.get(name).and_then(Value::as_u64)
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
        assert_eq!(request_seed(&a), request_seed(&b));
        assert_ne!(request_seed(&b), request_seed(&c));
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

    #[test]
    fn body_bytes_pads_the_text() {
        let b = Behavior::default().with_spec("body_bytes=100000").unwrap();
        assert_eq!(Completion::new("m", b"{}", None, &b).text().len(), 100_000);
    }
}
