//! Non-streaming response translation: the upstream's body in the client's format, and the
//! usage it reports.

use bytes::Bytes;

use crate::api::Operation;
use crate::provider::ProviderKind;
use crate::usage::Usage;

/// How to read one upstream response.
#[derive(Clone, Copy, Debug)]
pub struct ResponseOptions<'a> {
    /// The client's operation.
    pub op: Operation,
    /// The provider that answered.
    pub provider: &'a ProviderKind,
    /// The model name sent upstream (the response names what actually answered).
    pub model: &'a str,
}

/// A translated (or passed-through) response body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientResponse {
    /// The body for the client (the upstream's own bytes when no translation is needed).
    pub body: Bytes,
    /// The usage the response reports, if any.
    pub usage: Option<Usage>,
}

/// Why an upstream's successful response could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    /// Not JSON, or not the shape the provider documents.
    #[error("the upstream's response is not a valid {provider} response: {reason}")]
    Malformed {
        /// The provider.
        provider: &'static str,
        /// What was wrong.
        reason: String,
    },
}

/// Translates a successful (2xx) non-streaming upstream body for the client.
///
/// # Errors
/// [`ResponseError::Malformed`] when a body that must be translated cannot be parsed (a body
/// passed through untouched is never parsed beyond its usage).
pub fn translate_response(
    body: &Bytes,
    opts: &ResponseOptions<'_>,
) -> Result<ClientResponse, ResponseError> {
    let _ = (body, opts);
    todo!("sluice-providers: translate_response")
}
