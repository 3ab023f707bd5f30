//! Upstream providers: the wire format an upstream speaks, where its endpoints are below its
//! base URL, and how it wants to be authenticated.

use http::header::{HeaderName, HeaderValue, InvalidHeaderValue};

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

    /// Whether this provider can serve a client's `op` (translated where the families
    /// differ): OpenAI-shaped upstreams serve every operation but count_tokens; Anthropic
    /// and Gemini serve chat completions, messages, responses, count_tokens and Gemini's
    /// generateContent.
    pub fn serves(&self, op: Operation) -> bool {
        match self.family() {
            Family::OpenAi => op != Operation::CountTokens,
            Family::Anthropic | Family::Gemini => matches!(
                op,
                Operation::ChatCompletions
                    | Operation::Messages
                    | Operation::Responses
                    | Operation::CountTokens
                    | Operation::GenerateContent
                    | Operation::StreamGenerateContent
            ),
        }
    }

    /// The path and query, below the upstream's base URL, that serves `op` for `model`
    /// (`stream` picks Gemini's streaming method). `None` when this provider has no such
    /// endpoint (e.g. embeddings on Anthropic). A client's operation of another family is
    /// served by this provider's equivalent (`/v1/messages` on an OpenAI upstream:
    /// `/chat/completions`). The model is percent-encoded where it is part of the path.
    pub fn path(&self, op: Operation, model: &str, stream: bool) -> Option<String> {
        if !self.serves(op) {
            return None;
        }
        let chat = matches!(
            op,
            Operation::ChatCompletions
                | Operation::Messages
                | Operation::GenerateContent
                | Operation::StreamGenerateContent
        );
        Some(match self {
            ProviderKind::OpenAi => {
                if chat {
                    "/chat/completions".to_string()
                } else {
                    op.path().to_string()
                }
            }
            ProviderKind::Azure { api_version } => {
                let version = PathSegment(api_version);
                match op {
                    // The Responses API is not per deployment: the model is in the body.
                    Operation::Responses => format!("/responses?api-version={version}"),
                    _ => {
                        let below = if chat { "/chat/completions" } else { op.path() };
                        format!(
                            "/deployments/{}{below}?api-version={version}",
                            PathSegment(model)
                        )
                    }
                }
            }
            ProviderKind::Anthropic { .. } => {
                if op == Operation::CountTokens {
                    "/messages/count_tokens".to_string()
                } else {
                    "/messages".to_string()
                }
            }
            ProviderKind::Gemini => {
                let model = PathSegment(model.strip_prefix("models/").unwrap_or(model));
                match (op, stream) {
                    (Operation::CountTokens, _) => format!("/models/{model}:countTokens"),
                    (_, true) => format!("/models/{model}:streamGenerateContent?alt=sse"),
                    (_, false) => format!("/models/{model}:generateContent"),
                }
            }
        })
    }

    /// The headers that carry `secret` to this provider (`Authorization: Bearer`, `api-key`,
    /// `x-api-key`, `x-goog-api-key`). Marked sensitive so they never reach logs.
    ///
    /// # Errors
    /// The secret holds a byte a header value cannot (a control character such as a
    /// newline); the error does not contain the secret.
    pub fn auth_headers(
        &self,
        secret: &str,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, InvalidHeaderValue> {
        let (name, value) = match self {
            ProviderKind::OpenAi => (
                http::header::AUTHORIZATION,
                HeaderValue::try_from(format!("Bearer {secret}"))?,
            ),
            ProviderKind::Azure { .. } => (
                HeaderName::from_static("api-key"),
                HeaderValue::try_from(secret)?,
            ),
            ProviderKind::Anthropic { .. } => (
                HeaderName::from_static("x-api-key"),
                HeaderValue::try_from(secret)?,
            ),
            ProviderKind::Gemini => (
                HeaderName::from_static("x-goog-api-key"),
                HeaderValue::try_from(secret)?,
            ),
        };
        let mut value = value;
        value.set_sensitive(true);
        Ok(vec![(name, value)])
    }

    /// Headers this provider requires on every request that the client may not have sent
    /// (e.g. `anthropic-version`); the gateway adds each one unless the client sent it.
    /// A configured version that is not a valid header value is left out (config checking
    /// refuses it first).
    pub fn required_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        match self {
            ProviderKind::Anthropic { version } => HeaderValue::try_from(version.as_str())
                .map(|v| vec![(HeaderName::from_static("anthropic-version"), v)])
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

impl ProviderKind {
    /// Anthropic with the `anthropic-version` every current SDK sends.
    pub fn anthropic() -> ProviderKind {
        ProviderKind::Anthropic {
            version: DEFAULT_ANTHROPIC_VERSION.to_string(),
        }
    }
}

/// The `anthropic-version` sent when the config names none.
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// Percent-encodes everything but RFC 3986 unreserved characters, so a model name cannot
/// add path segments or a query (`../`, `?`, `#`).
pub(crate) struct PathSegment<'a>(pub(crate) &'a str);

impl std::fmt::Display for PathSegment<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        for b in self.0.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                f.write_char(char::from(b))?;
            } else {
                write!(f, "%{b:02X}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn azure() -> ProviderKind {
        ProviderKind::Azure {
            api_version: "2024-10-21".into(),
        }
    }

    #[test]
    fn paths() {
        use Operation::*;
        let o = ProviderKind::OpenAi;
        assert_eq!(
            o.path(ChatCompletions, "m", true).unwrap(),
            "/chat/completions"
        );
        assert_eq!(o.path(Messages, "m", false).unwrap(), "/chat/completions");
        assert_eq!(o.path(Embeddings, "m", false).unwrap(), "/embeddings");
        assert_eq!(o.path(Responses, "m", false).unwrap(), "/responses");
        assert_eq!(o.path(CountTokens, "m", false), None);

        let a = azure();
        assert_eq!(
            a.path(ChatCompletions, "gpt4o-prod", true).unwrap(),
            "/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(
            a.path(Embeddings, "emb", false).unwrap(),
            "/deployments/emb/embeddings?api-version=2024-10-21"
        );
        assert_eq!(
            a.path(Responses, "x", false).unwrap(),
            "/responses?api-version=2024-10-21"
        );

        let c = ProviderKind::anthropic();
        assert_eq!(c.path(ChatCompletions, "m", true).unwrap(), "/messages");
        assert_eq!(
            c.path(CountTokens, "m", false).unwrap(),
            "/messages/count_tokens"
        );
        assert_eq!(c.path(Embeddings, "m", false), None);
        // The Responses API is translated to Messages.
        assert_eq!(c.path(Responses, "m", true).unwrap(), "/messages");

        let g = ProviderKind::Gemini;
        assert_eq!(
            g.path(Responses, "gemini-2.5-pro", true).unwrap(),
            "/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            g.path(ChatCompletions, "gemini-2.0-flash", false).unwrap(),
            "/models/gemini-2.0-flash:generateContent"
        );
        assert_eq!(
            g.path(Messages, "models/gemini-2.0-flash", true).unwrap(),
            "/models/gemini-2.0-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            g.path(CountTokens, "gemini-2.0-flash", false).unwrap(),
            "/models/gemini-2.0-flash:countTokens"
        );
        assert_eq!(g.path(Completions, "m", false), None);
    }

    #[test]
    fn model_names_cannot_escape_the_path() {
        let g = ProviderKind::Gemini;
        assert_eq!(
            g.path(Operation::Messages, "../x?key=1#", false).unwrap(),
            "/models/..%2Fx%3Fkey%3D1%23:generateContent"
        );
    }

    #[test]
    fn auth_is_sensitive() {
        for (p, name, value) in [
            (ProviderKind::OpenAi, "authorization", "Bearer sk-1"),
            (azure(), "api-key", "sk-1"),
            (ProviderKind::anthropic(), "x-api-key", "sk-1"),
            (ProviderKind::Gemini, "x-goog-api-key", "sk-1"),
        ] {
            let h = p.auth_headers("sk-1").unwrap();
            assert_eq!(h.len(), 1);
            assert_eq!(h[0].0.as_str(), name);
            assert_eq!(h[0].1, value);
            assert!(h[0].1.is_sensitive());
        }
        assert!(ProviderKind::OpenAi.auth_headers("a\nb").is_err());
        assert!(ProviderKind::Gemini.auth_headers("bad\u{0}").is_err());
        assert!(ProviderKind::Anthropic {
            version: "v".into()
        }
        .auth_headers("bad\r\nx-evil: 1")
        .is_err());
    }

    #[test]
    fn anthropic_version_is_required() {
        let h = ProviderKind::anthropic().required_headers();
        assert_eq!(h[0].0.as_str(), "anthropic-version");
        assert_eq!(h[0].1, "2023-06-01");
        assert!(ProviderKind::OpenAi.required_headers().is_empty());
    }
}
