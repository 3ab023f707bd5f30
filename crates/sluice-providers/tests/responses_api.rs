//! The OpenAI Responses API to Anthropic and Gemini upstreams: request goldens (a client's
//! `/v1/responses` body in each upstream's format), whole-response goldens (each upstream's
//! answer as a `response` object), stream goldens (each upstream stream as Responses events),
//! every stream read back the way the OpenAI SDK accumulates one (sequence numbers, items,
//! `.done` events that repeat the deltas, the final response), re-chunked at every byte
//! boundary with the same events, and the signed-thinking round trip (a reasoning item's
//! `encrypted_content` back to Anthropic as the block it came from).
//!
//! `SLUICE_BLESS=1 cargo test -p sluice-providers --test responses_api` rewrites the goldens.

mod stream_support;

use std::path::PathBuf;

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::request::{translate_request, RequestOptions};
use sluice_providers::response::{translate_response, ResponseOptions};
use sluice_providers::stream::{Emitted, EventKind};
use sluice_providers::{Operation, ProviderKind, Usage};
use stream_support::*;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn read(path: &str) -> Bytes {
    let p = dir().join("fixtures").join(path);
    Bytes::from(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

fn json_of(b: &[u8]) -> Value {
    serde_json::from_slice(b)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(b)))
}

fn bless() -> bool {
    std::env::var_os("SLUICE_BLESS").is_some()
}

/// Compares `actual` with a JSON golden (as values), or writes it under `SLUICE_BLESS`.
fn check_json(golden: &str, actual: &Value) -> Option<String> {
    let p = dir().join("golden").join(golden);
    let pretty = serde_json::to_string_pretty(actual).expect("serialises") + "\n";
    if bless() {
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

fn provider(name: &str) -> ProviderKind {
    match name {
        "anthropic" => ProviderKind::anthropic(),
        "gemini" => ProviderKind::Gemini,
        _ => unreachable!("{name}"),
    }
}

fn request_opts(provider: &ProviderKind) -> RequestOptions<'_> {
    RequestOptions {
        op: Operation::Responses,
        provider,
        model: None,
        drop_unsupported: false,
        stream_usage: false,
        prefill: None,
        reasoning_budgets: None,
    }
}

// ---- Requests ----

#[test]
fn request_goldens() {
    let mut failures = Vec::new();
    for name in [
        "openai_responses_basic",
        "openai_responses_tools",
        "openai_responses_text",
    ] {
        let body = read(&format!("requests/{name}.json"));
        for p in ["anthropic", "gemini"] {
            let provider = provider(p);
            let up = translate_request(&body, &request_opts(&provider))
                .unwrap_or_else(|e| panic!("{name} → {p}: {e}"));
            assert!(up.translated, "{name} → {p}");
            assert!(
                up.client_wants_usage,
                "a Responses stream always ends with usage"
            );
            let actual = json!({
                "path": up.path,
                "stream": up.stream,
                "model": up.model,
                "dropped": up.dropped,
                "body": json_of(&up.body),
            });
            failures.extend(check_json(&format!("requests/{name}__{p}.json"), &actual));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_signed_thinking_goes_back_to_anthropic_exactly() {
    let body = read("requests/openai_responses_tools.json");
    let anthropic = provider("anthropic");
    let up = translate_request(&body, &request_opts(&anthropic)).unwrap();
    let b = json_of(&up.body);
    let assistant = &b["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"][0],
        json!({"type": "thinking", "thinking": "The user wants Paris weather.\nI should call \"get_weather\" with city=Paris.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/="})
    );
    assert_eq!(
        assistant["content"][1],
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"})
    );
    assert_eq!(assistant["content"][2]["type"], "tool_use");
    // `reasoning.effort: low` is the default table's 2048 budget, `max_output_tokens` kept
    // above it.
    assert_eq!(
        b["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert!(b["max_tokens"].as_u64().unwrap() > 2048, "{b}");
    // Gemini never gets Anthropic's signatures.
    let gemini = provider("gemini");
    let g = json_of(
        &translate_request(&body, &request_opts(&gemini))
            .unwrap()
            .body,
    );
    assert!(!g.to_string().contains("EqQBCgIYAhIM"), "{g}");
}

#[test]
fn what_only_openai_has_is_a_400_naming_it_or_dropped() {
    let anthropic = provider("anthropic");
    for (body, param) in [
        (
            json!({"model": "m", "input": "hi", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (
            json!({"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}),
            "tools[0] (web_search tools)",
        ),
        (
            json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}),
            "input[0] (item_reference items)",
        ),
    ] {
        let body = Bytes::from(body.to_string());
        let err = translate_request(&body, &request_opts(&anthropic)).unwrap_err();
        assert_eq!(err.code(), "unsupported_parameter", "{err}");
        assert!(err.to_string().contains(param), "{err}");
        let mut o = request_opts(&anthropic);
        o.drop_unsupported = true;
        let up = translate_request(&body, &o).unwrap();
        assert_eq!(up.dropped, [param]);
    }
    // Wrong shapes name the Responses field.
    for (body, param) in [
        (json!({"model": "m"}), "`input`"),
        (json!({"model": "m", "input": 3}), "`input`"),
        (
            json!({"model": "m", "input": [{"type": "function_call", "name": "f"}]}),
            "`input[0].call_id`",
        ),
        (
            json!({"model": "m", "input": "x", "reasoning": {"effort": "max"}}),
            "`reasoning.effort`",
        ),
    ] {
        let err = translate_request(&Bytes::from(body.to_string()), &request_opts(&anthropic))
            .unwrap_err();
        assert!(err.to_string().contains(param), "{param}: {err}");
        assert_eq!(err.status(), 400);
    }
}

// ---- Whole responses ----

#[test]
fn response_goldens() {
    let cases = [
        ("anthropic_message", "anthropic", "claude-sonnet-4-5"),
        ("anthropic_tool_use", "anthropic", "claude-sonnet-4-5"),
        (
            "anthropic_thinking_tool_use",
            "anthropic",
            "claude-sonnet-4-5",
        ),
        ("gemini_text", "gemini", "gemini-2.5-flash"),
        ("gemini_function_calls", "gemini", "gemini-3-pro-preview"),
        ("gemini_max_tokens", "gemini", "gemini-2.0-flash"),
    ];
    let mut failures = Vec::new();
    for (name, p, model) in cases {
        let provider = provider(p);
        let out = translate_response(
            read(&format!("responses/{name}.json")),
            &ResponseOptions {
                op: Operation::Responses,
                provider: &provider,
                model,
                now_unix: 1_767_225_600,
            },
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let body = json_of(&out.body);
        assert_eq!(body["object"], "response", "{name}");
        let usage = out.usage.expect("usage");
        assert_eq!(body["usage"]["input_tokens"], usage.input, "{name}");
        assert_eq!(
            body["usage"]["output_tokens_details"]["reasoning_tokens"], usage.reasoning,
            "{name}"
        );
        failures.extend(check_json(
            &format!("responses/{name}__responses.json"),
            &body,
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// ---- Streams ----

/// A Responses stream read back as the OpenAI SDK's accumulator reads it, checking the
/// protocol on every event: names equal to the data's `type`, `sequence_number` counting
/// from 0, every delta on an announced item, `.done` events repeating the deltas, and the
/// final response's output equal to the items as accumulated.
#[derive(Debug, Default)]
struct Accumulated {
    /// The items at their `output_item.done`.
    items: Vec<Value>,
    /// Text, reasoning and arguments per output index, from the deltas.
    deltas: Vec<String>,
    /// `response.completed` / `response.incomplete` / `response.failed`.
    last: Option<(String, Value)>,
    error: Option<Value>,
}

fn accumulate(out: &[Emitted]) -> Accumulated {
    let mut a = Accumulated::default();
    for (i, e) in out.iter().enumerate() {
        let (name, data) = decode_one(&e.bytes);
        let v: Value = serde_json::from_str(&data).unwrap_or_else(|_| panic!("{data}"));
        assert_eq!(v["type"], name.as_str(), "{data}");
        assert_eq!(v["sequence_number"], i as u64, "{data}");
        assert!(a.last.is_none(), "nothing after the final event: {data}");
        let index = v["output_index"].as_u64().map(|i| i as usize);
        match name.as_str() {
            "response.created" | "response.in_progress" => {
                assert_eq!(i, usize::from(name == "response.in_progress"));
                assert_eq!(v["response"]["status"], "in_progress");
                assert_eq!(e.kind, EventKind::Preamble);
            }
            "response.output_item.added" => {
                assert_eq!(index, Some(a.deltas.len()), "items in order: {data}");
                a.deltas.push(String::new());
            }
            "response.output_text.delta"
            | "response.reasoning_summary_text.delta"
            | "response.function_call_arguments.delta" => {
                let i = index.unwrap();
                assert!(i < a.deltas.len(), "a delta on an announced item: {data}");
                assert_eq!(a.items.len(), i, "a delta on the open item: {data}");
                a.deltas[i].push_str(v["delta"].as_str().unwrap());
                assert_eq!(e.kind, EventKind::Content);
            }
            "response.output_text.done" | "response.reasoning_summary_text.done" => {
                assert_eq!(
                    v["text"].as_str().unwrap(),
                    a.deltas[index.unwrap()],
                    "{data}"
                );
            }
            "response.function_call_arguments.done" => {
                assert_eq!(
                    v["arguments"].as_str().unwrap(),
                    a.deltas[index.unwrap()],
                    "{data}"
                );
            }
            "response.output_item.done" => {
                assert_eq!(index, Some(a.items.len()), "{data}");
                a.items.push(v["item"].clone());
            }
            "response.content_part.added"
            | "response.content_part.done"
            | "response.reasoning_summary_part.added"
            | "response.reasoning_summary_part.done" => {
                assert!(index.unwrap() < a.deltas.len(), "{data}");
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                assert_eq!(
                    v["response"]["output"],
                    Value::Array(a.items.clone()),
                    "the final response holds the items as streamed"
                );
                a.last = Some((name.clone(), v["response"].clone()));
            }
            "error" => a.error = Some(v.clone()),
            other => panic!("unexpected event {other}"),
        }
    }
    a
}

fn golden_stream(name: &str, r: &Run) {
    golden_events(
        &format!("streams/{}__responses.sse", name.trim_end_matches(".sse")),
        &r.out,
    );
}

/// Compares the events with `tests/golden/{golden}` event by event (names, data as JSON).
fn golden_events(golden: &str, out: &[Emitted]) {
    let p = dir().join("golden").join(golden);
    let actual = String::from_utf8(concat(out)).expect("UTF-8");
    if bless() {
        std::fs::write(&p, &actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (SLUICE_BLESS=1 writes it)", p.display()));
    let parse = |s: &str| -> Vec<(String, Value)> {
        s.split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let (mut name, mut data) = (String::new(), String::new());
                for line in e.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n.to_string();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = d.to_string();
                    }
                }
                (
                    name,
                    serde_json::from_str(&data).unwrap_or(Value::String(data)),
                )
            })
            .collect()
    };
    assert_eq!(parse(&actual), parse(&expected), "{}", p.display());
}

const STREAMS: [&str; 9] = [
    "anthropic_basic.sse",
    "anthropic_tool_use.sse",
    "anthropic_parallel_tools.sse",
    "anthropic_thinking_tool_use.sse",
    "anthropic_error_after_200.sse",
    "gemini_text.sse",
    "gemini_parallel_calls.sse",
    "gemini_thoughts.sse",
    "gemini_truncated.sse",
];

fn responses_run(name: &str) -> Run {
    run(name, &Opts::new(Operation::Responses, name).track(true))
}

#[test]
fn stream_goldens_read_like_the_sdk_reads_them() {
    for name in STREAMS {
        let r = responses_run(name);
        golden_stream(name, &r);
        let a = accumulate(&r.out);
        let failed = name.contains("error") || name.contains("truncated");
        if failed {
            let (last, resp) = a.last.expect("response.failed");
            assert_eq!(last, "response.failed", "{name}");
            assert_eq!(resp["status"], "failed");
            let err = a.error.expect("an error event before it");
            assert_eq!(resp["error"]["code"], err["code"], "{name}");
            assert_eq!(r.out.last().unwrap().kind, EventKind::Error);
        } else {
            let (last, resp) = a.last.expect("response.completed");
            assert_eq!(last, "response.completed", "{name}");
            assert_eq!(resp["status"], "completed");
            assert!(
                resp["usage"]["output_tokens"].as_u64().unwrap() > 0,
                "{name}"
            );
            assert_eq!(r.out.last().unwrap().kind, EventKind::Trailer);
        }
    }
}

#[test]
fn anthropic_thinking_streams_as_reasoning_items_with_the_signature() {
    let name = "anthropic_thinking_tool_use.sse";
    let r = responses_run(name);
    let a = accumulate(&r.out);
    let kinds: Vec<&str> = a
        .items
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["reasoning", "reasoning", "message", "function_call"]
    );
    assert_eq!(
        a.items[0]["summary"],
        json!([{"type": "summary_text", "text": "The user wants Paris weather.\nI should call \"get_weather\" with city=Paris."}])
    );
    assert_eq!(
        a.items[0]["encrypted_content"],
        "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/="
    );
    assert_eq!(a.items[1]["summary"], json!([]));
    assert!(a.items[1]["encrypted_content"]
        .as_str()
        .unwrap()
        .starts_with("redacted_thinking:"));
    assert!(
        !r.text.contains("Paris weather"),
        "reasoning never mixed into the answer"
    );
    let (_, resp) = a.last.unwrap();
    assert!(resp["usage"]["output_tokens"].as_u64().unwrap() > 0);

    // The next turn: the client sends the items back with the tool's output; Anthropic gets
    // the signed blocks exactly, before the tool call.
    let mut input = vec![json!({"role": "user", "content": "What's the weather in Paris?"})];
    input.extend(a.items.iter().cloned());
    let call_id = a.items[3]["call_id"].clone();
    input.push(json!({"type": "function_call_output", "call_id": call_id, "output": "18C"}));
    let body = Bytes::from(
        json!({"model": "claude-sonnet-4-5", "input": input, "reasoning": {"effort": "high"}})
            .to_string(),
    );
    let anthropic = provider("anthropic");
    let b = json_of(
        &translate_request(&body, &request_opts(&anthropic))
            .unwrap()
            .body,
    );
    let content = &b["messages"][1]["content"];
    assert_eq!(content[0]["type"], "thinking");
    assert_eq!(content[0]["signature"], a.items[0]["encrypted_content"]);
    assert_eq!(content[0]["thinking"], a.items[0]["summary"][0]["text"]);
    assert_eq!(content[1]["type"], "redacted_thinking");
    assert_eq!(content[3]["type"], "tool_use");
    assert_eq!(content[3]["id"], call_id);
    assert_eq!(b["messages"][2]["content"][0]["tool_use_id"], call_id);
}

#[test]
fn gemini_thoughts_stream_as_reasoning_summaries_and_count_as_reasoning_tokens() {
    let r = responses_run("gemini_thoughts.sse");
    let a = accumulate(&r.out);
    assert_eq!(a.items[0]["type"], "reasoning");
    assert!(
        a.items[0].get("encrypted_content").is_none(),
        "Gemini signs no thoughts"
    );
    let (_, resp) = a.last.unwrap();
    let u = r.usage.unwrap_or_default();
    assert!(u.reasoning > 0);
    assert_eq!(
        resp["usage"]["output_tokens_details"]["reasoning_tokens"],
        u.reasoning
    );
}

#[test]
fn usage_reports_cached_tokens() {
    let r = responses_run("anthropic_parallel_tools.sse");
    let (_, resp) = accumulate(&r.out).last.unwrap();
    let u: Usage = r.usage.unwrap();
    assert_eq!(resp["usage"]["input_tokens"], u.input);
    assert_eq!(resp["usage"]["input_tokens_details"]["cached_tokens"], 128);
    assert_eq!(resp["usage"]["total_tokens"], u.input + u.output);
}

#[test]
fn every_split_point_gives_the_same_events() {
    for name in STREAMS {
        let opts = Opts::new(Operation::Responses, name).track(true);
        let whole = run(name, &opts);
        let input = stream_support::fixture(name);
        let mut splits: Vec<Vec<usize>> = (1..input.len()).map(|k| vec![k, input.len()]).collect();
        splits.push(vec![1]);
        for sizes in splits {
            let r = run_chunked(name, &opts, &sizes);
            assert_eq!(r.out, whole.out, "{name} {sizes:?}");
            assert_eq!(r.usage, whole.usage, "{name} {sizes:?}");
            assert_eq!(r.text, whole.text, "{name} {sizes:?}");
        }
    }
}

/// The Responses stream repeats its text in the `.done` events and `response.completed`, so
/// the writer holds the answer; past 8 MiB it ends the stream with an error instead of growing.
#[test]
fn an_answer_held_past_its_bound_ends_the_responses_stream_with_an_error() {
    let big = "x".repeat(64 << 10);
    let mut sse = String::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_big\",\"model\":\"claude\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n\
         event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    );
    for _ in 0..160 {
        sse.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{big}\"}}}}\n\n"
        ));
    }
    let provider = ProviderKind::anthropic();
    let so =
        sluice_providers::stream::StreamOptions::new(Operation::Responses, &provider, "claude");
    let mut t = sluice_providers::stream::translator(&so);
    let r = run_with(t.as_mut(), &Bytes::from(sse), &[]);
    assert!(
        r.max_translator_held <= 8 << 20,
        "{}",
        r.max_translator_held
    );
    let last_two: Vec<&Emitted> = r.out.iter().rev().take(2).collect();
    assert!(
        last_two.iter().all(|e| e.kind == EventKind::Error),
        "the stream ends with `error` and `response.failed`"
    );
    let error = String::from_utf8_lossy(&last_two[1].bytes);
    assert!(error.contains("the answer ran over 8 MiB"), "{error}");
    let deltas = r
        .out
        .iter()
        .filter(|e| String::from_utf8_lossy(&e.bytes).contains("response.output_text.delta"))
        .count();
    assert_eq!(
        deltas, 128,
        "every delta that fit was sent, none after the bound"
    );
}

// ---- Bedrock (Converse, ConverseStream) and Vertex AI ----
//
// Vertex's Claude takes an Anthropic body and Gemini a Gemini one (their answers and streams
// are those families' own, translated by the translators above; its request goldens are in
// `tests/vertex.rs`). Bedrock speaks Converse: a Responses body becomes a Converse request,
// and a Converse answer or ConverseStream becomes Responses.

use sluice_providers::bedrock::{self, BedrockRequestOptions, BedrockResponseOptions};
use stream_support::bedrock as bedrock_stream;

/// `v` with every string that holds a JSON object parsed (Converse takes a JSON schema as
/// text, whose key order depends on serde_json's features in the build).
fn embedded_json(v: Value) -> Value {
    match v {
        Value::String(s) if s.starts_with('{') => {
            serde_json::from_str(&s).map_or(Value::String(s), embedded_json)
        }
        Value::Array(a) => Value::Array(a.into_iter().map(embedded_json).collect()),
        Value::Object(m) => {
            Value::Object(m.into_iter().map(|(k, v)| (k, embedded_json(v))).collect())
        }
        v => v,
    }
}

#[test]
fn bedrock_request_goldens() {
    let mut failures = Vec::new();
    for name in [
        "openai_responses_basic",
        "openai_responses_tools",
        "openai_responses_text",
    ] {
        let body = read(&format!("requests/{name}.json"));
        let mut opts = BedrockRequestOptions::new(Operation::Responses);
        opts.model = Some(bedrock_stream::MODEL);
        // Bedrock takes images from S3 only: the fixtures' URLs are dropped and listed.
        opts.drop_unsupported = true;
        let up = bedrock::translate_request(&body, &opts)
            .unwrap_or_else(|e| panic!("{name} → bedrock: {e}"));
        assert!(up.translated && up.client_wants_usage, "{name}");
        assert!(
            up.path.starts_with("/model/anthropic.claude"),
            "{}",
            up.path
        );
        assert!(
            up.path.ends_with(if up.stream {
                "/converse-stream"
            } else {
                "/converse"
            }),
            "{}",
            up.path
        );
        let actual = json!({
            "path": up.path,
            "stream": up.stream,
            "model": up.model,
            "dropped": up.dropped,
            "body": embedded_json(json_of(&up.body)),
        });
        failures.extend(check_json(
            &format!("bedrock/requests/{name}__responses.json"),
            &actual,
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn bedrock_response_goldens() {
    let mut failures = Vec::new();
    for name in [
        "bedrock_converse_text",
        "bedrock_converse_tool_use",
        "bedrock_converse_reasoning",
    ] {
        let out = bedrock::translate_response(
            &read(&format!("responses/{name}.json")),
            &BedrockResponseOptions {
                op: Operation::Responses,
                model: bedrock_stream::MODEL,
                id: None,
                now_unix: 1_767_225_600,
            },
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let body = json_of(&out.body);
        assert_eq!(body["object"], "response", "{name}");
        assert_eq!(body["status"], "completed", "{name}");
        assert!(body["id"].as_str().unwrap().starts_with("resp_"), "{body}");
        let usage = out.usage.expect("usage");
        assert_eq!(body["usage"]["input_tokens"], usage.input, "{name}");
        assert_eq!(body["usage"]["output_tokens"], usage.output, "{name}");
        failures.extend(check_json(
            &format!("bedrock/responses/{name}__responses.json"),
            &body,
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn bedrock_stream_goldens_read_like_the_sdk_reads_them() {
    for name in [
        "bedrock_text",
        "bedrock_tool_use",
        "bedrock_throttled",
        "bedrock_truncated",
    ] {
        let (whole, t) = bedrock_stream::run(name, Operation::Responses, 0);
        for size in [1, 7, 64] {
            let (chunked, _) = bedrock_stream::run(name, Operation::Responses, size);
            assert_eq!(chunked, whole, "{name}, {size}-byte chunks");
        }
        golden_events(&format!("bedrock/streams/{name}__responses.sse"), &whole);
        let a = accumulate(&whole);
        let (last, resp) = a.last.expect("a final event");
        if name == "bedrock_throttled" || name == "bedrock_truncated" {
            assert_eq!(last, "response.failed", "{name}");
            let err = a.error.expect("an error event before it");
            assert_eq!(resp["error"]["code"], err["code"], "{name}");
            assert_eq!(whole.last().unwrap().kind, EventKind::Error);
            continue;
        }
        assert_eq!(last, "response.completed", "{name}");
        let u = t.usage().expect("usage");
        assert_eq!(resp["usage"]["input_tokens"], u.input, "{name}");
        assert_eq!(resp["usage"]["output_tokens"], u.output, "{name}");
        assert_eq!(resp["model"], bedrock_stream::MODEL);
        assert_eq!(whole.last().unwrap().kind, EventKind::Trailer);
    }
    // Text, reasoning and the tool call as the SDK accumulates them.
    let (out, _) = bedrock_stream::run("bedrock_tool_use", Operation::Responses, 0);
    let a = accumulate(&out);
    let kinds: Vec<&str> = a
        .items
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["reasoning", "message", "function_call"]);
    assert_eq!(a.items[2]["name"], "get_weather");
    assert_eq!(a.items[2]["call_id"], "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q");
    assert_eq!(
        json_of(a.items[2]["arguments"].as_str().unwrap().as_bytes()),
        json!({"location": "Paris, France"})
    );
    let (_, resp) = a.last.unwrap();
    assert_eq!(resp["usage"]["input_tokens_details"]["cached_tokens"], 1024);
    let (out, _) = bedrock_stream::run("bedrock_throttled", Operation::Responses, 0);
    let err = accumulate(&out).error.unwrap();
    assert_eq!(err["code"], "throttlingException");
}

/// The gateway's own errors (an idle timeout, a cut) after some of a translated stream went
/// out: `error` and `response.failed`, numbered on from the stream's events.
#[test]
fn a_gateway_error_mid_stream_continues_the_sequence() {
    let name = "anthropic_basic.sse";
    let opts = Opts::new(Operation::Responses, name);
    let provider = opts.provider.clone();
    let so = sluice_providers::stream::StreamOptions::new(Operation::Responses, &provider, "m");
    let mut t = sluice_providers::stream::translator(&so);
    let input = stream_support::fixture(name);
    // Up to the first text delta, then the gateway gives up on the stream.
    let delta = input
        .windows(19)
        .position(|w| w == b"content_block_delta")
        .expect("a delta");
    let cut = delta
        + input[delta..]
            .windows(2)
            .position(|w| w == b"\n\n")
            .expect("its end")
        + 2;
    // Fed without an end: the upstream is still open when the gateway gives up.
    let mut dec = sluice_sse::Decoder::new();
    dec.feed(input.slice(..cut));
    let mut r = Run {
        out: Vec::new(),
        usage: None,
        text: String::new(),
        max_decoder_held: 0,
        max_translator_held: 0,
    };
    while let Some(item) = dec.next_item() {
        if let Ok(sluice_sse::Item::Event(ev)) = item {
            t.event(&ev, &mut r.out);
        }
    }
    assert!(r.out.iter().any(|e| e.kind == EventKind::Content));
    t.fail(
        http::StatusCode::GATEWAY_TIMEOUT,
        "idle_timeout",
        "no event for 30s",
        &mut r.out,
    );
    let a = accumulate(&r.out);
    let (last, resp) = a.last.expect("response.failed");
    assert_eq!(last, "response.failed");
    assert_eq!(resp["error"]["code"], "idle_timeout");
    assert_eq!(a.error.unwrap()["message"], "no event for 30s");
    // Closed: a second failure says nothing more.
    let before = r.out.len();
    t.fail(http::StatusCode::BAD_GATEWAY, "x", "y", &mut r.out);
    assert_eq!(r.out.len(), before);
    // Before any event reached the client: the two events, numbered from 0.
    let events = sluice_providers::stream::gateway_error_events(
        Operation::Responses,
        http::StatusCode::GATEWAY_TIMEOUT,
        "first_byte_timeout",
        "no answer",
    );
    let text = String::from_utf8(events.to_vec()).unwrap();
    assert!(
        text.starts_with("event: error\ndata: {\"type\":\"error\",\"sequence_number\":0,"),
        "{text}"
    );
    assert!(
        text.contains(
            "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":1,"
        ),
        "{text}"
    );
}
