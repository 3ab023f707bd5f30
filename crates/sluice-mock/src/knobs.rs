//! Per-request behaviour: the `x-mock` header, merged over the server's defaults.
//!
//! Syntax: comma-separated `key=value` pairs (`key` alone for flags), e.g.
//! `x-mock: ttft_ms=2000, tokens=500, interval_ms=20`. Unknown keys and bad values are rejected
//! with a message naming the key, so a typo in a test never silently does nothing.

use std::time::Duration;

use sluice_sse::LineEnding;

/// Everything a request can ask the mock to do. Defaults give a short, quick, well-formed
/// response; the server's CLI flags replace the defaults, the `x-mock` header overrides both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Behavior {
    /// Delay before the first token (streaming) or before the response (non-streaming).
    pub ttft: Duration,
    /// Number of content tokens generated (capped by the request's `max_tokens`).
    pub tokens: u32,
    /// Gap between consecutive events of a stream.
    pub interval: Duration,
    /// Bytes of text per token; 0 keeps the natural word length.
    pub token_bytes: u32,
    /// Minimum size of a non-streaming response body; content is padded to reach it.
    pub body_bytes: u64,
    /// Status to answer with instead of a completion (429, 500, 503, ...), in the provider's
    /// error format.
    pub status: Option<u16>,
    /// `Retry-After` seconds sent with `status` (defaults to 1 for 429 and 503).
    pub retry_after: Option<u32>,
    /// A request header that must be present, else a 400 `missing_<name>` provider error.
    pub require_header: Option<String>,
    /// Line ending of the SSE stream.
    pub line_ending: LineEnding,
    /// A `: ping` comment every this often while the stream is otherwise silent.
    pub heartbeat: Option<Duration>,
    /// Makes one content event (the middle one) at least this many bytes.
    pub big_event: Option<u64>,
    /// Writes every event in pieces of at most this many bytes, each flushed on its own.
    pub split: Option<usize>,
    /// Makes the data of this event (0-based) invalid JSON.
    pub malformed: Option<u32>,
    /// Generates a tool/function call instead of text.
    pub tools: bool,
    /// After this many events: HTTP/1.1 closes the TCP connection, HTTP/2 sends
    /// RST_STREAM(INTERNAL_ERROR).
    pub abort_after: Option<u32>,
    /// After `.0` events, no bytes at all for `.1`.
    pub stall_after: Option<(u32, Duration)>,
    /// HTTP/2: RST_STREAM(REFUSED_STREAM) before processing. HTTP/1.1: the connection is
    /// closed without a response (the HTTP/1.1 way to say "not processed").
    pub refuse: bool,
    /// After accepting this many streams (HTTP/2) or requests (HTTP/1.1) on the connection the
    /// server starts a graceful GOAWAY (HTTP/1.1: `Connection: close`).
    pub goaway_after: Option<u32>,
    /// Throttles every write on this connection to this many bytes per second.
    pub degrade: Option<u64>,
    /// Reads the request body at this many bytes per second.
    pub slow_read: Option<u64>,
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            ttft: Duration::ZERO,
            tokens: 16,
            interval: Duration::ZERO,
            token_bytes: 0,
            body_bytes: 0,
            status: None,
            retry_after: None,
            require_header: None,
            line_ending: LineEnding::Lf,
            heartbeat: None,
            big_event: None,
            split: None,
            malformed: None,
            tools: false,
            abort_after: None,
            stall_after: None,
            refuse: false,
            goaway_after: None,
            degrade: None,
            slow_read: None,
        }
    }
}

/// Why an `x-mock` specification was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KnobError {
    /// The key is not one the mock knows.
    #[error("unknown x-mock key `{0}` (known: {KNOWN_KEYS})")]
    UnknownKey(String),
    /// The key is known but its value does not parse.
    #[error("bad value for x-mock key `{key}`: `{value}` ({expected})")]
    BadValue {
        /// The key.
        key: String,
        /// The value as given.
        value: String,
        /// What was expected instead.
        expected: &'static str,
    },
    /// The header is not valid UTF-8.
    #[error("the x-mock header is not valid UTF-8")]
    NotUtf8,
}

const KNOWN_KEYS: &str = "ttft_ms, tokens, interval_ms, token_bytes, body_bytes, status, \
retry_after, require_header, line_ending, heartbeat_ms, big_event, split, malformed, tools, \
abort_after, stall_after, refuse, goaway_after, degrade, slow_read";

/// Upper bounds that keep a single request from exhausting the mock (bounded everything).
const MAX_TOKENS: u32 = 10_000_000;
const MAX_BODY_BYTES: u64 = 1 << 30;

impl Behavior {
    /// Returns a copy of `self` with the settings in `spec` applied.
    ///
    /// # Errors
    /// [`KnobError`] naming the first unknown key or bad value.
    pub fn with_spec(&self, spec: &str) -> Result<Behavior, KnobError> {
        let mut b = self.clone();
        for item in spec.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item, None),
            };
            b.apply(key, value)?;
        }
        Ok(b)
    }

    fn apply(&mut self, key: &str, value: Option<&str>) -> Result<(), KnobError> {
        let v = value.unwrap_or("");
        let bad = |expected: &'static str| KnobError::BadValue {
            key: key.to_string(),
            value: v.to_string(),
            expected,
        };
        let ms = |expected| {
            v.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| bad(expected))
        };
        match key {
            "ttft_ms" => self.ttft = ms("milliseconds")?,
            "interval_ms" => self.interval = ms("milliseconds")?,
            "heartbeat_ms" => {
                let d = ms("milliseconds, at least 1")?;
                if d.is_zero() {
                    return Err(bad("milliseconds, at least 1"));
                }
                self.heartbeat = Some(d);
            }
            "tokens" => {
                self.tokens = parse_bounded(v, MAX_TOKENS as u64)
                    .map(|n| n as u32)
                    .ok_or_else(|| bad("a count up to 10000000"))?
            }
            "token_bytes" => {
                self.token_bytes = parse_bounded(v, 1 << 20)
                    .map(|n| n as u32)
                    .ok_or_else(|| bad("bytes, up to 1 MiB"))?
            }
            "body_bytes" => {
                self.body_bytes =
                    parse_bounded(v, MAX_BODY_BYTES).ok_or_else(|| bad("bytes, up to 1 GiB"))?
            }
            "big_event" => {
                self.big_event =
                    Some(parse_bounded(v, 256 << 20).ok_or_else(|| bad("bytes, up to 256 MiB"))?)
            }
            "status" => {
                let s = v
                    .parse::<u16>()
                    .ok()
                    .filter(|s| (200..=599).contains(s))
                    .ok_or_else(|| bad("an HTTP status from 200 to 599"))?;
                self.status = Some(s);
            }
            "retry_after" => {
                self.retry_after = Some(v.parse().map_err(|_| bad("seconds"))?);
            }
            "require_header" => {
                if v.is_empty() || http::HeaderName::from_bytes(v.as_bytes()).is_err() {
                    return Err(bad("a header name"));
                }
                self.require_header = Some(v.to_ascii_lowercase());
            }
            "line_ending" => {
                self.line_ending = match v {
                    "lf" => LineEnding::Lf,
                    "crlf" => LineEnding::CrLf,
                    "cr" => LineEnding::Cr,
                    _ => return Err(bad("lf, crlf or cr")),
                }
            }
            "split" => {
                self.split = Some(
                    parse_bounded(v, 1 << 20)
                        .filter(|&n| n > 0)
                        .ok_or_else(|| bad("bytes per write, at least 1"))?
                        as usize,
                )
            }
            "malformed" => self.malformed = Some(v.parse().map_err(|_| bad("an event index"))?),
            "tools" => self.tools = parse_flag(value).ok_or_else(|| bad("1, 0, true or false"))?,
            "refuse" => {
                self.refuse = parse_flag(value).ok_or_else(|| bad("1, 0, true or false"))?
            }
            "abort_after" => self.abort_after = Some(v.parse().map_err(|_| bad("an event count"))?),
            "goaway_after" => {
                let n: u32 = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| bad("a stream count, at least 1"))?;
                self.goaway_after = Some(n);
            }
            "stall_after" => {
                let (n, d) = v.split_once(':').ok_or_else(|| bad("EVENTS:MS"))?;
                let n = n.parse().map_err(|_| bad("EVENTS:MS"))?;
                let d = d.parse().map_err(|_| bad("EVENTS:MS"))?;
                self.stall_after = Some((n, Duration::from_millis(d)));
            }
            "degrade" => {
                self.degrade = Some(
                    v.parse()
                        .ok()
                        .filter(|&n: &u64| n > 0)
                        .ok_or_else(|| bad("bytes per second, at least 1"))?,
                )
            }
            "slow_read" => {
                // A bare `slow_read` reads at 1 KiB/s, slow enough to notice in any test.
                self.slow_read = Some(match value {
                    None => 1024,
                    Some(_) => v
                        .parse()
                        .ok()
                        .filter(|&n: &u64| n > 0)
                        .ok_or_else(|| bad("bytes per second, at least 1"))?,
                })
            }
            _ => return Err(KnobError::UnknownKey(key.to_string())),
        }
        Ok(())
    }
}

fn parse_bounded(v: &str, max: u64) -> Option<u64> {
    v.parse::<u64>().ok().filter(|&n| n <= max)
}

fn parse_flag(value: Option<&str>) -> Option<bool> {
    match value {
        None | Some("1") | Some("true") => Some(true),
        Some("0") | Some("false") => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_overrides_defaults() {
        let base = Behavior::default().with_spec("tokens=5").unwrap();
        let b = base
            .with_spec("ttft_ms=2000, interval_ms=20 ,line_ending=crlf,tools, stall_after=3:150")
            .unwrap();
        assert_eq!(b.tokens, 5);
        assert_eq!(b.ttft, Duration::from_millis(2000));
        assert_eq!(b.interval, Duration::from_millis(20));
        assert_eq!(b.line_ending, LineEnding::CrLf);
        assert!(b.tools);
        assert_eq!(b.stall_after, Some((3, Duration::from_millis(150))));
    }

    #[test]
    fn unknown_key_is_named() {
        let err = Behavior::default()
            .with_spec("tokens=3, ttft=5")
            .unwrap_err();
        assert_eq!(err, KnobError::UnknownKey("ttft".into()));
        assert!(err.to_string().contains("ttft_ms"), "{err}");
    }

    #[test]
    fn bad_values_are_named() {
        for spec in [
            "tokens=lots",
            "status=99",
            "line_ending=crcr",
            "stall_after=3",
            "degrade=0",
            "split=0",
            "heartbeat_ms=0",
            "refuse=maybe",
            "require_header=bad header",
        ] {
            let err = Behavior::default().with_spec(spec).unwrap_err();
            assert!(matches!(err, KnobError::BadValue { .. }), "{spec}: {err:?}");
        }
    }

    #[test]
    fn bare_slow_read_has_a_rate() {
        let b = Behavior::default().with_spec("slow_read").unwrap();
        assert_eq!(b.slow_read, Some(1024));
    }
}
