//! What happened to a request sent to a target, as the balancer needs to know it.

use std::time::Duration;

use crate::UpstreamError;

/// How one attempt on a target ended, reported with [`Pick::complete`](super::Pick::complete).
/// Dropping the [`Pick`](super::Pick) instead (a cancel: the client left, or the policy
/// gave up) is neutral: it says nothing about the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The target answered well. It resets the target's consecutive failures; for a
    /// half-open probe, it brings the target back.
    ///
    /// The lane's latency sample is the one given to
    /// [`Pick::record_latency`](super::Pick::record_latency). Without one, a
    /// [`Lane::Short`](crate::Lane::Short) attempt uses the time from the pick to this call,
    /// and a [`Lane::Stream`](crate::Lane::Stream) attempt records none (a stream's total
    /// duration says nothing about the target's latency).
    Success,
    /// The attempt failed; the kind says whether that counts against the target.
    Failure(Failure),
    /// The target refused for rate limiting (HTTP 429): it rests for `retry_after` (or the
    /// balancer's `rate_limit_rest` when `None`), capped by `max_rate_limit_rest`. Neutral for
    /// ejection: it is not a failure of the target, just a full bucket (the "429'd API key").
    RateLimited {
        /// The upstream's `Retry-After`, if it gave one.
        retry_after: Option<Duration>,
    },
}

/// Why an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// The target took the request and failed in a way a retry elsewhere may fix: a 5xx, a
    /// reset, a connection lost mid-response. Counts toward ejection.
    Retryable,
    /// The request never reached the target: connection refused, connect or TLS timeout,
    /// REFUSED_STREAM. Counts toward ejection.
    NotSent,
    /// No response headers in time. Counts toward ejection, and the time waited is a
    /// latency sample (a lower bound), so the peak EWMA jumps up at once.
    Timeout,
    /// A stream's first token did not come in time. Counts toward ejection, and the time
    /// waited is a latency sample, as for [`Failure::Timeout`].
    FirstTokenTimeout,
    /// A final answer about the request, not the target: a 400, a content filter, a 404 for
    /// an unknown model. Does not count toward ejection.
    Final,
    /// Our side failed before the target was involved, e.g. the target's connection pool is
    /// saturated ([`UpstreamError::is_pool_saturated`]). Does not count toward ejection (the
    /// in-flight count already steers load away).
    Local,
}

impl Failure {
    /// Whether this failure counts toward the target's ejection (consecutive failures and
    /// the success rate).
    pub fn counts_toward_ejection(self) -> bool {
        match self {
            Failure::Retryable
            | Failure::NotSent
            | Failure::Timeout
            | Failure::FirstTokenTimeout => true,
            Failure::Final | Failure::Local => false,
        }
    }

    /// A short, fixed label for metrics.
    pub fn metric_label(self) -> &'static str {
        match self {
            Failure::Retryable => "retryable",
            Failure::NotSent => "not_sent",
            Failure::Timeout => "timeout",
            Failure::FirstTokenTimeout => "first_token_timeout",
            Failure::Final => "final",
            Failure::Local => "local",
        }
    }

    /// Whether the time waited is itself a latency sample.
    pub(crate) fn is_timeout(self) -> bool {
        matches!(self, Failure::Timeout | Failure::FirstTokenTimeout)
    }

    /// The kind of an error from [`Upstream::send`](crate::Upstream::send): a saturated pool
    /// is [`Failure::Local`]; anything else the upstream provably did not process
    /// ([`UpstreamError::is_retry_safe`]) and a TLS failure are [`Failure::NotSent`]; a
    /// missed deadline is [`Failure::Timeout`]; the rest (reset, closed, protocol error) is
    /// [`Failure::Retryable`].
    pub fn from_upstream_error(e: &UpstreamError) -> Failure {
        if e.is_pool_saturated() {
            Failure::Local
        } else if e.is_retry_safe() || matches!(e, UpstreamError::Tls(_)) {
            Failure::NotSent
        } else if matches!(e, UpstreamError::Deadline) {
            Failure::Timeout
        } else {
            Failure::Retryable
        }
    }
}

impl Outcome {
    /// A default reading of a response's status: 429 is [`Outcome::RateLimited`] with the
    /// `Retry-After` header if it holds delay-seconds (an HTTP-date is ignored); 5xx and 408
    /// are [`Failure::Retryable`]; other 4xx are [`Failure::Final`]; everything else is
    /// [`Outcome::Success`]. A policy that knows more (a content filter inside a 200, a
    /// first-token timeout) reports that instead.
    pub fn from_status(status: http::StatusCode, headers: &http::HeaderMap) -> Outcome {
        match status.as_u16() {
            429 => Outcome::RateLimited {
                retry_after: retry_after(headers),
            },
            408 | 500..=599 => Outcome::Failure(Failure::Retryable),
            400..=499 => Outcome::Failure(Failure::Final),
            _ => Outcome::Success,
        }
    }

    /// A short, fixed label for metrics: `success`, `rate_limited`, or the failure's label.
    pub fn metric_label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure(f) => f.metric_label(),
            Outcome::RateLimited { .. } => "rate_limited",
        }
    }
}

/// `Retry-After` as delay-seconds, if the header holds one.
pub fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let v = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}
