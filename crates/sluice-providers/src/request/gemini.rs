//! Gemini requests: write the neutral conversation as a `generateContent` body (Gemini is
//! never a client's family, so there is no reader).

use serde_json::json;

use super::field::invalid;
use super::{Drops, RequestError};
use crate::chat::{merge_turns, ChatRequest, Media, Part, ResponseFormat, Role, ToolChoice};
use crate::reasoning::{gemini_takes_level, BudgetTable, Effort, Reasoning};
use crate::shape::gemini::{self as wire, gemini_call_id, image_mime_from_url};

/// Writes the neutral request for Gemini's `generateContent` / `streamGenerateContent`.
pub(crate) fn write(
    mut r: ChatRequest,
    drops: &mut Drops,
) -> Result<wire::GenerateContentRequest, RequestError> {
    drops.foreign(&mut r)?;
    if r.logprobs {
        drops.unsupported("logprobs")?;
    }
    if r.top_logprobs.is_some() {
        drops.unsupported("top_logprobs")?;
    }
    if r.parallel_tool_calls == Some(false) && !r.tools.is_empty() {
        drops.unsupported(r.parallel_param())?;
    }
    if r.prefill {
        drops.unsupported("assistant prefill (a final assistant message)")?;
        if let Some(last) = r.messages.last() {
            if last.role == Role::Assistant {
                r.messages.pop();
            }
        }
    }
    let mut candidate_count = r.n;
    if candidate_count.is_some() && r.stream {
        // Streamed candidates would have to be told apart chunk by chunk.
        drops.unsupported("n (with stream)")?;
        candidate_count = None;
    }
    let (response_mime_type, response_json_schema) = match r.response_format.take() {
        None => (None, None),
        Some(ResponseFormat::JsonObject) => (Some("application/json"), None),
        Some(ResponseFormat::JsonSchema { schema, .. }) => (Some("application/json"), Some(schema)),
    };
    let generation_config = wire::GenerationConfig {
        max_output_tokens: r.max_tokens,
        temperature: r.temperature.take(),
        top_p: r.top_p.take(),
        top_k: r.top_k,
        stop_sequences: std::mem::take(&mut r.stop),
        candidate_count,
        seed: r.seed,
        frequency_penalty: r.frequency_penalty.take(),
        presence_penalty: r.presence_penalty.take(),
        response_mime_type,
        response_json_schema,
        thinking_config: r
            .reasoning
            .map(|x| thinking_config(x, &r.model, &r.budgets)),
    };
    let mut contents = Vec::with_capacity(r.messages.len());
    for m in merge_turns(std::mem::take(&mut r.messages)) {
        let mut parts = Vec::with_capacity(m.parts.len());
        for p in m.parts {
            if let Some(p) = part(p, drops)? {
                parts.push(p);
            }
        }
        if parts.is_empty() {
            continue;
        }
        contents.push(wire::Content {
            role: Some(
                match m.role {
                    Role::User => "user",
                    Role::Assistant => "model",
                }
                .to_string(),
            ),
            parts,
        });
    }
    let system_instruction = (!r.system.is_empty()).then(|| wire::Content {
        role: None,
        parts: r
            .system
            .drain(..)
            .map(|t| wire::Part {
                text: Some(t),
                ..Default::default()
            })
            .collect(),
    });
    let tools = if r.tools.is_empty() {
        Vec::new()
    } else {
        vec![wire::Tool {
            function_declarations: r
                .tools
                .drain(..)
                .map(|t| wire::FunctionDeclaration {
                    name: t.name,
                    description: t.description,
                    parameters_json_schema: t.parameters,
                })
                .collect(),
        }]
    };
    let tool_config = r.tool_choice.take().map(|c| {
        let (mode, allowed_function_names) = match c {
            ToolChoice::Auto => ("AUTO", Vec::new()),
            ToolChoice::Required => ("ANY", Vec::new()),
            ToolChoice::None => ("NONE", Vec::new()),
            ToolChoice::Function(name) => ("ANY", vec![name]),
        };
        wire::ToolConfig {
            function_calling_config: wire::FunctionCallingConfig {
                mode,
                allowed_function_names,
            },
        }
    });
    // `user` has no Gemini equivalent; it labels the caller, it does not shape the answer.
    Ok(wire::GenerateContentRequest {
        model: None,
        contents,
        system_instruction,
        tools,
        tool_config,
        generation_config,
    })
}

/// `thinkingConfig` (GPY `ThinkingConfig`): Gemini 3 takes a `thinkingLevel`, Gemini 2.5 a
/// `thinkingBudget` (0 off, -1 the model decides); both are asked to include their thought
/// summaries, which the client gets as its reasoning.
fn thinking_config(x: Reasoning, model: &str, budgets: &BudgetTable) -> wire::ThinkingConfig {
    let mut c = wire::ThinkingConfig {
        include_thoughts: Some(true),
        ..Default::default()
    };
    if gemini_takes_level(model) {
        // Gemini 3 cannot stop thinking: `none` is its least. Adaptive is its default.
        c.thinking_level = match x {
            Reasoning::Off => Some("low"),
            Reasoning::Adaptive => None,
            other => other.effort(budgets).map(Effort::gemini_level),
        };
        if x == Reasoning::Off {
            c.include_thoughts = None;
        }
    } else {
        c.thinking_budget = Some(match x {
            Reasoning::Off => 0,
            Reasoning::Adaptive => -1,
            other => other
                .budget(budgets)
                .map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX)),
        });
        if x == Reasoning::Off {
            c.include_thoughts = None;
        }
    }
    c
}

fn media(m: Media, default_url_type: Option<&'static str>) -> wire::Part {
    match m {
        Media::Base64 { media_type, data } => wire::Part {
            inline_data: Some(wire::Blob {
                mime_type: media_type,
                data,
            }),
            ..Default::default()
        },
        Media::Url(url) => wire::Part {
            file_data: Some(wire::FileData {
                mime_type: Some(
                    default_url_type
                        .unwrap_or_else(|| image_mime_from_url(&url))
                        .to_string(),
                ),
                file_uri: url,
            }),
            ..Default::default()
        },
    }
}

fn part(p: Part, drops: &mut Drops) -> Result<Option<wire::Part>, RequestError> {
    Ok(Some(match p {
        Part::Text(t) => wire::Part {
            text: Some(t),
            ..Default::default()
        },
        Part::Image(m) => media(m, None),
        Part::Document(m) => media(m, Some("application/pdf")),
        Part::Audio { data, format } => wire::Part {
            inline_data: Some(wire::Blob {
                mime_type: format!("audio/{format}"),
                data,
            }),
            ..Default::default()
        },
        Part::ToolCall(c) => {
            let ids = gemini_call_id(&c.id);
            wire::Part {
                function_call: Some(wire::FunctionCall {
                    id: ids.id.map(str::to_string),
                    name: c.name,
                    args: c.arguments,
                }),
                thought_signature: ids.thought_signature,
                ..Default::default()
            }
        }
        // Another provider's signed reasoning: Gemini takes back only its own signatures,
        // which ride in the tool-call ids.
        Part::Thinking { .. } | Part::RedactedThinking(_) => return Ok(None),
        Part::ToolResult(res) => {
            if res.has_non_text() {
                drops.unsupported("tool result content other than text")?;
            }
            let name = res.name.clone().ok_or_else(|| {
                invalid(
                    &"messages",
                    format!(
                        "the tool result for call `{}` has no matching tool call earlier in \
                         the conversation; Gemini needs the function's name",
                        res.call_id
                    ),
                )
            })?;
            let text = res.text();
            let response = if res.is_error {
                json!({ "error": text })
            } else {
                json!({ "output": text })
            };
            wire::Part {
                function_response: Some(wire::FunctionResponse {
                    id: gemini_call_id(&res.call_id).id.map(str::to_string),
                    name,
                    response,
                }),
                ..Default::default()
            }
        }
    }))
}
