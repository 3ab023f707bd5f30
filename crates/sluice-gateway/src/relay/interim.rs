//! NOTE: interim passthrough classification until `sluice_providers::stream::translator`
//! lands (it replaces this file). Forwards every event as the upstream's bytes and parses
//! JSON only until the stream commits.

use sluice_providers::stream::{Emitted, EventKind, StreamTranslator};
use sluice_providers::{Family, Usage};
use sluice_sse::Event;

pub(crate) struct Passthrough {
    family: Family,
    committed: bool,
}

pub(crate) fn passthrough(family: Family) -> Box<dyn StreamTranslator> {
    Box::new(Passthrough {
        family,
        committed: false,
    })
}

fn kind(family: Family, ev: &Event) -> EventKind {
    let data = ev.data();
    if data == b"[DONE]" {
        return EventKind::Trailer;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        // Not JSON: nothing we can call content; let it through as content so a stream of
        // plain text is not held forever.
        return EventKind::Content;
    };
    if v.get("error").is_some() || v.get("type").and_then(|t| t.as_str()) == Some("error") {
        return EventKind::Error;
    }
    match family {
        Family::Anthropic => match v.get("type").and_then(|t| t.as_str()) {
            Some("message_start" | "content_block_start" | "ping") => EventKind::Preamble,
            Some("content_block_delta") => EventKind::Content,
            _ => EventKind::Trailer,
        },
        _ => {
            let choice = v.pointer("/choices/0");
            let delta = choice.and_then(|c| c.get("delta"));
            let has = |k: &str| {
                delta
                    .and_then(|d| d.get(k))
                    .is_some_and(|x| !x.is_null() && x.as_str() != Some(""))
            };
            if has("content") || has("tool_calls") || has("refusal") {
                EventKind::Content
            } else if choice
                .and_then(|c| c.get("finish_reason"))
                .is_some_and(|f| !f.is_null())
                || v.get("usage").is_some_and(|u| !u.is_null())
            {
                EventKind::Trailer
            } else if choice.is_some() {
                EventKind::Preamble
            } else {
                // Responses API and other shapes: not understood here, so not held.
                EventKind::Content
            }
        }
    }
}

impl StreamTranslator for Passthrough {
    fn event(&mut self, event: &Event, out: &mut Vec<Emitted>) {
        let kind = if self.committed {
            EventKind::Content
        } else {
            let k = kind(self.family, event);
            self.committed = matches!(k, EventKind::Content | EventKind::Trailer);
            k
        };
        out.push(Emitted {
            bytes: event.raw().clone(),
            kind,
        });
    }

    fn end(&mut self, _out: &mut Vec<Emitted>) {}

    fn usage(&self) -> Option<Usage> {
        None
    }

    fn text(&self) -> &str {
        ""
    }

    fn held_bytes(&self) -> usize {
        0
    }

    fn splice_state(&self) -> Option<sluice_providers::stream::SpliceState> {
        None
    }
}
