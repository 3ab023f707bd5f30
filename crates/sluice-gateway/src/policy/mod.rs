//! The policy stage: the attempt loop of one request.
//!
//! It is the only place that decides to try again, and it decides from a typed
//! [`FailureClass`], never from a string (DESIGN: "policy"). One request has one deadline
//! across every attempt, backoff and fallback; every attempt is logged with its target, class,
//! status and duration.
//!
//! Targets come in tiers: tier 0 is the route's `targets` (spread by the balancer), tier `k`
//! is `fallbacks[k - 1]`. A retryable failure is retried within its tier (another target of
//! the tier first; the same one only when it is the only one left), up to `retry.attempts`
//! attempts per tier, then the request falls back to the next tier. Never-sent failures are
//! always safe; maybe-processed ones only for idempotent requests (an `Idempotency-Key`, or
//! a route marked `idempotent`); final errors are returned as they are; a context-length
//! error goes only to a target with a larger context window. A silent target (first-byte or
//! first-token timeout) is never tried twice for one request.
//!
//! Streams run the same loop until they commit (see `relay`): the relay holds this `Policy`
//! and asks it for the next attempt when a stream fails before its first content.

mod backoff;

mod class;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use sluice_upstream::{Lane, ResponseBody};
use tokio::time::{sleep, timeout_at, Instant};

mod reply;

pub use class::FailureClass;
pub(crate) use class::{Answer, AttemptFailure, Cause};
pub(crate) use reply::{give_up_reply, Reply};

use crate::config::{RouteConfig, TargetConfig, UpstreamId};
use crate::error::GatewayError;
use crate::generation::Generation;

use crate::ctx::RequestCtx;

/// Below this much time left, no attempt is started: it could not finish.
const MIN_ATTEMPT: Duration = Duration::from_millis(20);

/// The most of an upstream's error body read to classify it and pass it on.
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// A target's place in its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TargetRef {
    pub(crate) tier: usize,
    pub(crate) index: usize,
}

/// A successful attempt: response headers from one target.
pub(crate) struct Attempt {
    pub(crate) resp: Response<ResponseBody>,
    pub(crate) target: TargetRef,
    pub(crate) upstream: UpstreamId,
    pub(crate) started: Instant,
    /// Streams: no first content by then and the target is abandoned.
    pub(crate) first_token_by: Instant,
    /// What was sent: provider, model, translation.
    pub(crate) built: crate::outbound::Built,
}

/// One attempt, for the request's log line.
#[derive(Clone, Debug)]
pub(crate) struct AttemptRecord {
    pub(crate) upstream: UpstreamId,
    /// `None`: it succeeded.
    pub(crate) class: Option<FailureClass>,
    pub(crate) cause: &'static str,
    pub(crate) status: Option<u16>,
    pub(crate) started: Instant,
    pub(crate) duration: Duration,
}

/// Why the policy stopped trying, and the last failure (what the client gets).
pub(crate) struct GiveUp {
    pub(crate) failure: Option<(UpstreamId, AttemptFailure)>,
    pub(crate) reason: GiveUpReason,
}

/// Why no further attempt was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GiveUpReason {
    /// The last failure is final, or maybe-processed without idempotency.
    NotRetryable,
    /// Every allowed attempt and tier was used.
    Exhausted,
    /// The upstream's retry budget was spent.
    Budget,
    /// What is left of the deadline cannot hold another attempt.
    Deadline,
}

/// The attempt loop of one request. `Send + 'static`: streams hand it to their relay.
pub(crate) struct Policy {
    state: Arc<Generation>,
    route: usize,
    pub(crate) ctx: RequestCtx,
    pub(crate) deadline: Instant,
    rng: fastrand::Rng,
    tier: usize,
    tier_attempts: u32,
    failed: Vec<TargetRef>,
    pub(crate) attempts: Vec<AttemptRecord>,
    /// The last failure. Boxed: only a failed attempt sets it, and every request would carry
    /// its room (136 bytes) to its end.
    last: Option<Box<(TargetRef, AttemptFailure)>>,
    /// Continuation: the assistant text the client already has, sent as a prefill.
    prefill: Option<String>,
    /// The balancer's pick for the attempt in flight (tier 0 only): in flight until completed.
    pick: Option<sluice_upstream::Pick>,
    /// The target whose answer the client is getting.
    served: Option<TargetRef>,
}

// === impl Policy ===

impl Policy {
    /// `deadline`: when the whole request must be over.
    pub(crate) fn new(
        state: Arc<Generation>,
        route: usize,
        ctx: RequestCtx,
        deadline: Instant,
    ) -> Self {
        Policy {
            state,
            route,
            ctx,
            deadline,
            rng: fastrand::Rng::new(),
            tier: 0,
            tier_attempts: 0,
            failed: Vec::new(),
            attempts: Vec::new(),
            last: None,
            prefill: None,
            pick: None,
            served: None,
        }
    }

    pub(crate) fn route(&self) -> &RouteConfig {
        &self.state.config.routes[self.route]
    }

    fn target(&self, t: TargetRef) -> &TargetConfig {
        &self.route().tier(t.tier)[t.index]
    }

    /// The upstream's name, for logs and errors.
    pub(crate) fn upstream_name(&self, upstream: UpstreamId) -> &str {
        &self.state.config.upstream(upstream).name
    }

    /// Tries targets until one answers with a success status, or gives up.
    ///
    /// # Cancel safety
    /// Dropping the future (the client left) cancels the attempt in flight or the backoff.
    pub(crate) async fn next(&mut self) -> Result<Attempt, GiveUp> {
        loop {
            if let Some(last) = &self.last {
                if !self.may_retry(&last.1) {
                    return Err(self.give_up(GiveUpReason::NotRetryable));
                }
            }
            let prev_tier = self.tier;
            let Some(t) = self.choose() else {
                return Err(self.give_up(GiveUpReason::Exhausted));
            };
            let upstream = self.target(t).upstream;
            // When the attempt starts: its timeouts count from here, and its log and trace
            // span show it (one clock read for the deadline check and the start).
            let started = if self.last.is_some() {
                if !self.state.upstream(upstream).budget.try_retry() {
                    self.state
                        .telemetry
                        .retry_budget_exhausted(self.upstream_name(upstream));
                    return Err(self.give_up(GiveUpReason::Budget));
                }
                let wait = self.wait_before(t);
                let now = Instant::now();
                if now + wait + MIN_ATTEMPT >= self.deadline {
                    return Err(self.give_up(GiveUpReason::Deadline));
                }
                if t.tier != prev_tier {
                    self.state.telemetry.fallback(&self.route().name);
                } else {
                    self.state.telemetry.retry(self.upstream_name(upstream));
                }
                if wait.is_zero() {
                    now
                } else {
                    sleep(wait).await;
                    Instant::now()
                }
            } else {
                self.state.upstream(upstream).budget.request();
                let now = Instant::now();
                if now + MIN_ATTEMPT >= self.deadline {
                    return Err(self.give_up(GiveUpReason::Deadline));
                }
                now
            };
            match self.attempt(t, started).await {
                Ok(a) => return Ok(a),
                Err(f) => self.failed(t, started, f),
            }
        }
    }

    /// Continuation after a committed stream was cut or stalled: one attempt, on a target
    /// that takes an assistant prefill, asking it to go on from the text the client already
    /// has. That is the prefill of the last continuation (the text of every attempt before
    /// it) followed by `sent`, the text of the attempt that broke off. After a cut, the target
    /// that was streaming if it takes a prefill, else the first in tier order; after a stall
    /// (`stalled`), another one first: a target that just went silent (an overloaded replica,
    /// a stuck connection) is likely to again, and each stall costs the client a whole idle
    /// timeout. No retry: if it fails, the client gets the original cut's error.
    ///
    /// # Cancel safety
    /// As [`Policy::next`].
    pub(crate) async fn continuation(
        &mut self,
        sent: String,
        stalled: bool,
    ) -> Result<Attempt, GiveUp> {
        let takes_prefill =
            |p: &Policy, t: TargetRef| p.state.config.upstream(p.target(t).upstream).prefill;
        let route = self.route();
        let mut all = (0..route.tiers()).flat_map(|tier| {
            (0..route.tier(tier).len()).map(move |index| TargetRef { tier, index })
        });
        let served = self.served.filter(|t| takes_prefill(self, *t));
        let t = if stalled {
            all.find(|t| Some(*t) != self.served && takes_prefill(self, *t))
                .or(served)
        } else {
            served.or_else(|| all.find(|t| takes_prefill(self, *t)))
        };
        let Some(t) = t else {
            return Err(self.give_up(GiveUpReason::NotRetryable));
        };
        let upstream = self.target(t).upstream;
        let started = Instant::now();
        if started + MIN_ATTEMPT >= self.deadline
            || !self.state.upstream(upstream).budget.try_retry()
        {
            return Err(self.give_up(GiveUpReason::Deadline));
        }
        // A second continuation goes on after the first one's text too, not after its own.
        match &mut self.prefill {
            Some(before) => before.push_str(&sent),
            None => self.prefill = Some(sent),
        }
        match self.attempt(t, started).await {
            Ok(a) => Ok(a),
            Err(f) => {
                self.failed(t, started, f);
                Err(self.give_up(GiveUpReason::NotRetryable))
            }
        }
    }

    /// Records a failed attempt (also one the caller saw fail after `next` returned it: a
    /// stream that broke before its first content, a body that broke off).
    pub(crate) fn failed(&mut self, t: TargetRef, started: Instant, f: AttemptFailure) {
        if let Some(pick) = self.pick.take() {
            pick.complete(f.balancer_outcome());
        }
        let upstream = self.target(t).upstream;
        let record = AttemptRecord {
            upstream,
            class: Some(f.class),
            cause: f.cause_label(),
            status: f.status(),
            started,
            duration: started.elapsed(),
        };
        self.state.telemetry.attempt(
            &self.route().name,
            self.upstream_name(upstream),
            f.class.metric_label(),
        );
        tracing::debug!(
            request_id = ?self.ctx.request_id,
            upstream = %self.upstream_name(upstream),
            class = f.class.metric_label(),
            cause = f.cause_label(),
            "attempt failed"
        );
        self.attempts.push(record);
        self.failed.push(t);
        self.last = Some(Box::new((t, f)));
    }

    /// Records the attempt that served the request.
    pub(crate) fn succeeded(&mut self, t: TargetRef, started: Instant, status: u16) {
        self.served = Some(t);
        let now = Instant::now();
        // Streams keep their pick until they end (see `take_pick`).
        if !self.ctx.stream {
            if let Some(pick) = self.pick.take() {
                pick.complete_at(sluice_upstream::Outcome::Success, now);
            }
        }
        let upstream = self.target(t).upstream;
        self.attempts.push(AttemptRecord {
            upstream,
            class: None,
            cause: "ok",
            status: Some(status),
            started,
            duration: now.saturating_duration_since(started),
        });
        self.state
            .telemetry
            .attempt(&self.route().name, self.upstream_name(upstream), "ok");
    }

    /// The attempts so far, for the log line.
    pub(crate) fn records(&self) -> Vec<sluice_telemetry::AttemptLog> {
        self.attempts
            .iter()
            .map(|a| sluice_telemetry::AttemptLog {
                upstream: self.upstream_name(a.upstream).to_string(),
                outcome: a.class.map_or("ok", FailureClass::metric_label),
                cause: a.cause,
                status: a.status,
                started: a.started,
                duration: a.duration,
            })
            .collect()
    }

    /// The `model` label of token metrics for `t`: the target's model name when it sets one,
    /// else the route's name (bounded by the config, never a client-chosen string).
    pub(crate) fn usage_label(&self, t: TargetRef) -> String {
        self.target(t)
            .model
            .clone()
            .unwrap_or_else(|| self.route().name.clone())
    }

    /// Whether `t` renames the model (its `model`), so that [`Policy::usage_label`] is the
    /// model it served.
    pub(crate) fn renames(&self, t: TargetRef) -> bool {
        self.target(t).model.is_some()
    }

    /// The price list of `t`'s upstream.
    pub(crate) fn price_list_of(&self, t: TargetRef) -> &'static str {
        self.state.upstream(self.target(t).upstream).price_list
    }

    /// The name of `t`'s upstream.
    pub(crate) fn upstream_of(&self, t: TargetRef) -> &str {
        self.upstream_name(self.target(t).upstream)
    }

    /// `t`'s first-token timeout.
    pub(crate) fn first_token_timeout(&self, t: TargetRef) -> Duration {
        self.state
            .config
            .upstream(self.target(t).upstream)
            .timeouts
            .first_token
    }

    /// Whether the last failure allows any further attempt.
    fn may_retry(&self, f: &AttemptFailure) -> bool {
        match f.class {
            FailureClass::Final => false,
            // A silent target is abandoned for another whatever the method: its request is
            // cancelled (RST_STREAM / close) when we stop waiting for it.
            FailureClass::MaybeProcessed => {
                self.ctx.idempotent || matches!(f.cause, Cause::FirstByteTimeout(_))
            }
            _ => true,
        }
    }

    /// The next target, or `None` when no allowed target is left.
    fn choose(&mut self) -> Option<TargetRef> {
        let Some((failed_t, f)) = self.last.as_deref() else {
            // The first attempt: tier 0 unless every target there is out (ejected or
            // unhealthy) and a fallback exists; with nothing usable anywhere, tier 0 anyway.
            for tier in 0..self.route().tiers() {
                if let Some(t) = self.pick_in_tier(tier) {
                    self.tier = tier;
                    return Some(t);
                }
            }
            self.tier = 0;
            return self.pick_fail_open();
        };
        let (failed_t, avoid, retry_after, class) =
            (*failed_t, f.avoid_target, f.retry_after, f.class);
        if class == FailureClass::ContextLength {
            return self.larger_window(failed_t);
        }
        let cfg = self.route().retry;
        let too_long = retry_after.is_some_and(|ra| {
            ra > cfg.max_retry_after || Instant::now() + ra + MIN_ATTEMPT >= self.deadline
        });
        if !too_long && self.tier_attempts < cfg.attempts {
            if let Some(t) = self.pick_in_tier(self.tier) {
                return Some(t);
            }
            if !avoid && failed_t.tier == self.tier {
                // The only target left in the tier.
                if failed_t.tier == 0 {
                    // Track it like any pick (in flight, outcome) when the balancer agrees.
                    let others: Vec<usize> = (0..self.route().targets.len())
                        .filter(|i| *i != failed_t.index)
                        .collect();
                    let pick = self.balancer().pick(self.lane(), &others);
                    if pick.index() == failed_t.index {
                        self.pick = Some(pick);
                    }
                }
                return Some(failed_t);
            }
        }
        for tier in self.tier + 1..self.route().tiers() {
            self.tier = tier;
            self.tier_attempts = 0;
            if let Some(t) = self.pick_in_tier(tier) {
                return Some(t);
            }
        }
        None
    }

    /// A target of `tier` that has not failed this request. Tier 0 asks its balancer (by
    /// latency and load, skipping ejected and unhealthy targets; `None` when only those or
    /// failed ones are left); a fallback tier is its one target.
    fn pick_in_tier(&mut self, tier: usize) -> Option<TargetRef> {
        if tier == 0 {
            let exclude: Vec<usize> = self
                .failed
                .iter()
                .filter(|t| t.tier == 0)
                .map(|t| t.index)
                .collect();
            let pick = self.balancer().pick(self.lane(), &exclude);
            if exclude.contains(&pick.index()) || pick.is_fail_open() {
                return None;
            }
            let t = TargetRef {
                tier: 0,
                index: pick.index(),
            };
            self.pick = Some(pick);
            return Some(t);
        }
        let t = TargetRef { tier, index: 0 };
        (!self.route().tier(tier).is_empty() && !self.failed.contains(&t)).then_some(t)
    }

    /// Tier 0's best target even though none is usable: a route with nothing healthy still
    /// tries (the balancer's fail-open choice).
    fn pick_fail_open(&mut self) -> Option<TargetRef> {
        if self.route().targets.is_empty() {
            return None;
        }
        let pick = self.balancer().pick(self.lane(), &[]);
        let t = TargetRef {
            tier: 0,
            index: pick.index(),
        };
        self.pick = Some(pick);
        Some(t)
    }

    fn balancer(&self) -> &sluice_upstream::Balancer {
        &self.state.routes[self.route].balancer
    }

    /// The lane this request's attempts weigh latency on.
    fn lane(&self) -> Lane {
        self.route().lane.unwrap_or(if self.ctx.stream {
            Lane::Stream
        } else {
            Lane::Short
        })
    }

    /// Gives the relay the pick of a stream that committed: it is completed when the stream
    /// ends, so the target counts the stream in flight until then.
    pub(crate) fn take_pick(&mut self) -> Option<sluice_upstream::Pick> {
        self.pick.take()
    }

    /// For a context-length failure: the first target, in tier order, whose window is larger
    /// than the failed target's (and that has not failed).
    fn larger_window(&mut self, failed: TargetRef) -> Option<TargetRef> {
        let have = self.target(failed).context_window?;
        let route = self.route();
        let found = (0..route.tiers()).find_map(|tier| {
            route.tier(tier).iter().enumerate().find_map(|(index, tc)| {
                let t = TargetRef { tier, index };
                (tc.context_window.is_some_and(|w| w > have) && !self.failed.contains(&t))
                    .then_some(t)
            })
        })?;
        if found.tier != self.tier {
            self.tier = found.tier;
            self.tier_attempts = 0;
        }
        Some(found)
    }

    /// The wait before trying `t`: only a retry of the same target waits (the provider's
    /// `Retry-After`, else backoff with full jitter); another target is tried at once.
    fn wait_before(&mut self, t: TargetRef) -> Duration {
        let Some((failed_t, f)) = self.last.as_deref() else {
            return Duration::ZERO;
        };
        if *failed_t != t {
            return Duration::ZERO;
        }
        match f.retry_after {
            Some(ra) => ra,
            None => {
                let n = self.tier_attempts;
                let cfg = self.route().retry;
                backoff::full_jitter(&cfg, n, &mut self.rng)
            }
        }
    }

    /// One attempt on `t`, begun at `started`: send, and read an error answer whole to
    /// classify it.
    async fn attempt(&mut self, t: TargetRef, started: Instant) -> Result<Attempt, AttemptFailure> {
        self.tier_attempts += 1;
        // Borrowed, not cloned: this future is what a request waiting for its upstream holds.
        let tc = self.target(t);
        let state = &*self.state;
        let ucfg = &state.config.upstream(tc.upstream);
        let lane = self.route().lane.unwrap_or(
            if self.ctx.stream || self.ctx.max_tokens > ucfg.long_max_tokens {
                Lane::Stream
            } else {
                Lane::Short
            },
        );
        let route = self.route();
        let first_by = (started + ucfg.timeouts.first_byte).min(self.deadline);
        // A cloud upstream's access token: the live one, or the first one, waited for.
        let tokens = state.upstream(tc.upstream).tokens.as_deref();
        let bearer = match tokens {
            Some(t) => Some(
                t.bearer(first_by)
                    .await
                    .map_err(AttemptFailure::credentials)?,
            ),
            None => None,
        };
        let opts = crate::outbound::BuildOptions {
            model: tc.model.as_deref(),
            drop_unsupported: route.drop_unsupported_params,
            prefill: self.prefill.as_deref(),
            auth: tc.auth.as_ref(),
            reasoning_budgets: &route.reasoning_budgets,
            bearer: bearer.as_ref(),
            cache_breakpoints: route.cache_breakpoints,
        };
        let (req, built) = crate::outbound::upstream_request(state, &self.ctx, tc.upstream, opts)
            .map_err(|e| match e {
            e @ GatewayError::UpstreamCredentials { .. } => AttemptFailure::credentials(e),
            e => AttemptFailure::invalid(e),
        })?;
        // In a block: once borrowed, a local keeps its room in this future to its scope's
        // end, and the response must not keep it through the error body's read.
        let (parts, body) = {
            let resp = match state
                .upstream(tc.upstream)
                .handle
                .send_on(lane, req, first_by)
                .await
            {
                Ok(resp) => resp,
                Err(sluice_upstream::UpstreamError::Deadline) if first_by == self.deadline => {
                    return Err(AttemptFailure::total_timeout(self.deadline - started))
                }
                Err(e) => return Err(AttemptFailure::upstream(e, ucfg.timeouts.first_byte)),
            };
            if let Some(p) = resp.extensions().get::<sluice_upstream::PhaseTimings>() {
                state
                    .telemetry
                    .acquire_wait(&ucfg.name, lane.as_str(), p.acquire);
            }
            if resp.status().is_success() {
                return Ok(Attempt {
                    resp,
                    target: t,
                    upstream: tc.upstream,
                    started,
                    first_token_by: (started + ucfg.timeouts.first_token).min(self.deadline),
                    built,
                });
            }
            resp.into_parts()
        };
        let body = timeout_at(self.deadline, read_error_body(body))
            .await
            .unwrap_or_default();
        // A refused access token (revoked, or the clocks disagree) is dropped and refreshed:
        // then the request may be tried again with the new one, like a transient failure.
        let token_refused = parts.status == http::StatusCode::UNAUTHORIZED
            && match (tokens, bearer.as_ref()) {
                (Some(t), Some(sent)) => {
                    t.refused(sent);
                    true
                }
                _ => false,
            };
        let now = crate::clock::now_unix();
        let answer = match &ucfg.cloud {
            Some(crate::config::CloudAuth::Bedrock(_)) => {
                let error =
                    sluice_providers::bedrock::classify(parts.status, &parts.headers, &body, now);
                cloud_answer(self.ctx.op.family(), parts.headers, built, error)
            }
            Some(crate::config::CloudAuth::Vertex(_)) => {
                let error =
                    sluice_providers::vertex::classify(parts.status, &parts.headers, &body, now);
                cloud_answer(self.ctx.op.family(), parts.headers, built, error)
            }
            _ => {
                let family = built.provider.family();
                let error = sluice_providers::error::classify(
                    family,
                    parts.status,
                    &parts.headers,
                    &body,
                    now,
                );
                Answer {
                    status: parts.status,
                    headers: parts.headers,
                    body,
                    family,
                    provider: built.provider,
                    error,
                }
            }
        };
        let retry_after = answer.error.retry_after;
        let mut failure = AttemptFailure::answered(answer, retry_after);
        if token_refused {
            failure.class = FailureClass::Retryable;
        }
        Err(failure)
    }

    /// Gives up: the last failure (if any attempt was made) is what the client gets.
    fn give_up(&mut self, reason: GiveUpReason) -> GiveUp {
        let failure = self.last.take().map(|last| {
            let (t, f) = *last;
            (self.target(t).upstream, f)
        });
        GiveUp { failure, reason }
    }

    /// Builds the client's error for a give-up without an upstream answer to pass on.
    pub(crate) fn give_up_error(
        &self,
        g: GiveUp,
    ) -> Result<GatewayError, (UpstreamId, Box<Answer>)> {
        match g.failure {
            None => Ok(GatewayError::TotalTimeout {
                upstream: self
                    .upstream_name(self.route().primary_upstream())
                    .to_string(),
                timeout: self.deadline.saturating_duration_since(self.ctx.started),
            }),
            Some((upstream, f)) => f
                .into_gateway_error(self.upstream_name(upstream), g.reason)
                .map_err(|a| (upstream, a)),
        }
    }
}

/// A cloud's error answer (Bedrock's `{"message"}` with `x-amzn-ErrorType`, Vertex's Google
/// shape in front of Anthropic's), classified and already written in the client's format: the
/// client never reads the cloud's own shape.
fn cloud_answer(
    client: sluice_providers::Family,
    headers: http::HeaderMap,
    built: crate::outbound::Built,
    error: sluice_providers::ProviderError,
) -> Answer {
    let (status, body) = sluice_providers::error::client_error(client, &error);
    Answer {
        status,
        headers,
        body,
        family: client,
        provider: built.provider,
        error,
    }
}

/// An error answer's body, at most `MAX_ERROR_BODY` bytes; what came before a cut.
async fn read_error_body(body: ResponseBody) -> Bytes {
    body.read_capped(MAX_ERROR_BODY as usize)
        .await
        .unwrap_or_else(|(partial, _)| partial)
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("route", &self.route)
            .field("attempts", &self.attempts.len())
            .finish()
    }
}
