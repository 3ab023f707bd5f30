//! OpenAI Responses API streams passed through: named events (`response.created`,
//! `response.output_text.delta`, ..., `response.completed`), classified by name; usage is read
//! from `response.completed`/`response.incomplete` only.
//!
//! For an error of the gateway's own (`fail`), it keeps what the `error` and
//! `response.failed` events must go on from: the next `sequence_number` (read from each event
//! until the commit, then counted: the API numbers every event, one apart) and the response's
//! id and model from `response.created`.

use http::StatusCode;
use serde::Deserialize;
use sluice_sse::Event;

use super::{forward, structural};
use crate::api::Family;
use crate::stream::client::responses::failure_events;
use crate::stream::fault::Fault;
use crate::stream::scan::{string_at, string_of, value_of, DELTA, SEQUENCE_NUMBER, TYPE, USAGE};
use crate::stream::{Emitted, EventKind, SpliceState, StreamOptions, StreamTranslator};
use crate::usage::{self, Usage};

/// Passes a Responses stream through.
#[derive(Debug)]
pub(crate) struct ResponsesPassthrough {
    committed: bool,
    track_text: bool,
    text: String,
    usage: Option<Usage>,
    /// The `sequence_number` the next event of the stream would have.
    next_seq: u64,
    /// `response.created`'s response id and model, as JSON string literals.
    created: Option<Box<(String, String)>>,
    closed: bool,
}

#[derive(Deserialize)]
struct Created<'a> {
    #[serde(borrow)]
    response: CreatedResponse<'a>,
}

#[derive(Deserialize)]
struct CreatedResponse<'a> {
    #[serde(borrow)]
    id: &'a serde_json::value::RawValue,
    #[serde(borrow, default)]
    model: Option<&'a serde_json::value::RawValue>,
}

impl ResponsesPassthrough {
    pub(crate) fn new(opts: &StreamOptions<'_>) -> Self {
        ResponsesPassthrough {
            committed: false,
            track_text: opts.track_text,
            text: String::new(),
            usage: None,
            next_seq: 0,
            created: None,
            closed: false,
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
        if self.committed {
            self.next_seq += 1;
        } else {
            self.next_seq = value_of(data, &SEQUENCE_NUMBER)
                .and_then(leading_u64)
                .map_or(self.next_seq + 1, |n| n.saturating_add(1));
            if name == b"response.created" {
                if let Ok(c) = serde_json::from_slice::<Created<'_>>(data) {
                    let model = c.response.model.map_or("null", |m| m.get());
                    self.created = Some(Box::new((c.response.id.get().into(), model.into())));
                }
            }
        }
        if matches!(kind, EventKind::Trailer | EventKind::Error) {
            self.closed = true;
        }
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

    fn withdraw(&mut self, events: usize) {
        self.next_seq = self.next_seq.saturating_sub(events as u64);
    }

    fn fail(&mut self, status: StatusCode, code: &str, message: &str, out: &mut Vec<Emitted>) {
        if self.closed {
            return;
        }
        self.closed = true;
        let fault = Fault::with(status.as_u16(), code, message);
        let (id, model) = match self.created.as_deref() {
            Some((id, model)) => (Some(id.as_str()), Some(model.as_str())),
            None => (None, None),
        };
        out.push(Emitted {
            bytes: failure_events(self.next_seq, id, model, &fault),
            kind: EventKind::Error,
        });
    }
}

/// The digits at the start of `value` as a number.
fn leading_u64(value: &[u8]) -> Option<u64> {
    let end = value
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(value.len());
    std::str::from_utf8(&value[..end]).ok()?.parse().ok()
}
