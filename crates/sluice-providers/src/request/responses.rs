//! OpenAI Responses API requests (`POST /v1/responses`): read a client's body into the
//! neutral conversation, so that any writer (Anthropic, Gemini) can send it on.
//!
//! `input` is a string (one user message) or a list of items: messages (`role` user, system,
//! developer or assistant; content as a string or `input_text` / `input_image` /
//! `input_file` / `output_text` / `refusal` parts), `function_call` and
//! `function_call_output` items, and `reasoning` items. A reasoning item whose
//! `encrypted_content` Sluice wrote for an Anthropic answer carries that answer's signed
//! thinking (see [`crate::response::responses`]): it is restored as the signed block, so the
//! next turn of a tool-using conversation is accepted. Reasoning no provider signed goes
//! nowhere, as in the other readers.
//!
//! The Responses API's state on OpenAI's side (`previous_response_id`, `conversation`,
//! `item_reference` items, stored prompts) and its built-in tools have no equivalent
//! elsewhere: they are named as unsupported (a 400, or dropped with
//! `drop_unsupported_params`).

use serde_json::{json, Map, Value};

use super::field::{self, invalid};
use super::openai::media_from_url;
use super::{parse_arguments, RequestError};
use crate::api::Family;
use crate::chat::{
    ChatRequest, Media, Message, Part, ResponseFormat, Role, ToolCall, ToolChoice, ToolResult,
};
use crate::reasoning::{Effort, Reasoning};
use crate::shape::openai as wire;

/// The prefix of a reasoning item's `encrypted_content` that holds Anthropic's
/// `redacted_thinking` data (a signed thinking block's is its signature alone: base64, which
/// never holds a `:`).
pub(crate) const REDACTED_PREFIX: &str = "redacted_thinking:";

/// Reads a client's Responses body.
pub(crate) fn read(map: Map<String, Value>) -> Result<ChatRequest, RequestError> {
    let mut r = ChatRequest::new(Family::OpenAi);
    // A Responses stream always ends with the usage (`response.completed`).
    r.include_usage = true;
    let mut input = None;
    let mut tools = None;
    let mut tool_choice = Value::Null;
    let (mut user, mut safety_identifier) = (None, None);
    for (key, v) in map {
        match key.as_str() {
            "model" => r.model = field::string(v, &"model")?.unwrap_or_default(),
            "input" => input = Some(v),
            "instructions" => {
                if let Some(t) = field::string(v, &"instructions")? {
                    if !t.is_empty() {
                        r.system.push(t);
                    }
                }
            }
            "stream" => r.stream = field::boolean(&v, &"stream")?.unwrap_or(false),
            "max_output_tokens" => r.max_tokens = field::uint(&v, &"max_output_tokens")?,
            "temperature" => r.temperature = field::number(v, &"temperature")?,
            "top_p" => r.top_p = field::number(v, &"top_p")?,
            "tools" => tools = field::array(v, &"tools")?,
            "tool_choice" => tool_choice = v,
            "parallel_tool_calls" => {
                r.parallel_tool_calls = field::boolean(&v, &"parallel_tool_calls")?
            }
            "text" => r.response_format = read_text(v, &mut r.foreign)?,
            "reasoning" => r.reasoning = read_reasoning(v)?,
            "top_logprobs" => {
                r.top_logprobs = field::uint(&v, &"top_logprobs")?.filter(|&n| n > 0);
                r.logprobs = r.top_logprobs.is_some();
            }
            "user" => user = field::string(v, &"user")?,
            "safety_identifier" => safety_identifier = field::string(v, &"safety_identifier")?,
            // Bookkeeping on OpenAI's side (storage, cache routing, tiers, what to include in
            // the answer: encrypted reasoning is always included when there is any), or the
            // defaults every provider has (`truncation: disabled`, foreground).
            "store"
            | "metadata"
            | "prompt_cache_key"
            | "prompt_cache_retention"
            | "service_tier"
            | "include"
            | "stream_options" => {}
            "truncation" if v == json!("disabled") => {}
            "background" if v == json!(false) => {}
            _ if v.is_null() => {}
            _ => r.foreign.push(key),
        }
    }
    r.user = safety_identifier.or(user);
    let input = input.ok_or_else(|| invalid(&"input", "is required"))?;
    read_input(input, &mut r)?;
    if let Some(tools) = tools {
        r.tools = read_tools(tools, &mut r.foreign)?;
    }
    r.tool_choice = read_tool_choice(tool_choice, &mut r.foreign)?;
    r.prefill = r.ends_with_assistant();
    Ok(r)
}

/// `reasoning: {effort, summary}`: the effort maps like chat's `reasoning_effort`; `summary`
/// asks how much of the reasoning to show, and what the upstream shows is passed on whole.
fn read_reasoning(v: Value) -> Result<Option<Reasoning>, RequestError> {
    let Some(mut o) = field::object(v, &"reasoning")? else {
        return Ok(None);
    };
    let Some(s) = field::string(
        o.remove("effort").unwrap_or(Value::Null),
        &"reasoning.effort",
    )?
    else {
        return Ok(None);
    };
    if s == "none" {
        return Ok(Some(Reasoning::Off));
    }
    Effort::parse(&s)
        .map(|e| Some(Reasoning::Effort(e)))
        .ok_or_else(|| {
            invalid(
                &"reasoning.effort",
                "must be none, minimal, low, medium, high or xhigh",
            )
        })
}

/// `text: {format: {type: text | json_object | json_schema, name, schema, strict}}`.
fn read_text(v: Value, foreign: &mut Vec<String>) -> Result<Option<ResponseFormat>, RequestError> {
    let Some(mut o) = field::object(v, &"text")? else {
        return Ok(None);
    };
    if let Some(verbosity) = o.remove("verbosity").filter(|v| !v.is_null()) {
        if verbosity != json!("medium") {
            foreign.push("text.verbosity".to_string());
        }
    }
    let Some(mut f) = field::object(o.remove("format").unwrap_or(Value::Null), &"text.format")?
    else {
        return Ok(None);
    };
    let kind = field::string(f.remove("type").unwrap_or(Value::Null), &"text.format.type")?;
    match kind.as_deref() {
        None | Some("text") => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        Some("json_schema") => Ok(Some(ResponseFormat::JsonSchema {
            name: field::string(f.remove("name").unwrap_or(Value::Null), &"text.format.name")?,
            schema: f.remove("schema").unwrap_or_else(|| json!({})),
            strict: field::boolean(
                f.get("strict").unwrap_or(&Value::Null),
                &"text.format.strict",
            )?,
        })),
        Some(other) => {
            foreign.push(format!("text.format (type {other})"));
            Ok(None)
        }
    }
}

/// Function tools (`{"type":"function","name",...}`, flat, unlike chat's); the built-in tools
/// (web search, file search, computer use, ...) are OpenAI's own.
fn read_tools(
    tools: Vec<Value>,
    foreign: &mut Vec<String>,
) -> Result<Vec<crate::chat::Tool>, RequestError> {
    super::read_tools(tools, "function", foreign, |t, i| {
        super::read_function(t, &format_args!("tools[{i}]"), "parameters")
    })
}

fn read_tool_choice(
    v: Value,
    foreign: &mut Vec<String>,
) -> Result<Option<ToolChoice>, RequestError> {
    Ok(match v {
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
                Some("function") => Some(ToolChoice::Function(field::required_string(
                    o.remove("name"),
                    &"tool_choice.name",
                )?)),
                _ => {
                    foreign.push("tool_choice".to_string());
                    None
                }
            }
        }
        _ => return Err(invalid(&"tool_choice", "must be a string or an object")),
    })
}

fn read_input(input: Value, r: &mut ChatRequest) -> Result<(), RequestError> {
    let items = match input {
        Value::String(s) => {
            if !s.is_empty() {
                r.messages.push(Message {
                    role: Role::User,
                    parts: vec![Part::Text(s)],
                });
            }
            return Ok(());
        }
        Value::Array(items) => items,
        _ => {
            return Err(invalid(
                &"input",
                "must be a string or an array of input items",
            ))
        }
    };
    // Which function each call id named: Gemini's function responses need the name.
    let mut names: Vec<(String, String)> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let param = format_args!("input[{i}]");
        let mut item =
            field::object(item, &param)?.ok_or_else(|| invalid(&param, "must be an object"))?;
        let kind = field::string(
            item.remove("type").unwrap_or(Value::Null),
            &format_args!("input[{i}].type"),
        )?
        .unwrap_or_else(|| "message".to_string());
        // Ids and statuses of items an earlier response gave: nothing to send on.
        item.remove("id");
        item.remove("status");
        let (role, parts) = match kind.as_str() {
            "message" => {
                let role =
                    field::required_string(item.remove("role"), &format_args!("input[{i}].role"))?;
                let content = item.remove("content").unwrap_or(Value::Null);
                match role.as_str() {
                    "system" | "developer" => {
                        for p in read_content(content, i, &mut r.foreign)? {
                            if let Part::Text(t) = p {
                                r.system.push(t);
                            } else {
                                r.foreign
                                    .push(format!("input[{i}].content (non-text {role} parts)"));
                            }
                        }
                        continue;
                    }
                    "user" => (Role::User, read_content(content, i, &mut r.foreign)?),
                    "assistant" => (Role::Assistant, read_content(content, i, &mut r.foreign)?),
                    other => {
                        return Err(invalid(
                            &format_args!("input[{i}].role"),
                            format!("must be user, assistant, system or developer, not {other}"),
                        ))
                    }
                }
            }
            "function_call" => {
                let call_id = field::required_string(
                    item.remove("call_id"),
                    &format_args!("input[{i}].call_id"),
                )?;
                let name =
                    field::required_string(item.remove("name"), &format_args!("input[{i}].name"))?;
                let args = field::string(
                    item.remove("arguments").unwrap_or(Value::Null),
                    &format_args!("input[{i}].arguments"),
                )?
                .unwrap_or_default();
                let arguments = parse_arguments(&args)
                    .map_err(|reason| invalid(&format_args!("input[{i}].arguments"), reason))?;
                names.push((call_id.clone(), name.clone()));
                (
                    Role::Assistant,
                    vec![Part::ToolCall(ToolCall {
                        id: call_id,
                        name,
                        arguments,
                    })],
                )
            }
            "function_call_output" => {
                let call_id = field::required_string(
                    item.remove("call_id"),
                    &format_args!("input[{i}].call_id"),
                )?;
                let content = match item.remove("output").unwrap_or(Value::Null) {
                    Value::String(s) if s.is_empty() => Vec::new(),
                    Value::String(s) => vec![Part::Text(s)],
                    v @ Value::Array(_) => read_content(v, i, &mut r.foreign)?,
                    _ => {
                        return Err(invalid(
                            &format_args!("input[{i}].output"),
                            "must be a string or an array of content parts",
                        ))
                    }
                };
                let name = names
                    .iter()
                    .rev()
                    .find(|(id, _)| *id == call_id)
                    .map(|(_, n)| n.clone());
                (
                    Role::User,
                    vec![Part::ToolResult(ToolResult {
                        call_id,
                        name,
                        content,
                        is_error: false,
                    })],
                )
            }
            "reasoning" => (Role::Assistant, read_reasoning_item(&mut item, i)?),
            other => {
                r.foreign.push(format!("input[{i}] ({other} items)"));
                continue;
            }
        };
        for (key, v) in item {
            if !v.is_null() {
                r.foreign.push(format!("input[{i}].{key}"));
            }
        }
        r.messages.push(Message { role, parts });
    }
    Ok(())
}

/// A reasoning item given back: its summary texts are the thinking, its `encrypted_content`
/// the signature (or Anthropic's redacted data) Sluice put there. Without one it is
/// reasoning no provider can take back: an unsigned block, which the writers leave out.
fn read_reasoning_item(item: &mut Map<String, Value>, i: usize) -> Result<Vec<Part>, RequestError> {
    let mut text = String::new();
    let summary = field::array(
        item.remove("summary").unwrap_or(Value::Null),
        &format_args!("input[{i}].summary"),
    )?
    .unwrap_or_default();
    for (j, s) in summary.into_iter().enumerate() {
        let t = s.get("text").cloned().unwrap_or(Value::Null);
        if let Some(t) = field::string(t, &format_args!("input[{i}].summary[{j}].text"))? {
            text.push_str(&t);
        }
    }
    // Reasoning text the upstream returned in full (`content`), not summarised: the same.
    item.remove("content");
    let sealed = field::string(
        item.remove("encrypted_content").unwrap_or(Value::Null),
        &format_args!("input[{i}].encrypted_content"),
    )?
    .unwrap_or_default();
    Ok(match sealed.strip_prefix(REDACTED_PREFIX) {
        Some(data) => vec![Part::RedactedThinking(data.to_string())],
        None => vec![Part::Thinking {
            text,
            signature: sealed,
        }],
    })
}

/// A message's content: a string, or `input_text` / `output_text` / `refusal` /
/// `input_image` / `input_file` parts.
fn read_content(
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
                &format_args!("input[{i}].content"),
                "must be a string or an array of content parts",
            ))
        }
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, p) in parts.into_iter().enumerate() {
        let param = format_args!("input[{i}].content[{j}]");
        let mut p =
            field::object(p, &param)?.ok_or_else(|| invalid(&param, "must be a content part"))?;
        let kind = field::required_string(p.remove("type"), &format_args!("{param}.type"))?;
        match kind.as_str() {
            "input_text" | "output_text" | "text" | "refusal" => {
                let key = if kind == "refusal" { "refusal" } else { "text" };
                let t = field::string(
                    p.remove(key).unwrap_or(Value::Null),
                    &format_args!("{param}.{key}"),
                )?
                .unwrap_or_default();
                if !t.is_empty() {
                    out.push(Part::Text(t));
                }
            }
            "input_image" => match p.remove("image_url").filter(|v| !v.is_null()) {
                Some(url) => {
                    let url =
                        field::required_string(Some(url), &format_args!("{param}.image_url"))?;
                    out.push(Part::Image(media_from_url(url)));
                }
                None => foreign.push(format!("{param}.file_id")),
            },
            "input_file" => match p.remove("file_data") {
                Some(Value::String(d)) => {
                    let (media_type, data) = match wire::parse_data_url(&d) {
                        Some((m, data)) => (m.to_string(), data.to_string()),
                        None => ("application/pdf".to_string(), d),
                    };
                    out.push(Part::Document(Media::Base64 { media_type, data }));
                }
                _ => foreign.push(format!("{param}.file_id")),
            },
            other => foreign.push(format!("{param} ({other} parts)")),
        }
    }
    Ok(out)
}
