//! Vertex AI goldens: documented client fixtures translated for Gemini or Anthropic and then
//! sent to Vertex (path and body compared with `tests/golden/vertex/`), and Vertex's error
//! shapes classified.
//!
//! `SLUICE_BLESS=1 cargo test -p sluice-providers --test vertex` rewrites the goldens.

use std::path::PathBuf;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Value};
use sluice_providers::request::{
    translate_request, translate_request_known, KnownFields, RequestOptions, UpstreamRequest,
};
use sluice_providers::vertex::{self, Project, Publisher};
use sluice_providers::{ErrorClass, Operation, ProviderKind};

const PROJECT: Project<'static> = Project {
    id: "sluice-test",
    location: "us-east5",
};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn fixture(path: &str) -> Bytes {
    let p = dir().join("fixtures").join(path);
    Bytes::from(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

fn check(name: &str, up: &UpstreamRequest) -> Option<String> {
    let actual = json!({
        "path": up.path,
        "stream": up.stream,
        "model": up.model,
        "body": serde_json::from_slice::<Value>(&up.body).unwrap(),
    });
    let p = dir().join("golden/vertex").join(name);
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
    let expected: Value = serde_json::from_slice(&expected).unwrap();
    (expected != actual).then(|| format!("{name}: differs; actual:\n{pretty}"))
}

fn to_vertex(fixture_name: &str, op: Operation, model: &str) -> UpstreamRequest {
    let publisher = Publisher::of_model(model);
    let provider = match publisher {
        Publisher::Google => ProviderKind::Gemini,
        Publisher::Anthropic => ProviderKind::anthropic(),
    };
    let body = fixture(&format!("requests/{fixture_name}.json"));
    let opts = RequestOptions {
        op,
        provider: &provider,
        model: Some(model),
        drop_unsupported: false,
        stream_usage: false,
        prefill: None,
        reasoning_budgets: None,
    };
    // A Gemini client's model and streaming are in its path, as the gateway reads them.
    let up = match op.streams_by_path() {
        Some(stream) => translate_request_known(
            &body,
            &opts,
            &KnownFields {
                model: Some(model),
                stream: Some(stream),
                include_usage: None,
            },
        ),
        None => translate_request(&body, &opts),
    }
    .unwrap_or_else(|e| panic!("{fixture_name}: {e}"));
    match publisher {
        Publisher::Google => vertex::gemini_request(up, op, &PROJECT),
        Publisher::Anthropic => vertex::anthropic_request(up, op, &PROJECT),
    }
    .unwrap_or_else(|e| panic!("{fixture_name}: {e}"))
}

#[test]
fn requests() {
    use Operation::*;
    let gemini = "gemini-2.5-flash";
    let claude = "claude-sonnet-4-5@20250929";
    let cases: &[(&str, Operation, &str)] = &[
        ("openai_chat_basic", ChatCompletions, gemini),
        ("openai_chat_basic", ChatCompletions, claude),
        ("openai_chat_json_schema", ChatCompletions, gemini),
        ("openai_chat_json_schema", ChatCompletions, claude),
        ("anthropic_messages_basic", Messages, gemini),
        ("anthropic_messages_basic", Messages, claude),
        ("anthropic_messages_tools", Messages, claude),
        ("anthropic_count_tokens", CountTokens, gemini),
        ("anthropic_count_tokens", CountTokens, claude),
        // The Responses API and Gemini-native clients: Gemini on Vertex takes a Gemini
        // client's own body, Claude an Anthropic one either way.
        ("openai_responses_basic", Responses, gemini),
        ("openai_responses_basic", Responses, claude),
        ("openai_responses_tools", Responses, gemini),
        ("openai_responses_tools", Responses, claude),
        ("gemini_generate_content", GenerateContent, gemini),
        ("gemini_generate_content", GenerateContent, claude),
        ("gemini_stream_json", StreamGenerateContent, gemini),
        ("gemini_stream_json", StreamGenerateContent, claude),
    ];
    let mut failures = Vec::new();
    for (name, op, model) in cases {
        let up = to_vertex(name, *op, model);
        let publisher = Publisher::of_model(model).as_str();
        // Invariants the goldens must show, checked here so a bless cannot hide them.
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        assert!(up.path.starts_with(&format!(
            "/v1/projects/sluice-test/locations/us-east5/publishers/{publisher}/models/"
        )));
        if publisher == "anthropic" {
            assert_eq!(
                body["anthropic_version"],
                vertex::ANTHROPIC_VERSION,
                "{name}"
            );
            assert_eq!(body.get("model").is_some(), *op == CountTokens, "{name}");
            let method = match (op, up.stream) {
                (CountTokens, _) => "count-tokens:rawPredict",
                (_, true) => ":streamRawPredict",
                (_, false) => ":rawPredict",
            };
            assert!(up.path.ends_with(method), "{} {name}", up.path);
            if up.stream {
                assert_eq!(body["stream"], true, "{name}: streamRawPredict needs it");
            }
        } else {
            assert!(body.get("generateContentRequest").is_none(), "{name}");
            assert!(body.get("contents").is_some(), "{name}");
        }
        if let Some(diff) = check(&format!("{name}__{publisher}.json"), &up) {
            failures.push(diff);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn unsupported_operations() {
    let up = UpstreamRequest {
        path: "/embeddings".into(),
        body: Bytes::from_static(b"{}"),
        stream: false,
        model: "text-embedding-005".into(),
        dropped: Vec::new(),
        translated: false,
        client_wants_usage: false,
    };
    let e = vertex::gemini_request(up.clone(), Operation::Embeddings, &PROJECT).unwrap_err();
    assert!(e.to_string().contains("vertex"), "{e}");
    assert!(vertex::anthropic_request(up.clone(), Operation::Completions, &PROJECT).is_err());
    // Every conversation is one once translated: the Responses API included.
    assert!(vertex::anthropic_request(up, Operation::Responses, &PROJECT).is_ok());
}

fn class(status: u16, body: &str) -> (ErrorClass, Option<String>) {
    let e = vertex::classify(
        StatusCode::from_u16(status).unwrap(),
        &HeaderMap::new(),
        body.as_bytes(),
        0,
    );
    (e.class, e.code)
}

#[test]
fn vertex_errors() {
    // An expired or revoked token (googleapis.com front end).
    assert_eq!(
        class(
            401,
            r#"{"error":{"code":401,"message":"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.","status":"UNAUTHENTICATED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"ACCESS_TOKEN_EXPIRED","domain":"googleapis.com"}]}}"#
        ),
        (ErrorClass::Auth, Some("UNAUTHENTICATED".into()))
    );
    // The service account lacks the Vertex AI User role.
    assert_eq!(
        class(
            403,
            r#"{"error":{"code":403,"message":"Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/p/locations/us-east5/publishers/anthropic/models/claude-x' (or it may not exist).","status":"PERMISSION_DENIED"}}"#
        )
        .0,
        ErrorClass::Auth
    );
    // Per-minute quota: retryable.
    assert_eq!(
        class(
            429,
            r#"{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model with base model: gemini-2.5-pro. Please submit a quota increase request.","status":"RESOURCE_EXHAUSTED"}}"#
        )
        .0,
        ErrorClass::RateLimited
    );
    // Streaming without alt=sse wraps errors in an array.
    assert_eq!(
        class(
            503,
            r#"[{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}]"#
        )
        .0,
        ErrorClass::Overloaded
    );
    // Claude on Vertex answers Anthropic's shape.
    assert_eq!(
        class(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        ),
        (ErrorClass::Overloaded, Some("overloaded_error".into()))
    );
    assert_eq!(
        class(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#
        )
        .0,
        ErrorClass::ContextLength
    );
    assert_eq!(
        class(
            404,
            r#"{"error":{"code":404,"message":"Publisher Model `projects/p/locations/us-east5/publishers/google/models/gemini-9` was not found or your project does not have access to it.","status":"NOT_FOUND"}}"#
        )
        .0,
        ErrorClass::InvalidRequest
    );
}
