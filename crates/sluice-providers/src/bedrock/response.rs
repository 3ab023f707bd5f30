//! Reads a Converse response into the neutral answer.

use super::shape::{ConverseResponse, TokenUsage};
use crate::chat::ToolCall;
use crate::finish::Finish;
use crate::response::{Answer, Choice};

/// The answer, and Bedrock's own token counts (which keep the cache writes apart).
pub(crate) fn read(
    body: &[u8],
    id: &str,
    model: &str,
) -> Result<(Answer, Option<TokenUsage>), String> {
    let r: ConverseResponse = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    let blocks = r
        .output
        .and_then(|o| o.message)
        .map(|m| m.content)
        .ok_or("no output.message")?;
    for b in blocks {
        if let Some(t) = b.text {
            text.push_str(&t);
        }
        if let Some(t) = b.tool_use {
            if !t.input.is_object() && !t.input.is_null() {
                return Err(format!(
                    "the input of tool call `{}` is not an object",
                    t.tool_use_id
                ));
            }
            tool_calls.push(ToolCall {
                id: t.tool_use_id,
                name: t.name,
                arguments: if t.input.is_null() {
                    serde_json::json!({})
                } else {
                    t.input
                },
            });
        }
        if let Some(t) = b.reasoning_content.and_then(|r| r.reasoning_text) {
            reasoning.push_str(&t.text);
        }
    }
    // Anthropic models on Bedrock report the stop sequence hit among the model's own fields.
    let stop_sequence = r
        .additional_model_response_fields
        .as_ref()
        .and_then(|f| f.get("stop_sequence"))
        .and_then(|s| s.as_str())
        .map(str::to_string);
    let mut choice = Choice {
        index: 0,
        text,
        reasoning,
        thinking: Vec::new(),
        refusal: None,
        tool_calls,
        finish: Finish::from_bedrock(r.stop_reason.as_deref().unwrap_or("end_turn")),
        stop_sequence,
    };
    choice.settle_finish();
    Ok((
        Answer {
            id: id.to_string(),
            model: model.to_string(),
            choices: vec![choice],
            usage: r.usage.map(|u| u.to_usage()),
        },
        r.usage,
    ))
}
