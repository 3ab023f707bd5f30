//! What every attempt of one request sends: the client's request, read once at admission,
//! and what admission learned of it. Built by the request path, read by the policy and the
//! outbound stage.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderValue;
use sluice_providers::Operation;
use tokio::time::Instant;

use crate::body_budget::BodyLease;

/// What every attempt of one request sends (the client's request, read once).
pub(crate) struct RequestCtx {
    pub(crate) parts: http::request::Parts,
    pub(crate) body: Bytes,
    pub(crate) request_id: HeaderValue,
    /// The client's operation (its endpoint and API family).
    pub(crate) op: Operation,
    /// When the request arrived.
    pub(crate) started: Instant,
    /// The client asked for a stream.
    pub(crate) stream: bool,
    /// The largest output the client asked for (`max_tokens` and its aliases), 0 if none.
    pub(crate) max_tokens: u64,
    /// May be sent again after a maybe-processed failure.
    pub(crate) idempotent: bool,
    /// Body fields read at admission, handed to the request builder.
    pub(crate) known: Known,
    /// The request's memory charge (a non-streaming answer read whole is charged to it).
    pub(crate) lease: Arc<BodyLease>,
    /// The guardrails its answer passes: the route's, then its key's (indexes into the
    /// config's `guardrails`). Empty (no allocation) on a route and key without any.
    pub(crate) guardrails: Vec<usize>,
}

/// What admission read from the body besides routing, so that building a same-family
/// request does not scan the body again.
pub(crate) struct Known {
    /// `model`, whole.
    pub(crate) model: String,
    /// `stream_options.include_usage`.
    pub(crate) include_usage: Option<bool>,
}
