//! Output guardrails on a stream, event by event, in the client's API: the text of each
//! content event (a text delta, a tool call's argument delta) goes through a
//! [`StreamRedactor`] per channel, and the event is rewritten with the text that came out
//! (often less, while the window fills; never a split UTF-8 character, never a broken event).
//! Text still held when a non-content event comes (a block's end, the finish reason, usage,
//! `[DONE]`) is released first, in an event cloned from the channel's last one.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use sluice_guardrails::{Denied, RuleSet, StreamRedactor, Verdict};
use sluice_providers::stream::{Emitted, EventKind};

/// Keys whose string values in a content event are the text a model wrote.
const TEXT_KEYS: &[&str] = &["content", "text", "arguments", "partial_json", "delta"];

/// One channel of text (the answer's text, one tool call's arguments) through one guardrail.
struct Channel {
    /// The JSON path of the text in its events, with the `index` fields met on the way.
    key: String,
    /// The guardrail's position in [`StreamGuard::rules`].
    rule: usize,
    redactor: StreamRedactor,
    /// The channel's last event: `event:` lines before `data:`, the data, the text's path.
    template: Option<(Bytes, Value, Vec<PathStep>)>,
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    Index(usize),
}

/// A stream's output guardrails (rules only).
pub(crate) struct StreamGuard {
    rules: Vec<(String, Arc<RuleSet>, usize)>,
    channels: Vec<Channel>,
    scratch: Vec<Emitted>,
}

impl std::fmt::Debug for StreamGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamGuard")
            .field("channels", &self.channels.len())
            .finish()
    }
}

impl StreamGuard {
    pub(crate) fn new(rules: Vec<(String, Arc<RuleSet>, usize)>) -> StreamGuard {
        StreamGuard {
            rules,
            channels: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// A new attempt starts over (nothing of the last one reached the client).
    pub(crate) fn reset(&mut self) {
        self.channels.clear();
    }

    /// The verdict of each guardrail so far (`allow` when nothing was found).
    pub(crate) fn verdicts(&self) -> Vec<(&str, Verdict)> {
        self.rules
            .iter()
            .enumerate()
            .map(|(i, (name, _, _))| {
                let v = self
                    .channels
                    .iter()
                    .filter(|c| c.rule == i)
                    .map(|c| c.redactor.verdict())
                    .max()
                    .unwrap_or(Verdict::Allow);
                (name.as_str(), v)
            })
            .collect()
    }

    /// Rewrites `events` in place: content events' texts checked, held text released before
    /// other events. `Err`: a deny rule found something (the guardrail's name and why).
    pub(crate) fn filter(&mut self, events: &mut Vec<Emitted>) -> Result<(), (String, Denied)> {
        if events.is_empty() {
            return Ok(());
        }
        let mut out = std::mem::take(&mut self.scratch);
        for e in events.drain(..) {
            match e.kind {
                EventKind::Content => self.content(e, &mut out)?,
                EventKind::Error => out.push(e),
                EventKind::Preamble | EventKind::Trailer => {
                    self.flush(&mut out)?;
                    out.push(self.whole(e)?);
                }
            }
        }
        std::mem::swap(events, &mut out);
        self.scratch = out;
        Ok(())
    }

    /// The upstream ended: whatever is held, released.
    pub(crate) fn finish(&mut self, events: &mut Vec<Emitted>) -> Result<(), (String, Denied)> {
        let mut out = Vec::new();
        self.flush(&mut out)?;
        out.append(events);
        *events = out;
        Ok(())
    }

    fn content(&mut self, e: Emitted, out: &mut Vec<Emitted>) -> Result<(), (String, Denied)> {
        let Some((prefix, mut data)) = split_event(&e.bytes) else {
            out.push(e);
            return Ok(());
        };
        let mut found = Vec::new();
        find_texts(
            &data,
            &mut Vec::new(),
            &mut String::new(),
            false,
            &mut found,
        );
        if found.is_empty() {
            out.push(e);
            return Ok(());
        }
        for (key, path) in found {
            let Some(Value::String(text)) = get_mut(&mut data, &path) else {
                continue;
            };
            let mut t = std::mem::take(text);
            for (ri, (name, rules, window)) in self.rules.iter().enumerate() {
                let ch = match self
                    .channels
                    .iter()
                    .position(|c| c.key == key && c.rule == ri)
                {
                    Some(i) => i,
                    None => {
                        self.channels.push(Channel {
                            key: key.clone(),
                            rule: ri,
                            redactor: StreamRedactor::new(rules.clone(), *window),
                            template: None,
                        });
                        self.channels.len() - 1
                    }
                };
                t = self.channels[ch]
                    .redactor
                    .push(&t)
                    .map_err(|d| (name.clone(), d))?;
            }
            if let Some(Value::String(text)) = get_mut(&mut data, &path) {
                *text = t;
            }
            // The last guardrail's channel is the one that releases to the client.
            if let Some(c) = self.channels.iter_mut().rev().find(|c| c.key == key) {
                c.template = Some((prefix.clone(), data.clone(), path));
            }
        }
        out.push(Emitted {
            bytes: join_event(&prefix, &data),
            kind: EventKind::Content,
        });
        Ok(())
    }

    /// A non-content event that repeats text whole (the Responses API's `…done` and
    /// `response.completed` events carry the answer's full text): each text checked whole,
    /// as the deltas were, so it says what they said.
    fn whole(&self, e: Emitted) -> Result<Emitted, (String, Denied)> {
        let Some((prefix, mut data)) = split_event(&e.bytes) else {
            return Ok(e);
        };
        let mut found = Vec::new();
        find_texts(
            &data,
            &mut Vec::new(),
            &mut String::new(),
            false,
            &mut found,
        );
        let mut changed = false;
        for (_, path) in found {
            let Some(Value::String(text)) = get_mut(&mut data, &path) else {
                continue;
            };
            for (name, rules, _) in &self.rules {
                match rules.apply(text) {
                    Ok(c) => {
                        if let std::borrow::Cow::Owned(t) = c.text {
                            *text = t;
                            changed = true;
                        }
                    }
                    Err(d) => return Err((name.clone(), d)),
                }
            }
        }
        if !changed {
            return Ok(e);
        }
        Ok(Emitted {
            bytes: join_event(&prefix, &data),
            kind: e.kind,
        })
    }

    /// Releases every channel's held text, in events like the channel's last.
    fn flush(&mut self, out: &mut Vec<Emitted>) -> Result<(), (String, Denied)> {
        // Each channel once, in the order they first came (one per guardrail shares a key).
        let mut keys: Vec<String> = Vec::new();
        for c in &self.channels {
            if !keys.contains(&c.key) {
                keys.push(c.key.clone());
            }
        }
        for key in keys {
            // Through the guardrails in order: what one releases, the next takes.
            let mut text = String::new();
            let mut template = None;
            for ri in 0..self.rules.len() {
                let Some(c) = self
                    .channels
                    .iter_mut()
                    .find(|c| c.key == key && c.rule == ri)
                else {
                    continue;
                };
                let name = &self.rules[ri].0;
                let mut t = c.redactor.push(&text).map_err(|d| (name.clone(), d))?;
                t.push_str(&c.redactor.finish().map_err(|d| (name.clone(), d))?);
                text = t;
                if c.template.is_some() {
                    template = c.template.take();
                }
            }
            if text.is_empty() {
                continue;
            }
            if let Some((prefix, mut data, path)) = template {
                if let Some(Value::String(s)) = get_mut(&mut data, &path) {
                    *s = text;
                }
                out.push(Emitted {
                    bytes: join_event(&prefix, &data),
                    kind: EventKind::Content,
                });
            }
        }
        Ok(())
    }
}

/// An event's lines before `data:` and its data as JSON.
fn split_event(bytes: &Bytes) -> Option<(Bytes, Value)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let at = if text.starts_with("data:") {
        0
    } else {
        text.find("\ndata:")? + 1
    };
    let rest = &text[at + "data:".len()..];
    let line = rest.split(['\n', '\r']).next()?.trim_start();
    let data: Value = serde_json::from_str(line).ok()?;
    Some((bytes.slice(..at), data))
}

fn join_event(prefix: &Bytes, data: &Value) -> Bytes {
    let mut v = Vec::with_capacity(prefix.len() + 64);
    v.extend_from_slice(prefix);
    v.extend_from_slice(b"data: ");
    // Serializing a `Value` does not fail.
    let _ = serde_json::to_writer(&mut v, data);
    v.extend_from_slice(b"\n\n");
    Bytes::from(v)
}

/// The text strings of a content event: their channel key and path.
fn find_texts(
    v: &Value,
    path: &mut Vec<PathStep>,
    key: &mut String,
    text: bool,
    found: &mut Vec<(String, Vec<PathStep>)>,
) {
    match v {
        Value::String(_) if text => found.push((key.clone(), path.clone())),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(PathStep::Index(i));
                let len = key.len();
                key.push_str(&format!("[{i}]"));
                find_texts(item, path, key, text, found);
                key.truncate(len);
                path.pop();
            }
        }
        Value::Object(map) => {
            let len = key.len();
            if let Some(i) = map.get("index") {
                key.push_str(&format!("#{i}"));
            }
            for (k, child) in map {
                path.push(PathStep::Key(k.clone()));
                let l2 = key.len();
                key.push('.');
                key.push_str(k);
                find_texts(child, path, key, TEXT_KEYS.contains(&k.as_str()), found);
                key.truncate(l2);
                path.pop();
            }
            key.truncate(len);
        }
        _ => {}
    }
}

fn get_mut<'a>(v: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    let mut cur = v;
    for step in path {
        cur = match step {
            PathStep::Key(k) => cur.get_mut(k.as_str())?,
            PathStep::Index(i) => cur.get_mut(*i)?,
        };
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_guardrails::{Action, Detector, Rule};

    fn guard() -> StreamGuard {
        let rules = RuleSet::new(&[Rule::builtin(Detector::Card, Action::Redact)], Some(256));
        StreamGuard::new(vec![("pii".into(), Arc::new(rules.unwrap()), 256)])
    }

    fn event(kind: EventKind, data: serde_json::Value) -> Emitted {
        Emitted {
            bytes: Bytes::from(format!("data: {data}\n\n")),
            kind,
        }
    }

    fn args(e: &Emitted) -> String {
        let (_, v) = split_event(&e.bytes).unwrap();
        v.pointer("/choices/0/delta/tool_calls/0/function/arguments")
            .and_then(|a| a.as_str())
            .unwrap_or("")
            .to_string()
    }

    /// A card split across two tool-call argument deltas (OpenAI chat) is redacted, each event
    /// stays valid JSON, and the text held back comes out before the finish event.
    #[test]
    fn tool_call_arguments_are_redacted_across_events() {
        let mut g = guard();
        let delta = |a: &str| {
            event(
                EventKind::Content,
                serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": 0, "function": {"arguments": a}}]}}]}),
            )
        };
        let mut events = vec![delta("{\"card\": \"4111 1111 "), delta("1111 1111\"}")];
        events.push(event(
            EventKind::Trailer,
            serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ));
        g.filter(&mut events).unwrap();
        let all: String = events.iter().map(args).collect();
        assert_eq!(all, "{\"card\": \"[REDACTED:card]\"}");
        assert_eq!(events.last().unwrap().kind, EventKind::Trailer);
        assert_eq!(g.verdicts(), vec![("pii", Verdict::Redact)]);
    }

    /// A Responses API `…done` event repeats the whole text: it is redacted as the deltas were.
    #[test]
    fn a_done_event_with_the_whole_text_is_redacted_too() {
        let mut g = guard();
        let mut events = vec![
            Emitted {
                bytes: Bytes::from(format!(
                    "event: response.output_text.delta\ndata: {}\n\n",
                    serde_json::json!({"type": "response.output_text.delta", "delta": "pay 4111111111111111"})
                )),
                kind: EventKind::Content,
            },
            Emitted {
                bytes: Bytes::from(format!(
                    "event: response.output_text.done\ndata: {}\n\n",
                    serde_json::json!({"type": "response.output_text.done", "text": "pay 4111111111111111"})
                )),
                kind: EventKind::Trailer,
            },
        ];
        g.filter(&mut events).unwrap();
        let all = events
            .iter()
            .map(|e| String::from_utf8(e.bytes.to_vec()).unwrap())
            .collect::<String>();
        assert!(!all.contains("4111"), "{all}");
        assert_eq!(all.matches("[REDACTED:card]").count(), 2, "{all}");
    }

    /// Anthropic's `event:` line stays in front of a rewritten event.
    #[test]
    fn an_event_line_is_kept() {
        let mut g = guard();
        let mut events = vec![Emitted {
            bytes: Bytes::from_static(
                b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
            ),
            kind: EventKind::Content,
        }];
        g.filter(&mut events).unwrap();
        g.finish(&mut events).unwrap();
        let text = String::from_utf8(events[0].bytes.to_vec()).unwrap();
        assert!(
            text.starts_with("event: content_block_delta\ndata: {"),
            "{text}"
        );
        let held: String = events
            .iter()
            .map(|e| {
                split_event(&e.bytes).unwrap().1["delta"]["text"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(held, "hi");
    }
}
