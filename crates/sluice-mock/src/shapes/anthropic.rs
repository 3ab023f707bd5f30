//! Anthropic Messages (`POST /v1/messages`).

use std::ops::Range;

use serde_json::{json, Value};

use super::{Completion, EventSeq, Finish, SseItem};

fn stop_reason(c: &Completion) -> &'static str {
    match c.finish {
        Finish::Stop => "end_turn",
        Finish::StopSequence(_) => "stop_sequence",
        Finish::Length => "max_tokens",
        Finish::Tools => "tool_use",
        Finish::ContentFilter => "refusal",
    }
}

fn stop_sequence(c: &Completion) -> Value {
    match &c.finish {
        Finish::StopSequence(s) => json!(s),
        _ => Value::Null,
    }
}

/// `usage` after `output_tokens`; thinking tokens apart (`output_tokens_details`, new in
/// 2026) once the answer has any, at the end.
fn usage(c: &Completion, output_tokens: u32, done: bool) -> Value {
    let mut u = json!({ "input_tokens": c.prompt_tokens, "output_tokens": output_tokens });
    // Apart from `input_tokens`, which excludes them.
    if c.cache_read > 0 || c.cache_write > 0 {
        u["cache_read_input_tokens"] = json!(c.cache_read);
        u["cache_creation_input_tokens"] = json!(c.cache_write);
    }
    if done && c.reasoning_tokens > 0 {
        u["output_tokens_details"] = json!({ "thinking_tokens": c.reasoning_tokens });
    }
    u
}

/// `message_delta`'s usage: the cumulative output counts only.
fn delta_usage(c: &Completion) -> Value {
    let mut u = usage(c, c.output_tokens(), true);
    if let Some(o) = u.as_object_mut() {
        o.remove("input_tokens");
    }
    u
}

fn message(c: &Completion, content: Value, done: bool, output_tokens: u32) -> Value {
    json!({
        "id": format!("msg_{}", c.id()),
        "type": "message",
        "role": "assistant",
        "model": c.model,
        "content": content,
        "stop_reason": if done { json!(stop_reason(c)) } else { Value::Null },
        "stop_sequence": if done { stop_sequence(c) } else { Value::Null },
        "usage": usage(c, output_tokens, done),
    })
}

fn tool_block(c: &Completion, input: Value) -> Value {
    json!({ "type": "tool_use", "id": format!("toolu_{}", c.id()), "name": c.tool_name(), "input": input })
}

/// The non-streaming message (a signed thinking block first when the request asked for
/// thinking).
pub(crate) fn message_body(c: &Completion) -> Value {
    let mut content = Vec::with_capacity(2);
    if let Some(t) = &c.thought {
        content.push(json!({ "type": "thinking", "thinking": t.text, "signature": t.signature }));
    }
    content.push(if c.tools {
        tool_block(c, c.tool_input())
    } else {
        json!({ "type": "text", "text": c.text() })
    });
    message(c, Value::Array(content), true, c.output_tokens())
}

/// A thought's events (after `message_start`): its block's start, the text in two
/// `thinking_delta`s, the `signature_delta` just before its stop (as the real API sends it).
const THOUGHT_EVENTS: usize = 5;

fn thought_event(c: &Completion, i: usize) -> SseItem {
    let t = c
        .thought
        .as_ref()
        .map_or(("", ""), |t| (&t.text, &t.signature));
    let half = t.0.find(' ').map_or(t.0.len(), |at| at + 1);
    let (name, v) = match i {
        0 => (
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0,
                    "content_block": { "type": "thinking", "thinking": "", "signature": "" } }),
        ),
        1 | 2 => {
            let text = if i == 1 { &t.0[..half] } else { &t.0[half..] };
            (
                "content_block_delta",
                json!({ "type": "content_block_delta", "index": 0,
                        "delta": { "type": "thinking_delta", "thinking": text } }),
            )
        }
        3 => (
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 0,
                    "delta": { "type": "signature_delta", "signature": t.1 } }),
        ),
        _ => (
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": 0 }),
        ),
    };
    (Some(name), v.to_string())
}

/// `POST /v1/messages/count_tokens`.
pub(crate) fn count_tokens_body(input_tokens: u32) -> Value {
    json!({ "input_tokens": input_tokens })
}

/// The streaming message: message_start, content_block_start, ping, content_block_delta per
/// token (or per tool-input piece), content_block_stop, message_delta with usage, message_stop.
pub(crate) struct MessageStream {
    pub(crate) c: Completion,
}

impl MessageStream {
    /// Events of the thought, before the answer's block.
    fn thought_events(&self) -> usize {
        if self.c.thought.is_some() {
            THOUGHT_EVENTS
        } else {
            0
        }
    }

    fn body_events(&self) -> usize {
        if self.c.tools {
            self.c.tool_arg_pieces()
        } else {
            self.c.n_tokens as usize
        }
    }
}

impl EventSeq for MessageStream {
    fn len(&self) -> usize {
        self.thought_events() + self.body_events() + 6
    }

    fn event(&self, i: usize) -> SseItem {
        let c = &self.c;
        let body = self.body_events();
        let th = self.thought_events();
        if i >= 1 && i <= th {
            return thought_event(c, i - 1);
        }
        // The answer's block comes after the thought's.
        let index = u32::from(th > 0);
        let i = if i == 0 { 0 } else { i - th };
        match i {
            0 => (
                Some("message_start"),
                json!({ "type": "message_start", "message": message(c, json!([]), false, 1) })
                    .to_string(),
            ),
            1 => {
                let block = if c.tools {
                    tool_block(c, json!({}))
                } else {
                    json!({ "type": "text", "text": "" })
                };
                (
                    Some("content_block_start"),
                    json!({ "type": "content_block_start", "index": index, "content_block": block })
                        .to_string(),
                )
            }
            2 => (Some("ping"), json!({ "type": "ping" }).to_string()),
            i if i < 3 + body => {
                let delta = if c.tools {
                    json!({ "type": "input_json_delta", "partial_json": c.tool_arg_piece(i - 3) })
                } else {
                    json!({ "type": "text_delta", "text": c.token((i - 3) as u32) })
                };
                (
                    Some("content_block_delta"),
                    json!({ "type": "content_block_delta", "index": index, "delta": delta })
                        .to_string(),
                )
            }
            i if i == 3 + body => (
                Some("content_block_stop"),
                json!({ "type": "content_block_stop", "index": index }).to_string(),
            ),
            i if i == 4 + body => (
                Some("message_delta"),
                json!({
                    "type": "message_delta",
                    "delta": { "stop_reason": stop_reason(c), "stop_sequence": stop_sequence(c) },
                    "usage": delta_usage(c),
                })
                .to_string(),
            ),
            _ => (
                Some("message_stop"),
                json!({ "type": "message_stop" }).to_string(),
            ),
        }
    }

    fn content(&self) -> Range<usize> {
        let start = 3 + self.thought_events();
        start..start + self.body_events()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::Behavior;

    #[test]
    fn event_sequence() {
        let b = Behavior::default().with_spec("tokens=2").unwrap();
        let s = MessageStream {
            c: Completion::new("claude", b"{}", None, &b),
        };
        let names: Vec<_> = (0..s.len()).map(|i| s.event(i).0.unwrap()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let delta: Value = serde_json::from_str(&s.event(6).1).unwrap();
        assert_eq!(delta["usage"]["output_tokens"], 2);
    }

    #[test]
    fn tool_input_pieces_join_to_the_input() {
        let b = Behavior::default().with_spec("tools, tokens=3").unwrap();
        let s = MessageStream {
            c: Completion::new("claude", b"{}", None, &b),
        };
        let joined: String = (3..s.len() - 3)
            .map(|i| {
                let v: Value = serde_json::from_str(&s.event(i).1).unwrap();
                v["delta"]["partial_json"].as_str().unwrap().to_string()
            })
            .collect();
        let input: Value = serde_json::from_str(&joined).unwrap();
        assert_eq!(message_body(&s.c)["content"][0]["input"], input);
        assert_eq!(message_body(&s.c)["stop_reason"], "tool_use");
    }
}
