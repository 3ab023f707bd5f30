//! Which endpoint a request is for, which API family speaks there, and the upstream path.

use http::Method;

use crate::error::GatewayError;

/// The API family of an endpoint: decides error formats and SSE error events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// OpenAI-style (`/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`,
    /// `/v1/responses`, `/v1/models`).
    OpenAi,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
}

/// What a request asks the gateway for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A model call, routed by the body's `model` and proxied upstream.
    Model {
        /// The API family.
        api: Api,
        /// The path below `/v1`, appended to the upstream's base URL.
        upstream_path: &'static str,
    },
    /// `GET /v1/models`, answered from the config.
    Models,
    /// `GET /healthz`.
    Health,
    /// `GET /metrics`.
    Metrics,
    /// `GET /admin/pools`.
    AdminPools,
}

const MODEL_PATHS: &[(&str, &str, Api)] = &[
    ("/v1/chat/completions", "/chat/completions", Api::OpenAi),
    ("/v1/completions", "/completions", Api::OpenAi),
    ("/v1/embeddings", "/embeddings", Api::OpenAi),
    ("/v1/responses", "/responses", Api::OpenAi),
    ("/v1/messages", "/messages", Api::Anthropic),
];

/// The API family a path speaks, for errors about it (unknown paths get OpenAI's format).
pub fn api_of(path: &str) -> Api {
    if path == "/v1/messages" {
        Api::Anthropic
    } else {
        Api::OpenAi
    }
}

/// Classifies a request.
///
/// # Errors
/// [`GatewayError::NotFound`] or [`GatewayError::MethodNotAllowed`].
pub fn endpoint(method: &Method, path: &str) -> Result<Endpoint, GatewayError> {
    let (ep, expected) =
        if let Some(&(_, up, api)) = MODEL_PATHS.iter().find(|(p, _, _)| *p == path) {
            (
                Endpoint::Model {
                    api,
                    upstream_path: up,
                },
                Method::POST,
            )
        } else {
            match path {
                "/v1/models" => (Endpoint::Models, Method::GET),
                "/healthz" => (Endpoint::Health, Method::GET),
                "/metrics" => (Endpoint::Metrics, Method::GET),
                "/admin/pools" => (Endpoint::AdminPools, Method::GET),
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
            Endpoint::Model {
                api: Api::Anthropic,
                upstream_path: "/messages"
            }
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
    }
}
