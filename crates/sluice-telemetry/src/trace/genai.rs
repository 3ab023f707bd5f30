//! The OpenTelemetry GenAI semantic conventions: operation and provider names, and the usage
//! and model a response reports (`gen_ai.usage.*`, `gen_ai.response.model`).
//!
//! Read only for recorded spans: a request that is not sampled parses nothing.

use serde_json::Value;
use sluice_providers::{Family, Operation};

/// `gen_ai.operation.name` of a client operation.
pub fn operation_name(op: Operation) -> &'static str {
    match op {
        Operation::ChatCompletions
        | Operation::Messages
        | Operation::Responses
        | Operation::GenerateContent
        | Operation::StreamGenerateContent => "chat",
        Operation::Completions => "text_completion",
        Operation::Embeddings => "embeddings",
        // Not a generation; the convention has no name for it, so it is said plainly.
        Operation::CountTokens => "count_tokens",
    }
}

/// `gen_ai.provider.name` of an API family (the well-known values of the convention).
pub fn provider_name(family: Family) -> &'static str {
    match family {
        Family::OpenAi => "openai",
        Family::Anthropic => "anthropic",
        Family::Gemini => "gcp.gemini",
    }
}

/// Tokens and model a response reported; later reports win (streams send running totals).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub response_model: Option<String>,
}

impl Usage {
    /// A whole JSON response body.
    pub fn observe_body(&mut self, body: &[u8]) {
        if let Ok(v) = serde_json::from_slice::<Value>(body) {
            self.observe(&v);
        }
    }

    /// Relayed SSE bytes: the `data:` lines of whole events. Only events that can carry
    /// usage, or the model while it is unknown, are parsed.
    pub fn observe_sse(&mut self, bytes: &[u8]) {
        for line in bytes.split(|&b| b == b'\n') {
            let Some(data) = line.strip_prefix(b"data:") else {
                continue;
            };
            let data = data.trim_ascii();
            let wanted = contains(data, b"sage")
                || (self.response_model.is_none() && contains(data, b"odel"));
            if !wanted || data.first() != Some(&b'{') {
                continue;
            }
            if let Ok(v) = serde_json::from_slice::<Value>(data) {
                self.observe(&v);
            }
        }
    }

    fn observe(&mut self, v: &Value) {
        // OpenAI chat/completions/embeddings; Anthropic message_delta; Responses.
        for u in [
            v.get("usage"),
            v.pointer("/message/usage"),
            v.pointer("/response/usage"),
        ]
        .into_iter()
        .flatten()
        {
            let n = |k: &str| u.get(k).and_then(Value::as_u64);
            if let Some(i) = n("prompt_tokens").or_else(|| n("input_tokens")) {
                self.input_tokens = Some(i);
            }
            if let Some(o) = n("completion_tokens").or_else(|| n("output_tokens")) {
                self.output_tokens = Some(o);
            }
        }
        if let Some(u) = v.get("usageMetadata") {
            let n = |k: &str| u.get(k).and_then(Value::as_u64);
            if let Some(i) = n("promptTokenCount") {
                self.input_tokens = Some(i);
            }
            if let Some(o) = n("candidatesTokenCount") {
                self.output_tokens = Some(o);
            }
        }
        if self.response_model.is_none() {
            let model = [
                v.get("model"),
                v.pointer("/message/model"),
                v.pointer("/response/model"),
                v.get("modelVersion"),
            ]
            .into_iter()
            .flatten()
            .find_map(Value::as_str);
            if let Some(m) = model {
                self.response_model = Some(m.chars().take(200).collect());
            }
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_from_each_family() {
        let mut u = Usage::default();
        u.observe_body(
            br#"{"model":"gpt-4o-2024","usage":{"prompt_tokens":9,"completion_tokens":3}}"#,
        );
        assert_eq!(
            u,
            Usage {
                input_tokens: Some(9),
                output_tokens: Some(3),
                response_model: Some("gpt-4o-2024".into())
            }
        );
        let mut a = Usage::default();
        a.observe_sse(
            b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n\
              event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":40}}\n\n",
        );
        assert_eq!((a.input_tokens, a.output_tokens), (Some(12), Some(40)));
        assert_eq!(a.response_model.as_deref(), Some("claude-x"));
        let mut g = Usage::default();
        g.observe_sse(b"data: {\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":7},\"modelVersion\":\"gemini-2.5\"}\n\n");
        assert_eq!((g.input_tokens, g.output_tokens), (Some(4), Some(7)));
        let mut none = Usage::default();
        none.observe_sse(b"data: [DONE]\n\n: ping\n\n");
        assert_eq!(none, Usage::default());
    }
}
