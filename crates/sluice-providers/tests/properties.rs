//! Properties over generated inputs: text conversations survive a trip through another
//! family with their roles and texts; Gemini call ids carry their id and thought signature
//! back; the readers of upstream bytes never panic and keep messages bounded.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use proptest::prelude::*;
use serde_json::{json, Value};
use sluice_providers::request::{translate_request, RequestOptions};
use sluice_providers::shape::gemini::{client_call_id, gemini_call_id};
use sluice_providers::{Family, Operation, ProviderKind};

fn translate(body: &Value, op: Operation, provider: &ProviderKind) -> Value {
    let up = translate_request(
        &Bytes::from(body.to_string()),
        &RequestOptions {
            op,
            provider,
            model: None,
            drop_unsupported: false,
            stream_usage: false,
            prefill: None,
            reasoning_budgets: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {body}"));
    serde_json::from_slice(&up.body).expect("JSON")
}

/// Text a provider keeps as it is: not empty, not only whitespace.
fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 .,!?\n\"\\\\/é😀]{1,40}".prop_filter("visible", |s| !s.trim().is_empty())
}

/// An OpenAI chat request: system/developer messages, then user and assistant turns
/// alternating from a user turn to a user turn; content as a string or as text parts.
fn conversation() -> impl Strategy<Value = (Vec<String>, Vec<(String, String)>, Value)> {
    (
        prop::collection::vec(text(), 0..3),
        prop::collection::vec((text(), any::<bool>()), 1..5),
        1u64..100_000,
    )
        .prop_map(|(system, turns, max_tokens)| {
            let mut messages = Vec::new();
            for (i, s) in system.iter().enumerate() {
                let role = if i % 2 == 0 { "system" } else { "developer" };
                messages.push(json!({"role": role, "content": s}));
            }
            let mut expected = Vec::new();
            let n = turns.len() * 2 - 1;
            for i in 0..n {
                let (t, as_parts) = &turns[i / 2];
                let (role, t) = if i % 2 == 0 {
                    ("user", t.clone())
                } else {
                    ("assistant", format!("{t} (reply)"))
                };
                let content = if *as_parts && role == "user" {
                    json!([{"type": "text", "text": t}])
                } else {
                    json!(t)
                };
                messages.push(json!({"role": role, "content": content}));
                expected.push((role.to_string(), t));
            }
            let body =
                json!({"model": "m", "messages": messages, "max_completion_tokens": max_tokens});
            (system, expected, body)
        })
}

fn openai_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

proptest! {
    /// OpenAI → Anthropic → (an Anthropic client's body) → OpenAI keeps every role and text.
    #[test]
    fn openai_anthropic_openai_keeps_roles_and_text((system, expected, body) in conversation()) {
        let anthropic = translate(&body, Operation::ChatCompletions, &ProviderKind::anthropic());
        let back = translate(&anthropic, Operation::Messages, &ProviderKind::OpenAi);
        let messages = back["messages"].as_array().expect("messages");
        let (sys, turns): (Vec<&Value>, Vec<&Value>) =
            messages.iter().partition(|m| m["role"] == "system");
        let sys_texts: Vec<String> = match sys.first() {
            None => Vec::new(),
            Some(m) => match &m["content"] {
                Value::String(s) => vec![s.clone()],
                Value::Array(parts) => parts.iter().map(|p| p["text"].as_str().unwrap_or_default().to_string()).collect(),
                _ => Vec::new(),
            },
        };
        prop_assert_eq!(sys_texts, system);
        let got: Vec<(String, String)> = turns
            .iter()
            .map(|m| (m["role"].as_str().unwrap_or_default().to_string(), openai_text(&m["content"])))
            .collect();
        prop_assert_eq!(got, expected);
        prop_assert_eq!(&back["max_completion_tokens"], &body["max_completion_tokens"]);
    }

    /// OpenAI → Gemini: the same turns as user/model Contents, the system prompt as
    /// systemInstruction.
    #[test]
    fn openai_gemini_keeps_roles_and_text((system, expected, body) in conversation()) {
        let g = translate(&body, Operation::ChatCompletions, &ProviderKind::Gemini);
        let got: Vec<(String, String)> = g["contents"]
            .as_array()
            .expect("contents")
            .iter()
            .map(|c| {
                let role = if c["role"] == "model" { "assistant" } else { "user" };
                let text: String = c["parts"].as_array().expect("parts").iter().filter_map(|p| p["text"].as_str()).collect();
                (role.to_string(), text)
            })
            .collect();
        prop_assert_eq!(got, expected);
        let sys: Vec<String> = g["systemInstruction"]["parts"]
            .as_array()
            .map(|p| p.iter().filter_map(|p| p["text"].as_str()).map(str::to_string).collect())
            .unwrap_or_default();
        prop_assert_eq!(sys, system);
    }

    /// A Gemini call's id and thought signature survive the client's round trip, in ids that
    /// Anthropic accepts.
    #[test]
    fn gemini_call_ids_round_trip(
        id in prop::option::of("[A-Za-z0-9-]{1,24}"),
        response_id in prop::option::of("[ -~]{0,24}"),
        index in 0usize..64,
        signature in prop::option::of(prop::collection::vec(any::<u8>(), 1..96)),
    ) {
        let sig = signature.map(|b| base64(&b));
        let client = client_call_id(id.as_deref(), response_id.as_deref(), index, sig.as_deref());
        prop_assert!(client.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{}", client);
        let back = gemini_call_id(&client);
        prop_assert_eq!(back.id, id.as_deref());
        prop_assert_eq!(back.thought_signature, sig);
    }

    /// Whatever an upstream sends, classification ends in a bounded message.
    #[test]
    fn classify_any_body(status in 400u16..600, body in prop::collection::vec(any::<u8>(), 0..2048)) {
        let status = StatusCode::from_u16(status).expect("status");
        for family in [Family::OpenAi, Family::Anthropic, Family::Gemini] {
            let e = sluice_providers::error::classify(family, status, &HeaderMap::new(), &body, 0);
            prop_assert!(e.message.len() <= 1024);
            prop_assert!(!e.message.is_empty());
        }
    }

    /// Usage scanning of arbitrary bytes (including ones that look like usage) never panics.
    #[test]
    fn scan_any_body(prefix in "[ -~]{0,64}", tail in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut body = prefix.into_bytes();
        body.extend_from_slice(b"\"usage\": ");
        body.extend_from_slice(&tail);
        for family in [Family::OpenAi, Family::Anthropic, Family::Gemini] {
            let _ = sluice_providers::usage::scan(family, &body);
        }
    }
}

#[test]
fn the_test_base64_is_standard() {
    assert_eq!(base64(b"M"), "TQ==");
    assert_eq!(base64(b"Ma"), "TWE=");
    assert_eq!(base64(b"Man"), "TWFu");
    assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
}
