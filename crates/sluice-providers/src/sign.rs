//! Request signing and credentials for providers that do not take a static key: AWS Signature
//! Version 4 ([`sigv4`], for Bedrock) with the AWS credentials it signs with ([`credentials`]),
//! and OAuth 2.0 bearer tokens ([`oauth`]) minted from a Google service-account key
//! ([`google`], for Vertex AI) or Entra ID client credentials ([`entra`], for Azure OpenAI),
//! refreshed on one schedule ([`refresh`]).
//!
//! Nothing here reads a clock, a file or the environment, or sends anything: the time, the
//! variables and the files' contents come in as arguments, token requests go out as values
//! ([`oauth::TokenRequest`]) and their answers come back as bytes, so the gateway does the
//! I/O and the tests use plain data (AWS's published signing test suite,
//! `tests/fixtures/sigv4/`; a test service-account key, `tests/fixtures/google/`).

pub mod credentials;
pub mod entra;
pub mod google;
pub mod oauth;
pub mod refresh;
pub mod sigv4;
