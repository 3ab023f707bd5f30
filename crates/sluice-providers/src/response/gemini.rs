//! Gemini `GenerateContentResponse` and `countTokens` bodies, read for a client of another
//! family.

use bytes::Bytes;

use super::{to_bytes, Answer, Choice};
use crate::chat::ToolCall;
use crate::finish::Finish;
use crate::shape::anthropic::TokenCount;
use crate::shape::gemini::{self as wire, client_call_id};

pub(super) fn read(body: &[u8], model: &str) -> Result<Answer, String> {
    let r: wire::GenerateContentResponse =
        serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let response_id = r.response_id.as_deref();
    let mut choices = Vec::with_capacity(r.candidates.len().max(1));
    for cand in r.candidates {
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut tool_calls = Vec::new();
        for p in cand.content.map(|c| c.parts).unwrap_or_default() {
            if let Some(fc) = p.function_call {
                let id = client_call_id(
                    fc.id.as_deref(),
                    response_id,
                    tool_calls.len(),
                    p.thought_signature.as_deref(),
                );
                let arguments = match fc.args {
                    serde_json::Value::Null => serde_json::Value::Object(Default::default()),
                    a => a,
                };
                tool_calls.push(ToolCall {
                    id,
                    name: fc.name,
                    arguments,
                });
            } else if let Some(t) = p.text {
                // Thought summaries are not the answer.
                if p.thought == Some(true) {
                    reasoning.push_str(&t);
                } else {
                    text.push_str(&t);
                }
            }
        }
        let finish = Finish::from_gemini(
            cand.finish_reason.as_deref().unwrap_or("STOP"),
            !tool_calls.is_empty(),
        );
        let mut choice = Choice {
            index: cand.index,
            text,
            reasoning,
            thinking: Vec::new(),
            refusal: None,
            tool_calls,
            finish,
            stop_sequence: None,
        };
        choice.settle_finish();
        choices.push(choice);
    }
    if choices.is_empty() {
        // No candidates: the prompt was blocked (`promptFeedback.blockReason`).
        let blocked = r
            .prompt_feedback
            .as_ref()
            .and_then(|f| f.block_reason.as_ref())
            .is_some();
        choices.push(Choice {
            index: 0,
            text: String::new(),
            reasoning: String::new(),
            thinking: Vec::new(),
            refusal: None,
            tool_calls: Vec::new(),
            finish: if blocked {
                Finish::ContentFilter
            } else {
                Finish::Stop
            },
            stop_sequence: None,
        });
    }
    Ok(Answer {
        id: r.response_id.unwrap_or_default(),
        model: r.model_version.unwrap_or_else(|| model.to_string()),
        choices,
        usage: r.usage_metadata.map(|u| u.to_usage()),
    })
}

/// `{"totalTokens": N}` as Anthropic's `{"input_tokens": N}`.
pub(super) fn count_tokens(body: &[u8]) -> Result<Bytes, String> {
    let c: wire::CountTokensResponse = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    to_bytes(&TokenCount {
        input_tokens: c.total_tokens,
    })
}
