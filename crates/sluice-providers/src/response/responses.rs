//! OpenAI Responses API bodies (`object: "response"`), written for a Responses client from
//! another family's answer.
//!
//! The output items come in the order the upstream answered: reasoning first (a `reasoning`
//! item per thinking block, its text as one `summary_text`), then the text as one `message`
//! with one `output_text` part, then one `function_call` item per tool call. A signed
//! thinking block's signature is the reasoning item's `encrypted_content`, the field the
//! OpenAI SDKs keep and send back with the item (Anthropic's `redacted_thinking` data too,
//! behind [`REDACTED_PREFIX`]): the next turn's request restores the signed block from it
//! (`crate::request::responses`).
//!
//! The status follows the finish: `incomplete` with `incomplete_details.reason`
//! `max_output_tokens` or `content_filter` when the answer was cut, else `completed`.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{to_bytes, Answer, Choice, Thinking};
use crate::finish::Finish;
use crate::request::responses::REDACTED_PREFIX;
use crate::usage::Usage;

/// `status` and `incomplete_details.reason` for a finish.
pub(crate) fn status(finish: Finish) -> (&'static str, Option<&'static str>) {
    match finish {
        Finish::Length | Finish::ContextWindow => ("incomplete", Some("max_output_tokens")),
        Finish::ContentFilter => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

/// A Responses `usage` object.
pub(crate) fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input,
        "input_tokens_details": {"cached_tokens": u.cached_input},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning},
        "total_tokens": u.input + u.output,
    })
}

/// The response id for an upstream's message id (`resp_` + it, unless it has the prefix).
pub(crate) fn response_id(upstream: &str) -> String {
    if upstream.starts_with("resp_") {
        upstream.to_string()
    } else if upstream.is_empty() {
        "resp_sluice".to_string()
    } else {
        format!("resp_{upstream}")
    }
}

/// The first choice as a response.
pub(crate) fn write(a: Answer, now_unix: u64) -> Result<Bytes, String> {
    let c = a.choices.into_iter().next().unwrap_or(Choice {
        index: 0,
        text: String::new(),
        reasoning: String::new(),
        thinking: Vec::new(),
        refusal: None,
        tool_calls: Vec::new(),
        finish: Finish::Stop,
        stop_sequence: None,
    });
    let id = response_id(&a.id);
    // Item ids unique within the response: the kind, the response's id, the position.
    let suffix = id.strip_prefix("resp_").unwrap_or(&id).to_string();
    let item_id = |kind: &str, n: usize| format!("{kind}_{suffix}_{n}");
    let mut output = Vec::with_capacity(2 + c.thinking.len() + c.tool_calls.len());
    if c.thinking.is_empty() && !c.reasoning.is_empty() {
        // Reasoning no provider signed (Gemini thought summaries): shown, nothing to return.
        output.push(json!({
            "id": item_id("rs", output.len()),
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": c.reasoning}],
        }));
    }
    for t in c.thinking {
        let (summary, sealed) = match t {
            Thinking::Signed { text, signature } => (
                vec![json!({"type": "summary_text", "text": text})],
                signature,
            ),
            Thinking::Redacted { data } => (Vec::new(), format!("{REDACTED_PREFIX}{data}")),
        };
        output.push(json!({
            "id": item_id("rs", output.len()),
            "type": "reasoning",
            "summary": summary,
            "encrypted_content": sealed,
        }));
    }
    let mut content = Vec::with_capacity(2);
    if !c.text.is_empty() {
        content.push(
            json!({"type": "output_text", "text": c.text, "annotations": [], "logprobs": []}),
        );
    }
    if let Some(r) = c.refusal {
        content.push(json!({"type": "refusal", "refusal": r}));
    }
    if !content.is_empty() {
        output.push(json!({
            "id": item_id("msg", output.len()),
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": content,
        }));
    }
    for t in c.tool_calls {
        output.push(json!({
            "id": item_id("fc", output.len()),
            "type": "function_call",
            "status": "completed",
            "call_id": t.id,
            "name": t.name,
            "arguments": t.arguments.to_string(),
        }));
    }
    let (status, reason) = status(c.finish);
    to_bytes(&json!({
        "id": id,
        "object": "response",
        "created_at": now_unix,
        "status": status,
        "error": null,
        "incomplete_details": reason.map(|r| json!({"reason": r})),
        "model": a.model,
        "output": output,
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "tools": [],
        "usage": a.usage.as_ref().map(usage_json),
    }))
}
