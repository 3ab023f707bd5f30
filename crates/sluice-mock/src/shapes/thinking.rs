//! The mock reasons: when a request asks for thinking (Anthropic `thinking`, Gemini
//! `thinkingConfig`, an OpenAI-compatible `reasoning_effort`), the answer starts with a
//! thought in the API's own shape, signed where the real API signs it (Anthropic thinking
//! blocks; Gemini 3 function calls), and the next request's history must bring the signed
//! blocks back unchanged, or the mock refuses it with the real API's 400.
//!
//! Anthropic's signature is the mock's own MAC over the thinking text (base64, as opaque as
//! the real one): an altered text or signature fails. Gemini's is [`THOUGHT_SIGNATURE`] on
//! the call part (Gemini 3 models sign every call, as they always think).

use base64::Engine as _;
use serde_json::Value;

use super::gemini::THOUGHT_SIGNATURE;
use super::request::{gemini_field, Kind};

/// A thought the answer starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Thought {
    /// The reasoning text.
    pub(crate) text: String,
    /// Anthropic's signature over it (empty for APIs that sign no reasoning text).
    pub(crate) signature: String,
}

/// The words a thought is made of, picked by the request's seed.
const WORDS: &[&str] = &[
    "first", "check", "what", "the", "user", "asks", "then", "pick", "a", "tool", "and", "answer",
    "briefly",
];

/// How many words a thought has: also its reasoning tokens.
pub(crate) const THOUGHT_WORDS: u32 = 8;

/// Whether the request asks to see the model's reasoning.
pub(crate) fn wanted(kind: Kind, req: &Value) -> bool {
    match kind {
        Kind::Messages => matches!(
            req.pointer("/thinking/type").and_then(Value::as_str),
            Some("enabled" | "adaptive")
        ),
        Kind::Gemini => gemini_field(req, "generationConfig", "generation_config")
            .and_then(|g| gemini_field(g, "thinkingConfig", "thinking_config"))
            .and_then(|t| gemini_field(t, "includeThoughts", "include_thoughts"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        // vLLM and DeepSeek answer with `reasoning_content` (OpenAI itself shows none).
        Kind::Chat => req
            .get("reasoning_effort")
            .and_then(Value::as_str)
            .is_some_and(|e| e != "none"),
        Kind::Completions | Kind::Responses | Kind::Converse => false,
    }
}

/// The thought for a request whose answer has `seed`.
pub(crate) fn thought(kind: Kind, seed: u64) -> Thought {
    let words: Vec<&str> = (0..THOUGHT_WORDS)
        .map(|i| {
            WORDS[((seed >> 11).wrapping_add(u64::from(i) * 31) % WORDS.len() as u64) as usize]
        })
        .collect();
    let text = format!("Thinking: {}.", words.join(" "));
    let signature = if kind == Kind::Messages {
        sign(&text)
    } else {
        String::new()
    };
    Thought { text, signature }
}

/// The mock's signature over a thinking text: FNV-1a of a secret and the text, twice over,
/// as standard base64 (with `+`, `/` or `=` more often than not, which a carrier must keep).
pub(crate) fn sign(text: &str) -> String {
    let mut h1: u64 = 0xcbf2_9ce4_8422_2325;
    let mut h2: u64 = 0x8422_2325_cbf2_9ce4;
    for &b in b"sluice-mock-thinking-key".iter().chain(text.as_bytes()) {
        h1 = (h1 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        h2 = (h2 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3 | 1 << 41);
    }
    let mut bytes = Vec::with_capacity(19);
    bytes.extend_from_slice(b"\x12\xa4\x01");
    bytes.extend_from_slice(&h1.to_be_bytes());
    bytes.extend_from_slice(&h2.to_be_bytes());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Whether a Gemini model signs its function calls: Gemini 3 and later.
pub(crate) fn gemini_signs(model: &str) -> bool {
    sluice_providers::reasoning::gemini_takes_level(model)
}

/// Anthropic's checks of a request that asks for thinking: the budget (at least 1024, below
/// `max_tokens`), every thinking block's signature, and a tool-using final assistant turn
/// that starts with its thinking. `Err` is the real API's 400 message.
pub(crate) fn check_anthropic(req: &Value) -> Result<(), String> {
    let thinking = req.get("thinking");
    let kind = thinking.and_then(|t| t.get("type")).and_then(Value::as_str);
    if kind == Some("enabled") {
        let budget = thinking
            .and_then(|t| t.get("budget_tokens"))
            .and_then(Value::as_u64)
            .ok_or("thinking.enabled.budget_tokens: Field required")?;
        if budget < 1024 {
            return Err(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                    .into(),
            );
        }
        let max = req.get("max_tokens").and_then(Value::as_u64).unwrap_or(0);
        if max <= budget {
            return Err("`max_tokens` must be greater than `thinking.budget_tokens`. Please \
                        consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
                .into());
        }
    }
    if !matches!(kind, Some("enabled" | "adaptive")) {
        // Without thinking the API ignores earlier thinking blocks.
        return Ok(());
    }
    let messages = req.get("messages").and_then(Value::as_array);
    for (i, m) in messages.into_iter().flatten().enumerate() {
        if m.get("role").and_then(Value::as_str) != Some("assistant") {
            continue;
        }
        let Some(blocks) = m.get("content").and_then(Value::as_array) else {
            continue;
        };
        for (j, b) in blocks.iter().enumerate() {
            if b.get("type").and_then(Value::as_str) != Some("thinking") {
                continue;
            }
            let text = b.get("thinking").and_then(Value::as_str).unwrap_or("");
            let sig = b.get("signature").and_then(Value::as_str).unwrap_or("");
            if sig != sign(text) {
                return Err(format!(
                    "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                ));
            }
        }
    }
    // The final assistant turn, when it called tools, must start with its thinking.
    let last = messages.and_then(|ms| {
        ms.iter()
            .enumerate()
            .rev()
            .find(|(_, m)| m.get("role").and_then(Value::as_str) == Some("assistant"))
    });
    if let Some((i, m)) = last {
        let blocks = m.get("content").and_then(Value::as_array);
        let uses_tools = blocks
            .into_iter()
            .flatten()
            .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"));
        let first = blocks
            .and_then(|b| b.first())
            .and_then(|b| b.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("text");
        if uses_tools && first != "thinking" && first != "redacted_thinking" {
            return Err(format!(
                "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but \
                 found `{first}`. When `thinking` is enabled, a final `assistant` message must \
                 start with a thinking block (preceeding the lastmost set of `tool_use` and \
                 `tool_result` blocks). We recommend you include thinking blocks from previous \
                 turns. To avoid this requirement, disable `thinking`. Please consult our \
                 documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
            ));
        }
    }
    Ok(())
}

/// Gemini 3's check of the calls in a request's history: the first `functionCall` part of
/// each model turn must carry the signature the mock gave it. `Err` is the real API's 400
/// `INVALID_ARGUMENT` message.
pub(crate) fn check_gemini(req: &Value, model: &str) -> Result<(), String> {
    if !gemini_signs(model) {
        return Ok(());
    }
    let contents = req.get("contents").and_then(Value::as_array);
    let mut position = 0;
    for c in contents.into_iter().flatten() {
        let parts = c.get("parts").and_then(Value::as_array);
        let mut first_call = true;
        for p in parts.into_iter().flatten() {
            position += 1;
            let Some(call) = gemini_field(p, "functionCall", "function_call") else {
                continue;
            };
            if !first_call {
                continue;
            }
            first_call = false;
            match gemini_field(p, "thoughtSignature", "thought_signature").and_then(Value::as_str) {
                Some(THOUGHT_SIGNATURE) => {}
                Some(_) => return Err("Corrupted thought signature.".into()),
                None => {
                    let name = call.get("name").and_then(Value::as_str).unwrap_or("");
                    return Err(format!(
                        "Function call is missing a thought_signature in functionCall parts. \
                         This is required for tools to work correctly, and missing \
                         thought_signature may lead to degraded model performance. Additional \
                         data, function call `default_api:{name}` , position {position}. Please \
                         refer to https://ai.google.dev/gemini-api/docs/thought-signatures for \
                         more details."
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn signatures_bind_the_text() {
        let t = thought(Kind::Messages, 42);
        assert_eq!(t.signature, sign(&t.text));
        assert_ne!(sign("a"), sign("b"));
        assert!(thought(Kind::Gemini, 42).signature.is_empty());
    }

    #[test]
    fn anthropic_refuses_missing_or_altered_thinking() {
        let t = thought(Kind::Messages, 7);
        let turn = |blocks: Value| {
            json!({"max_tokens": 5000, "thinking": {"type": "enabled", "budget_tokens": 2048},
                   "messages": [{"role": "user", "content": "q"},
                                {"role": "assistant", "content": blocks},
                                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}]})
        };
        let call = json!({"type": "tool_use", "id": "t", "name": "f", "input": {}});
        let good =
            turn(json!([{"type": "thinking", "thinking": t.text, "signature": t.signature}, call]));
        assert_eq!(check_anthropic(&good), Ok(()));
        let altered = turn(
            json!([{"type": "thinking", "thinking": "changed", "signature": t.signature}, call]),
        );
        assert!(check_anthropic(&altered)
            .unwrap_err()
            .contains("Invalid `signature`"));
        let missing = turn(json!([call]));
        assert!(check_anthropic(&missing)
            .unwrap_err()
            .contains("Expected `thinking` or `redacted_thinking`, but found `tool_use`"));
        let mut small = good.clone();
        small["max_tokens"] = json!(2048);
        assert!(check_anthropic(&small)
            .unwrap_err()
            .contains("must be greater than `thinking.budget_tokens`"));
    }

    #[test]
    fn gemini_3_refuses_a_call_without_its_signature() {
        let req = |sig: Option<&str>| {
            let mut part = json!({"functionCall": {"name": "search", "args": {}}});
            if let Some(s) = sig {
                part["thoughtSignature"] = json!(s);
            }
            json!({"contents": [{"role": "user", "parts": [{"text": "q"}]},
                                {"role": "model", "parts": [part]}]})
        };
        assert_eq!(
            check_gemini(&req(Some(THOUGHT_SIGNATURE)), "gemini-3-pro"),
            Ok(())
        );
        assert_eq!(
            check_gemini(&req(Some("AAAA")), "gemini-3-pro"),
            Err("Corrupted thought signature.".into())
        );
        assert!(check_gemini(&req(None), "gemini-3-pro")
            .unwrap_err()
            .contains("`default_api:search` , position 2"));
        assert_eq!(check_gemini(&req(None), "gemini-2.5-flash"), Ok(()));
    }
}

#[cfg(test)]
mod shape_tests {
    use serde_json::Value;

    use super::super::request::Kind;
    use super::super::{anthropic, gemini, openai, Completion, EventSeq};
    use super::sign;
    use crate::knobs::Behavior;

    fn thinking(kind: Kind, spec: &str) -> Completion {
        let b = Behavior::default().with_spec(spec).unwrap();
        let mut c = Completion::new("gemini-3-pro", b"{}", None, &b);
        c.think(kind);
        c
    }

    fn events(s: &dyn EventSeq) -> Vec<(Option<&'static str>, Value)> {
        (0..s.len())
            .map(|i| {
                let (n, d) = s.event(i);
                (n, serde_json::from_str(&d).unwrap_or(Value::String(d)))
            })
            .collect()
    }

    #[test]
    fn anthropic_streams_a_signed_thinking_block_first() {
        let s = anthropic::MessageStream {
            c: thinking(Kind::Messages, "tools, tokens=2"),
        };
        let ev = events(&s);
        let t = s.c.thought.clone().unwrap();
        assert_eq!(ev[1].1["content_block"]["type"], "thinking");
        let text: String = ev[2..4]
            .iter()
            .map(|(_, v)| v["delta"]["thinking"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(text, t.text);
        assert_eq!(ev[4].1["delta"]["type"], "signature_delta");
        assert_eq!(ev[4].1["delta"]["signature"], sign(&t.text).as_str());
        assert_eq!(ev[5].1["type"], "content_block_stop");
        assert_eq!(ev[6].1["content_block"]["type"], "tool_use");
        assert_eq!(ev[6].1["index"], 1);
        // Content (what `stream_error_after` counts) is still the answer's deltas.
        let c = s.content();
        assert_eq!(ev[c.start].1["delta"]["type"], "input_json_delta");
        let body = anthropic::message_body(&s.c);
        assert_eq!(body["content"][0]["signature"], t.signature.as_str());
        assert_eq!(body["content"][1]["type"], "tool_use");
        assert_eq!(body["usage"]["output_tokens"], 2 + super::THOUGHT_WORDS);
    }

    #[test]
    fn openai_compatible_answers_carry_reasoning_content() {
        let s = openai::ChatStream {
            c: thinking(Kind::Chat, "tokens=2"),
            include_usage: true,
        };
        let ev = events(&s);
        let t = s.c.thought.clone().unwrap();
        assert_eq!(
            ev[1].1["choices"][0]["delta"]["reasoning_content"],
            t.text.as_str()
        );
        assert!(ev[2].1["choices"][0]["delta"]["content"].is_string());
        let body = openai::chat_body(&s.c);
        assert_eq!(
            body["choices"][0]["message"]["reasoning_content"],
            t.text.as_str()
        );
        assert_eq!(
            body["usage"]["completion_tokens_details"]["reasoning_tokens"],
            super::THOUGHT_WORDS
        );
    }

    #[test]
    fn gemini_sends_thought_parts_and_signs_calls() {
        let s = gemini::GenerateStream {
            c: thinking(Kind::Gemini, "tools, tokens=2"),
        };
        let ev = events(&s);
        let part = &ev[0].1["candidates"][0]["content"]["parts"][0];
        assert_eq!(part["thought"], true);
        let call = &ev[1].1["candidates"][0]["content"]["parts"][0];
        assert_eq!(call["thoughtSignature"], gemini::THOUGHT_SIGNATURE);
        let body = gemini::generate_body(&s.c);
        assert_eq!(
            body["candidates"][0]["content"]["parts"][0]["thought"],
            true
        );
        assert_eq!(
            body["usageMetadata"]["thoughtsTokenCount"],
            super::THOUGHT_WORDS
        );
    }
}
