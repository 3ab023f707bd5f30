//! Guardrails on the request path: a route's checks (`guardrails = [...]`, defined under
//! `[[guardrail]]`) of the request's messages before any upstream attempt ([`check_input`])
//! and of the answer: a whole body ([`check_output_body`]) or a stream as it flows
//! ([`StreamGuard`], used by the relay). The checks themselves are `sluice-guardrails`'
//! (sans-I/O) or an external checker's ([`checker`]); this module runs them, bounded by their
//! deadlines, and records each verdict for the `x-sluice-guardrails` header, the access log
//! and `sluice_guardrail_total`.
//!
//! A route without guardrails pays one emptiness check of its list (DESIGN invariant 10).

mod checker;
mod stream;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use sluice_config::{Config, GuardrailKind, OnError};
use sluice_guardrails::{json, Verdict};
use sluice_telemetry::Telemetry;
use tokio::time::Instant;

pub(crate) use stream::StreamGuard;

/// The response header naming the guardrails that acted and their verdicts.
pub(crate) const X_SLUICE_GUARDRAILS: http::HeaderName =
    http::HeaderName::from_static("x-sluice-guardrails");

/// One config's guardrails, built once per generation (indexes as in
/// [`Config::guardrails`]).
#[derive(Debug, Default)]
pub(crate) struct Guards {
    guards: Vec<Guard>,
}

#[derive(Debug)]
struct Guard {
    name: String,
    input: bool,
    output: bool,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Rules(sluice_config::RulesCheck),
    Http(Arc<checker::Checker>),
}

impl Guards {
    pub(crate) fn new(config: &Config) -> Guards {
        Guards {
            guards: config
                .guardrails
                .iter()
                .map(|g| Guard {
                    name: g.name.clone(),
                    input: g.input,
                    output: g.output,
                    kind: match &g.kind {
                        GuardrailKind::Rules(r) => Kind::Rules(r.clone()),
                        GuardrailKind::Http(h) => {
                            Kind::Http(Arc::new(checker::Checker::new(&g.name, h.clone())))
                        }
                    },
                })
                .collect(),
        }
    }
}

impl Guards {
    /// `a,b,…`: the names of `list`'s guardrails, for the response cache's key (names, not
    /// indexes: the key outlives a generation and is shared through Redis).
    pub(crate) fn names(&self, list: &[usize]) -> String {
        let mut s = String::new();
        for &i in list {
            if !s.is_empty() {
                s.push(',');
            }
            s.push_str(&self.guards[i].name);
        }
        s
    }

    /// A cache hit's header: the input checks' verdicts (`input`, they ran on this request),
    /// then each output guardrail as `name(cached)`: the stored answer went through it (the
    /// cache's key holds the guardrails, so an answer is only served to requests under the
    /// same ones).
    pub(crate) fn hit_header(
        &self,
        list: &[usize],
        input: Option<&HeaderValue>,
    ) -> Option<HeaderValue> {
        let mut s = input
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        for &i in list {
            let g = &self.guards[i];
            if g.output {
                if !s.is_empty() {
                    s.push(',');
                }
                let _ = write!(s, "{}(cached)", g.name);
            }
        }
        if s.is_empty() {
            return None;
        }
        HeaderValue::from_str(&s).ok()
    }
}

/// The verdicts of a request's checks, in the order they ran.
#[derive(Debug, Default)]
pub(crate) struct Verdicts {
    list: Vec<(String, Verdict, Duration)>,
}

impl Verdicts {
    fn push(&mut self, telemetry: &Telemetry, name: &str, v: Verdict, took: Duration) {
        telemetry.guardrail(name, v.as_str());
        self.list.push((name.to_string(), v, took));
    }

    /// `name(verdict),…` for the header.
    pub(crate) fn header(&self) -> Option<HeaderValue> {
        if self.list.is_empty() {
            return None;
        }
        let mut s = String::new();
        for (i, (name, v, _)) in self.list.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{name}({})", v.as_str());
        }
        HeaderValue::from_str(&s).ok()
    }

    /// `name(verdict:0.12ms),…` for the access log.
    pub(crate) fn log_line(&self) -> String {
        let mut s = String::new();
        for (i, (name, v, took)) in self.list.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{name}({}:{:.2}ms)",
                v.as_str(),
                took.as_secs_f64() * 1000.0
            );
        }
        s
    }

    /// Adds the verdicts to the request's log line.
    pub(crate) fn record(&self, log: &mut sluice_telemetry::RequestRecord) {
        if self.list.is_empty() {
            return;
        }
        let line = self.log_line();
        match log.guardrails.as_mut() {
            Some(g) => {
                g.push(',');
                g.push_str(&line);
            }
            None => log.guardrails = Some(Box::new(line)),
        }
    }
}

/// A refusal by a guardrail.
#[derive(Debug)]
pub(crate) struct Blocked {
    pub(crate) guardrail: String,
    pub(crate) reason: String,
}

/// What the input checks decided.
pub(crate) struct InputChecked {
    pub(crate) verdicts: Verdicts,
    /// Refused: the client gets 400 `content_blocked`, the upstream nothing.
    pub(crate) blocked: Option<Blocked>,
    /// The body to send upstream instead of the client's (texts redacted or modified).
    pub(crate) body: Option<Bytes>,
}

/// Runs the route's input guardrails (`list`, in order) on the request body: each sees the
/// body as the one before it left it. Never past `deadline`.
pub(crate) async fn check_input(
    guards: &Guards,
    list: &[usize],
    body: &Bytes,
    model: &str,
    deadline: Instant,
    telemetry: &Telemetry,
) -> InputChecked {
    let mut out = InputChecked {
        verdicts: Verdicts::default(),
        blocked: None,
        body: None,
    };
    if !list.iter().any(|&i| guards.guards[i].input) {
        // Output checks only: the request is not even parsed.
        return out;
    }
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) else {
        // Not JSON: the request stage answers it (the probe parsed it, so this is rare).
        return out;
    };
    let mut changed = false;
    for &i in list {
        let g = &guards.guards[i];
        if !g.input {
            continue;
        }
        let started = Instant::now();
        let (verdict, blocked) = match &g.kind {
            Kind::Rules(r) => rules_input(r, &mut value, model),
            Kind::Http(c) => {
                let texts = json::texts(&value);
                match c.check("input", model, texts, deadline).await {
                    checker::Answer::Allow => (Verdict::Allow, None),
                    checker::Answer::Deny(reason) => (Verdict::Deny, Some(reason)),
                    checker::Answer::Modify(new) => {
                        if replace_texts(&mut value, new) {
                            (Verdict::Modify, None)
                        } else {
                            checker_failed(c.on_error(), "its `texts` did not match the request's")
                        }
                    }
                    checker::Answer::Failed(why) => checker_failed(c.on_error(), &why),
                }
            }
        };
        changed |= matches!(verdict, Verdict::Redact | Verdict::Modify);
        out.verdicts
            .push(telemetry, &g.name, verdict, started.elapsed());
        if let Some(reason) = blocked {
            out.blocked = Some(Blocked {
                guardrail: g.name.clone(),
                reason,
            });
            return out;
        }
    }
    if changed {
        out.body = serde_json::to_vec(&value).ok().map(Bytes::from);
    }
    out
}

/// A failed external check under its `on_error`: `error` (let through) or `deny`.
fn checker_failed(on_error: OnError, why: &str) -> (Verdict, Option<String>) {
    match on_error {
        OnError::Allow => (Verdict::Error, None),
        OnError::Deny => (
            Verdict::Deny,
            Some(format!(
                "the guardrail's checker could not decide ({why}) and it refuses when it cannot"
            )),
        ),
    }
}

/// A rules guardrail on a request: allowed models, prompt size, then the rules.
fn rules_input(
    r: &sluice_config::RulesCheck,
    value: &mut serde_json::Value,
    model: &str,
) -> (Verdict, Option<String>) {
    if !r.models.is_empty() && !r.models.iter().any(|g| sluice_config::glob_match(g, model)) {
        let shown = sluice_telemetry::untrusted::echo(model);
        return (
            Verdict::Deny,
            Some(format!(
                "model {shown} is not among the models this route allows"
            )),
        );
    }
    if let Some(max) = r.max_prompt_tokens {
        let mut bytes = 0;
        json::visit_texts(value, &mut |s| bytes += s.len());
        // About four bytes a token, as admission estimates a prompt.
        let est = crate::admit::input_estimate(bytes);
        if est > max {
            return (
                Verdict::Deny,
                Some(format!(
                    "the prompt is about {est} tokens, over this route's limit of {max}"
                )),
            );
        }
    }
    match json::check_body(&r.rules, value) {
        Ok((v, _)) => (v, None),
        Err(d) => (
            Verdict::Deny,
            Some(format!("the prompt contains {}", d.label)),
        ),
    }
}

/// Puts a checker's modified texts back in the body's text places, in order; `false` when
/// their number differs.
fn replace_texts(value: &mut serde_json::Value, new: Vec<String>) -> bool {
    let mut n = 0;
    json::visit_texts(value, &mut |_| n += 1);
    if n != new.len() {
        return false;
    }
    let mut it = new.into_iter();
    json::visit_texts(value, &mut |s| {
        if let Some(t) = it.next() {
            *s = t;
        }
    });
    true
}

/// The route's output guardrails for a stream, or `None` when it has none (the relay then
/// pays nothing). The rules act first, in the route's order, then the external checkers, in
/// theirs: a checker sees the text as the rules left it. No check goes past `deadline`.
pub(crate) fn stream_guard(
    guards: &Guards,
    list: &[usize],
    model: &str,
    deadline: Instant,
) -> Option<Box<StreamGuard>> {
    let mut rules = Vec::new();
    let mut checks = Vec::new();
    for g in list.iter().map(|&i| &guards.guards[i]).filter(|g| g.output) {
        match &g.kind {
            Kind::Rules(r) => rules.push((g.name.clone(), r.rules.clone(), r.window)),
            Kind::Http(c) => checks.push((g.name.clone(), c.clone())),
        }
    }
    if rules.is_empty() && checks.is_empty() {
        return None;
    }
    Some(Box::new(StreamGuard::new(rules, checks, model, deadline)))
}

/// Runs the route's output guardrails on a whole answer body (client format). `Ok(None)`:
/// unchanged.
pub(crate) async fn check_output_body(
    guards: &Guards,
    list: &[usize],
    body: &Bytes,
    model: &str,
    deadline: Instant,
    telemetry: &Telemetry,
    verdicts: &mut Verdicts,
) -> Result<Option<Bytes>, Blocked> {
    if !list.iter().any(|&i| guards.guards[i].output) {
        return Ok(None);
    }
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(None);
    };
    let mut changed = false;
    for &i in list {
        let g = &guards.guards[i];
        if !g.output {
            continue;
        }
        let started = Instant::now();
        let (verdict, blocked) = match &g.kind {
            Kind::Rules(r) => match json::check_body(&r.rules, &mut value) {
                Ok((v, _)) => (v, None),
                Err(d) => (
                    Verdict::Deny,
                    Some(format!("the answer contains {}", d.label)),
                ),
            },
            Kind::Http(c) => {
                let texts = json::texts(&value);
                match c.check("output", model, texts, deadline).await {
                    checker::Answer::Allow => (Verdict::Allow, None),
                    checker::Answer::Deny(reason) => (Verdict::Deny, Some(reason)),
                    checker::Answer::Modify(new) => {
                        if replace_texts(&mut value, new) {
                            (Verdict::Modify, None)
                        } else {
                            checker_failed(c.on_error(), "its `texts` did not match the answer's")
                        }
                    }
                    checker::Answer::Failed(why) => checker_failed(c.on_error(), &why),
                }
            }
        };
        changed |= matches!(verdict, Verdict::Redact | Verdict::Modify);
        verdicts.push(telemetry, &g.name, verdict, started.elapsed());
        if let Some(reason) = blocked {
            return Err(Blocked {
                guardrail: g.name.clone(),
                reason,
            });
        }
    }
    if !changed {
        return Ok(None);
    }
    Ok(serde_json::to_vec(&value).ok().map(Bytes::from))
}
