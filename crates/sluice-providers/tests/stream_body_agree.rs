//! A streamed answer and the same answer as a whole body end the same way for the client:
//! the same text, refusal, tool calls (ids included), finish reason and usage, for every
//! finish reason each provider documents (provider-formats.md §5 and GPY `FinishReason`),
//! for each client format (the Responses API's too, from Anthropic and Gemini). And a Gemini call's `thoughtSignature` makes the round trip from a
//! stream: the id the client got carries it back into the next Gemini request.

mod stream_support;

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::request::{translate_request, RequestOptions};
use sluice_providers::response::{translate_response, ResponseOptions};
use sluice_providers::shape::gemini::gemini_call_id;
use sluice_providers::stream::{translator, StreamOptions};
use sluice_providers::{Operation, ProviderKind, Usage};
use stream_support::*;

/// What a client ends up with, read from a body or accumulated from a stream.
#[derive(Debug, PartialEq)]
struct Seen {
    /// The model the answer names.
    model: String,
    text: String,
    /// OpenAI clients: `reasoning_content`; Anthropic clients: thinking blocks.
    reasoning: String,
    refusal: String,
    /// (id, name, arguments).
    tools: Vec<(String, String, Value)>,
    finish: String,
    /// (input, output) as the client's own usage fields say them.
    usage: (u64, u64),
    /// The usage the gateway records (logs, `sluice_tokens_total`).
    recorded: Option<Usage>,
}

fn args_value(s: &str) -> Value {
    if s.is_empty() {
        return json!({});
    }
    serde_json::from_str(s).unwrap_or_else(|e| panic!("arguments {s:?}: {e}"))
}

fn from_body(op: Operation, provider: &ProviderKind, body: &Value) -> Seen {
    let r = translate_response(
        Bytes::from(body.to_string()),
        &ResponseOptions {
            op,
            provider,
            model: "m",
            now_unix: 1,
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {body}"));
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let recorded = r.usage;
    match op {
        Operation::Responses => responses_seen(&v, recorded),
        Operation::ChatCompletions => {
            let m = &v["choices"][0]["message"];
            let tools = m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    (
                        t["id"].as_str().unwrap().to_owned(),
                        t["function"]["name"].as_str().unwrap().to_owned(),
                        args_value(t["function"]["arguments"].as_str().unwrap()),
                    )
                })
                .collect();
            Seen {
                model: v["model"].as_str().unwrap().to_owned(),
                text: m["content"].as_str().unwrap_or("").to_owned(),
                reasoning: m["reasoning_content"].as_str().unwrap_or("").to_owned(),
                refusal: m["refusal"].as_str().unwrap_or("").to_owned(),
                tools,
                finish: v["choices"][0]["finish_reason"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                usage: (
                    v["usage"]["prompt_tokens"].as_u64().unwrap(),
                    v["usage"]["completion_tokens"].as_u64().unwrap(),
                ),
                recorded,
            }
        }
        _ => {
            let blocks = v["content"].as_array().unwrap();
            Seen {
                model: v["model"].as_str().unwrap().to_owned(),
                text: blocks
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .map(|b| b["text"].as_str().unwrap())
                    .collect(),
                reasoning: blocks
                    .iter()
                    .filter(|b| b["type"] == "thinking")
                    .map(|b| b["thinking"].as_str().unwrap())
                    .collect(),
                refusal: String::new(),
                tools: blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| {
                        (
                            b["id"].as_str().unwrap().to_owned(),
                            b["name"].as_str().unwrap().to_owned(),
                            b["input"].clone(),
                        )
                    })
                    .collect(),
                finish: v["stop_reason"].as_str().unwrap().to_owned(),
                usage: (
                    v["usage"]["input_tokens"].as_u64().unwrap(),
                    v["usage"]["output_tokens"].as_u64().unwrap(),
                ),
                recorded,
            }
        }
    }
}

fn from_stream(op: Operation, provider: &ProviderKind, stream: &Bytes) -> Seen {
    let mut opts = StreamOptions::new(op, provider, "m");
    opts.client_wants_usage = true;
    let mut t = translator(&opts);
    let r = run_with(t.as_mut(), stream, &[]);
    let recorded = r.usage;
    match op {
        Operation::Responses => {
            // The final event's response: what `responses.stream()` gives the client
            // (tests/responses_api.rs checks it against the deltas).
            let (name, data) = decode_one(&r.out.last().expect("events").bytes);
            assert!(
                name == "response.completed" || name == "response.incomplete",
                "{name}: {data}"
            );
            let v: Value = serde_json::from_str(&data).unwrap();
            responses_seen(&v["response"], recorded)
        }
        Operation::ChatCompletions => {
            let m = openai_message(&r.out);
            assert!(m.error.is_none() && m.done, "{:?}", m.error);
            let u = m.usage.expect("usage chunk");
            Seen {
                model: m.model,
                text: m.content,
                reasoning: m.reasoning,
                refusal: m.refusal,
                tools: m
                    .tool_calls
                    .into_iter()
                    .map(|(id, name, a)| (id, name, args_value(&a)))
                    .collect(),
                finish: m.finish_reason.expect("finish reason"),
                usage: (
                    u["prompt_tokens"].as_u64().unwrap(),
                    u["completion_tokens"].as_u64().unwrap(),
                ),
                recorded,
            }
        }
        _ => {
            let m = anthropic_message(&r.out);
            assert!(m.error.is_none() && m.stopped, "{:?}", m.error);
            let u = m.usage.expect("message_delta usage");
            let start = m.start_usage.unwrap_or_default();
            Seen {
                model: m.model,
                text: m
                    .blocks
                    .iter()
                    .filter(|b| b.kind == "text")
                    .map(|b| b.text.as_str())
                    .collect(),
                reasoning: m
                    .blocks
                    .iter()
                    .filter(|b| b.kind == "thinking")
                    .map(|b| b.text.as_str())
                    .collect(),
                refusal: String::new(),
                tools: m
                    .blocks
                    .iter()
                    .filter(|b| b.kind == "tool_use")
                    .map(|b| (b.id.clone(), b.name.clone(), args_value(&b.input_json)))
                    .collect(),
                finish: m.stop_reason.expect("stop reason"),
                // The SDK's message: message_delta's usage over message_start's.
                usage: (
                    u["input_tokens"]
                        .as_u64()
                        .or(start["input_tokens"].as_u64())
                        .unwrap(),
                    u["output_tokens"].as_u64().unwrap(),
                ),
                recorded,
            }
        }
    }
}

/// What a Responses client reads from a `response` object.
fn responses_seen(v: &Value, recorded: Option<Usage>) -> Seen {
    let items = v["output"].as_array().unwrap();
    let of = |kind: &'static str| items.iter().filter(move |i| i["type"] == kind);
    Seen {
        model: v["model"].as_str().unwrap().to_owned(),
        text: of("message")
            .flat_map(|m| m["content"].as_array().unwrap())
            .filter(|p| p["type"] == "output_text")
            .map(|p| p["text"].as_str().unwrap())
            .collect(),
        reasoning: of("reasoning")
            .flat_map(|r| r["summary"].as_array().unwrap())
            .map(|p| p["text"].as_str().unwrap())
            .collect(),
        refusal: of("message")
            .flat_map(|m| m["content"].as_array().unwrap())
            .filter(|p| p["type"] == "refusal")
            .map(|p| p["refusal"].as_str().unwrap())
            .collect(),
        tools: of("function_call")
            .map(|c| {
                (
                    c["call_id"].as_str().unwrap().to_owned(),
                    c["name"].as_str().unwrap().to_owned(),
                    args_value(c["arguments"].as_str().unwrap()),
                )
            })
            .collect(),
        finish: format!(
            "{} {}",
            v["status"].as_str().unwrap(),
            v["incomplete_details"]["reason"].as_str().unwrap_or("")
        ),
        usage: (
            v["usage"]["input_tokens"].as_u64().unwrap(),
            v["usage"]["output_tokens"].as_u64().unwrap(),
        ),
        recorded,
    }
}

fn sse(events: &[(Option<&str>, Value)]) -> Bytes {
    let mut s = String::new();
    for (name, data) in events {
        if let Some(n) = name {
            s.push_str(&format!("event: {n}\n"));
        }
        s.push_str(&format!("data: {data}\n\n"));
    }
    Bytes::from(s)
}

/// Asserts that body and stream agree for both client formats; returns what the OpenAI and
/// Anthropic clients saw.
fn agree(provider: &ProviderKind, body: &Value, stream: &Bytes, what: &str) -> (Seen, Seen) {
    let mut seen = Vec::new();
    for op in OPS {
        let b = from_body(op, provider, body);
        let s = from_stream(op, provider, stream);
        assert_eq!(
            b, s,
            "{op:?}, {what}: body (left) and stream (right) differ"
        );
        seen.push(b);
    }
    // The Responses API, translated from Anthropic and Gemini (passed through from OpenAI).
    if provider.family() != sluice_providers::Family::OpenAi {
        let op = Operation::Responses;
        let b = from_body(op, provider, body);
        let s = from_stream(op, provider, stream);
        assert_eq!(
            b, s,
            "{op:?}, {what}: body (left) and stream (right) differ"
        );
        let chat = &seen[0];
        assert_eq!(
            (&b.text, &b.reasoning, b.tools.len(), b.usage),
            (&chat.text, &chat.reasoning, chat.tools.len(), chat.usage),
            "{what}: a Responses client reads what a chat client reads"
        );
    }
    let anthropic = seen.pop().unwrap();
    (seen.pop().unwrap(), anthropic)
}

// ---- Gemini ----

const SIGNATURE: &str = "CikBcsjafFK168Ib+tVtoxVV0Tsn8O/eU45rzJahzw==";

const GEMINI_REASONS: [&str; 18] = [
    "STOP",
    "MAX_TOKENS",
    "SAFETY",
    "RECITATION",
    "LANGUAGE",
    "OTHER",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "MALFORMED_FUNCTION_CALL",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_OTHER",
    "NO_IMAGE",
    "IMAGE_RECITATION",
    "UNEXPECTED_TOOL_CALL",
    "TOO_MANY_TOOL_CALLS",
    "A_REASON_FROM_NEXT_YEAR",
];

/// One Gemini answer as a `generateContent` body and as a `streamGenerateContent` stream (a
/// chunk per part, the finish reason on the last one, usage cumulative in each).
fn gemini(parts: &[Value], reason: &str) -> (Value, Bytes) {
    let usage = |out: usize| json!({"promptTokenCount": 7, "cachedContentTokenCount": 3, "candidatesTokenCount": out, "thoughtsTokenCount": 2, "totalTokenCount": 9 + out});
    let body = json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": reason, "index": 0}],
        "usageMetadata": usage(parts.len()),
        "modelVersion": "gemini-3-pro",
        "responseId": "resp-1",
    });
    let mut chunks = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let mut cand = json!({"content": {"role": "model", "parts": [part]}, "index": 0});
        if i + 1 == parts.len() {
            cand["finishReason"] = json!(reason);
        }
        chunks.push((None, json!({"candidates": [cand], "usageMetadata": usage(i + 1), "modelVersion": "gemini-3-pro", "responseId": "resp-1"})));
    }
    if parts.is_empty() {
        chunks.push((None, json!({"candidates": [{"finishReason": reason, "index": 0}], "usageMetadata": usage(0), "modelVersion": "gemini-3-pro", "responseId": "resp-1"})));
    }
    (body, sse(&chunks))
}

fn gemini_parts() -> Vec<(&'static str, Vec<Value>)> {
    vec![
        (
            "a thought, then text",
            vec![
                json!({"text": "Thinking it over.", "thought": true}),
                json!({"text": "Hello"}),
                json!({"text": " there"}),
            ],
        ),
        (
            "text and a signed call",
            vec![
                json!({"text": "Checking."}),
                json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIGNATURE}),
            ],
        ),
        (
            "parallel calls, the first signed, one with Gemini's id",
            vec![
                json!({"functionCall": {"name": "a", "args": {"x": 1}}, "thoughtSignature": SIGNATURE}),
                json!({"functionCall": {"id": "fc-9", "name": "b", "args": {}}}),
            ],
        ),
        ("no content", vec![]),
    ]
}

#[test]
fn gemini_finish_reasons_agree_between_stream_and_body() {
    let provider = ProviderKind::Gemini;
    for reason in GEMINI_REASONS {
        for (what, parts) in gemini_parts() {
            let (body, stream) = gemini(&parts, reason);
            let (openai, anthropic) =
                agree(&provider, &body, &stream, &format!("{reason}, {what}"));
            let calls = !openai.tools.is_empty();
            // The one reading (crates/sluice-providers/src/finish.rs).
            let (o, a) = match reason {
                "STOP"
                | "MALFORMED_FUNCTION_CALL"
                | "UNEXPECTED_TOOL_CALL"
                | "TOO_MANY_TOOL_CALLS"
                | "A_REASON_FROM_NEXT_YEAR"
                    if calls =>
                {
                    ("tool_calls", "tool_use")
                }
                "STOP"
                | "MALFORMED_FUNCTION_CALL"
                | "UNEXPECTED_TOOL_CALL"
                | "TOO_MANY_TOOL_CALLS"
                | "A_REASON_FROM_NEXT_YEAR" => ("stop", "end_turn"),
                "MAX_TOKENS" => ("length", "max_tokens"),
                _ => ("content_filter", "refusal"),
            };
            assert_eq!(
                (openai.finish.as_str(), anthropic.finish.as_str()),
                (o, a),
                "{reason}, {what}"
            );
            assert_eq!(
                openai.recorded,
                Some(Usage {
                    cache_write: 0,
                    input: 7,
                    output: parts.len() as u64 + 2,
                    cached_input: 3,
                    reasoning: 2
                }),
                "{reason}, {what}"
            );
            assert_eq!(
                openai.usage,
                (7, parts.len() as u64 + 2),
                "{reason}, {what}"
            );
        }
    }
}

#[test]
fn a_streamed_gemini_call_carries_its_thought_signature_in_its_id() {
    let (_, parts) = gemini_parts().swap_remove(2);
    let (_, stream) = gemini(&parts, "STOP");
    let provider = ProviderKind::Gemini;
    for op in OPS {
        let s = from_stream(op, &provider, &stream);
        assert_eq!(s.tools.len(), 2);
        let first = gemini_call_id(&s.tools[0].0);
        assert_eq!(
            first.thought_signature.as_deref(),
            Some(SIGNATURE),
            "{op:?}"
        );
        assert_eq!(first.id, None, "made up, never sent to Gemini as its own");
        let second = gemini_call_id(&s.tools[1].0);
        assert_eq!((second.id, second.thought_signature), (Some("fc-9"), None));
    }
}

/// Stream → the client's next request (its tool result) → the Gemini request carries the
/// signature on the `functionCall` part, exactly as Gemini sent it.
#[test]
fn thought_signature_round_trip_from_a_stream() {
    let (_, parts) = gemini_parts().swap_remove(1);
    let (_, stream) = gemini(&parts, "STOP");
    let provider = ProviderKind::Gemini;
    for op in OPS {
        let s = from_stream(op, &provider, &stream);
        let (id, name, args) = &s.tools[0];
        let next = match op {
            Operation::ChatCompletions => json!({
                "model": "m",
                "messages": [
                    {"role": "user", "content": "weather?"},
                    {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}]},
                    {"role": "tool", "tool_call_id": id, "content": "sunny"},
                ],
            }),
            _ => json!({
                "model": "m",
                "max_tokens": 100,
                "messages": [
                    {"role": "user", "content": "weather?"},
                    {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, {"type": "tool_use", "id": id, "name": name, "input": args}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "sunny"}]},
                ],
            }),
        };
        let up = translate_request(
            &Bytes::from(next.to_string()),
            &RequestOptions {
                op,
                provider: &provider,
                model: Some("gemini-3-pro"),
                drop_unsupported: false,
                stream_usage: false,
                prefill: None,
                reasoning_budgets: None,
            },
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&up.body).unwrap();
        let model_parts = &v["contents"][1]["parts"];
        let call = model_parts
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p.get("functionCall").is_some())
            .unwrap_or_else(|| panic!("{v}"));
        assert_eq!(call["thoughtSignature"], SIGNATURE, "{op:?}: {v}");
        assert_eq!(call["functionCall"]["name"], "get_weather");
        assert!(call["functionCall"].get("id").is_none(), "{call}");
        let result = &v["contents"][2]["parts"][0]["functionResponse"];
        assert_eq!(result["name"], "get_weather", "{v}");
    }
}

// ---- Anthropic ----

fn anthropic(blocks: &[Value], reason: &str, stop_sequence: Option<&str>) -> (Value, Bytes) {
    let body = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": blocks, "stop_reason": reason, "stop_sequence": stop_sequence,
        "usage": {"input_tokens": 11, "cache_read_input_tokens": 4, "output_tokens": 6},
    });
    let mut ev = vec![(
        Some("message_start"),
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 11, "cache_read_input_tokens": 4, "output_tokens": 1}}}),
    )];
    for (i, b) in blocks.iter().enumerate() {
        let (start, delta) = match b["type"].as_str().unwrap() {
            "thinking" => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                json!({"type": "thinking_delta", "thinking": b["thinking"]}),
            ),
            "text" => (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": b["text"]}),
            ),
            _ => (
                json!({"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}),
                json!({"type": "input_json_delta", "partial_json": b["input"].to_string()}),
            ),
        };
        ev.push((
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        ));
        ev.push((
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": i, "delta": delta}),
        ));
        ev.push((
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    ev.push((
        Some("message_delta"),
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": stop_sequence}, "usage": {"output_tokens": 6}}),
    ));
    ev.push((Some("message_stop"), json!({"type": "message_stop"})));
    (body, sse(&ev))
}

#[test]
fn anthropic_stop_reasons_agree_between_stream_and_body() {
    let provider = ProviderKind::anthropic();
    let variants = [
        (
            "thinking, then text",
            vec![
                json!({"type": "thinking", "thinking": "Let me see.", "signature": "sig"}),
                json!({"type": "text", "text": "Hello there"}),
            ],
        ),
        (
            "text and a tool call",
            vec![
                json!({"type": "text", "text": "Checking."}),
                json!({"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}}),
            ],
        ),
        ("no content", vec![]),
    ];
    for reason in [
        "end_turn",
        "stop_sequence",
        "max_tokens",
        "tool_use",
        "refusal",
        "pause_turn",
        "model_context_window_exceeded",
        "a_reason_from_next_year",
    ] {
        for (what, blocks) in &variants {
            let seq = (reason == "stop_sequence").then_some("END");
            let (body, stream) = anthropic(blocks, reason, seq);
            let (openai, _) = agree(&provider, &body, &stream, &format!("{reason}, {what}"));
            let calls = !openai.tools.is_empty();
            let expected = match reason {
                "end_turn" | "stop_sequence" | "pause_turn" | "a_reason_from_next_year"
                    if calls =>
                {
                    // A stop sequence after tool calls is a tool-call stop (one rule for both).
                    if reason == "pause_turn" {
                        "stop"
                    } else {
                        "tool_calls"
                    }
                }
                "end_turn" | "stop_sequence" | "pause_turn" | "a_reason_from_next_year" => "stop",
                "max_tokens" | "model_context_window_exceeded" => "length",
                "tool_use" => "tool_calls",
                _ => "content_filter",
            };
            assert_eq!(openai.finish, expected, "{reason}, {what}");
        }
    }
}

// ---- OpenAI ----

/// A tool call: id, name, arguments.
type Call<'a> = (&'a str, &'a str, &'a str);

/// What a case is, its `content`, its `refusal` and its calls.
type Variant<'a> = (&'a str, Option<&'a str>, Option<&'a str>, &'a [Call<'a>]);

/// An OpenAI answer: `content`, `refusal`, tool calls.
fn openai(
    content: Option<&str>,
    refusal: Option<&str>,
    calls: &[Call<'_>],
    reason: &str,
) -> (Value, Bytes) {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, a)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": a}}))
        .collect();
    let mut message = json!({"role": "assistant", "content": content, "refusal": refusal});
    if !tool_calls.is_empty() {
        message["tool_calls"] = json!(tool_calls);
    }
    let usage = json!({"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13, "prompt_tokens_details": {"cached_tokens": 2}, "completion_tokens_details": {"reasoning_tokens": 1}});
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt",
        "choices": [{"index": 0, "message": message, "finish_reason": reason, "logprobs": null}],
        "usage": usage,
    });
    let chunk = |delta: Value, finish: Option<&str>| {
        (
            None,
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut ev = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        None,
    )];
    // Text and refusals in two fragments each, arguments in two fragments after the name.
    for (field, value) in [("content", content), ("refusal", refusal)] {
        if let Some(v) = value {
            let (a, b) = v.split_at(v.len() / 2);
            ev.push(chunk(json!({ field: a }), None));
            ev.push(chunk(json!({ field: b }), None));
        }
    }
    for (i, (id, name, a)) in calls.iter().enumerate() {
        ev.push(chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
        let (x, y) = a.split_at(a.len() / 2);
        for part in [x, y] {
            ev.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                None,
            ));
        }
    }
    ev.push(chunk(json!({}), Some(reason)));
    ev.push((
        None,
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt", "choices": [], "usage": usage}),
    ));
    let mut bytes = sse(&ev).to_vec();
    bytes.extend_from_slice(b"data: [DONE]\n\n");
    (body, Bytes::from(bytes))
}

#[test]
fn openai_finish_reasons_and_refusals_agree_between_stream_and_body() {
    let provider = ProviderKind::OpenAi;
    let call = [("call.1:x", "get_weather", r#"{"city":"Paris"}"#)];
    let variants: [Variant<'_>; 5] = [
        ("text", Some("Hello there"), None, &[]),
        ("a refusal", None, Some("I can't help with that."), &[]),
        (
            "text, then a refusal",
            Some("Well,"),
            Some("I can't help with that."),
            &[],
        ),
        ("a tool call", None, None, &call),
        ("text and a tool call", Some("Checking."), None, &call),
    ];
    for reason in [
        "stop",
        "length",
        "tool_calls",
        "content_filter",
        "function_call",
        "a_reason_from_next_year",
    ] {
        for (what, content, refusal, calls) in variants {
            let (body, stream) = openai(content, refusal, calls, reason);
            let (_, anthropic) = agree(&provider, &body, &stream, &format!("{reason}, {what}"));
            let expected = match reason {
                "length" => "max_tokens",
                "content_filter" => "refusal",
                "tool_calls" | "function_call" => "tool_use",
                _ if refusal.is_some() => "refusal",
                _ if !calls.is_empty() => "tool_use",
                _ => "end_turn",
            };
            assert_eq!(anthropic.finish, expected, "{reason}, {what}");
            if let Some(r) = refusal {
                // An Anthropic client reads the refusal as text, on its own line.
                let text = match content {
                    Some(c) => format!("{c}\n{r}"),
                    None => r.to_owned(),
                };
                assert_eq!(anthropic.text, text);
            }
            if !calls.is_empty() {
                assert_eq!(anthropic.tools[0].0, "call_1_x", "an id Anthropic accepts");
            }
        }
    }
}

/// An OpenAI client whose stream is re-encoded (a continuation) keeps a refusal a refusal.
#[test]
fn an_openai_refusal_stays_a_refusal_for_an_openai_client() {
    let provider = ProviderKind::OpenAi;
    let (_, stream) = openai(None, Some("I can't help with that."), &[], "stop");
    let mut opts = StreamOptions::new(Operation::ChatCompletions, &provider, "m");
    opts.continuation = true;
    let mut t = translator(&opts);
    let r = run_with(t.as_mut(), &stream, &[]);
    let m = openai_message(&r.out);
    assert_eq!(m.refusal, "I can't help with that.");
    assert_eq!(m.content, "");
    assert_eq!(
        m.finish_reason.as_deref(),
        Some("stop"),
        "as OpenAI said it"
    );
}

/// A prompt Gemini blocked (no candidates, `promptFeedback.blockReason`) is a filtered answer
/// either way.
#[test]
fn a_blocked_gemini_prompt_agrees_between_stream_and_body() {
    for reason in [
        "SAFETY",
        "OTHER",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "IMAGE_SAFETY",
    ] {
        let body = json!({
            "promptFeedback": {"blockReason": reason},
            "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
            "modelVersion": "gemini-3-pro",
            "responseId": "resp-1",
        });
        let stream = sse(&[(None, body.clone())]);
        let (openai, anthropic) = agree(&ProviderKind::Gemini, &body, &stream, reason);
        assert_eq!(
            (openai.finish.as_str(), anthropic.finish.as_str()),
            ("content_filter", "refusal")
        );
        assert_eq!((openai.text.as_str(), openai.usage), ("", (7, 0)));
    }
}
