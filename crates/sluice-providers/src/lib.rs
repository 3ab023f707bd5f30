//! Provider adapters, sans-I/O: everything Sluice knows about vendor wire formats, and nothing
//! about sockets, pools or time.
//!
//! The gateway asks this crate four questions and does all I/O itself:
//! - *Which API is this?* [`api`]: the table of client-facing endpoints ([`Operation`]) and
//!   their families ([`Family`]: the error format a client speaks).
//! - *What do I send upstream?* [`request::translate_request`]: the client's body in the
//!   upstream provider's format (or the same bytes when nothing needs to change), the path
//!   below the upstream's base URL, and the parameters dropped or refused.
//! - *What does the client get back?* [`response::translate_response`] for whole bodies, and a
//!   [`stream::StreamTranslator`] for SSE streams (upstream events in, client events out,
//!   incrementally); [`stream::classify_event`] tells the relay which passthrough events are
//!   content (the commit point), errors or usage without translating them.
//! - *What went wrong?* [`error::classify`] turns an upstream error response (or an error event
//!   inside a stream) into a typed [`error::ErrorClass`] the policy stage decides retries and
//!   fallbacks by; [`error::error_body`] and [`error::sse_error_event`] speak the client's error
//!   format.
//!
//! Every client API may reach every provider: OpenAI chat and Responses, Anthropic messages and
//! Gemini-native `generateContent` requests are read into one neutral conversation (the
//! `chat` module) and written in the upstream's format; answers and streams come back through
//! one writer per client API (`stream::client`).
//!
//! Usage (tokens) is normalised into one [`usage::Usage`] record whatever the provider.
//!
//! AWS Bedrock speaks none of the SSE families, so it has its own entry points in the same
//! order: [`bedrock::translate_request`] (Converse), [`sign::sigv4::sign`] with credentials
//! from [`sign::credentials::resolve`], [`bedrock::translate_response`], a
//! [`bedrock::BedrockStream`] over the AWS event-stream framing ([`eventstream`]) for streams,
//! and [`bedrock::classify`] for errors.
//!
//! Google Vertex AI and Azure OpenAI with Entra ID authenticate with short-lived OAuth tokens:
//! [`sign::google`] (a service-account key's signed JWT) and [`sign::entra`] (client
//! credentials) build the token requests, [`sign::oauth`] reads the answers, and
//! [`sign::refresh`] is the schedule the gateway's refresh task follows. [`vertex`] has the
//! Vertex paths and the Anthropic-on-Vertex body rewrite; the bodies are otherwise Gemini's
//! and Anthropic's own.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod api;
pub mod bedrock;
pub mod cache_key;
mod chat;
pub mod error;
pub mod eventstream;
pub mod finish;
pub mod json_count;
pub mod prompt_cache;
pub mod provider;
pub mod reasoning;
pub mod request;
pub mod response;
pub mod shape;
pub mod sign;
pub mod stream;
pub mod usage;
pub mod vertex;

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use api::{Family, Operation};
pub use error::{ErrorClass, ProviderError};
pub use finish::Finish;
pub use provider::ProviderKind;
pub use usage::Usage;
