//! One line of an event stream, classified by the WHATWG "interpret an event stream" rules.
//!
//! Classification works on bytes, not decoded text. That is equivalent to the spec, which decodes
//! UTF-8 first: every byte the rules look at (CR, LF, `:`, space, NUL, digits, field names) is
//! ASCII, and a UTF-8 decoder never turns invalid bytes into ASCII, so the lines, fields and
//! values found are the same ones, and replacing invalid sequences later, per value, gives the same
//! text.

use memchr::memchr;

/// What one complete line (terminator already removed) means. Offsets index into the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// An empty line: dispatch.
    Blank,
    /// `:` then text; the text starts at this offset (one leading space removed).
    Comment(usize),
    /// `data` field; the value starts at this offset.
    Data(usize),
    /// `event` field; the value starts at this offset.
    Event(usize),
    /// `id` field without NUL; the value starts at this offset.
    Id(usize),
    /// `retry` field; `None` when the value is not all ASCII digits (or overflows u64) and is ignored.
    Retry(Option<u64>),
    /// A field the spec ignores: unknown names, and `id` values containing NUL. It still opens an
    /// event block, so the block's bytes stay together.
    Ignored,
}

/// Classifies one line.
pub(crate) fn classify(line: &[u8]) -> Line {
    // The hot path: nearly every line of an LLM stream is `data: ...`.
    if let Some(rest) = line.strip_prefix(b"data:") {
        return Line::Data(line.len() - rest.len() + usize::from(rest.first() == Some(&b' ')));
    }
    match line.first() {
        None => return Line::Blank,
        Some(b':') => return Line::Comment(skip_space(line, 1)),
        Some(_) => {}
    }
    let (name, value) = match memchr(b':', line) {
        Some(colon) => (&line[..colon], skip_space(line, colon + 1)),
        // No colon: the whole line is the field name and the value is empty.
        None => (line, line.len()),
    };
    match name {
        b"data" => Line::Data(value),
        b"event" => Line::Event(value),
        b"id" if memchr(0, &line[value..]).is_some() => Line::Ignored,
        b"id" => Line::Id(value),
        b"retry" => Line::Retry(parse_retry(&line[value..])),
        _ => Line::Ignored,
    }
}

/// Removes one leading space, as the spec does for values (and we do for comment text).
fn skip_space(line: &[u8], at: usize) -> usize {
    if line.get(at) == Some(&b' ') {
        at + 1
    } else {
        at
    }
}

/// ASCII digits only, else the field is ignored. The spec's "only ASCII digits" is read as "one or
/// more": browsers ignore an empty `retry:`. A value too large for u64 is ignored too (as
/// Chromium does) rather than clamped, so no value the server did not send is ever reported.
fn parse_retry(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_fast_path_and_general_path_agree() {
        assert_eq!(classify(b"data: x"), Line::Data(6));
        assert_eq!(classify(b"data:x"), Line::Data(5));
        assert_eq!(classify(b"data:  x"), Line::Data(6));
        assert_eq!(classify(b"data"), Line::Data(4));
    }

    #[test]
    fn field_names_are_exact_and_case_sensitive() {
        assert_eq!(classify(b"Data: x"), Line::Ignored);
        assert_eq!(classify(b"data : x"), Line::Ignored);
        assert_eq!(classify(b"event:e"), Line::Event(6));
        assert_eq!(classify(b"id: 1"), Line::Id(4));
        assert_eq!(classify(b"id: a\0b"), Line::Ignored);
    }

    #[test]
    fn retry_values() {
        assert_eq!(classify(b"retry: 1500"), Line::Retry(Some(1500)));
        assert_eq!(classify(b"retry:0"), Line::Retry(Some(0)));
        assert_eq!(classify(b"retry: "), Line::Retry(None));
        assert_eq!(classify(b"retry: 15s"), Line::Retry(None));
        assert_eq!(classify(b"retry: -1"), Line::Retry(None));
        assert_eq!(classify(b"retry:  1"), Line::Retry(None));
        assert_eq!(
            classify(b"retry: 99999999999999999999999"),
            Line::Retry(None)
        );
    }

    #[test]
    fn comments_and_blank() {
        assert_eq!(classify(b""), Line::Blank);
        assert_eq!(classify(b":"), Line::Comment(1));
        assert_eq!(classify(b": ping"), Line::Comment(2));
        assert_eq!(classify(b"::x"), Line::Comment(1));
    }
}
