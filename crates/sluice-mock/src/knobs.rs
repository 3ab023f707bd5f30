//! Per-request behaviour: the `x-mock` header, merged over the server's defaults.
//!
//! Syntax: comma-separated `key=value` pairs (`key` alone for flags), e.g.
//! `x-mock: ttft_ms=2000, tokens=500, interval_ms=20`. Unknown keys and bad values are rejected
//! with a message naming the key, so a typo in a test never silently does nothing.

use std::time::Duration;

use sluice_sse::LineEnding;

// === impl Behavior ===

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
    /// A typed provider error to answer with instead of a completion, in the provider's real
    /// shape and status (see [`ErrorKind`]).
    pub error: Option<ErrorKind>,
    /// `Retry-After` seconds sent with `status` and `error=rate_limit` (defaults to 1 for 429
    /// and 503); Gemini carries it as `RetryInfo.retryDelay` in the body instead.
    pub retry_after: Option<u32>,
    /// Sends `Retry-After` as an HTTP date this many seconds from now instead of seconds.
    pub retry_after_date: Option<u32>,
    /// Streams: after `.0` content events, an in-stream error of kind `.1` in the provider's
    /// shape, then the stream ends without its normal end marker.
    pub stream_error_after: Option<(u32, ErrorKind)>,
    /// The output is filtered after this many content tokens, streamed or whole: a 200 with
    /// the provider's content-filter finish (OpenAI `content_filter`, Anthropic `refusal`,
    /// Responses `incomplete`, Gemini `SAFETY`).
    pub filter_after: Option<u32>,
    /// Fails the first N requests that share a failure key (see `fail_key`), then succeeds.
    pub fail_first: Option<u32>,
    /// The counter `fail_first` counts on; default: the whole `x-mock` header value.
    pub fail_key: Option<String>,
    /// How `fail_first`, `fail_for` and `flap` fail a request.
    pub fail_with: FailWith,
    /// Fails every request while the server is younger than this (since start or the last
    /// `/__mock/reset`).
    pub fail_for: Option<Duration>,
    /// Alternates healthy (`.0`) and failing (`.1`) periods, starting healthy at server start
    /// or the last `/__mock/reset`.
    pub flap: Option<(Duration, Duration)>,
    /// Reads the whole request (it IS processed), then resets the stream (HTTP/2
    /// RST_STREAM(INTERNAL_ERROR)) or closes the connection (HTTP/1.1) before any response byte.
    pub reset_before_headers: bool,
    /// Reads the whole request, then sends nothing at all until the client leaves (given up
    /// after [`SILENT_LIMIT`]).
    pub silent: bool,
    /// What to do with an assistant prefill (a trailing assistant message).
    pub prefill: PrefillMode,
    /// Reasoning ("thinking") tokens reported in usage on top of the content tokens.
    pub reasoning_tokens: u32,
    /// Prompt tokens reported as read from the provider's prompt cache, on top of the
    /// request's own (as if a cached prefix that long came first), in each provider's field.
    pub cache_read_tokens: u32,
    /// Prompt tokens reported as written to the prompt cache (Anthropic and Bedrock report
    /// them; OpenAI and Gemini have no such field, so there they are plain prompt tokens).
    pub cache_write_tokens: u32,
    /// The answer's text instead of generated words (ASCII, no comma), sent `token_bytes`
    /// bytes a token (default 4), so a test can put a given string, split across events, in
    /// an answer.
    pub say: Option<String>,
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
            error: None,
            retry_after: None,
            retry_after_date: None,
            stream_error_after: None,
            filter_after: None,
            fail_first: None,
            fail_key: None,
            fail_with: FailWith::Status(503),
            fail_for: None,
            flap: None,
            reset_before_headers: false,
            silent: false,
            prefill: PrefillMode::Continue,
            reasoning_tokens: 0,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            require_header: None,
            say: None,
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
    #[error("unknown x-mock key `{0}` (known: {known})", known = known_keys())]
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

/// How long `silent` keeps a request open before giving up on the client.
pub const SILENT_LIMIT: Duration = Duration::from_secs(600);

// === impl ErrorKind ===

/// A typed provider error, sent in the real shape and status of the API the request spoke
/// (the `error` and `stream_error_after` knobs, and `fail_with`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 429: OpenAI `rate_limit_exceeded`, Anthropic `rate_limit_error`, Gemini
    /// `RESOURCE_EXHAUSTED` with `RetryInfo`; `Retry-After` on OpenAI and Anthropic.
    RateLimit,
    /// 429 that must not be retried: OpenAI `insufficient_quota`, Anthropic spend limit,
    /// Gemini daily quota (`QuotaFailure`, no `RetryInfo`).
    Quota,
    /// Anthropic 529 `overloaded_error`, OpenAI 503, Gemini 503 `UNAVAILABLE`.
    Overloaded,
    /// 500: OpenAI `server_error`, Anthropic `api_error`, Gemini `INTERNAL`.
    Server,
    /// 400 context window exceeded (OpenAI `context_length_exceeded`, Anthropic "prompt is too
    /// long", Gemini "exceeds the maximum number of tokens allowed").
    ContextLength,
    /// Content filtered: OpenAI 400 `content_policy_violation`, Anthropic 400 "Output blocked
    /// by content filtering policy", Gemini 200 with `promptFeedback.blockReason: SAFETY`.
    /// In a stream: the provider's content-filter finish reason instead of an error event.
    ContentFilter,
    /// Azure OpenAI's 400 `content_filter` (`innererror.code: ResponsibleAIPolicyViolation`);
    /// on Anthropic and Gemini paths the same as `ContentFilter`.
    ContentFilterAzure,
    /// Bad credentials: OpenAI 401 `invalid_api_key`, Anthropic 401 `authentication_error`,
    /// Gemini 400 `INVALID_ARGUMENT` with reason `API_KEY_INVALID`.
    Auth,
    /// A generic 400 invalid request in the provider's shape.
    Invalid,
    /// 404 unknown model: OpenAI `model_not_found`, Anthropic `not_found_error`, Gemini
    /// `NOT_FOUND`.
    NotFound,
}

impl ErrorKind {
    #[cfg(test)]
    pub(crate) const ALL: [ErrorKind; 10] = [
        ErrorKind::RateLimit,
        ErrorKind::Quota,
        ErrorKind::Overloaded,
        ErrorKind::Server,
        ErrorKind::ContextLength,
        ErrorKind::ContentFilter,
        ErrorKind::ContentFilterAzure,
        ErrorKind::Auth,
        ErrorKind::Invalid,
        ErrorKind::NotFound,
    ];

    /// The knob spelling.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::RateLimit => "rate_limit",
            ErrorKind::Quota => "quota",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Server => "server",
            ErrorKind::ContextLength => "context_length",
            ErrorKind::ContentFilter => "content_filter",
            ErrorKind::ContentFilterAzure => "content_filter_azure",
            ErrorKind::Auth => "auth",
            ErrorKind::Invalid => "invalid",
            ErrorKind::NotFound => "not_found",
        }
    }

    fn parse(s: &str) -> Option<ErrorKind> {
        Some(match s {
            "rate_limit" => ErrorKind::RateLimit,
            "quota" => ErrorKind::Quota,
            "overloaded" => ErrorKind::Overloaded,
            "server" => ErrorKind::Server,
            "context_length" => ErrorKind::ContextLength,
            "content_filter" => ErrorKind::ContentFilter,
            "content_filter_azure" => ErrorKind::ContentFilterAzure,
            "auth" => ErrorKind::Auth,
            "invalid" => ErrorKind::Invalid,
            "not_found" => ErrorKind::NotFound,
            _ => return None,
        })
    }
}

const ERROR_KINDS: &str = "rate_limit, quota, overloaded, server, context_length, \
content_filter, content_filter_azure, auth, invalid or not_found";

/// How a request chosen to fail by `fail_first`, `fail_for_ms` or `flap` fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailWith {
    /// This status in the provider's error shape (default 503).
    Status(u16),
    /// A typed provider error.
    Error(ErrorKind),
    /// As `reset_before_headers`: processed, then RST_STREAM / connection closed.
    Reset,
    /// As `silent`: processed, then no response at all.
    Silent,
    /// The whole connection is closed (TCP FIN, no GOAWAY) before any response byte.
    Close,
}

/// What the mock does with an assistant prefill: a chat request ending with an assistant
/// message (Anthropic; OpenAI with `continue_final_message: true` or `"prefix": true`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefillMode {
    /// Continue the deterministic answer from where the prefill stops.
    Continue,
    /// Answer the provider's real 400 for models that do not support prefill.
    Reject,
}

// === parsing a spec: with_spec, apply ===

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
        let (_, set) = KNOBS
            .iter()
            .find(|(k, _)| *k == key)
            .ok_or_else(|| KnobError::UnknownKey(key.to_string()))?;
        set(self, &Arg { key, value })
    }
}

// === impl Arg, and the knob table ===

/// One `key=value` item being applied, with the readings the knobs share; each names the key,
/// the value and what was expected when the value does not parse.
struct Arg<'a> {
    key: &'a str,
    /// `None` for a bare `key` (a flag).
    value: Option<&'a str>,
}

impl Arg<'_> {
    /// The value; a bare key reads as `""`.
    fn v(&self) -> &str {
        self.value.unwrap_or("")
    }

    fn bad(&self, expected: &'static str) -> KnobError {
        KnobError::BadValue {
            key: self.key.to_string(),
            value: self.v().to_string(),
            expected,
        }
    }

    fn parse<T: std::str::FromStr>(&self, expected: &'static str) -> Result<T, KnobError> {
        self.v().parse().map_err(|_| self.bad(expected))
    }

    fn ms(&self, expected: &'static str) -> Result<Duration, KnobError> {
        self.parse::<u64>(expected).map(Duration::from_millis)
    }

    /// At most `max`.
    fn bounded(&self, max: u64, expected: &'static str) -> Result<u64, KnobError> {
        parse_bounded(self.v(), max).ok_or_else(|| self.bad(expected))
    }

    /// Bare, `1`, `true`, `0` or `false`.
    fn flag(&self) -> Result<bool, KnobError> {
        parse_flag(self.value).ok_or_else(|| self.bad("1, 0, true or false"))
    }

    /// More than 0.
    fn positive<T: std::str::FromStr + PartialOrd + Default>(
        &self,
        expected: &'static str,
    ) -> Result<T, KnobError> {
        self.v()
            .parse::<T>()
            .ok()
            .filter(|n| *n > T::default())
            .ok_or_else(|| self.bad(expected))
    }
}

/// How one knob sets its field of a [`Behavior`].
type Set = fn(&mut Behavior, &Arg<'_>) -> Result<(), KnobError>;

/// Every `x-mock` key and how it sets its field, in the order [`KnobError::UnknownKey`] lists
/// them. A table rather than a `match` so that the list of keys in that error is this table,
/// and a new knob is one row.
const KNOBS: &[(&str, Set)] = &[
    ("ttft_ms", |b, a| {
        b.ttft = a.ms("milliseconds")?;
        Ok(())
    }),
    ("tokens", |b, a| {
        b.tokens = a.bounded(MAX_TOKENS as u64, "a count up to 10000000")? as u32;
        Ok(())
    }),
    ("interval_ms", |b, a| {
        b.interval = a.ms("milliseconds")?;
        Ok(())
    }),
    ("token_bytes", |b, a| {
        b.token_bytes = a.bounded(1 << 20, "bytes, up to 1 MiB")? as u32;
        Ok(())
    }),
    ("body_bytes", |b, a| {
        b.body_bytes = a.bounded(MAX_BODY_BYTES, "bytes, up to 1 GiB")?;
        Ok(())
    }),
    ("status", |b, a| {
        let s = a
            .v()
            .parse::<u16>()
            .ok()
            .filter(|s| (200..=599).contains(s))
            .ok_or_else(|| a.bad("an HTTP status from 200 to 599"))?;
        b.status = Some(s);
        Ok(())
    }),
    ("error", |b, a| {
        b.error = Some(ErrorKind::parse(a.v()).ok_or_else(|| a.bad(ERROR_KINDS))?);
        Ok(())
    }),
    ("retry_after", |b, a| {
        b.retry_after = Some(a.parse("seconds")?);
        Ok(())
    }),
    ("retry_after_date", |b, a| {
        b.retry_after_date = Some(a.parse("seconds from now")?);
        Ok(())
    }),
    ("say", |b, a| {
        let v = a.v();
        if v.is_empty() || !v.is_ascii() || v.len() > 4096 {
            return Err(a.bad("ASCII text up to 4096 bytes"));
        }
        b.say = Some(v.to_string());
        Ok(())
    }),
    ("require_header", |b, a| {
        let v = a.v();
        if v.is_empty() || http::HeaderName::from_bytes(v.as_bytes()).is_err() {
            return Err(a.bad("a header name"));
        }
        b.require_header = Some(v.to_ascii_lowercase());
        Ok(())
    }),
    ("line_ending", |b, a| {
        b.line_ending = match a.v() {
            "lf" => LineEnding::Lf,
            "crlf" => LineEnding::CrLf,
            "cr" => LineEnding::Cr,
            _ => return Err(a.bad("lf, crlf or cr")),
        };
        Ok(())
    }),
    ("heartbeat_ms", |b, a| {
        let d = a.ms("milliseconds, at least 1")?;
        if d.is_zero() {
            return Err(a.bad("milliseconds, at least 1"));
        }
        b.heartbeat = Some(d);
        Ok(())
    }),
    ("big_event", |b, a| {
        b.big_event = Some(a.bounded(256 << 20, "bytes, up to 256 MiB")?);
        Ok(())
    }),
    ("split", |b, a| {
        let n = parse_bounded(a.v(), 1 << 20)
            .filter(|&n| n > 0)
            .ok_or_else(|| a.bad("bytes per write, at least 1"))?;
        b.split = Some(n as usize);
        Ok(())
    }),
    ("malformed", |b, a| {
        b.malformed = Some(a.parse("an event index")?);
        Ok(())
    }),
    ("tools", |b, a| {
        b.tools = a.flag()?;
        Ok(())
    }),
    ("reasoning_tokens", |b, a| {
        b.reasoning_tokens = a.bounded(MAX_TOKENS as u64, "a count up to 10000000")? as u32;
        Ok(())
    }),
    ("cache_read_tokens", |b, a| {
        b.cache_read_tokens = a.bounded(MAX_TOKENS as u64, "a count up to 10000000")? as u32;
        Ok(())
    }),
    ("cache_write_tokens", |b, a| {
        b.cache_write_tokens = a.bounded(MAX_TOKENS as u64, "a count up to 10000000")? as u32;
        Ok(())
    }),
    ("abort_after", |b, a| {
        b.abort_after = Some(a.parse("an event count")?);
        Ok(())
    }),
    ("filter_after", |b, a| {
        b.filter_after = Some(a.parse("a content token count")?);
        Ok(())
    }),
    ("stall_after", |b, a| {
        let (n, d) = a.v().split_once(':').ok_or_else(|| a.bad("EVENTS:MS"))?;
        let n = n.parse().map_err(|_| a.bad("EVENTS:MS"))?;
        let d = d.parse().map_err(|_| a.bad("EVENTS:MS"))?;
        b.stall_after = Some((n, Duration::from_millis(d)));
        Ok(())
    }),
    ("stream_error_after", |b, a| {
        let (n, kind) = match a.v().split_once(':') {
            Some((n, k)) => (n, ErrorKind::parse(k)),
            None => (a.v(), Some(ErrorKind::Overloaded)),
        };
        let n = n.parse().map_err(|_| a.bad("EVENTS[:KIND]"))?;
        let kind = kind.ok_or_else(|| a.bad("EVENTS[:KIND], KIND one of the error kinds"))?;
        b.stream_error_after = Some((n, kind));
        Ok(())
    }),
    ("refuse", |b, a| {
        b.refuse = a.flag()?;
        Ok(())
    }),
    ("reset_before_headers", |b, a| {
        b.reset_before_headers = a.flag()?;
        Ok(())
    }),
    ("silent", |b, a| {
        b.silent = a.flag()?;
        Ok(())
    }),
    ("fail_first", |b, a| {
        b.fail_first = Some(a.parse("a count")?);
        Ok(())
    }),
    ("fail_key", |b, a| {
        if a.v().is_empty() {
            return Err(a.bad("a non-empty name"));
        }
        b.fail_key = Some(a.v().to_string());
        Ok(())
    }),
    ("fail_with", |b, a| {
        let v = a.v();
        b.fail_with = match v {
            "reset" => FailWith::Reset,
            "silent" => FailWith::Silent,
            "close" => FailWith::Close,
            _ => match (v.parse::<u16>(), ErrorKind::parse(v)) {
                (Ok(s), _) if (400..=599).contains(&s) => FailWith::Status(s),
                (_, Some(kind)) => FailWith::Error(kind),
                _ => {
                    return Err(a.bad(
                        "an HTTP status from 400 to 599, an error kind, reset, silent or close",
                    ))
                }
            },
        };
        Ok(())
    }),
    ("fail_for_ms", |b, a| {
        b.fail_for = Some(a.ms("milliseconds")?);
        Ok(())
    }),
    ("flap", |b, a| {
        let parse = |s: &str| s.parse::<u64>().ok().filter(|&n| n > 0);
        let (up, down) = a
            .v()
            .split_once(':')
            .and_then(|(u, d)| Some((parse(u)?, parse(d)?)))
            .ok_or_else(|| a.bad("UP_MS:DOWN_MS, each at least 1"))?;
        b.flap = Some((Duration::from_millis(up), Duration::from_millis(down)));
        Ok(())
    }),
    ("prefill", |b, a| {
        b.prefill = match a.v() {
            "continue" => PrefillMode::Continue,
            "reject" => PrefillMode::Reject,
            _ => return Err(a.bad("continue or reject")),
        };
        Ok(())
    }),
    ("goaway_after", |b, a| {
        b.goaway_after = Some(a.positive::<u32>("a stream count, at least 1")?);
        Ok(())
    }),
    ("degrade", |b, a| {
        b.degrade = Some(a.positive::<u64>("bytes per second, at least 1")?);
        Ok(())
    }),
    ("slow_read", |b, a| {
        // A bare `slow_read` reads at 1 KiB/s, slow enough to notice in any test.
        b.slow_read = Some(match a.value {
            None => 1024,
            Some(_) => a.positive::<u64>("bytes per second, at least 1")?,
        });
        Ok(())
    }),
];

/// The keys of [`KNOBS`], for [`KnobError::UnknownKey`].
fn known_keys() -> String {
    KNOBS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
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
            "error=teapot",
            "stream_error_after=3:teapot",
            "stream_error_after=x",
            "fail_with=200",
            "fail_with=explode",
            "flap=100",
            "flap=0:100",
            "fail_key=",
            "prefill=maybe",
        ] {
            let err = Behavior::default().with_spec(spec).unwrap_err();
            assert!(matches!(err, KnobError::BadValue { .. }), "{spec}: {err:?}");
        }
    }

    #[test]
    fn fault_knobs_parse() {
        let b = Behavior::default()
            .with_spec(
                "error=rate_limit, retry_after_date=30, stream_error_after=2, fail_first=3, \
                 fail_key=a, fail_with=reset, flap=100:50, fail_for_ms=20, prefill=reject, silent",
            )
            .unwrap();
        assert_eq!(b.error, Some(ErrorKind::RateLimit));
        assert_eq!(b.retry_after_date, Some(30));
        assert_eq!(b.stream_error_after, Some((2, ErrorKind::Overloaded)));
        assert_eq!((b.fail_first, b.fail_key.as_deref()), (Some(3), Some("a")));
        assert_eq!(b.fail_with, FailWith::Reset);
        assert_eq!(
            b.flap,
            Some((Duration::from_millis(100), Duration::from_millis(50)))
        );
        assert_eq!(b.fail_for, Some(Duration::from_millis(20)));
        assert_eq!(b.prefill, PrefillMode::Reject);
        assert!(b.silent);
        let b = Behavior::default()
            .with_spec("fail_with=429, stream_error_after=0:server")
            .unwrap();
        assert_eq!(b.fail_with, FailWith::Status(429));
        assert_eq!(b.stream_error_after, Some((0, ErrorKind::Server)));
        let b = Behavior::default()
            .with_spec("fail_with=overloaded")
            .unwrap();
        assert_eq!(b.fail_with, FailWith::Error(ErrorKind::Overloaded));
    }

    #[test]
    fn bare_slow_read_has_a_rate() {
        let b = Behavior::default().with_spec("slow_read").unwrap();
        assert_eq!(b.slow_read, Some(1024));
    }

    #[test]
    fn every_key_is_one_row_and_listed_in_the_unknown_key_error() {
        let keys: Vec<&str> = KNOBS.iter().map(|(k, _)| *k).collect();
        let message = KnobError::UnknownKey("x".into()).to_string();
        for (i, key) in keys.iter().enumerate() {
            assert!(!keys[..i].contains(key), "{key} twice");
            assert!(message.contains(key), "{key}");
        }
    }

    #[test]
    fn every_error_kind_parses_and_is_listed() {
        for kind in ErrorKind::ALL {
            assert_eq!(ErrorKind::parse(kind.name()), Some(kind));
            assert!(ERROR_KINDS.contains(kind.name()), "{kind:?}");
        }
    }
}
