//! One request, left to right once: endpoint, bounded body, model, route, the key's verdict,
//! the policy's attempts; and its response right to left once: the SSE relay or a bounded
//! non-streaming body. Every error becomes an answer in the client's format.
//!
//! - [`admission`]: endpoint, body, model and route, key, idempotency, limits; local
//!   endpoints (health, `/v1/models` from [`models`]) answered here;
//! - `serve`: the policy's attempts, then the relay for a stream or `whole` for a body;
//! - `reply`: every error response; `body`: the response body type.

mod admission;
mod background;
mod body;
mod cached;
mod models;
mod reply;
mod resume;
mod serve;
mod whole;

pub(crate) use admission::{admission, Admission, EdgeFacts};
pub(crate) use body::GatewayBody;
pub(crate) use reply::error_response;

use body::*;
use reply::*;
use serve::*;
use whole::*;

use crate::clock::now_unix;
use crate::generation::Generation;
use crate::headers::{
    is_event_stream, SERVER_TIMING, X_ACCEL_BUFFERING, X_SLUICE_ATTEMPTS, X_SLUICE_DROPPED_PARAMS,
    X_SLUICE_TIMEOUT, X_SLUICE_TIMING, X_SLUICE_UPSTREAM, X_STAINLESS_TIMEOUT,
};
use crate::policy::{give_up_reply, Reply};
