//! Tool calls across the round trip a client makes: the upstream's calls come back to the
//! client translated, the client sends them back in its history with the results, and the
//! upstream must get its own calls back exactly (Gemini: the same parts, thought signature
//! included, no ids it did not issue; Anthropic: each `tool_use` answered by a `tool_result`
//! in the next user message; OpenAI: the same ids and arguments).

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::request::{translate_request, RequestOptions};
use sluice_providers::response::{translate_response, ResponseOptions};
use sluice_providers::{Operation, ProviderKind};

fn fixture(path: &str) -> Bytes {
    let p = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    Bytes::from(std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}")))
}

fn json_of(b: &[u8]) -> Value {
    serde_json::from_slice(b).expect("JSON")
}

/// The client's view of an upstream answer.
fn answer(body: &Bytes, op: Operation, provider: &ProviderKind, model: &str) -> Value {
    let out = translate_response(
        body.clone(),
        &ResponseOptions {
            op,
            provider,
            model,
            now_unix: 1_767_225_600,
        },
    )
    .expect("translates");
    json_of(&out.body)
}

/// The upstream's view of a client request.
fn upstream(body: &Value, op: Operation, provider: &ProviderKind) -> Value {
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
    .unwrap_or_else(|e| panic!("{e}"));
    json_of(&up.body)
}

const WEATHER_TOOL_OPENAI: &str = r#"[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]"#;

/// An OpenAI client's next request after an answer with tool calls: the assistant message
/// as received, then one `tool` message per call.
fn openai_next_turn(answer: &Value, results: &[&str]) -> Value {
    let message = answer["choices"][0]["message"].clone();
    let mut messages = vec![
        json!({"role": "user", "content": "Weather in Paris and Rome?"}),
        message.clone(),
    ];
    for (call, result) in message["tool_calls"]
        .as_array()
        .expect("tool calls")
        .iter()
        .zip(results)
    {
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": result}));
    }
    json!({
        "model": "m",
        "messages": messages,
        "tools": serde_json::from_str::<Value>(WEATHER_TOOL_OPENAI).expect("json"),
    })
}

/// An Anthropic client's next request: the assistant content as received, then a user
/// message with one `tool_result` per `tool_use`.
fn anthropic_next_turn(answer: &Value, results: &[&str]) -> Value {
    let content = answer["content"].clone();
    let uses: Vec<&Value> = content
        .as_array()
        .expect("content")
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .collect();
    let results: Vec<Value> = uses
        .iter()
        .zip(results)
        .map(|(u, r)| json!({"type": "tool_result", "tool_use_id": u["id"], "content": r}))
        .collect();
    json!({
        "model": "m",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": results},
        ],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    })
}

fn gemini_model_parts(response: &Bytes) -> Value {
    json_of(response)["candidates"][0]["content"]["parts"].clone()
}

#[test]
fn openai_client_gemini_upstream() {
    let g = ProviderKind::Gemini;
    let response = fixture("responses/gemini_function_calls.json");
    let a = answer(
        &response,
        Operation::ChatCompletions,
        &g,
        "gemini-3-pro-preview",
    );
    assert_eq!(a["choices"][0]["finish_reason"], "tool_calls");
    let next = openai_next_turn(&a, &["18C", "24C"]);
    let body = upstream(&next, Operation::ChatCompletions, &g);
    let contents = body["contents"].as_array().expect("contents");
    assert_eq!(contents.len(), 3);
    // The model's turn goes back exactly as Gemini sent it: one Content, the signature on the
    // first call, no made-up ids.
    assert_eq!(contents[1]["role"], "model");
    assert_eq!(contents[1]["parts"], gemini_model_parts(&response));
    // Both responses in one Content, in the calls' order, named.
    assert_eq!(
        contents[2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"output": "18C"}}},
            {"functionResponse": {"name": "get_weather", "response": {"output": "24C"}}},
        ]})
    );
}

#[test]
fn anthropic_client_gemini_upstream() {
    let g = ProviderKind::Gemini;
    let response = fixture("responses/gemini_function_calls.json");
    let a = answer(&response, Operation::Messages, &g, "gemini-3-pro-preview");
    assert_eq!(a["stop_reason"], "tool_use");
    let next = anthropic_next_turn(&a, &["18C", "24C"]);
    let body = upstream(&next, Operation::Messages, &g);
    assert_eq!(body["contents"][1]["parts"], gemini_model_parts(&response));
    assert_eq!(
        body["contents"][2]["parts"][1],
        json!({"functionResponse": {"name": "get_weather", "response": {"output": "24C"}}})
    );
}

#[test]
fn ids_gemini_issued_go_back_to_gemini() {
    let g = ProviderKind::Gemini;
    let response = Bytes::from(
        json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"id": "fc-1", "name": "get_weather", "args": {"city": "Paris"}}}
            ]}, "finishReason": "STOP"}],
            "responseId": "r1"
        })
        .to_string(),
    );
    let a = answer(
        &response,
        Operation::ChatCompletions,
        &g,
        "gemini-3-pro-preview",
    );
    let next = openai_next_turn(&a, &["18C"]);
    let body = upstream(&next, Operation::ChatCompletions, &g);
    assert_eq!(body["contents"][1]["parts"], gemini_model_parts(&response));
    assert_eq!(
        body["contents"][2]["parts"][0]["functionResponse"]["id"],
        "fc-1"
    );
}

#[test]
fn openai_client_anthropic_upstream() {
    let c = ProviderKind::anthropic();
    let response = fixture("responses/anthropic_tool_use.json");
    let a = answer(
        &response,
        Operation::ChatCompletions,
        &c,
        "claude-sonnet-4-5",
    );
    assert_eq!(a["choices"][0]["finish_reason"], "tool_calls");
    let next = openai_next_turn(&a, &["15C"]);
    let body = upstream(&next, Operation::ChatCompletions, &c);
    // The assistant turn is Anthropic's own content again.
    assert_eq!(
        body["messages"][1]["content"],
        json_of(&response)["content"]
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": [{"type": "text", "text": "15C"}]}
        ]})
    );
}

#[test]
fn anthropic_client_openai_upstream() {
    let o = ProviderKind::OpenAi;
    let response = fixture("responses/openai_chat_tool_calls.json");
    let original = json_of(&response)["choices"][0]["message"]["tool_calls"].clone();
    let a = answer(&response, Operation::Messages, &o, "gpt-4o-mini");
    let next = anthropic_next_turn(&a, &["cold", "mild"]);
    let body = upstream(&next, Operation::Messages, &o);
    let calls = body["messages"][1]["tool_calls"]
        .as_array()
        .expect("tool calls")
        .clone();
    assert_eq!(calls.len(), 2);
    for (sent, orig) in calls.iter().zip(original.as_array().expect("calls")) {
        assert_eq!(sent["id"], orig["id"]);
        assert_eq!(sent["function"]["name"], orig["function"]["name"]);
        // The same arguments (OpenAI's string is re-serialised from the object).
        let args = |v: &Value| -> Value {
            serde_json::from_str(v["function"]["arguments"].as_str().expect("string"))
                .expect("JSON")
        };
        assert_eq!(args(sent), args(orig));
    }
    assert_eq!(
        body["messages"][2],
        json!({"role": "tool", "tool_call_id": "call_abc123", "content": "cold"})
    );
    assert_eq!(body["messages"][3]["tool_call_id"], "call_def456");
}

/// A conversation started on Gemini falls back to Anthropic: the Gemini call ids (with the
/// signature carried in them) are valid Anthropic ids and pair each call with its result.
#[test]
fn gemini_history_falls_back_to_anthropic() {
    let g = ProviderKind::Gemini;
    let c = ProviderKind::anthropic();
    let a = answer(
        &fixture("responses/gemini_function_calls.json"),
        Operation::ChatCompletions,
        &g,
        "gemini-3-pro-preview",
    );
    let next = openai_next_turn(&a, &["18C", "24C"]);
    let body = upstream(&next, Operation::ChatCompletions, &c);
    let uses = body["messages"][1]["content"]
        .as_array()
        .expect("content")
        .clone();
    let results = body["messages"][2]["content"]
        .as_array()
        .expect("content")
        .clone();
    for (u, r) in uses.iter().zip(&results) {
        let id = u["id"].as_str().expect("id");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{id}"
        );
        assert_eq!(r["tool_use_id"], u["id"]);
    }
}
