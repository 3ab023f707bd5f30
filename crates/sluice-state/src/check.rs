//! What an admission asks for ([`Check`]), what it gets back ([`Quota`], [`Refusal`]) and what a
//! request reports when it ends ([`Usage`]).

use std::sync::Arc;
use std::time::Duration;

use crate::StateError;

/// One limit to pass at admission. A request carries a list of them (per key, per key × model,
/// per route ...); the admission passes all of them or consumes nothing.
///
/// `key` names the counter: checks of the same kind with the same key share it, across
/// instances too with the Redis backend. Use the virtual key's *id* (never its secret: keys
/// are stored and may appear in admin output), e.g. `"k42"`, `"k42/gpt-4o"`, `"route:chat"`.
/// Build keys once per virtual key and clone the `Arc`. Keys of different kinds never collide.
/// Give each check of one admission a distinct (kind, key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// At most `limit` requests per `period` (GCRA: a burst of `limit`, then one every
    /// `period / limit`).
    Rate {
        /// The counter's name.
        key: Arc<str>,
        /// Requests per period (at least 1).
        limit: u64,
        /// The period (at least 1 µs).
        period: Duration,
    },
    /// At most `limit` tokens per `period` (GCRA with a cost). `reserve` tokens are taken at
    /// admission (from `max_tokens` or an estimate) and reconciled with the real count at
    /// settle. A reservation above `limit` can never pass ([`RefusalReason::TooLarge`]).
    Tokens {
        /// The counter's name.
        key: Arc<str>,
        /// Tokens per period (at least 1).
        limit: u64,
        /// The period (at least 1 µs).
        period: Duration,
        /// Tokens taken now; settle refunds or charges the difference with the actual count.
        reserve: u64,
    },
    /// At most `limit` requests in flight at once. Admission takes a lease, settle releases it;
    /// with Redis a lease expires after [`crate::RedisConfig::lease_ttl`] unless its store
    /// renews it, so a crashed instance frees its slots.
    Concurrency {
        /// The counter's name.
        key: Arc<str>,
        /// Requests in flight at once (at least 1).
        limit: u64,
    },
    /// Admitted while the spend of the current period is below `limit_micros`; settle adds the
    /// request's spend. Periods are fixed windows aligned to the Unix epoch (UTC): a period of
    /// one day resets at 00:00 UTC; calendar months are not supported.
    Budget {
        /// The counter's name.
        key: Arc<str>,
        /// Spend allowed per period, in micro-units of the currency (1 USD = 1,000,000).
        limit_micros: u64,
        /// The budget period (at least 1 µs).
        period: Duration,
    },
}

/// Checks per admission at most (the in-memory store keeps them on the stack).
pub const MAX_CHECKS: usize = 16;

/// Limits above this are refused as invalid: both backends compute in IEEE doubles (Lua's
/// numbers), which are exact integers up to 2^53.
pub(crate) const MAX_LIMIT: u64 = 1 << 50;

impl Check {
    /// The counter's name.
    pub fn key(&self) -> &Arc<str> {
        match self {
            Check::Rate { key, .. }
            | Check::Tokens { key, .. }
            | Check::Concurrency { key, .. }
            | Check::Budget { key, .. } => key,
        }
    }

    /// What this check limits.
    pub fn kind(&self) -> CheckKind {
        match self {
            Check::Rate { .. } => CheckKind::Requests,
            Check::Tokens { .. } => CheckKind::Tokens,
            Check::Concurrency { .. } => CheckKind::Concurrency,
            Check::Budget { .. } => CheckKind::Budget,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), StateError> {
        let (limit, period) = match self {
            Check::Rate { limit, period, .. } | Check::Tokens { limit, period, .. } => {
                (*limit, Some(*period))
            }
            Check::Concurrency { limit, .. } => (*limit, None),
            Check::Budget {
                limit_micros,
                period,
                ..
            } => (*limit_micros, Some(*period)),
        };
        if limit == 0 {
            return Err(StateError::InvalidCheck("a limit is zero"));
        }
        if limit > MAX_LIMIT {
            return Err(StateError::InvalidCheck("a limit is above 2^50"));
        }
        if let Some(period) = period {
            if period.as_micros() == 0 {
                return Err(StateError::InvalidCheck("a period is below 1µs"));
            }
            if period > Duration::from_secs(100 * 365 * 24 * 3600) {
                return Err(StateError::InvalidCheck("a period is above 100 years"));
            }
        }
        if let Check::Tokens { reserve, .. } = self {
            if *reserve > MAX_LIMIT {
                return Err(StateError::InvalidCheck(
                    "a token reservation is above 2^50",
                ));
            }
        }
        Ok(())
    }
}

/// What a [`Check`] limits; the suffix of the `x-ratelimit-*` headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckKind {
    /// [`Check::Rate`].
    Requests,
    /// [`Check::Tokens`].
    Tokens,
    /// [`Check::Concurrency`].
    Concurrency,
    /// [`Check::Budget`].
    Budget,
}

impl CheckKind {
    /// `requests`, `tokens`, `concurrency` or `budget`: `x-ratelimit-remaining-requests` ...
    pub fn as_str(self) -> &'static str {
        match self {
            CheckKind::Requests => "requests",
            CheckKind::Tokens => "tokens",
            CheckKind::Concurrency => "concurrency",
            CheckKind::Budget => "budget",
        }
    }
}

/// The numbers of one check for `x-ratelimit-limit-*`, `x-ratelimit-remaining-*` and
/// `x-ratelimit-reset-*`, after the admission (or, when refused, as they stand).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// What the check limits.
    pub kind: CheckKind,
    /// The check's limit (requests, tokens, requests in flight, micro-units).
    pub limit: u64,
    /// What is left now: requests or tokens that would pass at once, free slots, budget left.
    pub remaining: u64,
    /// What is used now: `limit - remaining` for rate and tokens (may exceed `limit` after a
    /// request used more tokens than it reserved: then `remaining` is 0), leases held, spend in
    /// the current period.
    pub used: u64,
    /// Time until the counter is back to its full limit (rate, tokens) or the budget period
    /// ends; zero for concurrency.
    pub reset_after: Duration,
}

/// Why an admission was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalReason {
    /// Over the limit now; it passes after [`Refusal::retry_after`].
    Limited,
    /// The token reservation is above the token limit: it can never pass.
    TooLarge,
    /// The budget's spend reached its limit; it resets when the period ends.
    BudgetExceeded,
}

/// A refused admission: nothing was consumed. The gateway answers 429 with `Retry-After`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The index of the first refusing check in the admission's list.
    pub index: usize,
    /// Its kind.
    pub kind: CheckKind,
    /// Why.
    pub reason: RefusalReason,
    /// When trying again can pass: the GCRA's wait, the end of the budget period, or a hint of
    /// one second for concurrency (slots free when requests end). `None`: never (too large).
    pub retry_after: Option<Duration>,
    /// The numbers of every check, in the admission's order, unchanged by this admission.
    pub quotas: Vec<Quota>,
}

impl Refusal {
    /// A low-cardinality label for metrics: `rate_limited`, `tokens_limited`,
    /// `tokens_too_large`, `concurrency_limited` or `budget_exceeded`.
    pub fn metric_label(&self) -> &'static str {
        match (self.kind, self.reason) {
            (_, RefusalReason::TooLarge) => "tokens_too_large",
            (_, RefusalReason::BudgetExceeded) | (CheckKind::Budget, _) => "budget_exceeded",
            (CheckKind::Requests, _) => "rate_limited",
            (CheckKind::Tokens, _) => "tokens_limited",
            (CheckKind::Concurrency, _) => "concurrency_limited",
        }
    }

    /// The refusing check's numbers.
    pub fn quota(&self) -> Option<&Quota> {
        self.quotas.get(self.index)
    }
}

/// What a request used, reported when it ends ([`crate::Admission::settle`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens actually used (prompt plus completion, or whatever the token checks count),
    /// including partial usage of a cancelled stream. `None`: unknown, the reservation stands.
    pub tokens: Option<u64>,
    /// Spend to add to every budget check, in micro-units of the currency.
    pub spend_micros: u64,
}
