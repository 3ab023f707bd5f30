//! Upstream providers: the wire format an upstream speaks, where its endpoints are below its
//! base URL, and how it wants to be authenticated.

use http::header::{HeaderName, HeaderValue};

use crate::api::{Family, Operation};

/// The wire format of an upstream (`upstream[].provider` in the gateway's config).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI, and every OpenAI-compatible server (vLLM, Ollama, llama.cpp, Groq, Together):
    /// `Authorization: Bearer`, paths `/chat/completions`, `/embeddings`, ... below the base
    /// URL (which ends in `/v1`).
    OpenAi,
    /// Azure OpenAI: the base URL is `https://{resource}.openai.azure.com/openai`, requests go
    /// to `/deployments/{deployment}/chat/completions?api-version={api_version}` where the
    /// deployment is the upstream model name; auth is the `api-key` header.
    Azure {
        /// The `api-version` query parameter, e.g. `2024-10-21`.
        api_version: String,
    },
    /// Anthropic Messages: `x-api-key`, `anthropic-version`, path `/messages` below a base URL
    /// ending in `/v1`.
    Anthropic {
        /// The `anthropic-version` header sent when the client did not send one. Default
        /// `2023-06-01`.
        version: String,
    },
    /// Google Gemini (Developer API): `x-goog-api-key`, paths
    /// `/models/{model}:generateContent` and `/models/{model}:streamGenerateContent?alt=sse`
    /// below a base URL ending in `/v1beta`.
    Gemini,
}

impl ProviderKind {
    /// The family of the upstream's wire format.
    pub fn family(&self) -> Family {
        match self {
            ProviderKind::OpenAi | ProviderKind::Azure { .. } => Family::OpenAi,
            ProviderKind::Anthropic { .. } => Family::Anthropic,
            ProviderKind::Gemini => Family::Gemini,
        }
    }

    /// `"openai"`, `"azure"`, `"anthropic"`, `"gemini"`: for logs, metrics and the
    /// OpenTelemetry `gen_ai.provider.name`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Azure { .. } => "azure",
            ProviderKind::Anthropic { .. } => "anthropic",
            ProviderKind::Gemini => "gemini",
        }
    }

    /// The path and query, below the upstream's base URL, that serves `op` for `model`
    /// (`stream` picks Gemini's streaming method). `None` when this provider has no such
    /// endpoint (e.g. embeddings on Anthropic).
    pub fn path(&self, op: Operation, model: &str, stream: bool) -> Option<String> {
        let _ = (op, model, stream);
        todo!("sluice-providers: provider paths")
    }

    /// The headers that carry `secret` to this provider (`Authorization: Bearer`, `api-key`,
    /// `x-api-key`, `x-goog-api-key`). Marked sensitive so they never reach logs.
    pub fn auth_headers(&self, secret: &str) -> Vec<(HeaderName, HeaderValue)> {
        let _ = secret;
        todo!("sluice-providers: auth headers")
    }

    /// Headers this provider requires on every request that the client may not have sent
    /// (e.g. `anthropic-version`); the gateway adds each one unless the client sent it.
    pub fn required_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        todo!("sluice-providers: required headers")
    }
}
