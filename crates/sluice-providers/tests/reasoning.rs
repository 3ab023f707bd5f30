//! Reasoning across families: effort and budgets mapped both ways (the README's table),
//! thinking shown to each client in its own format (whole and streamed, compared with the
//! goldens in `tests/golden/streams/`), and signed thinking carried through an OpenAI
//! client's next turn back to Anthropic exactly.
//!
//! `SLUICE_BLESS=1 cargo test -p sluice-providers --test reasoning` rewrites the stream
//! goldens.

mod stream_support;

use std::path::PathBuf;

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::bedrock::{self, BedrockRequestOptions};
use sluice_providers::reasoning::BudgetTable;
use sluice_providers::request::{translate_request, RequestError, RequestOptions, UpstreamRequest};
use sluice_providers::response::{translate_response, ResponseOptions};
use sluice_providers::shape::gemini::gemini_call_id;
use sluice_providers::stream::EventKind;
use sluice_providers::{Operation, ProviderKind, Usage};
use stream_support::*;

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

fn run_req(body: &Value, o: &RequestOptions<'_>) -> Result<UpstreamRequest, RequestError> {
    translate_request(&Bytes::from(body.to_string()), o)
}

fn body_of(up: &UpstreamRequest) -> Value {
    serde_json::from_slice(&up.body).expect("upstream body is JSON")
}

fn chat(model: &str, extra: Value) -> Value {
    let mut b = json!({"model": model, "messages": [{"role": "user", "content": "Hi"}]});
    for (k, v) in extra.as_object().expect("object").clone() {
        b[k] = v;
    }
    b
}

fn messages(model: &str, extra: Value) -> Value {
    let mut b = json!({
        "model": model,
        "max_tokens": 20000,
        "messages": [{"role": "user", "content": "Hi"}],
    });
    for (k, v) in extra.as_object().expect("object").clone() {
        b[k] = v;
    }
    b
}

// ---- Requests ----

#[test]
fn every_effort_level_to_anthropic_and_gemini() {
    let a = ProviderKind::anthropic();
    let g = ProviderKind::Gemini;
    let cc = Operation::ChatCompletions;
    // (effort, Anthropic budget and max_tokens without a client limit, Gemini 2.5 budget,
    // Gemini 3 level)
    let table = [
        ("minimal", 1024, 1024 + 4096, 1024, "low"),
        ("low", 2048, 2048 + 4096, 2048, "low"),
        ("medium", 8192, 8192 + 4096, 8192, "high"),
        ("high", 16384, 16384 + 4096, 16384, "high"),
        ("xhigh", 32768, 32768 + 4096, 32768, "high"),
    ];
    for (effort, budget, max_tokens, g_budget, level) in table {
        let body = chat("m", json!({"reasoning_effort": effort}));
        let b = body_of(&run_req(&body, &opts(cc, &a)).unwrap());
        assert_eq!(
            b["thinking"],
            json!({"type": "enabled", "budget_tokens": budget}),
            "{effort}"
        );
        assert_eq!(b["max_tokens"], max_tokens, "{effort}");

        let mut body = chat("gemini-2.5-flash", json!({"reasoning_effort": effort}));
        let b = body_of(&run_req(&body, &opts(cc, &g)).unwrap());
        assert_eq!(
            b["generationConfig"]["thinkingConfig"],
            json!({"thinkingBudget": g_budget, "includeThoughts": true}),
            "{effort}"
        );
        body["model"] = json!("gemini-3-pro-preview");
        let b = body_of(&run_req(&body, &opts(cc, &g)).unwrap());
        assert_eq!(
            b["generationConfig"]["thinkingConfig"],
            json!({"thinkingLevel": level, "includeThoughts": true}),
            "{effort}"
        );
    }
    // `none`: Anthropic's default (no thinking); Gemini 2.5 off; Gemini 3 at its least.
    let body = chat("m", json!({"reasoning_effort": "none"}));
    let b = body_of(&run_req(&body, &opts(cc, &a)).unwrap());
    assert!(b.get("thinking").is_none());
    assert_eq!(b["max_tokens"], 4096);
    let body = chat("gemini-3-flash", json!({"reasoning_effort": "none"}));
    let b = body_of(&run_req(&body, &opts(cc, &g)).unwrap());
    assert_eq!(
        b["generationConfig"]["thinkingConfig"],
        json!({"thinkingLevel": "low"})
    );
}

#[test]
fn anthropic_max_tokens_make_room_for_the_budget() {
    let a = ProviderKind::anthropic();
    let cc = Operation::ChatCompletions;
    // A client limit above the budget is kept: it covers thinking and answer on both sides.
    let body = chat(
        "m",
        json!({"reasoning_effort": "low", "max_completion_tokens": 10000}),
    );
    let b = body_of(&run_req(&body, &opts(cc, &a)).unwrap());
    assert_eq!(b["max_tokens"], 10000);
    assert_eq!(b["thinking"]["budget_tokens"], 2048);
    // One that leaves the budget no room bounds the answer after the thinking.
    let body = chat("m", json!({"reasoning_effort": "high", "max_tokens": 500}));
    let b = body_of(&run_req(&body, &opts(cc, &a)).unwrap());
    assert_eq!(b["max_tokens"], 16384 + 500);
}

#[test]
fn budgets_to_openai_are_the_level_that_holds_them() {
    let o = ProviderKind::OpenAi;
    let m = Operation::Messages;
    for (budget, effort) in [
        (1024, "low"),
        (2048, "low"),
        (2049, "medium"),
        (8192, "medium"),
        (8193, "high"),
        (60000, "high"),
    ] {
        let body = messages(
            "gpt-5",
            json!({"thinking": {"type": "enabled", "budget_tokens": budget}}),
        );
        let b = body_of(&run_req(&body, &opts(m, &o)).unwrap());
        assert_eq!(b["reasoning_effort"], effort, "{budget}");
        assert_eq!(b["max_completion_tokens"], 20000);
    }
    // Disabled thinking and adaptive thinking leave the model's default.
    for t in [json!({"type": "disabled"}), json!({"type": "adaptive"})] {
        let body = messages("gpt-5", json!({ "thinking": t }));
        let b = body_of(&run_req(&body, &opts(m, &o)).unwrap());
        assert!(b.get("reasoning_effort").is_none(), "{t}");
    }
    // Anthropic's effort with adaptive thinking is OpenAI's effort (`max` its highest).
    let body = messages(
        "gpt-5",
        json!({"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}),
    );
    let b = body_of(&run_req(&body, &opts(m, &o)).unwrap());
    assert_eq!(b["reasoning_effort"], "high");
    // An explicit budget wins over an effort, whatever their order in the body.
    let body = messages(
        "gpt-5",
        json!({"output_config": {"effort": "low"}, "thinking": {"type": "enabled", "budget_tokens": 9000}}),
    );
    let b = body_of(&run_req(&body, &opts(m, &o)).unwrap());
    assert_eq!(b["reasoning_effort"], "high");
}

#[test]
fn a_route_table_replaces_the_default() {
    let table = BudgetTable {
        minimal: 1024,
        low: 4000,
        medium: 12000,
        high: 30000,
        xhigh: 60000,
    };
    let a = ProviderKind::anthropic();
    let mut o = opts(Operation::ChatCompletions, &a);
    o.reasoning_budgets = Some(&table);
    let b = body_of(&run_req(&chat("m", json!({"reasoning_effort": "medium"})), &o).unwrap());
    assert_eq!(b["thinking"]["budget_tokens"], 12000);
    let oa = ProviderKind::OpenAi;
    let mut o = opts(Operation::Messages, &oa);
    o.reasoning_budgets = Some(&table);
    let body = messages(
        "gpt-5",
        json!({"thinking": {"type": "enabled", "budget_tokens": 3000}}),
    );
    assert_eq!(
        body_of(&run_req(&body, &o).unwrap())["reasoning_effort"],
        "low"
    );
}

#[test]
fn small_budgets_are_raised_to_anthropics_minimum() {
    let table = BudgetTable {
        minimal: 100,
        ..BudgetTable::DEFAULT
    };
    let a = ProviderKind::anthropic();
    let mut o = opts(Operation::ChatCompletions, &a);
    o.reasoning_budgets = Some(&table);
    let b = body_of(&run_req(&chat("m", json!({"reasoning_effort": "minimal"})), &o).unwrap());
    assert_eq!(b["thinking"]["budget_tokens"], 1024);
}

#[test]
fn malformed_settings_are_400s_that_say_what_is_valid() {
    let a = ProviderKind::anthropic();
    let o = ProviderKind::OpenAi;
    let err = run_req(
        &chat("m", json!({"reasoning_effort": "extreme"})),
        &opts(Operation::ChatCompletions, &a),
    )
    .unwrap_err();
    assert_eq!(err.code(), "invalid_request");
    assert!(
        err.to_string()
            .contains("must be none, minimal, low, medium, high or xhigh"),
        "{err}"
    );
    let err = run_req(
        &messages("gpt-5", json!({"thinking": {"type": "enabled"}})),
        &opts(Operation::Messages, &o),
    )
    .unwrap_err();
    assert!(err.to_string().contains("thinking.budget_tokens"), "{err}");
    let err = run_req(
        &chat(
            "m",
            json!({"messages": [{"role": "assistant", "content": "x", "thinking_blocks": [{"type": "note"}]}]}),
        ),
        &opts(Operation::ChatCompletions, &a),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("must be thinking or redacted_thinking"),
        "{err}"
    );
}

#[test]
fn bedrock_still_refuses_reasoning_unless_dropped() {
    let body = Bytes::from(chat("m", json!({"reasoning_effort": "high"})).to_string());
    let mut o = BedrockRequestOptions::new(Operation::ChatCompletions);
    let err = bedrock::translate_request(&body, &o).unwrap_err();
    assert_eq!(err.code(), "unsupported_parameter");
    assert!(err.to_string().contains("reasoning_effort"), "{err}");
    o.drop_unsupported = true;
    let up = bedrock::translate_request(&body, &o).unwrap();
    assert_eq!(up.dropped, ["reasoning_effort"]);
}

#[test]
fn unsigned_thinking_never_goes_to_anthropic() {
    // An Anthropic client sends back the thinking block the gateway made from another
    // family's reasoning (empty signature): Anthropic would refuse it, so it is left out.
    let a = ProviderKind::anthropic();
    let body = messages(
        "claude-sonnet-4-5",
        json!({"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "from gemini", "signature": ""},
                {"type": "text", "text": "Hello"}
            ]},
            {"role": "user", "content": "Again"}
        ]}),
    );
    // Anthropic → Anthropic passes through untouched; the rule is for translated routes
    // (an OpenAI client's thinking_blocks).
    let body2 = chat(
        "claude-sonnet-4-5",
        json!({"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello", "thinking_blocks": [
                {"type": "thinking", "thinking": "from gemini", "signature": ""}
            ]},
            {"role": "user", "content": "Again"}
        ]}),
    );
    let b = body_of(&run_req(&body2, &opts(Operation::ChatCompletions, &a)).unwrap());
    assert_eq!(
        b["messages"][1]["content"],
        json!([{"type": "text", "text": "Hello"}])
    );
    let up = run_req(&body, &opts(Operation::Messages, &a)).unwrap();
    assert!(!up.translated);
}

// ---- Streams: goldens per pair, and what each client reads ----

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/streams")
}

/// Compares a translated stream with its golden (SSE text), or writes it under
/// `SLUICE_BLESS`.
fn check_stream(name: &str, client: &str, r: &Run) {
    let p = golden_dir().join(format!("{}__{client}.sse", name.trim_end_matches(".sse")));
    let actual = String::from_utf8(concat(&r.out)).expect("UTF-8");
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::create_dir_all(golden_dir()).expect("mkdir");
        std::fs::write(&p, &actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (SLUICE_BLESS=1 writes it)", p.display()));
    // Event by event, each data line compared as JSON (key order is not the contract).
    let parse = |s: &str| -> Vec<(String, Value)> {
        s.split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let mut name = String::new();
                let mut data = String::new();
                for line in e.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n.to_string();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = d.to_string();
                    }
                }
                let v = serde_json::from_str(&data).unwrap_or(Value::String(data));
                (name, v)
            })
            .collect()
    };
    assert_eq!(parse(&actual), parse(&expected), "{}", p.display());
}

fn signature() -> &'static str {
    "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/="
}

const THINKING: &str =
    "The user wants Paris weather.\nI should call \"get_weather\" with city=Paris.";
const REDACTED: &str = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP";

#[test]
fn anthropic_thinking_to_openai() {
    let name = "anthropic_thinking_tool_use.sse";
    let r = run(
        name,
        &Opts::new(Operation::ChatCompletions, name).usage(true),
    );
    check_stream(name, "openai", &r);
    let m = openai_message(&r.out);
    assert_eq!(m.reasoning, THINKING, "streamed as reasoning_content");
    assert_eq!(m.content, "Let me check.", "never mixed into the answer");
    assert_eq!(
        m.thinking_blocks,
        [
            json!({"type": "thinking", "thinking": THINKING, "signature": signature()}),
            json!({"type": "redacted_thinking", "data": REDACTED}),
        ]
    );
    assert_eq!(m.tool_calls.len(), 1);
    assert_eq!(m.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        m.usage.expect("usage")["completion_tokens_details"]["reasoning_tokens"],
        58
    );
    assert_eq!(
        r.usage,
        Some(Usage {
            input: 412,
            output: 96,
            reasoning: 58,
            ..Usage::default()
        })
    );
    // The reasoning deltas are content: they commit the stream as text would.
    assert_eq!(kinds(&r.out)[1], EventKind::Content);
    // Nothing is held once the block is handed over.
    assert!(r.max_translator_held >= THINKING.len());
}

#[test]
fn anthropic_thinking_through_a_continuation_keeps_its_signature() {
    // Same family, re-encoded (a continuation always is): the blocks come out as they went
    // in, signature and redacted data included.
    let name = "anthropic_thinking_tool_use.sse";
    let input = fixture(name);
    let provider = provider_of(name);
    let mut so = sluice_providers::stream::StreamOptions::new(
        Operation::Messages,
        &provider,
        "claude-sonnet-4-5",
    );
    so.continuation = true;
    let mut t = sluice_providers::stream::translator(&so);
    let r = run_with(t.as_mut(), &input, &[]);
    let mut m = AnthropicMessage {
        id: "msg_cut".into(),
        ..AnthropicMessage::default()
    };
    anthropic_continue(&mut m, &r.out);
    let kinds: Vec<&str> = m.blocks.iter().map(|b| b.kind.as_str()).collect();
    assert_eq!(kinds, ["thinking", "redacted_thinking", "text", "tool_use"]);
    assert_eq!(m.blocks[0].text, THINKING);
    assert_eq!(m.blocks[0].signature, signature());
    assert_eq!(m.blocks[1].signature, REDACTED);
    assert_eq!(
        m.usage.expect("usage")["output_tokens_details"]["thinking_tokens"],
        58
    );
}

#[test]
fn openai_reasoning_to_anthropic() {
    let name = "openai_reasoning.sse";
    let r = run(name, &Opts::new(Operation::Messages, name));
    check_stream(name, "anthropic", &r);
    let m = anthropic_message(&r.out);
    let kinds: Vec<&str> = m.blocks.iter().map(|b| b.kind.as_str()).collect();
    assert_eq!(kinds, ["thinking", "text"]);
    assert_eq!(m.blocks[0].text, "9.11 vs 9.9: compare tenths, 1 < 9.");
    assert_eq!(
        m.blocks[0].signature, "",
        "unsigned: another family's reasoning"
    );
    assert_eq!(m.blocks[1].text, "9.9 is larger.");
    assert!(m.blocks.iter().all(|b| b.stopped));
    let u = m.usage.expect("usage");
    assert_eq!(u["output_tokens"], 40);
    assert_eq!(u["output_tokens_details"]["thinking_tokens"], 33);
    assert_eq!(r.usage.map(|u| u.reasoning), Some(33));
}

#[test]
fn gemini_thoughts_to_openai() {
    let name = "gemini_thoughts.sse";
    let r = run(
        name,
        &Opts::new(Operation::ChatCompletions, name).usage(true),
    );
    check_stream(name, "openai", &r);
    let m = openai_message(&r.out);
    assert_eq!(
        m.reasoning,
        "**Planning the lookup**\n\nThe user wants the weather. I will call get_weather."
    );
    assert_eq!(m.content, "");
    assert!(
        m.thinking_blocks.is_empty(),
        "Gemini signs calls, not thoughts"
    );
    // The call's thought signature rides in its id, back to Gemini on the next turn.
    let (id, name_, args) = &m.tool_calls[0];
    assert_eq!(
        (name_.as_str(), args.as_str()),
        ("get_weather", "{\"city\":\"Paris\"}")
    );
    assert_eq!(
        gemini_call_id(id).thought_signature.as_deref(),
        Some("CiQB0e2Kb+/sig==")
    );
    assert_eq!(
        m.usage.expect("usage")["completion_tokens_details"]["reasoning_tokens"],
        24
    );
}

#[test]
fn gemini_thoughts_to_anthropic() {
    let name = "gemini_thoughts.sse";
    let r = run(name, &Opts::new(Operation::Messages, name));
    check_stream(name, "anthropic", &r);
    let m = anthropic_message(&r.out);
    let kinds: Vec<&str> = m.blocks.iter().map(|b| b.kind.as_str()).collect();
    assert_eq!(kinds, ["thinking", "tool_use"]);
    assert!(m.blocks[0].text.starts_with("**Planning the lookup**"));
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(
        m.usage.expect("usage")["output_tokens_details"]["thinking_tokens"],
        24
    );
}

// ---- Signed thinking through an OpenAI client's next turn ----

#[test]
fn an_openai_client_sends_the_signed_blocks_back_to_anthropic_exactly() {
    let a = ProviderKind::anthropic();
    // Turn 1, streamed: what the client accumulated.
    let name = "anthropic_thinking_tool_use.sse";
    let r = run(name, &Opts::new(Operation::ChatCompletions, name));
    let m = openai_message(&r.out);
    let (id, fname, args) = m.tool_calls[0].clone();
    // Turn 2: the assistant message as the client keeps it, then the tool's answer.
    let body = json!({
        "model": "claude-sonnet-4-5",
        "reasoning_effort": "medium",
        "messages": [
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": m.content, "reasoning_content": m.reasoning,
             "thinking_blocks": m.thinking_blocks,
             "tool_calls": [{"id": id, "type": "function", "function": {"name": fname, "arguments": args}}]},
            {"role": "tool", "tool_call_id": id, "content": "18C"}
        ]
    });
    let b = body_of(&run_req(&body, &opts(Operation::ChatCompletions, &a)).unwrap());
    let assistant = &b["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"],
        json!([
            {"type": "thinking", "thinking": THINKING, "signature": signature()},
            {"type": "redacted_thinking", "data": REDACTED},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01ThinkCall", "name": "get_weather", "input": {"city": "Paris"}}
        ])
    );

    // The same from a whole (non-streamed) response.
    let resp = translate_response(
        Bytes::from(
            std::fs::read(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/responses/anthropic_thinking_tool_use.json"),
            )
            .unwrap(),
        ),
        &ResponseOptions {
            op: Operation::ChatCompletions,
            provider: &a,
            model: "claude-sonnet-4-5",
            now_unix: 0,
        },
    )
    .unwrap();
    let msg = serde_json::from_slice::<Value>(&resp.body).unwrap()["choices"][0]["message"].clone();
    let body = json!({
        "model": "claude-sonnet-4-5",
        "reasoning_effort": "medium",
        "messages": [
            {"role": "user", "content": "What's the weather in Paris?"},
            msg,
            {"role": "tool", "tool_call_id": "toolu_01ThinkCall", "content": "18C"}
        ]
    });
    let b2 = body_of(&run_req(&body, &opts(Operation::ChatCompletions, &a)).unwrap());
    assert_eq!(b2["messages"][1], b["messages"][1]);
}

// ---- Chunking ----

#[test]
fn thinking_streams_split_at_every_byte_give_the_same_client_events() {
    // Each thinking fixture, to each client, split in two at every byte boundary and fed
    // byte by byte: the same events, usage and text as the whole stream.
    for name in [
        "anthropic_thinking_tool_use.sse",
        "openai_reasoning.sse",
        "gemini_thoughts.sse",
    ] {
        for op in OPS {
            let opts = Opts::new(op, name).usage(true).track(true);
            let whole = run(name, &opts);
            let input = fixture(name);
            let mut splits: Vec<Vec<usize>> =
                (1..input.len()).map(|k| vec![k, input.len()]).collect();
            splits.push(vec![1]);
            for sizes in splits {
                let r = run_chunked(name, &opts, &sizes);
                assert_eq!(r.out, whole.out, "{name} {op:?} {sizes:?}");
                assert_eq!(r.usage, whole.usage, "{name} {op:?} {sizes:?}");
                assert_eq!(r.text, whole.text, "{name} {op:?} {sizes:?}");
            }
        }
    }
}

#[test]
fn a_signed_thinking_block_held_past_its_bound_ends_the_stream_with_an_error() {
    // The OpenAI client's `thinking_blocks` needs the whole text before the signature: the
    // gateway holds at most 4 MiB of it, then ends the stream honestly instead of growing.
    let big = "x".repeat(64 << 10);
    let mut sse = String::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_big\",\"model\":\"claude\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n\
         event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
    );
    for _ in 0..80 {
        sse.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"thinking_delta\",\"thinking\":\"{big}\"}}}}\n\n"
        ));
    }
    let provider = ProviderKind::anthropic();
    let so = sluice_providers::stream::StreamOptions::new(
        Operation::ChatCompletions,
        &provider,
        "claude",
    );
    let mut t = sluice_providers::stream::translator(&so);
    let r = run_with(t.as_mut(), &Bytes::from(sse), &[]);
    let m = openai_message(&r.out);
    let e = m.error.expect("an error event");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("a thinking block ran over 4 MiB before its signature"),
        "{e}"
    );
    assert!(
        r.max_translator_held <= 4 << 20,
        "{}",
        r.max_translator_held
    );
    // What the client saw of the reasoning before the end is intact.
    assert_eq!(m.reasoning.len(), 4 << 20);
}
