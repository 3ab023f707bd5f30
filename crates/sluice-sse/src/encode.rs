use bytes::{BufMut, BytesMut};

/// The line terminator an [`Encoder`] writes. The spec accepts all three on input; servers
/// that emit CR or CRLF exist, so tests and the mock need to produce each of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LineEnding {
    /// `\n`, what almost every server sends.
    #[default]
    Lf,
    /// `\r\n`.
    CrLf,
    /// A lone `\r`: legal, rare, and the one naive parsers get wrong.
    Cr,
}

impl LineEnding {
    /// The terminator's bytes.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            LineEnding::Lf => b"\n",
            LineEnding::CrLf => b"\r\n",
            LineEnding::Cr => b"\r",
        }
    }
}

/// One event to encode. Empty optional fields are omitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutEvent<'a> {
    /// The `event:` field (the event type).
    pub event: Option<&'a str>,
    /// The payload. Line breaks inside it (CR, LF or CRLF) become several `data:` lines, which a
    /// decoder joins back with `\n`.
    pub data: &'a str,
    /// The `id:` field. Must not contain line breaks or NUL (a decoder would drop or split it).
    pub id: Option<&'a str>,
    /// The `retry:` field, in milliseconds.
    pub retry: Option<u64>,
}

/// Writes events, comments and fields with a chosen line ending.
#[derive(Clone, Copy, Debug, Default)]
pub struct Encoder {
    line_ending: LineEnding,
}

impl Encoder {
    /// An encoder that ends lines with `line_ending`.
    pub fn new(line_ending: LineEnding) -> Self {
        Encoder { line_ending }
    }

    /// The line ending this encoder writes.
    pub fn line_ending(&self) -> LineEnding {
        self.line_ending
    }

    /// Appends one complete event, terminated by a blank line, to `out`.
    pub fn event(&self, out: &mut BytesMut, ev: &OutEvent<'_>) {
        let eol = self.line_ending.as_bytes();
        if let Some(event) = ev.event {
            self.field(out, b"event", event.as_bytes());
        }
        if let Some(id) = ev.id {
            self.field(out, b"id", id.as_bytes());
        }
        if let Some(retry) = ev.retry {
            self.field(out, b"retry", retry.to_string().as_bytes());
        }
        for line in split_lines(ev.data.as_bytes()) {
            self.field(out, b"data", line);
        }
        out.put_slice(eol);
    }

    /// Appends a comment (`: text`), one line per line of `text`. Comments are what servers use
    /// as heartbeats; decoders report them but never dispatch them as events.
    pub fn comment(&self, out: &mut BytesMut, text: &str) {
        for line in split_lines(text.as_bytes()) {
            out.put_u8(b':');
            if !line.is_empty() {
                out.put_u8(b' ');
                out.put_slice(line);
            }
            out.put_slice(self.line_ending.as_bytes());
        }
    }

    fn field(&self, out: &mut BytesMut, name: &[u8], value: &[u8]) {
        out.reserve(name.len() + value.len() + 4);
        out.put_slice(name);
        out.put_u8(b':');
        // The space is optional on the wire, but a value that itself starts with a space would
        // lose that space to the decoder's "strip one leading space" rule without it.
        out.put_u8(b' ');
        out.put_slice(value);
        out.put_slice(self.line_ending.as_bytes());
    }
}

/// Splits at CRLF, LF or CR, the same three breaks a decoder recognises, so that
/// encode → decode gives back the data with its breaks normalised to `\n`.
fn split_lines(mut s: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        match s.iter().position(|&b| b == b'\n' || b == b'\r') {
            Some(i) => {
                let line = &s[..i];
                let skip = if s[i] == b'\r' && s.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                s = &s[i + skip..];
                Some(line)
            }
            None => {
                done = true;
                Some(s)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(le: LineEnding, ev: &OutEvent<'_>) -> Vec<u8> {
        let mut out = BytesMut::new();
        Encoder::new(le).event(&mut out, ev);
        out.to_vec()
    }

    #[test]
    fn multi_line_data_becomes_several_data_lines() {
        let ev = OutEvent {
            data: "a\nb\r\nc\rd",
            ..Default::default()
        };
        assert_eq!(
            enc(LineEnding::Lf, &ev),
            b"data: a\ndata: b\ndata: c\ndata: d\n\n"
        );
    }

    #[test]
    fn fields_and_line_endings() {
        let ev = OutEvent {
            event: Some("message_start"),
            data: "{}",
            id: Some("7"),
            retry: Some(1500),
        };
        assert_eq!(
            enc(LineEnding::CrLf, &ev),
            b"event: message_start\r\nid: 7\r\nretry: 1500\r\ndata: {}\r\n\r\n"
        );
        assert_eq!(
            enc(LineEnding::Cr, &ev),
            b"event: message_start\rid: 7\rretry: 1500\rdata: {}\r\r"
        );
    }

    #[test]
    fn empty_data_is_one_empty_data_line() {
        assert_eq!(enc(LineEnding::Lf, &OutEvent::default()), b"data: \n\n");
    }

    #[test]
    fn comments() {
        let mut out = BytesMut::new();
        Encoder::default().comment(&mut out, "ping");
        Encoder::default().comment(&mut out, "");
        assert_eq!(&out[..], b": ping\n:\n");
    }
}
