//! The AWS event-stream binary framing (`application/vnd.amazon.eventstream`), which Bedrock's
//! `ConverseStream` and `InvokeModelWithResponseStream` answer in: an incremental,
//! bounded decoder (bytes in, whole messages out) and the encoder (for the mock server and
//! tests).
//!
//! A message is
//!
//! ```text
//! total length  u32 BE   the whole message, these 4 bytes and the CRCs included
//! headers len   u32 BE
//! prelude CRC   u32 BE   CRC-32 (IEEE) of the 8 bytes above
//! headers       name len u8, name (UTF-8), type u8, value (by type, below)
//! payload       the rest
//! message CRC   u32 BE   CRC-32 of everything before it
//! ```
//!
//! Header value types: 0 `true`, 1 `false` (no bytes), 2 byte, 3 i16, 4 i32, 5 i64 (big
//! endian), 6 byte array and 7 string (u16 BE length, then the bytes), 8 timestamp (i64
//! milliseconds since the epoch), 9 UUID (16 bytes).
//!
//! Every malformed input is a typed [`DecodeError`], never a panic (`tests/eventstream.rs`
//! property-tests re-chunking, random bytes and flipped bits; `fuzz/fuzz_targets/eventstream.rs`
//! fuzzes it). The prelude's CRC is checked as soon as its 12 bytes are in, before the length
//! it declares is trusted for anything, so a corrupted length is a CRC error rather than a
//! wait for bytes that never come or an allocation it chose.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The largest message [`Decoder::new`] accepts: 16 MiB. AWS's own limit is 16 MiB for a
/// message and 128 KiB for its headers; a Bedrock event is a few hundred bytes.
pub const DEFAULT_MAX_MESSAGE_LEN: usize = 16 << 20;

/// Prelude (12) + message CRC (4): the smallest message there is.
const MIN_MESSAGE_LEN: usize = 16;
const PRELUDE_LEN: usize = 12;

// === impl Str ===

/// UTF-8 text inside a message (a header's name, a string value), sharing the message's
/// buffer: checked once when decoded, so reading it is free of copies.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Str(Bytes);

impl Str {
    /// `bytes` if they are UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Option<Str> {
        std::str::from_utf8(&bytes).ok()?;
        Some(Str(bytes))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Checked when made; the fallback is never taken.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }
}

impl From<&'static str> for Str {
    fn from(s: &'static str) -> Str {
        Str(Bytes::from_static(s.as_bytes()))
    }
}

impl From<String> for Str {
    fn from(s: String) -> Str {
        Str(Bytes::from(s))
    }
}

impl std::fmt::Debug for Str {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for Str {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

// === impl Message ===

/// A header's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderValue {
    /// Types 0 (`true`) and 1 (`false`).
    Bool(bool),
    /// Type 2.
    Byte(i8),
    /// Type 3.
    Int16(i16),
    /// Type 4.
    Int32(i32),
    /// Type 5.
    Int64(i64),
    /// Type 6 (at most 65,535 bytes).
    ByteArray(Bytes),
    /// Type 7 (at most 65,535 bytes).
    String(Str),
    /// Type 8: milliseconds since the Unix epoch.
    Timestamp(i64),
    /// Type 9.
    Uuid([u8; 16]),
}

impl HeaderValue {
    /// The value's type byte on the wire.
    pub fn type_byte(&self) -> u8 {
        match self {
            HeaderValue::Bool(true) => 0,
            HeaderValue::Bool(false) => 1,
            HeaderValue::Byte(_) => 2,
            HeaderValue::Int16(_) => 3,
            HeaderValue::Int32(_) => 4,
            HeaderValue::Int64(_) => 5,
            HeaderValue::ByteArray(_) => 6,
            HeaderValue::String(_) => 7,
            HeaderValue::Timestamp(_) => 8,
            HeaderValue::Uuid(_) => 9,
        }
    }

    /// The text of a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            HeaderValue::String(s) => Some(s.as_str()),
            _ => None,
        }
    }

    fn encoded_len(&self) -> usize {
        1 + match self {
            HeaderValue::Bool(_) => 0,
            HeaderValue::Byte(_) => 1,
            HeaderValue::Int16(_) => 2,
            HeaderValue::Int32(_) => 4,
            HeaderValue::Int64(_) | HeaderValue::Timestamp(_) => 8,
            HeaderValue::ByteArray(b) => 2 + b.len(),
            HeaderValue::String(s) => 2 + s.as_bytes().len(),
            HeaderValue::Uuid(_) => 16,
        }
    }
}

/// One header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Its name (1 to 255 bytes), e.g. `:event-type`.
    pub name: Str,
    /// Its value.
    pub value: HeaderValue,
}

/// One event-stream message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// The headers in wire order.
    pub headers: Vec<Header>,
    /// The payload (for Bedrock, a JSON document).
    pub payload: Bytes,
}

impl Message {
    /// A message with this payload and no headers.
    pub fn new(payload: impl Into<Bytes>) -> Message {
        Message {
            headers: Vec::new(),
            payload: payload.into(),
        }
    }

    /// Adds a header (builder style).
    pub fn with_header(mut self, name: impl Into<Str>, value: HeaderValue) -> Message {
        self.headers.push(Header {
            name: name.into(),
            value,
        });
        self
    }

    /// Adds a string header (builder style).
    pub fn with_str(self, name: impl Into<Str>, value: impl Into<Str>) -> Message {
        self.with_header(name, HeaderValue::String(value.into()))
    }

    /// The first header named `name`.
    pub fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.headers
            .iter()
            .find(|h| h.name == *name)
            .map(|h| &h.value)
    }

    /// The first header named `name`, if it is a string.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(HeaderValue::as_str)
    }

    /// Appends the message's wire form to `out`.
    ///
    /// # Errors
    /// [`EncodeError`]: a header name empty or over 255 bytes, a byte array or string over
    /// 65,535 bytes, a message over 4 GiB.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let mut headers_len = 0usize;
        for h in &self.headers {
            let n = h.name.as_bytes().len();
            if n == 0 || n > usize::from(u8::MAX) {
                return Err(EncodeError::HeaderName(n));
            }
            if let HeaderValue::ByteArray(b) = &h.value {
                if b.len() > usize::from(u16::MAX) {
                    return Err(EncodeError::HeaderValue(b.len()));
                }
            }
            if let HeaderValue::String(s) = &h.value {
                if s.as_bytes().len() > usize::from(u16::MAX) {
                    return Err(EncodeError::HeaderValue(s.as_bytes().len()));
                }
            }
            headers_len += 1 + n + h.value.encoded_len();
        }
        let total = PRELUDE_LEN + headers_len + self.payload.len() + 4;
        let (Ok(total32), Ok(headers32)) = (u32::try_from(total), u32::try_from(headers_len))
        else {
            return Err(EncodeError::TooLong(total));
        };
        let start = out.len();
        out.reserve(total);
        out.put_u32(total32);
        out.put_u32(headers32);
        let prelude_crc = crc32fast::hash(&out[start..start + 8]);
        out.put_u32(prelude_crc);
        for h in &self.headers {
            out.put_u8(h.name.as_bytes().len() as u8);
            out.put_slice(h.name.as_bytes());
            out.put_u8(h.value.type_byte());
            match &h.value {
                HeaderValue::Bool(_) => {}
                HeaderValue::Byte(v) => out.put_i8(*v),
                HeaderValue::Int16(v) => out.put_i16(*v),
                HeaderValue::Int32(v) => out.put_i32(*v),
                HeaderValue::Int64(v) | HeaderValue::Timestamp(v) => out.put_i64(*v),
                HeaderValue::ByteArray(b) => {
                    out.put_u16(b.len() as u16);
                    out.put_slice(b);
                }
                HeaderValue::String(s) => {
                    out.put_u16(s.as_bytes().len() as u16);
                    out.put_slice(s.as_bytes());
                }
                HeaderValue::Uuid(u) => out.put_slice(u),
            }
        }
        out.put_slice(&self.payload);
        let crc = crc32fast::hash(&out[start..]);
        out.put_u32(crc);
        Ok(())
    }

    /// The message's wire form.
    ///
    /// # Errors
    /// As [`Message::encode`].
    pub fn to_bytes(&self) -> Result<Bytes, EncodeError> {
        let mut out = BytesMut::new();
        self.encode(&mut out)?;
        Ok(out.freeze())
    }
}

/// Why a message cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// Header names are 1 to 255 bytes.
    #[error("an event-stream header name must be 1 to 255 bytes long, not {0}")]
    HeaderName(usize),
    /// Byte-array and string values are at most 65,535 bytes.
    #[error("an event-stream header value must be at most 65535 bytes long, not {0}")]
    HeaderValue(usize),
    /// The total length is a u32.
    #[error("an event-stream message must be under 4 GiB, not {0} bytes")]
    TooLong(usize),
}

// === impl Decoder ===

/// Why the bytes are not an event stream. After one, the stream cannot be followed any
/// further (there is no way to find the next message's start).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The prelude's CRC does not match: the lengths cannot be trusted.
    #[error("event-stream prelude CRC mismatch (computed {computed:#010x}, the message says {expected:#010x}): the stream is corrupt")]
    PreludeCrc {
        /// What the message carries.
        expected: u32,
        /// What its bytes give.
        computed: u32,
    },
    /// The message's CRC does not match.
    #[error("event-stream message CRC mismatch (computed {computed:#010x}, the message says {expected:#010x}): the stream is corrupt")]
    MessageCrc {
        /// What the message carries.
        expected: u32,
        /// What its bytes give.
        computed: u32,
    },
    /// The total length is over the decoder's cap.
    #[error("an event-stream message of {len} bytes is over the {max}-byte limit")]
    TooLong {
        /// The declared length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The total length is under 16 bytes, or leaves no room for the declared headers.
    #[error("an event-stream message declares {total} bytes in all and {headers} bytes of headers, which do not fit")]
    BadLengths {
        /// The declared total length.
        total: usize,
        /// The declared headers length.
        headers: usize,
    },
    /// A header's type byte is not one of 0 to 9.
    #[error("an event-stream header has the unknown value type {0}")]
    BadHeaderType(u8),
    /// A header runs past the headers' length, has an empty name, or a name or string value
    /// that is not UTF-8.
    #[error("an event-stream header is malformed: {0}")]
    BadHeader(&'static str),
    /// The stream ended inside a message.
    #[error("the event stream ended inside a message ({0} bytes of it received)")]
    Truncated(usize),
}

impl DecodeError {
    /// A low-cardinality label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            DecodeError::PreludeCrc { .. } => "prelude_crc",
            DecodeError::MessageCrc { .. } => "message_crc",
            DecodeError::TooLong { .. } => "too_long",
            DecodeError::BadLengths { .. } => "bad_lengths",
            DecodeError::BadHeaderType(_) => "bad_header_type",
            DecodeError::BadHeader(_) => "bad_header",
            DecodeError::Truncated(_) => "truncated",
        }
    }
}

/// Decodes an event stream incrementally: [`push`](Decoder::push) bytes as they arrive, take
/// complete messages with [`next_message`](Decoder::next_message), and call
/// [`finish`](Decoder::finish) at the end of the body.
///
/// Bounded: it holds at most one message (capped) plus the last chunk pushed. Payloads and
/// string values share the buffer the message arrived in (no copy).
#[derive(Debug)]
pub struct Decoder {
    buf: BytesMut,
    max: usize,
    /// The prelude of the message in `buf` was checked: its total length.
    pending: Option<usize>,
    failed: Option<DecodeError>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder that accepts messages up to [`DEFAULT_MAX_MESSAGE_LEN`].
    pub fn new() -> Decoder {
        Decoder::with_max_message_len(DEFAULT_MAX_MESSAGE_LEN)
    }

    /// A decoder that refuses messages over `max` bytes (at least 16 is always allowed).
    pub fn with_max_message_len(max: usize) -> Decoder {
        Decoder {
            buf: BytesMut::new(),
            max: max.max(MIN_MESSAGE_LEN),
            pending: None,
            failed: None,
        }
    }

    /// Appends received bytes.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(chunk);
        }
    }

    /// Bytes received and not yet returned as a message.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete message, `None` until one is in.
    ///
    /// # Errors
    /// [`DecodeError`]; after one, every call returns it again.
    pub fn next_message(&mut self) -> Result<Option<Message>, DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.decode() {
            Ok(m) => Ok(m),
            Err(e) => {
                self.buf = BytesMut::new();
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// The body ended: `Ok` if it ended between messages.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if part of a message is buffered; an earlier error again.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Truncated(self.buf.len()))
        }
    }

    fn decode(&mut self) -> Result<Option<Message>, DecodeError> {
        let total = match self.pending {
            Some(t) => t,
            None => {
                if self.buf.len() < PRELUDE_LEN {
                    return Ok(None);
                }
                let total = be32(&self.buf[0..4]) as usize;
                let headers = be32(&self.buf[4..8]) as usize;
                let expected = be32(&self.buf[8..12]);
                let computed = crc32fast::hash(&self.buf[0..8]);
                if expected != computed {
                    return Err(DecodeError::PreludeCrc { expected, computed });
                }
                if total > self.max {
                    return Err(DecodeError::TooLong {
                        len: total,
                        max: self.max,
                    });
                }
                if total < MIN_MESSAGE_LEN || headers > total - MIN_MESSAGE_LEN {
                    return Err(DecodeError::BadLengths { total, headers });
                }
                self.pending = Some(total);
                total
            }
        };
        if self.buf.len() < total {
            // Room for the rest of the message at once, rather than growing chunk by chunk.
            self.buf.reserve(total - self.buf.len());
            return Ok(None);
        }
        self.pending = None;
        let mut msg = self.buf.split_to(total).freeze();
        let expected = be32(&msg[total - 4..]);
        let computed = crc32fast::hash(&msg[..total - 4]);
        if expected != computed {
            return Err(DecodeError::MessageCrc { expected, computed });
        }
        let headers_end = PRELUDE_LEN + be32(&msg[4..8]) as usize;
        let headers = decode_headers(&msg, PRELUDE_LEN, headers_end)?;
        msg.truncate(total - 4);
        msg.advance(headers_end);
        Ok(Some(Message {
            headers,
            payload: msg,
        }))
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Header names and values every Bedrock event repeats, shared as static strings: a slice of
/// the message's buffer costs two atomic reference-count updates, and these are most headers.
const COMMON: [&str; 9] = [
    ":event-type",
    ":content-type",
    ":message-type",
    ":exception-type",
    "application/json",
    "event",
    "exception",
    "contentBlockDelta",
    "chunk",
];

/// Reads headers from a message's header bytes (`buf` is the whole message, the headers are
/// `buf[at..end]`), taking name and value bytes as slices of `buf` (or [`COMMON`] strings).
struct HeaderReader<'a> {
    buf: &'a Bytes,
    at: usize,
    end: usize,
}

impl HeaderReader<'_> {
    fn take(&mut self, n: usize) -> Result<std::ops::Range<usize>, DecodeError> {
        if self.end - self.at < n {
            return Err(DecodeError::BadHeader(
                "a header runs past the end of the headers",
            ));
        }
        let r = self.at..self.at + n;
        self.at += n;
        Ok(r)
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let r = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[r]);
        Ok(out)
    }

    fn str(&mut self, n: usize, what: &'static str) -> Result<Str, DecodeError> {
        let r = self.take(n)?;
        let raw = &self.buf[r.clone()];
        if let Some(s) = COMMON.iter().find(|c| c.as_bytes() == raw) {
            return Ok(Str::from(*s));
        }
        std::str::from_utf8(raw).map_err(|_| DecodeError::BadHeader(what))?;
        Ok(Str(self.buf.slice(r)))
    }
}

fn decode_headers(buf: &Bytes, at: usize, end: usize) -> Result<Vec<Header>, DecodeError> {
    let mut r = HeaderReader { buf, at, end };
    // Bedrock sends three headers per event.
    let mut headers = Vec::with_capacity(4);
    while r.at < r.end {
        let [name_len] = r.bytes::<1>()?;
        if name_len == 0 {
            return Err(DecodeError::BadHeader("a header name is empty"));
        }
        let name = r.str(usize::from(name_len), "a header name is not UTF-8")?;
        let [kind] = r.bytes::<1>()?;
        let value = match kind {
            0 => HeaderValue::Bool(true),
            1 => HeaderValue::Bool(false),
            2 => HeaderValue::Byte(i8::from_be_bytes(r.bytes::<1>()?)),
            3 => HeaderValue::Int16(i16::from_be_bytes(r.bytes::<2>()?)),
            4 => HeaderValue::Int32(i32::from_be_bytes(r.bytes::<4>()?)),
            5 => HeaderValue::Int64(i64::from_be_bytes(r.bytes::<8>()?)),
            6 => {
                let len = usize::from(u16::from_be_bytes(r.bytes::<2>()?));
                let range = r.take(len)?;
                HeaderValue::ByteArray(buf.slice(range))
            }
            7 => {
                let len = usize::from(u16::from_be_bytes(r.bytes::<2>()?));
                HeaderValue::String(r.str(len, "a string value is not UTF-8")?)
            }
            8 => HeaderValue::Timestamp(i64::from_be_bytes(r.bytes::<8>()?)),
            9 => HeaderValue::Uuid(r.bytes::<16>()?),
            other => return Err(DecodeError::BadHeaderType(other)),
        };
        headers.push(Header { name, value });
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three messages of aws-c-event-stream's `message_deserializer_test.c`: no headers
    /// and no payload, a payload only, and a `content-type` string header with a payload.
    #[test]
    fn aws_vectors() {
        let empty: &[u8] = &[
            0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x05, 0xc2, 0x48, 0xeb, 0x7d, 0x98,
            0xc8, 0xff,
        ];
        let payload: &[u8] = &[
            0x00, 0x00, 0x00, 0x1D, 0x00, 0x00, 0x00, 0x00, 0xfd, 0x52, 0x8c, 0x5a, 0x7b, 0x27,
            0x66, 0x6f, 0x6f, 0x27, 0x3a, 0x27, 0x62, 0x61, 0x72, 0x27, 0x7d, 0xc3, 0x65, 0x39,
            0x36,
        ];
        let mut headers = vec![
            0x00, 0x00, 0x00, 0x3D, 0x00, 0x00, 0x00, 0x20, 0x07, 0xFD, 0x83, 0x96, 0x0C,
        ];
        headers.extend_from_slice(b"content-type");
        headers.extend_from_slice(&[0x07, 0x00, 0x10]);
        headers.extend_from_slice(b"application/json{'foo':'bar'}");
        headers.extend_from_slice(&[0x8D, 0x9C, 0x08, 0xB1]);
        let want = [
            Message::default(),
            Message::new(&b"{'foo':'bar'}"[..]),
            Message::new(&b"{'foo':'bar'}"[..]).with_str("content-type", "application/json"),
        ];
        for (wire, want) in [empty, payload, &headers].into_iter().zip(want) {
            let mut d = Decoder::new();
            d.push(wire);
            assert_eq!(d.next_message().unwrap(), Some(want.clone()));
            assert_eq!(d.next_message().unwrap(), None);
            d.finish().unwrap();
            assert_eq!(&want.to_bytes().unwrap()[..], wire);
        }
    }

    #[test]
    fn every_header_type_round_trips() {
        let m = Message::new(Bytes::from_static(b"{}"))
            .with_header("t", HeaderValue::Bool(true))
            .with_header("f", HeaderValue::Bool(false))
            .with_header("b", HeaderValue::Byte(-3))
            .with_header("s", HeaderValue::Int16(-300))
            .with_header("i", HeaderValue::Int32(70_000))
            .with_header("l", HeaderValue::Int64(-1 << 40))
            .with_header("a", HeaderValue::ByteArray(Bytes::from_static(&[0, 255])))
            .with_str(":event-type", "contentBlockDelta")
            .with_header("ts", HeaderValue::Timestamp(1_767_225_600_000))
            .with_header("u", HeaderValue::Uuid([7; 16]));
        let mut d = Decoder::new();
        d.push(&m.to_bytes().unwrap());
        let got = d.next_message().unwrap().unwrap();
        assert_eq!(got, m);
        assert_eq!(got.header_str(":event-type"), Some("contentBlockDelta"));
        assert_eq!(got.header("i"), Some(&HeaderValue::Int32(70_000)));
    }

    #[test]
    fn lengths_are_checked_before_they_are_trusted() {
        let prelude = |total: u32, headers: u32| {
            let mut b = BytesMut::new();
            b.put_u32(total);
            b.put_u32(headers);
            let crc = crc32fast::hash(&b);
            b.put_u32(crc);
            b
        };
        let mut d = Decoder::with_max_message_len(1024);
        d.push(&prelude(1025, 0));
        assert_eq!(
            d.next_message(),
            Err(DecodeError::TooLong {
                len: 1025,
                max: 1024
            })
        );
        // Sticky: the stream cannot be resynchronised.
        assert!(d.next_message().is_err());
        assert!(d.finish().is_err());
        for (total, headers) in [(15, 0), (16, 1), (0, 0), (100, 90)] {
            let mut d = Decoder::new();
            d.push(&prelude(total, headers));
            assert_eq!(
                d.next_message(),
                Err(DecodeError::BadLengths {
                    total: total as usize,
                    headers: headers as usize
                })
            );
        }
        let mut d = Decoder::new();
        d.push(&prelude(100, 0));
        assert_eq!(d.next_message(), Ok(None));
        assert_eq!(d.finish(), Err(DecodeError::Truncated(12)));
    }

    #[test]
    fn malformed_headers() {
        let frame = |headers: &[u8]| {
            let mut b = BytesMut::new();
            b.put_u32((16 + headers.len()) as u32);
            b.put_u32(headers.len() as u32);
            let crc = crc32fast::hash(&b);
            b.put_u32(crc);
            b.put_slice(headers);
            let crc = crc32fast::hash(&b);
            b.put_u32(crc);
            b
        };
        for (headers, want) in [
            (&b"\x01a\x0a"[..], DecodeError::BadHeaderType(10)),
            (b"\x00", DecodeError::BadHeader("a header name is empty")),
            (
                b"\x05ab",
                DecodeError::BadHeader("a header runs past the end of the headers"),
            ),
            (
                b"\x01a\x07\x00\x05abc",
                DecodeError::BadHeader("a header runs past the end of the headers"),
            ),
            (
                b"\x01a\x07\x00\x01\xff",
                DecodeError::BadHeader("a string value is not UTF-8"),
            ),
            (
                b"\x01\xff\x00",
                DecodeError::BadHeader("a header name is not UTF-8"),
            ),
        ] {
            let mut d = Decoder::new();
            d.push(&frame(headers));
            assert_eq!(d.next_message(), Err(want));
        }
    }

    #[test]
    fn encode_limits() {
        let long = "x".repeat(256);
        assert_eq!(
            Message::default().with_str(Str::from(long), "v").to_bytes(),
            Err(EncodeError::HeaderName(256))
        );
        assert_eq!(
            Message::default()
                .with_header("a", HeaderValue::ByteArray(Bytes::from(vec![0; 65_536])))
                .to_bytes(),
            Err(EncodeError::HeaderValue(65_536))
        );
    }
}
