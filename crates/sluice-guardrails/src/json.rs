//! The texts of a request's messages and of an answer's content, inside their JSON, in every
//! API family the gateway speaks: values of the text-bearing keys (`content`, `text`,
//! `arguments`, `system`, `input`, `prompt`, `instructions`, …) wherever they sit, never ids,
//! roles, types, URLs or base64 data.

use serde_json::Value;

use crate::rules::{Denied, RuleSet};
use crate::verdict::Verdict;

/// Keys whose string values (or the strings in their arrays) are text a person or a model
/// wrote.
const TEXT_KEYS: &[&str] = &[
    "content",
    "text",
    "arguments",
    "partial_json",
    "refusal",
    "system",
    "input",
    "prompt",
    "instructions",
    "output_text",
    "thinking",
];

/// Calls `f` on every text string of a request or answer body.
pub fn visit_texts(v: &mut Value, f: &mut dyn FnMut(&mut String)) {
    walk(v, false, f);
}

fn walk(v: &mut Value, text: bool, f: &mut dyn FnMut(&mut String)) {
    match v {
        Value::String(s) if text => f(s),
        Value::Array(items) => {
            for i in items {
                walk(i, text, f);
            }
        }
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                walk(child, TEXT_KEYS.contains(&k.as_str()), f);
            }
        }
        _ => {}
    }
}

/// The texts of a body, in order (what an external checker is sent).
pub fn texts(v: &Value) -> Vec<String> {
    fn walk_ref(v: &Value, text: bool, out: &mut Vec<String>) {
        match v {
            Value::String(s) if text => out.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|i| walk_ref(i, text, out)),
            Value::Object(map) => {
                for (k, child) in map {
                    walk_ref(child, TEXT_KEYS.contains(&k.as_str()), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk_ref(v, false, &mut out);
    out
}

/// A body checked in place: `Ok((verdict, rewritten))`, `rewritten` when a text was redacted
/// (the body must then be sent as rewritten); `Err` at the first deny.
pub fn check_body(rules: &RuleSet, v: &mut Value) -> Result<(Verdict, bool), Denied> {
    let mut verdict = Verdict::Allow;
    let mut denied = None;
    visit_texts(v, &mut |s| {
        if denied.is_some() {
            return;
        }
        match rules.apply(s) {
            Ok(c) => {
                verdict = verdict.max(c.verdict);
                if let std::borrow::Cow::Owned(t) = c.text {
                    *s = t;
                }
            }
            Err(d) => denied = Some(d),
        }
    });
    match denied {
        Some(d) => Err(d),
        None => Ok((verdict, verdict == Verdict::Redact)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_the_message_texts_of_every_api() {
        let body = serde_json::json!({
            "model": "m",
            "system": "sys",
            "messages": [
                {"role": "user", "content": "plain"},
                {"role": "user", "content": [
                    {"type": "text", "text": "part"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
                ]},
                {"role": "assistant", "tool_calls": [
                    {"id": "call_1", "function": {"name": "f", "arguments": "{\"a\":1}"}}
                ]}
            ],
            "contents": [{"parts": [{"text": "gemini"}]}]
        });
        let mut got = texts(&body);
        got.sort();
        assert_eq!(got, ["gemini", "part", "plain", "sys", "{\"a\":1}"]);
    }
}
