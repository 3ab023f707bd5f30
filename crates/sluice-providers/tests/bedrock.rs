//! Bedrock goldens per pair (OpenAI chat client → Bedrock, Anthropic client → Bedrock): the
//! Converse request each client fixture becomes, the client body each Converse response
//! fixture becomes, and the client stream each ConverseStream fixture becomes (framed with the
//! event-stream encoder, fed whole and re-chunked), read back the way the client's SDK
//! accumulates it with the protocol's rules checked (`stream_support`).
//!
//! `SLUICE_BLESS=1 cargo test -p sluice-providers --test bedrock` rewrites the goldens under
//! `tests/golden/bedrock/`.

mod stream_support;

use std::path::PathBuf;

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::bedrock::{
    self, BedrockRequestOptions, BedrockResponseOptions, BedrockStream,
};
use sluice_providers::eventstream::Message;
use sluice_providers::request::RequestError;
use sluice_providers::sign::credentials::Credentials;
use sluice_providers::sign::sigv4::{self, SignableBody, SignableRequest, SigningParams};
use sluice_providers::stream::EventKind;
use sluice_providers::{ErrorClass, Operation, Usage};
use stream_support::{anthropic_message, concat, kinds, openai_message};

use stream_support::bedrock::MODEL;

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

fn bless() -> bool {
    std::env::var_os("SLUICE_BLESS").is_some()
}

/// Compares with `tests/golden/bedrock/{name}` (JSON as values, other files byte for byte), or
/// writes it under `SLUICE_BLESS`; the difference, if any.
fn check(name: &str, actual: &[u8]) -> Option<String> {
    let p = dir().join("golden/bedrock").join(name);
    let is_json = name.ends_with(".json");
    let text = if is_json {
        serde_json::to_string_pretty(&json_of(actual)).unwrap() + "\n"
    } else {
        String::from_utf8(actual.to_vec()).unwrap()
    };
    if bless() {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &text).unwrap();
        return None;
    }
    let Ok(expected) = std::fs::read(&p) else {
        return Some(format!(
            "{name}: missing (SLUICE_BLESS=1 writes it):\n{text}"
        ));
    };
    let same = if is_json {
        embedded_json(json_of(&expected)) == embedded_json(json_of(actual))
    } else {
        expected == actual
    };
    (!same).then(|| {
        format!(
            "{name}: differs\n--- expected\n{}\n+++ actual\n{text}",
            String::from_utf8_lossy(&expected)
        )
    })
}

/// `v` with every string that holds a JSON object or array (Converse's
/// `jsonSchema.schema`) parsed: its key order follows serde_json's `preserve_order` feature,
/// which another crate in the same build (sluice-mock) turns on, so a byte comparison of it
/// would depend on which crates are built together.
fn embedded_json(v: Value) -> Value {
    match v {
        Value::String(s) if s.starts_with(['{', '[']) => match serde_json::from_str(&s) {
            Ok(inner) => embedded_json(inner),
            Err(_) => Value::String(s),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(embedded_json).collect()),
        Value::Object(m) => {
            Value::Object(m.into_iter().map(|(k, v)| (k, embedded_json(v))).collect())
        }
        v => v,
    }
}

fn request(
    fixture_name: &str,
    op: Operation,
    drop: bool,
) -> sluice_providers::request::UpstreamRequest {
    let mut opts = BedrockRequestOptions::new(op);
    opts.model = Some(MODEL);
    opts.drop_unsupported = drop;
    bedrock::translate_request(&fixture(&format!("requests/{fixture_name}.json")), &opts)
        .unwrap_or_else(|e| panic!("{fixture_name}: {e}"))
}

// ---- requests ----

/// Bedrock takes a JSON schema as text; its keys come in the order serde_json keeps (the
/// client's with `preserve_order`, which another crate of the workspace turns on; sorted
/// without), so the golden compares the text as JSON.
fn schema_text_as_json(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "schema" {
                    if let Some(parsed) = x.as_str().and_then(|t| serde_json::from_str(t).ok()) {
                        *x = parsed;
                        continue;
                    }
                }
                schema_text_as_json(x);
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(schema_text_as_json),
        _ => {}
    }
}

#[test]
fn request_goldens() {
    use Operation::*;
    let cases = [
        ("openai_chat_basic", ChatCompletions, false),
        ("openai_chat_tools", ChatCompletions, false),
        ("openai_chat_json_schema", ChatCompletions, false),
        ("openai_chat_images", ChatCompletions, true),
        ("anthropic_messages_basic", Messages, false),
        ("anthropic_messages_tools", Messages, false),
        ("anthropic_messages_images", Messages, true),
        ("anthropic_messages_cache", Messages, false),
    ];
    let mut diffs = Vec::new();
    for (name, op, drop) in cases {
        let up = request(name, op, drop);
        let mut body = json_of(&up.body);
        schema_text_as_json(&mut body);
        let whole = json!({
            "path": up.path,
            "stream": up.stream,
            "dropped": up.dropped,
            "body": body,
        });
        diffs.extend(check(
            &format!("requests/{name}.json"),
            whole.to_string().as_bytes(),
        ));
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn openai_client_request_rules() {
    let up = request("openai_chat_tools", Operation::ChatCompletions, false);
    assert_eq!(
        up.path,
        "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"
    );
    let b = json_of(&up.body);
    // Parallel calls in one assistant turn, then both results in one user turn.
    let roles: Vec<&str> = b["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    for pair in roles.windows(2) {
        assert_ne!(pair[0], pair[1], "turns alternate: {roles:?}");
    }
    let calls: Vec<&Value> = b["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .filter_map(|c| c.get("toolUse"))
        .collect();
    let results: Vec<&Value> = b["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .filter_map(|c| c.get("toolResult"))
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(results.len(), 2);
    for (c, r) in calls.iter().zip(&results) {
        assert_eq!(c["toolUseId"], r["toolUseId"], "calls and results pair up");
        assert!(c["input"].is_object());
    }
    // Blank text (pitfall 10) never reaches Bedrock.
    let texts = b["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .filter_map(|c| c.get("text"));
    for t in texts {
        assert!(!t.as_str().unwrap().trim().is_empty());
    }
    assert_eq!(
        b["toolConfig"]["toolChoice"],
        json!({"tool": {"name": "get_weather"}})
    );
}

#[test]
fn anthropic_cache_control_becomes_cache_points() {
    let up = request("anthropic_messages_cache", Operation::Messages, false);
    let b = json_of(&up.body);
    assert_eq!(
        b["system"],
        json!([
            {"text": "You answer questions about the attached contract."},
            {"text": "CONTRACT: The lessee shall pay rent monthly."},
            {"cachePoint": {"type": "default"}}
        ])
    );
    let tools = b["toolConfig"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 3);
    assert_eq!(tools[2], json!({"cachePoint": {"type": "default"}}));
    assert_eq!(
        b["messages"][0]["content"],
        json!([
            {"text": "Earlier question, long context."},
            {"cachePoint": {"type": "default"}},
            {"text": "When is rent due?"}
        ])
    );
    assert_eq!(b["additionalModelRequestFields"], json!({"top_k": 40}));
    assert_eq!(
        b["inferenceConfig"],
        json!({"maxTokens": 512, "temperature": 0.2})
    );
}

#[test]
fn refusals_name_the_parameter() {
    let body = Bytes::from_static(
        br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}],"n":2}"#,
    );
    let e = bedrock::translate_request(
        &body,
        &BedrockRequestOptions::new(Operation::ChatCompletions),
    )
    .unwrap_err();
    assert!(
        matches!(e, RequestError::Unsupported { ref param, provider: "bedrock" } if param == "n"),
        "{e}"
    );
    let mut opts = BedrockRequestOptions::new(Operation::ChatCompletions);
    opts.drop_unsupported = true;
    let up = bedrock::translate_request(&body, &opts).unwrap();
    assert_eq!(up.dropped.len(), 2, "{:?}", up.dropped);
    assert!(up.dropped[1].contains("s3://"), "{:?}", up.dropped);
    let e = bedrock::translate_request(&body, &BedrockRequestOptions::new(Operation::Embeddings))
        .unwrap_err();
    assert_eq!(e.code(), "unsupported_operation");
}

#[test]
fn invoke_model_takes_the_anthropic_body() {
    let mut opts = BedrockRequestOptions::new(Operation::Messages);
    opts.model = Some(MODEL);
    let up =
        bedrock::invoke_request(&fixture("requests/anthropic_messages_tools.json"), &opts).unwrap();
    assert_eq!(
        up.path,
        "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke-with-response-stream"
    );
    let b = json_of(&up.body);
    assert_eq!(b["anthropic_version"], "bedrock-2023-05-31");
    assert!(b.get("model").is_none() && b.get("stream").is_none());
    let original = json_of(&fixture("requests/anthropic_messages_tools.json"));
    assert_eq!(b["messages"], original["messages"]);
    assert_eq!(b["tools"], original["tools"]);
}

/// The translated request signs as the gateway will send it: the path double-encoded in the
/// canonical request, the body's hash, `host` and `content-type` signed.
#[test]
fn a_translated_request_signs() {
    let up = request("openai_chat_basic", Operation::ChatCompletions, false);
    let host = bedrock::runtime_host("us-east-1");
    let creds = Credentials::new(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        None,
    );
    let headers = [
        ("host", host.as_str()),
        ("content-type", "application/json"),
    ];
    let sig = sigv4::sign(
        &SignableRequest {
            method: "POST",
            uri: &up.path,
            headers: &headers,
            body: SignableBody::Bytes(&up.body),
        },
        &SigningParams {
            credentials: &creds,
            region: "us-east-1",
            service: bedrock::SIGNING_SERVICE,
            time_unix: 1_767_225_600,
            settings: Default::default(),
        },
    )
    .unwrap();
    let lines: Vec<&str> = sig.canonical_request.lines().collect();
    assert_eq!(
        lines[1],
        "/model/anthropic.claude-3-5-sonnet-20240620-v1%253A0/converse"
    );
    assert_eq!(lines.last().unwrap().len(), 64, "the body's SHA-256");
    assert!(sig.authorization.contains(
        "/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date,"
    ));
}

// ---- responses ----

#[test]
fn response_goldens() {
    let mut diffs = Vec::new();
    for name in [
        "bedrock_converse_text",
        "bedrock_converse_tool_use",
        "bedrock_converse_reasoning",
    ] {
        let body = fixture(&format!("responses/{name}.json"));
        for (op, client) in [
            (Operation::ChatCompletions, "openai"),
            (Operation::Messages, "anthropic"),
        ] {
            let out = bedrock::translate_response(
                &body,
                &BedrockResponseOptions {
                    op,
                    model: MODEL,
                    id: Some("req-7f3a"),
                    now_unix: 1_767_225_600,
                },
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            diffs.extend(check(
                &format!("responses/{name}__{client}.json"),
                &out.body,
            ));
        }
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn response_rules() {
    let opts = |op| BedrockResponseOptions {
        op,
        model: MODEL,
        id: None,
        now_unix: 7,
    };
    let tools = fixture("responses/bedrock_converse_tool_use.json");
    let o = bedrock::translate_response(&tools, &opts(Operation::ChatCompletions)).unwrap();
    let b = json_of(&o.body);
    assert_eq!(b["choices"][0]["finish_reason"], "tool_calls");
    let call = &b["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["id"], "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q");
    assert_eq!(
        json_of(call["function"]["arguments"].as_str().unwrap().as_bytes()),
        json!({"sign": "WZPZ"})
    );
    // Cache reads are input, and OpenAI's cached_tokens.
    assert_eq!(b["usage"]["prompt_tokens"], 375 + 1024);
    assert_eq!(b["usage"]["prompt_tokens_details"]["cached_tokens"], 1024);
    assert_eq!(b["usage"]["total_tokens"], 1467);
    assert_eq!(
        o.usage,
        Some(Usage {
            cache_write: 0,
            input: 1399,
            output: 68,
            cached_input: 1024,
            reasoning: 0
        })
    );

    let r = fixture("responses/bedrock_converse_reasoning.json");
    let a = bedrock::translate_response(&r, &opts(Operation::Messages)).unwrap();
    let b = json_of(&a.body);
    assert_eq!(b["stop_reason"], "stop_sequence");
    assert_eq!(b["stop_sequence"], "END");
    assert_eq!(b["id"], "msg_sluice");
    assert_eq!(a.token_usage.map(|u| u.cache_write()), Some(1500));
    assert_eq!(a.usage.map(|u| u.input), Some(1512));
    let o = bedrock::translate_response(&r, &opts(Operation::ChatCompletions)).unwrap();
    let b = json_of(&o.body);
    assert_eq!(
        b["choices"][0]["message"]["reasoning_content"],
        "The user wants a haiku; count syllables 5-7-5."
    );

    let bad = bedrock::translate_response(b"{\"output\":{}}", &opts(Operation::Messages));
    assert_eq!(bad.unwrap_err().metric_label(), "malformed_response");
}

// ---- streams ----

use stream_support::bedrock::{framed, options, run};

#[test]
fn stream_goldens_and_chunking() {
    let mut diffs = Vec::new();
    for name in [
        "bedrock_text",
        "bedrock_tool_use",
        "bedrock_throttled",
        "bedrock_truncated",
    ] {
        for (op, client) in [
            (Operation::ChatCompletions, "openai"),
            (Operation::Messages, "anthropic"),
        ] {
            let (whole, _) = run(name, op, 0);
            for size in [1, 7, 64] {
                let (chunked, _) = run(name, op, size);
                assert_eq!(chunked, whole, "{name} → {client}, {size}-byte chunks");
            }
            diffs.extend(check(
                &format!("streams/{name}__{client}.sse"),
                &concat(&whole),
            ));
        }
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn text_stream_to_each_client() {
    use EventKind::*;
    let (out, t) = run("bedrock_text", Operation::ChatCompletions, 0);
    assert_eq!(
        kinds(&out),
        [Preamble, Content, Content, Trailer, Trailer, Trailer]
    );
    let m = openai_message(&out);
    assert_eq!(m.id, "req-7f3a");
    assert_eq!(m.model, MODEL);
    assert_eq!(m.content, "Hello there, \"friend\"!\n");
    assert_eq!(m.finish_reason.as_deref(), Some("stop"));
    assert_eq!(m.usage.unwrap()["total_tokens"], 17);
    assert!(m.done);
    assert_eq!(t.text(), "Hello there, \"friend\"!\n");
    assert_eq!(
        t.usage(),
        Some(Usage {
            input: 11,
            output: 6,
            ..Usage::default()
        })
    );

    let (out, _) = run("bedrock_text", Operation::Messages, 0);
    let m = anthropic_message(&out);
    assert_eq!(m.blocks.len(), 1);
    assert_eq!(m.blocks[0].text, "Hello there, \"friend\"!\n");
    assert!(m.blocks[0].stopped);
    assert_eq!(m.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(m.usage.unwrap()["output_tokens"], 6);
    assert!(m.stopped);
}

#[test]
fn tool_stream_to_each_client() {
    let (out, t) = run("bedrock_tool_use", Operation::ChatCompletions, 0);
    let m = openai_message(&out);
    assert_eq!(m.reasoning, "The user asks about weather; call the tool.");
    assert_eq!(m.content, "I'll check the weather in Paris.");
    assert_eq!(m.tool_calls.len(), 1);
    let (id, name, args) = &m.tool_calls[0];
    assert_eq!(
        (id.as_str(), name.as_str()),
        ("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "get_weather")
    );
    assert_eq!(
        json_of(args.as_bytes()),
        json!({"location": "Paris, France"})
    );
    assert_eq!(m.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        m.usage.unwrap()["prompt_tokens_details"]["cached_tokens"],
        1024
    );
    assert_eq!(t.token_usage().map(|u| u.total_tokens), Some(1467));

    let (out, _) = run("bedrock_tool_use", Operation::Messages, 0);
    let m = anthropic_message(&out);
    let kinds: Vec<&str> = m.blocks.iter().map(|b| b.kind.as_str()).collect();
    // Reasoning reaches Anthropic clients as a thinking block (unsigned: Bedrock's
    // signatures are not carried yet).
    assert_eq!(kinds, ["thinking", "text", "tool_use"]);
    assert_eq!(m.blocks[2].name, "get_weather");
    assert_eq!(
        json_of(m.blocks[2].input_json.as_bytes()),
        json!({"location": "Paris, France"})
    );
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
}

#[test]
fn exceptions_and_cuts_end_with_an_error_event() {
    let (out, t) = run("bedrock_throttled", Operation::ChatCompletions, 0);
    let m = openai_message(&out);
    assert_eq!(m.content, "Partial");
    let e = m.error.expect("an error event");
    assert_eq!(e["code"], "throttlingException");
    assert_eq!(e["type"], "rate_limit_exceeded");
    assert!(!m.done, "no [DONE] after an error");
    let err = t.error().unwrap();
    assert_eq!(
        (err.class, err.status.as_u16()),
        (ErrorClass::RateLimited, 429)
    );

    let (out, t) = run("bedrock_truncated", Operation::Messages, 0);
    let m = anthropic_message(&out);
    let e = m.error.expect("an error event");
    assert_eq!(e["type"], "api_error");
    assert!(e["message"].as_str().unwrap().contains("bedrock"), "{e}");
    assert!(!m.stopped);
    assert!(t.error().is_none());
    assert_eq!(out.last().unwrap().kind, EventKind::Error);

    // A corrupted frame: a CRC error, reported once, and nothing after it.
    let mut body = framed("bedrock_text").to_vec();
    body[40] ^= 0x20;
    let mut t = BedrockStream::new(&options(Operation::ChatCompletions));
    let mut out = Vec::new();
    t.feed(&body, &mut out);
    t.feed(b"more", &mut out);
    t.end(&mut out);
    assert_eq!(kinds(&out), [EventKind::Error]);
    let text = String::from_utf8(concat(&out)).unwrap();
    assert!(
        text.contains("upstream_malformed_event") && text.contains("CRC"),
        "{text}"
    );
}

#[test]
fn framing_level_errors_end_the_stream() {
    // `:message-type: error` carries its code and message in headers, not a payload.
    let m = Message::new(Bytes::new())
        .with_str(":message-type", "error")
        .with_str(":error-code", "InternalFailure")
        .with_str(":error-message", "An internal error occurred");
    let mut t = BedrockStream::new(&options(Operation::Messages));
    let mut out = Vec::new();
    t.feed(&m.to_bytes().unwrap(), &mut out);
    assert_eq!(kinds(&out), [EventKind::Error]);
    let err = t.error().unwrap();
    assert_eq!(err.message, "An internal error occurred");
    assert_eq!(err.class, ErrorClass::ServerError);
    t.end(&mut out);
    assert_eq!(out.len(), 1, "nothing after the error");
}

#[test]
fn invoke_stream_chunks_feed_the_anthropic_translators() {
    // InvokeModelWithResponseStream wraps each Anthropic event, base64, in a `chunk` event.
    let event = br#"{"type":"message_stop"}"#;
    let m = Message::new(Bytes::from_static(
        br#"{"bytes":"eyJ0eXBlIjoibWVzc2FnZV9zdG9wIn0="}"#,
    ))
    .with_str(":event-type", "chunk")
    .with_str(":message-type", "event");
    let sse = bedrock::invoke_stream_event(&m).unwrap().unwrap();
    let mut want = b"event: message_stop\ndata: ".to_vec();
    want.extend_from_slice(event);
    want.extend_from_slice(b"\n\n");
    assert_eq!(&sse[..], &want[..]);
}
