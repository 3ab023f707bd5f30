//! Which endpoint a request is for. Model endpoints come from the API table in
//! `sluice-providers` (one table for the gateway, the translators and the error formats).

use http::Method;
pub mod head;
pub(crate) mod targets;

pub use sluice_providers::{Family, Operation};

use crate::error::GatewayError;

/// What a request asks the gateway for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A model call, routed by the body's `model` and proxied upstream.
    Model(Operation),
    /// `GET /v1/models`, answered from the config and the upstreams' own lists.
    Models,
    /// `GET /v1/models/{id}`.
    ModelInfo,
    /// `GET /healthz`. (`/metrics` and `/admin/*` are on the admin listener.)
    Health,
    /// `GET /v1/responses/{id}` (poll or stream) and `POST /v1/responses/{id}/cancel`: a
    /// background response, read from its resumable stream's log.
    StoredResponse,
}

/// The API family whose error format fits a path (unknown paths get OpenAI's format).
pub fn family_of(path: &str) -> Family {
    sluice_providers::api::family_for_path(path)
}

/// The `{id}` of `/v1/models/{id}` (or `/models/{id}`).
pub fn model_id(path: &str) -> Option<&str> {
    let id = path
        .strip_prefix("/v1/models/")
        .or_else(|| path.strip_prefix("/models/"))?;
    (!id.is_empty()).then_some(id)
}

/// Classifies a request.
///
/// # Errors
/// [`GatewayError::NotFound`] or [`GatewayError::MethodNotAllowed`].
pub fn endpoint(method: &Method, path: &str) -> Result<Endpoint, GatewayError> {
    let (ep, expected) = if let Some(op) = sluice_providers::api::operation_for_path(path) {
        (Endpoint::Model(op), op.method())
    } else {
        match path {
            "/v1/models" | "/models" => (Endpoint::Models, Method::GET),
            p if model_id(p).is_some() => (Endpoint::ModelInfo, Method::GET),
            "/healthz" => (Endpoint::Health, Method::GET),
            p if p.starts_with("/v1/responses/") => {
                let method = if p.ends_with("/cancel") {
                    Method::POST
                } else {
                    Method::GET
                };
                (Endpoint::StoredResponse, method)
            }
            _ => return Err(GatewayError::NotFound(path.to_string())),
        }
    };
    if *method != expected {
        return Err(GatewayError::MethodNotAllowed {
            path: path.to_string(),
            expected,
        });
    }
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            endpoint(&Method::POST, "/v1/messages").unwrap(),
            Endpoint::Model(Operation::Messages)
        );
        assert_eq!(
            endpoint(&Method::POST, "/chat/completions").unwrap(),
            Endpoint::Model(Operation::ChatCompletions)
        );
        assert_eq!(
            endpoint(&Method::GET, "/v1/models").unwrap(),
            Endpoint::Models
        );
        assert!(matches!(
            endpoint(&Method::GET, "/v1/chat/completions"),
            Err(GatewayError::MethodNotAllowed { .. })
        ));
        assert!(matches!(
            endpoint(&Method::POST, "/v2/x"),
            Err(GatewayError::NotFound(_))
        ));
        // A background response: polled or streamed with GET, cancelled with POST.
        assert_eq!(
            endpoint(&Method::GET, "/v1/responses/resp_1").unwrap(),
            Endpoint::StoredResponse
        );
        assert_eq!(
            endpoint(&Method::POST, "/v1/responses/resp_1/cancel").unwrap(),
            Endpoint::StoredResponse
        );
        assert!(matches!(
            endpoint(&Method::POST, "/v1/responses/resp_1"),
            Err(GatewayError::MethodNotAllowed { .. })
        ));
        assert_eq!(
            endpoint(&Method::POST, "/v1/responses").unwrap(),
            Endpoint::Model(Operation::Responses)
        );
    }
}
