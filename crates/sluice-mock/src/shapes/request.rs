//! What a request body asks for, read per API: output caps, stop sequences, the function to
//! call, the prompt's size and an assistant prefill.

use serde_json::Value;

use super::{json_len, request_seed, Api, Ask};

/// The chat-style endpoints whose bodies the generator reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// OpenAI `/v1/chat/completions`.
    Chat,
    /// OpenAI `/v1/completions`.
    Completions,
    /// OpenAI `/v1/responses`.
    Responses,
    /// Anthropic `/v1/messages`.
    Messages,
    /// Gemini `:generateContent` / `:streamGenerateContent`.
    Gemini,
    /// Bedrock `/converse` / `/converse-stream`.
    Converse,
}

/// A trailing assistant message the answer should continue from.
#[derive(Debug)]
pub(crate) struct Prefill {
    pub(crate) text: String,
    /// The request without it: what the whole answer is the answer to.
    pub(crate) without: Value,
}

fn str_field<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// Gemini's proto JSON accepts camelCase and snake_case names alike.
pub(crate) fn gemini_field<'a>(v: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    v.get(camel).or_else(|| v.get(snake))
}

/// The text of a message `content`: a string, or text parts / blocks only (`None` when it
/// holds anything else, which is then not a prefill the mock can continue).
fn plain_text(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(
                |p| match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => Some(t.as_str()),
                    _ => None,
                },
            )
            .collect(),
        _ => None,
    }
}

/// The prefill of a chat request, if it has one: Anthropic, any trailing assistant message;
/// OpenAI-compatible, a trailing assistant message with `continue_final_message: true` (vLLM)
/// or `"prefix": true` (DeepSeek). A plain trailing assistant message in OpenAI's API is a
/// finished turn, not a prefill. Gemini documents no prefill.
pub(crate) fn prefill(kind: Kind, req: &Value) -> Option<Prefill> {
    let last = req.get("messages")?.as_array()?.last()?;
    if last.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    match kind {
        Kind::Messages => {}
        Kind::Converse => {
            // Converse content blocks are `{"text": …}` without a type.
            let blocks = last.get("content")?.as_array()?;
            let text = blocks
                .iter()
                .map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Option<String>>()?;
            let mut without = req.clone();
            if let Some(Value::Array(m)) = without.get_mut("messages") {
                m.pop();
            }
            return Some(Prefill { text, without });
        }
        Kind::Chat => {
            let flagged = req.get("continue_final_message") == Some(&Value::Bool(true))
                || last.get("prefix") == Some(&Value::Bool(true));
            if !flagged || last.get("tool_calls").is_some_and(|t| !t.is_null()) {
                return None;
            }
        }
        _ => return None,
    }
    let text = plain_text(last.get("content"))?;
    let mut without = req.clone();
    if let Some(Value::Array(m)) = without.get_mut("messages") {
        m.pop();
    }
    Some(Prefill { text, without })
}

fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

fn stop_sequences(kind: Kind, req: &Value) -> Vec<String> {
    match kind {
        Kind::Chat | Kind::Completions => strings(req.get("stop")),
        Kind::Messages => strings(req.get("stop_sequences")),
        Kind::Gemini => strings(
            gemini_field(req, "generationConfig", "generation_config")
                .and_then(|g| gemini_field(g, "stopSequences", "stop_sequences")),
        ),
        Kind::Converse => strings(req.pointer("/inferenceConfig/stopSequences")),
        Kind::Responses => Vec::new(),
    }
}

fn max_tokens(kind: Kind, req: &Value) -> Option<u64> {
    let names: &[&str] = match kind {
        Kind::Chat => &["max_completion_tokens", "max_tokens"],
        Kind::Completions | Kind::Messages => &["max_tokens"],
        Kind::Responses => &["max_output_tokens"],
        Kind::Gemini => {
            return gemini_field(req, "generationConfig", "generation_config")
                .and_then(|g| gemini_field(g, "maxOutputTokens", "max_output_tokens"))
                .and_then(Value::as_u64)
        }
        Kind::Converse => return req.pointer("/inferenceConfig/maxTokens")?.as_u64(),
    };
    names
        .iter()
        .find_map(|n| req.get(*n).and_then(Value::as_u64))
}

/// The function the `tools` knob calls: the one the request forces, else the first it
/// declares, else the mock's default.
fn tool_name(kind: Kind, req: &Value) -> Option<String> {
    let forced = match kind {
        Kind::Chat => str_field(req, "/tool_choice/function/name"),
        Kind::Responses => str_field(req, "/tool_choice/name"),
        Kind::Messages => str_field(req, "/tool_choice/name"),
        Kind::Gemini => gemini_field(req, "toolConfig", "tool_config")
            .and_then(|t| gemini_field(t, "functionCallingConfig", "function_calling_config"))
            .and_then(|f| gemini_field(f, "allowedFunctionNames", "allowed_function_names"))
            .and_then(|a| a.get(0))
            .and_then(Value::as_str),
        Kind::Converse => str_field(req, "/toolConfig/toolChoice/tool/name"),
        Kind::Completions => None,
    };
    if let Some(name) = forced {
        return Some(name.to_string());
    }
    if kind == Kind::Converse {
        let tools = req.pointer("/toolConfig/tools")?.as_array()?;
        return tools
            .iter()
            .find_map(|t| str_field(t, "/toolSpec/name"))
            .map(str::to_string);
    }
    let tools = req.get("tools")?.as_array()?;
    let first = match kind {
        Kind::Chat => tools.iter().find_map(|t| str_field(t, "/function/name")),
        Kind::Responses | Kind::Messages => tools.iter().find_map(|t| str_field(t, "/name")),
        Kind::Gemini => tools.iter().find_map(|t| {
            gemini_field(t, "functionDeclarations", "function_declarations")?
                .get(0)?
                .get("name")?
                .as_str()
        }),
        Kind::Completions | Kind::Converse => None,
    };
    first.map(str::to_string)
}

/// Prompt tokens: bytes / 4 of what the prompt is made of. Anthropic and Gemini count only
/// the conversation (system, messages/contents, tools), so `count_tokens` / `countTokens`
/// agree with the usage of the same conversation; OpenAI counts the whole body.
pub(crate) fn prompt_tokens(api: Api, req: &Value, body_len: usize) -> u32 {
    let bytes = match api {
        Api::OpenAi => body_len,
        Api::Anthropic => ["system", "messages", "tools"]
            .iter()
            .filter_map(|k| req.get(*k))
            .map(json_len)
            .sum(),
        Api::Gemini => [
            ("contents", "contents"),
            ("systemInstruction", "system_instruction"),
            ("tools", "tools"),
        ]
        .iter()
        .filter_map(|(c, s)| gemini_field(req, c, s))
        .map(json_len)
        .sum(),
        // Converse (`toolConfig`) or an InvokeModel Anthropic body (`tools`).
        Api::Bedrock => ["system", "messages", "tools", "toolConfig"]
            .iter()
            .filter_map(|k| req.get(*k))
            .map(json_len)
            .sum(),
    };
    (bytes / 4).max(1) as u32
}

/// Everything the generator needs from a request, and its prefill. `model` is the body's or
/// (Gemini) the path's.
pub(crate) fn ask(
    kind: Kind,
    api: Api,
    req: &Value,
    model: &str,
    body_len: usize,
) -> (Ask, Option<Prefill>) {
    let prefill = prefill(kind, req);
    // The seed of a continued request is the seed of the request without its prefill, so the
    // continuation continues the very answer the prefill is a prefix of.
    let seed_of = prefill.as_ref().map_or(req, |p| &p.without);
    // The model is in the path for these: it is part of what the request asks.
    let extra = if matches!(kind, Kind::Gemini | Kind::Converse) {
        model
    } else {
        ""
    };
    let ask = Ask {
        model: model.to_string(),
        seed: request_seed(seed_of, extra),
        prompt_tokens: prompt_tokens(api, req, body_len),
        max_tokens: max_tokens(kind, req),
        stop: stop_sequences(kind, req),
        prefill: prefill.as_ref().map(|p| p.text.clone()),
        tool_name: tool_name(kind, req),
    };
    (ask, prefill)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_prefill_needs_a_flag() {
        let plain = json!({"model":"m","messages":[
            {"role":"user","content":"hi"},{"role":"assistant","content":"the river"}]});
        assert!(prefill(Kind::Chat, &plain).is_none());
        let mut vllm = plain.clone();
        vllm["continue_final_message"] = json!(true);
        vllm["add_generation_prompt"] = json!(false);
        let p = prefill(Kind::Chat, &vllm).unwrap();
        assert_eq!(p.text, "the river");
        assert_eq!(
            request_seed(&p.without, ""),
            request_seed(
                &json!({"model":"m","messages":[{"role":"user","content":"hi"}]}),
                ""
            )
        );
        let mut deepseek = plain.clone();
        deepseek["messages"][1]["prefix"] = json!(true);
        assert_eq!(prefill(Kind::Chat, &deepseek).unwrap().text, "the river");
    }

    #[test]
    fn anthropic_prefill_from_blocks() {
        let req = json!({"model":"c","max_tokens":5,"messages":[
            {"role":"user","content":"hi"},
            {"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]});
        assert_eq!(prefill(Kind::Messages, &req).unwrap().text, "ab");
        let tool = json!({"messages":[{"role":"assistant","content":[{"type":"tool_use"}]}]});
        assert!(prefill(Kind::Messages, &tool).is_none());
    }

    #[test]
    fn tool_names_forced_or_declared() {
        let o = json!({"tools":[{"type":"function","function":{"name":"get_weather"}}]});
        assert_eq!(tool_name(Kind::Chat, &o).as_deref(), Some("get_weather"));
        let forced = json!({"tools":[{"type":"function","function":{"name":"a"}},
            {"type":"function","function":{"name":"b"}}],
            "tool_choice":{"type":"function","function":{"name":"b"}}});
        assert_eq!(tool_name(Kind::Chat, &forced).as_deref(), Some("b"));
        let g = json!({"tools":[{"functionDeclarations":[{"name":"lookup"}]}]});
        assert_eq!(tool_name(Kind::Gemini, &g).as_deref(), Some("lookup"));
        let a = json!({"tools":[{"name":"x","input_schema":{}}]});
        assert_eq!(tool_name(Kind::Messages, &a).as_deref(), Some("x"));
    }

    #[test]
    fn anthropic_prompt_tokens_ignore_delivery_fields() {
        let msgs = json!([{"role":"user","content":"hello there, how are you today?"}]);
        let count = json!({"model":"c","messages":msgs});
        let create = json!({"model":"c","max_tokens":100,"stream":true,"messages":msgs});
        assert_eq!(
            prompt_tokens(Api::Anthropic, &count, 10),
            prompt_tokens(Api::Anthropic, &create, 99)
        );
    }
}
