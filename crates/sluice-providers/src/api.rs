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
    /// Gemini `POST /v1beta/models/{model}:generateContent` (the model is in the path).
    GenerateContent,
    /// Gemini `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`.
    StreamGenerateContent,
}

impl Operation {
    /// Every operation, in table order.
    pub const ALL: [Operation; 8] = [
        Operation::ChatCompletions,
        Operation::Completions,
        Operation::Embeddings,
        Operation::Responses,
        Operation::Messages,
        Operation::CountTokens,
        Operation::GenerateContent,
        Operation::StreamGenerateContent,
    ];

    /// The family whose clients call this operation (their error format).
    pub fn family(self) -> Family {
        match self {
            Operation::Messages | Operation::CountTokens => Family::Anthropic,
            Operation::GenerateContent | Operation::StreamGenerateContent => Family::Gemini,
            _ => Family::OpenAi,
        }
    }

    /// The path below `/v1`, which is also the path appended to the base URL of an upstream
    /// of the same family (`/chat/completions`, `/messages`, ...). Gemini's operations have the
    /// model in their path: theirs is a pattern (see [`gemini_operation_for_path`]).
    pub fn path(self) -> &'static str {
        match self {
            Operation::ChatCompletions => "/chat/completions",
            Operation::Completions => "/completions",
            Operation::Embeddings => "/embeddings",
            Operation::Responses => "/responses",
            Operation::Messages => "/messages",
            Operation::CountTokens => "/messages/count_tokens",
            Operation::GenerateContent => "/models/{model}:generateContent",
            Operation::StreamGenerateContent => "/models/{model}:streamGenerateContent",
        }
    }

    /// Gemini's operations say in their path whether they stream (the body has no
    /// `stream`); `None` for the others.
    pub fn streams_by_path(self) -> Option<bool> {
        match self {
            Operation::GenerateContent => Some(false),
            Operation::StreamGenerateContent => Some(true),
            _ => None,
        }
    }

    /// Whether the operation is a conversation turn, which every provider's chat method can
    /// answer once translated: chat completions, responses, messages, Gemini's
    /// `generateContent` and `streamGenerateContent`.
    pub fn is_conversation(self) -> bool {
        matches!(
            self,
            Operation::ChatCompletions
                | Operation::Responses
                | Operation::Messages
                | Operation::GenerateContent
                | Operation::StreamGenerateContent
        )
    }

    /// The method it takes.
    pub fn method(self) -> Method {
        Method::POST
    }

    /// `"chat"`, `"completions"`, `"embeddings"`, `"responses"`, `"messages"`,
    /// `"count_tokens"`, `"generate_content"`, `"stream_generate_content"`: for metrics and the OpenTelemetry `gen_ai.operation.name`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::ChatCompletions => "chat",
            Operation::Completions => "text_completion",
            Operation::Embeddings => "embeddings",
            Operation::Responses => "responses",
            Operation::Messages => "messages",
            Operation::CountTokens => "count_tokens",
            Operation::GenerateContent => "generate_content",
            Operation::StreamGenerateContent => "stream_generate_content",
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
                | Operation::StreamGenerateContent
        )
    }
}

/// The operation served at `path`, if it is a model endpoint.
///
/// Both `/v1/chat/completions` and `/chat/completions` are recognised: several SDKs and tools
/// send the latter when their base URL already ends in `/v1`.
pub fn operation_for_path(path: &str) -> Option<Operation> {
    // The fixed paths first: they are nearly every request, and Gemini's pattern never
    // matches one of them.
    let below = path.strip_prefix("/v1").unwrap_or(path);
    Operation::ALL
        .into_iter()
        .find(|op| op.path() == below)
        .or_else(|| gemini_operation_for_path(path).map(|(op, _)| op))
}

/// A Gemini-native call and its model: `/v1beta/models/{model}:generateContent` or
/// `:streamGenerateContent` (also below `/v1`, and without the version, as base URLs
/// differ), the model without its `models/` prefix.
pub fn gemini_operation_for_path(path: &str) -> Option<(Operation, &str)> {
    // Every Gemini call has `:method`; no other API's path has a colon. The error path and
    // the router ask this of every request, so the common answer is one byte scan.
    if !path.as_bytes().contains(&b':') {
        return None;
    }
    let below = path
        .strip_prefix("/v1beta")
        .or_else(|| path.strip_prefix("/v1"))
        .unwrap_or(path);
    let rest = below.strip_prefix("/models/")?;
    let (model, method) = rest.rsplit_once(':')?;
    if model.is_empty() || model.contains('/') {
        return None;
    }
    let op = match method {
        "generateContent" => Operation::GenerateContent,
        "streamGenerateContent" => Operation::StreamGenerateContent,
        _ => return None,
    };
    Some((op, model))
}

/// The family whose error format fits a path, for errors about requests that matched no
/// endpoint (unknown paths get OpenAI's format, the most common client).
pub fn family_for_path(path: &str) -> Family {
    let below = path.strip_prefix("/v1").unwrap_or(path);
    if below.starts_with("/messages") {
        Family::Anthropic
    } else if path.starts_with("/v1beta/") || gemini_operation_for_path(path).is_some() {
        Family::Gemini
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
        assert_eq!(
            gemini_operation_for_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some((Operation::StreamGenerateContent, "gemini-2.5-flash"))
        );
        assert_eq!(
            operation_for_path("/v1beta/models/m:generateContent"),
            Some(Operation::GenerateContent)
        );
        assert_eq!(operation_for_path("/v1beta/models/m:countTokens"), None);
        assert_eq!(operation_for_path("/v1beta/models/:generateContent"), None);
        assert_eq!(
            family_for_path("/v1beta/models/m:embedContent"),
            Family::Gemini
        );
    }
}
