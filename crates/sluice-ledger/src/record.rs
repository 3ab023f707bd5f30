//! The request record: one per request that reached admission (DESIGN.md invariant 13).
//!
//! Plain data, built once when the request settles and moved into the ledger's queue. Names
//! that repeat across requests (route, upstream, key, team) are `Arc<str>` clones of the
//! config's strings, codes that come from a fixed table (client API, end reason, attempt
//! classes) are `&'static str`, so building a record allocates nothing beyond what the request
//! itself carried (its id, the model names it sent) and, only when capture is on, the captured
//! text.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::capture::Capture;

/// One request's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// When the request was admitted, in microseconds since the Unix epoch (UTC).
    pub ts_us: i64,
    /// The request id the gateway gave the request (also in its access log and traces).
    pub request_id: Arc<str>,
    /// The virtual key's id (never the key itself), `None` on keyless routes.
    pub key_id: Option<Arc<str>>,
    /// The key's team, if it has one.
    pub team: Option<Arc<str>>,
    /// The key's owner, if it has one.
    pub owner: Option<Arc<str>>,
    /// The route's name.
    pub route: Arc<str>,
    /// The API the client spoke, e.g. `openai.chat`, `anthropic.messages`, `gemini.generate`.
    pub client_api: &'static str,
    /// The model the client asked for, when the request named one.
    pub requested_model: Option<Arc<str>>,
    /// The model that answered (the upstream's name for it), when one did.
    pub served_model: Option<Arc<str>>,
    /// The upstream that served the last attempt.
    pub upstream: Option<Arc<str>>,
    /// The provider whose price list applies to that upstream (`openai`, `anthropic`,
    /// `gemini`, `groq`, ...).
    pub provider: Option<Arc<str>>,
    /// How many attempts were sent upstream (0 when refused or answered from cache).
    pub attempts: u16,
    /// The failure class of each failed attempt, in order (`connect`, `refused_stream`,
    /// `status_429`, ...). Empty, and not allocated, when nothing failed.
    pub attempt_classes: Vec<&'static str>,
    /// The HTTP status sent to the client.
    pub status: u16,
    /// Why the request ended: the telemetry crate's `EndReason` label (`ok`, `client_cancel`,
    /// `upstream_error`, `refused_limit`, ...).
    pub end_reason: &'static str,
    /// Whether the response was streamed.
    pub stream: bool,
    /// Token usage, normalised (see [`Tokens`]).
    pub tokens: Tokens,
    /// What the request cost, or why it has no cost.
    pub pricing: Pricing,
    /// Phase latencies.
    pub latency: Latency,
    /// Answered from the response cache.
    pub cache_hit: bool,
    /// Answered by replaying an idempotency record.
    pub idempotent_replay: bool,
    /// Captured prompt and response, only when capture is on for the route and this request
    /// was sampled. Boxed so that records without it stay small.
    pub capture: Option<Box<Capture>>,
    /// Each guardrail check's verdict and time, in the order they ran (input checks, then
    /// output checks, a stream's as the stream ended): `no-secrets:redact:0.12ms,policy:allow:3.10ms`.
    /// `None` on a route without guardrails.
    pub guardrails: Option<Box<str>>,
}

impl RequestRecord {
    /// A record with the identifying fields set and everything else empty: no tokens, no
    /// attempts, status 0, `Pricing::NoUsage`. The gateway fills in the rest as it learns it.
    pub fn new(
        ts_us: i64,
        request_id: Arc<str>,
        route: Arc<str>,
        client_api: &'static str,
    ) -> Self {
        RequestRecord {
            ts_us,
            request_id,
            key_id: None,
            team: None,
            owner: None,
            route,
            client_api,
            requested_model: None,
            served_model: None,
            upstream: None,
            provider: None,
            attempts: 0,
            attempt_classes: Vec::new(),
            status: 0,
            end_reason: "",
            stream: false,
            tokens: Tokens::default(),
            pricing: Pricing::NoUsage,
            latency: Latency::default(),
            cache_hit: false,
            idempotent_replay: false,
            capture: None,
            guardrails: None,
        }
    }

    /// The attempt classes as one comma-separated string (how the sinks store them), `None`
    /// when there are none.
    pub fn attempt_classes_joined(&self) -> Option<String> {
        (!self.attempt_classes.is_empty()).then(|| self.attempt_classes.join(","))
    }

    /// The model the usage queries group by: the served model, else the requested one.
    pub fn model(&self) -> Option<&str> {
        self.served_model
            .as_deref()
            .or(self.requested_model.as_deref())
    }
}

/// Microseconds since the Unix epoch, now (UTC). `0` if the clock is before 1970.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Token usage, normalised across providers, with the convention of `sluice-providers`'
/// `Usage`:
///
/// - `input` counts **every** prompt token: uncached, read from the provider's cache, and
///   written to it. (OpenAI's `prompt_tokens` and Gemini's `promptTokenCount` already include
///   cached tokens; Anthropic's `input_tokens` excludes cache reads and writes, so they are
///   added: see [`Tokens::from_anthropic`].)
/// - `cache_read` and `cache_write` are subsets of `input`; `cache_write_1h` is the subset of
///   `cache_write` written with Anthropic's 1-hour TTL (the rest is the 5-minute default).
/// - `output` counts every generated token, reasoning ("thinking") included; `reasoning` is
///   the subset of `output` that was reasoning. (Gemini reports `thoughtsTokenCount` apart
///   from `candidatesTokenCount` and bills it as output: see [`Tokens::from_gemini`].)
///
/// So uncached prompt tokens are `input - cache_read - cache_write` and visible output is
/// `output - reasoning`; the price catalog prices each part at its own rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    /// All prompt tokens, cache reads and writes included.
    pub input: u64,
    /// All generated tokens, reasoning included.
    pub output: u64,
    /// Prompt tokens read from the provider's cache (subset of `input`).
    pub cache_read: u64,
    /// Prompt tokens written to the provider's cache (subset of `input`).
    pub cache_write: u64,
    /// Of `cache_write`, those written with a 1-hour TTL (Anthropic); the rest had 5 minutes.
    pub cache_write_1h: u64,
    /// Reasoning tokens (subset of `output`).
    pub reasoning: u64,
}

impl Tokens {
    /// From OpenAI's usage (Chat Completions or Responses): `prompt_tokens` (`input_tokens`)
    /// already includes `prompt_tokens_details.cached_tokens`; `completion_tokens`
    /// (`output_tokens`) already includes `completion_tokens_details.reasoning_tokens`.
    pub fn from_openai(prompt: u64, completion: u64, cached: u64, reasoning: u64) -> Tokens {
        Tokens {
            input: prompt,
            output: completion,
            cache_read: cached.min(prompt),
            cache_write: 0,
            cache_write_1h: 0,
            reasoning: reasoning.min(completion),
        }
    }

    /// From Anthropic's usage: `input_tokens` excludes `cache_read_input_tokens` and
    /// `cache_creation_input_tokens`, so all three are added; `cache_creation.
    /// ephemeral_1h_input_tokens` (0 when absent) says how many writes had the 1-hour TTL.
    /// `output_tokens` includes thinking; `thinking` is that part when the API reports it
    /// (0 otherwise).
    pub fn from_anthropic(
        input_tokens: u64,
        output_tokens: u64,
        cache_read_input_tokens: u64,
        cache_creation_input_tokens: u64,
        ephemeral_1h_input_tokens: u64,
        thinking: u64,
    ) -> Tokens {
        Tokens {
            input: input_tokens + cache_read_input_tokens + cache_creation_input_tokens,
            output: output_tokens,
            cache_read: cache_read_input_tokens,
            cache_write: cache_creation_input_tokens,
            cache_write_1h: ephemeral_1h_input_tokens.min(cache_creation_input_tokens),
            reasoning: thinking.min(output_tokens),
        }
    }

    /// From Gemini's `usageMetadata`: `promptTokenCount` includes `cachedContentTokenCount`;
    /// `thoughtsTokenCount` is reported apart from `candidatesTokenCount` and billed as output,
    /// so it is added to `output`.
    pub fn from_gemini(prompt: u64, candidates: u64, cached_content: u64, thoughts: u64) -> Tokens {
        Tokens {
            input: prompt,
            output: candidates + thoughts,
            cache_read: cached_content.min(prompt),
            cache_write: 0,
            cache_write_1h: 0,
            reasoning: thoughts,
        }
    }

    /// Adds another attempt's or continuation's usage.
    pub fn add(&mut self, other: &Tokens) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.cache_write_1h += other.cache_write_1h;
        self.reasoning += other.reasoning;
    }

    /// True when nothing was counted.
    pub fn is_zero(&self) -> bool {
        *self == Tokens::default()
    }
}

/// An amount of US dollars in whole micro-dollars (1 USD = 1,000,000). Money is never a float
/// here: sums over millions of records stay exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cost {
    /// Micro-dollars.
    pub micros: i64,
}

impl Cost {
    /// A cost of `micros` micro-dollars.
    pub const fn from_micros(micros: i64) -> Cost {
        Cost { micros }
    }
}

impl std::fmt::Display for Cost {
    /// `$0.001234`: dollars with all six decimals, so that a table's column adds up.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        format_micros(self.micros, f)
    }
}

/// Writes micro-dollars as `$D.DDDDDD`.
pub(crate) fn format_micros(micros: i64, f: &mut impl std::fmt::Write) -> std::fmt::Result {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    write!(f, "{sign}${}.{:06}", m / 1_000_000, m % 1_000_000)
}

/// What a request cost, or why it has no cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pricing {
    /// Priced by the catalog entry `entry` (its id, e.g. `anthropic/claude-sonnet-4-5*`, or
    /// `config/...` for a `[[price]]` override).
    Priced {
        /// The entry's id.
        entry: Arc<str>,
        /// The cost.
        cost: Cost,
    },
    /// Tokens were used but no price applies: the model is not in the catalog, or its entry
    /// lacks a price the usage needs (e.g. cache reads). Counted, stored without a cost, and
    /// never taken for free.
    Unpriced,
    /// No tokens to price: refused before an upstream answered, answered from cache, or the
    /// upstream reported no usage.
    NoUsage,
}

impl Pricing {
    /// The storage code: 0 priced, 1 unpriced, 2 no usage.
    pub fn code(&self) -> i16 {
        match self {
            Pricing::Priced { .. } => 0,
            Pricing::Unpriced => 1,
            Pricing::NoUsage => 2,
        }
    }

    /// The cost in micro-dollars when priced.
    pub fn cost_micros(&self) -> Option<i64> {
        match self {
            Pricing::Priced { cost, .. } => Some(cost.micros),
            _ => None,
        }
    }

    /// The pricing entry's id when priced.
    pub fn entry(&self) -> Option<&str> {
        match self {
            Pricing::Priced { entry, .. } => Some(entry),
            _ => None,
        }
    }
}

/// Phase latencies of a request, in microseconds from admission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    /// Until the upstream's first response byte, if one came.
    pub first_byte_us: Option<u64>,
    /// Until the first content (text or tool-call delta, or a non-streaming body) went to the
    /// client, if it did.
    pub first_token_us: Option<u64>,
    /// Until the request settled.
    pub total_us: u64,
}

/// `u64` → `i64` for storage, saturating (a count above 2^63 is not a real count).
pub(crate) fn sat_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_conventions_normalise_to_one_shape() {
        // OpenAI: cached tokens are inside prompt_tokens, reasoning inside completion_tokens.
        let o = Tokens::from_openai(1000, 300, 600, 200);
        assert_eq!(
            (o.input, o.cache_read, o.output, o.reasoning),
            (1000, 600, 300, 200)
        );
        // Anthropic: input_tokens excludes cache reads and writes.
        let a = Tokens::from_anthropic(50, 20, 1000, 400, 100, 0);
        assert_eq!(a.input, 1450);
        assert_eq!(
            (a.cache_read, a.cache_write, a.cache_write_1h),
            (1000, 400, 100)
        );
        // Gemini: thoughts are outside candidates but billed as output.
        let g = Tokens::from_gemini(900, 100, 500, 40);
        assert_eq!(
            (g.input, g.cache_read, g.output, g.reasoning),
            (900, 500, 140, 40)
        );
        // A count larger than its superset is clamped rather than trusted.
        assert_eq!(Tokens::from_openai(10, 5, 99, 99).cache_read, 10);
    }

    #[test]
    fn costs_print_with_six_decimals() {
        assert_eq!(Cost::from_micros(1_234_567).to_string(), "$1.234567");
        assert_eq!(Cost::from_micros(42).to_string(), "$0.000042");
        assert_eq!(Cost::from_micros(-5).to_string(), "-$0.000005");
    }
}
