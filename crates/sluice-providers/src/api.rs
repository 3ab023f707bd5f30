//! The API table: which client-facing endpoint is which operation, and which family (error
//! format, SSE conventions) speaks there. One table, used by the gateway's router and the
//! translators.

use http::Method;

/// An API family: how its clients expect errors, streams and usage to look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// OpenAI and every OpenAI-compatible server (vLLM, Ollama, llama.cpp, Groq, Azure OpenAI).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini (Developer API).
    Gemini,
}

impl Family {
    /// `"openai"`, `"anthropic"` or `"gemini"`: for metrics, logs and trace attributes.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::OpenAi => "openai",
            Family::Anthropic => "anthropic",
            Family::Gemini => "gemini",
        }
    }
}

/// A client-facing operation: what a request to one of the gateway's model endpoints asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// OpenAI `POST /v1/chat/completions`.
    ChatCompletions,
    /// OpenAI `POST /v1/completions` (legacy; forwarded only to OpenAI-shaped upstreams).
    Completions,
    /// OpenAI `POST /v1/embeddings`.
    Embeddings,
    /// OpenAI `POST /v1/responses` (passed to OpenAI-shaped upstreams, translated for
    /// Anthropic and Gemini ones).
    Responses,
    /// Anthropic `POST /v1/messages`.
    Messages,
    /// Anthropic `POST /v1/messages/count_tokens`.
    CountTokens,
}

impl Operation {
    /// Every operation, in table order.
    pub const ALL: [Operation; 6] = [
        Operation::ChatCompletions,
        Operation::Completions,
        Operation::Embeddings,
        Operation::Responses,
        Operation::Messages,
        Operation::CountTokens,
    ];

    /// The family whose clients call this operation (their error format).
    pub fn family(self) -> Family {
        match self {
            Operation::Messages | Operation::CountTokens => Family::Anthropic,
            _ => Family::OpenAi,
        }
    }

    /// The path below `/v1`, which is also the path appended to the base URL of an upstream
    /// of the same family (`/chat/completions`, `/messages`, ...).
    pub fn path(self) -> &'static str {
        match self {
            Operation::ChatCompletions => "/chat/completions",
            Operation::Completions => "/completions",
            Operation::Embeddings => "/embeddings",
            Operation::Responses => "/responses",
            Operation::Messages => "/messages",
            Operation::CountTokens => "/messages/count_tokens",
        }
    }

    /// The method it takes.
    pub fn method(self) -> Method {
        Method::POST
    }

    /// `"chat"`, `"completions"`, `"embeddings"`, `"responses"`, `"messages"`,
    /// `"count_tokens"`: for metrics and the OpenTelemetry `gen_ai.operation.name`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::ChatCompletions => "chat",
            Operation::Completions => "text_completion",
            Operation::Embeddings => "embeddings",
            Operation::Responses => "responses",
            Operation::Messages => "messages",
            Operation::CountTokens => "count_tokens",
        }
    }

    /// Whether a request to this operation can ask for an SSE stream (`"stream": true`).
    pub fn can_stream(self) -> bool {
        matches!(
            self,
            Operation::ChatCompletions
                | Operation::Completions
                | Operation::Responses
                | Operation::Messages
        )
    }
}

/// The operation served at `path`, if it is a model endpoint.
///
/// Both `/v1/chat/completions` and `/chat/completions` are recognised: several SDKs and tools
/// send the latter when their base URL already ends in `/v1`.
pub fn operation_for_path(path: &str) -> Option<Operation> {
    let below = path.strip_prefix("/v1").unwrap_or(path);
    Operation::ALL.into_iter().find(|op| op.path() == below)
}

/// The family whose error format fits a path, for errors about requests that matched no
/// endpoint (unknown paths get OpenAI's format, the most common client).
pub fn family_for_path(path: &str) -> Family {
    let below = path.strip_prefix("/v1").unwrap_or(path);
    if below.starts_with("/messages") {
        Family::Anthropic
    } else {
        Family::OpenAi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        assert_eq!(
            operation_for_path("/v1/chat/completions"),
            Some(Operation::ChatCompletions)
        );
        assert_eq!(
            operation_for_path("/chat/completions"),
            Some(Operation::ChatCompletions)
        );
        assert_eq!(
            operation_for_path("/v1/messages/count_tokens"),
            Some(Operation::CountTokens)
        );
        assert_eq!(
            operation_for_path("/v1/messages"),
            Some(Operation::Messages)
        );
        assert_eq!(operation_for_path("/v2/x"), None);
        assert_eq!(family_for_path("/v1/messages/batches"), Family::Anthropic);
        assert_eq!(Operation::CountTokens.family(), Family::Anthropic);
    }
}
