//! OpenAI chat requests: read a client's `/chat/completions` body into the neutral
//! conversation, and write one for an OpenAI-shaped upstream.

use serde_json::{json, Map, Value};

use super::field::{self, invalid};
use super::{Drops, RequestError};
use crate::api::Family;
use crate::chat::{
    ChatRequest, Media, Message, Part, ResponseFormat, Role, Tool, ToolCall, ToolChoice, ToolResult,
};
use crate::provider::ProviderKind;
use crate::reasoning::{Effort, Reasoning};
use crate::shape::openai as wire;

/// Reads a client's chat completions body.
pub(crate) fn read(map: Map<String, Value>) -> Result<ChatRequest, RequestError> {
    let mut r = ChatRequest::new(Family::OpenAi);
    let mut messages = None;
    let mut tools = None;
    let mut tool_choice = Value::Null;
    let (mut max_completion_tokens, mut max_tokens) = (None, None);
    let (mut user, mut safety_identifier) = (None, None);
    for (key, v) in map {
        match key.as_str() {
            "model" => r.model = field::string(v, &"model")?.unwrap_or_default(),
            "messages" => messages = field::array(v, &"messages")?,
            "stream" => r.stream = field::boolean(&v, &"stream")?.unwrap_or(false),
            "stream_options" => {
                if let Some(mut o) = field::object(v, &"stream_options")? {
                    let u = o.remove("include_usage").unwrap_or(Value::Null);
                    r.include_usage =
                        field::boolean(&u, &"stream_options.include_usage")?.unwrap_or(false);
                }
            }
            "max_completion_tokens" => {
                max_completion_tokens = field::uint(&v, &"max_completion_tokens")?
            }
            "max_tokens" => max_tokens = field::uint(&v, &"max_tokens")?,
            "temperature" => r.temperature = field::number(v, &"temperature")?,
            "top_p" => r.top_p = field::number(v, &"top_p")?,
            "frequency_penalty" => {
                r.frequency_penalty = field::nonzero(field::number(v, &"frequency_penalty")?)
            }
            "presence_penalty" => {
                r.presence_penalty = field::nonzero(field::number(v, &"presence_penalty")?)
            }
            "stop" => r.stop = field::strings(v, &"stop")?,
            "tools" => tools = field::array(v, &"tools")?,
            "tool_choice" => tool_choice = v,
            "parallel_tool_calls" => {
                r.parallel_tool_calls = field::boolean(&v, &"parallel_tool_calls")?
            }
            "response_format" => r.response_format = read_response_format(v, &mut r.foreign)?,
            "n" => r.n = field::uint(&v, &"n")?.filter(|&n| n != 1),
            "seed" => r.seed = field::int(&v, &"seed")?,
            "logprobs" => r.logprobs = field::boolean(&v, &"logprobs")?.unwrap_or(false),
            "top_logprobs" => r.top_logprobs = field::uint(&v, &"top_logprobs")?,
            "user" => user = field::string(v, &"user")?,
            "reasoning_effort" => r.reasoning = read_effort(v)?,
            "safety_identifier" => safety_identifier = field::string(v, &"safety_identifier")?,
            // Bookkeeping on OpenAI's side (stored completions, cache routing, service
            // tiers): no other provider has it and the answer does not depend on it.
            "store"
            | "metadata"
            | "prompt_cache_key"
            | "prompt_cache_retention"
            | "service_tier" => {}
            "modalities" if v == json!(["text"]) => {}
            _ if v.is_null() => {}
            _ => r.foreign.push(key),
        }
    }
    r.max_tokens = max_completion_tokens.or(max_tokens);
    r.user = safety_identifier.or(user);
    let messages = messages.ok_or_else(|| invalid(&"messages", "is required"))?;
    read_messages(messages, &mut r)?;
    if let Some(tools) = tools {
        r.tools = read_tools(tools, &mut r.foreign)?;
    }
    read_tool_choice(tool_choice, &mut r)?;
    r.prefill = r.ends_with_assistant();
    Ok(r)
}

fn read_response_format(
    v: Value,
    foreign: &mut Vec<String>,
) -> Result<Option<ResponseFormat>, RequestError> {
    let Some(mut o) = field::object(v, &"response_format")? else {
        return Ok(None);
    };
    let kind = field::string(
        o.remove("type").unwrap_or(Value::Null),
        &"response_format.type",
    )?;
    match kind.as_deref() {
        None | Some("text") => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        Some("json_schema") => {
            let mut js =
                field::required_object(o.remove("json_schema"), &"response_format.json_schema")?;
            let schema = js.remove("schema").unwrap_or_else(|| json!({}));
            Ok(Some(ResponseFormat::JsonSchema {
                name: field::string(
                    js.remove("name").unwrap_or(Value::Null),
                    &"response_format.json_schema.name",
                )?,
                schema,
                strict: field::boolean(
                    js.get("strict").unwrap_or(&Value::Null),
                    &"response_format.json_schema.strict",
                )?,
            }))
        }
        Some(other) => {
            foreign.push(format!("response_format (type {other})"));
            Ok(None)
        }
    }
}

fn read_messages(messages: Vec<Value>, r: &mut ChatRequest) -> Result<(), RequestError> {
    // Which function each call id named: Gemini's function responses need the name.
    let mut names: Vec<(String, String)> = Vec::new();
    let mut last_was_tool = false;
    for (i, m) in messages.into_iter().enumerate() {
        let mut m = field::object(m, &format_args!("messages[{i}]"))?
            .ok_or_else(|| invalid(&format_args!("messages[{i}]"), "must be an object"))?;
        let role = field::required_string(m.remove("role"), &format_args!("messages[{i}].role"))?;
        let content = m.remove("content").unwrap_or(Value::Null);
        let is_tool = role == "tool";
        match role.as_str() {
            "system" | "developer" => {
                for_each_text(content, i, |t| r.system.push(t))?;
            }
            "user" => {
                let parts = read_user_content(content, i, &mut r.foreign)?;
                r.messages.push(Message {
                    role: Role::User,
                    parts,
                });
            }
            "assistant" => {
                let mut parts = Vec::new();
                for_each_text(content, i, |t| parts.push(Part::Text(t)))?;
                if let Some(refusal) = m.remove("refusal") {
                    if let Some(t) = field::string(refusal, &format_args!("messages[{i}].refusal"))?
                    {
                        if !t.is_empty() {
                            parts.push(Part::Text(t));
                        }
                    }
                }
                if let Some(calls) = m.remove("tool_calls") {
                    let calls = field::array(calls, &format_args!("messages[{i}].tool_calls"))?
                        .unwrap_or_default();
                    for (j, c) in calls.into_iter().enumerate() {
                        let call = read_tool_call(c, i, j)?;
                        names.push((call.id.clone(), call.name.clone()));
                        parts.push(Part::ToolCall(call));
                    }
                }
                // Reasoning text some OpenAI-compatible servers return: the model's own
                // scratchpad, which no provider accepts back unsigned. The signed form is
                // `thinking_blocks`, which goes first: Anthropic wants the thinking before
                // the text and tool calls it led to.
                m.remove("reasoning_content");
                if let Some(blocks) = m.remove("thinking_blocks") {
                    let mut thinking = read_thinking_blocks(blocks, i)?;
                    thinking.append(&mut parts);
                    parts = thinking;
                }
                r.messages.push(Message {
                    role: Role::Assistant,
                    parts,
                });
            }
            "tool" => {
                let call_id = field::required_string(
                    m.remove("tool_call_id"),
                    &format_args!("messages[{i}].tool_call_id"),
                )?;
                let mut content_parts = Vec::new();
                for_each_text(content, i, |t| content_parts.push(Part::Text(t)))?;
                let name = names
                    .iter()
                    .rev()
                    .find(|(id, _)| *id == call_id)
                    .map(|(_, n)| n.clone());
                let result = Part::ToolResult(ToolResult {
                    call_id,
                    name,
                    content: content_parts,
                    is_error: false,
                });
                // N tool messages in a row answer one assistant turn: one user turn.
                match r.messages.last_mut() {
                    Some(prev) if last_was_tool => prev.parts.push(result),
                    _ => r.messages.push(Message {
                        role: Role::User,
                        parts: vec![result],
                    }),
                }
            }
            other => {
                r.foreign
                    .push(format!("messages[{i}].role ({other} messages)"));
                m.clear();
            }
        }
        if is_tool {
            // The function's name, which some clients repeat here: the call has it.
            m.remove("name");
        }
        last_was_tool = is_tool;
        for (key, v) in m {
            if !v.is_null() {
                r.foreign.push(format!("messages[{i}].{key}"));
            }
        }
    }
    Ok(())
}

/// `reasoning_effort`: `none` turns reasoning off, the levels OpenAI documents are kept.
fn read_effort(v: Value) -> Result<Option<Reasoning>, RequestError> {
    let Some(s) = field::string(v, &"reasoning_effort")? else {
        return Ok(None);
    };
    if s == "none" {
        return Ok(Some(Reasoning::Off));
    }
    Effort::parse(&s)
        .map(|e| Some(Reasoning::Effort(e)))
        .ok_or_else(|| {
            invalid(
                &"reasoning_effort",
                "must be none, minimal, low, medium, high or xhigh",
            )
        })
}

/// An assistant message's `thinking_blocks` (the field LiteLLM gives OpenAI clients for
/// Anthropic's signed thinking, which Sluice writes too): `{"type":"thinking","thinking",
/// "signature"}` and `{"type":"redacted_thinking","data"}`, kept exactly for the provider
/// that signed them.
fn read_thinking_blocks(v: Value, i: usize) -> Result<Vec<Part>, RequestError> {
    let param = format_args!("messages[{i}].thinking_blocks");
    let Some(blocks) = field::array(v, &param)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(blocks.len());
    for (j, b) in blocks.into_iter().enumerate() {
        let param = format_args!("messages[{i}].thinking_blocks[{j}]");
        let mut b =
            field::object(b, &param)?.ok_or_else(|| invalid(&param, "must be a thinking block"))?;
        let kind = field::required_string(b.remove("type"), &format_args!("{param}.type"))?;
        match kind.as_str() {
            "thinking" => out.push(Part::Thinking {
                text: field::string(
                    b.remove("thinking").unwrap_or(Value::Null),
                    &format_args!("{param}.thinking"),
                )?
                .unwrap_or_default(),
                signature: field::string(
                    b.remove("signature").unwrap_or(Value::Null),
                    &format_args!("{param}.signature"),
                )?
                .unwrap_or_default(),
            }),
            "redacted_thinking" => out.push(Part::RedactedThinking(field::required_string(
                b.remove("data"),
                &format_args!("{param}.data"),
            )?)),
            _ => {
                return Err(invalid(
                    &format_args!("{param}.type"),
                    "must be thinking or redacted_thinking",
                ))
            }
        }
    }
    Ok(out)
}

/// Calls `f` with each non-empty text of a string or an array of text (or refusal) parts.
fn for_each_text(content: Value, i: usize, mut f: impl FnMut(String)) -> Result<(), RequestError> {
    match content {
        Value::Null => Ok(()),
        Value::String(s) => {
            if !s.is_empty() {
                f(s);
            }
            Ok(())
        }
        Value::Array(parts) => {
            for (j, p) in parts.into_iter().enumerate() {
                let param = format_args!("messages[{i}].content[{j}]");
                let mut p = field::object(p, &param)?
                    .ok_or_else(|| invalid(&param, "must be a content part"))?;
                let kind = field::required_string(p.remove("type"), &param)?;
                let text = match kind.as_str() {
                    "text" => p.remove("text"),
                    "refusal" => p.remove("refusal"),
                    _ => return Err(invalid(&param, format!("must be a text part, not {kind}"))),
                };
                if let Some(t) = field::string(text.unwrap_or(Value::Null), &param)? {
                    if !t.is_empty() {
                        f(t);
                    }
                }
            }
            Ok(())
        }
        _ => Err(invalid(
            &format_args!("messages[{i}].content"),
            "must be a string or an array of content parts",
        )),
    }
}

fn read_user_content(
    content: Value,
    i: usize,
    foreign: &mut Vec<String>,
) -> Result<Vec<Part>, RequestError> {
    let parts = match content {
        Value::Null => return Ok(Vec::new()),
        Value::String(s) if s.is_empty() => return Ok(Vec::new()),
        Value::String(s) => return Ok(vec![Part::Text(s)]),
        Value::Array(parts) => parts,
        _ => {
            return Err(invalid(
                &format_args!("messages[{i}].content"),
                "must be a string or an array of content parts",
            ))
        }
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, p) in parts.into_iter().enumerate() {
        let param = format_args!("messages[{i}].content[{j}]");
        let mut p =
            field::object(p, &param)?.ok_or_else(|| invalid(&param, "must be a content part"))?;
        let kind = field::required_string(p.remove("type"), &format_args!("{param}.type"))?;
        match kind.as_str() {
            "text" => {
                let t = field::string(p.remove("text").unwrap_or(Value::Null), &param)?
                    .unwrap_or_default();
                if !t.is_empty() {
                    out.push(Part::Text(t));
                }
            }
            "image_url" => {
                // `{"url", "detail"}`; some clients send the URL as a bare string. `detail`
                // is a resolution hint other providers have no equivalent for.
                let url = match p.remove("image_url").unwrap_or(Value::Null) {
                    Value::Object(mut o) => o.remove("url"),
                    v => Some(v),
                };
                let url = field::required_string(url, &format_args!("{param}.image_url.url"))?;
                out.push(Part::Image(media_from_url(url)));
            }
            "input_audio" => {
                let mut a = field::object(
                    p.remove("input_audio").unwrap_or(Value::Null),
                    &format_args!("{param}.input_audio"),
                )?
                .unwrap_or_default();
                out.push(Part::Audio {
                    data: field::required_string(
                        a.remove("data"),
                        &format_args!("{param}.input_audio.data"),
                    )?,
                    format: field::required_string(
                        a.remove("format"),
                        &format_args!("{param}.input_audio.format"),
                    )?,
                });
            }
            "file" => {
                let mut f = field::object(
                    p.remove("file").unwrap_or(Value::Null),
                    &format_args!("{param}.file"),
                )?
                .unwrap_or_default();
                match f.remove("file_data") {
                    Some(Value::String(d)) => match wire::parse_data_url(&d) {
                        Some((media_type, data)) => out.push(Part::Document(Media::Base64 {
                            media_type: media_type.to_string(),
                            data: data.to_string(),
                        })),
                        None => out.push(Part::Document(Media::Base64 {
                            media_type: "application/pdf".to_string(),
                            data: d,
                        })),
                    },
                    _ => foreign.push(format!("{param}.file.file_id")),
                }
            }
            other => foreign.push(format!("{param} ({other} parts)")),
        }
    }
    Ok(out)
}

pub(super) fn media_from_url(url: String) -> Media {
    match wire::parse_data_url(&url) {
        Some((media_type, data)) => Media::Base64 {
            media_type: media_type.to_string(),
            data: data.to_string(),
        },
        None => Media::Url(url),
    }
}

fn read_tool_call(c: Value, i: usize, j: usize) -> Result<ToolCall, RequestError> {
    let param = format_args!("messages[{i}].tool_calls[{j}]");
    let mut c = field::object(c, &param)?.ok_or_else(|| invalid(&param, "must be an object"))?;
    let id = field::required_string(c.remove("id"), &format_args!("{param}.id"))?;
    let mut f = field::required_object(c.remove("function"), &format_args!("{param}.function"))?;
    let name = field::required_string(f.remove("name"), &format_args!("{param}.function.name"))?;
    let args = field::string(
        f.remove("arguments").unwrap_or(Value::Null),
        &format_args!("{param}.function.arguments"),
    )?
    .unwrap_or_default();
    let arguments = parse_arguments(&args)
        .map_err(|reason| invalid(&format_args!("{param}.function.arguments"), reason))?;
    Ok(ToolCall {
        id,
        name,
        arguments,
    })
}

/// OpenAI's arguments string as the object other providers want (`""` is `{}`: models
/// send it for functions without parameters).
pub(crate) fn parse_arguments(args: &str) -> Result<Value, String> {
    if args.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(args) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("must be a JSON object for this provider".to_string()),
        Err(e) => Err(format!(
            "is not valid JSON ({e}); this provider needs the arguments as an object"
        )),
    }
}

/// Function tools (`{"type":"function","function":{...}}`); other types are OpenAI's own.
fn read_tools(tools: Vec<Value>, foreign: &mut Vec<String>) -> Result<Vec<Tool>, RequestError> {
    super::read_tools(tools, "function", foreign, |mut t, i| {
        let param = format_args!("tools[{i}].function");
        let f = field::required_object(t.remove("function"), &param)?;
        super::read_function(f, &param, "parameters")
    })
}

fn read_tool_choice(v: Value, r: &mut ChatRequest) -> Result<(), RequestError> {
    let choice = match v {
        Value::Null => None,
        Value::String(s) => match s.as_str() {
            "auto" => Some(ToolChoice::Auto),
            "none" => Some(ToolChoice::None),
            "required" => Some(ToolChoice::Required),
            _ => return Err(invalid(&"tool_choice", "must be none, auto or required")),
        },
        Value::Object(mut o) => {
            let kind = field::string(o.remove("type").unwrap_or(Value::Null), &"tool_choice.type")?;
            match kind.as_deref() {
                Some("function") => {
                    let name = o
                        .remove("function")
                        .and_then(|f| f.get("name").cloned())
                        .unwrap_or(Value::Null);
                    Some(ToolChoice::Function(field::required_string(
                        Some(name),
                        &"tool_choice.function.name",
                    )?))
                }
                Some("allowed_tools") => {
                    // A subset of the tools: the same as sending only those tools, which
                    // every provider can express.
                    let mut a = field::object(
                        o.remove("allowed_tools").unwrap_or(Value::Null),
                        &"tool_choice.allowed_tools",
                    )?
                    .unwrap_or_default();
                    let allowed: Vec<String> = field::array(
                        a.remove("tools").unwrap_or(Value::Null),
                        &"tool_choice.allowed_tools.tools",
                    )?
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect();
                    r.tools.retain(|t| allowed.contains(&t.name));
                    match a.get("mode").and_then(Value::as_str) {
                        Some("required") => Some(ToolChoice::Required),
                        _ => Some(ToolChoice::Auto),
                    }
                }
                _ => {
                    r.foreign.push("tool_choice".to_string());
                    None
                }
            }
        }
        _ => return Err(invalid(&"tool_choice", "must be a string or an object")),
    };
    r.tool_choice = choice;
    Ok(())
}

/// Writes the neutral request for an OpenAI-shaped upstream.
pub(crate) fn write(
    mut r: ChatRequest,
    provider: &ProviderKind,
    drops: &mut Drops,
) -> Result<wire::ChatRequest, RequestError> {
    drops.foreign(&mut r)?;
    let azure = matches!(provider, ProviderKind::Azure { .. });
    let mut out = wire::ChatRequest {
        model: std::mem::take(&mut r.model),
        max_completion_tokens: r.max_tokens,
        temperature: r.temperature.take(),
        top_p: r.top_p.take(),
        stop: std::mem::take(&mut r.stop),
        stream: r.stream,
        // The client's (Anthropic) stream reports usage: always ask for it.
        stream_options: r.stream.then_some(wire::StreamOptions {
            include_usage: true,
        }),
        user: r.user.take(),
        ..Default::default()
    };
    if let Some(k) = r.top_k {
        if azure {
            drops.unsupported("top_k")?;
        } else {
            out.top_k = Some(k);
        }
    }
    // Budgets (Anthropic) become the level whose budget holds them; adaptive thinking is the
    // model's default effort.
    out.reasoning_effort = r
        .reasoning
        .and_then(|x| x.effort(&r.budgets))
        .map(Effort::as_str);
    if r.prefill {
        if azure {
            drops.unsupported("assistant prefill (a final assistant message)")?;
        } else {
            out.continue_final_message = Some(true);
            out.add_generation_prompt = Some(false);
        }
    }
    if !r.system.is_empty() {
        let content = if r.system.len() == 1 {
            wire::Content::Text(r.system.remove(0))
        } else {
            wire::Content::Parts(
                r.system
                    .drain(..)
                    .map(|text| wire::ContentPart::Text { text })
                    .collect(),
            )
        };
        out.messages.push(wire::Message::System { content });
    }
    for m in r.messages {
        match m.role {
            Role::Assistant => {
                let mut text = String::new();
                let mut tool_calls = Vec::new();
                for p in m.parts {
                    match p {
                        Part::Text(t) => text.push_str(&t),
                        Part::ToolCall(c) => tool_calls.push(wire::ToolCall {
                            id: c.id,
                            kind: "function".into(),
                            function: wire::FunctionCall {
                                name: c.name,
                                arguments: c.arguments.to_string(),
                            },
                        }),
                        // OpenAI takes no reasoning back in chat history; the answers it led
                        // to are in the text and calls.
                        Part::Thinking { .. } | Part::RedactedThinking(_) => {}
                        _ => {
                            drops.unsupported("assistant content other than text and tool calls")?
                        }
                    }
                }
                if text.is_empty() && tool_calls.is_empty() {
                    continue;
                }
                let content = (!text.is_empty()).then_some(text);
                out.messages.push(wire::Message::Assistant {
                    content,
                    tool_calls,
                });
            }
            Role::User => {
                let mut parts = Vec::new();
                for p in m.parts {
                    match p {
                        // Tool results are tool messages, right after the assistant turn.
                        Part::ToolResult(res) => {
                            if res.has_non_text() {
                                drops.unsupported("tool_result content other than text")?;
                            }
                            out.messages.push(wire::Message::Tool {
                                content: wire::Content::Text(res.text()),
                                tool_call_id: res.call_id,
                            });
                        }
                        Part::Text(text) => parts.push(wire::ContentPart::Text { text }),
                        Part::Image(Media::Url(url)) => parts.push(wire::ContentPart::ImageUrl {
                            image_url: wire::ImageUrl { url },
                        }),
                        Part::Image(Media::Base64 { media_type, data }) => {
                            parts.push(wire::ContentPart::ImageUrl {
                                image_url: wire::ImageUrl {
                                    url: wire::data_url(&media_type, &data),
                                },
                            })
                        }
                        Part::Document(Media::Base64 { media_type, data }) => {
                            parts.push(wire::ContentPart::File {
                                file: wire::FileData {
                                    file_data: wire::data_url(&media_type, &data),
                                    filename: "document.pdf".into(),
                                },
                            })
                        }
                        Part::Document(Media::Url(_)) => {
                            drops.unsupported("document blocks with a URL source")?
                        }
                        Part::Audio { .. }
                        | Part::ToolCall(_)
                        | Part::Thinking { .. }
                        | Part::RedactedThinking(_) => {
                            drops.unsupported("user content other than text, images and PDFs")?
                        }
                    }
                }
                if parts.is_empty() {
                    continue;
                }
                let content = match parts.as_slice() {
                    [wire::ContentPart::Text { .. }] => match parts.pop() {
                        Some(wire::ContentPart::Text { text }) => wire::Content::Text(text),
                        _ => continue,
                    },
                    _ => wire::Content::Parts(parts),
                };
                out.messages.push(wire::Message::User { content });
            }
        }
    }
    out.tools = r
        .tools
        .into_iter()
        .map(|t| wire::Tool {
            kind: "function",
            function: wire::Function {
                name: t.name,
                description: t.description,
                parameters: t.parameters,
                strict: t.strict,
            },
        })
        .collect();
    out.tool_choice = r.tool_choice.map(|c| match c {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::Required => json!("required"),
        ToolChoice::None => json!("none"),
        ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
    });
    if r.parallel_tool_calls == Some(false) {
        out.parallel_tool_calls = Some(false);
    }
    out.response_format = r.response_format.map(|f| match f {
        ResponseFormat::JsonObject => json!({"type": "json_object"}),
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => {
            let mut js = json!({
                "name": name.unwrap_or_else(|| "response".to_string()),
                "schema": schema,
            });
            if let Some(s) = strict {
                js["strict"] = Value::Bool(s);
            }
            json!({"type": "json_schema", "json_schema": js})
        }
    });
    Ok(out)
}
