//! The SSE relay: upstream events in, client events out, one complete event at a time.
//!
//! It is an `http_body::Body` that hyper polls only when it can write to the client, and it
//! polls the upstream only when it has nothing ready to give. So:
//! - backpressure is end to end with no buffer of our own: at most one upstream chunk plus one
//!   partial event sit in the gateway (the decoder's bound caps the event), plus the events
//!   one upstream event translated into, and the preamble held until the commit (bounded);
//!   HTTP/2 flow-control capacity upstream is released only as chunks are taken;
//! - cancellation is by ownership: when the client goes away hyper drops this body, which drops
//!   the upstream body (resetting the HTTP/2 stream or discarding the HTTP/1.1 connection) and
//!   any attempt or backoff in progress;
//! - events pass through a [`StreamTranslator`]: the upstream's exact bytes when the client
//!   speaks the upstream's format, translated events otherwise;
//! - a Bedrock stream (AWS event-stream framing, not SSE) is first made the client's SSE
//!   events as its bytes arrive (`aws`: ConverseStream by a [`BedrockStream`], InvokeModel's
//!   chunks unwrapped into their Anthropic events), and those events then take the same way as
//!   an upstream's of the client's own family (decoder, passthrough, hold and commit). Only
//!   Bedrock routes pay for that step.
//!
//! Commit at first content (DESIGN invariant 9): until the first content event, the relay
//! holds the preamble (bounded in events and bytes) and sends only heartbeats; a failure
//! (reset, EOF, an error event, no content within `first_token`) asks the [`Policy`] for the
//! next attempt inside the same `poll_frame`. After the commit it forwards as before and a
//! failure ends the stream with an error event in the client's format.

mod aws;
mod clock;
mod drain;
mod outbox;
mod pump;

pub(crate) use pump::spawn as spawn_resumable;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame};
use sluice_providers::bedrock::{BedrockStream, BedrockStreamOptions};
use sluice_providers::stream::{Emitted, EventKind, SpliceState, StreamOptions, StreamTranslator};
use sluice_providers::{Family, Operation, Usage};
use sluice_sse::{DecodeError, Decoder, Item};
use sluice_upstream::ResponseBody;
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFutureOwned;

use self::clock::{Due, StreamClock};
use self::outbox::Outbox;
use crate::config::OnClientDisconnect;
use crate::policy::{Attempt, AttemptFailure, GiveUp, Policy, TargetRef};
use sluice_telemetry::{EndReason, Telemetry};

use crate::outcome::Finish;

/// A wait longer than this between handing the client an event and being asked for the next
/// one means the client (or its connection) is not keeping up.
const BACKPRESSURE_PAUSE: Duration = Duration::from_millis(10);

/// The preamble held before the commit: more than this and the stream commits anyway (no
/// retry after that), so a stream that never sends content cannot make the relay hold more.
const MAX_HELD_EVENTS: usize = 64;
const MAX_HELD_BYTES: usize = 256 * 1024;

const HEARTBEAT: &[u8] = b": ping\n\n";

/// Continuations one stream may have: each is another paid request, so a target that cuts
/// every stream cannot make a request chain forever.
const MAX_CONTINUATIONS: u8 = 2;

/// Timing settings of one stream.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RelayTimers {
    /// Longest gap between events after the first content.
    pub(crate) idle: Duration,
    /// End of the whole exchange.
    pub(crate) total_by: Instant,
    /// Heartbeat period while the upstream is silent.
    pub(crate) heartbeat: Duration,
}

type NextAttempt = Pin<Box<dyn Future<Output = (Box<Policy>, Result<Attempt, GiveUp>)> + Send>>;

/// The current attempt, while the stream can still move to another one.
struct Uncommitted {
    policy: Box<Policy>,
    target: TargetRef,
    started: Instant,
    /// No first content by then: the target is abandoned.
    first_token_by: Instant,
}

/// The relay body. `Send` (hyper's HTTP/2 server needs it) and owned by the response.
pub(crate) struct SseRelay {
    upstream: Option<ResponseBody>,
    /// The upstream's events; its limit (`max_event_bytes`) is also the next attempt's.
    decoder: Decoder,
    /// A Bedrock attempt's event stream, made the client's SSE events before the decoder
    /// (`None` for every other upstream).
    bedrock: Option<Box<aws::AwsFeed>>,
    translator: Box<dyn StreamTranslator>,
    /// The client's operation: the API its error events are written in.
    op: Operation,
    /// Some of the answer's events reached the client (the stream committed): an error of
    /// the gateway's own then goes on from them (the translator writes it); before, it is the
    /// stream's only event.
    answered: bool,
    /// The current attempt's upstream family (to read its error events).
    upstream_family: Family,
    /// Usage of attempts before a continuation (the current translator reports its own).
    /// Boxed: only continued or capped streams have it, and inline it took the relay past
    /// its 1,024 bytes when the guardrails came.
    usage_before: Option<Box<Usage>>,
    /// After the commit: the balancer's pick of the target streaming, completed at the end.
    pick: Option<sluice_upstream::Pick>,
    /// After the commit, with `continuation` on: the policy, to continue a cut stream.
    continuable: Option<Box<Policy>>,
    /// A cut being continued: what the client gets if the continuation fails before its
    /// first content (the original error, never the continuation's). Boxed: rare, and
    /// every stream would carry its room.
    pending_cut: Option<Box<Cut>>,
    /// Continuations started so far.
    continuations: u8,
    /// `Some` until the commit.
    uncommitted: Option<Uncommitted>,
    /// The next attempt being made (backoff, connect, response headers).
    next: Option<NextAttempt>,
    /// Bytes of the preamble held in `out` until the commit (bounded by `MAX_HELD_BYTES` and
    /// one event: a `u32`, so the relay keeps to its allocation size).
    held_bytes: u32,
    /// Events for the client, oldest first: before the commit, the preamble held (none of it
    /// is ready until then); after, events ready to send.
    out: Outbox,
    scratch: Vec<Emitted>,
    /// Boxed as it came: the relay then fits jemalloc's 1,024-byte class (inline, the log's
    /// 448 bytes took it to 1,536).
    log: Box<Finish>,
    telemetry: Arc<Telemetry>,
    /// The total deadline, the idle one (the attempt's first-token deadline, then last event
    /// + idle) and the heartbeat, on one timer.
    clock: StreamClock,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    upstream_done: bool,
    ended: bool,
    last_yield: Option<Instant>,
    on_disconnect: OnClientDisconnect,
    /// Most upstream bytes held at once (decoder input not yet forwarded), for the metric
    /// that proves the per-stream bound.
    peak_buffered: u32,
    token_cap: Option<TokenCap>,
    /// Text bytes of attempts before a continuation (the current translator tracks its own).
    text_before: u64,
    /// The cap was passed: the events already out go first, then the stream is cut.
    cap_hit: bool,
    /// On a route with output guardrails: the window checks of the answer's text. `None`
    /// otherwise, and then it costs nothing.
    guard: Option<Box<crate::guard::StreamGuard>>,
}

/// A stream's token cap (a key's `cut_streams` token limit): past `cap` tokens, counted as
/// the upstream's usage when it reports one so far, else estimated (input from the request
/// body's size, output from the text sent, about four bytes a token), the stream is cut.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenCap {
    pub(crate) cap: u64,
    /// The request body's bytes / 4: the input, until the upstream says.
    pub(crate) input_estimate: u64,
}

/// A committed stream's cut, while a continuation is tried.
struct Cut {
    reason: EndReason,
    message: String,
    splice: SpliceState,
}

/// What a stream needs besides its first attempt.
pub(crate) struct RelaySetup {
    pub(crate) op: Operation,
    pub(crate) max_event_bytes: usize,
    pub(crate) timers: RelayTimers,
    pub(crate) shutdown: WaitForCancellationFutureOwned,
    pub(crate) on_disconnect: OnClientDisconnect,
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) token_cap: Option<TokenCap>,
    pub(crate) guard: Option<Box<crate::guard::StreamGuard>>,
}

// === impl SseRelay ===

impl SseRelay {
    /// A relay for `attempt`'s stream, able to move to another attempt through `policy`
    /// until the first content.
    pub(crate) fn new(
        setup: RelaySetup,
        policy: Box<Policy>,
        attempt: Attempt,
        log: Box<Finish>,
    ) -> Self {
        let RelaySetup {
            op,
            max_event_bytes,
            timers,
            shutdown,
            on_disconnect,
            telemetry,
            token_cap,
            guard,
        } = setup;
        telemetry.stream_started();
        let translator = new_translator(&policy, &attempt, token_cap.is_some());
        let bedrock = bedrock_stream(&policy, &attempt);
        let upstream_family = attempt.built.provider.family();
        let compressed = compressed_stream(attempt.resp.headers());
        let (_, body) = attempt.resp.into_parts();
        let mut relay = SseRelay {
            upstream: Some(body),
            decoder: new_decoder(max_event_bytes),
            bedrock,
            translator,
            op,
            answered: false,
            upstream_family,
            usage_before: None,
            pick: None,
            continuable: None,
            pending_cut: None,
            continuations: 0,
            uncommitted: Some(Uncommitted {
                policy,
                target: attempt.target,
                started: attempt.started,
                first_token_by: attempt.first_token_by,
            }),
            next: None,
            held_bytes: 0,
            out: Outbox::default(),
            // Room for one: what a passthrough emits per event (a translation grows it).
            scratch: Vec::with_capacity(1),
            log,
            telemetry,
            clock: StreamClock::new(timers, attempt.first_token_by),
            shutdown: Box::pin(shutdown),
            upstream_done: false,
            ended: false,
            last_yield: None,
            on_disconnect,
            peak_buffered: 0,
            token_cap,
            text_before: 0,
            cap_hit: false,
            guard,
        };
        if let Some(f) = compressed {
            relay.retry(f);
        }
        relay
    }

    /// Drops the upstream body (cancelling it if unfinished), keeping its phase timings for
    /// the log line.
    fn take_upstream(&mut self) -> Option<ResponseBody> {
        let up = self.upstream.take();
        if let Some(u) = &up {
            self.log.timings = Some(u.timings());
        }
        up
    }

    /// Hands bytes to the client and restarts the heartbeat clock.
    fn forward(&mut self, bytes: Bytes, events: u64) -> Poll<Option<Result<Frame<Bytes>, Never>>> {
        let now = Instant::now();
        self.clock.wrote(now);
        self.log.first_byte();
        self.log.sent(bytes.len(), events);
        self.log.observe_sse(&bytes);
        if events == 1 {
            // Heartbeats (0 events) are ours, not the answer's.
            self.log.cache_event(&bytes);
        }
        self.last_yield = Some(now);
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }

    /// Ends the stream with a final error event in the client's format. Dropping the
    /// upstream body here cancels it (RST_STREAM / connection closed).
    fn fail(
        &mut self,
        reason: EndReason,
        status: StatusCode,
        code: &str,
        message: &str,
    ) -> Poll<Option<Result<Frame<Bytes>, Never>>> {
        if let Some(cut) = self.pending_cut.take() {
            // The continuation failed: the client gets the original cut, not its error.
            self.telemetry.continuation("failed");
            return self.fail_reason(cut.reason, &cut.message);
        }
        self.take_upstream();
        self.next = None;
        self.finish_attempts();
        self.record_usage(true);
        self.record_guard(None);
        // The target's fault (a cut, a stall) counts against it; the gateway's own ends
        // (shutdown, total timeout, an event over our limit) say nothing about it.
        if let Some(p) = self.pick.take() {
            let failure = match reason {
                EndReason::UpstreamReset | EndReason::UpstreamEofMidEvent => {
                    Some(sluice_upstream::BalanceFailure::Retryable)
                }
                EndReason::IdleTimeout => Some(sluice_upstream::BalanceFailure::Timeout),
                _ => None,
            };
            if let Some(f) = failure {
                p.complete(sluice_upstream::Outcome::Failure(f));
            }
        }
        self.ended = true;
        let event = if self.answered {
            // The translator writes it: it knows what the client's stream said so far (a
            // Responses stream's sequence numbers), and says nothing after its end.
            let mut events = std::mem::take(&mut self.scratch);
            events.clear();
            self.translator.fail(status, code, message, &mut events);
            let bytes = match events.len() {
                1 => events.pop().map(|e| e.bytes).unwrap_or_default(),
                _ => {
                    let mut all = bytes::BytesMut::new();
                    events
                        .drain(..)
                        .for_each(|e| all.extend_from_slice(&e.bytes));
                    all.freeze()
                }
            };
            self.scratch = events;
            bytes
        } else {
            sluice_providers::stream::gateway_error_events(self.op, status, code, message)
        };
        if event.is_empty() {
            self.log.finish(reason);
            return Poll::Ready(None);
        }
        self.log.sent(event.len(), 0);
        self.log.finish(reason);
        Poll::Ready(Some(Ok(Frame::data(event))))
    }

    /// `fail` with one of the gateway's own end reasons.
    fn fail_reason(
        &mut self,
        reason: EndReason,
        message: &str,
    ) -> Poll<Option<Result<Frame<Bytes>, Never>>> {
        let status = match reason {
            EndReason::IdleTimeout | EndReason::FirstByteTimeout | EndReason::TotalTimeout => {
                StatusCode::GATEWAY_TIMEOUT
            }
            EndReason::Shutdown => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_GATEWAY,
        };
        self.fail(reason, status, reason.as_str(), message)
    }

    /// Stops the stream from outside (a resumable stream's pump: the response cancelled, or
    /// no reader for its `keep`) and returns its last event, written as any failure of the
    /// stream is (the translator's, so a Responses stream goes on with its sequence numbers
    /// and ends with `response.failed`); empty if the stream had ended. The upstream is
    /// cancelled here, whatever the route's `on_client_disconnect`: nobody asked for the
    /// rest, so a `drain` would only keep a generation nobody wants running.
    pub(crate) fn abandon(&mut self, code: &str, message: &str) -> Bytes {
        self.on_disconnect = OnClientDisconnect::Cancel;
        if self.ended {
            return Bytes::new();
        }
        // Not a continuation's failure: its original cut is not what stopped it.
        self.pending_cut = None;
        let last = self.fail(
            EndReason::ClientGone,
            StatusCode::SERVICE_UNAVAILABLE,
            code,
            message,
        );
        match last {
            Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
            _ => Bytes::new(),
        }
    }

    fn complete(&mut self) -> Poll<Option<Result<Frame<Bytes>, Never>>> {
        if let Some(cut) = self.pending_cut.take() {
            self.telemetry.continuation("failed");
            return self.fail_reason(cut.reason, &cut.message);
        }
        if let Some(p) = self.pick.take() {
            p.complete(sluice_upstream::Outcome::Success);
        }
        self.ended = true;
        self.take_upstream();
        self.finish_attempts();
        self.record_usage(false);
        self.record_guard(None);
        self.log.cache_store_stream();
        self.log.finish(EndReason::Completed);
        Poll::Ready(None)
    }

    /// The output guardrails' verdicts (each guardrail's most severe, and its time) into the
    /// metrics and the log line (and so the ledger), once, however the stream ended; `deny`
    /// names the guardrail that refused the answer. Returns the stream's last comment,
    /// `: x-sluice-guardrails name(verdict),…`.
    fn record_guard(&mut self, deny: Option<&str>) -> Option<Bytes> {
        let g = self.guard.take()?;
        let mut line = String::new();
        let mut comment = String::from(": x-sluice-guardrails ");
        for (i, (name, mut v, took)) in g.verdicts().into_iter().enumerate() {
            if deny == Some(name) {
                v = sluice_guardrails::Verdict::Deny;
            }
            self.telemetry.guardrail(name, v.as_str());
            if i > 0 {
                line.push(',');
                comment.push(',');
            }
            let v = v.as_str();
            let ms = took.as_secs_f64() * 1000.0;
            line.push_str(&format!("{name}({v}:{ms:.2}ms)"));
            comment.push_str(&format!("{name}({v})"));
        }
        comment.push_str("\n\n");
        match self.log.guardrails.as_mut() {
            Some(l) => {
                l.push(',');
                l.push_str(&line);
            }
            None => self.log.guardrails = Some(Box::new(line)),
        }
        Some(Bytes::from(comment))
    }

    /// An output guardrail refused the answer: the stream ends with an error event in the
    /// client's API (code `content_blocked`) and the upstream is cancelled (dropped).
    fn blocked(&mut self, b: crate::guard::Blocked) -> Polled {
        self.record_guard(Some(&b.guardrail));
        // The events queued are withdrawn too (the caller withdrew those it was checking): the
        // error goes on from the last one sent.
        self.translator.withdraw(self.out.len());
        self.out.clear();
        let message = format!(
            "the answer was stopped by guardrail `{}`: {}",
            b.guardrail, b.reason
        );
        self.log.error = Some(message.clone());
        self.fail(
            EndReason::ContentBlocked,
            StatusCode::BAD_REQUEST,
            "content_blocked",
            &message,
        )
    }

    /// The current attempt's usage as the translator read it from the client's events, with
    /// a Bedrock stream's cache writes: OpenAI, Gemini and Responses usage has no field for
    /// them (they are inside the prompt count), Converse's `metadata` has.
    fn attempt_usage(&self) -> Option<Usage> {
        let mut usage = self.translator.usage();
        let bedrock = self.bedrock.as_ref().and_then(|b| b.usage());
        if let (Some(u), Some(b)) = (usage.as_mut(), bedrock) {
            u.cache_write = b.cache_write.min(u.input);
        }
        usage
    }

    /// The usage seen so far into the log (partial: the stream did not end normally).
    fn record_usage(&mut self, partial: bool) {
        let mut total = self.usage_before.as_deref().copied();
        if let Some(u) = self.attempt_usage() {
            total.get_or_insert_with(Usage::default).add(&u);
        }
        if total.is_some() {
            self.log.usage = total;
            self.log.usage_partial = partial;
        }
    }

    /// Tokens used so far, as [`TokenCap`] counts them.
    fn tokens_used(&self, cap: &TokenCap) -> u64 {
        let mut usage = self.usage_before.as_deref().copied().unwrap_or_default();
        if let Some(u) = self.translator.usage() {
            usage.add(&u);
        }
        let input = if usage.input > 0 {
            usage.input
        } else {
            cap.input_estimate
        };
        input + usage.output.max(self.text_tokens())
    }

    /// Output tokens estimated from the text sent so far (about four bytes a token).
    fn text_tokens(&self) -> u64 {
        (self.text_before + self.translator.text().len() as u64).div_ceil(4)
    }

    /// Ends a stream that passed its token cap with an error event.
    fn cut_at_token_cap(&mut self, cap: TokenCap) -> Poll<Option<Result<Frame<Bytes>, Never>>> {
        if self.usage_before.is_none() && self.translator.usage().is_none() {
            // No usage from the upstream yet: settle with the estimate the cut used, so the
            // key is charged for what it got.
            self.usage_before = Some(Box::new(Usage {
                input: cap.input_estimate,
                output: self.text_tokens(),
                ..Usage::default()
            }));
        }
        let message = format!(
            "the stream was cut: it passed the {} tokens its key's token limit allowed it \
             (the limit has `cut_streams` on)",
            cap.cap
        );
        self.fail(
            EndReason::TokenCap,
            StatusCode::TOO_MANY_REQUESTS,
            "token_limit_exceeded",
            &message,
        )
    }

    /// After the commit: marks the stream to be cut once the client has the events out.
    fn check_token_cap(&mut self) {
        if let Some(cap) = self.token_cap {
            if self.uncommitted.is_none() && !self.cap_hit && self.tokens_used(&cap) > cap.cap {
                self.cap_hit = true;
            }
        }
    }

    /// Moves the policy's attempt records into the log (once the stream's fate is sealed).
    fn finish_attempts(&mut self) {
        if let Some(u) = self.uncommitted.take() {
            self.log.attempts = u.policy.records();
        }
        if let Some(p) = self.continuable.take() {
            self.log.attempts = p.records();
        }
    }

    /// The upstream sent something: restart the idle clock (before the commit, the
    /// first-token deadline still caps it).
    fn upstream_alive(&mut self) {
        let mut next = Instant::now() + self.clock.idle();
        if let Some(u) = &self.uncommitted {
            next = next.min(u.first_token_by);
        }
        self.clock.set_idle(next);
    }

    /// Whether an event is ready for the client (none is before the commit).
    fn has_ready(&self) -> bool {
        self.uncommitted.is_none() && !self.out.is_empty()
    }

    /// The next event ready for the client.
    fn ready(&mut self) -> Option<Bytes> {
        if self.uncommitted.is_some() {
            return None;
        }
        self.out.pop()
    }

    /// Takes one client event from the translator: held before the commit, queued after.
    fn accept(&mut self, e: Emitted) -> Result<(), AttemptFailure> {
        if self.uncommitted.is_none() {
            if self.pending_cut.is_some() {
                match e.kind {
                    EventKind::Error => {
                        return Err(AttemptFailure::before_content(
                            "the continuation failed".into(),
                        ))
                    }
                    EventKind::Content | EventKind::Trailer => {
                        // The continuation is spliced in: the cut is healed.
                        self.pending_cut = None;
                        self.telemetry.continuation("ok");
                    }
                    EventKind::Preamble => {}
                }
            }
            if e.kind == EventKind::Error {
                // Forwarded as it came, but an answer with an error in it is not kept.
                self.log.cache_spoil();
            }
            self.out.push(e.bytes);
            return Ok(());
        }
        match e.kind {
            EventKind::Preamble => {
                self.hold(e.bytes.len());
                self.out.push(e.bytes);
                if self.out.len() > MAX_HELD_EVENTS || self.held_bytes as usize > MAX_HELD_BYTES {
                    // Too much preamble to hold: commit with what we have.
                    self.commit();
                }
                Ok(())
            }
            EventKind::Content | EventKind::Trailer => {
                self.hold(e.bytes.len());
                self.out.push(e.bytes);
                self.commit();
                Ok(())
            }
            EventKind::Error => Err(AttemptFailure::before_content(
                String::from_utf8_lossy(&e.bytes[..e.bytes.len().min(512)])
                    .trim()
                    .to_string(),
            )),
        }
    }

    /// Counts `n` more bytes of held preamble.
    fn hold(&mut self, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        self.held_bytes = self.held_bytes.saturating_add(n);
    }

    /// The first content is here: release the preamble, and from now on never retry.
    fn commit(&mut self) {
        if let Some(mut u) = self.uncommitted.take() {
            u.policy
                .succeeded(u.target, u.started, StatusCode::OK.as_u16());
            self.log.attempts = u.policy.records();
            self.log.upstream = u.policy.upstream_of(u.target).to_string();
            self.log.provider = u.policy.price_list_of(u.target);
            self.log.usage_label = u.policy.usage_label(u.target);
            self.log.renamed = u.policy.renames(u.target);
            self.pick = u.policy.take_pick();
            if let Some(p) = self.pick.as_mut() {
                // A stream is weighed by its first content (the time to first token, which
                // is what a slow replica stretches), not its minutes-long duration.
                p.record_latency(u.started.elapsed());
            }
            if u.policy.route().continuation {
                self.continuable = Some(u.policy);
            }
        }
        // The preamble held in `out` is ready from now on, in its order.
        self.held_bytes = 0;
        self.answered = true;
        let next = Instant::now() + self.clock.idle();
        self.clock.set_idle(next);
    }

    /// Before the commit: record the failure and start the next attempt (or give up).
    fn retry(&mut self, failure: AttemptFailure) {
        if let Some(g) = self.guard.as_mut() {
            g.reset();
        }
        self.take_upstream();
        self.decoder = new_decoder(self.decoder.max_event_bytes());
        self.upstream_done = false;
        self.out.clear();
        self.held_bytes = 0;
        if let Some(u) = self.uncommitted.take() {
            let Uncommitted {
                mut policy,
                target,
                started,
                ..
            } = u;
            policy.failed(target, started, failure);
            self.next = Some(Box::pin(async move {
                let r = policy.next().await;
                (policy, r)
            }));
        }
    }

    /// A new attempt answered: relay its stream instead.
    fn install(&mut self, policy: Box<Policy>, attempt: Attempt) {
        let is_sse = crate::headers::is_event_stream(attempt.resp.headers())
            || attempt.built.bedrock
            || attempt.built.invoke;
        self.translator = new_translator(&policy, &attempt, self.token_cap.is_some());
        self.bedrock = bedrock_stream(&policy, &attempt);
        self.upstream_family = attempt.built.provider.family();
        let compressed = compressed_stream(attempt.resp.headers());
        let (_, body) = attempt.resp.into_parts();
        self.upstream = Some(body);
        self.clock.set_idle(attempt.first_token_by);
        self.uncommitted = Some(Uncommitted {
            policy,
            target: attempt.target,
            started: attempt.started,
            first_token_by: attempt.first_token_by,
        });
        if !is_sse {
            self.retry(AttemptFailure::before_content(
                "the upstream answered a stream request without an event stream".into(),
            ));
        } else if let Some(f) = compressed {
            self.retry(f);
        }
    }

    /// After the commit, a cut (reset, EOF mid-event, stall) with `continuation` on: ask the
    /// policy for a continuation from the text already sent. `false` when there is nothing
    /// to continue with (then the cut ends the stream as usual).
    fn try_continue(&mut self, reason: EndReason, message: &str) -> bool {
        if self.pending_cut.is_some()
            || self.continuations >= MAX_CONTINUATIONS
            || !matches!(
                reason,
                EndReason::UpstreamReset | EndReason::UpstreamEofMidEvent | EndReason::IdleTimeout
            )
        {
            return false;
        }
        let Some(mut policy) = self.continuable.take() else {
            return false;
        };
        let Some(splice) = self.translator.splice_state() else {
            self.telemetry.continuation("unavailable");
            self.continuable = Some(policy);
            return false;
        };
        self.continuations += 1;
        // A spliced answer is two upstream answers made one: not kept.
        self.log.cache_spoil();
        let text = self.translator.text().to_string();
        self.text_before += text.len() as u64;
        // The broken attempt's usage, summed with the continuation's. Its final count never
        // came (OpenAI reports usage at the end, Anthropic's `message_start` says 1 output
        // token): the text it sent is what the provider generated and bills, so its output is
        // at least that text's estimate (about four bytes a token, as the token cap counts).
        let mut u = self.attempt_usage().unwrap_or_default();
        u.output = u.output.max((text.len() as u64).div_ceil(4));
        if u != Usage::default() {
            self.usage_before.get_or_insert_with(Box::default).add(&u);
        }
        // The stalled or cut target's fault counts against it, as when the cut ends the
        // stream (`fail`): a stall as a timeout.
        if let Some(p) = self.pick.take() {
            let failure = if reason == EndReason::IdleTimeout {
                sluice_upstream::BalanceFailure::Timeout
            } else {
                sluice_upstream::BalanceFailure::Retryable
            };
            p.complete(sluice_upstream::Outcome::Failure(failure));
        }
        // Dropping the attempt's body cancels it upstream: RST_STREAM(CANCEL) on HTTP/2, the
        // connection closed on HTTP/1.1 (a body not read to its end never goes back to the
        // pool). A stalled upstream would otherwise go on generating, and billing, unread.
        drop(self.take_upstream());
        self.decoder = new_decoder(self.decoder.max_event_bytes());
        self.upstream_done = false;
        self.pending_cut = Some(Box::new(Cut {
            reason,
            message: message.to_string(),
            splice,
        }));
        let stalled = reason == EndReason::IdleTimeout;
        self.next = Some(Box::pin(async move {
            let r = policy.continuation(text, stalled).await;
            (policy, r)
        }));
        true
    }

    /// The continuation answered: relay its stream, spliced after what the client has.
    fn install_continuation(&mut self, policy: Box<Policy>, attempt: Attempt) {
        let is_sse = crate::headers::is_event_stream(attempt.resp.headers())
            || attempt.built.bedrock
            || attempt.built.invoke;
        self.bedrock = bedrock_stream(&policy, &attempt);
        if let Some(cut) = &self.pending_cut {
            let built = &attempt.built;
            let mut opts = StreamOptions::new(policy.ctx.op, &built.provider, &built.model);
            opts.client_wants_usage = built.client_wants_usage;
            opts.created = crate::clock::now_unix();
            opts.continuation = true;
            // Its text is the next continuation's prefill (after the text before it), if
            // one may follow.
            opts.track_text = self.continuations < MAX_CONTINUATIONS || self.token_cap.is_some();
            opts.splice = Some(&cut.splice);
            self.translator = sluice_providers::stream::translator(&opts);
        }
        self.upstream_family = attempt.built.provider.family();
        let (_, body) = attempt.resp.into_parts();
        self.upstream = Some(body);
        self.clock.set_idle(attempt.first_token_by);
        self.continuable = Some(policy);
        if !is_sse {
            self.take_upstream();
            self.upstream_done = true;
        }
    }

    /// A block that dispatches no event (a comment, a lone `retry:` or `id:`) goes to the
    /// client in its place: after the held preamble when there is one, so the bytes keep
    /// their order before the commit as after it.
    fn pass_block(&mut self, raw: Bytes) -> Option<Polled> {
        if raw.is_empty() {
            return None;
        }
        if self.uncommitted.is_some() && !self.out.is_empty() {
            self.hold(raw.len());
            self.out.push(raw);
            return None;
        }
        Some(self.forward(raw, 0))
    }

    /// The policy gave up before the commit: the last failure as an error event.
    fn give_up(
        &mut self,
        policy: Box<Policy>,
        g: GiveUp,
    ) -> Poll<Option<Result<Frame<Bytes>, Never>>> {
        self.log.attempts = policy.records();
        let mut reply = crate::policy::give_up_reply(&policy, g);
        self.log.error = reply.detail.take();
        self.fail(reply.reason, reply.status, &reply.code, &reply.message)
    }
}

/// The translator for an attempt's stream: a passthrough when the client speaks the
/// upstream's format, a translating one otherwise.
/// A Bedrock attempt's stream translator into the client's SSE events. It always writes the
/// usage chunk: the passthrough after it reads the usage there and removes the chunk unless
/// the client asked for it.
fn bedrock_stream(policy: &Policy, attempt: &Attempt) -> Option<Box<aws::AwsFeed>> {
    let built = &attempt.built;
    if built.invoke {
        return Some(Box::new(aws::AwsFeed::invoke()));
    }
    if !built.bedrock {
        return None;
    }
    let mut opts = BedrockStreamOptions::new(policy.ctx.op, &built.model);
    opts.client_wants_usage = true;
    opts.created = crate::clock::now_unix();
    Some(Box::new(aws::AwsFeed::converse(BedrockStream::new(&opts))))
}

fn new_translator(policy: &Policy, attempt: &Attempt, capped: bool) -> Box<dyn StreamTranslator> {
    let built = &attempt.built;
    let mut opts = StreamOptions::new(policy.ctx.op, &built.provider, &built.model);
    opts.client_wants_usage = built.client_wants_usage;
    // A token cap counts the text sent (its bytes stay in memory, bounded by the cap).
    opts.track_text = policy.route().continuation || capped;
    opts.created = crate::clock::now_unix();
    sluice_providers::stream::translator(&opts)
}

/// An event stream in a content coding (the gateway asks for `identity`, but an upstream or a
/// proxy in front of it may compress anyway): its bytes are not events, so the attempt fails
/// with a reason that says so instead of as an EOF mid-event.
fn compressed_stream(h: &http::HeaderMap) -> Option<AttemptFailure> {
    crate::headers::content_coding(h).map(|c| {
        AttemptFailure::before_content(format!(
            "the upstream sent its event stream with Content-Encoding `{}`, although the \
             gateway asked for identity; it cannot be relayed",
            sluice_telemetry::untrusted::echo(c)
        ))
    })
}

fn new_decoder(max_event_bytes: usize) -> Decoder {
    Decoder::with_max_event_bytes(max_event_bytes).unwrap_or_default()
}

type Never = std::convert::Infallible;

/// What `poll_frame` returns.
type Polled = Poll<Option<Result<Frame<Bytes>, Never>>>;

/// What a phase of [`SseRelay::poll_frame`] decided.
enum Step {
    /// Answer the client with this.
    Out(Polled),
    /// Start over from the top: something the earlier phases read changed.
    Again,
    /// Nothing here: go on to the next phase.
    Next,
    /// Nothing until a wake-up; only the clock may be due.
    Wait,
}

// === impl SseRelay: the phases of poll_frame ===

impl SseRelay {
    /// The next attempt being made (a retry, a fallback, a continuation), if any.
    fn poll_next_attempt(&mut self, cx: &mut Context<'_>) -> Step {
        let Some(next) = self.next.as_mut() else {
            return Step::Next;
        };
        match next.as_mut().poll(cx) {
            Poll::Pending => Step::Wait,
            Poll::Ready((policy, Ok(attempt))) => {
                self.next = None;
                if self.pending_cut.is_some() {
                    self.install_continuation(policy, attempt);
                } else {
                    self.install(policy, attempt);
                }
                Step::Again
            }
            Poll::Ready((policy, Err(g))) => {
                self.next = None;
                if self.pending_cut.is_some() {
                    self.log.attempts = policy.records();
                    let _ = g;
                    return Step::Out(self.fail_reason(EndReason::UpstreamReset, ""));
                }
                Step::Out(self.give_up(policy, g))
            }
        }
    }

    /// The upstream's events decoded so far: translated and accepted (held before the
    /// commit, ready after), blocks without an event passed on, a decode error ended.
    fn take_decoded(&mut self) -> Step {
        let mut failure = None;
        while let Some(item) = self.decoder.next_item() {
            match item {
                Ok(Item::Event(ev)) => {
                    let mut scratch = std::mem::take(&mut self.scratch);
                    self.translator.event(&ev, &mut scratch);
                    if let Some(g) = self.guard.as_mut() {
                        let emitted = scratch.len();
                        if let Err(b) = g.filter(&mut scratch) {
                            scratch.clear();
                            self.scratch = scratch;
                            self.translator.withdraw(emitted);
                            return Step::Out(self.blocked(b));
                        }
                    }
                    for e in scratch.drain(..) {
                        if let Err(f) = self.accept(e) {
                            // An error event before the first content: what it means
                            // decides the retry (overloaded: retry; filtered: final).
                            failure = Some(
                                sluice_providers::error::classify_stream_error(
                                    self.upstream_family,
                                    &ev,
                                )
                                .map(AttemptFailure::stream_error)
                                .unwrap_or(f),
                            );
                            break;
                        }
                    }
                    scratch.clear();
                    self.scratch = scratch;
                    self.upstream_alive();
                    self.check_token_cap();
                    if failure.is_some() || self.has_ready() || self.guard_busy() {
                        break;
                    }
                }
                Ok(Item::Comment(c)) => {
                    if c.in_event() {
                        // Its bytes travel inside the event's raw span.
                        continue;
                    }
                    // An upstream heartbeat: proof of life, and the client gets it too.
                    self.upstream_alive();
                    if let Some(out) = self.pass_block(c.raw().clone()) {
                        return Step::Out(out);
                    }
                }
                Ok(Item::Skipped(s)) => {
                    if let Some(out) = self.pass_block(s.raw().clone()) {
                        return Step::Out(out);
                    }
                }
                Err(DecodeError::EventTooLarge { limit }) => {
                    return Step::Out(self.fail_reason(
                        EndReason::EventTooLarge,
                        &format!("an upstream event exceeded the gateway's limit of {limit} bytes"),
                    ));
                }
                Err(DecodeError::Truncated { .. }) => {
                    if self.uncommitted.is_some() {
                        failure = Some(AttemptFailure::before_content(
                            "the upstream closed the stream in the middle of an event".into(),
                        ));
                        break;
                    }
                    let msg = "the upstream closed the stream in the middle of an event";
                    if self.try_continue(EndReason::UpstreamEofMidEvent, msg) {
                        // A continuation was started: go back to the top to poll it.
                        return Step::Again;
                    }
                    return Step::Out(self.fail_reason(EndReason::UpstreamEofMidEvent, msg));
                }
            }
        }
        match failure {
            Some(_) if self.pending_cut.is_some() => {
                Step::Out(self.fail_reason(EndReason::UpstreamReset, ""))
            }
            Some(f) => {
                self.retry(f);
                Step::Again
            }
            // A check started: the events behind it wait for its answer (`poll_guard`).
            None if self.guard_busy() => Step::Again,
            None => Step::Next,
        }
    }

    /// The upstream's body has ended: the translator's last events, then the end of the
    /// stream (or, before the commit, another attempt).
    fn at_upstream_end(&mut self) -> Step {
        if self.guard_busy() {
            return Step::Again;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        self.translator.end(&mut scratch);
        if let Some(g) = self.guard.as_mut() {
            let emitted = scratch.len();
            if let Err(b) = g.finish(&mut scratch) {
                scratch.clear();
                self.scratch = scratch;
                self.translator.withdraw(emitted);
                return Step::Out(self.blocked(b));
            }
        }
        let mut failure = None;
        for e in scratch.drain(..) {
            if let Err(f) = self.accept(e) {
                failure = Some(f);
                break;
            }
        }
        self.scratch = scratch;
        if let Some(f) = failure {
            self.retry(f);
            return Step::Again;
        }
        if self.uncommitted.is_some() {
            self.retry(AttemptFailure::before_content(
                "the upstream ended the stream before any content".into(),
            ));
            return Step::Again;
        }
        if self.has_ready() || self.guard_busy() {
            return Step::Again;
        }
        // What the output guardrails did, as the stream's last comment (the header went
        // before they acted); `complete` then finds them recorded.
        if let Some(comment) = self.record_guard(None) {
            return Step::Out(self.forward(comment, 0));
        }
        Step::Out(self.complete())
    }

    /// An external checker's check is in flight (or events wait behind one).
    fn guard_busy(&self) -> bool {
        self.guard.as_ref().is_some_and(|g| g.busy())
    }

    /// The check in flight: until it answers, nothing more is read from the upstream (the
    /// events behind it wait in the guard); its answer releases them.
    fn poll_guard(&mut self, cx: &mut Context<'_>) -> Step {
        let Some(g) = self.guard.as_mut().filter(|g| g.busy()) else {
            return Step::Next;
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        match g.poll(cx, &mut scratch) {
            Poll::Pending => {
                self.scratch = scratch;
                Step::Wait
            }
            Poll::Ready(Err(b)) => {
                scratch.clear();
                self.scratch = scratch;
                Step::Out(self.blocked(b))
            }
            Poll::Ready(Ok(())) => {
                let mut failure = None;
                for e in scratch.drain(..) {
                    if let Err(f) = self.accept(e) {
                        failure = Some(f);
                        break;
                    }
                }
                scratch.clear();
                self.scratch = scratch;
                if let Some(f) = failure {
                    if self.pending_cut.is_some() {
                        return Step::Out(self.fail_reason(EndReason::UpstreamReset, ""));
                    }
                    self.retry(f);
                }
                Step::Again
            }
        }
    }

    /// The next piece of the upstream's body, unless the gateway is shutting down.
    fn poll_upstream(&mut self, cx: &mut Context<'_>) -> Step {
        if self.shutdown.as_mut().poll(cx).is_ready() {
            return Step::Out(
                self.fail_reason(EndReason::Shutdown, "the gateway is shutting down"),
            );
        }
        let Some(upstream) = self.upstream.as_mut() else {
            return Step::Out(self.complete());
        };
        match Pin::new(upstream).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    self.feed_decoder(data, false);
                    let buffered = u32::try_from(self.decoder.buffered_bytes()).unwrap_or(u32::MAX);
                    self.peak_buffered = self.peak_buffered.max(buffered);
                }
                Step::Again
            }
            Poll::Ready(Some(Err(e))) => {
                // The client reads no OS error or address; the log has it whole.
                self.log.error = Some(format!("the upstream broke off the stream: {e}"));
                let msg = format!(
                    "the upstream broke off the stream: {}",
                    crate::error::public_body_error(&e)
                );
                if self.uncommitted.is_some() {
                    self.retry(AttemptFailure::before_content(msg));
                    return Step::Again;
                }
                if self.try_continue(EndReason::UpstreamReset, &msg) {
                    return Step::Again;
                }
                Step::Out(self.fail_reason(EndReason::UpstreamReset, &msg))
            }
            Poll::Ready(None) => {
                self.feed_decoder(Bytes::new(), true);
                self.decoder.finish();
                self.upstream_done = true;
                Step::Again
            }
            Poll::Pending => Step::Wait,
        }
    }

    /// Upstream bytes into the SSE decoder: as they came, or, from Bedrock, as the client's
    /// events they translate into (`end`: the body ended, close the translation).
    fn feed_decoder(&mut self, data: Bytes, end: bool) {
        let Some(b) = self.bedrock.as_mut() else {
            if !end {
                self.decoder.feed(data);
            }
            return;
        };
        let decoder = &mut self.decoder;
        b.feed(&data, end, &mut |event| decoder.feed(event));
    }

    /// Nothing to read: the total deadline, the idle (or first-token) deadline and the
    /// heartbeat, on one timer.
    fn on_due(&mut self, cx: &mut Context<'_>) -> Polled {
        // While another attempt is being made, its own deadlines bound it.
        match self.clock.poll_due(cx, self.next.is_none()) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Due::Total) => self.fail_reason(
                EndReason::TotalTimeout,
                "the stream exceeded the gateway's total timeout",
            ),
            Poll::Ready(Due::Idle) => {
                if let Some(u) = &self.uncommitted {
                    let failure = if Instant::now() >= u.first_token_by {
                        AttemptFailure::first_token_timeout(u.policy.first_token_timeout(u.target))
                    } else {
                        AttemptFailure::idle_before_content(self.clock.idle())
                    };
                    self.retry(failure);
                    // Poll the new attempt (registers its waker) before returning.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                let msg = format!(
                    "no event from the upstream for {:?} (idle timeout)",
                    self.clock.idle()
                );
                if self.try_continue(EndReason::IdleTimeout, &msg) {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                self.fail_reason(EndReason::IdleTimeout, &msg)
            }
            Poll::Ready(Due::Heartbeat) => {
                self.telemetry.heartbeat();
                // A heartbeat is not upstream progress; it only keeps the client's side alive.
                let out = self.forward(Bytes::from_static(HEARTBEAT), 0);
                self.last_yield = None;
                out
            }
        }
    }
}

// === impl Body for SseRelay ===

impl Body for SseRelay {
    type Data = Bytes;
    type Error = Never;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Never>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if let Some(t) = this.last_yield.take() {
            if t.elapsed() >= BACKPRESSURE_PAUSE {
                this.telemetry.backpressure_pause();
            }
        }
        // Each phase either answers the client (`Out`), asks to start over (`Again`: it
        // changed what the earlier phases see), hands on to the next phase (`Next`), or has
        // nothing until a wake-up (`Wait`, then only the clock is due).
        loop {
            if let Some(b) = this.ready() {
                return this.forward(b, 1);
            }
            if let (true, Some(cap)) = (this.cap_hit, this.token_cap) {
                return this.cut_at_token_cap(cap);
            }
            let step = match this.poll_next_attempt(cx) {
                Step::Next => match this.poll_guard(cx) {
                    Step::Next => match this.take_decoded() {
                        Step::Next if this.has_ready() => Step::Again,
                        Step::Next if this.upstream_done => this.at_upstream_end(),
                        Step::Next => this.poll_upstream(cx),
                        other => other,
                    },
                    other => other,
                },
                other => other,
            };
            match step {
                Step::Out(out) => return out,
                Step::Again | Step::Next => continue,
                Step::Wait => break,
            }
        }
        this.on_due(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

impl Drop for SseRelay {
    fn drop(&mut self) {
        self.telemetry.stream_ended();
        self.telemetry
            .relay_buffer_peak(self.peak_buffered as usize);
        // A client that stopped taking data and then left never polled again: its last
        // pause ends here.
        if self
            .last_yield
            .is_some_and(|t| t.elapsed() >= BACKPRESSURE_PAUSE)
        {
            self.telemetry.backpressure_pause();
        }
        if self.ended {
            return;
        }
        // The client went away mid-stream.
        let upstream = self.take_upstream();
        self.finish_attempts();
        self.record_usage(true);
        self.record_guard(None);
        self.log.finish(EndReason::ClientGone);
        if self.on_disconnect == OnClientDisconnect::Drain {
            if let Some(upstream) = upstream {
                let decoder = std::mem::take(&mut self.decoder);
                let bedrock = self.bedrock.take();
                let deadline = self.clock.total_by();
                let request_id = self.log.request_id.clone();
                // Bounded by the total deadline; owns nothing but the upstream body.
                tokio::spawn(drain::drain(
                    upstream, decoder, bedrock, deadline, request_id,
                ));
            }
        }
    }
}

#[cfg(all(test, target_pointer_width = "64"))]
mod size_tests {
    use super::SseRelay;

    /// The relay is one allocation a stream: past 1,024 bytes jemalloc gives it 1,280 (or
    /// 1,536), so a field added here should take room from another, or go in a box.
    #[test]
    fn the_relay_fits_a_1024_byte_allocation() {
        let size = std::mem::size_of::<SseRelay>();
        assert!(size <= 1024, "the relay is {size} bytes");
    }
}
