//! OpenAI Responses API streams passed through: named events (`response.created`,
//! `response.output_text.delta`, ..., `response.completed`), classified by name; usage is read
//! from `response.completed`/`response.incomplete` only.

use sluice_sse::Event;

use super::{forward, structural};
use crate::api::Family;
use crate::stream::scan::{string_at, string_of, value_of, DELTA, TYPE, USAGE};
use crate::stream::{Emitted, EventKind, SpliceState, StreamOptions, StreamTranslator};
use crate::usage::{self, Usage};

/// Passes a Responses stream through.
#[derive(Debug)]
pub(crate) struct ResponsesPassthrough {
    committed: bool,
    track_text: bool,
    text: String,
    usage: Option<Usage>,
}

impl ResponsesPassthrough {
    pub(crate) fn new(opts: &StreamOptions<'_>) -> Self {
        ResponsesPassthrough {
            committed: false,
            track_text: opts.track_text,
            text: String::new(),
            usage: None,
        }
    }
}

fn kind_of(name: &[u8], committed: bool) -> EventKind {
    match name {
        b"response.completed" | b"response.incomplete" => EventKind::Trailer,
        b"response.failed" | b"error" => EventKind::Error,
        n if n.ends_with(b".delta") => EventKind::Content,
        _ => structural(committed),
    }
}

/// The event's name, or its data's `type` when it has none.
fn name_of(event: &Event) -> &[u8] {
    match event.event_type() {
        b"message" => value_of(event.data(), &TYPE)
            .and_then(string_at)
            .map_or(&b""[..], |t| t.inner().as_bytes()),
        named => named,
    }
}

/// One event on its own (`classify_event`).
pub(crate) fn classify(event: &Event, committed: bool) -> EventKind {
    kind_of(name_of(event), committed)
}

impl StreamTranslator for ResponsesPassthrough {
    fn event(&mut self, event: &Event, out: &mut Vec<Emitted>) {
        let name = name_of(event);
        let kind = kind_of(name, self.committed);
        let data = event.data();
        if kind == EventKind::Trailer {
            if let Some(u) = value_of(data, &USAGE).and_then(|u| usage::read(Family::OpenAi, u)) {
                self.usage = Some(u);
            }
        }
        if self.track_text && name == b"response.output_text.delta" {
            if let Some(text) = string_of(data, &DELTA) {
                self.text.push_str(&text.unescape());
            }
        }
        forward(&mut self.committed, event, kind, out);
    }

    fn end(&mut self, _out: &mut Vec<Emitted>) {}

    fn usage(&self) -> Option<Usage> {
        self.usage
    }

    fn text(&self) -> &str {
        &self.text
    }

    fn held_bytes(&self) -> usize {
        0
    }

    fn splice_state(&self) -> Option<SpliceState> {
        None
    }
}
