//! Request translation behaviour: the passthrough and edit paths, parameters a provider
//! cannot honour (refused, or dropped and listed), the tool-choice table, and the pitfalls of
//! provider-formats.md §9 that concern requests.

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::request::{
    translate_request, RequestError, RequestOptions, UpstreamRequest, DEFAULT_ANTHROPIC_MAX_TOKENS,
};
use sluice_providers::{Operation, ProviderKind};

fn opts<'a>(op: Operation, provider: &'a ProviderKind) -> RequestOptions<'a> {
    RequestOptions {
        op,
        provider,
        model: None,
        drop_unsupported: false,
        stream_usage: false,
        prefill: None,
        reasoning_budgets: None,
    }
}

fn run(body: &Value, o: &RequestOptions<'_>) -> Result<UpstreamRequest, RequestError> {
    translate_request(&Bytes::from(body.to_string()), o)
}

fn body_of(up: &UpstreamRequest) -> Value {
    serde_json::from_slice(&up.body).expect("upstream body is JSON")
}

fn chat(extra: Value) -> Value {
    let mut b = json!({
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "Hi"}],
    });
    for (k, v) in extra.as_object().expect("object").clone() {
        b[k] = v;
    }
    b
}

fn messages(extra: Value) -> Value {
    let mut b = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "Hi"}],
    });
    for (k, v) in extra.as_object().expect("object").clone() {
        b[k] = v;
    }
    b
}

fn unsupported(param: &str, provider: &'static str) -> RequestError {
    RequestError::Unsupported {
        param: param.into(),
        provider,
    }
}

const ANTHROPIC: fn() -> ProviderKind = ProviderKind::anthropic;

#[test]
fn same_family_without_changes_is_the_same_bytes() {
    let body = Bytes::from(
        json!({"model": "gpt-4o", "stream": true, "messages": [], "x-vendor": 1}).to_string(),
    );
    let p = ProviderKind::OpenAi;
    let up = translate_request(&body, &opts(Operation::ChatCompletions, &p)).unwrap();
    assert_eq!(up.body.as_ptr(), body.as_ptr(), "no copy");
    assert_eq!(up.body.len(), body.len());
    assert!(up.stream && !up.translated && !up.client_wants_usage);
    assert_eq!(
        (up.path.as_str(), up.model.as_str()),
        ("/chat/completions", "gpt-4o")
    );

    // The route's model equal to the client's is no change either.
    let mut o = opts(Operation::ChatCompletions, &p);
    o.model = Some("gpt-4o");
    let up = translate_request(&body, &o).unwrap();
    assert_eq!(up.body.as_ptr(), body.as_ptr());

    // Anthropic, embeddings, responses, count_tokens: the same.
    let a = ANTHROPIC();
    for (op, p, body) in [
        (Operation::Messages, &a, messages(json!({}))),
        (Operation::CountTokens, &a, messages(json!({}))),
        (
            Operation::Embeddings,
            &p,
            json!({"model": "text-embedding-3-small", "input": "x"}),
        ),
        (
            Operation::Responses,
            &p,
            json!({"model": "gpt-4o", "input": "x"}),
        ),
        (
            Operation::Completions,
            &p,
            json!({"model": "gpt-3.5-turbo-instruct", "prompt": "x"}),
        ),
    ] {
        let b = Bytes::from(body.to_string());
        let up = translate_request(&b, &opts(op, p)).unwrap();
        assert_eq!(up.body.as_ptr(), b.as_ptr(), "{op:?}");
        assert_eq!(up.path, p.path(op, &up.model, false).unwrap());
    }
}

#[test]
fn same_family_edits_keep_unknown_fields() {
    let p = ProviderKind::OpenAi;
    let mut o = opts(Operation::ChatCompletions, &p);
    o.model = Some("gpt-4o-mini");
    o.stream_usage = true;
    let body = chat(
        json!({"stream": true, "stream_options": {"include_obfuscation": false}, "x-vendor": {"a": 1}}),
    );
    let up = run(&body, &o).unwrap();
    let b = body_of(&up);
    assert_eq!(b["model"], "gpt-4o-mini");
    assert_eq!(
        b["stream_options"],
        json!({"include_obfuscation": false, "include_usage": true})
    );
    assert_eq!(b["x-vendor"], json!({"a": 1}));
    assert_eq!(b["messages"], body["messages"]);
    assert_eq!(up.model, "gpt-4o-mini");
    assert!(!up.translated && !up.client_wants_usage && up.stream);

    // The client asked for usage itself: nothing to add, and it wants the usage chunk.
    let mut o = opts(Operation::ChatCompletions, &p);
    o.stream_usage = true;
    let body = Bytes::from(
        chat(json!({"stream": true, "stream_options": {"include_usage": true}})).to_string(),
    );
    let up = translate_request(&body, &o).unwrap();
    assert_eq!(up.body.as_ptr(), body.as_ptr());
    assert!(up.client_wants_usage);

    // Not streaming: no stream usage to ask for.
    let body = Bytes::from(chat(json!({})).to_string());
    let up = translate_request(&body, &o).unwrap();
    assert_eq!(up.body.as_ptr(), body.as_ptr());
}

#[test]
fn prefill_for_continuation() {
    let p = ProviderKind::OpenAi;
    let mut o = opts(Operation::ChatCompletions, &p);
    o.prefill = Some("The answer is ");
    let b = body_of(&run(&chat(json!({})), &o).unwrap());
    assert_eq!(
        b["messages"][1],
        json!({"role": "assistant", "content": "The answer is "})
    );
    assert_eq!(b["continue_final_message"], true);
    assert_eq!(b["add_generation_prompt"], false);

    // Anthropic: trailing whitespace is refused there, so it is trimmed; a client's own
    // prefill is continued.
    let a = ANTHROPIC();
    let mut o = opts(Operation::Messages, &a);
    o.prefill = Some("The answer is ");
    let body = messages(json!({"messages": [
        {"role": "user", "content": "Q?"},
        {"role": "assistant", "content": "{\"answer\": "}
    ]}));
    let b = body_of(&run(&body, &o).unwrap());
    assert_eq!(b["messages"][1]["content"], "{\"answer\": The answer is");
    assert!(b.get("continue_final_message").is_none());

    // OpenAI client to Anthropic: the prefill is the final assistant turn.
    let mut o = opts(Operation::ChatCompletions, &a);
    o.prefill = Some("Par");
    let b = body_of(&run(&chat(json!({})), &o).unwrap());
    assert_eq!(
        b["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "Par"}]})
    );

    // No prefill on Azure or Gemini.
    let az = ProviderKind::Azure {
        api_version: "2024-10-21".into(),
    };
    let mut o = opts(Operation::ChatCompletions, &az);
    o.prefill = Some("x");
    assert_eq!(
        run(&chat(json!({})), &o).unwrap_err(),
        unsupported("prefill", "azure")
    );
    let g = ProviderKind::Gemini;
    let mut o = opts(Operation::ChatCompletions, &g);
    o.prefill = Some("x");
    assert_eq!(
        run(&chat(json!({})), &o).unwrap_err(),
        unsupported("assistant prefill (a final assistant message)", "gemini")
    );
}

#[test]
fn operations_a_provider_lacks() {
    let cases = [
        (
            Operation::Embeddings,
            ANTHROPIC(),
            "embeddings",
            "anthropic",
        ),
        (
            Operation::Embeddings,
            ProviderKind::Gemini,
            "embeddings",
            "gemini",
        ),
        // (The Responses API is translated for Anthropic and Gemini: tests/responses_api.rs.)
        (
            Operation::Completions,
            ANTHROPIC(),
            "text_completion",
            "anthropic",
        ),
        (
            Operation::Completions,
            ProviderKind::Gemini,
            "text_completion",
            "gemini",
        ),
        (
            Operation::CountTokens,
            ProviderKind::OpenAi,
            "count_tokens",
            "openai",
        ),
    ];
    for (op, p, op_name, provider) in cases {
        let err = run(&chat(json!({})), &opts(op, &p)).unwrap_err();
        assert_eq!(
            err,
            RequestError::UnsupportedOperation {
                op: op_name,
                provider
            }
        );
        assert_eq!(err.code(), "unsupported_operation");
    }
}

/// A tool definition the reader cannot take names the field as the client wrote it (OpenAI's
/// under `function`, Anthropic's on the tool), and a tool of a type only the client's family
/// has is refused by name.
#[test]
fn bad_tool_definitions_name_the_field() {
    let invalid = |param: &str, reason: &str| RequestError::Invalid {
        param: param.into(),
        reason: reason.into(),
    };
    let f = |def: Value| json!({"type": "function", "function": def});
    let a = ANTHROPIC();
    let o = opts(Operation::ChatCompletions, &a);
    for (tools, want) in [
        (json!([5]), invalid("tools[0]", "must be an object")),
        (
            json!([{"type": 1}]),
            invalid("tools[0]", "must be a string"),
        ),
        (
            json!([{"type": "function"}]),
            invalid("tools[0].function", "is required"),
        ),
        (
            json!([f(json!({"name": "a"})), {"function": 3}]),
            invalid("tools[1].function", "must be an object"),
        ),
        (
            json!([f(json!({"name": "a"})), f(json!({"description": "d"}))]),
            invalid("tools[1].function.name", "is required"),
        ),
        (
            json!([f(json!({"name": "a", "description": 1}))]),
            invalid("tools[0].function.description", "must be a string"),
        ),
        (
            json!([f(json!({"name": "a", "strict": "yes"}))]),
            invalid("tools[0].function.strict", "must be a boolean"),
        ),
        (
            json!([f(json!({"name": "a"})), {"type": "custom", "custom": {"name": "c"}}]),
            RequestError::Unsupported {
                param: "tools[1] (custom tools)".into(),
                provider: "anthropic",
            },
        ),
    ] {
        assert_eq!(run(&chat(json!({ "tools": tools })), &o), Err(want));
    }

    let p = ProviderKind::OpenAi;
    let o = opts(Operation::Messages, &p);
    for (tools, want) in [
        (json!([[]]), invalid("tools[0]", "must be an object")),
        (
            json!([{"input_schema": {}}]),
            invalid("tools[0].name", "is required"),
        ),
        (
            json!([{"name": "a", "description": false}]),
            invalid("tools[0].description", "must be a string"),
        ),
        (
            json!([{"name": "a"}, {"type": "custom", "name": "b", "strict": 0}]),
            invalid("tools[1].strict", "must be a boolean"),
        ),
        (
            json!([{"type": "web_search_20250305", "name": "web_search"}]),
            RequestError::Unsupported {
                param: "tools[0] (web_search_20250305 tools)".into(),
                provider: "openai",
            },
        ),
    ] {
        assert_eq!(run(&messages(json!({ "tools": tools })), &o), Err(want));
    }
}

#[test]
fn bad_bodies_name_the_field() {
    let p = ANTHROPIC();
    let o = opts(Operation::ChatCompletions, &p);
    let t = |b: &[u8]| translate_request(&Bytes::copy_from_slice(b), &o).unwrap_err();
    assert!(matches!(t(b"{\"model\":"), RequestError::InvalidJson(_)));
    assert_eq!(t(b"[1]"), RequestError::NotAnObject);
    let e = run(&json!({"messages": []}), &o).unwrap_err();
    assert_eq!(
        e,
        RequestError::Invalid {
            param: "model".into(),
            reason: "is required".into()
        }
    );
    let e = run(
        &chat(json!({"messages": [{"role": "user", "content": 5}]})),
        &o,
    )
    .unwrap_err();
    assert!(
        matches!(&e, RequestError::Invalid { param, .. } if param == "messages[0].content"),
        "{e}"
    );
    let e = run(
        &chat(json!({"messages": [{"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}
        ]}]})),
        &o,
    )
    .unwrap_err();
    assert!(
        matches!(&e, RequestError::Invalid { param, .. } if param == "messages[0].tool_calls[0].function.arguments"),
        "{e}"
    );
    let e = run(&chat(json!({"temperature": "hot"})), &o).unwrap_err();
    assert!(matches!(&e, RequestError::Invalid { param, .. } if param == "temperature"));

    // The passthrough path names the field too.
    let p = ProviderKind::OpenAi;
    let o = opts(Operation::ChatCompletions, &p);
    for (body, field) in [
        (json!({"model": 4}), "model"),
        (json!({"model": "m", "stream": "yes"}), "stream"),
        (
            json!({"model": "m", "stream_options": {"include_usage": 1}}),
            "stream_options.include_usage",
        ),
    ] {
        let e = run(&body, &o).unwrap_err();
        assert!(
            matches!(&e, RequestError::Invalid { param, .. } if param == field),
            "{e}"
        );
    }
    assert_eq!(t(b" \"x\""), RequestError::NotAnObject);
}

/// An Anthropic client's own prefill (a final assistant message) is continued by vLLM-style
/// OpenAI-compatible servers; Azure and Gemini have no such thing.
#[test]
fn a_clients_prefill_to_other_families() {
    let body = messages(json!({"messages": [
        {"role": "user", "content": "JSON please"},
        {"role": "assistant", "content": "{"},
    ]}));
    let o = ProviderKind::OpenAi;
    let b = body_of(&run(&body, &opts(Operation::Messages, &o)).unwrap());
    assert_eq!(
        b["messages"][1],
        json!({"role": "assistant", "content": "{"})
    );
    assert_eq!(
        (
            b["continue_final_message"].clone(),
            b["add_generation_prompt"].clone()
        ),
        (json!(true), json!(false))
    );
    let az = ProviderKind::Azure {
        api_version: "2024-10-21".into(),
    };
    let g = ProviderKind::Gemini;
    for (p, name) in [(&az, "azure"), (&g, "gemini")] {
        assert_eq!(
            run(&body, &opts(Operation::Messages, p)).unwrap_err(),
            unsupported("assistant prefill (a final assistant message)", name)
        );
    }
}

#[test]
fn parameters_a_provider_cannot_honour() {
    let a = ANTHROPIC();
    let g = ProviderKind::Gemini;
    let o = ProviderKind::OpenAi;
    let az = ProviderKind::Azure {
        api_version: "2024-10-21".into(),
    };
    let cc = Operation::ChatCompletions;
    let m = Operation::Messages;
    let cases: Vec<(Operation, &ProviderKind, Value, &str, &'static str)> = vec![
        (cc, &a, chat(json!({"n": 3})), "n", "anthropic"),
        (cc, &a, chat(json!({"seed": 7})), "seed", "anthropic"),
        (
            cc,
            &a,
            chat(json!({"logprobs": true})),
            "logprobs",
            "anthropic",
        ),
        (
            cc,
            &a,
            chat(json!({"frequency_penalty": 0.5})),
            "frequency_penalty",
            "anthropic",
        ),
        (
            cc,
            &a,
            chat(json!({"response_format": {"type": "json_object"}})),
            "response_format (json_object; use json_schema)",
            "anthropic",
        ),
        (
            cc,
            &a,
            chat(json!({"logit_bias": {"50256": -100}})),
            "logit_bias",
            "anthropic",
        ),
        (
            cc,
            &a,
            chat(json!({"messages": [{"role": "user", "name": "bob", "content": "Hi"}]})),
            "messages[0].name",
            "anthropic",
        ),
        (
            cc,
            &a,
            chat(
                json!({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}]}]}),
            ),
            "input_audio parts",
            "anthropic",
        ),
        (
            cc,
            &g,
            chat(json!({"logprobs": true})),
            "logprobs",
            "gemini",
        ),
        (
            cc,
            &g,
            chat(json!({"top_logprobs": 2})),
            "top_logprobs",
            "gemini",
        ),
        (
            cc,
            &g,
            chat(json!({"n": 2, "stream": true})),
            "n (with stream)",
            "gemini",
        ),
        (
            cc,
            &g,
            chat(
                json!({"parallel_tool_calls": false, "tools": [{"type": "function", "function": {"name": "f"}}]}),
            ),
            "parallel_tool_calls",
            "gemini",
        ),
        (
            m,
            &g,
            messages(
                json!({"tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}}),
            ),
            "tool_choice.disable_parallel_tool_use",
            "gemini",
        ),
        (
            m,
            &o,
            messages(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
            "tools[0] (web_search_20250305 tools)",
            "openai",
        ),
        (
            m,
            &o,
            messages(json!({"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]})),
            "mcp_servers",
            "openai",
        ),
        (m, &az, messages(json!({"top_k": 5})), "top_k", "azure"),
    ];
    for (op, p, body, param, provider) in cases {
        let err = run(&body, &opts(op, p)).unwrap_err();
        assert_eq!(err, unsupported(param, provider), "{body}");
        assert_eq!(err.code(), "unsupported_parameter");
        assert!(err.to_string().contains(param));

        // drop_unsupported: sent without it, and listed.
        let mut o = opts(op, p);
        o.drop_unsupported = true;
        let up = run(&body, &o).unwrap_or_else(|e| panic!("{param}: {e}"));
        assert_eq!(up.dropped, vec![param.to_string()], "{body}");
    }
    // What was dropped is gone from the body.
    let mut o = opts(cc, &a);
    o.drop_unsupported = true;
    let b = body_of(&run(&chat(json!({"n": 3, "logprobs": true})), &o).unwrap());
    assert!(b.get("n").is_none() && b.get("logprobs").is_none());
}

#[test]
fn defaults_are_not_refused() {
    // n=1, zero penalties, logprobs false, text modality, bookkeeping fields: nothing to
    // honour.
    let a = ANTHROPIC();
    let body = chat(json!({
        "n": 1, "presence_penalty": 0, "frequency_penalty": 0.0, "logprobs": false,
        "modalities": ["text"], "store": true, "metadata": {"k": "v"}, "service_tier": "auto",
        "prompt_cache_key": "k", "response_format": {"type": "text"}, "seed": null
    }));
    let up = run(&body, &opts(Operation::ChatCompletions, &a)).unwrap();
    assert!(up.dropped.is_empty());
    // Anthropic: nulls and the service tier.
    let body = messages(
        json!({"thinking": null, "service_tier": "auto", "tool_choice": null, "metadata": {"user_id": null}}),
    );
    let up = run(&body, &opts(Operation::Messages, &ProviderKind::OpenAi)).unwrap();
    assert!(up.dropped.is_empty());
    // Gemini takes n, seed and penalties.
    let g = ProviderKind::Gemini;
    let body = chat(json!({"n": 2, "seed": 7, "presence_penalty": 0.5}));
    let b = body_of(&run(&body, &opts(Operation::ChatCompletions, &g)).unwrap());
    assert_eq!(
        b["generationConfig"],
        json!({"candidateCount": 2, "seed": 7, "presencePenalty": 0.5})
    );
}

#[test]
fn anthropic_needs_max_tokens() {
    let a = ANTHROPIC();
    let b = body_of(&run(&chat(json!({})), &opts(Operation::ChatCompletions, &a)).unwrap());
    assert_eq!(b["max_tokens"], DEFAULT_ANTHROPIC_MAX_TOKENS);
    let b = body_of(
        &run(
            &chat(json!({"max_tokens": 10, "max_completion_tokens": 20})),
            &opts(Operation::ChatCompletions, &a),
        )
        .unwrap(),
    );
    assert_eq!(b["max_tokens"], 20);
}

/// The intents of provider-formats §2.3 in each family.
#[test]
fn tool_choice_table() {
    let tools =
        json!([{"type": "function", "function": {"name": "X", "parameters": {"type": "object"}}}]);
    let rows = [
        (
            json!("auto"),
            json!({"type": "auto"}),
            json!({"mode": "AUTO"}),
        ),
        (
            json!("required"),
            json!({"type": "any"}),
            json!({"mode": "ANY"}),
        ),
        (
            json!({"type": "function", "function": {"name": "X"}}),
            json!({"type": "tool", "name": "X"}),
            json!({"mode": "ANY", "allowedFunctionNames": ["X"]}),
        ),
        (
            json!("none"),
            json!({"type": "none"}),
            json!({"mode": "NONE"}),
        ),
    ];
    let a = ANTHROPIC();
    let g = ProviderKind::Gemini;
    let o = ProviderKind::OpenAi;
    for (openai, anthropic, gemini) in rows {
        let body = chat(json!({"tools": tools, "tool_choice": openai}));
        let b = body_of(&run(&body, &opts(Operation::ChatCompletions, &a)).unwrap());
        assert_eq!(b["tool_choice"], anthropic);
        let b = body_of(&run(&body, &opts(Operation::ChatCompletions, &g)).unwrap());
        assert_eq!(b["toolConfig"]["functionCallingConfig"], gemini);
        // And back from Anthropic.
        let body = messages(json!({
            "tools": [{"name": "X", "input_schema": {"type": "object"}}],
            "tool_choice": anthropic,
        }));
        let b = body_of(&run(&body, &opts(Operation::Messages, &o)).unwrap());
        assert_eq!(b["tool_choice"], openai);
    }
    // No parallel calls.
    let body =
        chat(json!({"tools": tools, "tool_choice": "required", "parallel_tool_calls": false}));
    let b = body_of(&run(&body, &opts(Operation::ChatCompletions, &a)).unwrap());
    assert_eq!(
        b["tool_choice"],
        json!({"type": "any", "disable_parallel_tool_use": true})
    );
    let body = chat(json!({"tools": tools, "parallel_tool_calls": false}));
    let b = body_of(&run(&body, &opts(Operation::ChatCompletions, &a)).unwrap());
    assert_eq!(
        b["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    let body = messages(json!({
        "tools": [{"name": "X", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    }));
    let b = body_of(&run(&body, &opts(Operation::Messages, &o)).unwrap());
    assert_eq!(
        (b["tool_choice"].clone(), b["parallel_tool_calls"].clone()),
        (json!("required"), json!(false))
    );
    // A subset of the tools is sending only those tools.
    let body = chat(json!({
        "tools": [
            {"type": "function", "function": {"name": "A"}},
            {"type": "function", "function": {"name": "B"}},
        ],
        "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "B"}}]}},
    }));
    let b = body_of(&run(&body, &opts(Operation::ChatCompletions, &a)).unwrap());
    assert_eq!(b["tools"].as_array().unwrap().len(), 1);
    assert_eq!(b["tools"][0]["name"], "B");
    assert_eq!(b["tool_choice"], json!({"type": "any"}));
}

/// Pitfall 10: Anthropic refuses empty text blocks; OpenAI clients send `content: ""` on
/// tool-call turns, empty system messages and whitespace.
#[test]
fn no_empty_text_blocks_reach_anthropic() {
    let a = ANTHROPIC();
    let body = chat(json!({"messages": [
        {"role": "system", "content": ""},
        {"role": "system", "content": "  "},
        {"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "Go"}]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": ""},
        {"role": "assistant", "content": " \n"},
        {"role": "user", "content": "Next"},
    ]}));
    let b = body_of(&run(&body, &opts(Operation::ChatCompletions, &a)).unwrap());
    assert!(b.get("system").is_none());
    assert_eq!(
        b["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Go"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1"},
                {"type": "text", "text": "Next"},
            ]},
        ])
    );
}

/// Anthropic's tool_use ids allow `[a-zA-Z0-9_-]`: other providers' ids are mapped the same
/// way in the call and in its result.
#[test]
fn tool_ids_fit_anthropic() {
    let a = ANTHROPIC();
    let body = chat(json!({"messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "tool_calls": [
            {"id": "chatcmpl-tool-1.2:3", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "chatcmpl-tool-1.2:3", "content": "ok"},
    ]}));
    let b = body_of(&run(&body, &opts(Operation::ChatCompletions, &a)).unwrap());
    assert_eq!(b["messages"][1]["content"][0]["id"], "chatcmpl-tool-1_2_3");
    assert_eq!(
        b["messages"][2]["content"][0]["tool_use_id"],
        "chatcmpl-tool-1_2_3"
    );
}

#[test]
fn gemini_needs_the_function_name_of_each_result() {
    let g = ProviderKind::Gemini;
    let body = chat(json!({"messages": [
        {"role": "user", "content": "Go"},
        {"role": "tool", "tool_call_id": "lost", "content": "ok"},
    ]}));
    let e = run(&body, &opts(Operation::ChatCompletions, &g)).unwrap_err();
    assert!(
        matches!(&e, RequestError::Invalid { reason, .. } if reason.contains("`lost`")),
        "{e}"
    );
}

#[test]
fn json_output_per_provider() {
    let g = ProviderKind::Gemini;
    let b = body_of(
        &run(
            &chat(json!({"response_format": {"type": "json_object"}})),
            &opts(Operation::ChatCompletions, &g),
        )
        .unwrap(),
    );
    assert_eq!(
        b["generationConfig"],
        json!({"responseMimeType": "application/json"})
    );
    let o = ProviderKind::OpenAi;
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let body =
        messages(json!({"output_config": {"format": {"type": "json_schema", "schema": schema}}}));
    let b = body_of(&run(&body, &opts(Operation::Messages, &o)).unwrap());
    assert_eq!(
        b["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "response", "schema": schema, "strict": true}})
    );
}

#[test]
fn route_model_and_paths() {
    let g = ProviderKind::Gemini;
    let mut o = opts(Operation::Messages, &g);
    o.model = Some("gemini-2.5-flash");
    let up = run(&messages(json!({"stream": true})), &o).unwrap();
    assert_eq!(up.model, "gemini-2.5-flash");
    assert_eq!(
        up.path,
        "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert!(up.stream && up.translated && up.client_wants_usage);
    assert!(
        body_of(&up).get("model").is_none(),
        "Gemini takes the model in the path"
    );

    let a = ANTHROPIC();
    let mut o = opts(Operation::ChatCompletions, &a);
    o.model = Some("claude-haiku-4-5");
    let up = run(
        &chat(json!({"stream": true, "stream_options": {"include_usage": true}})),
        &o,
    )
    .unwrap();
    assert_eq!(body_of(&up)["model"], "claude-haiku-4-5");
    assert_eq!(body_of(&up)["stream"], true);
    assert!(up.client_wants_usage);
}
