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

/// A Gemini `usageMetadata` object for `u` (thoughts apart from the answer's tokens, as
/// Gemini counts them).
pub(crate) fn usage_metadata(u: &crate::usage::Usage) -> serde_json::Value {
    serde_json::json!({
        "promptTokenCount": u.input,
        "candidatesTokenCount": u.output.saturating_sub(u.reasoning),
        "thoughtsTokenCount": u.reasoning,
        "cachedContentTokenCount": u.cached_input,
        "totalTokenCount": u.input + u.output,
    })
}

/// The answer as a `GenerateContentResponse`, for a Gemini-native client: one candidate per
/// choice, reasoning as `thought` parts (a signed thinking block's signature as the
/// `thoughtSignature` of its part, which the SDK keeps and sends back), then the text, then
/// the function calls with their ids.
pub(crate) fn write(a: Answer) -> Result<Bytes, String> {
    use serde_json::{json, Value};
    let mut candidates = Vec::with_capacity(a.choices.len());
    for c in a.choices {
        let mut parts: Vec<Value> = Vec::new();
        if c.thinking.is_empty() && !c.reasoning.is_empty() {
            parts.push(json!({"text": c.reasoning, "thought": true}));
        }
        for t in c.thinking {
            // Anthropic's redacted thinking has no text to show and no Gemini field to
            // carry it in: left out.
            if let super::Thinking::Signed { text, signature } = t {
                parts.push(json!({"text": text, "thought": true, "thoughtSignature": signature}));
            }
        }
        let mut text = c.text;
        if let Some(r) = c.refusal {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&r);
        }
        if !text.is_empty() {
            parts.push(json!({"text": text}));
        }
        for t in c.tool_calls {
            parts.push(json!({"functionCall": {"id": t.id, "name": t.name, "args": t.arguments}}));
        }
        candidates.push(json!({
            "content": {"role": "model", "parts": parts},
            "finishReason": c.finish.as_gemini(),
            "index": c.index,
        }));
    }
    to_bytes(&json!({
        "candidates": candidates,
        "usageMetadata": usage_metadata(&a.usage.unwrap_or_default()),
        "modelVersion": a.model,
        "responseId": a.id,
    }))
}
