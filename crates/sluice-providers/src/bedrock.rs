//! AWS Bedrock (`provider = "bedrock"`), sans-I/O: the Converse and ConverseStream APIs for
//! OpenAI chat, OpenAI Responses, Anthropic Messages and Gemini `generateContent` clients, and
//! InvokeModel for an Anthropic client's native body.
//!
//! In the order a request meets them:
//! - [`translate_request`]: the client's body as a Converse body, and its path
//!   (`/model/{modelId}/converse` or `/converse-stream`, the model id percent-encoded: ARNs
//!   hold `:` and `/`); [`invoke_request`] for InvokeModel. The gateway then signs the request
//!   with [`crate::sign::sigv4`] (service `bedrock`, the host
//!   `bedrock-runtime.{region}.amazonaws.com`).
//! - [`translate_response`]: a Converse response as the client's body.
//! - [`BedrockStream`]: a ConverseStream body (AWS event-stream framing,
//!   [`crate::eventstream`]) as the client's SSE events; [`invoke_stream_event`] unwraps an
//!   InvokeModelWithResponseStream chunk into the Anthropic SSE event it carries.
//! - [`classify`] / [`classify_stream_exception`]: Bedrock's errors for the policy stage.
//!
//! Field names and types follow botocore's `bedrock-runtime` 2023-09-30 model. What the
//! request writer does with each client parameter:
//! - system texts become `system` text blocks; turns of one role are merged; blank text is
//!   left out (Bedrock refuses it); images go inline (`image.source.bytes`, format from the
//!   media type) or from `s3://`; PDFs as `document` blocks named `document-N`; tool calls and
//!   results as `toolUse` / `toolResult` (`status: error` for failed calls), their ids made to
//!   fit `[a-zA-Z0-9_.:-]{1,64}`;
//! - `max_tokens` (or `max_completion_tokens`), `temperature`, `top_p`, stop sequences go in
//!   `inferenceConfig`; `top_k` in `additionalModelRequestFields`; a JSON schema in
//!   `outputConfig.textFormat`; tools as `toolSpec`s with `inputSchema.json`; tool choice
//!   `auto`/`any`/`tool`, and "none" by sending no tools;
//! - Anthropic `cache_control` breakpoints become `cachePoint` blocks after the system text,
//!   tool or content block they marked;
//! - refused unless the route drops them: `n`, `seed`, penalties, `logprobs`, image URLs that
//!   are not `s3://`, audio, no parallel tool calls, `json_object`, and whatever only the
//!   client's family has.
//!
//! NOTE: Bedrock is not a [`crate::ProviderKind`] (its wire format is not one of the SSE
//! families the gateway's exhaustive matches know), so these are standalone functions the
//! gateway calls for a Bedrock upstream; see the crate README for the wiring.

mod error;
mod request;
mod response;
pub mod shape;
mod stream;

pub use error::{classify, classify_stream_exception, exception_class};
pub use stream::{BedrockStream, BedrockStreamOptions};

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Value;

use crate::api::{Family, Operation};
use crate::eventstream::Message;
use crate::provider::PathSegment;
use crate::request::{Drops, RequestError, UpstreamRequest};
use crate::response::ResponseError;
use crate::usage::Usage;
use shape::TokenUsage;

/// The provider's name in errors, logs and metrics.
pub const PROVIDER: &str = "bedrock";

/// The SigV4 signing name of Bedrock's runtime endpoints.
pub const SIGNING_SERVICE: &str = "bedrock";

/// The `anthropic_version` InvokeModel wants in an Anthropic body.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The runtime endpoint's host for a region (`bedrock-runtime.us-east-1.amazonaws.com`).
pub fn runtime_host(region: &str) -> String {
    format!("bedrock-runtime.{region}.amazonaws.com")
}

/// `/model/{modelId}/converse`, or `/converse-stream` when `stream`; the model id (a
/// foundation model id, inference profile id or ARN) percent-encoded as one segment.
pub fn converse_path(model_id: &str, stream: bool) -> String {
    let op = if stream {
        "converse-stream"
    } else {
        "converse"
    };
    format!("/model/{}/{op}", PathSegment(model_id))
}

/// `/model/{modelId}/invoke`, or `/invoke-with-response-stream` when `stream`.
pub fn invoke_path(model_id: &str, stream: bool) -> String {
    let op = if stream {
        "invoke-with-response-stream"
    } else {
        "invoke"
    };
    format!("/model/{}/{op}", PathSegment(model_id))
}

/// How to build one Bedrock request.
#[derive(Clone, Copy, Debug)]
pub struct BedrockRequestOptions<'a> {
    /// The client's operation: [`Operation::ChatCompletions`], [`Operation::Responses`],
    /// [`Operation::Messages`], [`Operation::GenerateContent`] or
    /// [`Operation::StreamGenerateContent`].
    pub op: Operation,
    /// The Bedrock model id to call (a route's `model`); `None` keeps the client's.
    pub model: Option<&'a str>,
    /// A Gemini client's model, which its path names (its body has none); read only for the
    /// Gemini operations.
    pub path_model: Option<&'a str>,
    /// Drop parameters Bedrock cannot honour instead of refusing the request.
    pub drop_unsupported: bool,
    /// Continuation: the assistant text the client already has, sent as a final assistant
    /// message (Anthropic models continue it; trailing whitespace trimmed).
    pub prefill: Option<&'a str>,
}

impl<'a> BedrockRequestOptions<'a> {
    /// Options that keep the client's model, refuse what Bedrock cannot honour, no prefill.
    pub fn new(op: Operation) -> Self {
        BedrockRequestOptions {
            op,
            model: None,
            path_model: None,
            drop_unsupported: false,
            prefill: None,
        }
    }
}

fn unsupported_operation(op: Operation) -> RequestError {
    RequestError::UnsupportedOperation {
        op: op.as_str(),
        provider: PROVIDER,
    }
}

/// The client's chat completions, responses, messages or `generateContent` body as a Converse
/// (or ConverseStream, when the client asked for a stream) request. [`UpstreamRequest::stream`]
/// says which; the body is always translated.
///
/// # Errors
/// [`RequestError`]: not a JSON object, a field of the wrong shape, a parameter Bedrock cannot
/// honour (unless dropped), an operation without a Converse equivalent (embeddings, legacy
/// completions, count_tokens).
pub fn translate_request(
    body: &Bytes,
    opts: &BedrockRequestOptions<'_>,
) -> Result<UpstreamRequest, RequestError> {
    let map = crate::request::parse_object(body)?;
    let mut req = match opts.op {
        Operation::Messages => crate::request::anthropic::read(map)?,
        Operation::ChatCompletions => crate::request::openai::read(map)?,
        Operation::Responses => crate::request::responses::read(map)?,
        Operation::GenerateContent | Operation::StreamGenerateContent => {
            crate::request::gemini::read(
                map,
                opts.path_model.unwrap_or_default(),
                opts.op == Operation::StreamGenerateContent,
            )?
        }
        op => return Err(unsupported_operation(op)),
    };
    if let Some(m) = opts.model.filter(|m| !m.is_empty()) {
        req.model = m.to_string();
    }
    if req.model.is_empty() {
        return Err(crate::request::field::invalid(&"model", "is required"));
    }
    if let Some(text) = opts.prefill.filter(|p| !p.is_empty()) {
        req.append_prefill(text);
    }
    let stream = req.stream;
    let client_wants_usage = match opts.op.family() {
        Family::OpenAi => req.include_usage,
        _ => true,
    };
    let model = req.model.clone();
    let mut drops = Drops {
        provider: PROVIDER,
        drop: opts.drop_unsupported,
        dropped: Vec::new(),
    };
    let converse = request::write(req, &mut drops)?;
    let body = serde_json::to_vec(&converse)
        .map(Bytes::from)
        .map_err(|e| RequestError::InvalidJson(e.to_string()))?;
    Ok(UpstreamRequest {
        path: converse_path(&model, stream),
        body,
        stream,
        model,
        dropped: drops.dropped,
        translated: true,
        client_wants_usage,
    })
}

/// An Anthropic Messages client's body for InvokeModel (Anthropic models take their native
/// body there): `model` and `stream` move out of the body (into the path: `invoke` or
/// `invoke-with-response-stream`), `anthropic_version` is set to [`ANTHROPIC_VERSION`]
/// unless the client set one. Everything else goes as the client wrote it. The answer is an
/// Anthropic body ([`crate::response::translate_response`] with an Anthropic provider reads
/// it), and a stream's chunks unwrap with [`invoke_stream_event`].
///
/// # Errors
/// [`RequestError`]: the client is not an Anthropic Messages client, the body is not a JSON
/// object, or there is no model.
pub fn invoke_request(
    body: &Bytes,
    opts: &BedrockRequestOptions<'_>,
) -> Result<UpstreamRequest, RequestError> {
    if opts.op != Operation::Messages {
        return Err(unsupported_operation(opts.op));
    }
    let mut map = crate::request::parse_object(body)?;
    let client_model = match map.remove("model") {
        Some(Value::String(m)) => Some(m),
        None | Some(Value::Null) => None,
        Some(_) => return Err(crate::request::field::invalid(&"model", "must be a string")),
    };
    let model = opts
        .model
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .or(client_model.filter(|m| !m.is_empty()))
        .ok_or_else(|| crate::request::field::invalid(&"model", "is required"))?;
    let stream = match map.remove("stream") {
        Some(Value::Bool(b)) => b,
        None | Some(Value::Null) => false,
        Some(_) => {
            return Err(crate::request::field::invalid(
                &"stream",
                "must be a boolean",
            ))
        }
    };
    if opts.prefill.is_some_and(|p| !p.is_empty()) {
        let mut drops = Drops {
            provider: PROVIDER,
            drop: opts.drop_unsupported,
            dropped: Vec::new(),
        };
        drops.unsupported("prefill (with InvokeModel)")?;
    }
    map.entry("anthropic_version")
        .or_insert_with(|| Value::String(ANTHROPIC_VERSION.to_string()));
    let body = serde_json::to_vec(&map)
        .map(Bytes::from)
        .map_err(|e| RequestError::InvalidJson(e.to_string()))?;
    Ok(UpstreamRequest {
        path: invoke_path(&model, stream),
        body,
        stream,
        model,
        dropped: Vec::new(),
        translated: false,
        client_wants_usage: true,
    })
}

/// How to read one Converse response.
#[derive(Clone, Copy, Debug)]
pub struct BedrockResponseOptions<'a> {
    /// The client's operation.
    pub op: Operation,
    /// The model id sent (Converse does not name the model in its answer).
    pub model: &'a str,
    /// The id the client's body carries (Converse has none); `None`: `msg_sluice` /
    /// `chatcmpl-sluice`.
    pub id: Option<&'a str>,
    /// Seconds since the epoch: `created` of an OpenAI body.
    pub now_unix: u64,
}

/// A Converse response, for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BedrockResponse {
    /// The client's body.
    pub body: Bytes,
    /// The usage, normalised.
    pub usage: Option<Usage>,
    /// Bedrock's own counts (cache writes apart).
    pub token_usage: Option<TokenUsage>,
}

/// Translates a successful Converse response body for the client.
///
/// # Errors
/// [`ResponseError::Malformed`]: not a Converse response.
pub fn translate_response(
    body: &[u8],
    opts: &BedrockResponseOptions<'_>,
) -> Result<BedrockResponse, ResponseError> {
    let malformed = |reason: String| ResponseError::Malformed {
        provider: PROVIDER,
        reason,
    };
    let id = opts.id.unwrap_or(match opts.op {
        Operation::Messages => "msg_sluice",
        Operation::Responses => "resp_sluice",
        _ => "chatcmpl-sluice",
    });
    let (answer, token_usage) = response::read(body, id, opts.model).map_err(malformed)?;
    let usage = answer.usage;
    let body = match opts.op {
        Operation::Messages => crate::response::anthropic::write(answer),
        Operation::Responses => crate::response::responses::write(answer, opts.now_unix),
        Operation::GenerateContent | Operation::StreamGenerateContent => {
            crate::response::gemini::write(answer)
        }
        _ => crate::response::openai::write(answer, opts.now_unix),
    }
    .map_err(malformed)?;
    Ok(BedrockResponse {
        body,
        usage,
        token_usage,
    })
}

/// Why an InvokeModelWithResponseStream message cannot be unwrapped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvokeStreamError {
    /// A `chunk` event whose payload is not `{"bytes": "<base64>"}` of a JSON event.
    #[error("a Bedrock invoke stream chunk is not base64 JSON under `bytes`: {0}")]
    Malformed(&'static str),
}

/// An InvokeModelWithResponseStream message, unwrapped: a `chunk` event's
/// `{"bytes": "<base64>"}` is one Anthropic stream event's JSON, returned as the SSE event
/// the Anthropic API would have sent (`event: {type}` and `data: {json}`), ready for an
/// [`sluice_sse::Decoder`] and the Anthropic stream translators. `None` for anything else
/// (exceptions are read with [`classify_stream_exception`]).
///
/// # Errors
/// [`InvokeStreamError`]: the chunk is not base64 of a JSON object with a `type`.
pub fn invoke_stream_event(m: &Message) -> Result<Option<Bytes>, InvokeStreamError> {
    if m.header_str(":message-type").unwrap_or("event") != "event"
        || m.header_str(":event-type") != Some("chunk")
    {
        return Ok(None);
    }
    #[derive(serde::Deserialize)]
    struct Chunk<'a> {
        #[serde(borrow)]
        bytes: std::borrow::Cow<'a, str>,
    }
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
    }
    let chunk: Chunk<'_> = serde_json::from_slice(&m.payload)
        .map_err(|_| InvokeStreamError::Malformed("the payload has no `bytes` string"))?;
    let json = base64_decode(chunk.bytes.as_bytes())
        .ok_or(InvokeStreamError::Malformed("`bytes` is not base64"))?;
    let typed: Typed<'_> = serde_json::from_slice(&json)
        .map_err(|_| InvokeStreamError::Malformed("the event is not JSON with a `type`"))?;
    if typed.kind.contains(['\n', '\r']) || json.contains(&b'\n') || json.contains(&b'\r') {
        // Compact JSON has no line breaks; an event that does would need one `data:` line each.
        let data = String::from_utf8_lossy(&json).into_owned();
        let mut out = BytesMut::new();
        sluice_sse::Encoder::default().event(
            &mut out,
            &sluice_sse::OutEvent {
                event: Some(typed.kind.trim()),
                data: &data,
                ..sluice_sse::OutEvent::default()
            },
        );
        return Ok(Some(out.freeze()));
    }
    let mut out = BytesMut::with_capacity(json.len() + typed.kind.len() + 16);
    out.put_slice(b"event: ");
    out.put_slice(typed.kind.as_bytes());
    out.put_slice(b"\ndata: ");
    out.put_slice(&json);
    out.put_slice(b"\n\n");
    Ok(Some(out.freeze()))
}

/// Standard base64 (RFC 4648 §4, padding optional); `None` for any other byte.
fn base64_decode(s: &[u8]) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let s = s
        .strip_suffix(b"==")
        .or_else(|| s.strip_suffix(b"="))
        .unwrap_or(s);
    if s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3 + 2);
    for group in s.chunks(4) {
        let mut n = 0u32;
        for &c in group {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * (4 - group.len() as u32);
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..group.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_encode_ids_and_arns() {
        assert_eq!(
            converse_path("anthropic.claude-3-5-sonnet-20240620-v1:0", false),
            "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"
        );
        assert_eq!(
            converse_path(
                "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.meta.llama3-1-8b-instruct-v1:0",
                true
            ),
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.meta.llama3-1-8b-instruct-v1%3A0/converse-stream"
        );
        assert_eq!(
            invoke_path("../x?y", true),
            "/model/..%2Fx%3Fy/invoke-with-response-stream"
        );
        assert_eq!(
            runtime_host("eu-west-3"),
            "bedrock-runtime.eu-west-3.amazonaws.com"
        );
    }

    #[test]
    fn base64() {
        for (enc, dec) in [
            (&b""[..], &b""[..]),
            (b"Zg==", b"f"),
            (b"Zm8=", b"fo"),
            (b"Zm9v", b"foo"),
            (b"Zm9vYg", b"foob"),
            (b"+/8=", &[0xfb, 0xff]),
        ] {
            assert_eq!(base64_decode(enc).as_deref(), Some(dec), "{enc:?}");
        }
        assert_eq!(base64_decode(b"Z"), None);
        assert_eq!(base64_decode(b"Zm9v!"), None);
    }

    #[test]
    fn invoke_stream_chunks_are_anthropic_events() {
        let event = br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#;
        // Standard base64 of `event`, as the chunk carries it.
        let b64 = {
            const A: &[u8; 64] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut s = String::new();
            for c in event.chunks(3) {
                let n = c.iter().fold(0u32, |n, &b| n << 8 | u32::from(b)) << (8 * (3 - c.len()));
                for i in 0..=c.len() {
                    s.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
                }
                for _ in c.len()..3 {
                    s.push('=');
                }
            }
            s
        };
        let m = Message::new(format!(r#"{{"bytes":"{b64}"}}"#))
            .with_str(":event-type", "chunk")
            .with_str(":message-type", "event")
            .with_str(":content-type", "application/json");
        let sse = invoke_stream_event(&m).unwrap().unwrap();
        let mut want = b"event: content_block_delta\ndata: ".to_vec();
        want.extend_from_slice(event);
        want.extend_from_slice(b"\n\n");
        assert_eq!(&sse[..], &want[..]);
        let other = Message::new("{}").with_str(":event-type", "metadata");
        assert_eq!(invoke_stream_event(&other), Ok(None));
        let bad = Message::new(r#"{"bytes":"!!"}"#).with_str(":event-type", "chunk");
        assert!(invoke_stream_event(&bad).is_err());
    }
}
