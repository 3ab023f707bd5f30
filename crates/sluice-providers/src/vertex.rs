//! Google Vertex AI (`provider = "vertex"`), sans-I/O: where Gemini and Anthropic models live
//! on Vertex, and the two small differences from their own APIs.
//!
//! - **Gemini** on Vertex takes Gemini's own `GenerateContentRequest`, so the request is
//!   translated exactly as for [`crate::ProviderKind::Gemini`] and only the path changes:
//!   `/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:generateContent`
//!   (`:streamGenerateContent?alt=sse`, `:countTokens`), below `https://{host}`. Answers,
//!   streams and errors are Gemini's too. [`gemini_request`] rewrites a Gemini
//!   [`UpstreamRequest`]; count_tokens also loses the Developer API's
//!   `generateContentRequest` wrapper, which Vertex's `CountTokensRequest` does not have.
//! - **Anthropic** models take an Anthropic Messages body without `model` (it is in the path)
//!   and with `"anthropic_version": "vertex-2023-10-16"` in the body instead of the
//!   `anthropic-version` header, at
//!   `/v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}:rawPredict`
//!   (`:streamRawPredict` for streams, whose body keeps `"stream": true`); count_tokens is
//!   `…/publishers/anthropic/models/count-tokens:rawPredict` with the model kept in the body.
//!   Answers and streams are Anthropic's. [`anthropic_request`] rewrites an Anthropic
//!   [`UpstreamRequest`] ([`anthropic_body`] is the body half).
//! - **Host**: `{location}-aiplatform.googleapis.com`, or `aiplatform.googleapis.com` for the
//!   `global` location ([`host`]).
//! - **Auth**: `Authorization: Bearer` with an access token from a service-account key
//!   ([`crate::sign::google`]), refreshed on [`crate::sign::refresh`]'s schedule; a 401
//!   (`UNAUTHENTICATED`) means the token was refused.
//! - **Errors**: Google's `{"error": {"code", "message", "status", "details"}}` (Gemini's
//!   shape) from the front end and for Gemini models, Anthropic's shape from Anthropic models:
//!   [`classify`] reads both as [`crate::error::classify`] does.
//!
//! The path segments are percent-encoded, so a project, location or model cannot add
//! segments or a query.
//!
//! NOTE: Vertex is not a [`crate::ProviderKind`] (the gateway matches those exhaustively); a
//! Vertex upstream translates with `ProviderKind::Gemini` or `ProviderKind::anthropic()` (by
//! [`Publisher::of_model`]) and then calls these functions. The Anthropic provider's
//! `required_headers` (`anthropic-version`) are not sent to Vertex.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::Value;

use crate::api::{Family, Operation};
use crate::error::ProviderError;
use crate::provider::PathSegment;
use crate::request::{RequestError, UpstreamRequest};

/// The provider's name in errors, logs and metrics.
pub const PROVIDER: &str = "vertex";

/// The `anthropic_version` Anthropic models on Vertex want in the body.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// The API host for a location: `{location}-aiplatform.googleapis.com`, or
/// `aiplatform.googleapis.com` for `global`.
pub fn host(location: &str) -> String {
    if location == "global" {
        "aiplatform.googleapis.com".to_string()
    } else {
        format!("{location}-aiplatform.googleapis.com")
    }
}

/// `https://{host(location)}`: the base URL the paths below go under.
pub fn base_url(location: &str) -> String {
    format!("https://{}", host(location))
}

/// Where models are called: a Google Cloud project and a location (`us-central1`,
/// `europe-west4`, `global`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Project<'a> {
    /// The project id.
    pub id: &'a str,
    /// The location (region) or `global`.
    pub location: &'a str,
}

/// Who publishes a model on Vertex, which decides its API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publisher {
    /// Gemini (and Google's other models): `generateContent`.
    Google,
    /// Claude: `rawPredict` with Anthropic Messages bodies.
    Anthropic,
}

impl Publisher {
    /// The publisher of a model by its name: `claude…` (also as
    /// `publishers/anthropic/models/claude…`) is Anthropic's, anything else Google's.
    pub fn of_model(model: &str) -> Publisher {
        let name = model.rsplit('/').next().unwrap_or(model);
        if name.starts_with("claude") || model.starts_with("publishers/anthropic/") {
            Publisher::Anthropic
        } else {
            Publisher::Google
        }
    }

    /// `google` or `anthropic`, as in the path.
    pub fn as_str(self) -> &'static str {
        match self {
            Publisher::Google => "google",
            Publisher::Anthropic => "anthropic",
        }
    }

    /// The family of the bodies the publisher's models take.
    pub fn family(self) -> Family {
        match self {
            Publisher::Google => Family::Gemini,
            Publisher::Anthropic => Family::Anthropic,
        }
    }
}

/// `/v1/projects/{project}/locations/{location}/publishers/{publisher}`.
fn publisher_prefix(project: &Project<'_>, publisher: Publisher) -> String {
    format!(
        "/v1/projects/{}/locations/{}/publishers/{}",
        PathSegment(project.id),
        PathSegment(project.location),
        publisher.as_str()
    )
}

/// A model name without a `models/` or `publishers/{p}/models/` prefix.
fn bare_model(model: &str) -> &str {
    match model.rsplit_once("/models/") {
        Some((_, m)) => m,
        None => model.strip_prefix("models/").unwrap_or(model),
    }
}

/// The path of a Gemini model's method: `:generateContent`, `:streamGenerateContent?alt=sse`
/// (`stream`), or `:countTokens`. `None` for operations Gemini has no method for
/// (embeddings, completions). Every client's conversation (chat completions, messages,
/// responses, Gemini's own) is a `generateContent` once translated.
pub fn gemini_path(
    project: &Project<'_>,
    op: Operation,
    model: &str,
    stream: bool,
) -> Option<String> {
    let method = match (op, stream) {
        (Operation::CountTokens, _) => ":countTokens",
        (op, true) if op.is_conversation() => ":streamGenerateContent?alt=sse",
        (op, false) if op.is_conversation() => ":generateContent",
        _ => return None,
    };
    Some(format!(
        "{}/models/{}{method}",
        publisher_prefix(project, Publisher::Google),
        PathSegment(bare_model(model))
    ))
}

/// The path of an Anthropic model's method: `:rawPredict`, `:streamRawPredict` (`stream`), or
/// for count_tokens the `count-tokens` model's `:rawPredict`. `None` for operations without a
/// Messages equivalent (embeddings, completions).
pub fn anthropic_path(
    project: &Project<'_>,
    op: Operation,
    model: &str,
    stream: bool,
) -> Option<String> {
    let (model, method) = match (op, stream) {
        (Operation::CountTokens, _) => ("count-tokens", "rawPredict"),
        (op, true) if op.is_conversation() => (bare_model(model), "streamRawPredict"),
        (op, false) if op.is_conversation() => (bare_model(model), "rawPredict"),
        _ => return None,
    };
    Some(format!(
        "{}/models/{}:{method}",
        publisher_prefix(project, Publisher::Anthropic),
        PathSegment(model)
    ))
}

fn unsupported(op: Operation) -> RequestError {
    RequestError::UnsupportedOperation {
        op: op.as_str(),
        provider: PROVIDER,
    }
}

/// A request translated for `ProviderKind::Gemini` (by [`crate::request::translate_request`]),
/// sent to Vertex: the same body at the Vertex path; for count_tokens, the
/// `generateContentRequest` wrapper's fields lifted to the top (without its `model`).
///
/// # Errors
/// [`RequestError::UnsupportedOperation`] for an operation Gemini has no method for;
/// [`RequestError::InvalidJson`] if a count_tokens body is not JSON.
pub fn gemini_request(
    mut up: UpstreamRequest,
    op: Operation,
    project: &Project<'_>,
) -> Result<UpstreamRequest, RequestError> {
    up.path = gemini_path(project, op, &up.model, up.stream).ok_or_else(|| unsupported(op))?;
    if op == Operation::CountTokens {
        let mut map = crate::request::parse_object(&up.body)?;
        if let Some(Value::Object(inner)) = map.remove("generateContentRequest") {
            for (k, v) in inner {
                if k != "model" {
                    map.entry(k).or_insert(v);
                }
            }
            up.body = serde_json::to_vec(&map)
                .map(Bytes::from)
                .map_err(|e| RequestError::InvalidJson(e.to_string()))?;
        }
    }
    Ok(up)
}

/// An Anthropic Messages body for Vertex: `model` removed (and returned: it goes in the path)
/// and `anthropic_version` set to [`ANTHROPIC_VERSION`] unless the body has one (as the
/// Anthropic SDK's Vertex client does); everything else, `stream` included, as it was.
///
/// # Errors
/// [`RequestError`]: not a JSON object, or a `model` that is not a string.
pub fn anthropic_body(body: &[u8]) -> Result<(Bytes, Option<String>), RequestError> {
    let mut map = crate::request::parse_object(body)?;
    let model = match map.remove("model") {
        Some(Value::String(m)) => Some(m).filter(|m| !m.is_empty()),
        None | Some(Value::Null) => None,
        Some(_) => return Err(crate::request::field::invalid(&"model", "must be a string")),
    };
    map.entry("anthropic_version")
        .or_insert_with(|| Value::String(ANTHROPIC_VERSION.to_string()));
    let body = serde_json::to_vec(&map)
        .map(Bytes::from)
        .map_err(|e| RequestError::InvalidJson(e.to_string()))?;
    Ok((body, model))
}

/// A request translated for an Anthropic provider (by [`crate::request::translate_request`]),
/// sent to Vertex: the body through [`anthropic_body`] (count_tokens keeps its `model`, which
/// Vertex reads there) and the Vertex path for `up.model`.
///
/// # Errors
/// [`RequestError`]: an operation Anthropic has no method for, a body that is not a JSON
/// object.
pub fn anthropic_request(
    mut up: UpstreamRequest,
    op: Operation,
    project: &Project<'_>,
) -> Result<UpstreamRequest, RequestError> {
    up.path = anthropic_path(project, op, &up.model, up.stream).ok_or_else(|| unsupported(op))?;
    if op == Operation::CountTokens {
        let mut map = crate::request::parse_object(&up.body)?;
        map.entry("anthropic_version")
            .or_insert_with(|| Value::String(ANTHROPIC_VERSION.to_string()));
        up.body = serde_json::to_vec(&map)
            .map(Bytes::from)
            .map_err(|e| RequestError::InvalidJson(e.to_string()))?;
    } else {
        up.body = anthropic_body(&up.body)?.0;
    }
    Ok(up)
}

/// Reads a Vertex error response (Google's shape from the front end and Gemini models,
/// Anthropic's from Claude models) into a [`ProviderError`], as [`crate::error::classify`]:
/// 401 `UNAUTHENTICATED` (the token was refused: the gateway drops it with
/// [`crate::sign::refresh::TokenCache::invalidate`]) and 403 `PERMISSION_DENIED` are auth,
/// 429 `RESOURCE_EXHAUSTED` rate limited (quota per minute; a per-day `QuotaFailure` is quota
/// exhausted), 503 and Anthropic's 529 overloaded.
pub fn classify(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now_unix: u64,
) -> ProviderError {
    crate::error::classify(Family::Gemini, status, headers, body, now_unix)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Project<'static> = Project {
        id: "my-project",
        location: "us-east5",
    };

    #[test]
    fn hosts_and_publishers() {
        assert_eq!(host("us-central1"), "us-central1-aiplatform.googleapis.com");
        assert_eq!(base_url("global"), "https://aiplatform.googleapis.com");
        assert_eq!(
            Publisher::of_model("claude-sonnet-4-5@20250929"),
            Publisher::Anthropic
        );
        assert_eq!(
            Publisher::of_model("publishers/anthropic/models/claude-3-haiku"),
            Publisher::Anthropic
        );
        assert_eq!(Publisher::of_model("gemini-2.5-pro"), Publisher::Google);
        assert_eq!(Publisher::Anthropic.family(), Family::Anthropic);
    }

    #[test]
    fn paths() {
        assert_eq!(
            gemini_path(&P, Operation::ChatCompletions, "models/gemini-2.5-flash", true).unwrap(),
            "/v1/projects/my-project/locations/us-east5/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            gemini_path(&P, Operation::CountTokens, "gemini-2.5-flash", true).unwrap(),
            "/v1/projects/my-project/locations/us-east5/publishers/google/models/gemini-2.5-flash:countTokens"
        );
        assert_eq!(gemini_path(&P, Operation::Embeddings, "g", false), None);
        assert_eq!(
            anthropic_path(&P, Operation::Messages, "claude-sonnet-4-5@20250929", false).unwrap(),
            "/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5%4020250929:rawPredict"
        );
        assert_eq!(
            anthropic_path(&P, Operation::CountTokens, "claude-x", false).unwrap(),
            "/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict"
        );
        let evil = Project {
            id: "p/../../x",
            location: "l?alt=json",
        };
        assert_eq!(
            anthropic_path(&evil, Operation::Messages, "m#", true).unwrap(),
            "/v1/projects/p%2F..%2F..%2Fx/locations/l%3Falt%3Djson/publishers/anthropic/models/m%23:streamRawPredict"
        );
    }

    #[test]
    fn anthropic_bodies() {
        let (body, model) = anthropic_body(
            br#"{"model":"claude-x","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        )
        .unwrap();
        assert_eq!(model.as_deref(), Some("claude-x"));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v.get("model"), None);
        assert_eq!(v["anthropic_version"], ANTHROPIC_VERSION);
        assert_eq!(v["stream"], true);
        let (body, model) =
            anthropic_body(br#"{"anthropic_version":"vertex-2099-01-01","messages":[]}"#).unwrap();
        assert_eq!(model, None);
        assert!(std::str::from_utf8(&body)
            .unwrap()
            .contains("vertex-2099-01-01"));
        assert!(anthropic_body(br#"{"model":1}"#).is_err());
        assert_eq!(anthropic_body(b"[]"), Err(RequestError::NotAnObject));
    }
}
