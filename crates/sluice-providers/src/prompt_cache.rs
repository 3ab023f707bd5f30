//! Prompt-cache breakpoints the gateway adds for clients that mark none
//! (`route.cache_breakpoints`): one after the tools and one after the system prompt, the
//! prefix that repeats across a conversation's turns, so a client that knows nothing of
//! Anthropic's `cache_control` still pays the cache-read price for it on Anthropic, Vertex
//! AI's Claude and Bedrock.
//!
//! A body that marks any breakpoint of its own is left as it is: the client chose where its
//! prefix ends, and adding to its marks could pass Anthropic's limit of
//! [`MAX_BREAKPOINTS`] per request (a 400). The gateway adds at most two.
//!
//! Both functions work on the final upstream body (after translation), so a request reaches
//! them the same way whatever API the client spoke.

use bytes::Bytes;
use serde_json::{json, Map, Value};

/// Anthropic's limit of `cache_control` blocks in one request.
pub const MAX_BREAKPOINTS: usize = 4;

/// An Anthropic Messages body (also Vertex AI's `rawPredict` and Bedrock's InvokeModel body)
/// with `cache_control: {"type": "ephemeral"}` on its last tool and its system prompt's last
/// non-empty text block (a string `system` becomes one text block). `None` when nothing
/// changes: the body marks a breakpoint already, has neither tools nor a system prompt, or is
/// not a JSON object (the upstream's own error says so better).
pub fn anthropic_breakpoints(body: &[u8]) -> Option<Bytes> {
    let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    if anthropic_marks(&o) > 0 {
        return None;
    }
    let mark = || json!({"type": "ephemeral"});
    let mut added = 0;
    if let Some(Value::Object(tool)) = o
        .get_mut("tools")
        .and_then(Value::as_array_mut)
        .and_then(|t| t.last_mut())
    {
        tool.insert("cache_control".into(), mark());
        added += 1;
    }
    match o.get_mut("system") {
        Some(system @ Value::String(_))
            if system.as_str().is_some_and(|t| !t.trim().is_empty()) =>
        {
            let text = std::mem::take(system);
            *system = json!([{"type": "text", "text": text, "cache_control": mark()}]);
            added += 1;
        }
        Some(Value::Array(blocks)) => {
            let last = blocks.iter_mut().rev().find_map(|b| match b {
                Value::Object(b)
                    if b.get("text")
                        .and_then(Value::as_str)
                        .is_some_and(|t| !t.trim().is_empty()) =>
                {
                    Some(b)
                }
                _ => None,
            });
            if let Some(b) = last {
                b.insert("cache_control".into(), mark());
                added += 1;
            }
        }
        _ => {}
    }
    (added > 0).then(|| Bytes::from(Value::Object(o).to_string()))
}

/// How many `cache_control` marks an Anthropic body holds: on system blocks, tools, message
/// content blocks and the blocks inside a tool result.
pub fn anthropic_marks(o: &Map<String, Value>) -> usize {
    fn marked(v: &Value) -> usize {
        usize::from(v.get("cache_control").is_some_and(|c| !c.is_null()))
    }
    fn blocks(v: Option<&Value>) -> usize {
        v.and_then(Value::as_array).map_or(0, |a| {
            a.iter().map(|b| marked(b) + blocks(b.get("content"))).sum()
        })
    }
    let messages = o
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, |m| m.iter().map(|m| blocks(m.get("content"))).sum());
    blocks(o.get("system")) + blocks(o.get("tools")) + messages
}

/// A Bedrock Converse body with a `{"cachePoint": {"type": "default"}}` block at the end of
/// `toolConfig.tools` and of `system`. `None` when nothing changes: the body has a cache point
/// of its own, or neither tools nor a system prompt.
pub fn converse_breakpoints(body: &[u8]) -> Option<Bytes> {
    let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    let points = |v: Option<&Value>| {
        v.and_then(Value::as_array).map_or(0, |a| {
            a.iter().filter(|b| b.get("cachePoint").is_some()).count()
        })
    };
    let tools = o.get("toolConfig").and_then(|t| t.get("tools"));
    let messages = o
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, |m| m.iter().map(|m| points(m.get("content"))).sum());
    if points(o.get("system")) + points(tools) + messages > 0 {
        return None;
    }
    let mut added = 0;
    let mut push = |list: Option<&mut Vec<Value>>| {
        if let Some(list) = list.filter(|l| !l.is_empty()) {
            list.push(json!({"cachePoint": {"type": "default"}}));
            added += 1;
        }
    };
    push(
        o.get_mut("toolConfig")
            .and_then(|t| t.get_mut("tools"))
            .and_then(Value::as_array_mut),
    );
    push(o.get_mut("system").and_then(Value::as_array_mut));
    (added > 0).then(|| Bytes::from(Value::Object(o).to_string()))
}
