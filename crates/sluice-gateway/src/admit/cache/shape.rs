//! A stored answer in the other form the client asked for: a stream's events assembled into
//! the one body a non-streaming request gets, or a whole body re-emitted as the events a
//! streaming request gets, in the client's API (the endpoint is part of the key, so the
//! stored answer is already in that API).
//!
//! Only on a hit of the other kind, so it parses JSON freely. What it cannot convert
//! faithfully (an answer it does not recognise) is `None`: the request is then a miss,
//! answered upstream.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use serde_json::{json, Map, Value};
use sluice_providers::Operation;
use sluice_state::{CachedBody, CachedEvent, CachedResponse, CachedUsage};

/// `entry` as the other kind (stream ↔ whole) for `op`, if it converts.
pub(super) fn convert(op: Operation, entry: &CachedResponse) -> Option<Arc<CachedResponse>> {
    let body = match &entry.body {
        CachedBody::Events(events) => {
            let events = decode(events);
            let whole = match op {
                Operation::ChatCompletions | Operation::Completions => {
                    assemble_openai(op, &events, &entry.usage)?
                }
                Operation::Messages => assemble_anthropic(&events)?,
                Operation::Responses => events
                    .iter()
                    .find(|(kind, _)| kind == "response.completed")
                    .map(|(_, v)| v["response"].clone())
                    .filter(Value::is_object)?,
                Operation::Embeddings
                | Operation::CountTokens
                | Operation::GenerateContent
                | Operation::StreamGenerateContent => return None,
            };
            CachedBody::Whole(Bytes::from(whole.to_string()))
        }
        CachedBody::Whole(body) => {
            let v: Value = serde_json::from_slice(body).ok()?;
            let events = match op {
                Operation::ChatCompletions | Operation::Completions => emit_openai(op, &v)?,
                Operation::Messages => emit_anthropic(&v)?,
                Operation::Responses => emit_responses(&v)?,
                Operation::Embeddings
                | Operation::CountTokens
                | Operation::GenerateContent
                | Operation::StreamGenerateContent => return None,
            };
            CachedBody::Events(
                events
                    .into_iter()
                    .map(|bytes| CachedEvent {
                        bytes,
                        offset: std::time::Duration::ZERO,
                    })
                    .collect(),
            )
        }
    };
    let content_type = if matches!(body, CachedBody::Whole(_)) {
        "application/json"
    } else {
        "text/event-stream"
    };
    Some(Arc::new(CachedResponse {
        status: entry.status,
        headers: vec![(CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
        usage: entry.usage,
        stored_at: entry.stored_at,
    }))
}

/// The stream's events as (type, JSON data); `[DONE]` and unreadable data are left out.
fn decode(events: &[CachedEvent]) -> Vec<(String, Value)> {
    let mut decoder = sluice_sse::Decoder::new();
    for e in events {
        decoder.feed(e.bytes.clone());
    }
    decoder.finish();
    let mut out = Vec::new();
    while let Some(item) = decoder.next_item() {
        let Ok(sluice_sse::Item::Event(ev)) = item else {
            continue;
        };
        if let Ok(v) = serde_json::from_slice::<Value>(ev.data()) {
            out.push((ev.event_type_str().into_owned(), v));
        }
    }
    out
}

fn sse(event: Option<&str>, data: &Value) -> Bytes {
    let mut s = String::new();
    if let Some(e) = event {
        s.push_str("event: ");
        s.push_str(e);
        s.push('\n');
    }
    s.push_str("data: ");
    s.push_str(&data.to_string());
    s.push_str("\n\n");
    Bytes::from(s)
}

fn openai_usage(u: &CachedUsage) -> Value {
    json!({
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
        "prompt_tokens_details": { "cached_tokens": u.cached_input },
        "completion_tokens_details": { "reasoning_tokens": u.reasoning },
    })
}

// === OpenAI chat and completions ===

/// Chunks into a `chat.completion` (or `text_completion`): each choice's text, refusal and
/// tool calls concatenated by index, its finish reason, the usage chunk's usage (else the
/// stored usage).
fn assemble_openai(
    op: Operation,
    events: &[(String, Value)],
    stored: &CachedUsage,
) -> Option<Value> {
    let chat = op == Operation::ChatCompletions;
    let mut head: Option<&Value> = None;
    let mut usage = None;
    // index → (text, refusal, tool calls by index, finish reason)
    let mut choices: Vec<(String, Option<String>, Vec<Value>, Value)> = Vec::new();
    for (_, v) in events {
        if v.get("error").is_some() {
            return None;
        }
        head.get_or_insert(v);
        if v["usage"].is_object() {
            usage = Some(v["usage"].clone());
        }
        for c in v["choices"].as_array().into_iter().flatten() {
            let i = c["index"].as_u64().unwrap_or(0) as usize;
            if i >= 128 {
                return None;
            }
            if choices.len() <= i {
                choices.resize_with(i + 1, || (String::new(), None, Vec::new(), Value::Null));
            }
            let slot = &mut choices[i];
            let (text, refusal) = if chat {
                (&c["delta"]["content"], &c["delta"]["refusal"])
            } else {
                (&c["text"], &Value::Null)
            };
            if let Some(t) = text.as_str() {
                slot.0.push_str(t);
            }
            if let Some(r) = refusal.as_str() {
                slot.1.get_or_insert_with(String::new).push_str(r);
            }
            for call in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
                let j = call["index"].as_u64().unwrap_or(0) as usize;
                if j >= 128 {
                    return None;
                }
                if slot.2.len() <= j {
                    slot.2.resize_with(j + 1, || {
                        json!({ "id": "", "type": "function",
                                "function": { "name": "", "arguments": "" } })
                    });
                }
                let t = &mut slot.2[j];
                if let Some(id) = call["id"].as_str() {
                    t["id"] = json!(id);
                }
                for field in ["name", "arguments"] {
                    if let Some(piece) = call["function"][field].as_str() {
                        let so_far = t["function"][field].as_str().unwrap_or("").to_string();
                        t["function"][field] = json!(so_far + piece);
                    }
                }
            }
            if !c["finish_reason"].is_null() {
                slot.3 = c["finish_reason"].clone();
            }
        }
    }
    let head = head?;
    let choices: Vec<Value> = choices
        .into_iter()
        .enumerate()
        .map(|(i, (text, refusal, calls, finish))| {
            if chat {
                let mut message = Map::new();
                message.insert("role".into(), json!("assistant"));
                let content = if text.is_empty() && !calls.is_empty() {
                    Value::Null
                } else {
                    json!(text)
                };
                message.insert("content".into(), content);
                message.insert("refusal".into(), json!(refusal));
                if !calls.is_empty() {
                    message.insert("tool_calls".into(), Value::Array(calls));
                }
                json!({ "index": i, "message": message, "logprobs": null, "finish_reason": finish })
            } else {
                json!({ "index": i, "text": text, "logprobs": null, "finish_reason": finish })
            }
        })
        .collect();
    let mut out = json!({
        "id": head["id"],
        "object": if chat { "chat.completion" } else { "text_completion" },
        "created": head["created"],
        "model": head["model"],
        "choices": choices,
        "usage": usage.unwrap_or_else(|| openai_usage(stored)),
    });
    if let Some(fp) = head.get("system_fingerprint").filter(|v| !v.is_null()) {
        out["system_fingerprint"] = fp.clone();
    }
    Some(out)
}

/// A `chat.completion` (or `text_completion`) as chunks: the role, the content (and tool
/// calls) of each choice, its finish reason, then `[DONE]`. No usage chunk: a stream that
/// asks for one (`include_usage`) is stored apart and never finds a whole answer.
fn emit_openai(op: Operation, v: &Value) -> Option<Vec<Bytes>> {
    let chat = op == Operation::ChatCompletions;
    let object = if chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };
    let chunk = |choice: Value| {
        let mut c = json!({
            "id": v["id"], "object": object, "created": v["created"], "model": v["model"],
            "choices": [choice],
        });
        if let Some(fp) = v.get("system_fingerprint").filter(|f| !f.is_null()) {
            c["system_fingerprint"] = fp.clone();
        }
        sse(None, &c)
    };
    let mut out = Vec::new();
    for c in v["choices"].as_array()? {
        let i = &c["index"];
        if chat {
            let m = &c["message"];
            out.push(chunk(json!({ "index": i,
                "delta": { "role": "assistant", "content": "", "refusal": null },
                "logprobs": null, "finish_reason": null })));
            if let Some(text) = m["content"].as_str().filter(|t| !t.is_empty()) {
                out.push(chunk(json!({ "index": i, "delta": { "content": text },
                    "logprobs": null, "finish_reason": null })));
            }
            if let Some(r) = m["refusal"].as_str() {
                out.push(chunk(json!({ "index": i, "delta": { "refusal": r },
                    "logprobs": null, "finish_reason": null })));
            }
            for (j, call) in m["tool_calls"].as_array().into_iter().flatten().enumerate() {
                let mut call = call.clone();
                call["index"] = json!(j);
                out.push(chunk(
                    json!({ "index": i, "delta": { "tool_calls": [call] },
                    "logprobs": null, "finish_reason": null }),
                ));
            }
            out.push(chunk(json!({ "index": i, "delta": {}, "logprobs": null,
                "finish_reason": c["finish_reason"] })));
        } else {
            out.push(chunk(
                json!({ "index": i, "text": c["text"], "logprobs": null,
                "finish_reason": c["finish_reason"] }),
            ));
        }
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    Some(out)
}

// === Anthropic messages ===

/// Events into a `message`: `message_start`'s message with each content block (text, tool
/// input, thinking and its signature) put together, and `message_delta`'s stop reason and
/// output tokens.
fn assemble_anthropic(events: &[(String, Value)]) -> Option<Value> {
    let mut message: Option<Value> = None;
    let mut blocks: Vec<Value> = Vec::new();
    let mut json_input: Vec<String> = Vec::new();
    for (kind, v) in events {
        match kind.as_str() {
            "message_start" => message = Some(v["message"].clone()),
            "content_block_start" => {
                let i = v["index"].as_u64()? as usize;
                if i != blocks.len() {
                    return None;
                }
                blocks.push(v["content_block"].clone());
                json_input.push(String::new());
            }
            "content_block_delta" => {
                let i = v["index"].as_u64()? as usize;
                let block = blocks.get_mut(i)?;
                let d = &v["delta"];
                let append = |block: &mut Value, field: &str, piece: &Value| {
                    let so_far = block[field].as_str().unwrap_or("").to_string();
                    block[field] = json!(so_far + piece.as_str().unwrap_or(""));
                };
                match d["type"].as_str()? {
                    "text_delta" => append(block, "text", &d["text"]),
                    "thinking_delta" => append(block, "thinking", &d["thinking"]),
                    "signature_delta" => append(block, "signature", &d["signature"]),
                    "input_json_delta" => json_input[i].push_str(d["partial_json"].as_str()?),
                    "citations_delta" => {
                        if !block["citations"].is_array() {
                            block["citations"] = json!([]);
                        }
                        block["citations"]
                            .as_array_mut()?
                            .push(d["citation"].clone());
                    }
                    _ => return None,
                }
            }
            "message_delta" => {
                let m = message.as_mut()?;
                m["stop_reason"] = v["delta"]["stop_reason"].clone();
                m["stop_sequence"] = v["delta"]["stop_sequence"].clone();
                if let Some(u) = v["usage"].as_object() {
                    for (k, n) in u {
                        m["usage"][k] = n.clone();
                    }
                }
            }
            "error" => return None,
            _ => {}
        }
    }
    for (block, input) in blocks.iter_mut().zip(&json_input) {
        if !input.is_empty() {
            block["input"] = serde_json::from_str(input).ok()?;
        }
    }
    let mut m = message?;
    m["content"] = Value::Array(blocks);
    Some(m)
}

/// A `message` as its events: `message_start` (no content, its usage), each block started,
/// given whole in one delta and stopped, `message_delta` with the stop reason and output
/// tokens, `message_stop`.
fn emit_anthropic(v: &Value) -> Option<Vec<Bytes>> {
    if v["type"] != "message" {
        return None;
    }
    let mut start = v.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["stop_sequence"] = Value::Null;
    let mut out = vec![sse(
        Some("message_start"),
        &json!({ "type": "message_start", "message": start }),
    )];
    for (i, block) in v["content"].as_array()?.iter().enumerate() {
        let (empty, delta) = match block["type"].as_str()? {
            "text" => (
                json!({ "type": "text", "text": "" }),
                json!({ "type": "text_delta", "text": block["text"] }),
            ),
            "tool_use" => (
                json!({ "type": "tool_use", "id": block["id"], "name": block["name"], "input": {} }),
                json!({ "type": "input_json_delta", "partial_json": block["input"].to_string() }),
            ),
            "thinking" => (
                json!({ "type": "thinking", "thinking": "" }),
                json!({ "type": "thinking_delta", "thinking": block["thinking"] }),
            ),
            // Blocks without a delta form (redacted thinking, server tools): as they are.
            _ => (block.clone(), Value::Null),
        };
        out.push(sse(
            Some("content_block_start"),
            &json!({ "type": "content_block_start", "index": i, "content_block": empty }),
        ));
        if !delta.is_null() {
            out.push(sse(
                Some("content_block_delta"),
                &json!({ "type": "content_block_delta", "index": i, "delta": delta }),
            ));
        }
        if block["type"] == "thinking" {
            if let Some(sig) = block["signature"].as_str() {
                out.push(sse(
                    Some("content_block_delta"),
                    &json!({ "type": "content_block_delta", "index": i,
                             "delta": { "type": "signature_delta", "signature": sig } }),
                ));
            }
        }
        out.push(sse(
            Some("content_block_stop"),
            &json!({ "type": "content_block_stop", "index": i }),
        ));
    }
    out.push(sse(
        Some("message_delta"),
        &json!({
            "type": "message_delta",
            "delta": { "stop_reason": v["stop_reason"], "stop_sequence": v["stop_sequence"] },
            "usage": { "output_tokens": v["usage"]["output_tokens"] },
        }),
    ));
    out.push(sse(
        Some("message_stop"),
        &json!({ "type": "message_stop" }),
    ));
    Some(out)
}

// === OpenAI Responses ===

/// A completed `response` as its stream: `response.created` and `response.in_progress` (the
/// response in progress, no output, no usage), then each output item added, its content
/// given whole in one delta (text and refusal parts, function call arguments) and done, the
/// item done, and `response.completed` with the response as stored; `sequence_number`
/// counting from 0, as the API's. Items without a delta form (reasoning, tool calls of the
/// API's own tools) are added whole and done.
fn emit_responses(v: &Value) -> Option<Vec<Bytes>> {
    if v["object"] != "response" || v["status"] != "completed" {
        return None;
    }
    let mut out = Vec::new();
    let mut push = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(out.len());
        out.push(sse(Some(name), &data));
    };
    let mut pending = v.clone();
    pending["status"] = json!("in_progress");
    pending["output"] = json!([]);
    pending["usage"] = Value::Null;
    push("response.created", json!({ "response": pending }));
    push("response.in_progress", json!({ "response": pending }));
    for (oi, item) in v["output"].as_array()?.iter().enumerate() {
        let id = &item["id"];
        let mut added = item.clone();
        match item["type"].as_str()? {
            "message" => {
                added["status"] = json!("in_progress");
                added["content"] = json!([]);
                push(
                    "response.output_item.added",
                    json!({ "output_index": oi, "item": added }),
                );
                for (ci, part) in item["content"].as_array()?.iter().enumerate() {
                    let at = json!({ "item_id": id, "output_index": oi, "content_index": ci });
                    let with = |extra: Value| {
                        let mut e = at.clone();
                        for (k, x) in extra.as_object().into_iter().flatten() {
                            e[k] = x.clone();
                        }
                        e
                    };
                    let (empty, delta, done) = match part["type"].as_str()? {
                        "output_text" => (
                            json!({ "type": "output_text", "text": "", "annotations": [] }),
                            (
                                "response.output_text.delta",
                                json!({ "delta": part["text"], "logprobs": [] }),
                            ),
                            (
                                "response.output_text.done",
                                json!({ "text": part["text"], "logprobs": [] }),
                            ),
                        ),
                        "refusal" => (
                            json!({ "type": "refusal", "refusal": "" }),
                            (
                                "response.refusal.delta",
                                json!({ "delta": part["refusal"] }),
                            ),
                            (
                                "response.refusal.done",
                                json!({ "refusal": part["refusal"] }),
                            ),
                        ),
                        _ => return None,
                    };
                    push(
                        "response.content_part.added",
                        with(json!({ "part": empty })),
                    );
                    push(delta.0, with(delta.1));
                    push(done.0, with(done.1));
                    push("response.content_part.done", with(json!({ "part": part })));
                }
            }
            "function_call" => {
                added["status"] = json!("in_progress");
                added["arguments"] = json!("");
                push(
                    "response.output_item.added",
                    json!({ "output_index": oi, "item": added }),
                );
                push(
                    "response.function_call_arguments.delta",
                    json!({ "item_id": id, "output_index": oi, "delta": item["arguments"] }),
                );
                push(
                    "response.function_call_arguments.done",
                    json!({ "item_id": id, "output_index": oi, "arguments": item["arguments"] }),
                );
            }
            _ => push(
                "response.output_item.added",
                json!({ "output_index": oi, "item": item }),
            ),
        }
        push(
            "response.output_item.done",
            json!({ "output_index": oi, "item": item }),
        );
    }
    push("response.completed", json!({ "response": v }));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn stream(raw: &[&str]) -> CachedResponse {
        CachedResponse {
            status: http::StatusCode::OK,
            headers: Vec::new(),
            body: CachedBody::Events(
                raw.iter()
                    .map(|s| CachedEvent {
                        bytes: Bytes::copy_from_slice(s.as_bytes()),
                        offset: Duration::ZERO,
                    })
                    .collect(),
            ),
            usage: CachedUsage {
                input: 7,
                output: 3,
                ..CachedUsage::default()
            },
            stored_at: UNIX_EPOCH,
        }
    }

    fn whole(r: &CachedResponse) -> Value {
        match &r.body {
            CachedBody::Whole(b) => serde_json::from_slice(b).unwrap(),
            CachedBody::Events(_) => panic!("not whole"),
        }
    }

    #[test]
    fn an_openai_stream_becomes_one_body_and_back() {
        let s = stream(&[
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        ]);
        let w = convert(Operation::ChatCompletions, &s).unwrap();
        let v = whole(&w);
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["id"], "c1");
        assert_eq!(v["choices"][0]["message"]["content"], "Hello");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["usage"]["prompt_tokens"], 7);
        assert_eq!(v["usage"]["total_tokens"], 10);
        // And back: a stream whose text and finish are the body's, ending with [DONE].
        let back = convert(Operation::ChatCompletions, &w).unwrap();
        let again = whole(&convert(Operation::ChatCompletions, &back).unwrap());
        assert_eq!(again["choices"], v["choices"]);
        let CachedBody::Events(events) = &back.body else {
            unreachable!()
        };
        assert_eq!(&events.last().unwrap().bytes[..], b"data: [DONE]\n\n");
    }

    #[test]
    fn tool_calls_are_put_together_by_index() {
        let s = stream(&[
            "data: {\"id\":\"c2\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
            "data: {\"id\":\"c2\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n",
            "data: {\"id\":\"c2\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        ]);
        let v = whole(&convert(Operation::ChatCompletions, &s).unwrap());
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["id"], "call_1");
        assert_eq!(call["function"]["name"], "get");
        assert_eq!(call["function"]["arguments"], "{\"a\":1}");
        assert!(v["choices"][0]["message"]["content"].is_null());
    }

    #[test]
    fn an_anthropic_stream_becomes_one_message_and_back() {
        let s = stream(&[
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi \"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"there\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"tu_1\",\"name\":\"get\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"q\\\":\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"2}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ]);
        let w = convert(Operation::Messages, &s).unwrap();
        let v = whole(&w);
        assert_eq!(v["id"], "msg_1");
        assert_eq!(v["content"][0]["text"], "Hi there");
        assert_eq!(v["content"][1]["input"], json!({ "q": 2 }));
        assert_eq!(v["stop_reason"], "tool_use");
        assert_eq!(v["usage"]["output_tokens"], 3);
        assert_eq!(v["usage"]["input_tokens"], 7);
        let back = convert(Operation::Messages, &w).unwrap();
        assert_eq!(whole(&convert(Operation::Messages, &back).unwrap()), v);
    }

    #[test]
    fn a_responses_stream_gives_its_completed_response() {
        let s = stream(&[
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\",\"status\":\"in_progress\"}}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r1\",\"status\":\"completed\"}}\n\n",
        ]);
        let w = convert(Operation::Responses, &s).unwrap();
        assert_eq!(whole(&w), json!({ "id": "r1", "status": "completed" }));
        // Not an API response object: not re-emitted.
        assert!(convert(Operation::Responses, &w).is_none());
    }

    #[test]
    fn a_whole_response_becomes_its_events_and_back() {
        let body = json!({
            "id": "resp_1", "object": "response", "created_at": 5, "status": "completed",
            "model": "m", "error": null, "incomplete_details": null,
            "output": [
                { "id": "rs_1", "type": "reasoning", "summary": [] },
                { "id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                  "content": [{ "type": "output_text", "text": "Hello there", "annotations": [] }] },
                { "id": "fc_1", "type": "function_call", "status": "completed",
                  "call_id": "call_1", "name": "get", "arguments": "{\"a\":1}" },
            ],
            "usage": { "input_tokens": 7, "output_tokens": 3, "total_tokens": 10 },
        });
        let w = CachedResponse {
            body: CachedBody::Whole(Bytes::from(body.to_string())),
            ..stream(&[])
        };
        let s = convert(Operation::Responses, &w).unwrap();
        let CachedBody::Events(events) = &s.body else {
            panic!("not a stream")
        };
        let decoded = decode(events);
        let names: Vec<&str> = decoded.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, (kind, v)) in decoded.iter().enumerate() {
            assert_eq!(v["type"], kind.as_str());
            assert_eq!(v["sequence_number"], i);
        }
        assert_eq!(decoded[0].1["response"]["status"], "in_progress");
        assert_eq!(decoded[0].1["response"]["output"], json!([]));
        assert_eq!(decoded[6].1["delta"], "Hello there");
        assert_eq!(decoded[6].1["item_id"], "msg_1");
        assert_eq!(decoded[6].1["output_index"], 1);
        assert_eq!(decoded[11].1["delta"], "{\"a\":1}");
        // And back: the completed response, as it was.
        assert_eq!(whole(&convert(Operation::Responses, &s).unwrap()), body);
        // An answer that did not complete is not re-emitted (nor stored: `whole_verdict`).
        let mut incomplete = body.clone();
        incomplete["status"] = json!("incomplete");
        let w = CachedResponse {
            body: CachedBody::Whole(Bytes::from(incomplete.to_string())),
            ..stream(&[])
        };
        assert!(convert(Operation::Responses, &w).is_none());
    }
}
