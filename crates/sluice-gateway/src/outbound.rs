//! The request as one target's upstream gets it: translated by `sluice-providers` into the
//! upstream's wire format (the client's own bytes when nothing changes), under its base URL,
//! with its credentials and required headers, and the session header copied into
//! the body if configured. Cloud upstreams (`cloud`): Bedrock's Converse requests signed
//! with SigV4, Vertex AI's paths and body, and the bearer token of Vertex and Entra ID.

mod cloud;

use std::borrow::Cow;
use std::cell::RefCell;

use bytes::Bytes;
use http::header::HeaderValue;
use http::uri::InvalidUri;
use http::{Request, Uri};
use sluice_providers::request::{translate_request_known, KnownFields, RequestOptions};
use sluice_providers::{Family, Operation, ProviderKind};

use crate::config::UpstreamId;
use crate::ctx::RequestCtx;
use crate::error::GatewayError;
use crate::generation::Generation;
use crate::headers;

/// How to build one attempt's request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BuildOptions<'a> {
    /// The target's model name, replacing the client's.
    pub(crate) model: Option<&'a str>,
    /// Drop parameters the provider cannot honour instead of refusing the request.
    pub(crate) drop_unsupported: bool,
    /// Continuation: the assistant text the client already has.
    pub(crate) prefill: Option<&'a str>,
    /// The target's own credential, replacing the upstream's `auth`.
    pub(crate) auth: Option<&'a crate::config::UpstreamAuth>,
    /// The route's effort levels as thinking budgets (read only when translating).
    pub(crate) reasoning_budgets: &'a sluice_providers::reasoning::BudgetTable,
    /// The upstream's access token (`Authorization: Bearer`), for Vertex AI and Entra ID.
    pub(crate) bearer: Option<&'a HeaderValue>,
    /// Add prompt-cache breakpoints to a request that marks none (`route.cache_breakpoints`).
    pub(crate) cache_breakpoints: bool,
}

/// What was sent, for reading the answer.
#[derive(Clone, Debug)]
pub(crate) struct Built {
    /// The upstream's wire format.
    pub(crate) provider: ProviderKind,
    /// The model name sent upstream (what answered).
    pub(crate) model: String,
    /// The body was translated from the client's family.
    pub(crate) translated: bool,
    /// The client asked for usage in its stream (else the usage chunk the gateway asked for
    /// is removed).
    pub(crate) client_wants_usage: bool,
    /// Parameters dropped under `drop_unsupported_params`.
    pub(crate) dropped: Vec<String>,
    /// Sent to Bedrock (Converse): the answer is Converse JSON or an AWS event stream, and
    /// `provider` is the client's own family (what the answer is translated into).
    pub(crate) bedrock: bool,
    /// Sent to Bedrock's InvokeModel with the Anthropic client's own body: the answer is
    /// Anthropic's, a stream Anthropic events wrapped in AWS event-stream chunks.
    pub(crate) invoke: bool,
}

/// What an upstream without `provider` speaks: whatever the client speaks.
fn passthrough(f: Family) -> &'static ProviderKind {
    static ANTHROPIC: std::sync::LazyLock<ProviderKind> =
        std::sync::LazyLock::new(ProviderKind::anthropic);
    match f {
        Family::OpenAi => &ProviderKind::OpenAi,
        Family::Anthropic => &ANTHROPIC,
        Family::Gemini => &ProviderKind::Gemini,
    }
}

/// The provider of upstream `i` for a client calling `op`.
pub(crate) fn provider_of(state: &Generation, i: UpstreamId, op: Operation) -> &ProviderKind {
    match &state.config.upstream(i).provider {
        Some(p) => p,
        None => passthrough(op.family()),
    }
}

/// Builds the request for upstream `upstream`.
///
/// # Errors
/// [`GatewayError::Translate`] when the provider cannot take the request (an unsupported
/// parameter or operation, a malformed body); [`GatewayError::BadJson`] when the session
/// header cannot be put into the body.
pub(crate) fn upstream_request(
    state: &Generation,
    ctx: &RequestCtx,
    upstream: UpstreamId,
    opts: BuildOptions<'_>,
) -> Result<(Request<Bytes>, Built), GatewayError> {
    let ucfg = &state.config.upstream(upstream);
    let vertex = match &ucfg.cloud {
        Some(crate::config::CloudAuth::Bedrock(b)) => {
            return cloud::bedrock_request(ucfg, b, ctx, opts)
        }
        Some(crate::config::CloudAuth::Vertex(v)) => Some(v),
        _ => None,
    };
    let provider = match vertex {
        Some(_) => cloud::vertex_provider(opts.model.unwrap_or(&ctx.known.model)),
        None => provider_of(state, upstream, ctx.op),
    };
    let known = KnownFields {
        model: Some(&ctx.known.model),
        stream: Some(ctx.stream),
        include_usage: ctx.known.include_usage,
    };
    let up = translate_request_known(
        &ctx.body,
        &RequestOptions {
            op: ctx.op,
            provider,
            model: opts.model,
            drop_unsupported: opts.drop_unsupported,
            // Usage for every stream: OpenAI-shaped upstreams report it only when asked.
            stream_usage: ctx.stream && provider.family() == Family::OpenAi,
            prefill: opts.prefill,
            reasoning_budgets: Some(opts.reasoning_budgets),
        },
        &known,
    )
    .map_err(GatewayError::Translate)?;
    let up = match vertex {
        Some(v) => cloud::vertex_request(up, ctx.op, provider, v)?,
        None => up,
    };
    let parts = &ctx.parts;
    let mut body = up.body;
    // The client's own body when nothing else changed: the answer is still read as the
    // client's family (`translated` stays), only the request gains the marks.
    if opts.cache_breakpoints && provider.family() == Family::Anthropic && generates(ctx.op) {
        if let Some(marked) = sluice_providers::prompt_cache::anthropic_breakpoints(&body) {
            body = marked;
        }
    }
    if let Some(rule) = ucfg
        .session_header_to_body
        .as_ref()
        .filter(|rule| parts.headers.contains_key(&rule.header))
    {
        let bad = |e: String| GatewayError::BadJson(e);
        let mut v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?;
        headers::session_header_to_body(rule, &parts.headers, &mut v)
            .map_err(|e| bad(e.to_string()))?;
        body = Bytes::from(v.to_string());
    }
    let mut req = Request::new(body);
    *req.method_mut() = parts.method.clone();
    let path: Cow<'_, str> = match parts.uri.query() {
        // The client's own query goes along only when nothing was translated (and never to
        // a cloud's own paths).
        Some(q) if !up.translated && ucfg.cloud.is_none() => {
            let sep = if up.path.contains('?') { '&' } else { '?' };
            Cow::Owned(format!("{}{sep}{q}", up.path))
        }
        _ => Cow::Borrowed(up.path.as_str()),
    };
    *req.uri_mut() = path_uri(&path).map_err(|_| {
        GatewayError::BadJson(format!("the model name makes an invalid path: {path}"))
    })?;
    *req.headers_mut() = headers::upstream_request_headers(
        &parts.headers,
        headers::Target {
            auth: opts.auth.unwrap_or(&ucfg.auth),
            provider,
            translated: up.translated,
        },
        &ctx.request_id,
    );
    if let Some(token) = opts.bearer {
        cloud::bearer_headers(req.headers_mut(), token, vertex.is_some());
    }
    if up.stream || up.translated {
        // The relay parses a stream, and a translated body is read: either must arrive as
        // sent, not compressed.
        headers::request_identity(req.headers_mut());
    }
    // The body is final: its length now, while the map has room (the upstream client would
    // otherwise add it to its copy, growing that).
    let len = HeaderValue::from(req.body().len());
    req.headers_mut().insert(http::header::CONTENT_LENGTH, len);
    let built = Built {
        provider: provider.clone(),
        model: up.model,
        translated: up.translated,
        client_wants_usage: up.client_wants_usage,
        dropped: up.dropped,
        bedrock: false,
        invoke: false,
    };
    Ok((req, built))
}

/// Whether `op` asks for a generation, the requests a prompt cache serves (not token
/// counts, embeddings or legacy completions).
pub(crate) fn generates(op: Operation) -> bool {
    matches!(
        op,
        Operation::ChatCompletions
            | Operation::Responses
            | Operation::Messages
            | Operation::GenerateContent
            | Operation::StreamGenerateContent
    )
}

/// `path` as a URI. Parsing one cost ~0.4 K instructions a request (a copy and a check of
/// every byte), and a gateway sends the same path over and over (one per endpoint, and per
/// model where the path names it): each thread keeps the last one it parsed, keyed by its
/// text, so a hit is the same URI a parse would give whatever the config says.
fn path_uri(path: &str) -> Result<Uri, InvalidUri> {
    thread_local! {
        static LAST: RefCell<Option<(Box<str>, Uri)>> = const { RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((_, uri)) = last.as_ref().filter(|(text, _)| **text == *path) {
            return Ok(uri.clone());
        }
        let uri: Uri = path.parse()?;
        *last = Some((path.into(), uri.clone()));
        Ok(uri)
    })
}

/// `x-sluice-dropped-params: n, logprobs` when parameters were dropped.
pub(crate) fn dropped_header(built: &Built) -> Option<HeaderValue> {
    if built.dropped.is_empty() {
        return None;
    }
    HeaderValue::from_str(&built.dropped.join(", ")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_path_is_the_parsed_one_and_changes_with_the_text() {
        for _ in 0..2 {
            // Again and again, alternating: each answer is the parse of its own text.
            for p in [
                "/v1/chat/completions",
                "/v1/chat/completions",
                "/v1beta/models/gemini-2.5-flash:generateContent?alt=sse",
                "/v1/chat/completions?x=1",
            ] {
                let uri = path_uri(p).unwrap();
                assert_eq!(uri, p.parse::<Uri>().unwrap());
                assert_eq!(uri.to_string(), p);
            }
        }
        assert!(path_uri("/bad path").is_err());
        // A failed parse keeps nothing: the last good path is still right.
        assert_eq!(path_uri("/v1/embeddings").unwrap(), "/v1/embeddings");
        assert!(path_uri("/v1/embeddings\n").is_err());
        assert_eq!(path_uri("/v1/embeddings").unwrap(), "/v1/embeddings");
    }
}
