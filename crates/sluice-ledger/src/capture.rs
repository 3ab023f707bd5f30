//! Prompt and response capture: off by default; when on, per route, sampled, size-capped, and
//! redacted before it is kept (DESIGN.md invariant 12: no secret leaves).
//!
//! Redaction is a small scanner rather than a regex engine: the shapes are few and fixed
//! (credential-bearing header and field names, `Bearer`/`Basic` values, provider key prefixes)
//! and the scanner's cost is linear in the text, which is cut to the cap before it is scanned.

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// A request's captured prompt and response, already redacted and cut to the cap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capture {
    /// The request body (or the prompt part of it), redacted.
    pub prompt: String,
    /// The response body, or the streamed text, redacted.
    pub response: String,
    /// The prompt was longer than the cap and was cut.
    pub prompt_truncated: bool,
    /// The response was longer than the cap and was cut.
    pub response_truncated: bool,
}

impl Capture {
    /// Redacts `prompt` and `response` and cuts each to `max_bytes` (at a character boundary).
    ///
    /// Each text is first cut a little above the cap (so that a secret straddling the cap is
    /// still seen whole by the scanner), redacted, then cut to the cap: the work is bounded
    /// by the cap, not by the body.
    pub fn new(prompt: &str, response: &str, max_bytes: usize) -> Capture {
        let (prompt, prompt_truncated) = redact_capped(prompt, max_bytes);
        let (response, response_truncated) = redact_capped(response, max_bytes);
        Capture {
            prompt,
            response,
            prompt_truncated,
            response_truncated,
        }
    }
}

/// Longest secret the scanner must see whole when a text is cut.
const SECRET_MARGIN: usize = 512;

fn redact_capped(text: &str, max_bytes: usize) -> (String, bool) {
    let pre = cut(text, max_bytes.saturating_add(SECRET_MARGIN));
    let mut out = redact(pre);
    let truncated = text.len() > max_bytes || out.len() > max_bytes;
    let keep = cut(&out, max_bytes).len();
    out.truncate(keep);
    (out, truncated)
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Field and header names whose value is a credential (matched without regard to case, as a
/// whole word, followed by `:` or `=`, optionally quoted as in JSON).
const SECRET_NAMES: [&str; 14] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "api_key",
    "apikey",
    "x-goog-api-key",
    "password",
    "secret",
    "client_secret",
    "access_token",
    "refresh_token",
    "id_token",
    "cookie",
];

/// Prefixes of provider keys and tokens that are secret wherever they appear (OpenAI `sk-`,
/// Anthropic `sk-ant-`, Groq `gsk_`, Google `AIza`, GitHub `ghp_`/`github_pat_`, Slack `xox?-`,
/// AWS access key ids `AKIA`). A match needs [`MIN_KEY_LEN`] token characters in all.
const KEY_PREFIXES: [&str; 10] = [
    "sk-",
    "sk_",
    "gsk_",
    "AIza",
    "ghp_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "AKIA",
    "ASIA",
];

/// A key shape shorter than this is a word, not a key (`sk-learn`).
const MIN_KEY_LEN: usize = 16;

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Bytes that may appear in a `Bearer` token (RFC 6750 b64token) or a Basic credential.
fn is_b64token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/' | b'=')
}

fn starts_with_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    hay.len() >= needle.len() && hay[..needle.len()].eq_ignore_ascii_case(needle)
}

/// Replaces secrets in `text` with [`REDACTED`]: values of credential-bearing fields and
/// headers (`Authorization: ...`, `"api_key": "..."`, `password=...`), `Bearer`/`Basic`
/// credentials, and provider key shapes (`sk-...`, `AIza...`, ...) wherever they appear.
///
/// Everything matched is ASCII, so the text's other characters pass through untouched.
pub fn redact(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    // `copied` is how much of `text` is already in `out`.
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0 || !is_token_byte(b[i - 1]);
        if boundary {
            if let Some(end) = key_shape_at(b, i) {
                out.push_str(&text[copied..i]);
                out.push_str(REDACTED);
                copied = end;
                i = end;
                continue;
            }
            if let Some((value_start, value_end)) = auth_scheme_at(b, i) {
                out.push_str(&text[copied..value_start]);
                out.push_str(REDACTED);
                copied = value_end;
                i = value_end;
                continue;
            }
            if let Some((value_start, value_end)) = secret_field_at(b, i) {
                out.push_str(&text[copied..value_start]);
                out.push_str(REDACTED);
                copied = value_end;
                i = value_end;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    out
}

/// A provider key starting at `i`: its end.
fn key_shape_at(b: &[u8], i: usize) -> Option<usize> {
    let prefix = KEY_PREFIXES
        .iter()
        .find(|p| b[i..].starts_with(p.as_bytes()))?;
    let mut end = i + prefix.len();
    while end < b.len() && is_token_byte(b[end]) {
        end += 1;
    }
    (end - i >= MIN_KEY_LEN).then_some(end)
}

/// `Bearer <token>` or `Basic <credentials>` at `i`: the credential's span.
fn auth_scheme_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let scheme_len = [&b"bearer"[..], b"basic"]
        .iter()
        .find(|s| starts_with_ignore_case(&b[i..], s))?
        .len();
    let mut start = i + scheme_len;
    let spaces = b[start..].iter().take_while(|&&c| c == b' ').count();
    if spaces == 0 {
        return None;
    }
    start += spaces;
    let mut end = start;
    while end < b.len() && is_b64token_byte(b[end]) {
        end += 1;
    }
    let token = &b[start..end];
    // Words after "basic" are prose ("basic understanding"), not credentials: a Basic
    // credential is base64, long and rarely free of digits and padding.
    let credential = if scheme_len == b"basic".len() {
        token.len() >= 12
            && token
                .iter()
                .any(|c| c.is_ascii_digit() || matches!(c, b'=' | b'+' | b'/'))
    } else {
        token.len() >= 8
    };
    credential.then_some((start, end))
}

/// A credential-bearing name at `i` followed by `:` or `=` and a value: the value's span
/// (inside its quotes when quoted, else up to the end of the line or a separator).
fn secret_field_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let name = SECRET_NAMES
        .iter()
        .find(|n| starts_with_ignore_case(&b[i..], n.as_bytes()))?;
    let mut j = i + name.len();
    if j < b.len() && is_token_byte(b[j]) {
        return None; // a longer word (`secretary`, `api_keys_count`)
    }
    // `"api_key": "..."`: the name's closing quote.
    if j < b.len() && b[j] == b'"' {
        j += 1;
    }
    j += b[j..]
        .iter()
        .take_while(|c| **c == b' ' || **c == b'\t')
        .count();
    if j >= b.len() || !(b[j] == b':' || b[j] == b'=') {
        return None;
    }
    j += 1;
    j += b[j..]
        .iter()
        .take_while(|c| **c == b' ' || **c == b'\t')
        .count();
    if j >= b.len() {
        return None;
    }
    if b[j] == b'"' {
        // A JSON string: up to the closing quote that is not escaped.
        let start = j + 1;
        let mut k = start;
        while k < b.len() && b[k] != b'"' {
            k += if b[k] == b'\\' { 2 } else { 1 };
        }
        let end = k.min(b.len());
        return (end > start).then_some((start, end));
    }
    // A header or form value: the rest of the line, or up to a separator.
    let start = j;
    let end = b[start..]
        .iter()
        .position(|&c| matches!(c, b'\r' | b'\n' | b'&' | b',' | b'}' | b';' | b'"' | b'\''))
        .map_or(b.len(), |p| start + p);
    (end > start).then_some((start, end))
}

/// Whether a request is captured: capture is on, the route is one of `routes` (all routes
/// when empty), and the request id falls in the sampled fraction. The decision is a hash of
/// the request id, so it needs no random source and the same request is decided the same way
/// everywhere.
pub fn sampled(request_id: &str, sample_rate: f64) -> bool {
    if sample_rate >= 1.0 {
        return true;
    }
    if sample_rate <= 0.0 || sample_rate.is_nan() {
        return false;
    }
    // FNV-1a, then a finaliser so that ids differing only at the end spread evenly.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in request_id.as_bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    // 53 bits are all an f64 holds exactly.
    ((h >> 11) as f64) < sample_rate * (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_in_each_shape() {
        let cases = [
            (
                "Authorization: Bearer sk-abc123def456ghi789jkl\r\nHost: x",
                "Authorization: [REDACTED]\r\nHost: x",
            ),
            (
                r#"{"api_key": "hunter2-very-secret", "model": "gpt-4o"}"#,
                r#"{"api_key": "[REDACTED]", "model": "gpt-4o"}"#,
            ),
            (
                "my key is sk-proj-AAAAbbbbCCCCdddd1234 ok",
                "my key is [REDACTED] ok",
            ),
            (
                "use AIzaSyA1234567890abcdefghijklmnopqrstu",
                "use [REDACTED]",
            ),
            (
                "curl -H 'x-api-key: sk-ant-api03-xyzxyzxyzxyzxyz' ...",
                "curl -H 'x-api-key: [REDACTED]' ...",
            ),
            (
                "token=abc&password=pw123&x=1",
                "token=abc&password=[REDACTED]&x=1",
            ),
            ("bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "bearer [REDACTED]"),
            (
                r#"{"access_token":"a\"b\"c","n":1}"#,
                r#"{"access_token":"[REDACTED]","n":1}"#,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(redact(input), want, "input: {input}");
        }
    }

    #[test]
    fn ordinary_text_passes_through() {
        for text in [
            "the basic idea is sound, basic understanding",
            "pip install sk-learn",
            "\"max_tokens\": 100, \"secretary\": \"Ann\"",
            "naïve café — ünïcödé",
            "Bearer",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn capture_is_cut_at_the_cap_after_redaction() {
        // A key straddling the cap is redacted, not left half-visible.
        let prompt = format!("{} sk-abcdefghijklmnopqrstuvwxyz0123", "a".repeat(19));
        let c = Capture::new(&prompt, "ok", 25);
        assert_eq!(c.prompt, "aaaaaaaaaaaaaaaaaaa [REDA");
        assert!(c.prompt_truncated);
        assert!(!c.prompt.contains("sk-abc"));
        assert_eq!(c.response, "ok");
        assert!(!c.response_truncated);
        // Cuts land on character boundaries.
        let c = Capture::new("ééé", "", 3);
        assert_eq!(c.prompt, "é");
    }

    #[test]
    fn sampling_follows_the_rate() {
        assert!(sampled("any", 1.0));
        assert!(!sampled("any", 0.0));
        let hits = (0..20_000)
            .filter(|i| sampled(&format!("req-{i}"), 0.1))
            .count();
        assert!((1_700..2_300).contains(&hits), "{hits} of 20000 at 10%");
        // The same id is decided the same way each time.
        assert_eq!(sampled("req-7", 0.5), sampled("req-7", 0.5));
    }
}
