//! What the client gets when the policy gave up: the upstream's last answer, or the
//! gateway's error for the last failure.

use http::StatusCode;

use crate::policy::{Answer, GiveUp, Policy};
use sluice_telemetry::EndReason;

/// What the client gets when the policy gave up.
pub(crate) struct Reply {
    pub(crate) reason: EndReason,
    pub(crate) status: StatusCode,
    pub(crate) code: String,
    pub(crate) message: String,
    /// The upstream that failed last, if any attempt was made.
    pub(crate) upstream: Option<crate::config::UpstreamId>,
    /// The upstream's own answer, passed on (non-streaming responses).
    pub(crate) answer: Option<Box<Answer>>,
    /// The gateway's error in full, for the log (the client gets `message`).
    pub(crate) detail: Option<String>,
}

/// Turns a give-up into the client's error: the upstream's last answer, or the gateway's
/// error for the last failure.
pub(crate) fn give_up_reply(policy: &Policy, g: GiveUp) -> Reply {
    let upstream = g.failure.as_ref().map(|(u, _)| *u);
    match policy.give_up_error(g) {
        Ok(e) => {
            let reason = e.end_reason();
            Reply {
                reason,
                status: e.status(),
                code: e.code().to_string(),
                message: e.message(),
                upstream,
                answer: None,
                detail: Some(e.to_string()),
            }
        }
        Err((_, answer)) => {
            let (code, message) = answer.code_and_message();
            let client = policy.ctx.op.family();
            let status = if answer.family == client {
                answer.status
            } else {
                sluice_providers::error::client_error(client, &answer.error).0
            };
            Reply {
                reason: EndReason::UpstreamError,
                status,
                code,
                message,
                upstream,
                answer: Some(answer),
                detail: None,
            }
        }
    }
}
