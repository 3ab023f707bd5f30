//! AWS Bedrock Runtime: `POST /model/{modelId}/converse` (a Converse response),
//! `/converse-stream` (ConverseStream events, sent as `application/vnd.amazon.eventstream`
//! messages by `emit.rs`), and InvokeModel with Anthropic bodies: `/invoke` (an Anthropic
//! message) and `/invoke-with-response-stream` (each Anthropic stream event base64-encoded in
//! a `chunk` event's `{"bytes": …}`).
//!
//! Field names follow botocore's `bedrock-runtime` 2023-09-30 model (`ConverseResponse`,
//! `ConverseStreamOutput`, `TokenUsage`); the event sequence is the one
//! `sluice-providers/tests/fixtures/streams/bedrock_*.json` records: `messageStart`, for a
//! tool call a `contentBlockStart`, `contentBlockDelta`s, `contentBlockStop`, `messageStop`,
//! `metadata` with the usage. Errors are `{"message": …}` with the type in
//! `x-amzn-ErrorType` (`errors.rs`); inside a stream an exception message, named by an
//! `…Exception` event name (`emit.rs` frames those as `:message-type: exception`).

use std::ops::Range;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{json, Value};

use super::{Completion, EventSeq, Finish, SseItem};

/// Top-level Converse request fields (botocore `ConverseRequest`, less the path's
/// `modelId`). Anything else is refused, which catches a translator leaking another API's
/// fields (`model`, `max_tokens`, `stream`) into a Converse body.
const CONVERSE_FIELDS: &[&str] = &[
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "guardrailConfig",
    "additionalModelRequestFields",
    "promptVariables",
    "additionalModelResponseFieldPaths",
    "requestMetadata",
    "performanceConfig",
    "outputConfig",
    "serviceTier",
];

/// The `x-amzn-ErrorType` value Bedrock sends for an exception type.
pub(crate) fn error_type_header(exception: &str) -> String {
    format!("{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/")
}

/// The exception type Bedrock answers a status with (for generic errors: the `status` knob,
/// unknown paths, bad bodies).
pub(crate) fn exception_for_status(status: u16) -> &'static str {
    match status {
        400 | 413 | 422 => "ValidationException",
        401 | 403 => "AccessDeniedException",
        404 | 405 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        _ => "InternalServerException",
    }
}

/// The name an exception has inside a ConverseStream (the union member: lower camel case).
pub(crate) fn stream_exception(exception: &str) -> &'static str {
    match exception {
        "ThrottlingException" | "ServiceQuotaExceededException" => "throttlingException",
        "ServiceUnavailableException" => "serviceUnavailableException",
        "ModelStreamErrorException" | "ModelErrorException" => "modelStreamErrorException",
        "InternalServerException" | "ModelTimeoutException" => "internalServerException",
        _ => "validationException",
    }
}

/// Checks a Converse body; `Err` is a `ValidationException` message.
pub(crate) fn validate_converse(req: &Value) -> Result<(), String> {
    let Some(obj) = req.as_object() else {
        return Err("Malformed input request, please reformat your input and try again.".into());
    };
    if let Some(k) = obj.keys().find(|k| !CONVERSE_FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "Malformed input request: extraneous key [{k}] is not permitted, please reformat \
             your input and try again."
        ));
    }
    let messages = match req.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        _ => {
            return Err(
                "A conversation must start with a user message. Try again with a conversation \
                 that starts with a user message."
                    .into(),
            )
        }
    };
    for (i, m) in messages.iter().enumerate() {
        match m.get("role").and_then(Value::as_str) {
            Some("user" | "assistant") => {}
            _ => {
                return Err(format!(
                    "1 validation error detected: Value at 'messages.{}.member.role' failed to \
                     satisfy constraint: Member must satisfy enum value set: [user, assistant]",
                    i + 1
                ))
            }
        }
        if !m.get("content").is_some_and(Value::is_array) {
            return Err(format!(
                "1 validation error detected: Value at 'messages.{}.member.content' failed to \
                 satisfy constraint: Member must not be null",
                i + 1
            ));
        }
    }
    Ok(())
}

/// Checks an InvokeModel body for an Anthropic model, with Bedrock's messages.
pub(crate) fn validate_invoke(req: &Value) -> Result<(), String> {
    if req.get("model").is_some() {
        return Err(
            "Malformed input request: #: extraneous key [model] is not permitted, \
                    please reformat your input and try again."
                .into(),
        );
    }
    if !req
        .get("anthropic_version")
        .and_then(Value::as_str)
        .is_some_and(|v| v.starts_with("bedrock-"))
    {
        return Err(
            "Malformed input request: #: required key [anthropic_version] not found, \
                    please reformat your input and try again."
                .into(),
        );
    }
    if req.get("max_tokens").and_then(Value::as_u64).is_none() {
        return Err(
            "Malformed input request: #: required key [max_tokens] not found, please \
                    reformat your input and try again."
                .into(),
        );
    }
    Ok(())
}

fn stop_reason(c: &Completion) -> &'static str {
    match c.finish {
        Finish::Stop => "end_turn",
        Finish::StopSequence(_) => "stop_sequence",
        Finish::Length => "max_tokens",
        Finish::Tools => "tool_use",
        Finish::ContentFilter => "content_filtered",
    }
}

/// `inputTokens` excludes the cache reads and writes, `totalTokens` counts them.
fn usage(c: &Completion, input: u32, output: u32) -> Value {
    let mut u = json!({
        "inputTokens": input,
        "outputTokens": output,
        "totalTokens": input + output + c.cache_read + c.cache_write,
    });
    if c.cache_read > 0 || c.cache_write > 0 {
        u["cacheReadInputTokens"] = json!(c.cache_read);
        u["cacheWriteInputTokens"] = json!(c.cache_write);
    }
    u
}

fn tool_use_id(c: &Completion) -> String {
    format!("tooluse_{}", c.id())
}

/// The Converse response.
pub(crate) fn converse_body(c: &Completion) -> Value {
    let content = if c.tools {
        json!([{ "toolUse": {
            "toolUseId": tool_use_id(c), "name": c.tool_name(), "input": c.tool_input(),
        }}])
    } else if c.finish == Finish::ContentFilter && c.n_tokens == 0 {
        json!([])
    } else {
        json!([{ "text": c.text() }])
    };
    json!({
        "output": { "message": { "role": "assistant", "content": content } },
        "stopReason": stop_reason(c),
        "usage": usage(c, c.prompt_tokens, c.output_tokens()),
        "metrics": { "latencyMs": 0 },
    })
}

/// A Converse answer to a filtered prompt: no content, `stopReason: content_filtered`.
pub(crate) fn filtered_body(prompt_tokens: u32) -> Value {
    json!({
        "output": { "message": { "role": "assistant", "content": [] } },
        "stopReason": "content_filtered",
        "usage": json!({ "inputTokens": prompt_tokens, "outputTokens": 0, "totalTokens": prompt_tokens }),
        "metrics": { "latencyMs": 0 },
    })
}

/// The ConverseStream events.
pub(crate) struct ConverseStream {
    pub(crate) c: Completion,
}

impl ConverseStream {
    /// Events before the deltas: `messageStart`, and `contentBlockStart` for a tool call.
    fn head(&self) -> usize {
        1 + usize::from(self.c.tools)
    }

    fn deltas(&self) -> usize {
        if self.c.tools {
            self.c.tool_arg_pieces()
        } else {
            self.c.n_tokens as usize
        }
    }
}

impl EventSeq for ConverseStream {
    fn len(&self) -> usize {
        self.head() + self.deltas() + 3
    }

    fn event(&self, i: usize) -> SseItem {
        let c = &self.c;
        let (head, deltas) = (self.head(), self.deltas());
        let (name, v) = match i {
            0 => ("messageStart", json!({ "role": "assistant" })),
            1 if c.tools => (
                "contentBlockStart",
                json!({ "contentBlockIndex": 0, "start": { "toolUse": {
                    "toolUseId": tool_use_id(c), "name": c.tool_name(),
                }}}),
            ),
            i if i < head + deltas => {
                let delta = if c.tools {
                    json!({ "toolUse": { "input": c.tool_arg_piece(i - head) } })
                } else {
                    json!({ "text": c.token((i - head) as u32) })
                };
                (
                    "contentBlockDelta",
                    json!({ "contentBlockIndex": 0, "delta": delta }),
                )
            }
            i if i == head + deltas => ("contentBlockStop", json!({ "contentBlockIndex": 0 })),
            i if i == head + deltas + 1 => ("messageStop", json!({ "stopReason": stop_reason(c) })),
            _ => (
                "metadata",
                json!({
                    "usage": usage(c, c.prompt_tokens, c.output_tokens()),
                    "metrics": { "latencyMs": 0 },
                }),
            ),
        };
        (Some(name), v.to_string())
    }

    fn content(&self) -> Range<usize> {
        self.head()..self.head() + self.deltas()
    }
}

/// InvokeModelWithResponseStream: each event of an Anthropic stream as a `chunk` carrying its
/// JSON in base64. An event already named as an exception (a cut stream's last) goes as it
/// is.
pub(crate) struct InvokeChunks(pub(crate) Box<dyn EventSeq>);

impl EventSeq for InvokeChunks {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn event(&self, i: usize) -> SseItem {
        let (name, data) = self.0.event(i);
        if name.is_some_and(|n| n.ends_with("Exception")) {
            return (name, data);
        }
        (
            Some("chunk"),
            json!({ "bytes": STANDARD.encode(data.as_bytes()) }).to_string(),
        )
    }

    fn content(&self) -> Range<usize> {
        self.0.content()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::Behavior;
    use crate::shapes::anthropic::MessageStream;

    fn completion(spec: &str) -> Completion {
        Completion::new(
            "m",
            b"{}",
            None,
            &Behavior::default().with_spec(spec).unwrap(),
        )
    }

    #[test]
    fn converse_stream_events() {
        let s = ConverseStream {
            c: completion("tokens=2"),
        };
        let names: Vec<_> = (0..s.len()).map(|i| s.event(i).0.unwrap()).collect();
        assert_eq!(
            names,
            [
                "messageStart",
                "contentBlockDelta",
                "contentBlockDelta",
                "contentBlockStop",
                "messageStop",
                "metadata"
            ]
        );
        let text: String = s
            .content()
            .map(|i| {
                let v: Value = serde_json::from_str(&s.event(i).1).unwrap();
                v["delta"]["text"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(text, s.c.text());
        let meta: Value = serde_json::from_str(&s.event(5).1).unwrap();
        assert_eq!(meta["usage"]["outputTokens"], 2);
    }

    #[test]
    fn tool_calls_start_a_block_and_stream_the_input() {
        let s = ConverseStream {
            c: completion("tools, tokens=3"),
        };
        assert_eq!(s.event(1).0, Some("contentBlockStart"));
        let input: String = s
            .content()
            .map(|i| {
                let v: Value = serde_json::from_str(&s.event(i).1).unwrap();
                v["delta"]["toolUse"]["input"].as_str().unwrap().to_string()
            })
            .collect();
        let body = converse_body(&s.c);
        assert_eq!(
            serde_json::from_str::<Value>(&input).unwrap(),
            body["output"]["message"]["content"][0]["toolUse"]["input"]
        );
        assert_eq!(body["stopReason"], "tool_use");
    }

    #[test]
    fn invoke_chunks_carry_anthropic_events() {
        let inner = MessageStream {
            c: completion("tokens=1"),
        };
        let first = inner.event(0).1;
        let chunks = InvokeChunks(Box::new(inner));
        let (name, data) = chunks.event(0);
        assert_eq!(name, Some("chunk"));
        let v: Value = serde_json::from_str(&data).unwrap();
        let decoded = STANDARD.decode(v["bytes"].as_str().unwrap()).unwrap();
        assert_eq!(decoded, first.as_bytes());
    }

    #[test]
    fn validation() {
        assert!(validate_converse(
            &json!({"messages":[{"role":"user","content":[{"text":"hi"}]}]})
        )
        .is_ok());
        assert!(validate_converse(&json!({"model":"x","messages":[]}))
            .unwrap_err()
            .contains("extraneous key [model]"));
        assert!(validate_converse(&json!({"messages":[{"role":"system","content":[]}]})).is_err());
        assert!(
            validate_invoke(&json!({"anthropic_version":"bedrock-2023-05-31","max_tokens":5}))
                .is_ok()
        );
        assert!(validate_invoke(&json!({"max_tokens":5}))
            .unwrap_err()
            .contains("anthropic_version"));
    }
}
