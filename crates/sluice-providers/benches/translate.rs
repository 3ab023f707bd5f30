//! Cost per request of request and non-streaming response translation, in one run: the
//! passthrough paths (same bytes; a borrowed scan of the request, a targeted usage scan of
//! the response) against the edit and cross-family paths they avoid.
//!
//! Inputs: an agent-like chat request of ~12 KB (system prompt, 24 turns, two tools, a
//! parallel tool-call turn with its results) in OpenAI and Anthropic form, and the documented
//! response fixtures.
//!
//! Run: `cargo bench -p sluice-providers --bench translate -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};
use sluice_providers::request::{translate_request, RequestOptions};
use sluice_providers::response::{translate_response, ResponseOptions};
use sluice_providers::{Operation, ProviderKind};

fn fixture(path: &str) -> Bytes {
    let p = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    Bytes::from(std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}")))
}

const PARAGRAPH: &str = "The gateway forwards server-sent events as they arrive, cancels the upstream the moment a client leaves, keeps slow clients from growing memory and retries only what is provably safe. ";

fn openai_conversation() -> Value {
    let mut tools: Value =
        serde_json::from_slice(&fixture("requests/openai_chat_tools.json")).expect("fixture");
    let mut messages = vec![json!({"role": "system", "content": PARAGRAPH.repeat(4)})];
    for i in 0..12 {
        messages.push(json!({"role": "user", "content": format!("Question {i}: {}", PARAGRAPH)}));
        messages.push(
            json!({"role": "assistant", "content": format!("Answer {i}: {}", PARAGRAPH.repeat(2))}),
        );
    }
    messages.extend(
        tools["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .cloned(),
    );
    tools["messages"] = Value::Array(messages);
    tools["temperature"] = json!(0.3);
    tools
}

fn anthropic_conversation() -> Value {
    let up = translate_request(
        &Bytes::from(openai_conversation().to_string()),
        &opts(Operation::ChatCompletions, &ProviderKind::anthropic(), None),
    )
    .expect("translates");
    serde_json::from_slice(&up.body).expect("JSON")
}

fn opts<'a>(
    op: Operation,
    provider: &'a ProviderKind,
    model: Option<&'a str>,
) -> RequestOptions<'a> {
    RequestOptions {
        op,
        provider,
        model,
        drop_unsupported: false,
        stream_usage: false,
        prefill: None,
        reasoning_budgets: None,
    }
}

fn requests(c: &mut Criterion) {
    let openai = Bytes::from(openai_conversation().to_string());
    let anthropic = Bytes::from(anthropic_conversation().to_string());
    let o = ProviderKind::OpenAi;
    let a = ProviderKind::anthropic();
    let g = ProviderKind::Gemini;
    let mut group = c.benchmark_group("request");
    group.throughput(Throughput::Bytes(openai.len() as u64));
    let cases: [(&str, &Bytes, RequestOptions<'_>); 6] = [
        (
            "openai_passthrough",
            &openai,
            opts(Operation::ChatCompletions, &o, None),
        ),
        (
            "openai_model_rename",
            &openai,
            opts(Operation::ChatCompletions, &o, Some("gpt-4o-mini")),
        ),
        (
            "openai_to_anthropic",
            &openai,
            opts(Operation::ChatCompletions, &a, None),
        ),
        (
            "openai_to_gemini",
            &openai,
            opts(Operation::ChatCompletions, &g, None),
        ),
        (
            "anthropic_passthrough",
            &anthropic,
            opts(Operation::Messages, &a, None),
        ),
        (
            "anthropic_to_openai",
            &anthropic,
            opts(Operation::Messages, &o, None),
        ),
    ];
    for (name, body, o) in cases {
        group.bench_function(name, |b| {
            b.iter(|| translate_request(black_box(body), black_box(&o)).expect("translates"))
        });
    }
    group.finish();
}

fn responses(c: &mut Criterion) {
    let o = ProviderKind::OpenAi;
    let a = ProviderKind::anthropic();
    let g = ProviderKind::Gemini;
    let mut group = c.benchmark_group("response");
    let cases = [
        (
            "openai_passthrough_usage",
            "openai_chat_completion",
            Operation::ChatCompletions,
            &o,
        ),
        (
            "anthropic_passthrough_usage",
            "anthropic_tool_use",
            Operation::Messages,
            &a,
        ),
        (
            "anthropic_to_openai",
            "anthropic_tool_use",
            Operation::ChatCompletions,
            &a,
        ),
        (
            "gemini_to_openai",
            "gemini_function_calls",
            Operation::ChatCompletions,
            &g,
        ),
        (
            "openai_to_anthropic",
            "openai_chat_tool_calls",
            Operation::Messages,
            &o,
        ),
        (
            "gemini_to_anthropic",
            "gemini_text",
            Operation::Messages,
            &g,
        ),
    ];
    for (name, file, op, provider) in cases {
        let body = fixture(&format!("responses/{file}.json"));
        let opts = ResponseOptions {
            op,
            provider,
            model: "m",
            now_unix: 1_767_225_600,
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                translate_response(black_box(body.clone()), black_box(&opts)).expect("translates")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, requests, responses);
criterion_main!(benches);
