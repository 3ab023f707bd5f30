//! Failure classes: every failed attempt is decided once, here, into what the policy acts on.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use sluice_providers::{ErrorClass, Family, ProviderError};
use sluice_upstream::{BodyError, UpstreamError};

use crate::error::GatewayError;

/// What an attempt's failure means for the request (DESIGN invariant 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// The upstream cannot have processed it: connect failure, pool acquire timeout or full
    /// queue, REFUSED_STREAM, above a GOAWAY's last-stream-id, a stale keep-alive connection
    /// closed before the request was written. Safe to send anywhere.
    NeverSent,
    /// The upstream answered with a transient error (429, 500, 502, 503, 504, 529 /
    /// overloaded), or a stream failed before its first content.
    Retryable,
    /// The upstream answered with an error another attempt cannot fix (400, 401/403, 404, 413,
    /// content filtered, quota exhausted): returned as it is.
    Final,
    /// The prompt does not fit the target's context window: only a target with a larger
    /// window may take it.
    ContextLength,
    /// The request was written and no response byte came back before a timeout or a reset:
    /// the upstream may have processed it. Retried only for idempotent requests.
    MaybeProcessed,
}

impl FailureClass {
    /// The metric label and log value.
    pub fn metric_label(self) -> &'static str {
        match self {
            FailureClass::NeverSent => "never_sent",
            FailureClass::Retryable => "retryable",
            FailureClass::Final => "final",
            FailureClass::ContextLength => "context_length",
            FailureClass::MaybeProcessed => "maybe_processed",
        }
    }
}

/// An upstream's error answer, kept whole: it is what the client gets if no other attempt
/// succeeds.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// The family the body is written in (the upstream's).
    pub(crate) family: Family,
    /// The upstream's provider (for the session diagnostic's headers).
    pub(crate) provider: sluice_providers::ProviderKind,
    /// What it means.
    pub(crate) error: ProviderError,
}

impl Answer {
    /// The provider's error code and message (the message capped at 1 KiB by the classifier).
    pub(crate) fn code_and_message(&self) -> (String, String) {
        let code = self
            .error
            .code
            .clone()
            .unwrap_or_else(|| self.error.class.metric_label().to_string());
        (code, self.error.message.clone())
    }
}

/// Why one attempt failed.
#[derive(Debug)]
pub(crate) enum Cause {
    /// No response headers: the pool or the connection failed.
    Upstream(UpstreamError),
    /// No response headers within the first-byte timeout.
    FirstByteTimeout(Duration),
    /// An error response.
    Answered(Box<Answer>),
    /// A stream answered 200 but failed before its first content: reset, EOF, an error event.
    StreamBeforeContent(String),
    /// A stream answered 200 but no content came within the first-token timeout.
    FirstTokenTimeout(Duration),
    /// A stream answered 200, sent its preamble, then nothing for the idle timeout.
    IdleBeforeContent(Duration),
    /// A non-streaming body broke off before its end.
    Body(BodyError),
    /// The request's deadline passed while waiting for the response headers.
    TotalTimeout(Duration),
    /// The request cannot be built for this target (bad JSON, a body rewrite that failed).
    Invalid(GatewayError),
}

/// One failed attempt, classified.
#[derive(Debug)]
pub(crate) struct AttemptFailure {
    pub(crate) class: FailureClass,
    pub(crate) cause: Cause,
    /// The provider asked to wait this long before trying it again.
    pub(crate) retry_after: Option<Duration>,
    /// Never send this request to the same target again (a silent target, a saturated pool, a
    /// TLS failure that a retry cannot fix).
    pub(crate) avoid_target: bool,
}

impl AttemptFailure {
    /// A header-phase failure of `Upstream::send`.
    pub(crate) fn upstream(e: UpstreamError, first_byte: Duration) -> Self {
        let (class, avoid_target) = match &e {
            UpstreamError::PoolAcquireTimeout { .. } | UpstreamError::PoolFull { .. } => {
                (FailureClass::NeverSent, true)
            }
            UpstreamError::Tls(_) => (FailureClass::NeverSent, true),
            e if e.is_retry_safe() => (FailureClass::NeverSent, false),
            UpstreamError::Deadline => {
                // A silent target: fall back, never wait on it twice.
                return AttemptFailure {
                    class: FailureClass::MaybeProcessed,
                    cause: Cause::FirstByteTimeout(first_byte),
                    retry_after: None,
                    avoid_target: true,
                };
            }
            _ => (FailureClass::MaybeProcessed, false),
        };
        AttemptFailure {
            class,
            cause: Cause::Upstream(e),
            retry_after: None,
            avoid_target,
        }
    }

    /// An error response, read whole.
    pub(crate) fn answered(answer: Answer, retry_after: Option<Duration>) -> Self {
        let class = match answer.error.class {
            ErrorClass::RateLimited | ErrorClass::Overloaded | ErrorClass::ServerError => {
                FailureClass::Retryable
            }
            ErrorClass::ContextLength => FailureClass::ContextLength,
            ErrorClass::QuotaExhausted
            | ErrorClass::ContentFiltered
            | ErrorClass::InvalidRequest
            | ErrorClass::Auth => FailureClass::Final,
        };
        AttemptFailure {
            class,
            cause: Cause::Answered(Box::new(answer)),
            retry_after,
            avoid_target: false,
        }
    }

    /// A stream that failed before its first content (always retryable: nothing reached the
    /// client).
    pub(crate) fn before_content(detail: String) -> Self {
        AttemptFailure {
            class: FailureClass::Retryable,
            cause: Cause::StreamBeforeContent(detail),
            retry_after: None,
            avoid_target: false,
        }
    }

    /// An error event inside a stream, before its first content: classified like an error
    /// answer (it is one, sent after a 200).
    pub(crate) fn stream_error(error: ProviderError) -> Self {
        let retry_after = error.retry_after;
        let family = Family::OpenAi;
        let (code, message) = (
            error.code.clone().unwrap_or_default(),
            error.message.clone(),
        );
        let body = sluice_providers::error::error_body(family, error.status, &code, &message);
        AttemptFailure::answered(
            Answer {
                status: error.status,
                headers: HeaderMap::new(),
                body,
                family,
                provider: sluice_providers::ProviderKind::OpenAi,
                error,
            },
            retry_after,
        )
    }

    /// No first content within `first_token`: fall back, never wait on this target twice.
    pub(crate) fn first_token_timeout(t: Duration) -> Self {
        AttemptFailure {
            class: FailureClass::Retryable,
            cause: Cause::FirstTokenTimeout(t),
            retry_after: None,
            avoid_target: true,
        }
    }

    /// The request's deadline passed before the response headers.
    pub(crate) fn total_timeout(t: Duration) -> Self {
        AttemptFailure {
            class: FailureClass::MaybeProcessed,
            cause: Cause::TotalTimeout(t),
            retry_after: None,
            avoid_target: true,
        }
    }

    /// The request could not be built: the client's fault, final.
    pub(crate) fn invalid(e: GatewayError) -> Self {
        AttemptFailure {
            class: FailureClass::Final,
            cause: Cause::Invalid(e),
            retry_after: None,
            avoid_target: true,
        }
    }

    /// No credential for the target (its access token could not be had, the request could
    /// not be signed): another target may have one, this one will not for a while.
    pub(crate) fn credentials(e: GatewayError) -> Self {
        AttemptFailure {
            class: FailureClass::Retryable,
            cause: Cause::Invalid(e),
            retry_after: None,
            avoid_target: true,
        }
    }

    /// The preamble came, then silence for `idle`: as silent as no first token.
    pub(crate) fn idle_before_content(t: Duration) -> Self {
        AttemptFailure {
            class: FailureClass::Retryable,
            cause: Cause::IdleBeforeContent(t),
            retry_after: None,
            avoid_target: true,
        }
    }

    /// A non-streaming body broke off after the headers.
    pub(crate) fn body(e: BodyError) -> Self {
        AttemptFailure {
            class: FailureClass::MaybeProcessed,
            cause: Cause::Body(e),
            retry_after: None,
            avoid_target: false,
        }
    }

    /// What the failure says about the target, for its balancer: rate limits rest it,
    /// target failures count toward its ejection, the request's own faults do not.
    pub(crate) fn balancer_outcome(&self) -> sluice_upstream::Outcome {
        use sluice_upstream::{BalanceFailure as F, Outcome};
        let failure = match &self.cause {
            Cause::Upstream(e) => F::from_upstream_error(e),
            Cause::FirstByteTimeout(_) | Cause::TotalTimeout(_) => F::Timeout,
            Cause::FirstTokenTimeout(_) | Cause::IdleBeforeContent(_) => F::FirstTokenTimeout,
            Cause::StreamBeforeContent(_) | Cause::Body(_) => F::Retryable,
            Cause::Invalid(_) => F::Final,
            Cause::Answered(a) => match a.error.class {
                ErrorClass::RateLimited => {
                    return Outcome::RateLimited {
                        retry_after: self.retry_after,
                    }
                }
                ErrorClass::QuotaExhausted => {
                    // A key out of quota: rest it as long as the balancer allows.
                    return Outcome::RateLimited {
                        retry_after: Some(Duration::from_secs(3600)),
                    };
                }
                // A refused credential is the target's (key's) fault.
                ErrorClass::Auth => F::Retryable,
                ErrorClass::Overloaded | ErrorClass::ServerError => F::Retryable,
                ErrorClass::ContextLength
                | ErrorClass::ContentFiltered
                | ErrorClass::InvalidRequest => F::Final,
            },
        };
        Outcome::Failure(failure)
    }

    /// The HTTP status of the attempt, for the log (`None`: no response).
    pub(crate) fn status(&self) -> Option<u16> {
        match &self.cause {
            Cause::Answered(a) => Some(a.status.as_u16()),
            Cause::StreamBeforeContent(_)
            | Cause::FirstTokenTimeout(_)
            | Cause::IdleBeforeContent(_)
            | Cause::Body(_) => Some(200),
            _ => None,
        }
    }

    /// A short label of the cause, for the log line.
    pub(crate) fn cause_label(&self) -> &'static str {
        match &self.cause {
            Cause::Upstream(e) => e.metric_label(),
            Cause::FirstByteTimeout(_) => "first_byte_timeout",
            Cause::Answered(a) => a.error.class.metric_label(),
            Cause::StreamBeforeContent(_) => "stream_before_content",
            Cause::FirstTokenTimeout(_) => "first_token_timeout",
            Cause::IdleBeforeContent(_) => "idle_timeout",
            Cause::Body(e) => e.metric_label(),
            Cause::TotalTimeout(_) => "total_timeout",
            Cause::Invalid(e) => e.code(),
        }
    }

    /// The gateway's error for this failure when it is the last one and the upstream gave no
    /// answer to pass on.
    pub(crate) fn into_gateway_error(
        self,
        upstream: &str,
        reason: super::GiveUpReason,
    ) -> Result<GatewayError, Box<Answer>> {
        let upstream = upstream.to_string();
        if reason == super::GiveUpReason::Budget && !matches!(self.cause, Cause::Answered(_)) {
            return Ok(GatewayError::RetryBudgetExhausted { upstream });
        }
        Ok(match self.cause {
            Cause::Upstream(source) => GatewayError::Upstream { upstream, source },
            Cause::FirstByteTimeout(timeout) => {
                GatewayError::FirstByteTimeout { upstream, timeout }
            }
            Cause::Answered(a) => return Err(a),
            Cause::StreamBeforeContent(detail) => GatewayError::StreamFailed { upstream, detail },
            Cause::FirstTokenTimeout(timeout) => {
                GatewayError::FirstTokenTimeout { upstream, timeout }
            }
            Cause::IdleBeforeContent(timeout) => GatewayError::IdleTimeout { upstream, timeout },
            Cause::Body(source) => GatewayError::UpstreamBody { upstream, source },
            Cause::TotalTimeout(timeout) => GatewayError::TotalTimeout { upstream, timeout },
            Cause::Invalid(e) => e,
        })
    }
}
