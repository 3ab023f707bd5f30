//! Writes the neutral conversation as a Bedrock Converse body.

use serde_json::{json, Map, Value};

use super::shape::{
    CachePoint, ContentBlock, ConverseRequest, DocumentBlock, InferenceConfig, MediaBlock, Message,
    Source, SystemBlock, Tool, ToolConfig, ToolResult, ToolResultContent, ToolSpec, ToolUse,
};
use crate::chat::{ChatRequest, Media, Part, ResponseFormat, Role, ToolChoice};
use crate::reasoning::Reasoning;
use crate::request::{Drops, RequestError};

/// A tool-use id Bedrock accepts (`[a-zA-Z0-9_.:-]{1,64}`): other characters become `_`, and
/// the id is cut at 64. The same call id always gives the same Bedrock id, so a call and its
/// result still pair up.
pub(crate) fn tool_use_id(id: &str) -> String {
    let mut out: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// Bedrock's image format for a media type (`image/png` → `png`).
fn image_format(media_type: &str) -> Option<&'static str> {
    Some(match media_type.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpeg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => return None,
    })
}

/// The format of an S3 image from its key's extension (`jpeg` when it has none Bedrock
/// knows).
fn s3_image_format(uri: &str) -> &'static str {
    let ext = uri.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "png" => "png",
        "gif" => "gif",
        "webp" => "webp",
        _ => "jpeg",
    }
}

/// Where media's bytes are for Bedrock: inline base64 or `s3://`; other URLs Bedrock cannot
/// fetch.
fn source(
    m: Media,
    drops: &mut Drops,
    what: &str,
) -> Result<Option<(Source, String)>, RequestError> {
    Ok(match m {
        Media::Base64 { media_type, data } => Some((Source::Bytes(data), media_type)),
        Media::Url(uri) if uri.starts_with("s3://") => {
            let mt = String::new();
            Some((Source::S3Location { uri }, mt))
        }
        Media::Url(_) => {
            drops.unsupported(format!(
                "{what} by URL (Bedrock takes them inline as base64 or from s3://)"
            ))?;
            None
        }
    })
}

fn image(m: Media, drops: &mut Drops) -> Result<Option<MediaBlock>, RequestError> {
    let Some((source, media_type)) = source(m, drops, "images")? else {
        return Ok(None);
    };
    let format = match &source {
        Source::S3Location { uri } => s3_image_format(uri),
        Source::Bytes(_) => match image_format(&media_type) {
            Some(f) => f,
            None => {
                drops.unsupported(format!(
                    "images of type {media_type} (Bedrock takes png, jpeg, gif, webp)"
                ))?;
                return Ok(None);
            }
        },
    };
    Ok(Some(MediaBlock {
        format: format.to_string(),
        source,
    }))
}

/// Writes `r` for Converse / ConverseStream.
pub(crate) fn write(
    mut r: ChatRequest,
    drops: &mut Drops,
) -> Result<ConverseRequest, RequestError> {
    drops.foreign(&mut r)?;
    for (set, param) in [
        (r.n.is_some(), "n"),
        (r.seed.is_some(), "seed"),
        (r.frequency_penalty.is_some(), "frequency_penalty"),
        (r.presence_penalty.is_some(), "presence_penalty"),
        (r.logprobs, "logprobs"),
        (r.top_logprobs.is_some(), "top_logprobs"),
        // Converse spells thinking per model family (`additionalModelRequestFields`): not
        // mapped yet, so refused as before rather than silently ignored.
        (
            r.reasoning.is_some_and(|x| x != Reasoning::Off),
            Reasoning::param(r.source),
        ),
    ] {
        if set {
            drops.unsupported(param)?;
        }
    }
    if r.parallel_tool_calls == Some(false) && !r.tools.is_empty() {
        drops.unsupported(r.parallel_param())?;
    }
    let output_config = match r.response_format.take() {
        None => None,
        Some(ResponseFormat::JsonObject) => {
            drops.unsupported("response_format (json_object; use json_schema)")?;
            None
        }
        // botocore `OutputConfig.textFormat`: the schema goes as JSON text.
        Some(ResponseFormat::JsonSchema { name, schema, .. }) => {
            let mut js = Map::new();
            js.insert("schema".into(), Value::String(schema.to_string()));
            if let Some(n) = name {
                js.insert("name".into(), Value::String(n));
            }
            Some(json!({"textFormat": {"type": "json_schema", "structure": {"jsonSchema": js}}}))
        }
    };
    // Bedrock refuses blank text blocks (skipped below), and (for Anthropic models) a prefill
    // that ends in whitespace.
    if r.prefill {
        let last = r.messages.last_mut().map(|m| m.parts.iter_mut().rev());
        for p in last.into_iter().flatten() {
            match p {
                Part::Text(t) if t.trim().is_empty() => continue,
                Part::Text(t) => t.truncate(t.trim_end().len()),
                _ => {}
            }
            break;
        }
    }
    let has_tool_blocks = r.messages.iter().any(|m| {
        m.parts
            .iter()
            .any(|p| matches!(p, Part::ToolCall(_) | Part::ToolResult(_)))
    });

    let points = std::mem::take(&mut r.cache_points);
    let mut messages: Vec<Message> = Vec::with_capacity(r.messages.len());
    let mut documents = 0usize;
    for (i, m) in std::mem::take(&mut r.messages).into_iter().enumerate() {
        // A breakpoint after the first `after` parts goes before part `after`.
        let mut marks: Vec<usize> = points
            .messages
            .iter()
            .filter(|(mi, _)| *mi == i)
            .map(|(_, after)| *after)
            .collect();
        marks.sort_unstable();
        let mut marks = marks.into_iter().peekable();
        let mut content = Vec::with_capacity(m.parts.len());
        for (j, p) in m.parts.into_iter().enumerate() {
            while marks.next_if(|&after| after <= j).is_some() {
                content.push(ContentBlock::CachePoint(CachePoint::DEFAULT));
            }
            if matches!(&p, Part::Text(t) if t.trim().is_empty()) {
                continue;
            }
            if let Some(b) = block(p, drops, &mut documents)? {
                content.push(b);
            }
        }
        for _ in marks {
            content.push(ContentBlock::CachePoint(CachePoint::DEFAULT));
        }
        // A message of cache points only says nothing.
        if content
            .iter()
            .all(|b| matches!(b, ContentBlock::CachePoint(_)))
        {
            continue;
        }
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        match messages.last_mut() {
            Some(prev) if prev.role == role => prev.content.extend(content),
            _ => messages.push(Message { role, content }),
        }
    }

    let mut system = Vec::with_capacity(r.system.len() + points.system.len());
    for (i, t) in r.system.drain(..).enumerate() {
        if !t.trim().is_empty() {
            system.push(SystemBlock::Text(t));
        }
        for _ in points.system.iter().filter(|&&after| after == i + 1) {
            system.push(SystemBlock::CachePoint(CachePoint::DEFAULT));
        }
    }

    let tool_choice = match r.tool_choice.take() {
        None => None,
        Some(ToolChoice::Auto) => Some(json!({"auto": {}})),
        Some(ToolChoice::Required) => Some(json!({"any": {}})),
        Some(ToolChoice::Function(name)) => Some(json!({"tool": {"name": name}})),
        Some(ToolChoice::None) => {
            // Converse has no "none": sending no tools says it, unless the history has tool
            // blocks (Bedrock then requires the tool config).
            if has_tool_blocks {
                drops.unsupported("tool_choice none (with tool calls in the conversation)")?;
            } else {
                r.tools.clear();
            }
            None
        }
    };
    let tool_config = (!r.tools.is_empty()).then(|| {
        let mut tools = Vec::with_capacity(r.tools.len() + points.tools.len());
        for (i, t) in r.tools.drain(..).enumerate() {
            tools.push(Tool::ToolSpec(ToolSpec {
                name: t.name,
                description: t.description.filter(|d| !d.is_empty()),
                input_schema: json!({
                    "json": t.parameters.unwrap_or_else(|| json!({"type": "object", "properties": {}}))
                }),
            }));
            for _ in points.tools.iter().filter(|&&after| after == i + 1) {
                tools.push(Tool::CachePoint(CachePoint::DEFAULT));
            }
        }
        ToolConfig { tools, tool_choice }
    });

    let inference = InferenceConfig {
        max_tokens: r.max_tokens,
        temperature: r.temperature.take(),
        top_p: r.top_p.take(),
        stop_sequences: std::mem::take(&mut r.stop),
    };
    // Converse has no top_k; the Anthropic (and most other) models on Bedrock take it here.
    let additional = r.top_k.map(|k| {
        let mut m = Map::new();
        m.insert("top_k".into(), Value::from(k));
        m
    });
    // `user` has no Converse field that means the same (`requestMetadata` labels invocation
    // logs); it labels the caller, it does not shape the answer.
    Ok(ConverseRequest {
        messages,
        system,
        inference_config: (!inference.is_empty()).then_some(inference),
        tool_config,
        additional_model_request_fields: additional,
        output_config,
    })
}

fn block(
    p: Part,
    drops: &mut Drops,
    documents: &mut usize,
) -> Result<Option<ContentBlock>, RequestError> {
    Ok(Some(match p {
        Part::Text(t) => ContentBlock::Text(t),
        Part::Image(m) => match image(m, drops)? {
            Some(b) => ContentBlock::Image(b),
            None => return Ok(None),
        },
        Part::Document(m) => {
            let Some((source, _)) = source(m, drops, "documents")? else {
                return Ok(None);
            };
            *documents += 1;
            ContentBlock::Document(DocumentBlock {
                // Only PDFs reach the neutral conversation as documents.
                format: "pdf".to_string(),
                name: format!("document-{documents}"),
                source,
            })
        }
        Part::Audio { .. } => {
            drops.unsupported("input_audio parts")?;
            return Ok(None);
        }
        // Thinking is not asked of Bedrock (refused above), so an earlier turn's signed
        // thinking has nothing to go back to: the answers it led to are in the text.
        Part::Thinking { .. } | Part::RedactedThinking(_) => return Ok(None),
        Part::ToolCall(c) => ContentBlock::ToolUse(ToolUse {
            tool_use_id: tool_use_id(&c.id),
            name: c.name,
            input: c.arguments,
        }),
        Part::ToolResult(res) => {
            let mut content = Vec::with_capacity(res.content.len().max(1));
            for c in res.content {
                match c {
                    Part::Text(t) if t.trim().is_empty() => {}
                    Part::Text(t) => content.push(ToolResultContent::Text(t)),
                    Part::Image(m) => {
                        if let Some(b) = image(m, drops)? {
                            content.push(ToolResultContent::Image(b));
                        }
                    }
                    _ => drops.unsupported("tool result content other than text and images")?,
                }
            }
            if content.is_empty() {
                // Bedrock wants content; an empty answer is still an answer.
                content.push(ToolResultContent::Text("(empty)".to_string()));
            }
            ContentBlock::ToolResult(ToolResult {
                tool_use_id: tool_use_id(&res.call_id),
                content,
                status: res.is_error.then_some("error"),
            })
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_use_ids_fit_bedrock() {
        assert_eq!(tool_use_id("call_abc-1.2:3"), "call_abc-1.2:3");
        assert_eq!(tool_use_id("toolu/ä b"), "toolu___b");
        assert_eq!(tool_use_id(&"x".repeat(100)).len(), 64);
        assert_eq!(tool_use_id(""), "_");
    }
}
