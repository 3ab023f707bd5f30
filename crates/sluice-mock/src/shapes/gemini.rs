//! Google Gemini (Developer API): `POST /v1beta/models/{model}:generateContent`,
//! `:streamGenerateContent` (`?alt=sse`: each `data:` a whole `GenerateContentResponse`, no
//! event names, no end marker; without it a JSON array), `:countTokens`, `GET /v1beta/models`.
//!
//! Field names follow googleapis/python-genai `types.py` (`GenerateContentResponse`,
//! `Candidate`, `GenerateContentResponseUsageMetadata`, `FunctionCall`, `Model`); see also
//! /work/shared/reference/provider-formats.md §§1-6.

use std::ops::Range;

use serde_json::{json, Value};

use super::request::gemini_field;
use super::{Completion, EventSeq, Finish, SseItem};

/// Top-level request fields the API knows (camelCase and snake_case, as proto JSON accepts
/// both). Anything else is rejected as the real API does, which catches a translator that
/// leaks another provider's fields (`messages`, `max_tokens`) into a Gemini request.
const REQUEST_FIELDS: &[&str] = &[
    "contents",
    "systemInstruction",
    "system_instruction",
    "tools",
    "toolConfig",
    "tool_config",
    "safetySettings",
    "safety_settings",
    "generationConfig",
    "generation_config",
    "cachedContent",
    "cached_content",
    "labels",
    "serviceTier",
    "service_tier",
    "store",
    "model",
];

/// The data fields a `Part` may hold (exactly one of them).
const PART_DATA: &[&str] = &[
    "text",
    "inlineData",
    "inline_data",
    "fileData",
    "file_data",
    "functionCall",
    "function_call",
    "functionResponse",
    "function_response",
    "executableCode",
    "executable_code",
    "codeExecutionResult",
    "code_execution_result",
];

/// Checks a `GenerateContentRequest` the way the API would, with its messages. `Err` is the
/// message of a 400 `INVALID_ARGUMENT`.
pub(crate) fn validate(req: &Value) -> Result<(), String> {
    let Some(obj) = req.as_object() else {
        return Err("Invalid JSON payload received. Expected an object.".into());
    };
    if let Some(k) = obj.keys().find(|k| !REQUEST_FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "Invalid JSON payload received. Unknown name \"{k}\": Cannot find field."
        ));
    }
    let contents = match req.get("contents") {
        None => {
            return Err("* GenerateContentRequest.contents: contents is not specified\n".into())
        }
        Some(Value::Array(a)) if a.is_empty() => {
            return Err("* GenerateContentRequest.contents: contents is not specified\n".into())
        }
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(
                "Invalid JSON payload received. Unknown name \"contents\": Proto field is not \
                 repeating, cannot start list."
                    .into(),
            )
        }
    };
    for (i, content) in contents.iter().enumerate() {
        validate_content(content, &format!("contents[{i}]"), true)?;
    }
    if let Some(si) = gemini_field(req, "systemInstruction", "system_instruction") {
        validate_content(si, "system_instruction", false)?;
    }
    Ok(())
}

fn validate_content(content: &Value, at: &str, with_role: bool) -> Result<(), String> {
    if with_role {
        match content.get("role") {
            None => {}
            Some(Value::String(r)) if r == "user" || r == "model" => {}
            Some(_) => return Err("Please use a valid role: user, model.".into()),
        }
    }
    let parts = match content.get("parts") {
        Some(Value::Array(p)) if !p.is_empty() => p,
        _ => {
            return Err(format!(
                "* GenerateContentRequest.{at}.parts: contents.parts must not be empty.\n"
            ))
        }
    };
    for (j, part) in parts.iter().enumerate() {
        let data: Vec<&str> = PART_DATA
            .iter()
            .copied()
            .filter(|k| part.get(*k).is_some())
            .collect();
        if data.len() != 1 {
            return Err(format!(
                "* GenerateContentRequest.{at}.parts[{j}].data: required oneof field 'data' \
                 must have one initialized field\n"
            ));
        }
        let named = |camel, snake, what| {
            let v = gemini_field(part, camel, snake);
            match v.and_then(|v| v.get("name")).and_then(Value::as_str) {
                Some(n) if !n.is_empty() => Ok(v),
                _ => Err(format!(
                    "* GenerateContentRequest.{at}.parts[{j}].{what}.name: Name cannot be \
                     empty.\n"
                )),
            }
        };
        match data[0] {
            "functionCall" | "function_call" => {
                named("functionCall", "function_call", "function_call")?;
            }
            "functionResponse" | "function_response" => {
                let fr = named("functionResponse", "function_response", "function_response")?;
                if !fr
                    .and_then(|f| f.get("response"))
                    .is_some_and(Value::is_object)
                {
                    return Err(format!(
                        "* GenerateContentRequest.{at}.parts[{j}].function_response.response: \
                         must be an object (use \"output\" and \"error\" keys)\n"
                    ));
                }
            }
            "inlineData" | "inline_data" => {
                let d = gemini_field(part, "inlineData", "inline_data");
                let ok = d.is_some_and(|d| {
                    gemini_field(d, "mimeType", "mime_type").is_some() && d.get("data").is_some()
                });
                if !ok {
                    return Err(format!(
                        "* GenerateContentRequest.{at}.parts[{j}].inline_data: mime_type and \
                         data are required\n"
                    ));
                }
            }
            "fileData" | "file_data" => {
                let d = gemini_field(part, "fileData", "file_data");
                if d.is_none_or(|d| gemini_field(d, "fileUri", "file_uri").is_none()) {
                    return Err(format!(
                        "* GenerateContentRequest.{at}.parts[{j}].file_data.file_uri: \
                         file_uri is required\n"
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn finish_reason(c: &Completion) -> &'static str {
    match c.finish {
        Finish::Stop | Finish::StopSequence(_) | Finish::Tools => "STOP",
        Finish::Length => "MAX_TOKENS",
        Finish::ContentFilter => "SAFETY",
    }
}

/// `usageMetadata` after `candidates` content tokens. In a stream every chunk carries it,
/// cumulative (a client keeps the last one, never sums).
fn usage(c: &Completion, candidates: u32) -> Value {
    // `promptTokenCount` includes the cached content.
    let prompt = c.all_prompt_tokens();
    let mut u = json!({
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + c.reasoning_tokens,
        "promptTokensDetails": [{ "modality": "TEXT", "tokenCount": prompt }],
    });
    if c.cache_read > 0 {
        u["cachedContentTokenCount"] = json!(c.cache_read);
    }
    if c.reasoning_tokens > 0 {
        u["thoughtsTokenCount"] = json!(c.reasoning_tokens);
    }
    u
}

fn safety_ratings() -> Value {
    json!([
        { "category": "HARM_CATEGORY_HATE_SPEECH", "probability": "NEGLIGIBLE" },
        { "category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true },
        { "category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE" },
        { "category": "HARM_CATEGORY_SEXUALLY_EXPLICIT", "probability": "NEGLIGIBLE" },
    ])
}

fn response(c: &Completion, candidate: Value, candidates: u32) -> Value {
    json!({
        "candidates": [candidate],
        "usageMetadata": usage(c, candidates),
        "modelVersion": c.model,
        "responseId": c.id(),
    })
}

fn candidate(c: &Completion, parts: Option<Value>, finish: bool) -> Value {
    let mut cand = json!({});
    if let Some(parts) = parts {
        cand["content"] = json!({ "parts": parts, "role": "model" });
    }
    if finish {
        cand["finishReason"] = json!(finish_reason(c));
        if c.finish == Finish::ContentFilter {
            cand["safetyRatings"] = safety_ratings();
        }
    }
    cand["index"] = json!(0);
    cand
}

/// The `thoughtSignature` a thinking answer (`reasoning_tokens` > 0) puts on its function call
/// part, as Gemini 3 does: opaque base64 (with `+`, `/` and padding, which a gateway that
/// carries it through a tool-call id must give back exactly).
pub const THOUGHT_SIGNATURE: &str = "CiQBc2x1aWNlK21vY2svc2ln+/8=";

fn call_part(c: &Completion) -> Value {
    let mut part = json!({ "functionCall": { "name": c.tool_name(), "args": c.tool_input() } });
    // Gemini 3 always thinks, so it always signs; earlier models when they thought.
    if c.reasoning_tokens > 0 || super::thinking::gemini_signs(&c.model) {
        part["thoughtSignature"] = json!(THOUGHT_SIGNATURE);
    }
    part
}

/// `:generateContent`: the whole answer; a tool call is a whole `functionCall` part and, as
/// the real API reports it, finishes with `STOP`.
pub(crate) fn generate_body(c: &Completion) -> Value {
    let answer = if c.tools {
        call_part(c)
    } else {
        json!({ "text": c.text() })
    };
    let parts = match &c.thought {
        Some(t) => json!([{ "text": t.text, "thought": true }, answer]),
        None => json!([answer]),
    };
    response(c, candidate(c, Some(parts), true), c.completion_tokens())
}

/// A prompt blocked by the safety filters: HTTP 200, `promptFeedback.blockReason`, no
/// candidates (python-genai `GenerateContentResponsePromptFeedback`, `BlockedReason`).
pub(crate) fn blocked_body(model: &str, prompt_tokens: u32) -> Value {
    json!({
        "promptFeedback": { "blockReason": "SAFETY", "safetyRatings": safety_ratings() },
        "usageMetadata": { "promptTokenCount": prompt_tokens, "totalTokenCount": prompt_tokens },
        "modelVersion": model,
        "responseId": format!("blocked{prompt_tokens:09x}"),
    })
}

/// `:streamGenerateContent`: a chunk per token (or one chunk with the whole `functionCall`;
/// Gemini never streams call arguments), then a last chunk with `finishReason`.
pub(crate) struct GenerateStream {
    pub(crate) c: Completion,
}

impl GenerateStream {
    /// A first chunk with the thought summary (`includeThoughts`).
    fn thought_events(&self) -> usize {
        usize::from(self.c.thought.is_some())
    }

    fn body_events(&self) -> usize {
        if self.c.tools {
            1
        } else {
            self.c.n_tokens as usize
        }
    }
}

impl EventSeq for GenerateStream {
    fn len(&self) -> usize {
        self.thought_events() + self.body_events() + 1
    }

    fn event(&self, i: usize) -> SseItem {
        let c = &self.c;
        if i < self.thought_events() {
            let text = c.thought.as_ref().map_or("", |t| t.text.as_str());
            let part = json!([{ "text": text, "thought": true }]);
            return (
                None,
                response(c, candidate(c, Some(part), false), 0).to_string(),
            );
        }
        let i = i - self.thought_events();
        let v = if i < self.body_events() {
            if c.tools {
                response(
                    c,
                    candidate(c, Some(json!([call_part(c)])), false),
                    c.completion_tokens(),
                )
            } else {
                let part = json!([{ "text": c.token(i as u32) }]);
                response(c, candidate(c, Some(part), false), i as u32 + 1)
            }
        } else {
            let parts = (c.finish != Finish::ContentFilter).then(|| json!([{ "text": "" }]));
            response(c, candidate(c, parts, true), c.completion_tokens())
        };
        (None, v.to_string())
    }

    fn content(&self) -> Range<usize> {
        let start = self.thought_events();
        start..start + self.body_events()
    }
}

/// A stream of exactly one event (a blocked prompt's only chunk).
pub(crate) struct OneEvent(pub(crate) SseItem);

impl EventSeq for OneEvent {
    fn len(&self) -> usize {
        1
    }

    fn event(&self, _: usize) -> SseItem {
        self.0.clone()
    }

    fn content(&self) -> Range<usize> {
        0..0
    }
}

/// `:streamGenerateContent` without `alt=sse`: the same chunks as one JSON array.
pub(crate) fn array_body(seq: &dyn EventSeq) -> String {
    let mut s = String::from("[");
    for i in 0..seq.len() {
        if i > 0 {
            s.push_str(",\r\n");
        }
        s.push_str(&seq.event(i).1);
    }
    s.push(']');
    s
}

/// The models `GET /v1beta/models` lists (the mock answers for any name).
const MODELS: &[(&str, &str)] = &[
    ("mock-gemini-2.5-flash", "Mock Gemini 2.5 Flash"),
    ("mock-gemini-2.5-pro", "Mock Gemini 2.5 Pro"),
];

fn model(name: &str, display: &str) -> Value {
    json!({
        "name": format!("models/{name}"),
        "version": "001",
        "displayName": display,
        "description": "A model of the sluice mock: deterministic text, faults on request.",
        "inputTokenLimit": 1_048_576,
        "outputTokenLimit": 65_536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
        "temperature": 1.0,
        "topP": 0.95,
        "topK": 64,
        "maxTemperature": 2.0,
        "thinking": true,
    })
}

/// `GET /v1beta/models`.
pub(crate) fn models_body() -> Value {
    let models: Vec<Value> = MODELS.iter().map(|(n, d)| model(n, d)).collect();
    json!({ "models": models })
}

/// `GET /v1beta/models/{model}`.
pub(crate) fn model_body(name: &str) -> Value {
    model(name, name)
}

/// `:countTokens`.
pub(crate) fn count_tokens_body(total: u32) -> Value {
    json!({
        "totalTokens": total,
        "promptTokensDetails": [{ "modality": "TEXT", "tokenCount": total }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::Behavior;

    fn stream(spec: &str) -> GenerateStream {
        let b = Behavior::default().with_spec(spec).unwrap();
        GenerateStream {
            c: Completion::new("gemini", b"{}", None, &b),
        }
    }

    #[test]
    fn stream_usage_is_cumulative_and_text_joins() {
        let s = stream("tokens=3, reasoning_tokens=5");
        assert_eq!(s.len(), 4);
        let mut text = String::new();
        for i in 0..s.len() {
            let v: Value = serde_json::from_str(&s.event(i).1).unwrap();
            text += v["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap();
            let want = (i as u64 + 1).min(3);
            assert_eq!(v["usageMetadata"]["candidatesTokenCount"], want);
            assert_eq!(v["usageMetadata"]["thoughtsTokenCount"], 5);
            assert_eq!(v["candidates"][0].get("finishReason").is_some(), i == 3);
        }
        assert_eq!(
            json!(text),
            generate_body(&s.c)["candidates"][0]["content"]["parts"][0]["text"]
        );
    }

    #[test]
    fn tool_call_is_whole_and_finishes_with_stop() {
        let s = stream("tools, tokens=2");
        assert_eq!(s.len(), 2);
        let v: Value = serde_json::from_str(&s.event(0).1).unwrap();
        let call = &v["candidates"][0]["content"]["parts"][0]["functionCall"];
        assert_eq!(call["name"], "search");
        assert!(call["args"]["query"].is_string());
        let last: Value = serde_json::from_str(&s.event(1).1).unwrap();
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        assert!(v["candidates"][0]["content"]["parts"][0]
            .get("thoughtSignature")
            .is_none());
        // A thinking answer signs its call, streamed or not.
        let s = stream("tools, tokens=2, reasoning_tokens=3");
        let v: Value = serde_json::from_str(&s.event(0).1).unwrap();
        let part = &v["candidates"][0]["content"]["parts"][0];
        assert_eq!(part["thoughtSignature"], THOUGHT_SIGNATURE);
        assert_eq!(
            generate_body(&s.c)["candidates"][0]["content"]["parts"][0]["thoughtSignature"],
            THOUGHT_SIGNATURE
        );
    }

    #[test]
    fn validation_names_the_problem() {
        let cases = [
            (json!({}), "contents is not specified"),
            (
                json!({"contents":[],"messages":[]}),
                "Unknown name \"messages\"",
            ),
            (
                json!({"contents":[{"role":"assistant","parts":[{"text":"x"}]}]}),
                "valid role",
            ),
            (json!({"contents":[{"parts":[{}]}]}), "oneof field 'data'"),
            (
                json!({"contents":[{"parts":[{"text":"a","functionCall":{"name":"f"}}]}]}),
                "oneof",
            ),
            (
                json!({"contents":[{"parts":[{"functionResponse":{"name":"f","response":"x"}}]}]}),
                "must be an object",
            ),
            (
                json!({"contents":[{"parts":[{"functionCall":{"args":{}}}]}]}),
                "Name cannot be empty",
            ),
        ];
        for (req, says) in cases {
            let err = validate(&req).unwrap_err();
            assert!(err.contains(says), "{req}: {err}");
        }
        let ok = json!({
            "contents": [
                {"role":"user","parts":[{"text":"hi"},{"inlineData":{"mimeType":"image/png","data":"AA=="}}]},
                {"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},
                {"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":1}}}]},
            ],
            "systemInstruction": {"parts":[{"text":"be brief"}]},
            "generationConfig": {"maxOutputTokens": 5},
        });
        validate(&ok).unwrap();
    }
}
