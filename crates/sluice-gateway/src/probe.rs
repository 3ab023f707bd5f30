//! The request body's routing fields (`model`, `stream`, the token caps, `stream_options`),
//! read in one pass that also checks the whole body is JSON.
//!
//! serde (with `IgnoredAny` for the rest) did this for ~2.5 K instructions on a small chat
//! call, most of it its per-field machinery rather than the bytes. [`read`] first runs a
//! scanner that accepts only what serde accepts, with the same values: any doubt (a key or
//! `model` with an escape, a duplicate routing field, a number that is not a plain whole one
//! where a count is read, a body nested deeper than [`MAX_DEPTH`], anything malformed) gives
//! up, and serde reads the body instead, so a malformed or unusual body gets exactly the
//! answer and error it got before. `tests` holds the scanner to that against serde over
//! thousands of generated bodies.

use std::borrow::Cow;

use serde::Deserialize;

use crate::error::GatewayError;

/// The fields routing needs. (Also read by `head::route_request`, the fuzzed request-head
/// path.)
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
pub(crate) struct Probe<'a> {
    #[serde(borrow)]
    pub(crate) model: Option<Cow<'a, str>>,
    pub(crate) stream: Option<bool>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) max_completion_tokens: Option<u64>,
    pub(crate) max_output_tokens: Option<u64>,
    /// Read here so that passthrough does not scan the body a second time.
    pub(crate) stream_options: Option<ProbeStreamOptions>,
}

/// `stream_options` of an OpenAI request.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
pub(crate) struct ProbeStreamOptions {
    pub(crate) include_usage: Option<bool>,
}

/// The body's routing fields.
///
/// # Errors
/// serde's error for a body that is not JSON or does not fit [`Probe`] (the caller words it
/// for the client).
pub(crate) fn read(bytes: &[u8]) -> Result<Probe<'_>, serde_json::Error> {
    match scan(bytes) {
        Some(probe) => Ok(probe),
        None => serde_json::from_slice(bytes),
    }
}

/// The body's routing fields, or what the client is told when it has none: the probe
/// (scanner, then serde), its errors worded by [`diagnose`]. The request path and the fuzzed
/// request head (`crate::head`) both read bodies here.
///
/// # Errors
/// [`GatewayError::BadJson`] or [`GatewayError::BadField`].
pub(crate) fn routing_fields(bytes: &[u8]) -> Result<Probe<'_>, GatewayError> {
    read(bytes).map_err(|e| diagnose(bytes, e))
}

impl Probe<'_> {
    /// The request's token cap under any of its names (`max_tokens`,
    /// `max_completion_tokens`, `max_output_tokens`), 0 if none.
    pub(crate) fn max_tokens_any(&self) -> u64 {
        self.max_tokens
            .or(self.max_completion_tokens)
            .or(self.max_output_tokens)
            .unwrap_or(0)
    }
}

/// Why the body did not fit [`Probe`]: not JSON, not an object, or a routing field of the
/// wrong type (`{"model": 5}` is "`model` must be a string", not "not valid JSON"). Runs only on
/// the error path.
fn diagnose(bytes: &[u8], e: serde_json::Error) -> GatewayError {
    let v = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(v) => v,
        Err(_) => return GatewayError::BadJson(e.to_string()),
    };
    let Some(obj) = v.as_object() else {
        return GatewayError::BadJson("the body must be a JSON object".into());
    };
    let kind = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    };
    type Check = (&'static str, &'static str, fn(&serde_json::Value) -> bool);
    let checks: [Check; 6] = [
        ("model", "a string", serde_json::Value::is_string),
        ("stream", "a boolean", serde_json::Value::is_boolean),
        ("max_tokens", "a whole number", serde_json::Value::is_u64),
        (
            "max_completion_tokens",
            "a whole number",
            serde_json::Value::is_u64,
        ),
        (
            "max_output_tokens",
            "a whole number",
            serde_json::Value::is_u64,
        ),
        ("stream_options", "an object", serde_json::Value::is_object),
    ];
    for (field, expected, ok) in checks {
        if let Some(v) = obj.get(field).filter(|v| !v.is_null() && !ok(v)) {
            return GatewayError::BadField {
                field,
                expected,
                found: kind(v),
            };
        }
    }
    GatewayError::BadJson(e.to_string())
}

/// Nesting the scanner follows; deeper bodies go to serde (whose own limit is 128).
const MAX_DEPTH: usize = 100;

/// The scanner: `Some` only for a body serde reads to the same [`Probe`]; `None` when unsure.
fn scan(bytes: &[u8]) -> Option<Probe<'_>> {
    let mut s = Scanner { b: bytes, i: 0 };
    let mut probe = Probe::default();
    // Routing fields seen: serde refuses a duplicate one.
    let mut seen = 0u8;
    let mut once = |bit: u8| -> Option<()> {
        if seen & bit != 0 {
            return None;
        }
        seen |= bit;
        Some(())
    };
    s.ws();
    s.eat(b'{')?;
    s.ws();
    if !s.eat_if(b'}') {
        loop {
            s.ws();
            let key = s.key()?;
            s.ws();
            s.eat(b':')?;
            s.ws();
            match key {
                b"model" => {
                    once(1)?;
                    probe.model = s.null_or(|s| s.plain_str().map(Cow::Borrowed))?;
                }
                b"stream" => {
                    once(2)?;
                    probe.stream = s.null_or(Scanner::bool)?;
                }
                b"max_tokens" => {
                    once(4)?;
                    probe.max_tokens = s.null_or(Scanner::count)?;
                }
                b"max_completion_tokens" => {
                    once(8)?;
                    probe.max_completion_tokens = s.null_or(Scanner::count)?;
                }
                b"max_output_tokens" => {
                    once(16)?;
                    probe.max_output_tokens = s.null_or(Scanner::count)?;
                }
                b"stream_options" => {
                    once(32)?;
                    probe.stream_options = s.null_or(Scanner::stream_options)?;
                }
                _ => s.value(1)?,
            }
            s.ws();
            match s.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
    }
    s.ws();
    (s.i == bytes.len()).then_some(probe)
}

/// Where a string's plain run ends in `s`: the index of its first quote, backslash (an
/// escape) or control character.
///
/// A prompt is almost all string, so this is the probe's cost per byte: a byte-by-byte
/// `position` ran at ~1.2 GB/s, half serde's speed at skipping the same body, and a `memchr`
/// call per run cost more than it saved on the short runs between a prompt's escapes. Eight
/// bytes are looked at at once (SWAR: a byte lane's high bit marks a match; borrows run only
/// upwards, so the lowest marked lane is exact).
fn plain_run(s: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    const QUOTES: u64 = ONES * b'"' as u64;
    const BACKSLASHES: u64 = ONES * b'\\' as u64;
    const SPACES: u64 = ONES * 0x20;
    let mut chunks = s.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let w = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let q = w ^ QUOTES;
        let b = w ^ BACKSLASHES;
        let hits =
            (q.wrapping_sub(ONES) & !q | b.wrapping_sub(ONES) & !b | w.wrapping_sub(SPACES) & !w)
                & HIGH;
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| at + p)
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    fn eat_if(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.i += 1;
        }
        hit
    }

    fn eat_word(&mut self, w: &[u8]) -> Option<()> {
        let end = self.i.checked_add(w.len())?;
        (self.b.get(self.i..end)? == w).then(|| self.i = end)
    }

    /// JSON's whitespace (what serde skips).
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// `null` as `None`, else what `f` reads.
    fn null_or<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.peek()? == b'n' {
            self.eat_word(b"null")?;
            return Some(None);
        }
        f(self).map(Some)
    }

    fn bool(&mut self) -> Option<bool> {
        match self.peek()? {
            b't' => self.eat_word(b"true").map(|()| true),
            b'f' => self.eat_word(b"false").map(|()| false),
            _ => None,
        }
    }

    /// A whole number as serde reads a `u64` ([`sluice_providers::json_count::read_count`]).
    fn count(&mut self) -> Option<u64> {
        let (n, end) = sluice_providers::json_count::read_count(self.b, self.i)?;
        self.i = end;
        Some(n)
    }

    /// A string without escapes, as UTF-8 text borrowed from the body.
    fn plain_str(&mut self) -> Option<&'a str> {
        let raw = self.raw_string()?;
        std::str::from_utf8(raw).ok()
    }

    /// A key: a string without escapes (an escaped key could spell a routing field), valid
    /// UTF-8 (serde reads keys as text).
    fn key(&mut self) -> Option<&'a [u8]> {
        let raw = self.raw_string()?;
        if !raw.is_ascii() {
            std::str::from_utf8(raw).ok()?;
        }
        Some(raw)
    }

    /// A string's bytes between its quotes; `None` at an escape or a control character.
    fn raw_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let rest = &self.b[self.i..];
        let n = plain_run(rest)?;
        if rest[n] != b'"' {
            return None;
        }
        self.i += n + 1;
        Some(&rest[..n])
    }

    /// Any string, escapes checked as serde checks a string it skips (any four hex digits
    /// after `\u`); control characters refused.
    fn string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let n = plain_run(&self.b[self.i..])?;
            self.i += n;
            match self.next()? {
                b'"' => return Some(()),
                b'\\' => match self.next()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        for _ in 0..4 {
                            if !self.next()?.is_ascii_hexdigit() {
                                return None;
                            }
                        }
                    }
                    _ => return None,
                },
                // A control character.
                _ => return None,
            }
        }
    }

    /// A number by JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        self.eat_if(b'-');
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat_if(b'.') {
            self.digit()?;
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digit()?;
            self.digits();
        }
        Some(())
    }

    fn digit(&mut self) -> Option<()> {
        self.next()?.is_ascii_digit().then_some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
    }

    /// Any JSON value, checked and skipped; `depth` is the nesting it sits in.
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string(),
            b't' => self.eat_word(b"true"),
            b'f' => self.eat_word(b"false"),
            b'n' => self.eat_word(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            b'[' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.i += 1;
                self.ws();
                if self.eat_if(b']') {
                    return Some(());
                }
                loop {
                    self.ws();
                    self.value(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => continue,
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b'{' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.i += 1;
                self.ws();
                if self.eat_if(b'}') {
                    return Some(());
                }
                loop {
                    self.ws();
                    self.key()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    self.value(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => continue,
                        b'}' => return Some(()),
                        _ => return None,
                    }
                }
            }
            _ => None,
        }
    }

    /// `stream_options` as an object (serde would also take an array: left to it).
    fn stream_options(&mut self) -> Option<ProbeStreamOptions> {
        self.eat(b'{')?;
        let mut opts = ProbeStreamOptions::default();
        let mut seen = false;
        self.ws();
        if self.eat_if(b'}') {
            return Some(opts);
        }
        loop {
            self.ws();
            let key = self.key()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            if key == b"include_usage" {
                if std::mem::replace(&mut seen, true) {
                    return None;
                }
                opts.include_usage = self.null_or(Scanner::bool)?;
            } else {
                self.value(2)?;
            }
            self.ws();
            match self.next()? {
                b',' => continue,
                b'}' => return Some(opts),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests;
