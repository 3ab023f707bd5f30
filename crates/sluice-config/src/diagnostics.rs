//! Turning what went wrong into a message a user can act on: the field path, the line, the fix.
//!
//! serde reports *what* failed; `serde_path_to_error` adds *where* as a field path; the spanned
//! document gives the line of that path. Unknown fields and values get the closest known one
//! as a suggestion.

use std::ops::Range;

use serde_path_to_error::Segment;
use toml::de::{DeTable, DeValue};

use super::ConfigError;

/// The 1-based line of a byte offset. Counting newlines before the offset (not `lines()`,
/// which drops a trailing empty line) keeps a span that starts a line on that line.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// A TOML syntax error: no field path, the parser's message and line.
pub(super) fn syntax_error(text: &str, e: &toml::de::Error) -> ConfigError {
    let mut reason = e.message().trim_end().to_string();
    if let Some(span) = e.span() {
        // The parser's words are terse ("duplicate key"); the line itself shows what it means.
        let start = text[..span.start.min(text.len())]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        let line = text[start..].lines().next().unwrap_or("").trim();
        if !line.is_empty() {
            reason.push_str(&format!(" in `{line}`"));
        }
    }
    let mut err = ConfigError::new("", reason);
    err.line = e.span().map(|s| line_of(text, s.start));
    err
}

/// A typed-deserialization error, with its path and a reason rewritten to say the fix.
pub(super) fn deserialize_error(
    text: &str,
    e: serde_path_to_error::Error<toml::de::Error>,
) -> ConfigError {
    let path = path_string(e.path().iter());
    let inner = e.into_inner();
    let message = inner.message().trim_end();
    let mut err = rewrite(&path, message);
    // The document lookup (by path, done by the caller) is more precise than the span the
    // deserializer had; keep this one for errors without a path.
    err.line = inner.span().map(|s| line_of(text, s.start));
    err
}

/// `upstream[0].timeouts.idle` from serde_path_to_error's segments. Segments it could not name
/// (inside untagged or internally tagged enums) end the path there.
fn path_string<'a>(segments: impl Iterator<Item = &'a Segment>) -> String {
    let mut out = String::new();
    for s in segments {
        match s {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Enum { .. } => {}
            Segment::Unknown => break,
        }
    }
    out
}

/// serde's wording → ours: the field in the path, the expected form first, a suggestion for a
/// misspelling.
fn rewrite(path: &str, message: &str) -> ConfigError {
    // The path of an unknown field already ends with it; of a missing one, not yet.
    let join = |field: &str| {
        if path == field || path.ends_with(&format!(".{field}")) {
            path.to_string()
        } else if path.is_empty() {
            field.to_string()
        } else {
            format!("{path}.{field}")
        }
    };
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let (unknown, known) = quoted(rest);
        let field = unknown.unwrap_or_default();
        let reason = match closest(field, &known) {
            Some(best) => format!("unknown field; did you mean `{best}`?"),
            None if known.is_empty() => "unknown field; this table takes no fields".to_string(),
            None => format!("unknown field; expected one of {}", list(&known)),
        };
        return ConfigError::new(join(field), reason);
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (unknown, known) = quoted(rest);
        let value = unknown.unwrap_or_default();
        let mut reason = format!("`{value}` is not one of {}", list(&known));
        if let Some(best) = closest(value, &known) {
            reason.push_str(&format!("; did you mean `{best}`?"));
        }
        return ConfigError::new(path, reason);
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        let (field, _) = quoted(rest);
        return ConfigError::new(
            join(field.unwrap_or_default()),
            "is required but missing".to_string(),
        );
    }
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            return ConfigError::new(path, format!("expected {expected}, found {found}"));
        }
    }
    // toml's word for "not a string" where an enum's name was expected.
    if message == "wanted string or table" {
        return ConfigError::new(path, "expected a string");
    }
    ConfigError::new(path, message.to_string())
}

/// The first backquoted word of serde's message, and the rest (the known names).
fn quoted(s: &str) -> (Option<&str>, Vec<&str>) {
    let mut words = s.split('`').skip(1).step_by(2);
    let first = words.next();
    (first, words.collect())
}

fn list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The known name closest to `word`, if one is close enough to be a likely typo (the same
/// measure and threshold clap uses for its "did you mean").
pub(super) fn closest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::jaro(word, k), *k))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// The span of `path` in the document: the key of the last field named (the value's start for
/// an array element), or of the deepest part of the path that exists.
pub(super) fn locate(doc: &DeTable<'_>, path: &str) -> Option<Range<usize>> {
    let mut table = doc;
    let mut value: Option<&DeValue<'_>> = None;
    let mut found: Option<Range<usize>> = None;
    for part in path.split('.') {
        let (key, indices) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if let Some(DeValue::Table(t)) = value {
            table = t;
        } else if value.is_some() {
            return found;
        }
        let Some((k, v)) = table.iter().find(|(k, _)| k.get_ref() == key) else {
            return found;
        };
        found = Some(k.span());
        value = Some(v.get_ref());
        for index in indices
            .split(['[', ']'])
            .filter(|s| !s.is_empty())
            .filter_map(|s| s.parse::<usize>().ok())
        {
            let Some(DeValue::Array(items)) = value else {
                return found;
            };
            let Some(item) = items.get(index) else {
                return found;
            };
            // An `[[upstream]]` element's span is its header line; an inline element's its
            // value.
            found = Some(item.span());
            value = Some(item.get_ref());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_count_from_one_and_a_span_at_a_line_start_is_on_that_line() {
        let text = "a = 1\nb = 2\n\nc = 3";
        assert_eq!(line_of(text, 0), 1);
        assert_eq!(line_of(text, 6), 2);
        assert_eq!(line_of(text, 13), 4);
    }

    #[test]
    fn suggestions_for_typos_only() {
        let known = ["listen", "tls", "heartbeat", "max_request_body"];
        assert_eq!(closest("heartbeet", &known), Some("heartbeat"));
        assert_eq!(closest("max_requst_body", &known), Some("max_request_body"));
        assert_eq!(closest("colour", &known), None);
    }

    #[test]
    fn locate_finds_keys_tables_and_elements() {
        let text =
            "[server]\nlisten = \"x\"\n\n[[upstream]]\nname = \"a\"\n\n[[upstream]]\nname = \
                    \"b\"\ntimeouts = { idle = 30 }\nmodels = [\"a\",\n  \"b\"]\n";
        let doc = DeTable::parse(text).unwrap();
        let line = |path: &str| locate(doc.get_ref(), path).map(|s| line_of(text, s.start));
        assert_eq!(line("server.listen"), Some(2));
        assert_eq!(line("upstream[1].name"), Some(8));
        assert_eq!(line("upstream[1].timeouts.idle"), Some(9));
        assert_eq!(line("upstream[1].models[1]"), Some(11));
        // A missing field: the deepest part that exists.
        assert_eq!(line("upstream[1].base_url"), Some(7));
        assert_eq!(line("route"), None);
    }
}
