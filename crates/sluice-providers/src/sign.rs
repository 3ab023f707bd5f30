//! Request signing for providers that authenticate each request rather than with a bearer
//! key: AWS Signature Version 4 ([`sigv4`], for Bedrock), and the AWS credentials it signs
//! with, read from the environment and the shared files by pure functions ([`credentials`]).
//!
//! Nothing here reads a clock, a file or the environment: the time, the variables and the
//! files' contents come in as arguments, so the gateway does the I/O and the tests use plain
//! data (AWS's published signing test suite, `tests/fixtures/sigv4/`).

pub mod credentials;
pub mod sigv4;
