//! The response cache's key: a SHA-256 over everything that changes the answer (DESIGN.md
//! invariant 14), computed here because only this crate knows which request fields are
//! answer-neutral. Pure: bytes in, bytes out.
//!
//! The gateway calls [`canonical_body`] on the client's body, then [`cache_key`] with the
//! endpoint, the model as served (after aliasing), the canonical body and the namespace (the
//! virtual key's id, or the route's name when the route shares its answers), and hands the
//! digest to `sluice_state::CacheKey`.
//!
//! Canonical form: the JSON parsed and written again with every object's keys sorted (by
//! their UTF-8 bytes, at every depth), no insignificant whitespace, strings escaped as
//! serde_json writes them (so `"\u00e9"` and `"é"` are one string) and numbers as serde_json
//! prints them (`1.0` and `1.00` are one number, `1` and `1.0` are two; whole numbers beyond
//! what a double tells apart stay as written), with the top-level fields of [`IGNORED`] left
//! out. Duplicate keys keep the last, as JSON parsers do. Sorting is explicit, so the result
//! does not depend on whether serde_json's `preserve_order` feature is on in the build.

use std::borrow::Cow;
use std::io::Write;

use serde_json::Number;

/// The request fields left out of the key because they cannot change the answer, as paths
/// from the top of the body (`a.b`: field `b` of the object under `a`).
///
/// | field | why it is left out |
/// |---|---|
/// | `stream` | transport only: a stored answer is replayed as a stream or as one body, whichever the client asks for |
/// | `stream_options` | transport only (OpenAI `include_usage`, `include_obfuscation`): how the stream is framed, not what it says |
/// | `user` | OpenAI's end-user id, for the provider's abuse monitoring; never seen by the model |
/// | `metadata.user_id` | Anthropic's end-user id, the same thing; `metadata` is then left out too if nothing else is in it |
///
/// Everything else counts, `model` included (the served model is keyed separately, so two
/// aliases of one model merely miss each other's entries: the safe direction).
pub const IGNORED: &[&str] = &[
    // Transport only: the cache replays a stored answer as the client asks.
    "stream",
    // Transport only: stream framing (usage chunk, obfuscation padding).
    "stream_options",
    // OpenAI's end-user id, for abuse monitoring; the model never sees it.
    "user",
    // Anthropic's end-user id, for abuse monitoring; the model never sees it.
    "metadata.user_id",
];

/// Largest magnitude a number may have and still be told apart from its neighbours: serde_json
/// reads integers beyond `u64`/`i64` as doubles, which merge distinct integers above 2^53.
const MAX_EXACT_FLOAT: f64 = 9_007_199_254_740_992.0; // 2^53

/// Deepest nesting of arrays and objects read: serde_json's own limit.
const MAX_DEPTH: usize = 127;

/// Why a body has no canonical form (the request is then not cached: a miss, never an error
/// for the client).
#[derive(Debug, thiserror::Error)]
pub enum CanonicalError {
    /// The body is not one JSON value.
    #[error("the body is not JSON: {reason} at byte {at}")]
    NotJson {
        /// Where reading stopped.
        at: usize,
        /// What was wrong there.
        reason: &'static str,
    },
}

impl CanonicalError {
    /// A low-cardinality label for metrics: `not_json`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CanonicalError::NotJson { .. } => "not_json",
        }
    }
}

/// The canonical form of a request body: sorted keys at every depth, no insignificant
/// whitespace, the fields of [`IGNORED`] left out (see the module's doc).
///
/// One pass over the bytes, without building a `serde_json::Value`: a string already written
/// as serde_json would write it (no escapes, or only the ones serde_json makes) is copied as
/// it is, and only other strings and numbers go through serde_json. That is what keeps a hit
/// on a 64 KiB prompt within the cache's budget (about half the time of parsing into a
/// `Value` and writing it out: ~90 µs); the tests check the result is byte for byte that
/// slower way's (numbers aside: see `write_number`).
///
/// # Errors
/// The body is not one JSON value.
pub fn canonical_body(body: &[u8]) -> Result<Vec<u8>, CanonicalError> {
    if let Err(e) = std::str::from_utf8(body) {
        return Err(CanonicalError::NotJson {
            at: e.valid_up_to(),
            reason: "invalid UTF-8",
        });
    }
    let mut reader = Reader { src: body, pos: 0 };
    let mut out = Vec::with_capacity(body.len());
    reader.value(&mut out, 0, Strip::Top)?;
    reader.ws();
    if reader.pos != body.len() {
        return Err(reader.fail("trailing characters"));
    }
    Ok(out)
}

/// Which fields of an object are left out.
#[derive(Clone, Copy)]
enum Strip {
    /// The body itself: the top-level fields of [`IGNORED`], and the inner ones below theirs.
    Top,
    /// An object under a top-level field named in [`IGNORED`] (`metadata`): this inner field.
    Inner(&'static str),
    /// Anything else: nothing.
    None,
}

/// A field of an object being read: its key (unescaped, to sort by) and its canonical
/// `"key":value` bytes in the object's buffer.
struct Field<'a> {
    key: Cow<'a, [u8]>,
    span: std::ops::Range<usize>,
    dropped: bool,
}

/// A string as read: its bytes between the quotes, and whether serde_json would write it the
/// same way.
struct RawString {
    inner: std::ops::Range<usize>,
    escaped: bool,
    canonical: bool,
}

struct Reader<'a> {
    src: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn fail(&self, reason: &'static str) -> CanonicalError {
        CanonicalError::NotJson {
            at: self.pos,
            reason,
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.src.get(self.pos) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Result<(), CanonicalError> {
        self.ws();
        if self.src.get(self.pos) != Some(&byte) {
            return Err(self.fail(reason));
        }
        self.pos += 1;
        Ok(())
    }

    /// Writes the canonical form of the value at the cursor. Returns true when it was an
    /// object that had its [`Strip::Inner`] field and nothing else (it is then left out).
    fn value(
        &mut self,
        out: &mut Vec<u8>,
        depth: usize,
        strip: Strip,
    ) -> Result<bool, CanonicalError> {
        self.ws();
        match self.src.get(self.pos) {
            Some(b'{') => return self.object(out, depth + 1, strip),
            Some(b'[') => self.array(out, depth + 1)?,
            Some(b'"') => {
                let raw = self.string()?;
                self.write_string(out, &raw)?;
            }
            Some(b't') => self.literal(out, b"true")?,
            Some(b'f') => self.literal(out, b"false")?,
            Some(b'n') => self.literal(out, b"null")?,
            Some(b'-' | b'0'..=b'9') => self.number(out)?,
            Some(_) => return Err(self.fail("expected a value")),
            None => return Err(self.fail("unexpected end")),
        }
        Ok(false)
    }

    fn literal(&mut self, out: &mut Vec<u8>, word: &[u8]) -> Result<(), CanonicalError> {
        if !self.src[self.pos..].starts_with(word) {
            return Err(self.fail("expected a value"));
        }
        self.pos += word.len();
        out.extend_from_slice(word);
        Ok(())
    }

    fn array(&mut self, out: &mut Vec<u8>, depth: usize) -> Result<(), CanonicalError> {
        if depth > MAX_DEPTH {
            return Err(self.fail("nested too deep"));
        }
        self.pos += 1;
        out.push(b'[');
        self.ws();
        if self.src.get(self.pos) == Some(&b']') {
            self.pos += 1;
            out.push(b']');
            return Ok(());
        }
        loop {
            self.value(out, depth, Strip::None)?;
            self.ws();
            match self.src.get(self.pos) {
                Some(b',') => out.push(b','),
                Some(b']') => break,
                _ => return Err(self.fail("expected `,` or `]`")),
            }
            self.pos += 1;
        }
        self.pos += 1;
        out.push(b']');
        Ok(())
    }

    fn object(
        &mut self,
        out: &mut Vec<u8>,
        depth: usize,
        strip: Strip,
    ) -> Result<bool, CanonicalError> {
        if depth > MAX_DEPTH {
            return Err(self.fail("nested too deep"));
        }
        self.pos += 1;
        self.ws();
        if self.src.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            out.extend_from_slice(b"{}");
            return Ok(false);
        }
        // Each field is written here as it is read, then the fields are copied out sorted.
        let mut buf = Vec::new();
        let mut fields: Vec<Field<'a>> = Vec::new();
        loop {
            self.expect(b'"', "expected a key")?;
            self.pos -= 1;
            let raw = self.string()?;
            let key: Cow<'a, [u8]> = if raw.escaped {
                Cow::Owned(self.unescape(&raw)?.into_bytes())
            } else {
                Cow::Borrowed(&self.src[raw.inner.clone()])
            };
            self.expect(b':', "expected `:`")?;
            let start = buf.len();
            self.write_string(&mut buf, &raw)?;
            buf.push(b':');
            let (mut dropped, inner) = match strip {
                Strip::Top => ignored(&key),
                Strip::Inner(name) => (*key == *name.as_bytes(), Strip::None),
                Strip::None => (false, Strip::None),
            };
            dropped |= self.value(&mut buf, depth, inner)?;
            fields.push(Field {
                key,
                span: start..buf.len(),
                dropped,
            });
            self.ws();
            match self.src.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b'}') => break,
                _ => return Err(self.fail("expected `,` or `}`")),
            }
        }
        self.pos += 1;
        // Stable, so of fields with one key the last read stays last: JSON parsers keep the
        // last of duplicate keys, and so does the key.
        fields.sort_by(|a, b| a.key.cmp(&b.key));
        let mut kept = 0;
        let mut removed = false;
        out.push(b'{');
        for (i, field) in fields.iter().enumerate() {
            if fields.get(i + 1).is_some_and(|next| next.key == field.key) {
                continue;
            }
            if field.dropped {
                removed = true;
                continue;
            }
            if kept > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&buf[field.span.clone()]);
            kept += 1;
        }
        out.push(b'}');
        let emptied = matches!(strip, Strip::Inner(_)) && removed && kept == 0;
        Ok(emptied)
    }

    /// Reads a string at the cursor (on its opening quote).
    fn string(&mut self) -> Result<RawString, CanonicalError> {
        self.pos += 1;
        let start = self.pos;
        let (mut escaped, mut canonical) = (false, true);
        loop {
            let rest = &self.src[self.pos..];
            let Some(n) = memchr::memchr2(b'"', b'\\', rest) else {
                self.pos = self.src.len();
                return Err(self.fail("unterminated string"));
            };
            // A fold rather than `any`: without the early exit it compiles to SIMD compares.
            if rest[..n].iter().fold(false, |found, &b| found | (b < 0x20)) {
                self.pos += rest[..n].iter().position(|&b| b < 0x20).unwrap_or(0);
                return Err(self.fail("control character in string"));
            }
            self.pos += n;
            if rest[n] == b'"' {
                let inner = start..self.pos;
                self.pos += 1;
                return Ok(RawString {
                    inner,
                    escaped,
                    canonical,
                });
            }
            escaped = true;
            match self.src.get(self.pos + 1) {
                Some(b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't') => self.pos += 2,
                Some(b'/') => {
                    canonical = false;
                    self.pos += 2;
                }
                Some(b'u') => {
                    let hex = self
                        .src
                        .get(self.pos + 2..self.pos + 6)
                        .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                        .ok_or_else(|| self.fail("invalid \\u escape"))?;
                    // serde_json writes `\u00xx`, lowercase, for the controls without a short
                    // escape, and nothing else.
                    let code = hex.iter().fold(0u32, |n, &h| {
                        n * 16 + char::from(h).to_digit(16).unwrap_or(0)
                    });
                    let lower = hex.iter().all(|h| !h.is_ascii_uppercase());
                    if !(lower && code < 0x20 && ![8, 9, 10, 12, 13].contains(&code)) {
                        canonical = false;
                    }
                    self.pos += 6;
                }
                _ => return Err(self.fail("invalid escape")),
            }
        }
    }

    fn unescape(&self, raw: &RawString) -> Result<String, CanonicalError> {
        let quoted = &self.src[raw.inner.start - 1..raw.inner.end + 1];
        serde_json::from_slice(quoted).map_err(|_| CanonicalError::NotJson {
            at: raw.inner.start,
            reason: "invalid string",
        })
    }

    fn write_string(&self, out: &mut Vec<u8>, raw: &RawString) -> Result<(), CanonicalError> {
        if raw.canonical {
            out.extend_from_slice(&self.src[raw.inner.start - 1..raw.inner.end + 1]);
            return Ok(());
        }
        let s = self.unescape(raw)?;
        serde_json::to_writer(&mut *out, &s).map_err(|_| self.fail("unwritable string"))
    }

    fn number(&mut self, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
        let start = self.pos;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.src.get(self.pos) {
            self.pos += 1;
        }
        let text = &self.src[start..self.pos];
        // Most numbers are small integers, which serde_json prints exactly as written.
        let digits = text.strip_prefix(b"-").unwrap_or(text);
        let plain = !digits.is_empty()
            && digits.len() <= 18
            && digits.iter().all(u8::is_ascii_digit)
            && (digits[0] != b'0' || (digits.len() == 1 && digits.len() == text.len()));
        if plain {
            out.extend_from_slice(text);
            return Ok(());
        }
        let n: Number = serde_json::from_slice(text).map_err(|_| CanonicalError::NotJson {
            at: start,
            reason: "invalid number",
        })?;
        write_number(out, &n, text);
        Ok(())
    }
}

/// Whether a top-level field is left out, and how its value is read.
fn ignored(key: &[u8]) -> (bool, Strip) {
    for path in IGNORED {
        match path.split_once('.') {
            None if path.as_bytes() == key => return (true, Strip::None),
            Some((outer, inner)) if outer.as_bytes() == key => return (false, Strip::Inner(inner)),
            _ => {}
        }
    }
    (false, Strip::None)
}

/// Writes a number as serde_json prints it (integers exactly, doubles as their shortest
/// round-trip form), except where that could merge numbers an upstream tells apart, which
/// are written as they came:
/// - a double whose text has more than 15 significant digits: serde_json's reader (without
///   its `float_roundtrip` feature) may round those to a neighbouring double
///   (`9007199254740991.0` reads as `9007199254740990.0`); up to 15 digits, distinct texts are
///   distinct doubles;
/// - a whole double of 2^53 or more (`1e25`, or an integer beyond 64 bits): `18446744073709551616`
///   and `18446744073709551617` are one double, but two integers to a reader that keeps them.
///
/// So `1.50` and `1.5` are one number; `1e25` and `1E25` merely miss each other (the safe way).
fn write_number(out: &mut Vec<u8>, n: &Number, text: &[u8]) {
    if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
        let whole_and_large = f.fract() == 0.0 && f.abs() >= MAX_EXACT_FLOAT;
        if whole_and_large || significant_digits(text) > 15 {
            out.extend_from_slice(text);
            return;
        }
    }
    // `Number`'s Display is serde_json's own output: ryu for doubles, itoa for integers.
    write!(out, "{n}").expect("writing to a Vec cannot fail");
}

/// Digits of a number's mantissa from its first non-zero one (`-0.00120e5`: 3).
fn significant_digits(text: &[u8]) -> usize {
    text.iter()
        .take_while(|&&b| b != b'e' && b != b'E')
        .filter(|b| b.is_ascii_digit())
        .skip_while(|&&b| b == b'0')
        .count()
}

/// The cache key of a request: SHA-256 over a version tag and the four fields, each prefixed
/// with its length (so `("ab", "c")` and `("a", "bc")` differ).
///
/// - `endpoint`: what the client called, e.g. `Operation::as_str()` (`chat_completions`);
/// - `served_model`: the model after aliasing, the one the upstream is asked for;
/// - `canonical`: [`canonical_body`] of the body;
/// - `namespace`: whose answers these are: the virtual key's id (the default), or the
///   route's name on a route that shares answers between keys on purpose. The caller keeps
///   the two apart (e.g. `key:k42`, `route:chat`) so a key named like a route sees nothing.
pub fn cache_key(
    endpoint: &str,
    served_model: &str,
    canonical: &[u8],
    namespace: &str,
) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    // Changing the canonical form changes this tag, so old entries are never misread.
    for field in [
        b"sluice-cache-v1".as_slice(),
        endpoint.as_bytes(),
        served_model.as_bytes(),
        canonical,
        namespace.as_bytes(),
    ] {
        ctx.update(&(field.len() as u64).to_be_bytes());
        ctx.update(field);
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(ctx.finish().as_ref());
    key
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    use super::*;

    /// The canonical form the slow, obvious way: parse into a `Value`, drop the ignored fields,
    /// write it out with sorted keys. [`canonical_body`] must agree with it byte for byte.
    fn oracle(body: &[u8]) -> Option<Vec<u8>> {
        fn drop_ignored(top: &mut Map<String, Value>) {
            for path in IGNORED {
                match path.split_once('.') {
                    None => {
                        top.remove(*path);
                    }
                    Some((outer, inner)) => {
                        let Some(Value::Object(nested)) = top.get_mut(outer) else {
                            continue;
                        };
                        if nested.remove(inner).is_some() && nested.is_empty() {
                            top.remove(outer);
                        }
                    }
                }
            }
        }
        fn write(out: &mut Vec<u8>, value: &Value) -> Option<()> {
            match value {
                Value::Number(n) => write_number(out, n, n.to_string().as_bytes()),
                Value::Array(items) => {
                    out.push(b'[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        write(out, item)?;
                    }
                    out.push(b']');
                }
                Value::Object(map) => {
                    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                    out.push(b'{');
                    for (i, (key, item)) in entries.into_iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        serde_json::to_writer(&mut *out, key).ok()?;
                        out.push(b':');
                        write(out, item)?;
                    }
                    out.push(b'}');
                }
                other => serde_json::to_writer(&mut *out, other).ok()?,
            }
            Some(())
        }
        let mut value: Value = serde_json::from_slice(body).ok()?;
        if let Value::Object(top) = &mut value {
            drop_ignored(top);
        }
        let mut out = Vec::new();
        write(&mut out, &value)?;
        Some(out)
    }

    fn canon(s: &str) -> String {
        String::from_utf8(canonical_body(s.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn keys_are_sorted_at_every_depth_and_whitespace_goes() {
        assert_eq!(
            canon(r#" { "b" : [ {"y":1, "x": "é\u00e9"} ], "a": {"d": null, "c": true} } "#),
            r#"{"a":{"c":true,"d":null},"b":[{"x":"éé","y":1}]}"#
        );
        // Escapes are serde_json's: control characters and quotes only.
        assert_eq!(canon(r#"{"k":"\"\n\u0001\/"}"#), r#"{"k":"\"\n\u0001/"}"#);
    }

    #[test]
    fn numbers_are_written_as_serde_json_prints_them() {
        assert_eq!(
            canon(r#"{"t":1.00,"u":1e2,"v":-0,"w":7}"#),
            r#"{"t":1.0,"u":100.0,"v":-0.0,"w":7}"#
        );
        assert_eq!(canon("[0.1, 1.5e-7]"), "[0.1,1.5e-7]");
        // Distinct whole numbers a double cannot keep apart stay apart, as written.
        for body in ["[18446744073709551617]", "[1e300]", "[-9007199254740992.0]"] {
            assert_eq!(canon(body), body);
        }
        assert_ne!(
            canon("[18446744073709551617]"),
            canon("[18446744073709551616]")
        );
        // Beyond 15 significant digits, as written: serde_json may read them a double off.
        assert_eq!(
            canon("[9007199254740991.0, 0.1000000000000000055]"),
            "[9007199254740991.0,0.1000000000000000055]"
        );
        assert_eq!(
            canon("[1e15, 123456789.012345, -0.00120e5]"),
            "[1000000000000000.0,123456789.012345,-120.0]"
        );
        assert_eq!(significant_digits(b"-0.00120e5"), 3);
        assert_eq!(
            canon("[18446744073709551615, -9223372036854775808]"),
            "[18446744073709551615,-9223372036854775808]"
        );
    }

    #[test]
    fn ignored_fields_go_only_where_they_are_named() {
        assert_eq!(
            canon(
                r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"user":"u"}"#
            ),
            r#"{"model":"m"}"#
        );
        assert_eq!(canon(r#"{"metadata":{"user_id":"u"}}"#), "{}");
        assert_eq!(
            canon(r#"{"metadata":{"user_id":"u","tag":"x"}}"#),
            r#"{"metadata":{"tag":"x"}}"#
        );
        // Below the top, the same names are content.
        assert_eq!(
            canon(r#"{"messages":[{"user":"u","stream":1}]}"#),
            r#"{"messages":[{"stream":1,"user":"u"}]}"#
        );
        assert!(canonical_body(b"{").is_err());
        assert!(canonical_body(b"{} x").is_err());
        assert_eq!(canon(r#""text""#), r#""text""#);
    }

    #[test]
    fn the_fast_reader_agrees_with_serde_json_on_hand_picked_bodies() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        for body in [
            r#"{"a":"\/\u0041\u00E9\u00e9\u001f\u001F\u0008\b\ud83d\ude00 ok"}"#,
            r#"{"k\u0041":1,"kA":2,"k\"":3,"k#":4}"#,
            r#"{"dup":1,"dup":{"x":2}}"#,
            r#"{"metadata":{"user_id":"u"},"metadata":{"a":1}}"#,
            r#"{"metadata":{"a":1},"metadata":{"user_id":"u"}}"#,
            r#"{"metadata":{"user_id":"u","user_id":"v"}}"#,
            r#"{"metadata":{}}"#,
            r#"{"metadata":"user_id"}"#,
            r#"{"metadata":[{"user_id":1}]}"#,
            "[0, -0, 12, -12, 1.0, 1.50, 1e2, 1E+2, -1.5e-3, 123456789012345678]",
            "[1234567890123456789, 18446744073709551615, -9223372036854775808]",
            "[9007199254740993, 0.1, 5e-324, 1.5e-300, 900719925474099.0]",
            "[01]",
            "[1.]",
            "[.5]",
            "[-]",
            "[1e400]",
            "[+1]",
            "[1 2]",
            "[1,]",
            "{\"a\":1,}",
            "\"\\ud83d\"",
            "\"\\ude00x\"",
            "\"a\tb\"",
            "\"\\x\"",
            "\"\\u12\"",
            "tru",
            "nul",
            " true ",
            "\u{feff}{}",
            "",
            "   ",
            "{\"a\" 1}",
            "{1:2}",
            &deep(100),
            &deep(127),
            &deep(128),
            &deep(129),
            &deep(300),
        ] {
            let fast = canonical_body(body.as_bytes()).ok();
            assert_eq!(fast, oracle(body.as_bytes()), "{body}");
        }
        assert!(canonical_body(b"\"\xff\"").is_err());
    }

    #[test]
    fn fields_are_length_prefixed() {
        let k = |e: &str, m: &str, b: &[u8], n: &str| cache_key(e, m, b, n);
        assert_ne!(k("ab", "c", b"{}", "n"), k("a", "bc", b"{}", "n"));
        assert_ne!(k("e", "m", b"{}x", "n"), k("e", "m", b"{}", "xn"));
        assert_eq!(k("e", "m", b"{}", "n"), k("e", "m", b"{}", "n"));
    }

    /// A JSON value whose objects keep the order they were generated in, so tests can write
    /// the same object with its keys in several orders (serde_json's `Value` may sort them).
    #[derive(Clone, Debug)]
    enum J {
        Null,
        Bool(bool),
        Int(i64),
        Float(f64),
        Str(String),
        Arr(Vec<J>),
        Obj(Vec<(String, J)>),
    }

    /// How to write a [`J`]: keys in order or reversed, and with whitespace or not.
    #[derive(Clone, Copy)]
    struct Style {
        reversed: bool,
        spaced: bool,
    }

    impl J {
        fn write(&self, out: &mut String, style: Style) {
            let gap = if style.spaced { " \n\t " } else { "" };
            match self {
                J::Null => out.push_str("null"),
                J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                J::Int(i) => out.push_str(&i.to_string()),
                J::Float(f) => out.push_str(&serde_json::to_string(f).unwrap()),
                J::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
                J::Arr(items) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(gap);
                        item.write(out, style);
                    }
                    out.push_str(gap);
                    out.push(']');
                }
                J::Obj(entries) => {
                    out.push('{');
                    let mut order: Vec<&(String, J)> = entries.iter().collect();
                    if style.reversed {
                        order.reverse();
                    }
                    for (i, (k, v)) in order.into_iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(gap);
                        out.push_str(&serde_json::to_string(k).unwrap());
                        out.push_str(gap);
                        out.push(':');
                        v.write(out, style);
                    }
                    out.push_str(gap);
                    out.push('}');
                }
            }
        }

        fn text(&self, style: Style) -> String {
            let mut out = String::new();
            self.write(&mut out, style);
            out
        }
    }

    fn json() -> impl Strategy<Value = J> {
        let leaf = prop_oneof![
            Just(J::Null),
            any::<bool>().prop_map(J::Bool),
            any::<i64>().prop_map(J::Int),
            (-1e9f64..1e9).prop_map(J::Float),
            "[a-z\"\\\\é\n ]{0,8}".prop_map(J::Str),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(J::Arr),
                prop::collection::btree_map("[a-z_]{1,6}", inner, 0..6)
                    .prop_map(|m| J::Obj(m.into_iter().collect())),
            ]
        })
    }

    /// A request body: an object with generated fields, none of them an ignored one.
    fn body() -> impl Strategy<Value = Vec<(String, J)>> {
        prop::collection::btree_map("[a-z]{1,8}", json(), 1..8).prop_map(|m| {
            m.into_iter()
                .filter(|(k, _)| !IGNORED.contains(&k.as_str()) && k != "metadata")
                .collect()
        })
    }

    fn key_of(text: &str, namespace: &str) -> [u8; 32] {
        let canonical = canonical_body(text.as_bytes()).expect("canonical");
        cache_key("chat_completions", "gpt-4o", &canonical, namespace)
    }

    const PLAIN: Style = Style {
        reversed: false,
        spaced: false,
    };

    /// JSON text with the spellings a reader must get right: escapes of every kind (some
    /// canonical, some not), numbers in many forms, duplicate keys, whitespace.
    fn wild_json() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            "[a-zA-Z0-9 é😀#]{1,3}",
            prop::sample::select(vec![
                "\\n",
                "\\t",
                "\\\"",
                "\\\\",
                "\\/",
                "\\u0041",
                "\\u00e9",
                "\\u00E9",
                "\\u001f",
                "\\u001F",
                "\\u0008",
                "\\b",
                "\\f",
                "\\r",
                "\\ud83d\\ude00",
                "\\u0000",
                "\\u007f",
            ])
            .prop_map(String::from),
        ];
        let string = prop::collection::vec(piece, 0..4).prop_map(|p| format!("\"{}\"", p.concat()));
        let number = prop::sample::select(vec![
            "0",
            "-0",
            "7",
            "-12",
            "1.0",
            "1.50",
            "1e2",
            "1E+2",
            "-1.5e-3",
            "0.1",
            "123456789012345678",
            "1234567890123456789",
            "18446744073709551615",
            "-9223372036854775808",
            "9007199254740993",
            "2.5e10",
            "1e15",
            "123456789.012345",
        ])
        .prop_map(String::from);
        let leaf = prop_oneof![
            string.clone(),
            number,
            prop::sample::select(vec!["true", "false", "null"]).prop_map(String::from),
        ];
        let ws = prop::sample::select(vec!["", " ", "\n\t", "\r\n  "]);
        leaf.prop_recursive(4, 40, 5, move |inner| {
            let keys = prop_oneof![
                string.clone(),
                prop::sample::select(vec![
                    "\"stream\"",
                    "\"user\"",
                    "\"metadata\"",
                    "\"user_id\"",
                    "\"a\"",
                    "\"b\"",
                    "\"stream_options\"",
                ])
                .prop_map(String::from),
            ];
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..5), ws.clone())
                    .prop_map(|(items, ws)| format!("[{ws}{}{ws}]", items.join(&format!("{ws},")))),
                (prop::collection::vec((keys, inner), 0..5), ws.clone()).prop_map(
                    |(fields, ws)| {
                        let fields: Vec<String> = fields
                            .into_iter()
                            .map(|(k, v)| format!("{k}{ws}:{ws}{v}"))
                            .collect();
                        format!("{{{ws}{}{ws}}}", fields.join(","))
                    }
                ),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn the_fast_reader_agrees_with_serde_json(text in wild_json()) {
            let fast = canonical_body(text.as_bytes()).ok();
            prop_assert_eq!(&fast, &oracle(text.as_bytes()), "{}", text);
            // A damaged body is refused or read as serde_json reads it.
            for cut in [1, text.len() / 2, text.len().saturating_sub(1)] {
                let bytes = &text.as_bytes()[..cut.min(text.len())];
                prop_assert_eq!(canonical_body(bytes).ok(), oracle(bytes), "{:?}", bytes);
            }
        }
    }

    proptest! {
        #[test]
        fn key_order_and_whitespace_do_not_change_the_key(fields in body()) {
            let body = J::Obj(fields);
            let plain = key_of(&body.text(PLAIN), "k1");
            for reversed in [false, true] {
                for spaced in [false, true] {
                    let text = body.text(Style { reversed, spaced });
                    prop_assert_eq!(key_of(&text, "k1"), plain, "{}", text);
                }
            }
            // Canonical is a fixed point.
            let once = canonical_body(body.text(PLAIN).as_bytes()).unwrap();
            prop_assert_eq!(canonical_body(&once).unwrap(), once);
        }

        #[test]
        fn ignored_fields_do_not_change_the_key(
            fields in body(),
            stream in any::<bool>(),
            usage in any::<bool>(),
            user in "[a-z0-9-]{0,12}",
            at in 0usize..8,
        ) {
            let plain = key_of(&J::Obj(fields.clone()).text(PLAIN), "k1");
            let mut with = fields;
            let extra = [
                ("stream".to_string(), J::Bool(stream)),
                ("stream_options".to_string(), J::Obj(vec![("include_usage".into(), J::Bool(usage))])),
                ("user".to_string(), J::Str(user.clone())),
                ("metadata".to_string(), J::Obj(vec![("user_id".into(), J::Str(user))])),
            ];
            for (i, field) in extra.into_iter().enumerate() {
                let pos = (at + i).min(with.len());
                with.insert(pos, field);
            }
            prop_assert_eq!(key_of(&J::Obj(with).text(Style { reversed: true, spaced: true }), "k1"), plain);
        }

        #[test]
        fn any_other_field_changes_the_key(
            fields in body(),
            name in "[a-z]{1,8}",
            value in json(),
            namespace in "[a-z0-9]{1,8}",
        ) {
            let plain = key_of(&J::Obj(fields.clone()).text(PLAIN), "k1");
            // A new field.
            prop_assume!(!IGNORED.contains(&name.as_str()) && name != "metadata");
            prop_assume!(fields.iter().all(|(k, _)| *k != name));
            let mut with = fields.clone();
            with.push((name, value.clone()));
            prop_assert_ne!(key_of(&J::Obj(with).text(PLAIN), "k1"), plain);
            // A changed value: wrapped in an array, it is another value.
            let mut changed = fields;
            let old = std::mem::replace(&mut changed[0].1, J::Null);
            changed[0].1 = J::Arr(vec![old]);
            prop_assert_ne!(key_of(&J::Obj(changed).text(PLAIN), "k1"), plain);
            // Another namespace.
            prop_assume!(namespace != "k1");
            prop_assert_ne!(key_of(&J::Obj(vec![]).text(PLAIN), &namespace), key_of("{}", "k1"));
        }
    }
}
