//! JSON text as the translators handle it: string literals kept in their escaped form, and the
//! encoder that turns a built JSON document into a complete SSE event.

use std::borrow::Cow;
use std::fmt::Write as _;

use bytes::BytesMut;
use serde_json::value::RawValue;
use sluice_sse::{Encoder, OutEvent};

use super::{Emitted, EventKind};

/// A JSON string literal exactly as it appeared in the upstream's JSON, quotes included
/// (`"Hel\"lo"`). Copying it into another JSON document needs no unescaping or escaping, which
/// is what makes translated text cheap and exact.
#[derive(Clone, Copy, Debug)]
pub(crate) struct JsonStr<'a>(&'a str);

impl<'a> JsonStr<'a> {
    /// The literal, if `raw` is a string (a number or object where a string belongs is
    /// treated as absent).
    pub(crate) fn from_raw(raw: &'a RawValue) -> Option<Self> {
        let s = raw.get();
        s.starts_with('"').then_some(JsonStr(s))
    }

    /// `raw` as a literal when it is one, else `None`; for optional fields.
    pub(crate) fn opt(raw: Option<&'a RawValue>) -> Option<Self> {
        raw.and_then(JsonStr::from_raw)
    }

    /// Trusted: `s` is a complete, valid JSON string literal.
    pub(crate) fn from_literal(s: &'a str) -> Self {
        debug_assert!(s.len() >= 2 && s.starts_with('"') && s.ends_with('"'));
        JsonStr(s)
    }

    /// The literal with its quotes.
    pub(crate) fn literal(self) -> &'a str {
        self.0
    }

    /// The escaped text between the quotes. Inner parts of several literals concatenate into
    /// a valid inner part (escapes never span literals).
    pub(crate) fn inner(self) -> &'a str {
        &self.0[1..self.0.len() - 1]
    }

    /// `""`.
    pub(crate) fn is_empty(self) -> bool {
        self.0.len() == 2
    }

    /// The text it stands for.
    pub(crate) fn unescape(self) -> Cow<'a, str> {
        let inner = self.inner();
        if !inner.contains('\\') {
            return Cow::Borrowed(inner);
        }
        // A literal that came from serde_json's RawValue (or our own escaper) is valid.
        Cow::Owned(serde_json::from_str::<String>(self.0).unwrap_or_default())
    }
}

/// An owned JSON string literal, quotes included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct JsonString(String);

impl JsonString {
    /// Copies a literal.
    pub(crate) fn from_json(s: JsonStr<'_>) -> Self {
        JsonString(s.literal().to_owned())
    }

    /// The literal for `text`.
    pub(crate) fn escape(text: &str) -> Self {
        let mut s = String::with_capacity(text.len() + 2);
        push_escaped(&mut s, text);
        JsonString(s)
    }

    /// Borrowed.
    pub(crate) fn as_json(&self) -> JsonStr<'_> {
        JsonStr(&self.0)
    }

    /// The literal with its quotes.
    pub(crate) fn literal(&self) -> &str {
        &self.0
    }
}

/// Appends `text` as a JSON string literal (quotes included).
pub(crate) fn push_escaped(out: &mut String, text: &str) {
    out.push('"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        // Only ASCII bytes are escaped, so `i` is a char boundary.
        out.push_str(&text[start..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(&text[start..]);
    out.push('"');
}

/// Appends a number. (Digit by digit: `write!` went through the formatting machinery, a few
/// hundred instructions per number, and the Responses writer numbers every event.)
pub(crate) fn push_u64(out: &mut String, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // ASCII digits only.
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or_default());
}

/// How much output buffer to allocate at a time: events are split off one shared block, so a
/// stream of ~200-byte events allocates once per ~20 events instead of once per event.
const BLOCK: usize = 4096;

/// Builds the client's events: the JSON document is written into [`EventEncoder::doc`], then
/// [`EventEncoder::emit`] encodes it as one SSE event.
#[derive(Debug, Default)]
pub(crate) struct EventEncoder {
    doc: String,
    buf: BytesMut,
}

impl EventEncoder {
    /// The document being built, emptied.
    pub(crate) fn doc(&mut self) -> &mut String {
        self.doc.clear();
        &mut self.doc
    }

    /// The document being built, as it is.
    pub(crate) fn doc_mut(&mut self) -> &mut String {
        &mut self.doc
    }

    /// Encodes the document as an event named `event` (none: a plain `data:` event).
    ///
    /// NOTE: a document built here holds no line break (every string in it is an escaped JSON
    /// literal), so the event is written directly, as `sluice_sse::Encoder` (LF line endings)
    /// writes a one-line payload (`encodes_like_the_sse_encoder` holds the two to the same
    /// bytes): the encoder's byte-by-byte scan for line breaks was a tenth of the translation's
    /// cost; a SIMD check stands in for it, and the encoder still handles what fails it.
    pub(crate) fn emit(&mut self, event: Option<&str>, kind: EventKind, out: &mut Vec<Emitted>) {
        if memchr::memchr2(b'\n', b'\r', self.doc.as_bytes()).is_some() {
            Encoder::default().event(
                &mut self.buf,
                &OutEvent {
                    event,
                    data: &self.doc,
                    ..OutEvent::default()
                },
            );
            out.push(Emitted {
                bytes: self.buf.split().freeze(),
                kind,
            });
            return;
        }
        let need = self.doc.len() + event.map_or(0, |e| e.len() + 8) + 8;
        if self.buf.capacity() - self.buf.len() < need {
            self.buf.reserve(need.max(BLOCK));
        }
        if let Some(event) = event {
            self.buf.extend_from_slice(b"event: ");
            self.buf.extend_from_slice(event.as_bytes());
            self.buf.extend_from_slice(b"\n");
        }
        self.buf.extend_from_slice(b"data: ");
        self.buf.extend_from_slice(self.doc.as_bytes());
        self.buf.extend_from_slice(b"\n\n");
        out.push(Emitted {
            bytes: self.buf.split().freeze(),
            kind,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_round_trips() {
        for text in [
            "",
            "plain",
            "q\"b\\s",
            "line\nbreak\r\t",
            "\u{1}\u{1f}",
            "ünï 🎉",
        ] {
            let lit = JsonString::escape(text);
            let back: String = serde_json::from_str(lit.literal()).unwrap();
            assert_eq!(back, text);
            assert_eq!(lit.as_json().unescape(), text);
        }
    }

    #[test]
    fn encodes_like_the_sse_encoder() {
        for event in [None, Some("content_block_delta")] {
            let mut enc = EventEncoder::default();
            enc.doc().push_str(r#"{"a":"b\nc","d":[1,2]}"#);
            let mut out = Vec::new();
            enc.emit(event, EventKind::Content, &mut out);
            let mut want = BytesMut::new();
            Encoder::default().event(
                &mut want,
                &OutEvent {
                    event,
                    data: r#"{"a":"b\nc","d":[1,2]}"#,
                    ..OutEvent::default()
                },
            );
            assert_eq!(out[0].bytes, want.freeze());
        }
        // A line break (which no writer produces) still makes a valid event.
        let mut enc = EventEncoder::default();
        enc.doc().push_str("a\nb");
        let mut out = Vec::new();
        enc.emit(None, EventKind::Content, &mut out);
        assert_eq!(&out[0].bytes[..], b"data: a\ndata: b\n\n");
    }

    #[test]
    fn numbers() {
        for n in [0, 7, 10, 99, 1_700_000_000, u64::MAX] {
            let mut s = String::from("x");
            push_u64(&mut s, n);
            assert_eq!(s, format!("x{n}"));
        }
    }

    #[test]
    fn literals_from_raw_values() {
        let raw: &RawValue = serde_json::from_str(r#""a\"b""#).unwrap();
        let s = JsonStr::from_raw(raw).unwrap();
        assert_eq!(s.inner(), r#"a\"b"#);
        assert_eq!(s.unescape(), "a\"b");
        let raw: &RawValue = serde_json::from_str("12").unwrap();
        assert!(JsonStr::from_raw(raw).is_none());
    }
}
