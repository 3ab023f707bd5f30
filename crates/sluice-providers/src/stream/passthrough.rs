//! Passthrough: the client speaks the upstream's format, so each event is forwarded as the
//! upstream's exact bytes (`event.raw()`, a `Bytes` slice) and only classified. JSON is parsed
//! only until the stream commits; after that, byte checks (`super::scan`) and the one event
//! that carries usage. The only event ever removed is an OpenAI usage chunk the client did not
//! ask for.

mod anthropic;
mod gemini;
mod openai;
mod responses;

use sluice_sse::Event;

use super::{Emitted, EventKind, StreamOptions, StreamTranslator};
use crate::api::{Family, Operation};

/// The passthrough for `upstream`'s format.
pub(crate) fn build(upstream: Family, opts: &StreamOptions<'_>) -> Box<dyn StreamTranslator> {
    match upstream {
        Family::OpenAi if opts.op == Operation::Responses => {
            Box::new(responses::ResponsesPassthrough::new(opts))
        }
        Family::OpenAi => Box::new(openai::OpenAiPassthrough::new(opts)),
        Family::Anthropic => Box::new(anthropic::AnthropicPassthrough::new(opts)),
        Family::Gemini => Box::new(gemini::GeminiPassthrough::new(opts)),
    }
}

/// [`crate::stream::classify_event`].
pub(crate) fn classify(family: Family, event: &Event) -> EventKind {
    match family {
        Family::OpenAi => match event.event_type() {
            b"message" | b"error" => openai::classify(event),
            _ => responses::classify(event, false),
        },
        Family::Anthropic => anthropic::classify(event, false),
        Family::Gemini => gemini::classify(event.data()),
    }
}

/// Forwards `event` as the upstream's own bytes, as `kind`; the first content or trailer
/// commits the stream.
#[inline]
fn forward(committed: &mut bool, event: &Event, kind: EventKind, out: &mut Vec<Emitted>) {
    *committed |= matches!(kind, EventKind::Content | EventKind::Trailer);
    out.push(Emitted {
        bytes: event.raw().clone(),
        kind,
    });
}

/// After the commit, block starts and stops and unknown events are forwarded at once; before,
/// they are preamble.
fn structural(committed: bool) -> EventKind {
    if committed {
        EventKind::Content
    } else {
        EventKind::Preamble
    }
}
