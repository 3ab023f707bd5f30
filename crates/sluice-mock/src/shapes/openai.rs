//! OpenAI Chat Completions, legacy Completions, Embeddings and Models.

use std::ops::Range;

use base64::Engine as _;
use serde_json::{json, Value};

use super::{Completion, EventSeq, Finish, SseItem};

fn finish_reason(c: &Completion) -> &'static str {
    match c.finish {
        Finish::Stop | Finish::StopSequence(_) => "stop",
        Finish::Length => "length",
        Finish::Tools => "tool_calls",
        Finish::ContentFilter => "content_filter",
    }
}

fn usage(c: &Completion) -> Value {
    // `prompt_tokens` includes the cached ones.
    let prompt = c.all_prompt_tokens();
    let mut u = json!({
        "prompt_tokens": prompt,
        "completion_tokens": c.output_tokens(),
        "total_tokens": prompt + c.output_tokens(),
    });
    if c.cache_read > 0 {
        u["prompt_tokens_details"] = json!({ "cached_tokens": c.cache_read });
    }
    if c.reasoning_tokens > 0 {
        u["completion_tokens_details"] = json!({ "reasoning_tokens": c.reasoning_tokens });
    }
    u
}

/// `POST /v1/chat/completions` with `stream: false`.
pub(crate) fn chat_body(c: &Completion) -> Value {
    let message = if c.tools {
        json!({
            "role": "assistant",
            "content": null,
            "refusal": null,
            "tool_calls": [{
                "id": c.tool_call_id(),
                "type": "function",
                "function": { "name": c.tool_name(), "arguments": c.tool_args() },
            }],
        })
    } else {
        json!({ "role": "assistant", "content": c.text(), "refusal": null })
    };
    let mut message = message;
    if let Some(t) = &c.thought {
        // vLLM's and DeepSeek's field (OpenAI shows no reasoning text).
        message["reasoning_content"] = json!(t.text);
    }
    json!({
        "id": format!("chatcmpl-{}", c.id()),
        "object": "chat.completion",
        "created": c.created(),
        "model": c.model,
        "system_fingerprint": "fp_mock",
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(c),
        }],
        "usage": usage(c),
    })
}

/// `POST /v1/chat/completions` with `stream: true`: a role chunk, one chunk per token (or per
/// tool-argument piece), a finish chunk, the usage chunk when `stream_options.include_usage`,
/// then `[DONE]`.
pub(crate) struct ChatStream {
    pub(crate) c: Completion,
    pub(crate) include_usage: bool,
}

impl ChatStream {
    fn body_events(&self) -> usize {
        if self.c.tools {
            self.c.tool_arg_pieces()
        } else {
            self.c.n_tokens as usize
        }
    }

    fn chunk(&self, choices: Value, usage: Option<Value>) -> String {
        let mut v = json!({
            "id": format!("chatcmpl-{}", self.c.id()),
            "object": "chat.completion.chunk",
            "created": self.c.created(),
            "model": self.c.model,
            "system_fingerprint": "fp_mock",
            "choices": choices,
        });
        if self.include_usage {
            v["usage"] = usage.unwrap_or(Value::Null);
        }
        v.to_string()
    }

    fn delta(&self, delta: Value, finish: Option<&str>) -> String {
        self.chunk(
            json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }]),
            None,
        )
    }
}

impl EventSeq for ChatStream {
    fn len(&self) -> usize {
        // role (+ reasoning) + body + finish (+ usage) + [DONE]
        1 + self.thought_events() + self.body_events() + 1 + usize::from(self.include_usage) + 1
    }

    fn event(&self, i: usize) -> SseItem {
        let body = self.body_events();
        let th = self.thought_events();
        if i >= 1 && i <= th {
            let text = self.c.thought.as_ref().map_or("", |t| t.text.as_str());
            return (
                None,
                self.delta(json!({ "content": null, "reasoning_content": text }), None),
            );
        }
        let i = if i == 0 { 0 } else { i - th };
        let data = if i == 0 {
            if self.c.tools {
                self.delta(
                    json!({
                        "role": "assistant", "content": null, "refusal": null,
                        "tool_calls": [{
                            "index": 0, "id": self.c.tool_call_id(), "type": "function",
                            "function": { "name": self.c.tool_name(), "arguments": "" },
                        }],
                    }),
                    None,
                )
            } else {
                self.delta(
                    json!({ "role": "assistant", "content": "", "refusal": null }),
                    None,
                )
            }
        } else if i <= body {
            if self.c.tools {
                self.delta(
                    json!({ "tool_calls": [{
                        "index": 0,
                        "function": { "arguments": self.c.tool_arg_piece(i - 1) },
                    }]}),
                    None,
                )
            } else {
                self.delta(json!({ "content": self.c.token(i as u32 - 1) }), None)
            }
        } else if i == body + 1 {
            self.delta(json!({}), Some(finish_reason(&self.c)))
        } else if self.include_usage && i == body + 2 {
            self.chunk(json!([]), Some(usage(&self.c)))
        } else {
            "[DONE]".to_string()
        };
        (None, data)
    }

    fn content(&self) -> Range<usize> {
        let start = 1 + self.thought_events();
        start..start + self.body_events()
    }
}

impl ChatStream {
    /// One `reasoning_content` chunk after the role chunk when the answer has a thought.
    fn thought_events(&self) -> usize {
        usize::from(self.c.thought.is_some())
    }
}

/// `POST /v1/completions` with `stream: false`.
pub(crate) fn completions_body(c: &Completion) -> Value {
    json!({
        "id": format!("cmpl-{}", c.id()),
        "object": "text_completion",
        "created": c.created(),
        "model": c.model,
        "system_fingerprint": "fp_mock",
        "choices": [{
            "text": c.text(), "index": 0, "logprobs": null, "finish_reason": finish_reason(c),
        }],
        "usage": usage(c),
    })
}

/// `POST /v1/completions` with `stream: true`: one chunk per token (the last one carries the
/// finish reason), the usage chunk when asked for, then `[DONE]`.
pub(crate) struct CompletionsStream {
    pub(crate) c: Completion,
    pub(crate) include_usage: bool,
}

impl EventSeq for CompletionsStream {
    fn len(&self) -> usize {
        self.c.n_tokens as usize + 1 + usize::from(self.include_usage) + 1
    }

    fn event(&self, i: usize) -> SseItem {
        let n = self.c.n_tokens as usize;
        let base = |choices: Value, usage: Value| {
            let mut v = json!({
                "id": format!("cmpl-{}", self.c.id()),
                "object": "text_completion",
                "created": self.c.created(),
                "model": self.c.model,
                "system_fingerprint": "fp_mock",
                "choices": choices,
            });
            if self.include_usage {
                v["usage"] = usage;
            }
            v.to_string()
        };
        let data = if i < n {
            base(
                json!([{ "text": self.c.token(i as u32), "index": 0, "logprobs": null,
                         "finish_reason": null }]),
                Value::Null,
            )
        } else if i == n {
            base(
                json!([{ "text": "", "index": 0, "logprobs": null,
                         "finish_reason": finish_reason(&self.c) }]),
                Value::Null,
            )
        } else if self.include_usage && i == n + 1 {
            base(json!([]), usage(&self.c))
        } else {
            "[DONE]".to_string()
        };
        (None, data)
    }

    fn content(&self) -> Range<usize> {
        0..self.c.n_tokens as usize
    }
}

/// Default embedding width when the request does not set `dimensions`.
const DEFAULT_DIMENSIONS: u64 = 16;

/// `POST /v1/embeddings`. Vectors are deterministic per input and unit length; `base64`
/// encoding (the official SDK's default on the wire) is little-endian f32, as OpenAI sends it.
pub(crate) fn embeddings_body(model: &str, req: &Value) -> Result<Value, String> {
    let inputs: Vec<String> = match req.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if !a.is_empty() => a.iter().map(|v| v.to_string()).collect(),
        _ => return Err("`input` must be a string or a non-empty array".into()),
    };
    let dims = match req.get("dimensions") {
        None | Some(Value::Null) => DEFAULT_DIMENSIONS,
        Some(v) => v
            .as_u64()
            .filter(|d| (1..=8192).contains(d))
            .ok_or("`dimensions` must be an integer from 1 to 8192")?,
    };
    let base64 = match req.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => return Err(format!("unknown encoding_format `{other}`")),
    };
    let mut prompt_tokens = 0;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, input)| {
            prompt_tokens += (input.len() / 4).max(1);
            let v = vector(input.as_bytes(), dims as usize);
            let embedding = if base64 {
                let raw: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(raw))
            } else {
                json!(v)
            };
            json!({ "object": "embedding", "index": index, "embedding": embedding })
        })
        .collect();
    Ok(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": { "prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens },
    }))
}

fn vector(seed: &[u8], dims: usize) -> Vec<f32> {
    let mut x = super::fnv1a(seed) | 1;
    let mut v: Vec<f32> = (0..dims)
        .map(|_| {
            // xorshift: deterministic and spread out; quality is irrelevant here.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect();
    let norm = v
        .iter()
        .map(|f| f * f)
        .sum::<f32>()
        .sqrt()
        .max(f32::EPSILON);
    v.iter_mut().for_each(|f| *f /= norm);
    v
}

/// The models the mock lists at `GET /v1/models`. It answers for any model name; these are
/// what a client discovering models sees.
pub(crate) const MODELS: &[&str] = &[
    "mock-gpt-4o",
    "mock-gpt-4o-mini",
    "mock-claude-sonnet",
    "mock-gemini-2.5-flash",
];

/// `GET /v1/models`.
pub(crate) fn models_body() -> Value {
    let data: Vec<Value> = MODELS
        .iter()
        .map(|id| json!({ "id": id, "object": "model", "created": 1_700_000_000u64, "owned_by": "sluice-mock" }))
        .collect();
    json!({ "object": "list", "data": data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::Behavior;

    #[test]
    fn chat_stream_shape() {
        let b = Behavior::default().with_spec("tokens=3").unwrap();
        let s = ChatStream {
            c: Completion::new("m", b"{}", None, &b),
            include_usage: true,
        };
        assert_eq!(s.len(), 7);
        let first: Value = serde_json::from_str(&s.event(0).1).unwrap();
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(first["usage"], Value::Null);
        let fin: Value = serde_json::from_str(&s.event(4).1).unwrap();
        assert_eq!(fin["choices"][0]["finish_reason"], "stop");
        let usage: Value = serde_json::from_str(&s.event(5).1).unwrap();
        assert_eq!(usage["usage"]["completion_tokens"], 3);
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(s.event(6).1, "[DONE]");
    }

    #[test]
    fn streamed_text_equals_non_streamed_text() {
        let b = Behavior::default().with_spec("tokens=9").unwrap();
        let c = Completion::new("m", b"{\"x\":1}", None, &b);
        let s = ChatStream {
            c: c.clone(),
            include_usage: false,
        };
        let mut text = String::new();
        for i in 0..s.len() - 1 {
            let v: Value = serde_json::from_str(&s.event(i).1).unwrap();
            if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
                text.push_str(t);
            }
        }
        assert_eq!(text, chat_body(&c)["choices"][0]["message"]["content"]);
    }

    #[test]
    fn embeddings_base64_decodes_to_the_float_vector() {
        let req = json!({ "input": ["a", "b"], "dimensions": 4, "encoding_format": "base64" });
        let v = embeddings_body("m", &req).unwrap();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(v["data"][1]["embedding"].as_str().unwrap())
            .unwrap();
        assert_eq!(raw.len(), 16);
        let floats =
            embeddings_body("m", &json!({ "input": ["a", "b"], "dimensions": 4 })).unwrap();
        let f0 = f32::from_le_bytes(raw[0..4].try_into().unwrap());
        assert_eq!(json!(f0), floats["data"][1]["embedding"][0]);
    }

    #[test]
    fn embeddings_reject_bad_input() {
        assert!(embeddings_body("m", &json!({})).is_err());
        assert!(embeddings_body("m", &json!({"input": "a", "dimensions": 0})).is_err());
        assert!(embeddings_body("m", &json!({"input": "a", "encoding_format": "hex"})).is_err());
    }
}
