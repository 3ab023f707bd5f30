//! Anthropic Messages streams passed through: classified by the SSE event name alone; the
//! events parsed are `message_start` and `message_delta` (usage, once each) and
//! `content_block_start` (once per block, for the splice state).

use std::sync::LazyLock;

use http::StatusCode;
use memchr::memmem::Finder;
use sluice_sse::Event;

use super::{forward, structural};
use crate::api::Family;
use crate::stream::json::JsonStr;
use crate::stream::scan::{string_of, value_of, TEXT, USAGE};
use crate::stream::wire::anthropic::{BlockStart, MessageStart, TypeOnly};
use crate::stream::{Emitted, EventKind, SpliceState, StreamOptions, StreamTranslator};
use crate::usage::{AnthropicStreamUsage, Usage};

static TEXT_DELTA: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("\"text_delta\""));

/// Passes an Anthropic stream through.
#[derive(Debug)]
pub(crate) struct AnthropicPassthrough {
    committed: bool,
    track_text: bool,
    text: String,
    usage: AnthropicStreamUsage,
    /// `message_start`'s id and model.
    head: Option<(String, String)>,
    open_text: Option<u32>,
    next_block: u32,
}

impl AnthropicPassthrough {
    pub(crate) fn new(opts: &StreamOptions<'_>) -> Self {
        AnthropicPassthrough {
            committed: false,
            track_text: opts.track_text,
            text: String::new(),
            usage: AnthropicStreamUsage::default(),
            head: None,
            open_text: None,
            next_block: 0,
        }
    }
}

/// The event's type: its SSE name, or the data's `type` when it has none.
fn with_type<R>(event: &Event, f: impl FnOnce(&[u8]) -> R) -> R {
    match event.event_type() {
        b"message" => {
            let parsed = serde_json::from_slice::<TypeOnly<'_>>(event.data()).ok();
            f(parsed.as_ref().map_or(&b""[..], |t| t.kind.as_bytes()))
        }
        named => f(named),
    }
}

/// One event on its own (`classify_event`, and the passthrough's classification).
pub(crate) fn classify(event: &Event, committed: bool) -> EventKind {
    with_type(event, |kind| kind_of(kind, committed))
}

fn kind_of(kind: &[u8], committed: bool) -> EventKind {
    match kind {
        b"content_block_delta" => EventKind::Content,
        b"message_delta" | b"message_stop" => EventKind::Trailer,
        b"error" => EventKind::Error,
        b"message_start" | b"ping" => EventKind::Preamble,
        _ => structural(committed),
    }
}

impl StreamTranslator for AnthropicPassthrough {
    fn event(&mut self, event: &Event, out: &mut Vec<Emitted>) {
        let data = event.data();
        let kind = with_type(event, |kind| {
            match kind {
                b"content_block_delta" if self.track_text && TEXT_DELTA.find(data).is_some() => {
                    if let Some(text) = string_of(data, &TEXT) {
                        self.text.push_str(&text.unescape());
                    }
                }
                b"message_start" => {
                    if let Ok(m) = serde_json::from_slice::<MessageStart<'_>>(data) {
                        if let Some(u) = m.message.usage {
                            self.usage.apply(u.get().as_bytes());
                        }
                        let text = |raw| JsonStr::opt(raw).map(|s| s.unescape().into_owned());
                        self.head = Some((
                            text(m.message.id).unwrap_or_default(),
                            text(m.message.model).unwrap_or_default(),
                        ));
                    }
                }
                b"content_block_start" => {
                    if let Ok(b) = serde_json::from_slice::<BlockStart<'_>>(data) {
                        self.open_text = (b.content_block.kind == "text").then_some(b.index);
                        self.next_block = self.next_block.max(b.index + 1);
                    }
                }
                b"content_block_stop" => self.open_text = None,
                b"message_delta" => {
                    if let Some(u) = value_of(data, &USAGE) {
                        self.usage.apply(u);
                    }
                }
                _ => {}
            }
            kind_of(kind, self.committed)
        });
        forward(&mut self.committed, event, kind, out);
    }

    fn end(&mut self, _out: &mut Vec<Emitted>) {}

    fn usage(&self) -> Option<Usage> {
        self.usage.usage()
    }

    fn text(&self) -> &str {
        &self.text
    }

    fn held_bytes(&self) -> usize {
        0
    }

    fn splice_state(&self) -> Option<SpliceState> {
        let (id, model) = self.head.as_ref().filter(|_| self.committed)?;
        Some(SpliceState {
            id: id.clone(),
            model: model.clone(),
            open_text_block: self.open_text,
            next_block: self.next_block,
            usage: self.usage().unwrap_or_default(),
            ..SpliceState::default()
        })
    }

    fn fail(&mut self, status: StatusCode, code: &str, message: &str, out: &mut Vec<Emitted>) {
        out.push(Emitted {
            bytes: crate::error::sse_error_event(Family::Anthropic, status, code, message),
            kind: EventKind::Error,
        });
    }
}
