//! The attempts and the answer: the relay for a stream, the whole body otherwise, with the
//! key's limit headers; a whole answer stored for an idempotent replay.

use super::*;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::{Either, FutureExt};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Response;
use sluice_upstream::PhaseTimings;

use crate::headers::{self};
use crate::policy::{Answer, Attempt, Policy};
use crate::relay::{RelaySetup, RelayTimers, SseRelay};
use sluice_telemetry::EndReason;

use crate::outcome::Finish;

/// Runs the request and answers, with its `x-ratelimit-*` headers; a non-streaming success
/// with an `Idempotency-Key` is stored for replay.
pub(crate) fn serve(
    state: Arc<Generation>,
    policy: Box<Policy>,
    mut log: Box<Finish>,
) -> impl Future<Output = Response<GatewayBody>> + Send + 'static {
    let Some(ticket) = log.ticket_mut() else {
        return Either::Left(serve_attempts(state, policy, log));
    };
    let limit_headers = ticket.headers();
    // A stream's record is released when it ends (its ticket drops it); only whole bodies
    // are replayed.
    let guard = if policy.ctx.stream {
        None
    } else {
        ticket.take_idempotency()
    };
    // Only a stored answer needs the keys after the attempts.
    let keys = guard.as_ref().map(|_| state.keys.clone());
    // Then, not an `async` block: the answer's place would be held beside the attempts
    // while they wait.
    Either::Right(
        serve_attempts(state, policy, log)
            .then(move |r| with_limits(r, limit_headers, guard.zip(keys))),
    )
}

/// The key's `x-ratelimit-*` headers on the answer; a whole answer stored for replay.
pub(crate) async fn with_limits(
    mut r: Response<GatewayBody>,
    limit_headers: Vec<(HeaderName, HeaderValue)>,
    store: Option<(sluice_state::IdempotencyGuard, crate::admit::Keys)>,
) -> Response<GatewayBody> {
    let h = r.headers_mut();
    h.reserve(limit_headers.len());
    for (name, value) in limit_headers {
        h.insert(name, value);
    }
    if let Some((g, keys)) = store {
        let body = match r.body() {
            GatewayBody::Full(Some(b)) => Some(b),
            _ => None,
        };
        let stored = crate::admit::to_store(r.status(), r.headers(), body);
        // Boxed: a rare wait, which would otherwise take room in every keyed request's
        // future.
        Box::pin(crate::admit::complete(&keys, g, stored)).await;
    }
    r
}

/// Runs the policy's attempts and answers: the relay for a stream, the whole body otherwise.
pub(crate) async fn serve_attempts(
    state: Arc<Generation>,
    mut policy: Box<Policy>,
    mut log: Box<Finish>,
) -> Response<GatewayBody> {
    let family = policy.ctx.op.family();
    let request_id = policy.ctx.request_id.clone();
    loop {
        let mut attempt = match policy.next().await {
            Ok(a) => a,
            Err(g) => {
                log.attempts = policy.records();
                let reply = give_up_reply(&policy, g);
                if let Some(u) = reply.upstream {
                    log.upstream = state.config.upstream(u).name.clone();
                }
                if let Some(a) = &reply.answer {
                    session_diagnostic(&state, &policy, a, &log);
                }
                return answer_failure(family, reply, &mut log, &request_id);
            }
        };
        let upstream = attempt.upstream;
        log.upstream = state.config.upstream(upstream).name.clone();
        log.provider = state.upstream(upstream).price_list;
        log.timings = attempt.resp.extensions().get::<PhaseTimings>().copied();
        if is_event_stream(attempt.resp.headers())
            || ((attempt.built.bedrock || attempt.built.invoke) && policy.ctx.stream)
        {
            return stream_response(&state, policy, attempt, log);
        }
        match read_whole(&state, &mut policy, &mut attempt, &mut log).await {
            Ok(mut r) => {
                log.attempts = policy.records();
                let name = state.upstream(upstream).header.clone();
                served_headers(&mut r, name, log.attempts.len());
                if log.cache.is_some() {
                    if let GatewayBody::Full(Some(body)) = r.body() {
                        log.cache_store_whole(r.status(), r.headers(), body);
                    }
                }
                log.finish(EndReason::Completed);
                return r;
            }
            Err(Whole::Failed(t, started, f)) => policy.failed(t, started, f),
            Err(Whole::Final(f)) => {
                log.attempts = policy.records();
                return fail(family, &mut log, f, &request_id);
            }
        }
    }
}

/// An upstream 4xx that mentions a session is logged with the request id and the names (never
/// the values) of the session headers that were sent: the usual cause is a session header a
/// hop dropped. Computed only on this rare path.
pub(crate) fn session_diagnostic(state: &Generation, policy: &Policy, a: &Answer, log: &Finish) {
    if !a.status.is_client_error() || !contains_ci(&a.body, b"session") {
        return;
    }
    let ucfg = state
        .config
        .upstreams
        .iter()
        .find(|u| u.name == log.upstream);
    let Some(ucfg) = ucfg else { return };
    let sent = headers::upstream_request_headers(
        &policy.ctx.parts.headers,
        headers::Target {
            auth: &ucfg.auth,
            provider: &a.provider,
            translated: a.family != policy.ctx.op.family(),
        },
        &policy.ctx.request_id,
    );
    let names = headers::session_header_names(&sent);
    tracing::warn!(
        request_id = %log.request_id,
        upstream = %ucfg.name,
        status = a.status.as_u16(),
        session_headers_sent = ?names,
        "upstream rejected a request mentioning a session"
    );
}

pub(crate) fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Starts the relay for a stream; the client gets the headers now and heartbeats while the
/// stream has not committed.
pub(crate) fn stream_response(
    state: &Generation,
    policy: Box<Policy>,
    attempt: Attempt,
    log: Box<Finish>,
) -> Response<GatewayBody> {
    let want_timing = wants_timing(state, &policy.ctx.parts.headers);
    let mut out_headers =
        headers::client_response_headers(attempt.resp.headers().clone(), &policy.ctx.request_id);
    if want_timing {
        if let Some(v) = log.timings.and_then(server_timing) {
            out_headers.insert(SERVER_TIMING, v);
        }
    }
    out_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    out_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    out_headers.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    if let Some(v) = crate::outbound::dropped_header(&attempt.built) {
        out_headers.insert(X_SLUICE_DROPPED_PARAMS, v);
    }
    if attempt.built.translated {
        out_headers.remove(header::CONTENT_ENCODING);
        // The events are ours: their length is not the upstream body's (an AWS event stream
        // may come with one).
        out_headers.remove(header::CONTENT_LENGTH);
    }
    let status = attempt.resp.status();
    let ucfg = &state.config.upstream(attempt.upstream);
    let setup = RelaySetup {
        op: policy.ctx.op,
        max_event_bytes: state.config.server.max_event_bytes,
        timers: RelayTimers {
            idle: ucfg.timeouts.idle,
            total_by: policy.deadline,
            heartbeat: state.config.server.heartbeat,
        },
        shutdown: state.shared.streams_deadline.clone().cancelled_owned(),
        on_disconnect: policy.route().on_client_disconnect,
        telemetry: state.telemetry.clone(),
        token_cap: log
            .ticket()
            .and_then(|t| t.stream_cap())
            .map(|cap| crate::relay::TokenCap {
                cap,
                input_estimate: crate::admit::input_estimate(policy.ctx.body.len()),
            }),
        // A route without guardrails: this emptiness check is all it pays.
        guard: if policy.ctx.guardrails.is_empty() {
            None
        } else {
            crate::guard::stream_guard(
                &state.guards,
                &policy.ctx.guardrails,
                &attempt.built.model,
                policy.deadline,
            )
        },
    };
    // The header goes before the stream's checks act: it names the guardrails watching it
    // (what they did is in the stream's last comment, the log and the ledger).
    if let Some(v) = setup
        .guard
        .as_ref()
        .and_then(|g| HeaderValue::from_str(&g.watching()).ok())
    {
        out_headers.append(crate::guard::X_SLUICE_GUARDRAILS, v);
    }
    let mut log = log;
    log.status = status.as_u16();
    log.stream_started();
    // A route without resumable streams, and no request asking: these two reads are all it
    // pays.
    let resumable = crate::resume::applies(policy.route().resumable, &policy.ctx.parts.headers);
    let background = policy
        .ctx
        .parts
        .extensions
        .get::<crate::resume::Background>()
        .map(|b| b.0.clone());
    let stream = background.or_else(|| {
        let cfg = resumable?;
        // As admission found it (`Keys::stream_owner`): the key the client presented, even
        // on a route that does not check keys.
        let owner = match policy.ctx.parts.extensions.get::<crate::resume::Owner>() {
            Some(crate::resume::Owner::Refused) => return None,
            Some(crate::resume::Owner::Key(id)) => Some(&**id),
            Some(crate::resume::Owner::Anyone) | None => None,
        };
        let s = state.shared.resume.admit(owner, cfg, false);
        if s.is_none() {
            out_headers.insert(
                crate::resume::X_SLUICE_RESUMABLE,
                crate::resume::refused_header(),
            );
        }
        s
    });
    let relay = SseRelay::new(setup, policy, attempt, log);
    let body = match stream {
        None => GatewayBody::Relay(Box::new(relay)),
        Some(s) => {
            // Attached before the pump starts, so the stream is never detached before its
            // first client read it.
            let reader = crate::resume::Reader::attach(s.clone(), 0);
            if let Ok(v) = HeaderValue::from_str(s.id_str()) {
                out_headers.insert(crate::resume::X_SLUICE_STREAM_ID, v);
            }
            out_headers.insert(
                crate::resume::X_SLUICE_RESUMABLE,
                HeaderValue::from_static("on"),
            );
            crate::relay::spawn_resumable(Box::new(relay), s, state.shared.resume.clone());
            match reader {
                Ok(r) => GatewayBody::Resumed(Box::new(r)),
                // A new log always takes a reader from its start.
                Err(_) => GatewayBody::Full(None),
            }
        }
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = out_headers;
    r
}

pub(crate) fn wants_timing(state: &Generation, h: &HeaderMap) -> bool {
    state.config.server.server_timing
        || headers::get(h, &X_SLUICE_TIMING).is_some_and(|v| v.as_bytes() == b"1")
}

pub(crate) fn server_timing(t: PhaseTimings) -> Option<HeaderValue> {
    HeaderValue::from_str(&t.server_timing_header()).ok()
}
