//! The request head's way to a route, as one function without I/O: method and path to an
//! endpoint (`route::endpoint`), body to the routing fields (`probe::routing_fields`), model
//! to its route (`Config::route_index`). The request path calls the same three functions and
//! nothing else decides; this composition is what the fuzz target
//! (`fuzz/fuzz_targets/route_head.rs`) and its `cargo test` twin feed with arbitrary input.

use http::Method;

use crate::config::Config;
use crate::error::GatewayError;
use crate::route::{self, Endpoint};
use sluice_providers::Operation;

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Routed {
    /// Answered by the gateway itself (models list, health, metrics, admin).
    Local(Endpoint),
    /// A model call.
    Model {
        /// The endpoint.
        endpoint: Endpoint,
        /// The index of the route in [`Config::routes`].
        route: usize,
        /// Whether the body asks for a stream.
        stream: bool,
        /// `max_tokens` (or `max_completion_tokens`, `max_output_tokens`), 0 if absent.
        max_tokens: u64,
    },
}

/// Decides the route of a request.
///
/// # Errors
/// What the client would get: unknown path, wrong method, a body that is not JSON or has no
/// string `model`, a model no route matches.
pub fn route_request(
    config: &Config,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Result<Routed, GatewayError> {
    let endpoint = route::endpoint(method, path)?;
    if !matches!(endpoint, Endpoint::Model(_)) {
        return Ok(Routed::Local(endpoint));
    }
    let probe = crate::probe::routing_fields(body)?;
    // Gemini's model is in the path, as admission reads it.
    let gemini = matches!(
        endpoint,
        Endpoint::Model(Operation::GenerateContent | Operation::StreamGenerateContent)
    );
    let model = gemini
        .then(|| sluice_providers::api::gemini_operation_for_path(path))
        .flatten()
        .map(|(_, m)| m)
        .or(probe.model.as_deref())
        .ok_or(GatewayError::MissingModel)?;
    let route = config.route_index(model).ok_or_else(|| {
        GatewayError::UnknownModel(sluice_telemetry::untrusted::prefix(model, 1024).to_string())
    })?;
    Ok(Routed::Model {
        endpoint,
        route,
        stream: match endpoint {
            Endpoint::Model(op) => op.streams_by_path(),
            _ => None,
        }
        .unwrap_or(probe.stream == Some(true)),
        max_tokens: probe.max_tokens_any(),
    })
}
