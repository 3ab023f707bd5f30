//! What the decoder hands out: events, comments and the bytes in between, each with its raw bytes.

use std::borrow::Cow;
use std::ops::Range;

use bytes::{Bytes, BytesMut};

/// One decoded piece of the stream.
///
/// Every byte of the input belongs to the [`raw`](Item::raw) span of exactly one item (or to the
/// `raw` of a [`DecodeError::Truncated`](crate::DecodeError::Truncated) at the end), in order, so
/// a relay that forwards `item.raw()` for each item reproduces the upstream's stream byte for byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A dispatched event.
    Event(Event),
    /// A comment line (`:` ...), the usual heartbeat.
    Comment(Comment),
    /// Bytes that dispatch nothing: a blank line outside an event, or a block of field lines with
    /// no `data` line (for example `id: 7` or `retry: 1000` alone), or a lone byte-order mark on
    /// an otherwise empty stream. An `id` in such a block still updated
    /// [`Decoder::last_event_id`](crate::Decoder::last_event_id), so a relay should forward these
    /// bytes too.
    Skipped(Skipped),
}

impl Item {
    /// The upstream's exact bytes for this item (empty for a comment inside an event, whose bytes
    /// travel with the event's).
    #[inline]
    pub fn raw(&self) -> &Bytes {
        match self {
            Item::Event(e) => &e.raw,
            Item::Comment(c) => &c.raw,
            Item::Skipped(s) => &s.raw,
        }
    }

    /// Consumes the item, returning its raw bytes.
    #[inline]
    pub fn into_raw(self) -> Bytes {
        match self {
            Item::Event(e) => e.raw,
            Item::Comment(c) => c.raw,
            Item::Skipped(s) => s.raw,
        }
    }
}

/// A dispatched event.
///
/// Its [`raw`](Event::raw) span runs from the first byte of its first field line through the line
/// break of the blank line that dispatched it, and includes any comment lines between its fields
/// (those are also reported, earlier, as [`Comment`]s with an empty `raw`). The first event of a
/// stream also includes the stream's byte-order mark, if any.
///
/// Field values are slices of `raw`, so they cost nothing to produce; only an event with several
/// `data` lines allocates, to join them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub(crate) raw: Bytes,
    pub(crate) event_type: Option<Range<usize>>,
    pub(crate) data: Data,
    pub(crate) id: Option<Range<usize>>,
    /// `None` when empty, so that dropping an event of an ID-less stream touches one `Bytes`.
    pub(crate) last_event_id: Option<Bytes>,
    pub(crate) retry: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Data {
    /// One `data` line: its value, as a range of `raw`.
    Line(Range<usize>),
    /// Several `data` lines joined with `\n`.
    Joined(Bytes),
}

impl Event {
    /// The event type: the last `event` field's value, or `message` when there was none or it was
    /// empty (the spec's default).
    #[inline]
    pub fn event_type(&self) -> &[u8] {
        match &self.event_type {
            Some(r) if !r.is_empty() => &self.raw[r.clone()],
            _ => b"message",
        }
    }

    /// [`event_type`](Event::event_type) as text, invalid UTF-8 replaced by U+FFFD.
    #[inline]
    pub fn event_type_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.event_type())
    }

    /// The data: the values of the `data` lines joined with `\n` (a single `data:` line with no
    /// value gives empty data; an event with no `data` line is never dispatched).
    #[inline]
    pub fn data(&self) -> &[u8] {
        match &self.data {
            Data::Line(r) => &self.raw[r.clone()],
            Data::Joined(b) => b,
        }
    }

    /// The data as a `Bytes` that shares the input's memory (no copy).
    #[inline]
    pub fn data_bytes(&self) -> Bytes {
        match &self.data {
            Data::Line(r) => self.raw.slice(r.clone()),
            Data::Joined(b) => b.clone(),
        }
    }

    /// [`data`](Event::data) as text, invalid UTF-8 replaced by U+FFFD. Borrows when the data is
    /// valid UTF-8.
    #[inline]
    pub fn data_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.data())
    }

    /// The value of this event's own `id` field, if it had one (the last one wins; an `id`
    /// containing NUL is ignored). `Some(b"")` means `id:` with no value, which resets the last
    /// event ID.
    #[inline]
    pub fn id(&self) -> Option<&[u8]> {
        self.id.as_ref().map(|r| &self.raw[r.clone()])
    }

    /// The last event ID as a browser's `MessageEvent.lastEventId` would report it: the most
    /// recent `id` seen in this or any earlier block of the stream (empty if none).
    #[inline]
    pub fn last_event_id(&self) -> &[u8] {
        self.last_event_id.as_deref().unwrap_or_default()
    }

    /// [`last_event_id`](Event::last_event_id) as text, invalid UTF-8 replaced by U+FFFD.
    #[inline]
    pub fn last_event_id_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.last_event_id())
    }

    /// The reconnection time in milliseconds if this event's block carried a valid `retry` field.
    #[inline]
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// The upstream's exact bytes for this event.
    #[inline]
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// Consumes the event, returning its raw bytes.
    #[inline]
    pub fn into_raw(self) -> Bytes {
        self.raw
    }
}

/// A comment line: `:` followed by text. Servers send them as heartbeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comment {
    pub(crate) raw: Bytes,
    pub(crate) text: Bytes,
    pub(crate) in_event: bool,
}

impl Comment {
    /// The text after the colon, with one leading space removed.
    #[inline]
    pub fn text(&self) -> &Bytes {
        &self.text
    }

    /// [`text`](Comment::text) as text, invalid UTF-8 replaced by U+FFFD.
    #[inline]
    pub fn text_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.text)
    }

    /// Whether the comment sat between the field lines of an event. Its bytes are then part of
    /// that event's [`raw`](Event::raw) and its own `raw` is empty.
    #[inline]
    pub fn in_event(&self) -> bool {
        self.in_event
    }

    /// The comment line's exact bytes including its line break (empty if
    /// [`in_event`](Comment::in_event)).
    #[inline]
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }
}

/// Bytes that dispatched nothing; see [`Item::Skipped`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub(crate) raw: Bytes,
}

impl Skipped {
    /// The skipped bytes, exactly as received.
    #[inline]
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }
}

/// Joins `data` line values (ranges of `raw`) with `\n`.
pub(crate) fn join_data(raw: &Bytes, lines: &[Range<usize>]) -> Data {
    match lines {
        [one] => Data::Line(one.clone()),
        _ => {
            let len = lines.iter().map(|r| r.len() + 1).sum::<usize>();
            let mut out = BytesMut::with_capacity(len);
            for (i, r) in lines.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b"\n");
                }
                out.extend_from_slice(&raw[r.clone()]);
            }
            Data::Joined(out.freeze())
        }
    }
}
