//! A non-streaming answer read whole: bounded in size, by the deadline and by the memory
//! budget, so a too-large body can still be a clean 502 instead of a cut.

use super::*;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::Response;
use http_body_util::BodyExt;
use tokio::time::Instant;

use crate::body_budget::BodyLease;
use crate::error::GatewayError;
use crate::headers::{self};
use crate::policy::{Attempt, AttemptFailure, Policy};
use sluice_telemetry::EndReason;

use crate::outcome::Finish;

/// Why a non-streaming body did not become a response.
pub(crate) enum Whole {
    /// The attempt failed after its headers; the policy may try again.
    Failed(crate::policy::TargetRef, Instant, AttemptFailure),
    /// Nothing to retry: answer with this.
    Final(Failure),
}

/// Non-streaming: reads the whole body, bounded in size and by the deadline, so a too-large
/// body can still be a clean 502 instead of a cut. `attempt` is borrowed and read in place:
/// moved in and taken apart, its parts would take room in this future twice.
pub(crate) async fn read_whole(
    state: &Generation,
    policy: &mut Policy,
    attempt: &mut Attempt,
    log: &mut Finish,
) -> Result<Response<GatewayBody>, Whole> {
    let ucfg = &state.config.upstream(attempt.upstream);
    let max = state.config.server.max_response_body;
    let upstream = ucfg.name.clone();
    let idle = ucfg.timeouts.idle;
    let read = tokio::time::timeout_at(
        policy.deadline,
        read_bounded(attempt.resp.body_mut(), max, idle, &policy.ctx.lease),
    )
    .await;
    let bytes = match read {
        Ok(Ok(b)) => b,
        Ok(Err(Unread::Idle)) => {
            let error = GatewayError::IdleTimeout {
                upstream,
                timeout: idle,
            };
            return Err(Whole::Final(Failure::new(error, EndReason::IdleTimeout)));
        }
        Ok(Err(Unread::OverBudget(o))) => {
            let error = GatewayError::OverBudget { limit: o.limit };
            return Err(Whole::Final(Failure::new(error, EndReason::OverBudget)));
        }
        Err(_) => {
            let error = GatewayError::TotalTimeout {
                upstream,
                timeout: policy.deadline.saturating_duration_since(log.started()),
            };
            return Err(Whole::Final(Failure::new(error, EndReason::TotalTimeout)));
        }
        Ok(Err(Unread::TooLarge)) => {
            let error = GatewayError::ResponseTooLarge {
                upstream,
                limit: max,
            };
            return Err(Whole::Final(Failure::new(
                error,
                EndReason::ResponseTooLarge,
            )));
        }
        Ok(Err(Unread::Broken(source))) => {
            log.timings = Some(attempt.resp.body().timings());
            return Err(Whole::Failed(
                attempt.target,
                attempt.started,
                AttemptFailure::body(source),
            ));
        }
    };
    // The body has ended: its timings now include the last byte.
    let timings = attempt.resp.body().timings();
    log.timings = Some(timings);
    let built = &attempt.built;
    let op = policy.ctx.op;
    let translated = if built.bedrock {
        bedrock_response(&bytes, op, &built.model)
    } else {
        sluice_providers::response::translate_response(
            bytes,
            &sluice_providers::response::ResponseOptions {
                op,
                provider: &built.provider,
                model: &built.model,
                // A body passed through has its own `created`: no clock read for it.
                now_unix: if sluice_providers::response::passes_through(op, &built.provider) {
                    0
                } else {
                    now_unix()
                },
            },
        )
        .map(|c| (c.body, c.usage))
    };
    let bytes = match translated {
        Ok((body, usage)) => {
            log.usage = usage;
            log.usage_label = policy.usage_label(attempt.target);
            log.renamed = policy.renames(attempt.target);
            body
        }
        Err(source) => {
            let error = GatewayError::ResponseMalformed { upstream, source };
            return Err(Whole::Final(Failure::new(error, EndReason::UpstreamError)));
        }
    };
    // The route's output guardrails on the whole answer (a route without any: one check).
    let mut guard_header = None;
    let bytes = if policy.ctx.guardrails.is_empty() {
        bytes
    } else {
        let mut verdicts = crate::guard::Verdicts::default();
        // Boxed: a wait (an external checker) that routes without guardrails never make.
        let checked = Box::pin(crate::guard::check_output_body(
            &state.guards,
            &policy.ctx.guardrails,
            &bytes,
            &built.model,
            policy.deadline,
            &state.telemetry,
            &mut verdicts,
        ))
        .await;
        verdicts.record(log);
        guard_header = verdicts.header();
        match checked {
            Ok(Some(b)) => b,
            Ok(None) => bytes,
            Err(b) => {
                policy.succeeded(attempt.target, attempt.started, status_u16(attempt));
                let error = GatewayError::ContentBlocked {
                    guardrail: b.guardrail,
                    reason: b.reason,
                };
                return Err(Whole::Final(
                    Failure::new(error, EndReason::ContentBlocked).with_header(guard_header),
                ));
            }
        }
    };
    let status = attempt.resp.status();
    let mut out_headers = headers::client_response_headers(
        std::mem::take(attempt.resp.headers_mut()),
        &policy.ctx.request_id,
    );
    if built.translated {
        // The body is ours now: the upstream's encoding and type no longer describe it.
        out_headers.remove(header::CONTENT_ENCODING);
        out_headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some(v) = crate::outbound::dropped_header(built) {
        out_headers.insert(X_SLUICE_DROPPED_PARAMS, v);
    }
    if wants_timing(state, &policy.ctx.parts.headers) {
        if let Some(v) = server_timing(timings) {
            out_headers.insert(SERVER_TIMING, v);
        }
    }
    log.first_byte();
    log.sent(bytes.len(), 0);
    log.observe_body(&bytes);
    log.status = status.as_u16();
    policy.succeeded(attempt.target, attempt.started, log.status);
    if let Some(v) = guard_header {
        out_headers.append(crate::guard::X_SLUICE_GUARDRAILS, v);
    }
    let mut r = Response::new(GatewayBody::Full(Some(bytes)));
    *r.status_mut() = status;
    *r.headers_mut() = out_headers;
    Ok(r)
}

fn status_u16(attempt: &Attempt) -> u16 {
    attempt.resp.status().as_u16()
}

/// A Converse response for the client, and its usage.
fn bedrock_response(
    body: &[u8],
    op: sluice_providers::Operation,
    model: &str,
) -> Result<(Bytes, Option<sluice_providers::Usage>), sluice_providers::response::ResponseError> {
    sluice_providers::bedrock::translate_response(
        body,
        &sluice_providers::bedrock::BedrockResponseOptions {
            op,
            model,
            id: None,
            now_unix: now_unix(),
        },
    )
    .map(|r| (r.body, r.usage))
}

/// Why a non-streaming body was not read whole.
pub(crate) enum Unread {
    /// Over `max_response_body`.
    TooLarge,
    /// The upstream broke off.
    Broken(sluice_upstream::BodyError),
    /// No byte for the upstream's `idle` timeout.
    Idle,
    /// The memory budget could not take it.
    OverBudget(crate::body_budget::OverBudget),
}

/// Reads a whole body up to `max` bytes, each piece within `idle` of the last, charged to the
/// request's memory lease. Keeps the body (unlike `Limited`),
/// so its timings stay readable.
pub(crate) async fn read_bounded(
    body: &mut sluice_upstream::ResponseBody,
    max: u64,
    idle: Duration,
    lease: &BodyLease,
) -> Result<Bytes, Unread> {
    let mut buf = bytes::BytesMut::new();
    let give_back = |charged: usize| lease.release(charged as u64);
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(_) => {
                give_back(buf.len());
                return Err(Unread::Idle);
            }
        };
        let data = match frame {
            Ok(f) => f.into_data(),
            Err(e) => {
                give_back(buf.len());
                return Err(Unread::Broken(e));
            }
        };
        if let Ok(data) = data {
            if (buf.len() + data.len()) as u64 > max {
                give_back(buf.len());
                return Err(Unread::TooLarge);
            }
            if let Err(o) = lease.charge(data.len() as u64) {
                give_back(buf.len());
                return Err(Unread::OverBudget(o));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}
