//! Why the admit stage refused a request: the status, the code and the message of the error
//! the client gets in its API's format, and the headers that go with it (`Retry-After`,
//! `x-ratelimit-*`). The mapping to a response is `crate::error`'s, as for every error.

use std::time::Duration;

use http::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use http::StatusCode;
use sluice_state::{CheckKind, Quota, Refusal, RefusalReason, StateError};

use super::quota_headers;
use sluice_telemetry::EndReason;

/// Which limit a check belongs to, for the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The key's own limits.
    Key(String),
    /// The key's limits on some models.
    KeyModels(String, Vec<String>),
    /// The route's limits.
    Route(String),
    /// The limits or budget of the key's team.
    Team(String),
    /// The key's spend, tracked without a budget (never refuses, no header).
    Tracking,
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Key(id) => write!(f, "key `{id}`"),
            Scope::KeyModels(id, models) => {
                write!(f, "key `{id}` on models {}", models.join(", "))
            }
            Scope::Route(name) => write!(f, "route `{name}`"),
            Scope::Team(name) => write!(f, "team `{name}`"),
            Scope::Tracking => f.write_str("spend tracking"),
        }
    }
}

/// A refusal by a limit or budget, with what the message and headers need.
#[derive(Debug)]
pub struct Limited {
    pub(crate) refusal: Refusal,
    pub(crate) scope: Scope,
    /// The refusing check's period (none for concurrency).
    pub(crate) period: Option<Duration>,
    /// The request's token reservation.
    pub(crate) reserve: u64,
    /// Indices of checks that make no header (spend tracking).
    pub(crate) hidden: u32,
}

/// Why a request was refused before any upstream work.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The route requires a key and none was sent.
    #[error(
        "this endpoint needs an API key: send it as `Authorization: Bearer <key>` or \
         `x-api-key: <key>`"
    )]
    Missing,
    /// The key is not one of the gateway's.
    #[error("the API key is not valid")]
    Unknown,
    /// The key was revoked.
    #[error("this API key has been revoked")]
    Revoked,
    /// The key may not use the route.
    #[error("this API key may not use the route `{0}`")]
    RouteNotAllowed(String),
    /// The key may not use the model.
    #[error("this API key may not use the model `{0}`")]
    ModelNotAllowed(String),
    /// A limit or budget refused.
    #[error("{}", limited_message(.0))]
    Limited(Box<Limited>),
    /// The state store failed (fail_closed) or the request's limits are unusable.
    #[error("{}", state_message(.0))]
    State(StateError),
    /// The `Idempotency-Key` header is empty, too long or not visible ASCII.
    #[error("the Idempotency-Key header must be 1 to 255 visible ASCII characters")]
    IdempotencyKeyInvalid,
    /// A request with the same `Idempotency-Key` is in progress (a stream, or one that did not
    /// finish while this one waited).
    #[error("a request with this Idempotency-Key is still in progress; retry after it finishes")]
    IdempotencyInFlight,
    /// The same `Idempotency-Key` came with a different request.
    #[error(
        "this Idempotency-Key was already used with a different request body; use a new key \
         for a new request"
    )]
    IdempotencyMismatch,
}

fn state_message(e: &StateError) -> String {
    // Never the store's own words: they may name an internal address.
    match e {
        StateError::InvalidCheck(why) => format!("the gateway's limits are misconfigured: {why}"),
        _ => "the gateway's limit store is unavailable; retry shortly".to_string(),
    }
}

fn limited_message(l: &Limited) -> String {
    let r = &l.refusal;
    let q = r.quota();
    let limit = q.map_or(0, |q| q.limit);
    let per = l
        .period
        .map(|p| humantime::format_duration(p).to_string())
        .unwrap_or_default();
    let retry = match r.retry_after {
        Some(d) => format!("; retry in {}", round_up(d)),
        None => String::new(),
    };
    let scope = &l.scope;
    match (r.kind, r.reason) {
        (_, RefusalReason::TooLarge) => format!(
            "this request reserves {} tokens (its max_tokens plus an estimate of its input), \
             more than {scope} allows in {per} ({limit}); lower max_tokens",
            l.reserve
        ),
        (CheckKind::Budget, _) | (_, RefusalReason::BudgetExceeded) => format!(
            "the budget of {scope} is spent: {} per {per}{}",
            money(limit),
            match r.retry_after {
                Some(d) => format!("; it resets in {}", round_up(d)),
                None => String::new(),
            }
        ),
        (CheckKind::Requests, _) => {
            format!("rate limit reached for {scope}: {limit} requests per {per}{retry}")
        }
        (CheckKind::Tokens, _) => format!(
            "token limit reached for {scope}: {limit} tokens per {per} (this request reserves \
             {}){retry}",
            l.reserve
        ),
        (CheckKind::Concurrency, _) => format!(
            "concurrency limit reached for {scope}: {limit} requests in flight at once{retry}"
        ),
    }
}

/// A wait as people read it: whole seconds, or milliseconds below one.
fn round_up(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis().max(1))
    } else {
        let secs = crate::headers::retry_after_secs(d);
        humantime::format_duration(Duration::from_secs(secs)).to_string()
    }
}

/// Micro-units as an amount: `20.00`, `0.0125`.
pub(crate) fn money(micros: u64) -> String {
    let mut b = quota_headers::Buf::default();
    quota_headers::write_money(&mut b, micros);
    b.as_str().to_string()
}

impl KeyError {
    /// The status the client gets.
    pub fn status(&self) -> StatusCode {
        match self {
            KeyError::Missing | KeyError::Unknown | KeyError::Revoked => StatusCode::UNAUTHORIZED,
            KeyError::RouteNotAllowed(_) | KeyError::ModelNotAllowed(_) => StatusCode::FORBIDDEN,
            KeyError::Limited(_) => StatusCode::TOO_MANY_REQUESTS,
            KeyError::State(e) if e.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            KeyError::State(StateError::InvalidIdempotencyKey)
            | KeyError::IdempotencyKeyInvalid => StatusCode::BAD_REQUEST,
            KeyError::State(_) => StatusCode::INTERNAL_SERVER_ERROR,
            KeyError::IdempotencyInFlight => StatusCode::CONFLICT,
            KeyError::IdempotencyMismatch => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }

    /// The error body's code, also the `reason` of `sluice_key_refusals_total`.
    pub fn code(&self) -> &'static str {
        match self {
            KeyError::Missing => "missing_api_key",
            KeyError::Unknown => "invalid_api_key",
            KeyError::Revoked => "revoked_api_key",
            KeyError::RouteNotAllowed(_) => "route_not_allowed",
            KeyError::ModelNotAllowed(_) => "model_not_allowed",
            KeyError::Limited(l) => l.refusal.metric_label(),
            KeyError::State(StateError::InvalidIdempotencyKey) => "invalid_idempotency_key",
            KeyError::State(e) => e.metric_label(),
            KeyError::IdempotencyKeyInvalid => "invalid_idempotency_key",
            KeyError::IdempotencyInFlight => "idempotency_key_in_use",
            KeyError::IdempotencyMismatch => "idempotency_key_reused",
        }
    }

    /// How the request ended, for the log line and `sluice_request_end_total`.
    pub(crate) fn end_reason(&self) -> EndReason {
        match self.status().as_u16() {
            401 | 403 => EndReason::Unauthorized,
            429 => EndReason::Limited,
            503 => EndReason::StateUnavailable,
            _ => EndReason::BadRequest,
        }
    }

    /// `Retry-After` and the `x-ratelimit-*` numbers as they stand, for a 429; `Retry-After`
    /// for a 503 of the store.
    pub(crate) fn add_headers(&self, h: &mut HeaderMap) {
        match self {
            KeyError::Limited(l) => {
                quota_headers::insert(h, &l.refusal.quotas, l.hidden);
                if let Some(ra) = l.refusal.retry_after {
                    h.insert(RETRY_AFTER, crate::headers::retry_after(ra));
                }
            }
            KeyError::State(e) if e.is_unavailable() => {
                h.insert(RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
    }
}

/// The numbers of a refused request's checks, in order (for tests and the admin view).
impl Limited {
    /// The quotas of every check of the refused admission.
    pub fn quotas(&self) -> &[Quota] {
        &self.refusal.quotas
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_keeps_cents_and_drops_trailing_zeros() {
        assert_eq!(money(20_000_000), "20.00");
        assert_eq!(money(12_500), "0.0125");
        assert_eq!(money(1), "0.000001");
        assert_eq!(money(1_230_000), "1.23");
    }

    #[test]
    fn waits_round_up() {
        assert_eq!(round_up(Duration::from_millis(1500)), "2s");
        assert_eq!(round_up(Duration::from_micros(10)), "1ms");
        assert_eq!(round_up(Duration::from_secs(3600)), "1h");
    }
}
