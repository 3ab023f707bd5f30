//! Response translation behaviour beyond the goldens: passthrough bodies keep their bytes and
//! give their usage; finish reasons per provider-formats.md §5 and pitfalls 3 and 4; what
//! cannot be read is an error.

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::response::{
    translate_response, ClientResponse, ResponseError, ResponseOptions,
};
use sluice_providers::{Operation, ProviderKind, Usage};

fn run(
    body: &Value,
    op: Operation,
    provider: &ProviderKind,
) -> Result<ClientResponse, ResponseError> {
    translate_response(
        Bytes::from(body.to_string()),
        &ResponseOptions {
            op,
            provider,
            model: "route-model",
            now_unix: 1_767_225_600,
        },
    )
}

fn body(r: &ClientResponse) -> Value {
    serde_json::from_slice(&r.body).expect("JSON")
}

#[test]
fn passthrough_keeps_the_bytes_and_reads_the_usage() {
    let o = ProviderKind::OpenAi;
    let a = ProviderKind::anthropic();
    let cases = [
        (
            Operation::ChatCompletions,
            &o,
            json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12, "completion_tokens_details": {"reasoning_tokens": 2}}}),
            Some(Usage {
                cache_write: 0,
                input: 9,
                output: 3,
                cached_input: 0,
                reasoning: 2,
            }),
        ),
        (
            Operation::Embeddings,
            &o,
            json!({"object": "list", "data": [], "model": "m", "usage": {"prompt_tokens": 8, "total_tokens": 8}}),
            Some(Usage {
                cache_write: 0,
                input: 8,
                output: 0,
                cached_input: 0,
                reasoning: 0,
            }),
        ),
        (
            Operation::Responses,
            &o,
            json!({"object": "response", "output": [], "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 27}}),
            Some(Usage {
                cache_write: 0,
                input: 20,
                output: 7,
                cached_input: 4,
                reasoning: 5,
            }),
        ),
        (
            Operation::Messages,
            &a,
            json!({"id": "m", "type": "message", "content": [], "usage": {"input_tokens": 5, "output_tokens": 2, "cache_creation_input_tokens": 10, "cache_read_input_tokens": 20}}),
            Some(Usage {
                cache_write: 10,
                input: 35,
                output: 2,
                cached_input: 20,
                reasoning: 0,
            }),
        ),
        (
            Operation::CountTokens,
            &a,
            json!({"input_tokens": 14}),
            None,
        ),
        (
            Operation::ChatCompletions,
            &o,
            json!({"id": "c", "choices": []}),
            None,
        ),
    ];
    for (op, p, v, usage) in cases {
        let b = Bytes::from(v.to_string());
        let r = translate_response(
            b.clone(),
            &ResponseOptions {
                op,
                provider: p,
                model: "m",
                now_unix: 0,
            },
        )
        .expect("passthrough never fails");
        assert_eq!(r.body.as_ptr(), b.as_ptr(), "{op:?}: the upstream's bytes");
        assert_eq!(r.usage, usage, "{op:?}");
    }
    // Passthrough never parses beyond the usage: a body that is not JSON still passes.
    let b = Bytes::from_static(b"not json");
    let r = translate_response(
        b.clone(),
        &ResponseOptions {
            op: Operation::ChatCompletions,
            provider: &o,
            model: "m",
            now_unix: 0,
        },
    )
    .expect("passthrough");
    assert_eq!((r.body, r.usage), (b, None));
}

#[test]
fn finish_reasons_for_openai_clients() {
    let a = ProviderKind::anthropic();
    let msg = |stop: &str, content: Value| json!({"id": "m", "type": "message", "model": "claude", "content": content, "stop_reason": stop, "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}});
    let text = json!([{"type": "text", "text": "x"}]);
    let tool = json!([{"type": "text", "text": "x"}, {"type": "tool_use", "id": "t", "name": "f", "input": {}}]);
    for (stop, content, want) in [
        ("end_turn", &text, "stop"),
        ("stop_sequence", &text, "stop"),
        ("max_tokens", &text, "length"),
        ("tool_use", &tool, "tool_calls"),
        ("refusal", &text, "content_filter"),
        ("pause_turn", &text, "stop"),
        ("model_context_window_exceeded", &text, "length"),
        // Pitfall 3: a turn with tool calls is a tool-call turn.
        ("end_turn", &tool, "tool_calls"),
    ] {
        let r = run(&msg(stop, content.clone()), Operation::ChatCompletions, &a).unwrap();
        assert_eq!(body(&r)["choices"][0]["finish_reason"], want, "{stop}");
    }

    let g = ProviderKind::Gemini;
    let cand = |reason: &str, parts: Value| json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": reason}], "responseId": "r"});
    let text = json!([{"text": "x"}]);
    let call = json!([{"functionCall": {"name": "f", "args": {}}}]);
    for (reason, parts, want) in [
        ("STOP", &text, "stop"),
        ("MAX_TOKENS", &text, "length"),
        ("SAFETY", &json!([]), "content_filter"),
        ("RECITATION", &text, "content_filter"),
        ("PROHIBITED_CONTENT", &json!([]), "content_filter"),
        // Pitfall 4: Gemini says STOP for calls.
        ("STOP", &call, "tool_calls"),
        ("MALFORMED_FUNCTION_CALL", &json!([]), "stop"),
    ] {
        let r = run(&cand(reason, parts.clone()), Operation::ChatCompletions, &g).unwrap();
        assert_eq!(body(&r)["choices"][0]["finish_reason"], want, "{reason}");
        assert_eq!(r.usage, None, "no usageMetadata, no usage");
        assert!(body(&r).get("usage").is_none(), "no made-up usage");
    }
}

#[test]
fn finish_reasons_for_anthropic_clients() {
    let o = ProviderKind::OpenAi;
    let completion = |finish: &str, message: Value| json!({"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o", "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}});
    let text = json!({"role": "assistant", "content": "x"});
    let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
    for (finish, message, want) in [
        ("stop", &text, "end_turn"),
        ("length", &text, "max_tokens"),
        ("tool_calls", &call, "tool_use"),
        ("content_filter", &text, "refusal"),
        // Some OpenAI-compatible servers say `stop` with tool calls.
        ("stop", &call, "tool_use"),
    ] {
        let r = run(
            &completion(finish, message.clone()),
            Operation::Messages,
            &o,
        )
        .unwrap();
        assert_eq!(body(&r)["stop_reason"], want, "{finish}");
    }
    // A refusal is the text of a refusal.
    let refusal =
        json!({"role": "assistant", "content": null, "refusal": "I can't help with that."});
    let r = run(&completion("stop", refusal), Operation::Messages, &o).unwrap();
    assert_eq!(body(&r)["stop_reason"], "refusal");
    assert_eq!(
        body(&r)["content"],
        json!([{"type": "text", "text": "I can't help with that."}])
    );
}

#[test]
fn a_stop_sequence_is_stop_for_openai_clients() {
    let o = ProviderKind::anthropic();
    let m = json!({"id": "m", "type": "message", "model": "claude", "content": [{"type": "text", "text": "x"}], "stop_reason": "stop_sequence", "stop_sequence": "END", "usage": {"input_tokens": 1, "output_tokens": 1}});
    // Anthropic client through an Anthropic upstream is passthrough; through the neutral
    // answer (OpenAI client) the reason is `stop`.
    let r = run(&m, Operation::ChatCompletions, &o).unwrap();
    assert_eq!(body(&r)["choices"][0]["finish_reason"], "stop");
}

#[test]
fn gemini_candidates_are_choices() {
    let g = ProviderKind::Gemini;
    let v = json!({"candidates": [
        {"content": {"role": "model", "parts": [{"text": "A"}]}, "finishReason": "STOP", "index": 0},
        {"content": {"role": "model", "parts": [{"text": "B"}]}, "finishReason": "MAX_TOKENS", "index": 1}
    ], "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5}});
    let r = run(&v, Operation::ChatCompletions, &g).unwrap();
    let b = body(&r);
    assert_eq!(b["choices"][1]["message"]["content"], "B");
    assert_eq!(b["choices"][1]["finish_reason"], "length");
    assert_eq!(
        b["model"], "route-model",
        "no modelVersion: the model sent upstream"
    );
    assert_eq!(b["created"], 1_767_225_600);
}

#[test]
fn unreadable_bodies_are_errors() {
    let g = ProviderKind::Gemini;
    let e = run(
        &json!({"candidates": "nope"}),
        Operation::ChatCompletions,
        &g,
    )
    .unwrap_err();
    assert!(
        matches!(
            &e,
            ResponseError::Malformed {
                provider: "gemini",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.metric_label(), "malformed_response");
    // Arguments an Anthropic client cannot be given as an object.
    let o = ProviderKind::OpenAi;
    let v = json!({"id": "c", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": "}}]}}]});
    let e = run(&v, Operation::Messages, &o).unwrap_err();
    assert!(e.to_string().contains("call_1"), "{e}");
}
