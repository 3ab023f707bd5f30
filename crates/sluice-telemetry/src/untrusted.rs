//! Client-supplied text on its way into a log line or an error body: escaped, so that it can
//! forge no line, no field and no terminal escape, and capped, so that a 10 MB `model` makes
//! neither a 10 MB log line nor a 10 MB error body.

use std::fmt::{self, Write as _};

/// Most bytes of one client value written to a log line.
pub const LOG_CAP: usize = 256;

/// Most bytes of client input echoed in an error body.
pub const ECHO_CAP: usize = 64;

/// A client-supplied value as a log field.
///
/// Printed as it is when it is made only of characters that cannot break a `key=value` text
/// line (ASCII letters, digits and `-._:/@+`); otherwise quoted, with `"`, `\`, control,
/// line-separator and bidirectional-override characters escaped. Past [`LOG_CAP`] bytes it is
/// cut and the cut is said inside the quotes: `"xxxx…[cut 9999744 bytes]"`.
///
/// NOTE: the quoting applies in the JSON log format too (where the JSON encoder would have
/// sufficed), so that one rule holds for both formats; only unusual values are quoted.
pub struct Untrusted<'a> {
    text: &'a str,
    cap: usize,
}

impl<'a> Untrusted<'a> {
    /// A client value: at most [`LOG_CAP`] bytes.
    pub fn new(text: &'a str) -> Self {
        Untrusted { text, cap: LOG_CAP }
    }

    /// A message of ours that may quote client input: at most 1 KiB.
    pub fn message(text: &'a str) -> Self {
        Untrusted { text, cap: 1024 }
    }
}

impl fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (head, cut) = split_at_most(self.text, self.cap);
        if cut == 0 && !head.is_empty() && head.bytes().all(plain) {
            return f.write_str(head);
        }
        f.write_char('"')?;
        write_escaped(f, head)?;
        if cut > 0 {
            write!(f, "…[cut {cut} bytes]")?;
        }
        f.write_char('"')
    }
}

/// Client input as an error message may quote it: escaped as in [`Untrusted`] (without the
/// quotes: the JSON body quotes it) and at most [`ECHO_CAP`] bytes, with the cut said.
pub fn echo(s: &str) -> String {
    echo_at_most(s, ECHO_CAP)
}

/// [`echo`] with another cap, for messages that quote client input inside text of their own.
pub fn echo_at_most(s: &str, cap: usize) -> String {
    let (head, cut) = split_at_most(s, cap);
    let mut out = String::with_capacity(head.len() + 24);
    // Writing into a String cannot fail.
    let _ = write_escaped(&mut out, head);
    if cut > 0 {
        let _ = write!(out, "…[cut {cut} bytes]");
    }
    out
}

/// At most `max` bytes of `s`, cut at a character boundary.
pub fn prefix(s: &str, max: usize) -> &str {
    split_at_most(s, max).0
}

/// At most `max` bytes of `s`, cut at a character boundary, and how many bytes were left out.
pub fn split_at_most(s: &str, max: usize) -> (&str, usize) {
    if s.len() <= max {
        return (s, 0);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], s.len() - end)
}

/// Appends `text` as [`Untrusted`] would print it when it needs neither quotes nor a cut, and
/// says whether it did (the common case, without going through `fmt`).
pub fn push_plain(out: &mut String, text: &str) -> bool {
    let ok = !text.is_empty() && text.len() <= LOG_CAP && text.bytes().all(plain);
    if ok {
        out.push_str(text);
    }
    ok
}

fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._:/@+".contains(&b)
}

fn write_escaped(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    for c in s.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if hidden(c) => write!(out, "\\u{{{:x}}}", u32::from(c))?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

/// Characters that move the cursor, end a line, or reorder text in a terminal or an editor:
/// C0/C1 controls (ESC starts ANSI sequences), U+2028/2029, bidi marks and overrides, BOM.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}' | '\u{feff}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_values_are_printed_as_they_are() {
        for v in [
            "gpt-4o",
            "claude-3.5-sonnet@2024",
            "sl-1f2e-7",
            "org/model:tag+1",
        ] {
            assert_eq!(Untrusted::new(v).to_string(), v);
        }
    }

    #[test]
    fn anything_that_could_forge_a_line_or_a_field_is_quoted_and_escaped() {
        assert_eq!(
            Untrusted::new("a status=999").to_string(),
            r#""a status=999""#
        );
        assert_eq!(
            Untrusted::new("m\n2024-01-01 INFO request status=200").to_string(),
            r#""m\n2024-01-01 INFO request status=200""#
        );
        assert_eq!(
            Untrusted::new("\u{1b}[31mred").to_string(),
            r#""\u{1b}[31mred""#
        );
        assert_eq!(Untrusted::new(r#"a"b\c"#).to_string(), r#""a\"b\\c""#);
        assert_eq!(Untrusted::new("x\u{202e}y").to_string(), r#""x\u{202e}y""#);
        assert_eq!(Untrusted::new("").to_string(), r#""""#);
        // Non-ASCII text is kept (quoted), only hidden characters are escaped.
        assert_eq!(Untrusted::new("模型").to_string(), "\"模型\"");
    }

    #[test]
    fn long_values_are_cut_and_say_so() {
        let big = "x".repeat(10 << 20);
        let s = Untrusted::new(&big).to_string();
        assert!(s.len() < LOG_CAP + 40, "{}", s.len());
        assert!(s.ends_with(&format!("…[cut {} bytes]\"", (10 << 20) - LOG_CAP)));
        // A cut never splits a character.
        let multi = "é".repeat(200);
        let s = echo(&multi);
        assert!(s.starts_with(&"é".repeat(ECHO_CAP / 2)), "{s}");
        assert!(s.ends_with("…[cut 336 bytes]"), "{s}");
        assert_eq!(echo("short"), "short");
        assert_eq!(echo("a\nb"), "a\\nb");
    }
}
