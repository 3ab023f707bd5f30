//! Gemini-native clients (`generateContent`, `streamGenerateContent`) to OpenAI- and
//! Anthropic-speaking upstreams: request goldens, whole-response goldens, stream goldens read
//! back the way `google-genai` reads a stream (each chunk a whole response; the text is the
//! concatenation; the last chunk has the finish reason and the usage), every stream re-chunked
//! at every byte boundary with the same events, and Anthropic's signed thinking round trip
//! through a thought part's `thoughtSignature`.
//!
//! `SLUICE_BLESS=1 cargo test -p sluice-providers --test gemini_clients` rewrites the goldens.

mod stream_support;

use std::path::PathBuf;

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::request::{translate_request_known, KnownFields, RequestOptions};
use sluice_providers::response::{translate_response, ResponseOptions};
use sluice_providers::stream::{Emitted, EventKind};
use sluice_providers::{Operation, ProviderKind};
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
        "openai" => ProviderKind::OpenAi,
        _ => unreachable!("{name}"),
    }
}

/// Translates a Gemini client's body for `provider` (the model and streaming from the path,
/// as the gateway reads them).
fn translate(
    body: &Bytes,
    op: Operation,
    provider: &ProviderKind,
    model: &str,
) -> Result<sluice_providers::request::UpstreamRequest, sluice_providers::request::RequestError> {
    translate_request_known(
        body,
        &RequestOptions {
            op,
            provider,
            model: None,
            drop_unsupported: false,
            stream_usage: false,
            prefill: None,
            reasoning_budgets: None,
        },
        &KnownFields {
            model: Some(model),
            stream: op.streams_by_path(),
            include_usage: None,
        },
    )
}

#[test]
fn request_goldens() {
    let mut failures = Vec::new();
    for (name, op, model) in [
        (
            "gemini_generate_content",
            Operation::GenerateContent,
            "claude-sonnet-4-5",
        ),
        (
            "gemini_stream_json",
            Operation::StreamGenerateContent,
            "gpt-4o",
        ),
    ] {
        let body = read(&format!("requests/{name}.json"));
        for p in ["anthropic", "openai"] {
            let up = translate(&body, op, &provider(p), model)
                .unwrap_or_else(|e| panic!("{name} → {p}: {e}"));
            assert!(up.translated);
            assert_eq!(up.stream, op == Operation::StreamGenerateContent);
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
fn the_thought_signature_goes_back_to_anthropic_as_the_signed_block() {
    let body = read("requests/gemini_generate_content.json");
    let up = translate(
        &body,
        Operation::GenerateContent,
        &provider("anthropic"),
        "claude-sonnet-4-5",
    )
    .unwrap();
    let b = json_of(&up.body);
    assert_eq!(
        b["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "The user wants Paris weather.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/="}),
        "the SDK's URL-safe base64 back in Anthropic's alphabet"
    );
    let call = &b["messages"][1]["content"][1];
    assert_eq!(call["type"], "tool_use");
    assert_eq!(b["messages"][2]["content"][0]["tool_use_id"], call["id"]);
    assert_eq!(
        b["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    // OpenAI gets no signature, and the call and its result paired by id.
    let up = translate(
        &body,
        Operation::GenerateContent,
        &provider("openai"),
        "gpt-4o",
    )
    .unwrap();
    let o = json_of(&up.body);
    assert!(!o.to_string().contains("EqQBCgIYAhIM"), "{o}");
    assert_eq!(
        o["messages"][2]["tool_calls"][0]["id"],
        o["messages"][3]["tool_call_id"]
    );
}

#[test]
fn bad_bodies_are_400s_naming_the_gemini_field() {
    for (body, param) in [
        (json!({}), "`contents`"),
        (
            json!({"contents": [{"role": "system", "parts": []}]}),
            "`contents[0].role`",
        ),
        (
            json!({"contents": [{"parts": [{"functionCall": {"args": {}}}]}]}),
            "`contents[0].parts[0].functionCall.name`",
        ),
        (
            json!({"contents": [], "cachedContent": "cachedContents/1"}),
            "cachedContent",
        ),
    ] {
        let err = translate(
            &Bytes::from(body.to_string()),
            Operation::GenerateContent,
            &provider("anthropic"),
            "m",
        )
        .unwrap_err();
        assert!(err.to_string().contains(param), "{param}: {err}");
    }
}

#[test]
fn response_goldens() {
    let mut failures = Vec::new();
    for (name, p, model) in [
        ("anthropic_message", "anthropic", "claude-sonnet-4-5"),
        (
            "anthropic_thinking_tool_use",
            "anthropic",
            "claude-sonnet-4-5",
        ),
        ("openai_chat_tool_calls", "openai", "gpt-4o-mini"),
        ("openai_chat_reasoning", "openai", "deepseek-reasoner"),
    ] {
        let provider = provider(p);
        let out = translate_response(
            read(&format!("responses/{name}.json")),
            &ResponseOptions {
                op: Operation::GenerateContent,
                provider: &provider,
                model,
                now_unix: 1_767_225_600,
            },
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let body = json_of(&out.body);
        let u = out.usage.expect("usage");
        assert_eq!(
            body["usageMetadata"]["totalTokenCount"],
            u.input + u.output,
            "{name}"
        );
        failures.extend(check_json(&format!("responses/{name}__gemini.json"), &body));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A Gemini stream as the SDK reads it: every event an unnamed `data:` chunk that is a whole
/// response; the parts, concatenated; the last chunk's finish reason and usage.
#[derive(Debug, Default)]
struct Read {
    text: String,
    thoughts: String,
    signatures: Vec<String>,
    calls: Vec<Value>,
    finish: Option<String>,
    usage: Option<Value>,
    error: Option<Value>,
}

fn read_stream(out: &[Emitted]) -> Read {
    let mut r = Read::default();
    for e in out {
        let (name, data) = decode_one(&e.bytes);
        assert_eq!(name, "message", "Gemini events are unnamed: {data}");
        let v: Value = serde_json::from_str(&data).unwrap();
        assert!(r.finish.is_none(), "nothing after the finish: {data}");
        if let Some(err) = v.get("error") {
            assert_eq!(e.kind, EventKind::Error);
            r.error = Some(err.clone());
            continue;
        }
        let c = &v["candidates"][0];
        for p in c["content"]["parts"].as_array().unwrap() {
            if let Some(f) = p.get("functionCall") {
                assert!(f["args"].is_object(), "{data}");
                r.calls.push(f.clone());
            } else if p["thought"] == true {
                r.thoughts.push_str(p["text"].as_str().unwrap());
                if let Some(s) = p["thoughtSignature"].as_str() {
                    r.signatures.push(s.to_string());
                }
            } else {
                r.text.push_str(p["text"].as_str().unwrap());
            }
        }
        if let Some(f) = c["finishReason"].as_str() {
            r.finish = Some(f.to_string());
            r.usage = Some(v["usageMetadata"].clone());
            assert_eq!(e.kind, EventKind::Trailer);
        }
    }
    r
}

fn golden_stream(name: &str, r: &Run) {
    golden_events(
        &format!("streams/{}__gemini.sse", name.trim_end_matches(".sse")),
        &r.out,
    );
}

/// Compares the events with `tests/golden/{golden}` chunk by chunk (as JSON).
fn golden_events(golden: &str, out: &[Emitted]) {
    let p = dir().join("golden").join(golden);
    let actual = String::from_utf8(concat(out)).expect("UTF-8");
    if bless() {
        std::fs::write(&p, &actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (SLUICE_BLESS=1 writes it)", p.display()));
    let parse = |s: &str| -> Vec<Value> {
        s.split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let d = e.strip_prefix("data: ").unwrap_or(e);
                serde_json::from_str(d).unwrap_or(Value::String(d.to_string()))
            })
            .collect()
    };
    assert_eq!(parse(&actual), parse(&expected), "{}", p.display());
}

const STREAMS: [&str; 7] = [
    "anthropic_basic.sse",
    "anthropic_tool_use.sse",
    "anthropic_thinking_tool_use.sse",
    "anthropic_error_after_200.sse",
    "openai_text_usage.sse",
    "openai_parallel_tools.sse",
    "openai_reasoning.sse",
];

fn gemini_run(name: &str) -> Run {
    run(
        name,
        &Opts::new(Operation::StreamGenerateContent, name).track(true),
    )
}

#[test]
fn stream_goldens_read_like_the_sdk_reads_them() {
    for name in STREAMS {
        let r = gemini_run(name);
        golden_stream(name, &r);
        let s = read_stream(&r.out);
        if name.contains("error") {
            assert_eq!(s.error.expect("an error chunk")["message"], "Overloaded");
            assert!(s.finish.is_none());
            continue;
        }
        assert!(s.finish.is_some(), "{name}");
        let u = s.usage.unwrap();
        let recorded = r.usage.expect("usage");
        assert_eq!(
            u["totalTokenCount"],
            recorded.input + recorded.output,
            "{name}"
        );
        assert_eq!(u["thoughtsTokenCount"], recorded.reasoning, "{name}");
        assert_eq!(s.text, r.text, "{name}");
    }
}

#[test]
fn anthropic_thinking_streams_as_thought_parts_with_the_signature() {
    let r = gemini_run("anthropic_thinking_tool_use.sse");
    let s = read_stream(&r.out);
    assert_eq!(
        s.thoughts,
        "The user wants Paris weather.\nI should call \"get_weather\" with city=Paris."
    );
    assert_eq!(
        s.signatures,
        ["EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/="]
    );
    assert_eq!(s.text, "Let me check.");
    assert_eq!(s.calls.len(), 1);
    assert_eq!(s.calls[0]["args"], json!({"city": "Paris"}));
    assert_eq!(s.finish.as_deref(), Some("STOP"));
}

#[test]
fn every_split_point_gives_the_same_events() {
    for name in STREAMS {
        let opts = Opts::new(Operation::StreamGenerateContent, name).track(true);
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

// ---- Bedrock (Converse, ConverseStream) and Vertex AI ----
//
// Vertex's Gemini takes a Gemini client's body as it came, its Claude an Anthropic one
// (request goldens in `tests/vertex.rs`; answers and streams are those families' own,
// translated above). Bedrock speaks Converse, translated both ways here.

use sluice_providers::bedrock::{self, BedrockRequestOptions, BedrockResponseOptions};
use stream_support::bedrock as bedrock_stream;

#[test]
fn bedrock_request_goldens() {
    let mut failures = Vec::new();
    for (name, op) in [
        ("gemini_generate_content", Operation::GenerateContent),
        ("gemini_stream_json", Operation::StreamGenerateContent),
    ] {
        let body = read(&format!("requests/{name}.json"));
        let mut opts = BedrockRequestOptions::new(op);
        // The Gemini client's model is in its path; the route names Bedrock's.
        opts.path_model = Some("models/gemini-2.5-flash");
        opts.model = Some(bedrock_stream::MODEL);
        opts.drop_unsupported = true;
        let up = bedrock::translate_request(&body, &opts)
            .unwrap_or_else(|e| panic!("{name} → bedrock: {e}"));
        assert!(up.translated && up.client_wants_usage, "{name}");
        assert_eq!(up.stream, op == Operation::StreamGenerateContent, "{name}");
        assert_eq!(up.model, bedrock_stream::MODEL);
        let mut b = json_of(&up.body);
        // Converse takes a JSON schema as text: compared as JSON (key order aside).
        if let Some(t) = b.pointer_mut("/outputConfig/textFormat/structure/jsonSchema/schema") {
            *t = json_of(t.as_str().unwrap().as_bytes());
        }
        let actual = json!({
            "path": up.path,
            "stream": up.stream,
            "model": up.model,
            "dropped": up.dropped,
            "body": b,
        });
        failures.extend(check_json(
            &format!("bedrock/requests/{name}__gemini.json"),
            &actual,
        ));
    }
    // Without a model in the route, the client's (from its path, prefix removed) is sent.
    let mut opts = BedrockRequestOptions::new(Operation::GenerateContent);
    opts.path_model = Some("models/amazon.nova-pro-v1:0");
    let up = bedrock::translate_request(
        &Bytes::from_static(br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#),
        &opts,
    )
    .unwrap();
    assert_eq!(up.path, "/model/amazon.nova-pro-v1%3A0/converse");
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
                op: Operation::GenerateContent,
                model: bedrock_stream::MODEL,
                id: None,
                now_unix: 1_767_225_600,
            },
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let body = json_of(&out.body);
        let u = out.usage.expect("usage");
        assert_eq!(
            body["usageMetadata"]["totalTokenCount"],
            u.input + u.output,
            "{name}"
        );
        assert!(body["candidates"][0]["finishReason"].is_string(), "{body}");
        failures.extend(check_json(
            &format!("bedrock/responses/{name}__gemini.json"),
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
        let op = Operation::StreamGenerateContent;
        let (whole, t) = bedrock_stream::run(name, op, 0);
        for size in [1, 7, 64] {
            let (chunked, _) = bedrock_stream::run(name, op, size);
            assert_eq!(chunked, whole, "{name}, {size}-byte chunks");
        }
        golden_events(&format!("bedrock/streams/{name}__gemini.sse"), &whole);
        let s = read_stream(&whole);
        if name == "bedrock_throttled" || name == "bedrock_truncated" {
            let e = s.error.expect("an error chunk");
            assert!(e["code"].is_u64() && e["status"].is_string(), "{e}");
            assert!(s.finish.is_none(), "{name}");
            assert_eq!(whole.last().unwrap().kind, EventKind::Error);
            continue;
        }
        assert!(s.finish.is_some(), "{name}");
        let u = t.usage().expect("usage");
        assert_eq!(
            s.usage.unwrap()["totalTokenCount"],
            u.input + u.output,
            "{name}"
        );
        assert_eq!(s.text, t.text(), "{name}");
    }
    let (out, _) = bedrock_stream::run("bedrock_tool_use", Operation::StreamGenerateContent, 0);
    let s = read_stream(&out);
    assert_eq!(s.thoughts, "The user asks about weather; call the tool.");
    assert_eq!(s.text, "I'll check the weather in Paris.");
    assert_eq!(s.calls.len(), 1);
    assert_eq!(s.calls[0]["name"], "get_weather");
    assert_eq!(s.calls[0]["args"], json!({"location": "Paris, France"}));
    assert_eq!(s.finish.as_deref(), Some("STOP"));
}
