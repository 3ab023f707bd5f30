//! OpenAI Responses (`POST /v1/responses`).

use std::ops::Range;

use serde_json::{json, Value};

use super::{Completion, EventSeq, Finish, SseItem};

fn item_id(c: &Completion) -> String {
    if c.tools {
        format!("fc_{}", c.id())
    } else {
        format!("msg_{}", c.id())
    }
}

fn output_item(c: &Completion, done: bool) -> Value {
    let status = if done { "completed" } else { "in_progress" };
    if c.tools {
        json!({
            "id": item_id(c), "type": "function_call", "status": status,
            "arguments": if done { c.tool_args() } else { String::new() },
            "call_id": c.tool_call_id(), "name": c.tool_name(),
        })
    } else {
        let content = if done {
            json!([{ "type": "output_text", "text": c.text(), "annotations": [] }])
        } else {
            json!([])
        };
        json!({
            "id": item_id(c), "type": "message", "status": status, "role": "assistant",
            "content": content,
        })
    }
}

/// The response object; `done` gives the completed one with output and usage.
pub(crate) fn response_object(c: &Completion, done: bool) -> Value {
    let (status, incomplete) = match (done, &c.finish) {
        (false, _) => ("in_progress", Value::Null),
        (true, Finish::Length) => ("incomplete", json!({ "reason": "max_output_tokens" })),
        (true, Finish::ContentFilter) => ("incomplete", json!({ "reason": "content_filter" })),
        (true, _) => ("completed", Value::Null),
    };
    json!({
        "id": format!("resp_{}", c.id()),
        "object": "response",
        "created_at": c.created(),
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "instructions": null,
        "max_output_tokens": null,
        "model": c.model,
        "output": if done { json!([output_item(c, true)]) } else { json!([]) },
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "temperature": 1.0,
        "text": { "format": { "type": "text" } },
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "metadata": {},
        "usage": if done {
            json!({
                "input_tokens": c.all_prompt_tokens(),
                "input_tokens_details": { "cached_tokens": c.cache_read },
                "output_tokens": c.output_tokens(),
                "output_tokens_details": { "reasoning_tokens": c.reasoning_tokens },
                "total_tokens": c.all_prompt_tokens() + c.output_tokens(),
            })
        } else {
            Value::Null
        },
    })
}

/// The streaming response: created, in_progress, output_item.added, (content_part.added,)
/// one delta per token or argument piece, the matching `.done` events, output_item.done and
/// `response.completed`.
pub(crate) struct ResponseStream {
    pub(crate) c: Completion,
}

impl ResponseStream {
    fn body_events(&self) -> usize {
        if self.c.tools {
            self.c.tool_arg_pieces()
        } else {
            self.c.n_tokens as usize
        }
    }

    /// Events before the first delta.
    fn head(&self) -> usize {
        if self.c.tools {
            3
        } else {
            4
        }
    }
}

impl EventSeq for ResponseStream {
    fn len(&self) -> usize {
        // head + deltas + (text.done, part.done | args.done) + item.done + completed
        self.head() + self.body_events() + if self.c.tools { 1 } else { 2 } + 2
    }

    fn event(&self, i: usize) -> SseItem {
        let c = &self.c;
        let head = self.head();
        let body = self.body_events();
        let id = item_id(c);
        let part = |text: String| json!({ "type": "output_text", "text": text, "annotations": [] });
        let (name, mut v) = match i {
            0 => (
                "response.created",
                json!({ "response": response_object(c, false) }),
            ),
            1 => (
                "response.in_progress",
                json!({ "response": response_object(c, false) }),
            ),
            2 => (
                "response.output_item.added",
                json!({ "output_index": 0, "item": output_item(c, false) }),
            ),
            3 if !c.tools => (
                "response.content_part.added",
                json!({ "item_id": id, "output_index": 0, "content_index": 0, "part": part(String::new()) }),
            ),
            i if i < head + body => {
                if c.tools {
                    (
                        "response.function_call_arguments.delta",
                        json!({ "item_id": id, "output_index": 0, "delta": c.tool_arg_piece(i - head) }),
                    )
                } else {
                    (
                        "response.output_text.delta",
                        json!({ "item_id": id, "output_index": 0, "content_index": 0,
                                "delta": c.token((i - head) as u32), "logprobs": [] }),
                    )
                }
            }
            i if i == head + body => {
                if c.tools {
                    (
                        "response.function_call_arguments.done",
                        json!({ "item_id": id, "output_index": 0, "arguments": c.tool_args() }),
                    )
                } else {
                    (
                        "response.output_text.done",
                        json!({ "item_id": id, "output_index": 0, "content_index": 0,
                                "text": c.text(), "logprobs": [] }),
                    )
                }
            }
            i if !c.tools && i == head + body + 1 => (
                "response.content_part.done",
                json!({ "item_id": id, "output_index": 0, "content_index": 0, "part": part(c.text()) }),
            ),
            i if i == self.len() - 2 => (
                "response.output_item.done",
                json!({ "output_index": 0, "item": output_item(c, true) }),
            ),
            _ => {
                let name = if matches!(c.finish, Finish::Length | Finish::ContentFilter) {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                (name, json!({ "response": response_object(c, true) }))
            }
        };
        v["type"] = json!(name);
        v["sequence_number"] = json!(i);
        (Some(name), v.to_string())
    }

    fn content(&self) -> Range<usize> {
        self.head()..self.head() + self.body_events()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::Behavior;

    fn names(spec: &str) -> Vec<&'static str> {
        let b = Behavior::default().with_spec(spec).unwrap();
        let s = ResponseStream {
            c: Completion::new("m", b"{}", None, &b),
        };
        (0..s.len()).map(|i| s.event(i).0.unwrap()).collect()
    }

    #[test]
    fn text_sequence() {
        assert_eq!(
            names("tokens=1"),
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
    }

    #[test]
    fn tool_sequence() {
        let n = names("tools, tokens=1");
        assert_eq!(n.len(), 3 + 3 + 1 + 2);
        assert_eq!(n[3], "response.function_call_arguments.delta");
        assert_eq!(n[6], "response.function_call_arguments.done");
        assert_eq!(n[8], "response.completed");
    }
}
