//! Prompt caching across formats: the client's Anthropic `cache_control` marks as each cloud
//! gets them (kept for Anthropic, Vertex AI's Claude and Bedrock's InvokeModel; Bedrock
//! Converse `cachePoint` blocks after the marked block), OpenAI's `prompt_cache_key` kept for
//! OpenAI-shaped upstreams and dropped (not refused) for the others, and the breakpoints
//! `route.cache_breakpoints` adds for clients that mark none. Each request is compared with
//! `tests/golden/prompt_cache/` as `{path, body}`.
//!
//! `SLUICE_BLESS=1 cargo test -p sluice-providers --test prompt_cache` rewrites the goldens.

use std::path::PathBuf;

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_providers::bedrock::{self, BedrockRequestOptions};
use sluice_providers::prompt_cache::{
    anthropic_breakpoints, anthropic_marks, converse_breakpoints, MAX_BREAKPOINTS,
};
use sluice_providers::request::{translate_request, RequestOptions, UpstreamRequest};
use sluice_providers::vertex::{self, Project};
use sluice_providers::{Operation, ProviderKind};

const BEDROCK_MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const VERTEX_MODEL: &str = "claude-sonnet-4-5@20250929";
const PROJECT: Project<'static> = Project {
    id: "sluice-test",
    location: "us-east5",
};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn fixture(name: &str) -> Bytes {
    let p = dir().join("fixtures/requests").join(format!("{name}.json"));
    Bytes::from(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

fn json_of(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap()
}

/// Compares `{path, body}` with the golden `name`, or writes it under `SLUICE_BLESS`.
fn check(name: &str, path: &str, body: &[u8]) -> Option<String> {
    let actual = json!({"path": path, "body": json_of(body)});
    let p = dir()
        .join("golden/prompt_cache")
        .join(format!("{name}.json"));
    let pretty = serde_json::to_string_pretty(&actual).unwrap() + "\n";
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, pretty).unwrap();
        return None;
    }
    let Ok(expected) = std::fs::read(&p) else {
        return Some(format!(
            "{name}: missing (SLUICE_BLESS=1 writes it):\n{pretty}"
        ));
    };
    (json_of(&expected) != actual).then(|| format!("{name}: differs; actual:\n{pretty}"))
}

/// Where a request can go.
#[derive(Clone, Copy, Debug)]
enum To {
    Anthropic,
    OpenAi,
    Gemini,
    Vertex,
    Converse,
    Invoke,
}

fn op_of(name: &str) -> Operation {
    if name.starts_with("anthropic") {
        Operation::Messages
    } else {
        Operation::ChatCompletions
    }
}

/// The fixture as upstream `to` gets it; with `auto`, the breakpoints the gateway adds under
/// `cache_breakpoints` (on the final body, as the gateway does).
fn send(name: &str, to: To, auto: bool) -> UpstreamRequest {
    let body = fixture(name);
    let op = op_of(name);
    let anthropic = ProviderKind::anthropic();
    let translate = |provider: &ProviderKind, model: &'static str| {
        translate_request(
            &body,
            &RequestOptions {
                op,
                provider,
                model: Some(model),
                drop_unsupported: false,
                stream_usage: false,
                prefill: None,
                reasoning_budgets: None,
            },
        )
        .unwrap_or_else(|e| panic!("{name} to {to:?}: {e}"))
    };
    let mut bedrock_opts = BedrockRequestOptions::new(op);
    bedrock_opts.model = Some(BEDROCK_MODEL);
    let mut up = match to {
        To::Anthropic => translate(&anthropic, "claude-sonnet-4-5"),
        To::OpenAi => translate(&ProviderKind::OpenAi, "gpt-4.1"),
        To::Gemini => translate(&ProviderKind::Gemini, "gemini-2.5-flash"),
        To::Vertex => {
            vertex::anthropic_request(translate(&anthropic, VERTEX_MODEL), op, &PROJECT).unwrap()
        }
        To::Converse => bedrock::translate_request(&body, &bedrock_opts).unwrap(),
        To::Invoke => bedrock::invoke_request(&body, &bedrock_opts).unwrap(),
    };
    if auto {
        let marked = match to {
            To::Converse => converse_breakpoints(&up.body),
            To::Anthropic | To::Vertex | To::Invoke => anthropic_breakpoints(&up.body),
            To::OpenAi | To::Gemini => None,
        };
        if let Some(b) = marked {
            up.body = b;
        }
    }
    up
}

#[test]
fn goldens() {
    let cases = [
        // The client's own marks, kept or carried over.
        ("anthropic_messages_cache", To::Anthropic, false),
        ("anthropic_messages_cache", To::Vertex, false),
        ("anthropic_messages_cache", To::Converse, false),
        ("anthropic_messages_cache", To::Invoke, false),
        // A client that marks none, with the route's breakpoints.
        ("openai_chat_cache", To::Anthropic, true),
        ("openai_chat_cache", To::Vertex, true),
        ("openai_chat_cache", To::Converse, true),
        ("anthropic_messages_tools", To::Anthropic, true),
        ("anthropic_messages_tools", To::Invoke, true),
        // prompt_cache_key: kept for OpenAI, dropped for Gemini.
        ("openai_chat_cache", To::OpenAi, false),
        ("openai_chat_cache", To::Gemini, false),
    ];
    let mut failures = Vec::new();
    for (name, to, auto) in cases {
        let up = send(name, to, auto);
        let suffix = if auto { "_auto" } else { "" };
        let golden = format!("{name}__{to:?}{suffix}").to_lowercase();
        failures.extend(check(&golden, &up.path, &up.body));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn client_marks_survive_every_anthropic_shaped_route() {
    for to in [To::Anthropic, To::Vertex, To::Invoke] {
        let b = json_of(&send("anthropic_messages_cache", to, false).body);
        let o = b.as_object().unwrap();
        assert_eq!(anthropic_marks(o), 3, "{to:?}: {b}");
        assert_eq!(
            b["system"][1]["cache_control"],
            json!({"type": "ephemeral"}),
            "{to:?}"
        );
        assert_eq!(b["tools"][1]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(
            b["messages"][0]["content"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
    }
    // Converse: a cachePoint block right after each marked block.
    let b = json_of(&send("anthropic_messages_cache", To::Converse, false).body);
    assert_eq!(b["system"][2], json!({"cachePoint": {"type": "default"}}));
    assert_eq!(
        b["toolConfig"]["tools"][2],
        json!({"cachePoint": {"type": "default"}})
    );
    assert_eq!(
        b["messages"][0]["content"][1],
        json!({"cachePoint": {"type": "default"}})
    );
}

#[test]
fn prompt_cache_key_goes_only_where_it_means_something() {
    let up = send("openai_chat_cache", To::OpenAi, false);
    assert_eq!(json_of(&up.body)["prompt_cache_key"], "contract-1234");
    for to in [To::Anthropic, To::Gemini, To::Converse, To::Vertex] {
        let up = send("openai_chat_cache", to, false);
        assert!(up.dropped.is_empty(), "{to:?}: {:?}", up.dropped);
        let text = String::from_utf8_lossy(&up.body);
        assert!(!text.contains("prompt_cache_key"), "{to:?}: {text}");
        assert!(!text.contains("contract-1234"), "{to:?}: {text}");
    }
}

#[test]
fn breakpoints_are_added_only_to_requests_without_any() {
    // A request with marks of its own is left as it is, on both shapes.
    let marked = send("anthropic_messages_cache", To::Anthropic, false);
    assert_eq!(anthropic_breakpoints(&marked.body), None);
    let converse = send("anthropic_messages_cache", To::Converse, false);
    assert_eq!(converse_breakpoints(&converse.body), None);
    // A mark only on a message block, or inside a tool result, counts too.
    let deep = json!({"messages": [{"role": "user", "content": [{"type": "tool_result",
        "tool_use_id": "t", "content": [{"type": "text", "text": "x",
        "cache_control": {"type": "ephemeral"}}]}]}], "system": "s"});
    assert_eq!(anthropic_breakpoints(deep.to_string().as_bytes()), None);
    // At most two are added, so never more than Anthropic's limit.
    let added = send("openai_chat_cache", To::Anthropic, true);
    let n = anthropic_marks(json_of(&added.body).as_object().unwrap());
    assert_eq!(n, 2);
    const { assert!(2 <= MAX_BREAKPOINTS) };
    // A string system prompt becomes one marked text block; a blank one is not marked.
    let b = anthropic_breakpoints(br#"{"system":"Be brief.","messages":[]}"#).unwrap();
    assert_eq!(
        json_of(&b)["system"],
        json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        anthropic_breakpoints(br#"{"system":"  ","messages":[]}"#),
        None
    );
    // The last non-empty system block is marked, not a blank one after it.
    let b = anthropic_breakpoints(
        br#"{"system":[{"type":"text","text":"long"},{"type":"text","text":""}],"messages":[]}"#,
    )
    .unwrap();
    assert_eq!(
        json_of(&b)["system"][0]["cache_control"]["type"],
        "ephemeral"
    );
    assert!(json_of(&b)["system"][1].get("cache_control").is_none());
    // Nothing to mark, or not JSON: unchanged.
    assert_eq!(anthropic_breakpoints(br#"{"messages":[]}"#), None);
    assert_eq!(anthropic_breakpoints(b"not json"), None);
    assert_eq!(
        converse_breakpoints(br#"{"messages":[],"system":[]}"#),
        None
    );
}
