//! Gemini streams passed through. No client operation speaks Gemini's format today, so this
//! serves only as the fallback for pairs with no translation; it follows the same rules.

use http::StatusCode;
use sluice_sse::Event;

use super::forward;
use crate::api::Family;
use crate::stream::json::JsonStr;
use crate::stream::scan::{
    has_value_starting, string_of, value_of, ERROR, FINISH_REASON_GEMINI, TEXT, USAGE_METADATA,
};
use crate::stream::wire::gemini::Response;
use crate::stream::{Emitted, EventKind, SpliceState, StreamOptions, StreamTranslator};
use crate::usage::{self, Usage};

/// Passes a Gemini stream through.
#[derive(Debug)]
pub(crate) struct GeminiPassthrough {
    committed: bool,
    track_text: bool,
    text: String,
    usage: Option<Usage>,
}

impl GeminiPassthrough {
    pub(crate) fn new(opts: &StreamOptions<'_>) -> Self {
        GeminiPassthrough {
            committed: false,
            track_text: opts.track_text,
            text: String::new(),
            usage: None,
        }
    }
}

fn response_kind(r: &Response<'_>) -> EventKind {
    if r.error.is_some() {
        return EventKind::Error;
    }
    let Some(candidate) = r.candidates.as_ref().and_then(|c| c.first.as_ref()) else {
        return if r
            .prompt_feedback
            .as_ref()
            .is_some_and(|p| p.block_reason.is_some())
        {
            EventKind::Trailer
        } else {
            EventKind::Preamble
        };
    };
    let parts = candidate.content.as_ref().and_then(|c| c.parts.as_ref());
    let content = parts
        .into_iter()
        .flatten()
        .any(|p| p.function_call.is_some() || JsonStr::opt(p.text).is_some_and(|t| !t.is_empty()));
    if content {
        EventKind::Content
    } else if candidate.finish_reason.is_some() {
        EventKind::Trailer
    } else {
        EventKind::Preamble
    }
}

fn bytes_kind(data: &[u8]) -> EventKind {
    if has_value_starting(data, &ERROR, b'{') {
        EventKind::Error
    } else if has_value_starting(data, &FINISH_REASON_GEMINI, b'"') {
        EventKind::Trailer
    } else {
        EventKind::Content
    }
}

/// One chunk on its own (`classify_event`).
pub(crate) fn classify(data: &[u8]) -> EventKind {
    match serde_json::from_slice::<Response<'_>>(data) {
        Ok(r) => response_kind(&r),
        Err(_) => bytes_kind(data),
    }
}

impl StreamTranslator for GeminiPassthrough {
    fn event(&mut self, event: &Event, out: &mut Vec<Emitted>) {
        let data = event.data();
        let parsed = if self.committed {
            None
        } else {
            serde_json::from_slice::<Response<'_>>(data).ok()
        };
        let kind = match &parsed {
            Some(r) => {
                if let Some(u) = r
                    .usage_metadata
                    .and_then(|u| usage::read(Family::Gemini, u.get().as_bytes()))
                {
                    self.usage = Some(u);
                }
                response_kind(r)
            }
            None => {
                if let Some(u) =
                    value_of(data, &USAGE_METADATA).and_then(|u| usage::read(Family::Gemini, u))
                {
                    self.usage = Some(u);
                }
                bytes_kind(data)
            }
        };
        if self.track_text {
            if let Some(text) = string_of(data, &TEXT) {
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

    fn fail(&mut self, status: StatusCode, code: &str, message: &str, out: &mut Vec<Emitted>) {
        out.push(Emitted {
            bytes: crate::error::sse_error_event(Family::Gemini, status, code, message),
            kind: EventKind::Error,
        });
    }
}
