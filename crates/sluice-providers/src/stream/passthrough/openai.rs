//! OpenAI-shaped chat (and legacy completions) streams passed through.

use http::StatusCode;
use sluice_sse::Event;

use super::forward;
use crate::api::{Family, Operation};
use crate::stream::json::JsonStr;
use crate::stream::scan::{
    has_value_starting, is_done, is_empty_array, string_of, value_of, Key, CHOICES, CONTENT, ERROR,
    FINISH_REASON, TEXT, TOOL_CALLS, USAGE,
};
use crate::stream::wire::openai::{self as wire, Choice, Chunk};
use crate::stream::{Emitted, EventKind, SpliceState, StreamOptions, StreamTranslator};
use crate::usage::{self, Usage};

/// What the splice state needs from the first chunk.
#[derive(Debug)]
struct Head {
    id: String,
    created: u64,
    model: String,
}

/// Passes an OpenAI chat or completions stream through.
#[derive(Debug)]
pub(crate) struct OpenAiPassthrough {
    committed: bool,
    wants_usage: bool,
    track_text: bool,
    /// Where the text is: `delta.content` (chat) or `text` (legacy completions).
    text_key: &'static Key,
    text: String,
    usage: Option<Usage>,
    /// Read only with `track_text` (the splice state is for a continuation, and every stream
    /// would carry its strings); boxed, as every stream would carry its room.
    head: Option<Box<Head>>,
    next_tool_call: u32,
}

impl OpenAiPassthrough {
    pub(crate) fn new(opts: &StreamOptions<'_>) -> Self {
        OpenAiPassthrough {
            committed: false,
            wants_usage: opts.client_wants_usage,
            track_text: opts.track_text,
            text_key: if opts.op == Operation::Completions {
                &TEXT
            } else {
                &CONTENT
            },
            text: String::new(),
            usage: None,
            head: None,
            next_tool_call: 0,
        }
    }

    /// Before the commit: parse the chunk. `None`: drop it.
    fn before_commit(&mut self, event: &Event) -> Option<EventKind> {
        if event.event_type() == b"error" {
            return Some(EventKind::Error);
        }
        let data = event.data();
        let Ok(chunk) = serde_json::from_slice::<Chunk<'_>>(data) else {
            return self.after_commit(data);
        };
        if self.track_text && self.head.is_none() {
            let head = serde_json::from_slice::<wire::Head<'_>>(data).ok();
            if let Some((id, head)) = head.and_then(|h| Some((JsonStr::opt(h.id)?, h))) {
                self.head = Some(Box::new(Head {
                    id: id.unescape().into_owned(),
                    created: head.created.and_then(|c| c.get().parse().ok()).unwrap_or(0),
                    model: JsonStr::opt(head.model)
                        .map(|m| m.unescape().into_owned())
                        .unwrap_or_default(),
                }));
            }
        }
        if let Some(u) = chunk
            .usage
            .and_then(|u| usage::read(Family::OpenAi, u.get().as_bytes()))
        {
            self.usage = Some(u);
        }
        let kind = chunk_kind(&chunk);
        if self.track_text {
            if let Some(choice) = chunk.choices.as_ref().and_then(|c| c.first.as_ref()) {
                self.track(choice);
            }
        }
        if chunk.usage.is_some() && chunk.no_choices() && !self.wants_usage {
            return None;
        }
        Some(kind)
    }

    /// After the commit: bytes only.
    fn after_commit(&mut self, data: &[u8]) -> Option<EventKind> {
        if has_value_starting(data, &ERROR, b'{') {
            return Some(EventKind::Error);
        }
        let mut kind = if has_value_starting(data, &FINISH_REASON, b'"') {
            EventKind::Trailer
        } else {
            EventKind::Content
        };
        if let Some(usage) = value_of(data, &USAGE).filter(|v| v.first() == Some(&b'{')) {
            if let Some(u) = usage::read(Family::OpenAi, usage) {
                self.usage = Some(u);
            }
            if value_of(data, &CHOICES).is_some_and(is_empty_array) {
                if !self.wants_usage {
                    return None;
                }
                kind = EventKind::Trailer;
            }
        }
        if self.track_text {
            if let Some(text) = string_of(data, self.text_key) {
                self.text.push_str(&text.unescape());
            }
            if has_value_starting(data, &TOOL_CALLS, b'[') {
                // Rare, and only when tracking: count the calls for a continuation's indexes.
                if let Ok(chunk) = serde_json::from_slice::<Chunk<'_>>(data) {
                    if let Some(choice) = chunk.choices.as_ref().and_then(|c| c.first.as_ref()) {
                        self.count_tools(choice);
                    }
                }
            }
        }
        Some(kind)
    }

    fn track(&mut self, choice: &Choice<'_>) {
        let text = choice
            .delta
            .as_ref()
            .and_then(|d| JsonStr::opt(d.content))
            .or_else(|| JsonStr::opt(choice.text));
        if let Some(text) = text {
            self.text.push_str(&text.unescape());
        }
        self.count_tools(choice);
    }

    fn count_tools(&mut self, choice: &Choice<'_>) {
        let calls = choice.delta.as_ref().and_then(|d| d.tool_calls.as_ref());
        for (pos, call) in calls.into_iter().flatten().enumerate() {
            let index = call.index.unwrap_or(pos as u32);
            self.next_tool_call = self.next_tool_call.max(index + 1);
        }
    }
}

/// Whether a choice carries content: text, a refusal, reasoning or a tool call fragment.
fn has_content(choice: &Choice<'_>) -> bool {
    let nonempty = |raw| JsonStr::opt(raw).is_some_and(|s| !s.is_empty());
    if nonempty(choice.text) {
        return true;
    }
    let Some(d) = &choice.delta else {
        return false;
    };
    nonempty(d.content)
        || nonempty(d.refusal)
        || nonempty(d.reasoning_content)
        || nonempty(d.reasoning)
        || d.tool_calls.as_ref().is_some_and(|t| !t.is_empty())
}

fn chunk_kind(chunk: &Chunk<'_>) -> EventKind {
    if chunk.error.is_some() {
        return EventKind::Error;
    }
    if let Some(choice) = chunk.choices.as_ref().and_then(|c| c.first.as_ref()) {
        if has_content(choice) {
            return EventKind::Content;
        }
        if choice.finish_reason.is_some() {
            return EventKind::Trailer;
        }
    }
    if chunk.usage.is_some() && chunk.no_choices() {
        return EventKind::Trailer;
    }
    EventKind::Preamble
}

/// One chat chunk on its own (`classify_event`).
pub(crate) fn classify(event: &Event) -> EventKind {
    let data = event.data();
    if event.event_type() == b"error" {
        return EventKind::Error;
    }
    if is_done(data) {
        return EventKind::Trailer;
    }
    match serde_json::from_slice::<Chunk<'_>>(data) {
        Ok(chunk) => chunk_kind(&chunk),
        Err(_) if has_value_starting(data, &ERROR, b'{') => EventKind::Error,
        Err(_) => EventKind::Content,
    }
}

impl StreamTranslator for OpenAiPassthrough {
    fn event(&mut self, event: &Event, out: &mut Vec<Emitted>) {
        let kind = if is_done(event.data()) {
            Some(EventKind::Trailer)
        } else if self.committed {
            self.after_commit(event.data())
        } else {
            self.before_commit(event)
        };
        if let Some(kind) = kind {
            forward(&mut self.committed, event, kind, out);
        }
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
        let head = self.head.as_ref().filter(|_| self.committed)?;
        Some(SpliceState {
            id: head.id.clone(),
            created: head.created,
            model: head.model.clone(),
            next_tool_call: self.next_tool_call,
            usage: self.usage.unwrap_or_default(),
            ..SpliceState::default()
        })
    }

    fn fail(&mut self, status: StatusCode, code: &str, message: &str, out: &mut Vec<Emitted>) {
        out.push(Emitted {
            bytes: crate::error::sse_error_event(Family::OpenAi, status, code, message),
            kind: EventKind::Error,
        });
    }
}
