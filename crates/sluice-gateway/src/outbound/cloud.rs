//! The cloud upstreams' requests: Bedrock's Converse / ConverseStream (translated and signed
//! with SigV4 here, per request: the signature covers the body's hash and the time), Vertex
//! AI's paths and Anthropic body, and the bearer token of Vertex AI and Entra ID. Only a
//! route whose upstream has `cloud` comes here.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request};
use sluice_providers::bedrock::{self, BedrockRequestOptions};
use sluice_providers::prompt_cache;
use sluice_providers::request::UpstreamRequest;
use sluice_providers::sign::sigv4::{self, SignableBody, SignableRequest, SigningParams};
use sluice_providers::vertex::{self, Project, Publisher};
use sluice_providers::{Family, Operation, ProviderKind};

use super::{path_uri, BuildOptions, Built};
use crate::config::{BedrockAuth, UpstreamConfig, VertexAuth};
use crate::ctx::RequestCtx;
use crate::error::GatewayError;
use crate::headers;

/// The request for a Bedrock upstream: the client's body as Converse (ConverseStream for a
/// stream), or an Anthropic client's own body for InvokeModel with `invoke_model`, signed
/// for the upstream's host and region.
///
/// # Errors
/// [`GatewayError::Translate`] for what Converse cannot take; [`GatewayError::UpstreamCredentials`]
/// when the request cannot be signed (no credentials loaded, a credential a header cannot
/// carry).
pub(super) fn bedrock_request(
    ucfg: &UpstreamConfig,
    auth: &BedrockAuth,
    ctx: &RequestCtx,
    opts: BuildOptions<'_>,
) -> Result<(Request<Bytes>, Built), GatewayError> {
    let ropts = BedrockRequestOptions {
        op: ctx.op,
        model: opts.model,
        path_model: Some(&ctx.known.model),
        drop_unsupported: opts.drop_unsupported,
        prefill: opts.prefill,
    };
    // Anthropic clients' own bodies to InvokeModel when asked (every Anthropic field kept);
    // everything else is translated to Converse.
    let invoke = auth.invoke_model && ctx.op == Operation::Messages;
    let mut up = if invoke {
        bedrock::invoke_request(&ctx.body, &ropts)
    } else {
        bedrock::translate_request(&ctx.body, &ropts)
    }
    .map_err(GatewayError::Translate)?;
    // Before signing: the signature covers the body.
    if opts.cache_breakpoints && super::generates(ctx.op) {
        let marked = if invoke {
            prompt_cache::anthropic_breakpoints(&up.body)
        } else {
            prompt_cache::converse_breakpoints(&up.body)
        };
        if let Some(body) = marked {
            up.body = body;
        }
    }
    let credentials_error = |detail: String| GatewayError::UpstreamCredentials {
        upstream: ucfg.name.clone(),
        detail,
    };
    let credentials = auth.credentials.as_ref().ok_or_else(|| {
        credentials_error("the AWS credentials were not loaded (check-config --skip-env)".into())
    })?;
    // What the connection layer sends: `Host` is the base URL's authority, the path is the
    // base URL's path and ours below it.
    let host = ucfg.base_url.authority().map_or("", |a| a.as_str());
    let wire_path = format!("{}{}", ucfg.base_url.path().trim_end_matches('/'), up.path);
    let accept = if up.stream {
        "application/vnd.amazon.eventstream"
    } else {
        "application/json"
    };
    let signature = sigv4::sign(
        &SignableRequest {
            method: "POST",
            uri: &wire_path,
            headers: &[
                ("host", host),
                ("content-type", "application/json"),
                ("accept", accept),
            ],
            body: SignableBody::Bytes(&up.body),
        },
        &SigningParams {
            credentials,
            region: &auth.region,
            service: bedrock::SIGNING_SERVICE,
            time_unix: crate::clock::now_unix(),
            settings: Default::default(),
        },
    )
    .map_err(|e| credentials_error(format!("cannot sign the request: {e}")))?;
    let UpstreamRequest {
        path,
        body,
        model,
        dropped,
        client_wants_usage,
        ..
    } = up;
    let mut req = Request::new(body);
    *req.method_mut() = Method::POST;
    *req.uri_mut() = path_uri(&path).map_err(|_| {
        GatewayError::BadJson(format!("the model name makes an invalid path: {path}"))
    })?;
    // Nothing of the client's headers goes to AWS: its key is not AWS's, and every header
    // Bedrock reads is one we set.
    let h = req.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::ACCEPT, HeaderValue::from_static(accept));
    for (name, value) in signature.headers {
        h.insert(name, value);
    }
    h.insert(headers::REQUEST_ID, ctx.request_id.clone());
    headers::request_identity(h);
    let len = HeaderValue::from(req.body().len());
    req.headers_mut().insert(header::CONTENT_LENGTH, len);
    let built = Built {
        provider: super::passthrough(ctx.op.family()).clone(),
        model,
        translated: !invoke,
        client_wants_usage,
        dropped,
        bedrock: !invoke,
        invoke,
    };
    Ok((req, built))
}

/// The wire format of a model on Vertex AI: Anthropic's for Claude, Gemini's otherwise.
pub(super) fn vertex_provider(model: &str) -> &'static ProviderKind {
    super::passthrough(match Publisher::of_model(model) {
        Publisher::Anthropic => Family::Anthropic,
        Publisher::Google => Family::Gemini,
    })
}

/// A request translated for Gemini or Anthropic, moved to its Vertex AI path (and, for
/// Anthropic, its body: no `model`, `anthropic_version` in it).
///
/// # Errors
/// [`GatewayError::Translate`] for an operation Vertex has no method for.
pub(super) fn vertex_request(
    up: UpstreamRequest,
    op: Operation,
    provider: &ProviderKind,
    auth: &VertexAuth,
) -> Result<UpstreamRequest, GatewayError> {
    let project = Project {
        id: &auth.project,
        location: &auth.location,
    };
    match provider.family() {
        Family::Anthropic => vertex::anthropic_request(up, op, &project),
        _ => vertex::gemini_request(up, op, &project),
    }
    .map_err(GatewayError::Translate)
}

/// The access token in `Authorization`, in place of any key the client or the provider's
/// headers carried; Vertex takes the Anthropic version in the body, not as a header.
pub(super) fn bearer_headers(h: &mut HeaderMap, token: &HeaderValue, vertex: bool) {
    for name in ["x-api-key", "api-key", "x-goog-api-key"] {
        h.remove(name);
    }
    h.insert(header::AUTHORIZATION, token.clone());
    if vertex {
        h.remove("anthropic-version");
    }
}
