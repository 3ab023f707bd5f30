//! Request translation: the client's body in the upstream provider's format.
//!
//! When the client's family and the upstream's match and nothing needs changing, the body is
//! passed on as the same bytes (no parse, no copy). Otherwise the body is parsed once and
//! rewritten: model renamed, stream usage asked for, or translated to another family.

pub(crate) mod anthropic;
pub(crate) mod field;
pub(crate) mod gemini;
pub(crate) mod openai;
pub(crate) mod responses;

pub(crate) use openai::parse_arguments;

use std::borrow::Cow;

use bytes::Bytes;
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::api::{Family, Operation};
use crate::chat::{self, ChatRequest};
use crate::provider::ProviderKind;
use crate::reasoning::BudgetTable;

/// `max_tokens` sent to Anthropic (which requires it) when an OpenAI client set no limit:
/// 4096 is the largest output every Claude model accepts (Claude 3 Haiku's maximum), so the
/// request is valid whatever the route's model; ask for more by setting
/// `max_completion_tokens`.
pub const DEFAULT_ANTHROPIC_MAX_TOKENS: u64 = 4096;

/// How to build one upstream request.
#[derive(Clone, Copy, Debug)]
pub struct RequestOptions<'a> {
    /// The client's operation (its endpoint).
    pub op: Operation,
    /// The upstream's provider.
    pub provider: &'a ProviderKind,
    /// The model name to send upstream (a route's `model`), replacing the client's; `None`
    /// keeps the client's.
    pub model: Option<&'a str>,
    /// Drop parameters the provider cannot honour (listed in [`UpstreamRequest::dropped`])
    /// instead of refusing the request with [`RequestError::Unsupported`].
    pub drop_unsupported: bool,
    /// Streams to OpenAI-shaped upstreams: ask for usage (`stream_options.include_usage`)
    /// even when the client did not (the stream translator then removes the extra chunk).
    pub stream_usage: bool,
    /// Continuation after a cut stream: the assistant text the client already has, sent as an
    /// assistant prefill (Anthropic: a trailing assistant message; OpenAI-compatible: a
    /// trailing assistant message with `continue_final_message: true` and
    /// `add_generation_prompt: false`, as vLLM takes it). Appended to the client's own final
    /// assistant message when it has one. Anthropic refuses a prefill that ends in
    /// whitespace, so trailing whitespace is trimmed there: the continuation may repeat it.
    /// Azure OpenAI and Gemini have no prefill ([`RequestError::Unsupported`] `prefill`).
    pub prefill: Option<&'a str>,
    /// Effort levels as thinking budgets for this route; `None`: [`BudgetTable::DEFAULT`].
    /// Read only when a translation maps an effort to a budget or back.
    pub reasoning_budgets: Option<&'a BudgetTable>,
}

/// The request as the upstream gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamRequest {
    /// Path and query below the upstream's base URL (`/chat/completions`,
    /// `/models/gemini-2.0-flash:streamGenerateContent?alt=sse`, ...).
    pub path: String,
    /// The body to send.
    pub body: Bytes,
    /// Whether the upstream will answer with an SSE stream.
    pub stream: bool,
    /// The model name sent upstream.
    pub model: String,
    /// Parameters dropped because the provider cannot honour them (with
    /// `drop_unsupported`), for a response header.
    pub dropped: Vec<String>,
    /// Whether the body was translated to another family (false: same family, possibly with
    /// the model renamed or usage asked for).
    pub translated: bool,
    /// Whether the client itself asked for usage in its stream (OpenAI
    /// `stream_options.include_usage`; Anthropic and Gemini streams always carry it).
    pub client_wants_usage: bool,
}

/// Why a request cannot be sent to this provider. Each maps to a 400 in the client's format
/// that names the parameter.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The body is not JSON.
    #[error("the request body is not valid JSON: {0}")]
    InvalidJson(String),
    /// The body is JSON but not an object.
    #[error("the request body must be a JSON object")]
    NotAnObject,
    /// A field has the wrong shape (e.g. `messages` is not an array).
    #[error("`{param}`: {reason}")]
    Invalid {
        /// The field, as a JSON path (`messages[2].content`).
        param: String,
        /// What is wrong and what would be right.
        reason: String,
    },
    /// The provider cannot honour a parameter and the route does not drop it.
    #[error("`{param}` is not supported by {provider} upstreams; remove it, or set drop_unsupported_params = true on the route")]
    Unsupported {
        /// The parameter.
        param: String,
        /// The provider (`anthropic`, `gemini`, ...).
        provider: &'static str,
    },
    /// The provider has no such endpoint (e.g. embeddings on Anthropic).
    #[error("{op} is not available on {provider} upstreams")]
    UnsupportedOperation {
        /// The client's operation (`embeddings`, ...).
        op: &'static str,
        /// The provider.
        provider: &'static str,
    },
}

impl RequestError {
    /// The status the client gets (400).
    pub fn status(&self) -> StatusCode {
        StatusCode::BAD_REQUEST
    }

    /// A stable error code for the body, logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            RequestError::InvalidJson(_) | RequestError::NotAnObject => "invalid_json",
            RequestError::Invalid { .. } => "invalid_request",
            RequestError::Unsupported { .. } => "unsupported_parameter",
            RequestError::UnsupportedOperation { .. } => "unsupported_operation",
        }
    }
}

/// Builds the upstream request for `body` (the client's request body).
///
/// Three paths, cheapest first:
/// - same family, nothing to change: the same `Bytes` (a borrowed scan reads `model`,
///   `stream` and `stream_options`; no tree is built, nothing is copied);
/// - same family with a model rename, stream usage or a prefill: parsed once, edited,
///   serialised (unknown fields kept);
/// - another family: read into the neutral conversation and written in the provider's
///   format; a parameter the provider cannot honour is refused, or dropped and listed with
///   `drop_unsupported`.
///
/// # Errors
/// [`RequestError`]: the body is not a JSON object, a field has the wrong shape, or a
/// parameter or the operation is unsupported by the provider.
pub fn translate_request(
    body: &Bytes,
    opts: &RequestOptions<'_>,
) -> Result<UpstreamRequest, RequestError> {
    if !opts.provider.serves(opts.op) {
        return Err(unsupported_operation(opts));
    }
    if opts.op.family() == opts.provider.family() {
        same_family(body, opts)
    } else {
        translate(body, opts, None)
    }
}

/// What the caller has already read from the request body, so that the same-family path
/// does not scan it again: the values of `model`, `stream` and `stream_options.include_usage`
/// exactly as the body holds them (`None` when absent).
#[derive(Clone, Copy, Debug, Default)]
pub struct KnownFields<'a> {
    /// `model`.
    pub model: Option<&'a str>,
    /// `stream`.
    pub stream: Option<bool>,
    /// `stream_options.include_usage`.
    pub include_usage: Option<bool>,
}

/// [`translate_request`] for a body whose routing fields the caller has read already (and
/// found well-typed): the same result, without a second scan when the family is the same.
///
/// # Errors
/// As [`translate_request`].
pub fn translate_request_known(
    body: &Bytes,
    opts: &RequestOptions<'_>,
    known: &KnownFields<'_>,
) -> Result<UpstreamRequest, RequestError> {
    if !opts.provider.serves(opts.op) {
        return Err(unsupported_operation(opts));
    }
    if opts.op.family() == opts.provider.family() {
        same_family_known(body, opts, known)
    } else {
        translate(body, opts, Some(known))
    }
}

fn unsupported_operation(opts: &RequestOptions<'_>) -> RequestError {
    RequestError::UnsupportedOperation {
        op: opts.op.as_str(),
        provider: opts.provider.as_str(),
    }
}

/// The fields the passthrough path needs; serde skips the rest without building it.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<ProbeStreamOptions>,
}

#[derive(Deserialize)]
struct ProbeStreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

fn json_error(body: &[u8], e: serde_json::Error) -> RequestError {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if e.is_data() && first.is_some_and(|&b| b != b'{') {
        RequestError::NotAnObject
    } else {
        RequestError::InvalidJson(e.to_string())
    }
}

pub(crate) fn parse_object(body: &[u8]) -> Result<Map<String, Value>, RequestError> {
    match serde_json::from_slice::<Value>(body).map_err(|e| json_error(body, e))? {
        Value::Object(m) => Ok(m),
        _ => Err(RequestError::NotAnObject),
    }
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

/// Why the probe failed, naming the field (serde's message names only the type).
fn probe_error(body: &[u8], e: serde_json::Error) -> RequestError {
    if !e.is_data() {
        return json_error(body, e);
    }
    let map = match parse_object(body) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let wrong = |field: &str, ok: fn(&Value) -> bool| {
        map.get(field).is_some_and(|v| !v.is_null() && !ok(v))
    };
    if wrong("model", Value::is_string) {
        return field::invalid(&"model", "must be a string");
    }
    if wrong("stream", Value::is_boolean) {
        return field::invalid(&"stream", "must be a boolean");
    }
    if wrong("stream_options", Value::is_object) {
        return field::invalid(&"stream_options", "must be an object");
    }
    field::invalid(&"stream_options.include_usage", "must be a boolean")
}

fn same_family(body: &Bytes, opts: &RequestOptions<'_>) -> Result<UpstreamRequest, RequestError> {
    let probe: Probe<'_> = serde_json::from_slice(body).map_err(|e| probe_error(body, e))?;
    let known = KnownFields {
        model: probe.model.as_deref(),
        stream: probe.stream,
        include_usage: probe.stream_options.and_then(|o| o.include_usage),
    };
    same_family_known(body, opts, &known)
}

fn same_family_known(
    body: &Bytes,
    opts: &RequestOptions<'_>,
    known: &KnownFields<'_>,
) -> Result<UpstreamRequest, RequestError> {
    let client_model = non_empty(known.model);
    let model = non_empty(opts.model)
        .or(client_model)
        .ok_or_else(|| field::invalid(&"model", "is required"))?
        .to_string();
    let stream = opts.op.can_stream() && known.stream.unwrap_or(false);
    let client_usage = known.include_usage.unwrap_or(false);
    let rename = non_empty(opts.model).is_some_and(|m| client_model != Some(m));
    let add_usage = opts.stream_usage
        && stream
        && !client_usage
        && matches!(opts.op, Operation::ChatCompletions | Operation::Completions);
    let prefill = non_empty(opts.prefill);
    let path = opts
        .provider
        .path(opts.op, &model, stream)
        .ok_or_else(|| unsupported_operation(opts))?;
    let client_wants_usage = match opts.op.family() {
        Family::OpenAi => client_usage,
        _ => true,
    };
    // Gemini's model is in the path, never in the body.
    let rename = rename && opts.op.family() != Family::Gemini;
    let body = if rename || add_usage || prefill.is_some() {
        let mut map = parse_object(body)?;
        if rename {
            map.insert("model".into(), Value::String(model.clone()));
        }
        if add_usage {
            let opts = map
                .entry("stream_options")
                .or_insert_with(|| Value::Object(Map::new()));
            if !opts.is_object() {
                *opts = Value::Object(Map::new());
            }
            if let Value::Object(o) = opts {
                o.insert("include_usage".into(), Value::Bool(true));
            }
        }
        if let Some(text) = prefill {
            same_family_prefill(&mut map, text, opts)?;
        }
        Bytes::from(serde_json::to_vec(&map).map_err(|e| RequestError::InvalidJson(e.to_string()))?)
    } else {
        body.clone()
    };
    Ok(UpstreamRequest {
        path,
        body,
        stream,
        model,
        dropped: Vec::new(),
        translated: false,
        client_wants_usage,
    })
}

/// Appends the continuation prefill to a same-family body.
fn same_family_prefill(
    map: &mut Map<String, Value>,
    text: &str,
    opts: &RequestOptions<'_>,
) -> Result<(), RequestError> {
    let refuse = || RequestError::Unsupported {
        param: "prefill".into(),
        provider: opts.provider.as_str(),
    };
    let text = match opts.provider {
        ProviderKind::OpenAi if opts.op == Operation::ChatCompletions => text,
        ProviderKind::Anthropic { .. } if opts.op == Operation::Messages => text.trim_end(),
        _ => return Err(refuse()),
    };
    let Some(Value::Array(messages)) = map.get_mut("messages") else {
        return Err(field::invalid(&"messages", "must be an array"));
    };
    let last_is_assistant = messages
        .last()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        == Some("assistant");
    let appended = if last_is_assistant {
        match messages.last_mut().and_then(|m| m.get_mut("content")) {
            Some(Value::String(s)) => {
                s.push_str(text);
                true
            }
            Some(Value::Array(parts)) => {
                parts.push(serde_json::json!({"type": "text", "text": text}));
                true
            }
            _ => false,
        }
    } else {
        false
    };
    if !appended {
        messages.push(serde_json::json!({"role": "assistant", "content": text}));
    }
    if opts.op == Operation::ChatCompletions {
        map.insert("continue_final_message".into(), Value::Bool(true));
        map.insert("add_generation_prompt".into(), Value::Bool(false));
    }
    Ok(())
}

/// Parameters a provider cannot honour: refused, or dropped and remembered.
pub(crate) struct Drops {
    pub(crate) provider: &'static str,
    pub(crate) drop: bool,
    pub(crate) dropped: Vec<String>,
}

impl Drops {
    /// `param` cannot be sent: an error, or (with `drop_unsupported`) noted as dropped.
    pub(crate) fn unsupported(&mut self, param: impl Into<String>) -> Result<(), RequestError> {
        let param = param.into();
        if self.drop {
            self.dropped.push(param);
            Ok(())
        } else {
            Err(RequestError::Unsupported {
                param,
                provider: self.provider,
            })
        }
    }

    /// Every parameter the client's family alone has.
    pub(crate) fn foreign(&mut self, req: &mut ChatRequest) -> Result<(), RequestError> {
        for p in std::mem::take(&mut req.foreign) {
            self.unsupported(p)?;
        }
        Ok(())
    }
}

/// `known`: the caller's reading of the request; a Gemini-native client's model (from the
/// path) is only there.
fn translate(
    body: &Bytes,
    opts: &RequestOptions<'_>,
    known: Option<&KnownFields<'_>>,
) -> Result<UpstreamRequest, RequestError> {
    let map = parse_object(body)?;
    let count_tokens = opts.op == Operation::CountTokens;
    let mut req = match opts.op {
        Operation::Messages | Operation::CountTokens => anthropic::read(map)?,
        Operation::Responses => responses::read(map)?,
        Operation::GenerateContent | Operation::StreamGenerateContent => gemini::read(
            map,
            known.and_then(|k| k.model).unwrap_or_default(),
            opts.op == Operation::StreamGenerateContent,
        )?,
        _ => openai::read(map)?,
    };
    if let Some(m) = non_empty(opts.model) {
        req.model = m.to_string();
    }
    if let Some(b) = opts.reasoning_budgets {
        req.budgets = *b;
    }
    if req.model.is_empty() {
        return Err(field::invalid(&"model", "is required"));
    }
    if let Some(text) = non_empty(opts.prefill) {
        req.append_prefill(text);
    }
    let stream = req.stream && !count_tokens;
    let client_wants_usage = match opts.op.family() {
        Family::OpenAi => req.include_usage,
        _ => true,
    };
    let model = req.model.clone();
    let path = opts
        .provider
        .path(opts.op, &model, stream)
        .ok_or_else(|| unsupported_operation(opts))?;
    let mut drops = Drops {
        provider: opts.provider.as_str(),
        drop: opts.drop_unsupported,
        dropped: Vec::new(),
    };
    let body = match opts.provider {
        ProviderKind::OpenAi | ProviderKind::Azure { .. } => {
            to_bytes(&openai::write(req, opts.provider, &mut drops)?)
        }
        ProviderKind::Anthropic { .. } => to_bytes(&anthropic::write(req, &mut drops)?),
        ProviderKind::Gemini => {
            let mut g = gemini::write(req, &mut drops)?;
            if count_tokens {
                g.model = Some(format!(
                    "models/{}",
                    model.strip_prefix("models/").unwrap_or(&model)
                ));
                to_bytes(&crate::shape::gemini::CountTokensRequest {
                    generate_content_request: g,
                })
            } else {
                to_bytes(&g)
            }
        }
    }?;
    Ok(UpstreamRequest {
        path,
        body,
        stream,
        model,
        dropped: drops.dropped,
        translated: true,
        client_wants_usage,
    })
}

fn to_bytes<T: serde::Serialize>(v: &T) -> Result<Bytes, RequestError> {
    serde_json::to_vec(v)
        .map(Bytes::from)
        .map_err(|e| RequestError::InvalidJson(e.to_string()))
}

/// A client's `tools`: each object whose `type` is `own` (or absent) is a function tool, read
/// by `read` (given the tool and its position); a tool of another type is the client family's
/// own (Anthropic server tools, ...), named in `foreign`.
fn read_tools(
    tools: Vec<Value>,
    own: &str,
    foreign: &mut Vec<String>,
    read: impl Fn(Map<String, Value>, usize) -> Result<chat::Tool, RequestError>,
) -> Result<Vec<chat::Tool>, RequestError> {
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.into_iter().enumerate() {
        let param = format_args!("tools[{i}]");
        let mut t =
            field::object(t, &param)?.ok_or_else(|| field::invalid(&param, "must be an object"))?;
        let kind = field::string(t.remove("type").unwrap_or(Value::Null), &param)?;
        if kind.as_deref().is_some_and(|k| k != own) {
            foreign.push(format!("tools[{i}] ({} tools)", kind.unwrap_or_default()));
            continue;
        }
        out.push(read(t, i)?);
    }
    Ok(out)
}

/// A function's definition (`name`, `description`, `strict`, and the JSON Schema of its
/// arguments under `schema`), its fields named below `param` in errors.
fn read_function(
    mut f: Map<String, Value>,
    param: field::Param<'_>,
    schema: &str,
) -> Result<chat::Tool, RequestError> {
    Ok(chat::Tool {
        name: field::required_string(f.remove("name"), &format_args!("{param}.name"))?,
        description: field::string(
            f.remove("description").unwrap_or(Value::Null),
            &format_args!("{param}.description"),
        )?,
        parameters: f.remove(schema).filter(|p| !p.is_null()),
        strict: field::boolean(
            f.get("strict").unwrap_or(&Value::Null),
            &format_args!("{param}.strict"),
        )?,
    })
}
