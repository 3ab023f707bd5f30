//! Request translation: the client's body in the upstream provider's format.
//!
//! When the client's family and the upstream's match and nothing needs changing, the body is
//! passed on as the same bytes (no parse, no copy). Otherwise the body is parsed once and
//! rewritten: model renamed, stream usage asked for, or translated to another family.

use bytes::Bytes;
use http::StatusCode;

use crate::api::Operation;
use crate::provider::ProviderKind;

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
    /// `add_generation_prompt: false`, as vLLM takes it).
    pub prefill: Option<&'a str>,
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
/// # Errors
/// [`RequestError`]: the body is not a JSON object, a field has the wrong shape, or a
/// parameter or the operation is unsupported by the provider.
pub fn translate_request(
    body: &Bytes,
    opts: &RequestOptions<'_>,
) -> Result<UpstreamRequest, RequestError> {
    let _ = (body, opts);
    todo!("sluice-providers: translate_request")
}
