//! Golden tests: every documented request fixture translated for every other family, and
//! every documented response fixture translated back, compared with the reviewed output in
//! `tests/golden/` (JSON compared as values, so key order does not matter).
//!
//! `SLUICE_BLESS=1 cargo test -p sluice-providers --test golden` rewrites the goldens;
//! without it a missing or different golden fails, listing every difference.

use std::path::PathBuf;

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::request::{translate_request, RequestOptions};
use sluice_providers::response::{translate_response, ResponseOptions};
use sluice_providers::{Operation, ProviderKind};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn fixture(path: &str) -> Bytes {
    let p = dir().join("fixtures").join(path);
    Bytes::from(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

fn json_of(b: &[u8]) -> Value {
    serde_json::from_slice(b)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(b)))
}

/// Compares `actual` with the golden file, or writes it under `SLUICE_BLESS`. Returns a
/// description of the difference.
fn check(golden: &str, actual: &Value) -> Option<String> {
    let p = dir().join("golden").join(golden);
    let pretty = serde_json::to_string_pretty(actual).expect("serialises") + "\n";
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::create_dir_all(p.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(&p, pretty).expect("write golden");
        return None;
    }
    let Ok(expected) = std::fs::read(&p) else {
        return Some(format!(
            "{golden}: missing (SLUICE_BLESS=1 writes it); actual:\n{pretty}"
        ));
    };
    let expected = json_of(&expected);
    (expected != *actual).then(|| {
        format!(
            "{golden}: differs\n--- expected\n{}\n+++ actual\n{pretty}",
            serde_json::to_string_pretty(&expected).expect("serialises")
        )
    })
}

fn azure() -> ProviderKind {
    ProviderKind::Azure {
        api_version: "2024-10-21".into(),
    }
}

fn provider(name: &str) -> ProviderKind {
    match name {
        "openai" => ProviderKind::OpenAi,
        "azure" => azure(),
        "anthropic" => ProviderKind::anthropic(),
        "gemini" => ProviderKind::Gemini,
        _ => unreachable!("{name}"),
    }
}

#[test]
fn requests() {
    use Operation::*;
    let cases: &[(&str, Operation, &[&str])] = &[
        (
            "openai_chat_basic",
            ChatCompletions,
            &["anthropic", "gemini"],
        ),
        (
            "openai_chat_tools",
            ChatCompletions,
            &["anthropic", "gemini"],
        ),
        (
            "openai_chat_gemini_history",
            ChatCompletions,
            &["gemini", "anthropic"],
        ),
        (
            "openai_chat_images",
            ChatCompletions,
            &["anthropic", "gemini"],
        ),
        (
            "openai_chat_json_schema",
            ChatCompletions,
            &["anthropic", "gemini"],
        ),
        ("anthropic_messages_basic", Messages, &["openai", "gemini"]),
        (
            "anthropic_messages_tools",
            Messages,
            &["openai", "azure", "gemini"],
        ),
        ("anthropic_messages_images", Messages, &["openai", "gemini"]),
        ("anthropic_count_tokens", CountTokens, &["gemini"]),
        // Reasoning: effort ↔ budget, signed thinking back to Anthropic, Gemini levels.
        (
            "openai_chat_reasoning",
            ChatCompletions,
            &["anthropic", "gemini"],
        ),
        (
            "openai_chat_reasoning_gemini3",
            ChatCompletions,
            &["gemini"],
        ),
        ("openai_chat_reasoning_none", ChatCompletions, &["gemini"]),
        (
            "anthropic_messages_thinking",
            Messages,
            &["openai", "gemini"],
        ),
        (
            "anthropic_messages_adaptive",
            Messages,
            &["openai", "gemini"],
        ),
        ("anthropic_messages_effort", Messages, &["openai", "gemini"]),
    ];
    let mut failures = Vec::new();
    for (name, op, providers) in cases {
        let body = fixture(&format!("requests/{name}.json"));
        for p in *providers {
            let provider = provider(p);
            let up = translate_request(
                &body,
                &RequestOptions {
                    op: *op,
                    provider: &provider,
                    model: None,
                    drop_unsupported: false,
                    stream_usage: false,
                    prefill: None,
                    reasoning_budgets: None,
                },
            )
            .unwrap_or_else(|e| panic!("{name} → {p}: {e}"));
            assert!(up.translated, "{name} → {p}");
            let actual = json!({
                "path": up.path,
                "stream": up.stream,
                "model": up.model,
                "dropped": up.dropped,
                "client_wants_usage": up.client_wants_usage,
                "body": json_of(&up.body),
            });
            failures.extend(check(&format!("requests/{name}__{p}.json"), &actual));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn responses() {
    use Operation::*;
    let cases: &[(&str, Operation, &str, &str)] = &[
        (
            "anthropic_message",
            ChatCompletions,
            "anthropic",
            "claude-sonnet-4-5",
        ),
        (
            "anthropic_tool_use",
            ChatCompletions,
            "anthropic",
            "claude-sonnet-4-5",
        ),
        ("gemini_text", ChatCompletions, "gemini", "gemini-2.5-flash"),
        (
            "gemini_function_calls",
            ChatCompletions,
            "gemini",
            "gemini-3-pro-preview",
        ),
        (
            "gemini_blocked",
            ChatCompletions,
            "gemini",
            "gemini-2.0-flash",
        ),
        (
            "gemini_max_tokens",
            ChatCompletions,
            "gemini",
            "gemini-2.0-flash",
        ),
        ("openai_chat_completion", Messages, "openai", "gpt-4o"),
        ("openai_chat_tool_calls", Messages, "azure", "gpt-4o-mini"),
        (
            "gemini_function_calls",
            Messages,
            "gemini",
            "gemini-3-pro-preview",
        ),
        ("gemini_text", Messages, "gemini", "gemini-2.5-flash"),
        (
            "anthropic_thinking_tool_use",
            ChatCompletions,
            "anthropic",
            "claude-sonnet-4-5",
        ),
        (
            "openai_chat_reasoning",
            Messages,
            "openai",
            "deepseek-reasoner",
        ),
        (
            "gemini_count_tokens",
            CountTokens,
            "gemini",
            "gemini-2.0-flash",
        ),
    ];
    let mut failures = Vec::new();
    for (name, op, p, model) in cases {
        let body = fixture(&format!("responses/{name}.json"));
        let provider = provider(p);
        let out = translate_response(
            body.clone(),
            &ResponseOptions {
                op: *op,
                provider: &provider,
                model,
                now_unix: 1_767_225_600,
            },
        )
        .unwrap_or_else(|e| panic!("{name} for {op:?}: {e}"));
        let usage = out.usage.map(|u| {
            json!({"input": u.input, "output": u.output, "cached_input": u.cached_input, "reasoning": u.reasoning})
        });
        let actual = json!({ "usage": usage, "body": json_of(&out.body) });
        let client = op.family().as_str();
        failures.extend(check(&format!("responses/{name}__{client}.json"), &actual));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
