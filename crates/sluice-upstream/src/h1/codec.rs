//! HTTP/1.1 client codec without I/O (RFC 9112): the request head as bytes, the response head
//! parsed from a buffer, and the response body's framing (length, chunked, until close).
//!
//! Everything here works on bytes already read: the connection ([`super::conn`]) owns the
//! socket and calls in after each read, so each case is testable with plain data, including
//! input split anywhere across reads.
//!
//! Limits, all on what a peer controls: the response head ([`MAX_HEAD`]) and its field count
//! ([`MAX_HEADERS`]), a chunk size line ([`MAX_CHUNK_LINE`]), a chunk size (64 bits), the
//! trailer section ([`MAX_TRAILERS`]). Beyond a limit the response is a protocol error and
//! the connection is not reused.

use std::mem::MaybeUninit;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, StatusCode, Version};

/// The largest response head accepted (status line, fields, blank line), interim heads
/// included one at a time. hyper's default is larger (~400 KiB), but an inference API's
/// response head is well under 4 KiB; 64 KiB leaves room for the odd proxy in between.
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// The most fields a response head may have (hyper's client allows 100).
pub(crate) const MAX_HEADERS: usize = 128;

/// The longest chunk size line, extensions included (hyper allows 16 KiB of extensions per
/// body; one line of 4 KiB is plenty for a size and the extensions nobody sends).
pub(crate) const MAX_CHUNK_LINE: usize = 4 * 1024;

/// The largest trailer section after the last chunk (hyper's limit too).
pub(crate) const MAX_TRAILERS: usize = 16 * 1024;

/// A response the codec cannot take: the connection is in an unknown state afterwards.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CodecError {
    /// The response head did not end within [`MAX_HEAD`] bytes.
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// The response head has more than [`MAX_HEADERS`] fields.
    #[error("response head has more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    /// The status line or a field is not valid HTTP/1.x.
    #[error("malformed response head: {0}")]
    Head(httparse::Error),
    /// A field value holds bytes a header value may not hold.
    #[error("response header `{0}` has an invalid value")]
    HeaderValue(HeaderName),
    /// 101 Switching Protocols: we never ask for an upgrade.
    #[error("the upstream switched protocols (101) though the request asked for no upgrade")]
    UnexpectedUpgrade,
    /// Content-Length is not a number, or several differ.
    #[error("invalid or conflicting Content-Length in the response")]
    ContentLength,
    /// Transfer-Encoding in an HTTP/1.0 response, which cannot use one (RFC 9112 §6.1).
    #[error("Transfer-Encoding in an HTTP/1.0 response")]
    TransferEncodingHttp10,
    /// A chunk size line that is not hex digits, optional extensions and CRLF.
    #[error("malformed chunk size line")]
    ChunkSize,
    /// A chunk size line longer than [`MAX_CHUNK_LINE`].
    #[error("chunk size line longer than {MAX_CHUNK_LINE} bytes")]
    ChunkLineTooLong,
    /// A chunk size that does not fit in 64 bits.
    #[error("chunk size does not fit in 64 bits")]
    ChunkSizeOverflow,
    /// Chunk data not followed by CRLF.
    #[error("chunk data not followed by CRLF")]
    ChunkDelimiter,
    /// The trailer section did not end within [`MAX_TRAILERS`] bytes.
    #[error("trailer section larger than {MAX_TRAILERS} bytes")]
    TrailersTooLarge,
    /// A trailer field is not valid HTTP/1.1.
    #[error("malformed trailer section: {0}")]
    Trailers(httparse::Error),
}

/// Appends `req`'s head (request line, fields, blank line) to `out`.
///
/// Always `HTTP/1.1`, as hyper's client did for anything but HTTP/1.0 (a request that came in
/// over HTTP/2 is still one request here). Fields are written as given: the caller
/// (`Target::for_h1`) sets Host and Content-Length and strips the connection-specific ones.
/// Like hyper, a non-empty body with neither Content-Length nor Transfer-Encoding gets its
/// Content-Length, so the body can never be taken for the next request.
pub(crate) fn encode_request_head(req: &Request<Bytes>, out: &mut Vec<u8>) {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(req.method().as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    // The framing fields noted on the way: looking them up after cost a hashed lookup.
    let mut framed = false;
    for (name, value) in req.headers() {
        framed |= name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !req.body().is_empty() && !framed {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(req.body().len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// How the response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: a response to HEAD, 204, 304.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the server closes the connection.
    UntilClose,
}

/// A final response head, parsed.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    /// Status, version and fields (no extensions).
    pub(crate) parts: http::response::Parts,
    /// How the body that follows is delimited.
    pub(crate) framing: Framing,
    /// Whether the connection may carry another request once the body has ended.
    pub(crate) keep_alive: bool,
}

/// What [`parse_head`] found at the start of the buffer.
#[derive(Debug)]
pub(crate) enum Head {
    /// Not a whole head yet: read more.
    Partial,
    /// An interim (1xx) response, consumed from the buffer: parse again for the next head.
    Interim(StatusCode),
    /// The final response head, consumed from the buffer; the body starts where it ended.
    Final(ResponseHead),
}

/// Parses the response head at the start of `buf`, consuming it once complete.
///
/// `head_request`: the request was HEAD, so the response has no body whatever its fields say.
///
/// # Errors
/// [`CodecError`] for a head over [`MAX_HEAD`] (even incomplete), with too many fields, that
/// is malformed, or whose framing fields contradict each other; and for a 101.
pub(crate) fn parse_head(buf: &mut BytesMut, head_request: bool) -> Result<Head, CodecError> {
    // Where each field's name and value lie in `buf`: the values become slices of the head's
    // one buffer instead of one allocation each.
    let mut spans = [(0u32, 0u32, 0u32, 0u32); MAX_HEADERS];
    // Uninitialized: httparse writes only the fields it finds (as hyper does), where an
    // initialized array cost ~500 instructions per response to fill.
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        buf,
        &mut fields,
    );
    let (len, code, version, count) = match parsed {
        Ok(httparse::Status::Complete(len)) => {
            let base = buf.as_ptr() as usize;
            let offset = |s: &[u8]| (s.as_ptr() as usize - base) as u32;
            for (span, h) in spans.iter_mut().zip(resp.headers.iter()) {
                let name = offset(h.name.as_bytes());
                let value = offset(h.value);
                *span = (
                    name,
                    name + h.name.len() as u32,
                    value,
                    value + h.value.len() as u32,
                );
            }
            (
                len,
                resp.code.unwrap_or(0),
                resp.version.unwrap_or(1),
                resp.headers.len(),
            )
        }
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(CodecError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(Head::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(CodecError::TooManyHeaders),
        Err(e) => return Err(CodecError::Head(e)),
    };
    if len > MAX_HEAD {
        return Err(CodecError::HeadTooLarge);
    }
    let status =
        StatusCode::from_u16(code).map_err(|_| CodecError::Head(httparse::Error::Status))?;
    let head = buf.split_to(len).freeze();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(CodecError::UnexpectedUpgrade);
    }
    if status.is_informational() {
        return Ok(Head::Interim(status));
    }
    let mut headers = HeaderMap::with_capacity(count);
    // The framing fields, noted on the way rather than looked up again after.
    let mut framing_fields = FramingFields::default();
    for &(n0, n1, v0, v1) in &spans[..count] {
        let name = &head[n0 as usize..n1 as usize];
        // httparse checked the name is a token; `from_bytes` lowercases it.
        let name = HeaderName::from_bytes(name)
            .map_err(|_| CodecError::Head(httparse::Error::HeaderName))?;
        let value = HeaderValue::from_maybe_shared(head.slice(v0 as usize..v1 as usize))
            .map_err(|_| CodecError::HeaderValue(name.clone()))?;
        framing_fields.note(&name, &value);
        headers.append(name, value);
    }
    let version = if version == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let framing = framing_fields.framing(status, version, head_request)?;
    let keep_alive = framing_fields.keep_alive(version, framing);
    if framing_fields.transfer_encoding.is_some() && headers.contains_key(header::CONTENT_LENGTH) {
        // The coding wins: Content-Length must not be passed on as the length of a body it
        // does not describe.
        headers.remove(header::CONTENT_LENGTH);
    }
    let mut resp = http::Response::new(());
    *resp.status_mut() = status;
    *resp.version_mut() = version;
    *resp.headers_mut() = headers;
    let (parts, ()) = resp.into_parts();
    Ok(Head::Final(ResponseHead {
        parts,
        framing,
        keep_alive,
    }))
}

/// What a response head's fields say about its framing and its connection.
#[derive(Debug, Default)]
struct FramingFields {
    /// The last Transfer-Encoding field: its last coding is the one that frames the body.
    transfer_encoding: Option<HeaderValue>,
    /// Content-Length, the first valid value.
    length: Option<u64>,
    /// A Content-Length that is not a number, or differs from another.
    bad_length: bool,
    /// `Connection: close`.
    close: bool,
    /// `Connection: keep-alive` (what an HTTP/1.0 response needs to be kept).
    keep_alive: bool,
}

impl FramingFields {
    /// Notes one field. A Content-Length that is not a number, or differs from one seen
    /// before, is noted as bad (a list, `5, 5`, is fine when its members agree: RFC 9110
    /// §8.6); it is an error only where it frames the body.
    fn note(&mut self, name: &HeaderName, value: &HeaderValue) {
        if name == header::CONTENT_LENGTH {
            for part in value.as_bytes().split(|b| *b == b',') {
                match parse_decimal(trim(part)) {
                    Some(n) if self.length.is_none_or(|l| l == n) => self.length = Some(n),
                    _ => self.bad_length = true,
                }
            }
        } else if name == header::TRANSFER_ENCODING {
            self.transfer_encoding = Some(value.clone());
        } else if name == header::CONNECTION {
            for token in value.as_bytes().split(|b| *b == b',') {
                let token = trim(token);
                self.close |= token.eq_ignore_ascii_case(b"close");
                self.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }

    /// The body's framing (RFC 9112 §6.3): none for HEAD, 204 and 304; then Transfer-Encoding
    /// (chunked as its last coding, else until close); then Content-Length; else until close.
    ///
    /// # Errors
    /// [`CodecError::TransferEncodingHttp10`]: an HTTP/1.0 response cannot use one;
    /// [`CodecError::ContentLength`]: the Content-Length that frames the body is bad.
    fn framing(
        &self,
        status: StatusCode,
        version: Version,
        head_request: bool,
    ) -> Result<Framing, CodecError> {
        if head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
            return Ok(Framing::Empty);
        }
        if let Some(te) = &self.transfer_encoding {
            if version == Version::HTTP_10 {
                return Err(CodecError::TransferEncodingHttp10);
            }
            let last = te.as_bytes().rsplit(|b| *b == b',').next().map(trim);
            return Ok(match last {
                Some(c) if c.eq_ignore_ascii_case(b"chunked") => Framing::Chunked,
                _ => Framing::UntilClose,
            });
        }
        if self.bad_length {
            return Err(CodecError::ContentLength);
        }
        Ok(self.length.map_or(Framing::UntilClose, Framing::Length))
    }

    /// Whether the connection may carry another request after this response (RFC 9112 §9.3):
    /// not after `Connection: close`, not after an HTTP/1.0 response that did not ask for
    /// keep-alive, not after a body delimited by the close, and not after a response with both
    /// Transfer-Encoding and Content-Length (§6.3 item 3: it may be an attempt at response
    /// splitting, and the connection must close).
    fn keep_alive(&self, version: Version, framing: Framing) -> bool {
        let both = self.transfer_encoding.is_some() && (self.length.is_some() || self.bad_length);
        if framing == Framing::UntilClose || both || self.close {
            return false;
        }
        version == Version::HTTP_11 || self.keep_alive
    }
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// A non-empty run of ASCII digits as a u64; `None` on anything else or on overflow.
fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |n, b| match b {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(u64::from(b - b'0')),
        _ => None,
    })
}

/// What [`BodyDecoder::decode`] produced.
#[derive(Debug, PartialEq)]
pub(crate) enum Decoded {
    /// Body bytes, as many as the buffer held (never empty).
    Data(Bytes),
    /// The trailer section after the last chunk (non-empty); the body has ended.
    Trailers(HeaderMap),
    /// The body has ended.
    End,
    /// Nothing more in the buffer: read more.
    NeedMore,
}

/// Takes the response body out of the read buffer, frame by frame, as it arrives.
#[derive(Debug)]
pub(crate) struct BodyDecoder {
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Bytes of a Content-Length body still to come.
    Length(u64),
    /// At a chunk size line.
    ChunkSize,
    /// Inside a chunk: bytes still to come.
    ChunkData(u64),
    /// After a chunk's data: its CRLF.
    ChunkEnd,
    /// After the last chunk: trailer fields, then a blank line.
    Trailers,
    /// Until the server closes.
    UntilClose,
    /// The body has ended.
    Done,
}

impl BodyDecoder {
    /// A decoder for a body framed by `framing`.
    pub(crate) fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::UntilClose => State::UntilClose,
        };
        BodyDecoder { state }
    }

    /// The body has ended: nothing more to read for it.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The bytes still to come, when the framing says (a Content-Length body, or an ended
    /// one).
    pub(crate) fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// The next frame from the start of `buf`, consuming what it used.
    ///
    /// Data is returned as soon as any is buffered, never held back to fill a frame: a chunk
    /// of a streamed response goes on as it arrives. After the data that ends a chunk, the
    /// chunk's CRLF and the last chunk that may follow it are consumed too when already in
    /// `buf`, so a body whose end arrived with its last data reports [`Self::is_done`]
    /// without another call.
    ///
    /// # Errors
    /// [`CodecError`] for malformed chunked framing or an oversized trailer section.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, CodecError> {
        loop {
            match self.state {
                State::Done => return Ok(Decoded::End),
                State::Length(n) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let take = take_len(n, buf.len());
                    self.state = match n - take as u64 {
                        0 => State::Done,
                        left => State::Length(left),
                    };
                    return Ok(Decoded::Data(buf.split_to(take).freeze()));
                }
                State::UntilClose => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    return Ok(Decoded::Data(buf.split().freeze()));
                }
                State::ChunkData(n) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let take = take_len(n, buf.len());
                    let data = buf.split_to(take).freeze();
                    match n - take as u64 {
                        0 => {
                            self.state = State::ChunkEnd;
                            // The data is good whatever follows it: a framing error after it
                            // is left in place, for the next call to return.
                            if self.settle(buf).is_err() {
                                tracing::trace!("chunked framing error after a chunk's data");
                            }
                        }
                        left => self.state = State::ChunkData(left),
                    }
                    return Ok(Decoded::Data(data));
                }
                State::ChunkSize | State::ChunkEnd => {
                    if !self.step(buf)? {
                        return Ok(Decoded::NeedMore);
                    }
                }
                State::Trailers => return self.trailers(buf),
            }
        }
    }

    /// At the end of the body, `buf` ran out (the server closed the connection).
    ///
    /// # Errors
    /// `Err(())` when the framing expected more: the body is incomplete.
    pub(crate) fn eof(&mut self) -> Result<(), ()> {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(()),
        }
    }

    /// Moves through the framing that carries no data (a chunk's CRLF, a size line, an empty
    /// trailer section) as far as `buf` allows; stops at data or at trailer fields. A step
    /// that fails changes nothing, so `decode` meets the same error again.
    fn settle(&mut self, buf: &mut BytesMut) -> Result<(), CodecError> {
        loop {
            match self.state {
                State::ChunkSize | State::ChunkEnd => {
                    if !self.step(buf)? {
                        return Ok(());
                    }
                }
                State::Trailers if buf.starts_with(b"\r\n") => {
                    buf.advance(2);
                    self.state = State::Done;
                }
                _ => return Ok(()),
            }
        }
    }

    /// One framing step in `ChunkSize` or `ChunkEnd`; false when `buf` holds too little.
    fn step(&mut self, buf: &mut BytesMut) -> Result<bool, CodecError> {
        match self.state {
            State::ChunkEnd => {
                if buf.len() < 2 {
                    // A lone byte can already be wrong.
                    if buf.first().is_some_and(|b| *b != b'\r') {
                        return Err(CodecError::ChunkDelimiter);
                    }
                    return Ok(false);
                }
                if &buf[..2] != b"\r\n" {
                    return Err(CodecError::ChunkDelimiter);
                }
                buf.advance(2);
                self.state = State::ChunkSize;
                Ok(true)
            }
            State::ChunkSize => {
                let Some(lf) = buf.iter().take(MAX_CHUNK_LINE).position(|b| *b == b'\n') else {
                    if buf.len() >= MAX_CHUNK_LINE {
                        return Err(CodecError::ChunkLineTooLong);
                    }
                    return Ok(false);
                };
                let size = chunk_size(&buf[..lf])?;
                buf.advance(lf + 1);
                self.state = match size {
                    0 => State::Trailers,
                    n => State::ChunkData(n),
                };
                Ok(true)
            }
            _ => Ok(true),
        }
    }

    /// The trailer section: fields up to a blank line, returned as one frame (none when
    /// empty).
    fn trailers(&mut self, buf: &mut BytesMut) -> Result<Decoded, CodecError> {
        if buf.starts_with(b"\r\n") {
            buf.advance(2);
            self.state = State::Done;
            return Ok(Decoded::End);
        }
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let (len, map) = match httparse::parse_headers(buf, &mut fields) {
            Ok(httparse::Status::Complete((len, fields))) => {
                let mut map = HeaderMap::with_capacity(fields.len());
                for f in fields.iter() {
                    let name = HeaderName::from_bytes(f.name.as_bytes())
                        .map_err(|_| CodecError::Trailers(httparse::Error::HeaderName))?;
                    let value = HeaderValue::from_bytes(f.value)
                        .map_err(|_| CodecError::Trailers(httparse::Error::HeaderValue))?;
                    map.append(name, value);
                }
                (len, map)
            }
            Ok(httparse::Status::Partial) if buf.len() >= MAX_TRAILERS => {
                return Err(CodecError::TrailersTooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(Decoded::NeedMore),
            Err(e) => return Err(CodecError::Trailers(e)),
        };
        if len > MAX_TRAILERS {
            return Err(CodecError::TrailersTooLarge);
        }
        buf.advance(len);
        self.state = State::Done;
        Ok(if map.is_empty() {
            Decoded::End
        } else {
            Decoded::Trailers(map)
        })
    }
}

/// How much of a frame with `left` bytes to come to take from `available` buffered bytes.
fn take_len(left: u64, available: usize) -> usize {
    usize::try_from(left).map_or(available, |l| l.min(available))
}

/// A chunk size line without its LF: hex digits, optional whitespace and `;extensions`
/// (ignored), CR.
fn chunk_size(line: &[u8]) -> Result<u64, CodecError> {
    let line = line.strip_suffix(b"\r").ok_or(CodecError::ChunkSize)?;
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if digits == 0 {
        return Err(CodecError::ChunkSize);
    }
    let mut size = 0u64;
    for b in &line[..digits] {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => b - b'A' + 10,
        };
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(u64::from(d)))
            .ok_or(CodecError::ChunkSizeOverflow)?;
    }
    let rest = trim(&line[digits..]);
    if rest.is_empty() || rest[0] == b';' {
        // Extensions carry nothing we use; they must not hold a bare CR or LF (the LF ended
        // the line, a CR was stripped once).
        if rest.contains(&b'\r') {
            return Err(CodecError::ChunkSize);
        }
        return Ok(size);
    }
    Err(CodecError::ChunkSize)
}

#[cfg(test)]
mod tests;
