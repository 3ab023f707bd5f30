//! Anthropic messages requests: read a client's `/messages` (or `/messages/count_tokens`)
//! body into the neutral conversation, and write one for an Anthropic upstream.

use serde_json::{json, Map, Value};

use super::field::{self, invalid};
use super::{Drops, RequestError, DEFAULT_ANTHROPIC_MAX_TOKENS};
use crate::api::Family;
use crate::chat::{
    merge_turns, ChatRequest, Media, Message, Part, ResponseFormat, Role, Tool, ToolCall,
    ToolChoice, ToolResult,
};
use crate::reasoning::{anthropic_max_tokens, Effort, Reasoning, ANTHROPIC_MIN_BUDGET};
use crate::shape::anthropic as wire;

/// Reads a client's messages (or count_tokens) body.
pub(crate) fn read(map: Map<String, Value>) -> Result<ChatRequest, RequestError> {
    let mut r = ChatRequest::new(Family::Anthropic);
    let mut messages = None;
    let mut tools = None;
    let mut tool_choice = None;
    for (key, v) in map {
        match key.as_str() {
            "model" => r.model = field::string(v, &"model")?.unwrap_or_default(),
            "messages" => messages = field::array(v, &"messages")?,
            "max_tokens" => r.max_tokens = field::uint(&v, &"max_tokens")?,
            "system" => read_system(v, &mut r.system, &mut r.cache_points.system)?,
            "metadata" => {
                if let Some(mut m) = field::object(v, &"metadata")? {
                    r.user = field::string(
                        m.remove("user_id").unwrap_or(Value::Null),
                        &"metadata.user_id",
                    )?;
                }
            }
            "stop_sequences" => r.stop = field::strings(v, &"stop_sequences")?,
            "stream" => r.stream = field::boolean(&v, &"stream")?.unwrap_or(false),
            "temperature" => r.temperature = field::number(v, &"temperature")?,
            "top_p" => r.top_p = field::number(v, &"top_p")?,
            "top_k" => r.top_k = field::uint(&v, &"top_k")?,
            "tools" => tools = field::array(v, &"tools")?,
            "tool_choice" => tool_choice = field::object(v, &"tool_choice")?,
            "thinking" => read_thinking(v, &mut r)?,
            "output_config" => read_output_config(v, &mut r)?,
            // Priority/standard capacity: how the answer is scheduled, not what it is.
            "service_tier" => {}
            _ if v.is_null() => {}
            _ => r.foreign.push(key),
        }
    }
    let messages = messages.ok_or_else(|| invalid(&"messages", "is required"))?;
    read_messages(messages, &mut r)?;
    if let Some(tools) = tools {
        // Breakpoints count the function tools before them: server tools are not among
        // `r.tools` (they are refused or dropped).
        let mut functions = 0;
        for t in &tools {
            if t.get("type")
                .and_then(Value::as_str)
                .is_none_or(|k| k == "custom")
            {
                functions += 1;
                if has_cache_control(t) {
                    r.cache_points.tools.push(functions);
                }
            }
        }
        r.tools = read_tools(tools, &mut r.foreign)?;
    }
    if let Some(c) = tool_choice {
        read_tool_choice(c, &mut r)?;
    }
    r.prefill = r.ends_with_assistant();
    Ok(r)
}

/// Whether a block or tool carries a `cache_control` breakpoint.
fn has_cache_control(v: &Value) -> bool {
    v.get("cache_control").is_some_and(|c| !c.is_null())
}

fn read_system(
    v: Value,
    system: &mut Vec<String>,
    cache_points: &mut Vec<usize>,
) -> Result<(), RequestError> {
    match v {
        Value::Null => {}
        Value::String(s) => {
            if !s.is_empty() {
                system.push(s);
            }
        }
        Value::Array(blocks) => {
            for (i, b) in blocks.into_iter().enumerate() {
                let param = format_args!("system[{i}]");
                let mut b =
                    field::object(b, &param)?.ok_or_else(|| invalid(&param, "must be a block"))?;
                if b.get("type").and_then(Value::as_str) != Some("text") {
                    return Err(invalid(&param, "must be a text block"));
                }
                // `cache_control` is a caching hint: the text is the same without it. Kept
                // aside for the upstreams that take breakpoints (Bedrock).
                let cached = b.get("cache_control").is_some_and(|c| !c.is_null());
                let t = field::required_string(b.remove("text"), &format_args!("{param}.text"))?;
                if !t.is_empty() {
                    system.push(t);
                }
                if cached {
                    cache_points.push(system.len());
                }
            }
        }
        _ => {
            return Err(invalid(
                &"system",
                "must be a string or an array of text blocks",
            ))
        }
    }
    Ok(())
}

/// `thinking`: `{"type":"enabled","budget_tokens"}`, `{"type":"adaptive"}` or
/// `{"type":"disabled"}` (APY `thinking_config_*_param.py`). Disabled thinking is every
/// other provider's visible behaviour already, so it sets nothing. `display` (whether
/// Anthropic shows the thinking) has no equivalent elsewhere and is not needed to honour the
/// budget, so it is not refused.
fn read_thinking(v: Value, r: &mut ChatRequest) -> Result<(), RequestError> {
    let Some(mut t) = field::object(v, &"thinking")? else {
        return Ok(());
    };
    let kind = field::required_string(t.remove("type"), &"thinking.type")?;
    match kind.as_str() {
        "enabled" => {
            let budget = field::uint(
                t.get("budget_tokens").unwrap_or(&Value::Null),
                &"thinking.budget_tokens",
            )?
            .ok_or_else(|| invalid(&"thinking.budget_tokens", "is required with type enabled"))?;
            r.reasoning = Some(Reasoning::Budget(budget));
        }
        // An effort given beside it (`output_config.effort`) wins: read after this.
        "adaptive" => {
            if r.reasoning.is_none() {
                r.reasoning = Some(Reasoning::Adaptive);
            }
        }
        "disabled" => {}
        _ => {
            return Err(invalid(
                &"thinking.type",
                "must be enabled, adaptive or disabled",
            ))
        }
    }
    Ok(())
}

fn read_output_config(v: Value, r: &mut ChatRequest) -> Result<(), RequestError> {
    let Some(o) = field::object(v, &"output_config")? else {
        return Ok(());
    };
    for (key, v) in o {
        match key.as_str() {
            "format" => {
                let Some(mut f) = field::object(v, &"output_config.format")? else {
                    continue;
                };
                if f.get("type").and_then(Value::as_str) != Some("json_schema") {
                    r.foreign.push("output_config.format".to_string());
                    continue;
                }
                r.response_format = Some(ResponseFormat::JsonSchema {
                    name: None,
                    schema: f.remove("schema").unwrap_or_else(|| json!({})),
                    // Anthropic's structured outputs always follow the schema.
                    strict: Some(true),
                });
            }
            // How much the model spends (thinking included): the nearest thing other
            // families have is their effort level. `max` is the most OpenAI models take.
            "effort" => {
                let e = field::string(v, &"output_config.effort")?;
                let effort = match e.as_deref() {
                    None => None,
                    Some("max") => Some(Effort::High),
                    Some(s) => Some(Effort::parse(s).ok_or_else(|| {
                        invalid(&"output_config.effort", "must be low, medium, high or max")
                    })?),
                };
                if let Some(e) = effort {
                    if !matches!(r.reasoning, Some(Reasoning::Budget(_))) {
                        r.reasoning = Some(Reasoning::Effort(e));
                    }
                }
            }
            _ if v.is_null() => {}
            _ => r.foreign.push(format!("output_config.{key}")),
        }
    }
    Ok(())
}

fn read_messages(messages: Vec<Value>, r: &mut ChatRequest) -> Result<(), RequestError> {
    let mut names: Vec<(String, String)> = Vec::new();
    for (i, m) in messages.into_iter().enumerate() {
        let mut m = field::object(m, &format_args!("messages[{i}]"))?
            .ok_or_else(|| invalid(&format_args!("messages[{i}]"), "must be an object"))?;
        let role =
            match field::required_string(m.remove("role"), &format_args!("messages[{i}].role"))?
                .as_str()
            {
                "user" => Role::User,
                "assistant" => Role::Assistant,
                _ => {
                    return Err(invalid(
                        &format_args!("messages[{i}].role"),
                        "must be user or assistant",
                    ))
                }
            };
        let parts = match m.remove("content").unwrap_or(Value::Null) {
            Value::String(s) if s.is_empty() => Vec::new(),
            Value::String(s) => vec![Part::Text(s)],
            Value::Array(blocks) => {
                let mut parts = Vec::with_capacity(blocks.len());
                for (j, b) in blocks.into_iter().enumerate() {
                    let cached = has_cache_control(&b);
                    if let Some(p) = read_block(b, i, j, &mut names, &mut r.foreign)? {
                        parts.push(p);
                    }
                    if cached {
                        r.cache_points
                            .messages
                            .push((r.messages.len(), parts.len()));
                    }
                }
                parts
            }
            _ => {
                return Err(invalid(
                    &format_args!("messages[{i}].content"),
                    "must be a string or an array of content blocks",
                ))
            }
        };
        r.messages.push(Message { role, parts });
    }
    Ok(())
}

fn read_block(
    b: Value,
    i: usize,
    j: usize,
    names: &mut Vec<(String, String)>,
    foreign: &mut Vec<String>,
) -> Result<Option<Part>, RequestError> {
    let param = format_args!("messages[{i}].content[{j}]");
    let mut b = field::object(b, &param)?.ok_or_else(|| invalid(&param, "must be a block"))?;
    let kind = field::required_string(b.remove("type"), &format_args!("{param}.type"))?;
    Ok(match kind.as_str() {
        "text" => {
            let t = field::required_string(b.remove("text"), &format_args!("{param}.text"))?;
            (!t.is_empty()).then_some(Part::Text(t))
        }
        "image" => read_source(b, &param, foreign)?.map(Part::Image),
        "document" => {
            // A plain-text document is its text.
            let source = b.get_mut("source");
            if source
                .as_ref()
                .and_then(|s| s.get("type"))
                .and_then(Value::as_str)
                == Some("text")
            {
                source
                    .and_then(|s| s.get_mut("data"))
                    .map(Value::take)
                    .and_then(|d| match d {
                        Value::String(s) if !s.is_empty() => Some(Part::Text(s)),
                        _ => None,
                    })
            } else {
                read_source(b, &param, foreign)?.map(Part::Document)
            }
        }
        "tool_use" => {
            let id = field::required_string(b.remove("id"), &format_args!("{param}.id"))?;
            let name = field::required_string(b.remove("name"), &format_args!("{param}.name"))?;
            let arguments = match b.remove("input") {
                Some(v @ Value::Object(_)) => v,
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(_) => {
                    return Err(invalid(&format_args!("{param}.input"), "must be an object"))
                }
            };
            names.push((id.clone(), name.clone()));
            Some(Part::ToolCall(ToolCall {
                id,
                name,
                arguments,
            }))
        }
        "tool_result" => {
            let call_id = field::required_string(
                b.remove("tool_use_id"),
                &format_args!("{param}.tool_use_id"),
            )?;
            let is_error = field::boolean(
                b.get("is_error").unwrap_or(&Value::Null),
                &format_args!("{param}.is_error"),
            )?
            .unwrap_or(false);
            let mut content = Vec::new();
            match b.remove("content").unwrap_or(Value::Null) {
                Value::Null => {}
                Value::String(s) => {
                    if !s.is_empty() {
                        content.push(Part::Text(s));
                    }
                }
                Value::Array(inner) => {
                    for (k, c) in inner.into_iter().enumerate() {
                        let p = format_args!("{param}.content[{k}]");
                        let mut c =
                            field::object(c, &p)?.ok_or_else(|| invalid(&p, "must be a block"))?;
                        match c.get("type").and_then(Value::as_str) {
                            Some("text") => {
                                let t = field::required_string(c.remove("text"), &p)?;
                                if !t.is_empty() {
                                    content.push(Part::Text(t));
                                }
                            }
                            Some("image") => {
                                if let Some(m) = read_source(c, &p, foreign)? {
                                    content.push(Part::Image(m));
                                }
                            }
                            other => foreign.push(format!(
                                "{p} ({} blocks in tool results)",
                                other.unwrap_or("untyped")
                            )),
                        }
                    }
                }
                _ => {
                    return Err(invalid(
                        &format_args!("{param}.content"),
                        "must be a string or an array of blocks",
                    ))
                }
            }
            let name = names
                .iter()
                .rev()
                .find(|(id, _)| *id == call_id)
                .map(|(_, n)| n.clone());
            Some(Part::ToolResult(ToolResult {
                call_id,
                name,
                content,
                is_error,
            }))
        }
        // The model's earlier reasoning, signed: kept for an Anthropic upstream (which wants
        // it back with tool use), left out by the other writers.
        "thinking" => Some(Part::Thinking {
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
        "redacted_thinking" => Some(Part::RedactedThinking(field::required_string(
            b.remove("data"),
            &format_args!("{param}.data"),
        )?)),
        other => {
            foreign.push(format!("{param} ({other} blocks)"));
            None
        }
    })
}

/// An image's or document's `source`: base64 or URL (file ids are Anthropic's own).
fn read_source(
    mut b: Map<String, Value>,
    param: &dyn std::fmt::Display,
    foreign: &mut Vec<String>,
) -> Result<Option<Media>, RequestError> {
    let mut s = field::required_object(b.remove("source"), &format_args!("{param}.source"))?;
    let kind = field::required_string(s.remove("type"), &format_args!("{param}.source.type"))?;
    Ok(match kind.as_str() {
        "base64" => Some(Media::Base64 {
            media_type: field::required_string(
                s.remove("media_type"),
                &format_args!("{param}.source.media_type"),
            )?,
            data: field::required_string(s.remove("data"), &format_args!("{param}.source.data"))?,
        }),
        "url" => Some(Media::Url(field::required_string(
            s.remove("url"),
            &format_args!("{param}.source.url"),
        )?)),
        other => {
            foreign.push(format!("{param}.source ({other} sources)"));
            None
        }
    })
}

/// Custom tools; server tools (web search, code execution, ...) run at Anthropic.
fn read_tools(tools: Vec<Value>, foreign: &mut Vec<String>) -> Result<Vec<Tool>, RequestError> {
    super::read_tools(tools, "custom", foreign, |t, i| {
        super::read_function(t, &format_args!("tools[{i}]"), "input_schema")
    })
}

fn read_tool_choice(mut c: Map<String, Value>, r: &mut ChatRequest) -> Result<(), RequestError> {
    let kind = field::required_string(c.remove("type"), &"tool_choice.type")?;
    r.tool_choice = Some(match kind.as_str() {
        "auto" => ToolChoice::Auto,
        "any" => ToolChoice::Required,
        "none" => ToolChoice::None,
        "tool" => ToolChoice::Function(field::required_string(
            c.remove("name"),
            &"tool_choice.name",
        )?),
        _ => {
            return Err(invalid(
                &"tool_choice.type",
                "must be auto, any, tool or none",
            ))
        }
    });
    if field::boolean(
        c.get("disable_parallel_tool_use").unwrap_or(&Value::Null),
        &"tool_choice.disable_parallel_tool_use",
    )? == Some(true)
    {
        r.parallel_tool_calls = Some(false);
    }
    Ok(())
}

/// Writes the neutral request for Anthropic's `/messages`.
pub(crate) fn write(
    mut r: ChatRequest,
    drops: &mut Drops,
) -> Result<wire::MessagesRequest, RequestError> {
    drops.foreign(&mut r)?;
    if r.n.is_some() {
        drops.unsupported("n")?;
    }
    if r.seed.is_some() {
        drops.unsupported("seed")?;
    }
    if r.frequency_penalty.is_some() {
        drops.unsupported("frequency_penalty")?;
    }
    if r.presence_penalty.is_some() {
        drops.unsupported("presence_penalty")?;
    }
    if r.logprobs {
        drops.unsupported("logprobs")?;
    }
    if r.top_logprobs.is_some() {
        drops.unsupported("top_logprobs")?;
    }
    let output_config = match r.response_format.take() {
        None => None,
        Some(ResponseFormat::JsonObject) => {
            drops.unsupported("response_format (json_object; use json_schema)")?;
            None
        }
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            Some(json!({"format": {"type": "json_schema", "schema": schema}}))
        }
    };
    // Anthropic refuses text blocks that are empty or only whitespace, and a prefill that
    // ends in whitespace.
    for m in &mut r.messages {
        m.parts
            .retain(|p| !matches!(p, Part::Text(t) if t.trim().is_empty()));
    }
    if r.prefill {
        if let Some(Part::Text(t)) = r.messages.last_mut().and_then(|m| m.parts.last_mut()) {
            t.truncate(t.trim_end().len());
        }
    }
    let mut messages = Vec::with_capacity(r.messages.len());
    for m in merge_turns(std::mem::take(&mut r.messages)) {
        let mut content = Vec::with_capacity(m.parts.len());
        for p in m.parts {
            content.push(block(p, drops)?);
        }
        let content: Vec<wire::Block> = content.into_iter().flatten().collect();
        if content.is_empty() {
            continue;
        }
        messages.push(wire::Message {
            role: match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            },
            content,
        });
    }
    let mut tool_choice = r.tool_choice.take().map(|c| match c {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
    });
    if r.parallel_tool_calls == Some(false) && !r.tools.is_empty() {
        match &mut tool_choice {
            Some(c) if c["type"] == "none" => {}
            Some(c) => c["disable_parallel_tool_use"] = Value::Bool(true),
            None => tool_choice = Some(json!({"type": "auto", "disable_parallel_tool_use": true})),
        }
    }
    // Thinking: a budget (an effort level's from the table), at least Anthropic's minimum,
    // and `max_tokens` raised so it fits. `none` is Anthropic's default (no thinking).
    let budget = r
        .reasoning
        .and_then(|x| x.budget(&r.budgets))
        .map(|b| b.max(ANTHROPIC_MIN_BUDGET));
    let (thinking, max_tokens) = match (r.reasoning, budget) {
        (_, Some(b)) => (
            Some(json!({"type": "enabled", "budget_tokens": b})),
            anthropic_max_tokens(b, r.max_tokens, DEFAULT_ANTHROPIC_MAX_TOKENS),
        ),
        (Some(Reasoning::Adaptive), None) => (
            Some(json!({"type": "adaptive"})),
            r.max_tokens.unwrap_or(DEFAULT_ANTHROPIC_MAX_TOKENS),
        ),
        _ => (None, r.max_tokens.unwrap_or(DEFAULT_ANTHROPIC_MAX_TOKENS)),
    };
    Ok(wire::MessagesRequest {
        model: r.model,
        messages,
        max_tokens: Some(max_tokens),
        thinking,
        system: r
            .system
            .into_iter()
            .filter(|t| !t.trim().is_empty())
            .map(|text| wire::Block::Text { text })
            .collect(),
        temperature: r.temperature,
        top_p: r.top_p,
        top_k: r.top_k,
        stop_sequences: r.stop,
        stream: r.stream,
        tools: r
            .tools
            .into_iter()
            .map(|t| wire::Tool {
                name: t.name,
                description: t.description,
                input_schema: t
                    .parameters
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                strict: t.strict,
            })
            .collect(),
        tool_choice,
        metadata: r.user.map(|user_id| wire::Metadata { user_id }),
        output_config,
    })
}

fn source(m: Media) -> wire::Source {
    match m {
        Media::Url(url) => wire::Source::Url { url },
        Media::Base64 { media_type, data } => wire::Source::Base64 { media_type, data },
    }
}

fn block(p: Part, drops: &mut Drops) -> Result<Option<wire::Block>, RequestError> {
    Ok(Some(match p {
        Part::Text(text) => wire::Block::Text { text },
        Part::Image(m) => wire::Block::Image { source: source(m) },
        Part::Document(m) => wire::Block::Document { source: source(m) },
        Part::Audio { .. } => {
            drops.unsupported("input_audio parts")?;
            return Ok(None);
        }
        // Unsigned reasoning (another provider's, shown to the client as a thinking block)
        // would be refused: the answers it led to are in the text.
        Part::Thinking { signature, .. } if signature.is_empty() => return Ok(None),
        Part::Thinking { text, signature } => wire::Block::Thinking {
            thinking: text,
            signature,
        },
        Part::RedactedThinking(data) => wire::Block::RedactedThinking { data },
        Part::ToolCall(c) => wire::Block::ToolUse {
            id: wire::tool_use_id(&c.id),
            name: c.name,
            input: c.arguments,
        },
        Part::ToolResult(res) => {
            let mut content = Vec::with_capacity(res.content.len());
            for c in res.content {
                match c {
                    Part::Text(t) if t.trim().is_empty() => {}
                    Part::Text(text) => content.push(wire::Block::Text { text }),
                    Part::Image(m) => content.push(wire::Block::Image { source: source(m) }),
                    _ => drops.unsupported("tool result content other than text and images")?,
                }
            }
            wire::Block::ToolResult {
                tool_use_id: wire::tool_use_id(&res.call_id),
                content,
                is_error: res.is_error,
            }
        }
    }))
}
