//! Byte-level looks into an event's JSON, for passthrough streams after their commit: finding a
//! key and the start of its value with `memchr`, without parsing the document.
//!
//! A key is recognised as `"name"` followed by optional whitespace and a colon. Inside a JSON
//! string every quote is escaped, so that byte sequence cannot come from a string's contents;
//! the only false match would be a key of the same name in a nested object, which the chunk
//! shapes we look into do not have.

use std::sync::LazyLock;

use memchr::memmem::Finder;

use super::json::JsonStr;

/// A key to look for, quotes included (`"usage"`), with its searcher built on first use.
pub(crate) struct Key(LazyLock<Finder<'static>>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Key")
            .field(&String::from_utf8_lossy(self.0.needle()))
            .finish()
    }
}

/// Declares a `static` [`Key`].
macro_rules! key {
    ($name:ident = $quoted:literal) => {
        pub(crate) static $name: Key = Key(LazyLock::new(|| Finder::new($quoted)));
    };
}

key!(FINISH_REASON = "\"finish_reason\"");
key!(USAGE = "\"usage\"");
key!(CHOICES = "\"choices\"");
key!(ERROR = "\"error\"");
key!(CONTENT = "\"content\"");
key!(TEXT = "\"text\"");
key!(DELTA = "\"delta\"");
key!(TOOL_CALLS = "\"tool_calls\"");
key!(USAGE_METADATA = "\"usageMetadata\"");
key!(FINISH_REASON_GEMINI = "\"finishReason\"");
key!(TYPE = "\"type\"");
key!(SEQUENCE_NUMBER = "\"sequence_number\"");
key!(UNICODE_ESCAPE = "\\u");

/// The value of the first occurrence of `key` in `data`, from its first byte to the end of
/// `data`.
pub(crate) fn value_of<'d>(data: &'d [u8], key: &Key) -> Option<&'d [u8]> {
    let finder = &*key.0;
    let mut from = 0;
    while let Some(i) = finder.find(&data[from..]) {
        let after = from + i + finder.needle().len();
        if let Some(rest) = skip_ws(&data[after..]).strip_prefix(b":") {
            return Some(skip_ws(rest));
        }
        from = after;
    }
    None
}

/// The first string value of `key` in `data` (occurrences with other values are skipped:
/// `logprobs.content` is an array, `delta.content` a string).
pub(crate) fn string_of<'d>(data: &'d [u8], key: &Key) -> Option<JsonStr<'d>> {
    let mut rest = data;
    while let Some(value) = value_of(rest, key) {
        if let Some(s) = string_at(value) {
            return Some(s);
        }
        rest = value;
    }
    None
}

/// Whether `data` has `key` with a value that starts with `first` (`{`, `[`, `"`).
pub(crate) fn has_value_starting(data: &[u8], key: &Key, first: u8) -> bool {
    value_of(data, key).is_some_and(|v| v.first() == Some(&first))
}

/// The string literal at the start of `value`, if it is one (and valid UTF-8).
pub(crate) fn string_at(value: &[u8]) -> Option<JsonStr<'_>> {
    if value.first() != Some(&b'"') {
        return None;
    }
    let mut at = 1;
    loop {
        let i = memchr::memchr2(b'"', b'\\', value.get(at..)?)?;
        at += i;
        if value[at] == b'\\' {
            at += 2;
            continue;
        }
        let lit = std::str::from_utf8(&value[..=at]).ok()?;
        return Some(JsonStr::from_literal(lit));
    }
}

/// Whether `value` starts with an empty array.
pub(crate) fn is_empty_array(value: &[u8]) -> bool {
    value
        .strip_prefix(b"[")
        .is_some_and(|rest| skip_ws(rest).first() == Some(&b']'))
}

/// Whether every `\uD800`-`\uDFFF` escape in `data` is half of a well-formed surrogate pair.
/// serde_json's `RawValue` lets a lone surrogate escape through, and strict parsers (serde_json
/// itself, on the client's side) reject the document it ends up in, so a translator must not
/// copy one.
pub(crate) fn surrogates_paired(data: &[u8]) -> bool {
    let mut from = 0;
    while let Some(i) = UNICODE_ESCAPE.0.find(&data[from..]) {
        let at = from + i;
        from = at + 2;
        // An escape only if the backslash is not itself escaped.
        let backslashes = data[..=at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            continue;
        }
        let Some(unit) = hex4(&data[at + 2..]) else {
            return false;
        };
        match unit {
            0xD800..=0xDBFF => {
                let low = data
                    .get(at + 6..at + 8)
                    .filter(|p| p == b"\\u")
                    .and_then(|_| hex4(&data[at + 8..]));
                if !matches!(low, Some(0xDC00..=0xDFFF)) {
                    return false;
                }
                from = at + 12;
            }
            0xDC00..=0xDFFF => return false,
            _ => {}
        }
    }
    true
}

fn hex4(b: &[u8]) -> Option<u16> {
    let digits = std::str::from_utf8(b.get(..4)?).ok()?;
    u16::from_str_radix(digits, 16).ok()
}

/// `[DONE]`, OpenAI's end marker.
pub(crate) fn is_done(data: &[u8]) -> bool {
    data.trim_ascii() == b"[DONE]"
}

fn skip_ws(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .count();
    &b[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values() {
        let d = br#"{"choices":[{"delta":{"content":"usage"},"finish_reason": "stop"}],"usage" :{"a":1}}"#;
        assert_eq!(value_of(d, &USAGE).unwrap()[0], b'{');
        assert_eq!(
            string_at(value_of(d, &FINISH_REASON).unwrap())
                .unwrap()
                .literal(),
            "\"stop\""
        );
        assert_eq!(
            string_at(value_of(d, &CONTENT).unwrap()).unwrap().literal(),
            "\"usage\""
        );
        let d = br#"{"delta":{"content":"say \"usage\": x\\"},"finish_reason":null}"#;
        assert!(value_of(d, &USAGE).is_none());
        assert_eq!(
            string_at(value_of(d, &CONTENT).unwrap())
                .unwrap()
                .unescape(),
            "say \"usage\": x\\"
        );
        assert!(!has_value_starting(d, &FINISH_REASON, b'"'));
        assert!(is_empty_array(b"[ ]"));
        assert!(!is_empty_array(b"[{}]"));
        assert!(is_done(b"[DONE]"));
        assert!(surrogates_paired(br#"{"t":"\ud83d\ude00 \u003c \\ud83d"}"#));
        assert!(!surrogates_paired(br#"{"t":"\ud83ds"}"#));
        assert!(!surrogates_paired(br#"{"t":"\ude00"}"#));
        assert!(!surrogates_paired(br#"{"t":"\ud83d"#));
        assert!(string_at(br#""unterminated\"#).is_none());
    }
}
