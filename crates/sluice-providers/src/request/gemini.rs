//! Gemini requests: write the neutral conversation as a `generateContent` body, and read a
//! Gemini-native client's body into it.

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

/// Reads a Gemini-native client's `generateContent` body (the model and whether it streams
/// are in the path: `model` and `stream`).
///
/// Function calls without an id (Gemini's usual) get one, `gemini_call_{n}`, and each function
/// response takes the id of the earliest unanswered call of its name, so that providers which
/// pair calls and results by id (Anthropic, OpenAI) see them paired. A call's
/// `thoughtSignature` only Gemini takes back: it is dropped for others.
pub(crate) fn read(
    map: serde_json::Map<String, serde_json::Value>,
    model: &str,
    stream: bool,
) -> Result<ChatRequest, RequestError> {
    use super::field;
    use crate::api::Family;
    use crate::chat::{Message, Tool, ToolCall, ToolResult};
    use serde_json::Value;

    let mut r = ChatRequest::new(Family::Gemini);
    r.model = model.strip_prefix("models/").unwrap_or(model).to_string();
    r.stream = stream;
    r.include_usage = true;
    let mut contents = None;
    for (key, v) in map {
        match camel(&key).as_str() {
            "contents" => contents = field::array(v, &"contents")?,
            "systemInstruction" => {
                let mut c = field::object(v, &"systemInstruction")?.unwrap_or_default();
                let parts = field::array(
                    c.remove("parts").unwrap_or(Value::Null),
                    &"systemInstruction.parts",
                )?
                .unwrap_or_default();
                for (j, p) in parts.into_iter().enumerate() {
                    let t = p.get("text").cloned().unwrap_or(Value::Null);
                    if let Some(t) =
                        field::string(t, &format_args!("systemInstruction.parts[{j}].text"))?
                    {
                        if !t.is_empty() {
                            r.system.push(t);
                        }
                    }
                }
            }
            "generationConfig" => read_config(v, &mut r)?,
            "tools" => {
                for (i, t) in field::array(v, &"tools")?
                    .unwrap_or_default()
                    .into_iter()
                    .enumerate()
                {
                    let mut t = field::object(t, &format_args!("tools[{i}]"))?
                        .ok_or_else(|| invalid(&format_args!("tools[{i}]"), "must be an object"))?;
                    let decls = take(&mut t, "functionDeclarations").unwrap_or(Value::Null);
                    let param = format_args!("tools[{i}].functionDeclarations");
                    for (j, d) in field::array(decls, &param)?
                        .unwrap_or_default()
                        .into_iter()
                        .enumerate()
                    {
                        let param = format_args!("tools[{i}].functionDeclarations[{j}]");
                        let mut d = field::object(d, &param)?
                            .ok_or_else(|| invalid(&param, "must be an object"))?;
                        r.tools.push(Tool {
                            name: field::required_string(
                                d.remove("name"),
                                &format_args!("{param}.name"),
                            )?,
                            description: field::string(
                                d.remove("description").unwrap_or(Value::Null),
                                &format_args!("{param}.description"),
                            )?,
                            parameters: take(&mut d, "parametersJsonSchema")
                                .filter(|p| !p.is_null())
                                .or_else(|| d.remove("parameters"))
                                .filter(|p| !p.is_null()),
                            strict: None,
                        });
                    }
                    for (other, v) in t {
                        if !v.is_null() {
                            r.foreign.push(format!("tools[{i}].{other}"));
                        }
                    }
                }
            }
            "toolConfig" => {
                let fcc = get(&v, "functionCallingConfig");
                let mode = fcc
                    .and_then(|c| c.get("mode"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let allowed: Vec<String> = fcc
                    .and_then(|c| get(c, "allowedFunctionNames"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str().map(str::to_string))
                    .collect();
                r.tool_choice = match mode.as_deref() {
                    None | Some("AUTO") | Some("MODE_UNSPECIFIED") => Some(ToolChoice::Auto),
                    Some("NONE") => Some(ToolChoice::None),
                    Some("ANY") if allowed.len() == 1 => {
                        Some(ToolChoice::Function(allowed[0].clone()))
                    }
                    Some("ANY") => Some(ToolChoice::Required),
                    Some(other) => {
                        r.foreign
                            .push(format!("toolConfig.functionCallingConfig.mode ({other})"));
                        None
                    }
                };
            }
            // Safety thresholds are Gemini's own moderation knobs: no other provider has them,
            // and they only loosen or tighten what Gemini itself would block.
            "safetySettings" => {}
            _ if v.is_null() => {}
            _ => r.foreign.push(key),
        }
    }
    let contents = contents.ok_or_else(|| invalid(&"contents", "is required"))?;
    // Calls not answered yet: (name, id), oldest first.
    let mut open: Vec<(String, String)> = Vec::new();
    let mut calls = 0usize;
    for (i, c) in contents.into_iter().enumerate() {
        let param = format_args!("contents[{i}]");
        let mut c =
            field::object(c, &param)?.ok_or_else(|| invalid(&param, "must be an object"))?;
        let role = match field::string(
            c.remove("role").unwrap_or(Value::Null),
            &format_args!("contents[{i}].role"),
        )?
        .as_deref()
        {
            // `function`: the role older Gemini clients give function responses.
            None | Some("user") | Some("function") => Role::User,
            Some("model") => Role::Assistant,
            Some(_) => {
                return Err(invalid(
                    &format_args!("contents[{i}].role"),
                    "must be user, model or function",
                ))
            }
        };
        let parts = field::array(
            c.remove("parts").unwrap_or(Value::Null),
            &format_args!("contents[{i}].parts"),
        )?
        .unwrap_or_default();
        let mut out = Vec::with_capacity(parts.len());
        let mut thought = String::new();
        for (j, p) in parts.into_iter().enumerate() {
            let param = format_args!("contents[{i}].parts[{j}]");
            let mut p =
                field::object(p, &param)?.ok_or_else(|| invalid(&param, "must be an object"))?;
            let signature =
                take(&mut p, "thoughtSignature").and_then(|s| s.as_str().map(str::to_string));
            if p.get("thought").and_then(Value::as_bool) == Some(true) {
                // Thought text, as Sluice streams another provider's reasoning: the part
                // with a `thoughtSignature` closes a signed block (Anthropic's signature,
                // which only Anthropic takes back); unsigned thoughts go nowhere.
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    thought.push_str(t);
                }
                if let Some(signature) = signature {
                    // The SDK keeps the signature as bytes and sends them back in URL-safe
                    // base64; Anthropic's are in the standard alphabet.
                    let signature = signature
                        .chars()
                        .map(|c| match c {
                            '-' => '+',
                            '_' => '/',
                            c => c,
                        })
                        .collect();
                    out.push(Part::Thinking {
                        text: std::mem::take(&mut thought),
                        signature,
                    });
                }
                continue;
            }
            if let Some(t) = p.remove("text") {
                if let Some(t) = field::string(t, &format_args!("{param}.text"))? {
                    if !t.is_empty() {
                        out.push(Part::Text(t));
                    }
                }
            } else if let Some(d) = take(&mut p, "inlineData") {
                let mime = get(&d, "mimeType").and_then(Value::as_str).unwrap_or("");
                let data = field::required_string(
                    d.get("data").cloned(),
                    &format_args!("{param}.inlineData.data"),
                )?;
                let media = Media::Base64 {
                    media_type: mime.to_string(),
                    data,
                };
                out.push(if mime == "application/pdf" {
                    Part::Document(media)
                } else {
                    Part::Image(media)
                });
            } else if let Some(d) = take(&mut p, "fileData") {
                let uri = field::required_string(
                    get(&d, "fileUri").cloned(),
                    &format_args!("{param}.fileData.fileUri"),
                )?;
                let media = Media::Url(uri);
                out.push(
                    if get(&d, "mimeType").and_then(Value::as_str) == Some("application/pdf") {
                        Part::Document(media)
                    } else {
                        Part::Image(media)
                    },
                );
            } else if let Some(f) = take(&mut p, "functionCall") {
                let name = field::required_string(
                    f.get("name").cloned(),
                    &format_args!("{param}.functionCall.name"),
                )?;
                // The id form Gemini's own answers get (`shape::gemini::client_call_id`):
                // Gemini's id or a made-up one, and the signature, which only a Gemini
                // upstream takes back (its writer sends no made-up id).
                let gemini_id = f
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty());
                let id = wire::client_call_id(gemini_id, None, calls, signature.as_deref());
                calls += 1;
                open.push((name.clone(), id.clone()));
                out.push(Part::ToolCall(ToolCall {
                    id,
                    name,
                    arguments: f.get("args").cloned().unwrap_or_else(|| json!({})),
                }));
            } else if let Some(f) = take(&mut p, "functionResponse") {
                let name = field::required_string(
                    f.get("name").cloned(),
                    &format_args!("{param}.functionResponse.name"),
                )?;
                // The call it answers: by id when it names one, else the oldest open call
                // of that name.
                let id = f
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty());
                let by_id = id.and_then(|id| {
                    open.iter()
                        .position(|(_, c)| wire::gemini_call_id(c).id == Some(id))
                });
                let call_id = match by_id.or_else(|| open.iter().position(|(n, _)| *n == name)) {
                    Some(k) => open.remove(k).1,
                    None => wire::client_call_id(id, None, calls, None),
                };
                let response = f.get("response").cloned().unwrap_or_else(|| json!({}));
                // `{"output": ...}` / `{"error": ...}` as Gemini's docs say; anything else
                // as its JSON text.
                let (text, is_error) = match (response.get("output"), response.get("error")) {
                    (Some(Value::String(s)), _) => (s.clone(), false),
                    (Some(o), _) => (o.to_string(), false),
                    (None, Some(Value::String(s))) => (s.clone(), true),
                    (None, Some(e)) => (e.to_string(), true),
                    (None, None) => (response.to_string(), false),
                };
                out.push(Part::ToolResult(ToolResult {
                    call_id,
                    name: Some(name),
                    content: vec![Part::Text(text)],
                    is_error,
                }));
            } else {
                let kinds: Vec<&String> = p.keys().collect();
                r.foreign.push(format!("{param} ({kinds:?} parts)"));
            }
        }
        r.messages.push(Message { role, parts: out });
    }
    r.prefill = r.ends_with_assistant();
    Ok(r)
}

/// `generationConfig`.
fn read_config(v: serde_json::Value, r: &mut ChatRequest) -> Result<(), RequestError> {
    use super::field;
    use serde_json::Value;
    let Some(c) = field::object(v, &"generationConfig")? else {
        return Ok(());
    };
    let mut mime = None;
    let mut schema = None;
    for (key, v) in c {
        let param = format_args!("generationConfig.{key}");
        match camel(&key).as_str() {
            "maxOutputTokens" => r.max_tokens = field::uint(&v, &param)?,
            "temperature" => r.temperature = field::number(v, &param)?,
            "topP" => r.top_p = field::number(v, &param)?,
            "topK" => r.top_k = field::uint(&v, &param)?,
            "stopSequences" => r.stop = field::strings(v, &param)?,
            "candidateCount" => r.n = field::uint(&v, &param)?.filter(|&n| n != 1),
            "seed" => r.seed = field::int(&v, &param)?,
            "presencePenalty" => r.presence_penalty = field::nonzero(field::number(v, &param)?),
            "frequencyPenalty" => r.frequency_penalty = field::nonzero(field::number(v, &param)?),
            "responseMimeType" => mime = field::string(v, &param)?,
            "responseJsonSchema" | "responseSchema" => schema = Some(v),
            "thinkingConfig" => {
                let budget = get(&v, "thinkingBudget").and_then(Value::as_i64);
                let level = get(&v, "thinkingLevel").and_then(Value::as_str);
                r.reasoning = match (budget, level) {
                    (Some(0), _) => Some(Reasoning::Off),
                    (Some(b), _) if b > 0 => Some(Reasoning::Budget(b as u64)),
                    (Some(_), _) => Some(Reasoning::Adaptive),
                    (None, Some(l)) => {
                        Effort::parse(&l.to_ascii_lowercase()).map(Reasoning::Effort)
                    }
                    (None, None) => None,
                };
            }
            _ if v.is_null() => {}
            _ => r.foreign.push(format!("generationConfig.{key}")),
        }
    }
    r.response_format = match (mime.as_deref(), schema) {
        (Some("application/json"), Some(schema)) => Some(ResponseFormat::JsonSchema {
            name: None,
            schema,
            strict: None,
        }),
        (Some("application/json"), None) => Some(ResponseFormat::JsonObject),
        (None | Some("text/plain"), None) => None,
        (None | Some("text/plain"), Some(_)) => {
            r.foreign
                .push("generationConfig.responseSchema".to_string());
            None
        }
        (Some(other), _) => {
            r.foreign
                .push(format!("generationConfig.responseMimeType ({other})"));
            None
        }
    };
    Ok(())
}

/// A field under its JSON name or its proto name: Gemini's API takes both, and google-genai
/// sends some nested fields (`thinking_budget`, `parameters_json_schema`, `mime_type`) in
/// the latter.
fn get<'v>(v: &'v serde_json::Value, camel: &str) -> Option<&'v serde_json::Value> {
    v.get(camel).or_else(|| v.get(snake(camel).as_str()))
}

/// Removes a field under either name (see [`get`]).
fn take(
    m: &mut serde_json::Map<String, serde_json::Value>,
    camel: &str,
) -> Option<serde_json::Value> {
    m.remove(camel).or_else(|| m.remove(snake(camel).as_str()))
}

/// `thinkingBudget` → `thinking_budget`.
fn snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `thinking_budget` → `thinkingBudget` (a name already in camel case is kept).
fn camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}
