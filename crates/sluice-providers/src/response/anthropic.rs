//! Anthropic `message` bodies: read from an Anthropic upstream, written for an Anthropic
//! client.

use bytes::Bytes;

use super::{to_bytes, Answer, Choice, Thinking};
use crate::chat::ToolCall;
use crate::finish::Finish;
use crate::shape::anthropic as wire;

pub(super) fn read(body: &[u8], model: &str) -> Result<Answer, String> {
    let m: wire::MessageResponse = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    let mut thinking = Vec::new();
    for b in m.content {
        match b {
            wire::ResponseBlock::Text { text: t } => text.push_str(&t),
            wire::ResponseBlock::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                name,
                arguments: input,
            }),
            wire::ResponseBlock::Thinking {
                thinking: text,
                signature,
            } => {
                reasoning.push_str(&text);
                thinking.push(Thinking::Signed { text, signature });
            }
            wire::ResponseBlock::RedactedThinking { data } => {
                thinking.push(Thinking::Redacted { data })
            }
            wire::ResponseBlock::Other => {}
        }
    }
    let mut choice = Choice {
        index: 0,
        text,
        reasoning,
        thinking,
        refusal: None,
        tool_calls,
        finish: Finish::from_anthropic(m.stop_reason.as_deref().unwrap_or("end_turn")),
        stop_sequence: m.stop_sequence,
    };
    choice.settle_finish();
    Ok(Answer {
        id: m.id,
        model: if m.model.is_empty() {
            model.to_string()
        } else {
            m.model
        },
        choices: vec![choice],
        usage: Some(m.usage.to_usage()),
    })
}

/// The first choice as a message (Anthropic has one answer per request; its clients cannot
/// ask for more).
pub(crate) fn write(a: Answer) -> Result<Bytes, String> {
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
    let mut content = Vec::with_capacity(2 + c.tool_calls.len() + c.thinking.len());
    // Thinking first, as Anthropic answers. Another family's reasoning is unsigned: an
    // empty signature, which the gateway never sends to Anthropic (request translation
    // leaves such blocks out).
    if c.thinking.is_empty() && !c.reasoning.is_empty() {
        content.push(wire::ResponseBlock::Thinking {
            thinking: c.reasoning,
            signature: String::new(),
        });
    }
    for t in c.thinking {
        content.push(match t {
            Thinking::Signed { text, signature } => wire::ResponseBlock::Thinking {
                thinking: text,
                signature,
            },
            Thinking::Redacted { data } => wire::ResponseBlock::RedactedThinking { data },
        });
    }
    let mut text = c.text;
    if let Some(r) = c.refusal {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&r);
    }
    if !text.is_empty() {
        content.push(wire::ResponseBlock::Text { text });
    }
    for t in c.tool_calls {
        content.push(wire::ResponseBlock::ToolUse {
            id: wire::tool_use_id(&t.id),
            name: t.name,
            input: t.arguments,
        });
    }
    let stop_sequence = match c.finish {
        Finish::StopSequence => c.stop_sequence,
        _ => None,
    };
    to_bytes(&wire::MessageResponse {
        id: a.id,
        kind: "message".to_string(),
        role: "assistant".to_string(),
        content,
        model: a.model,
        stop_reason: Some(c.finish.as_anthropic().to_string()),
        stop_sequence,
        usage: wire::UsageBody::from_usage(&a.usage.unwrap_or_default()),
    })
}
