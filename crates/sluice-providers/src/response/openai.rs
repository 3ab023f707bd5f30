//! OpenAI `chat.completion` bodies: read from an OpenAI-shaped upstream, written for an
//! OpenAI client.

use bytes::Bytes;

use super::{to_bytes, Answer, Choice};
use crate::chat::ToolCall;
use crate::finish::Finish;
use crate::request::parse_arguments;
use crate::shape::openai as wire;

pub(super) fn read(body: &[u8], model: &str) -> Result<Answer, String> {
    let c: wire::ChatCompletion = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut choices = Vec::with_capacity(c.choices.len());
    for ch in c.choices {
        let mut tool_calls = Vec::new();
        for call in ch.message.tool_calls.unwrap_or_default() {
            let arguments = parse_arguments(&call.function.arguments)
                .map_err(|reason| format!("the arguments of tool call `{}` {reason}", call.id))?;
            tool_calls.push(ToolCall {
                id: call.id,
                name: call.function.name,
                arguments,
            });
        }
        let mut choice = Choice {
            index: ch.index,
            text: ch.message.content.unwrap_or_default(),
            // vLLM and DeepSeek say `reasoning_content`, OpenRouter and newer vLLM
            // `reasoning`: an Anthropic client gets it as an (unsigned) thinking block.
            reasoning: ch
                .message
                .reasoning_content
                .or(ch.message.reasoning)
                .unwrap_or_default(),
            thinking: Vec::new(),
            refusal: ch.message.refusal.filter(|r| !r.is_empty()),
            tool_calls,
            finish: Finish::from_openai(ch.finish_reason.as_deref().unwrap_or("stop")),
            stop_sequence: None,
        };
        if choice.refusal.is_some() && choice.finish == Finish::Stop {
            choice.finish = Finish::ContentFilter;
        }
        choice.settle_finish();
        choices.push(choice);
    }
    Ok(Answer {
        id: c.id,
        model: if c.model.is_empty() {
            model.to_string()
        } else {
            c.model
        },
        choices,
        usage: c.usage.map(|u| u.to_usage()),
    })
}

pub(crate) fn write(a: Answer, now_unix: u64) -> Result<Bytes, String> {
    let choices = a
        .choices
        .into_iter()
        .map(|c| {
            let tool_calls: Vec<wire::ToolCall> = c
                .tool_calls
                .into_iter()
                .map(|t| wire::ToolCall {
                    id: t.id,
                    kind: "function".to_string(),
                    function: wire::FunctionCall {
                        name: t.name,
                        arguments: t.arguments.to_string(),
                    },
                })
                .collect();
            // `null` content beside tool calls or a refusal, or when a filter withheld the
            // answer, as OpenAI and Azure answer.
            let content = if c.text.is_empty()
                && (!tool_calls.is_empty()
                    || c.refusal.is_some()
                    || c.finish == Finish::ContentFilter)
            {
                None
            } else {
                Some(c.text)
            };
            wire::Choice {
                index: c.index,
                message: wire::ResponseMessage {
                    role: "assistant".to_string(),
                    content,
                    refusal: c.refusal,
                    reasoning_content: (!c.reasoning.is_empty()).then_some(c.reasoning),
                    reasoning: None,
                    thinking_blocks: (!c.thinking.is_empty())
                        .then(|| c.thinking.iter().map(|t| t.to_openai()).collect()),
                    tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
                },
                finish_reason: Some(c.finish.as_openai().to_string()),
                logprobs: None,
            }
        })
        .collect();
    to_bytes(&wire::ChatCompletion {
        id: a.id,
        object: "chat.completion".to_string(),
        created: now_unix,
        model: a.model,
        choices,
        usage: a.usage.as_ref().map(wire::UsageBody::from_usage),
    })
}
