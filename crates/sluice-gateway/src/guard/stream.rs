//! Output guardrails on a stream, event by event, in the client's API: the text of each
//! content event (a text delta, a tool call's argument delta) goes through a
//! [`StreamRedactor`] per channel and rules guardrail, and the event is rewritten with the
//! text that came out (often less, while the window fills; never a split UTF-8 character,
//! never a broken event). Text still held when an event that ends it comes (a block's end, the
//! finish reason, usage, `[DONE]`) is released first, in an event cloned from the channel's
//! last one; an event with no place relative to the text (Anthropic's `ping`) passes ahead of
//! it, so a match split around it is still one match.
//!
//! External checkers (`kind = "http"`) come after the rules: the text the rules release is
//! gathered per channel, and once a checker's window of it is there (or the text ends), the
//! window is sent to the checkers in turn and released only with their answer (as it was, or
//! as a checker modified it). While a check is in flight, the events after it wait behind it
//! in order and the relay reads no more of the upstream, so the hold is one window and the
//! events of one upstream event. A deny ends the stream (`content_blocked`).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use sluice_guardrails::{RuleSet, StreamRedactor, Verdict};
use sluice_providers::stream::{Emitted, EventKind};
use tokio::time::Instant;

use super::checker::{Answer, Checker};
use super::Blocked;

/// Keys whose string values in a content event are the text a model wrote.
const TEXT_KEYS: &[&str] = &["content", "text", "arguments", "partial_json", "delta"];

/// One channel of text (the answer's text, one tool call's arguments) through one guardrail.
struct Channel {
    /// The JSON path of the text in its events, with the `index` fields met on the way.
    key: String,
    /// The guardrail's position in [`StreamGuard::rules`].
    rule: usize,
    redactor: StreamRedactor,
    /// The channel's last event and the text's path in it.
    template: Option<Template>,
}

/// An event to write held text into: the event as it came and the text's path in its data.
/// Its bytes (a reference count), not its parsed data: most events' templates are replaced
/// before any is used, and parsing again at a release is cheaper than a copy per event.
type Template = (Bytes, Vec<PathStep>);

/// `template`'s event with `text` at its path, and its other texts (other channels', which
/// went out with the event itself) emptied.
fn fill(template: &Template, text: String) -> Option<Emitted> {
    let (prefix, mut data) = split_event(&template.0)?;
    let mut found = Vec::new();
    find_texts(
        &data,
        &mut Vec::new(),
        &mut String::new(),
        false,
        &mut found,
    );
    for (_, path) in &found {
        if let Some(Value::String(s)) = get_mut(&mut data, path) {
            s.clear();
        }
    }
    if let Some(Value::String(s)) = get_mut(&mut data, &template.1) {
        *s = text;
    }
    Some(Emitted {
        bytes: join_event(&prefix, &data),
        kind: EventKind::Content,
    })
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    Index(usize),
}

/// A rules guardrail of a stream: its name, rules, window, and the time spent in it.
struct RulesStage {
    name: String,
    rules: Arc<RuleSet>,
    window: usize,
    took: Duration,
}

/// An external checker of a stream, its verdict so far and the time its checks took.
struct CheckStage {
    name: String,
    checker: Arc<Checker>,
    window: usize,
    verdict: Verdict,
    took: Duration,
}

/// A channel's text the rules released, waiting for the checkers.
struct Held {
    key: String,
    text: String,
    template: Option<Template>,
}

/// An event waiting behind a check.
enum Item {
    /// Not yet looked at.
    Event(Emitted),
    /// Looked at (its held text is out or being checked): goes to the client as it is.
    Emit(Emitted),
}

/// What a check is about.
enum Job {
    /// A channel's held text.
    Window(String),
    /// An event that repeats texts whole (already through the rules).
    Whole(Emitted),
}

/// Where a check's answer goes.
enum Target {
    Window(Template),
    Whole {
        prefix: Bytes,
        data: Value,
        paths: Vec<Vec<PathStep>>,
        kind: EventKind,
    },
}

type CheckFuture = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// A check in flight.
struct InFlight {
    /// Its checker's position in [`StreamGuard::checks`].
    stage: usize,
    target: Target,
    texts: Vec<String>,
    started: Instant,
    answer: CheckFuture,
}

/// A stream's output guardrails.
pub(crate) struct StreamGuard {
    rules: Vec<RulesStage>,
    checks: Vec<CheckStage>,
    /// The model, sent with each check.
    model: Arc<str>,
    /// No check goes past it (the stream's total deadline).
    deadline: Instant,
    channels: Vec<Channel>,
    held: Vec<Held>,
    jobs: VecDeque<Job>,
    queue: VecDeque<Item>,
    check: Option<InFlight>,
    scratch: Vec<Emitted>,
}

impl std::fmt::Debug for StreamGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamGuard")
            .field("channels", &self.channels.len())
            .field("checking", &self.check.is_some())
            .finish()
    }
}

impl StreamGuard {
    /// A guard of rules guardrails (name, rules, window) and external checkers (name, checker).
    pub(crate) fn new(
        rules: Vec<(String, Arc<RuleSet>, usize)>,
        checks: Vec<(String, Arc<Checker>)>,
        model: &str,
        deadline: Instant,
    ) -> StreamGuard {
        StreamGuard {
            rules: rules
                .into_iter()
                .map(|(name, rules, window)| RulesStage {
                    name,
                    rules,
                    window,
                    took: Duration::ZERO,
                })
                .collect(),
            checks: checks
                .into_iter()
                .map(|(name, checker)| CheckStage {
                    name,
                    window: checker.window(),
                    checker,
                    verdict: Verdict::Allow,
                    took: Duration::ZERO,
                })
                .collect(),
            model: Arc::from(model),
            deadline,
            channels: Vec::new(),
            held: Vec::new(),
            jobs: VecDeque::new(),
            queue: VecDeque::new(),
            check: None,
            scratch: Vec::new(),
        }
    }

    /// A new attempt starts over (nothing of the last one reached the client).
    pub(crate) fn reset(&mut self) {
        self.channels.clear();
        self.held.clear();
        self.jobs.clear();
        self.queue.clear();
        self.check = None;
    }

    /// A check is in flight, or events wait behind one: the relay polls [`Self::poll`] and
    /// reads no more of the upstream until it is done.
    pub(crate) fn busy(&self) -> bool {
        self.check.is_some() || !self.jobs.is_empty() || !self.queue.is_empty()
    }

    /// The names of the guardrails watching the stream, for its header: `name(watch)`.
    pub(crate) fn watching(&self) -> String {
        let mut s = String::new();
        for name in self.names() {
            if !s.is_empty() {
                s.push(',');
            }
            s.push_str(name);
            s.push_str("(watch)");
        }
        s
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        self.rules
            .iter()
            .map(|r| r.name.as_str())
            .chain(self.checks.iter().map(|c| c.name.as_str()))
    }

    /// The verdict of each guardrail so far (`allow` when nothing was found) and the time
    /// spent in it.
    pub(crate) fn verdicts(&self) -> Vec<(&str, Verdict, Duration)> {
        let rules = self.rules.iter().enumerate().map(|(i, r)| {
            let v = self
                .channels
                .iter()
                .filter(|c| c.rule == i)
                .map(|c| c.redactor.verdict())
                .max()
                .unwrap_or(Verdict::Allow);
            (r.name.as_str(), v, r.took)
        });
        let checks = self
            .checks
            .iter()
            .map(|c| (c.name.as_str(), c.verdict, c.took));
        rules.chain(checks).collect()
    }

    /// Rewrites `events` in place: content events' texts checked, held text released before
    /// the events that end it. With external checkers, what waits behind a check stays here
    /// (see [`Self::busy`]). `Err`: a guardrail refused the answer.
    pub(crate) fn filter(&mut self, events: &mut Vec<Emitted>) -> Result<(), Blocked> {
        if events.is_empty() {
            return Ok(());
        }
        let mut out = std::mem::take(&mut self.scratch);
        if self.checks.is_empty() {
            for e in events.drain(..) {
                self.event(e, &mut out)?;
            }
        } else {
            self.queue.extend(events.drain(..).map(Item::Event));
            self.drive(&mut out)?;
        }
        std::mem::swap(events, &mut out);
        self.scratch = out;
        Ok(())
    }

    /// The upstream ended: whatever is held, released (after its checks), then `events`.
    pub(crate) fn finish(&mut self, events: &mut Vec<Emitted>) -> Result<(), Blocked> {
        let mut out = Vec::new();
        self.flush(&mut out)?;
        if self.checks.is_empty() {
            out.append(events);
        } else {
            self.queue.extend(events.drain(..).map(Item::Event));
            self.drive(&mut out)?;
        }
        *events = out;
        Ok(())
    }

    /// Polls the check in flight; once answered, the events behind it go on into `events`
    /// (until the next check, if one starts).
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        events: &mut Vec<Emitted>,
    ) -> Poll<Result<(), Blocked>> {
        if let Some(c) = self.check.as_mut() {
            let Poll::Ready(answer) = c.answer.as_mut().poll(cx) else {
                return Poll::Pending;
            };
            if let Err(b) = self.answered(answer, events) {
                return Poll::Ready(Err(b));
            }
        }
        Poll::Ready(self.drive(events))
    }

    /// Runs what waits (jobs first, then events) until a check is in flight or nothing is left.
    fn drive(&mut self, out: &mut Vec<Emitted>) -> Result<(), Blocked> {
        loop {
            if self.check.is_some() {
                return Ok(());
            }
            if let Some(job) = self.jobs.pop_front() {
                self.start(job, out);
                continue;
            }
            match self.queue.pop_front() {
                Some(Item::Event(e)) => self.event(e, out)?,
                Some(Item::Emit(e)) => out.push(e),
                None => return Ok(()),
            }
        }
    }

    /// One event, by what it is to the held text.
    ///
    /// - A preamble-kind event (Anthropic's `ping`, an OpenAI or Gemini chunk with neither
    ///   text nor a finish) carries no text and may appear anywhere in its API's stream: it
    ///   goes on while the text stays held, so a match split around it is still one match.
    /// - A content event with texts is a delta (see [`Self::content`]); one without (a block's
    ///   start or stop after the commit, a Responses item's `.added`) ends a text: what is held
    ///   goes first, so the client never sees a delta after its block ended.
    /// - A trailer (finish reason, usage, `[DONE]`) and an event that repeats texts whole (the
    ///   Responses API's `…done` events, `response.completed`) go after the held text, their
    ///   texts checked whole.
    fn event(&mut self, e: Emitted, out: &mut Vec<Emitted>) -> Result<(), Blocked> {
        match e.kind {
            EventKind::Preamble | EventKind::Error => {
                out.push(e);
                Ok(())
            }
            EventKind::Trailer => self.whole_event(e, out),
            EventKind::Content => self.content(e, out),
        }
    }

    /// An event that ends the held text: it goes after it (and after its checks).
    fn boundary(&mut self, e: Emitted, out: &mut Vec<Emitted>) -> Result<(), Blocked> {
        self.flush(out)?;
        self.after_jobs(Item::Emit(e), out);
        Ok(())
    }

    /// An event whose texts are whole: after the held text, checked whole.
    fn whole_event(&mut self, e: Emitted, out: &mut Vec<Emitted>) -> Result<(), Blocked> {
        self.flush(out)?;
        let e = self.whole(e)?;
        if self.checks.is_empty() {
            out.push(e);
        } else {
            self.jobs.push_back(Job::Whole(e));
        }
        Ok(())
    }

    /// `item` goes out after the checks just queued (right away when there are none).
    fn after_jobs(&mut self, item: Item, out: &mut Vec<Emitted>) {
        match item {
            Item::Emit(e) if self.jobs.is_empty() => out.push(e),
            item => self.queue.push_front(item),
        }
    }

    /// Starts a check (of the first checker).
    fn start(&mut self, job: Job, out: &mut Vec<Emitted>) {
        let (target, texts) = match job {
            Job::Window(key) => {
                let Some(h) = self.held.iter_mut().find(|h| h.key == key) else {
                    return;
                };
                let text = std::mem::take(&mut h.text);
                let (Some(template), false) = (h.template.clone(), text.is_empty()) else {
                    return;
                };
                (Target::Window(template), vec![text])
            }
            Job::Whole(e) => {
                let Some((prefix, data)) = split_event(&e.bytes) else {
                    out.push(e);
                    return;
                };
                let mut found = Vec::new();
                find_texts(
                    &data,
                    &mut Vec::new(),
                    &mut String::new(),
                    false,
                    &mut found,
                );
                let texts: Vec<String> = found
                    .iter()
                    .filter_map(|(_, p)| get(&data, p)?.as_str().map(str::to_string))
                    .collect();
                if texts.iter().all(String::is_empty) || texts.len() != found.len() {
                    out.push(e);
                    return;
                }
                let paths = found.into_iter().map(|(_, p)| p).collect();
                (
                    Target::Whole {
                        prefix,
                        data,
                        paths,
                        kind: e.kind,
                    },
                    texts,
                )
            }
        };
        self.check = Some(self.ask(0, target, texts));
    }

    fn ask(&self, stage: usize, target: Target, texts: Vec<String>) -> InFlight {
        let checker = self.checks[stage].checker.clone();
        let model = self.model.clone();
        let deadline = self.deadline;
        let sent = texts.clone();
        InFlight {
            stage,
            target,
            texts,
            started: Instant::now(),
            answer: Box::pin(async move { checker.check("output", &model, sent, deadline).await }),
        }
    }

    /// A checker answered: the next checker is asked, or the checked text goes out.
    fn answered(&mut self, answer: Answer, out: &mut Vec<Emitted>) -> Result<(), Blocked> {
        let Some(InFlight {
            stage,
            target,
            mut texts,
            started,
            ..
        }) = self.check.take()
        else {
            return Ok(());
        };
        let c = &mut self.checks[stage];
        c.took += started.elapsed();
        let (verdict, refused) = match answer {
            Answer::Allow => (Verdict::Allow, None),
            Answer::Deny(reason) => (Verdict::Deny, Some(reason)),
            Answer::Modify(new) if new.len() == texts.len() => {
                texts = new;
                (Verdict::Modify, None)
            }
            Answer::Modify(_) => super::checker_failed(
                c.checker.on_error(),
                "its `texts` did not match the answer's",
            ),
            Answer::Failed(why) => super::checker_failed(c.checker.on_error(), &why),
        };
        c.verdict = c.verdict.max(verdict);
        if let Some(reason) = refused {
            return Err(Blocked {
                guardrail: c.name.clone(),
                reason,
            });
        }
        if stage + 1 < self.checks.len() {
            self.check = Some(self.ask(stage + 1, target, texts));
            return Ok(());
        }
        match target {
            Target::Window(template) => {
                out.extend(fill(&template, texts.concat()));
            }
            Target::Whole {
                prefix,
                mut data,
                paths,
                kind,
            } => {
                for (path, t) in paths.iter().zip(texts) {
                    if let Some(Value::String(s)) = get_mut(&mut data, path) {
                        *s = t;
                    }
                }
                out.push(Emitted {
                    bytes: join_event(&prefix, &data),
                    kind,
                });
            }
        }
        Ok(())
    }

    /// Text the rules released for `key`, gathered for the checkers (its event goes on
    /// without it); a check is queued once a window is there.
    fn gather_for_checkers(&mut self, key: &str, text: String, template: Option<Template>) {
        let window = self.checks.iter().map(|c| c.window).min().unwrap_or(0);
        let i = match self.held.iter().position(|h| h.key == key) {
            Some(i) => i,
            None => {
                self.held.push(Held {
                    key: key.to_string(),
                    text: String::new(),
                    template: None,
                });
                self.held.len() - 1
            }
        };
        let h = &mut self.held[i];
        h.text.push_str(&text);
        if template.is_some() {
            h.template = template;
        }
        let full = h.text.len() >= window;
        if full
            && !self
                .jobs
                .iter()
                .any(|j| matches!(j, Job::Window(k) if k == key))
        {
            self.jobs.push_back(Job::Window(key.to_string()));
        }
    }

    fn content(&mut self, e: Emitted, out: &mut Vec<Emitted>) -> Result<(), Blocked> {
        let Some((prefix, mut data)) = split_event(&e.bytes) else {
            return self.boundary(e, out);
        };
        if repeats_whole(&prefix, &data) {
            return self.whole_event(e, out);
        }
        let mut found = Vec::new();
        find_texts(
            &data,
            &mut Vec::new(),
            &mut String::new(),
            false,
            &mut found,
        );
        if found.is_empty() {
            return self.boundary(e, out);
        }
        for (key, path) in found {
            let Some(Value::String(text)) = get_mut(&mut data, &path) else {
                continue;
            };
            let mut t = std::mem::take(text);
            for ri in 0..self.rules.len() {
                let ch = match self
                    .channels
                    .iter()
                    .position(|c| c.key == key && c.rule == ri)
                {
                    Some(i) => i,
                    None => {
                        let r = &self.rules[ri];
                        self.channels.push(Channel {
                            key: key.clone(),
                            rule: ri,
                            redactor: StreamRedactor::new(r.rules.clone(), r.window),
                            template: None,
                        });
                        self.channels.len() - 1
                    }
                };
                let started = Instant::now();
                let pushed = self.channels[ch].redactor.push(&t);
                let stage = &mut self.rules[ri];
                stage.took += started.elapsed();
                t = pushed.map_err(|d| Blocked {
                    guardrail: stage.name.clone(),
                    reason: format!("it contains {}", d.label),
                })?;
            }
            let t = if self.checks.is_empty() {
                t
            } else {
                self.gather_for_checkers(&key, t, Some((e.bytes.clone(), path.clone())));
                String::new()
            };
            if let Some(Value::String(text)) = get_mut(&mut data, &path) {
                *text = t;
            }
            // The last guardrail's channel is the one that releases to the client.
            if let Some(c) = self.channels.iter_mut().rev().find(|c| c.key == key) {
                c.template = Some((e.bytes.clone(), path));
            }
        }
        out.push(Emitted {
            bytes: join_event(&prefix, &data),
            kind: EventKind::Content,
        });
        Ok(())
    }

    /// A non-content event that repeats text whole (the Responses API's `…done` and
    /// `response.completed` events carry the answer's full text): each text checked whole,
    /// as the deltas were, so it says what they said.
    fn whole(&mut self, e: Emitted) -> Result<Emitted, Blocked> {
        if self.rules.is_empty() {
            return Ok(e);
        }
        let Some((prefix, mut data)) = split_event(&e.bytes) else {
            return Ok(e);
        };
        let mut found = Vec::new();
        find_texts(
            &data,
            &mut Vec::new(),
            &mut String::new(),
            false,
            &mut found,
        );
        let mut changed = false;
        for (_, path) in found {
            let Some(Value::String(text)) = get_mut(&mut data, &path) else {
                continue;
            };
            for r in &mut self.rules {
                let started = Instant::now();
                let applied = r.rules.apply(text);
                r.took += started.elapsed();
                match applied {
                    Ok(c) => {
                        if let std::borrow::Cow::Owned(t) = c.text {
                            *text = t;
                            changed = true;
                        }
                    }
                    Err(d) => {
                        return Err(Blocked {
                            guardrail: r.name.clone(),
                            reason: format!("it contains {}", d.label),
                        })
                    }
                }
            }
        }
        if !changed {
            return Ok(e);
        }
        Ok(Emitted {
            bytes: join_event(&prefix, &data),
            kind: e.kind,
        })
    }

    /// Releases every channel's held text, in events like the channel's last (to the
    /// checkers first, when there are any: their checks are queued).
    fn flush(&mut self, out: &mut Vec<Emitted>) -> Result<(), Blocked> {
        // Each channel once, in the order they first came (one per guardrail shares a key).
        let mut keys: Vec<String> = Vec::new();
        for c in &self.channels {
            if !keys.contains(&c.key) {
                keys.push(c.key.clone());
            }
        }
        for h in &self.held {
            if !keys.contains(&h.key) {
                keys.push(h.key.clone());
            }
        }
        for key in keys {
            // Through the guardrails in order: what one releases, the next takes.
            let mut text = String::new();
            let mut template = None;
            for ri in 0..self.rules.len() {
                let Some(c) = self
                    .channels
                    .iter_mut()
                    .find(|c| c.key == key && c.rule == ri)
                else {
                    continue;
                };
                let r = &mut self.rules[ri];
                let started = Instant::now();
                let released = c.redactor.push(&text).and_then(|mut t| {
                    c.redactor.finish().map(|f| {
                        t.push_str(&f);
                        t
                    })
                });
                r.took += started.elapsed();
                text = released.map_err(|d| Blocked {
                    guardrail: r.name.clone(),
                    reason: format!("it contains {}", d.label),
                })?;
                if c.template.is_some() {
                    template = c.template.take();
                }
            }
            if !self.checks.is_empty() {
                self.gather_for_checkers(&key, text, template);
                if self.held.iter().any(|h| h.key == key && !h.text.is_empty())
                    && !self
                        .jobs
                        .iter()
                        .any(|j| matches!(j, Job::Window(k) if *k == key))
                {
                    self.jobs.push_back(Job::Window(key));
                }
                continue;
            }
            if text.is_empty() {
                continue;
            }
            if let Some(t) = template {
                out.extend(fill(&t, text));
            }
        }
        Ok(())
    }
}

/// Whether a content event repeats texts whole (by its `event:` name, else its data's `type`):
/// the Responses API's `…done` events and `response.completed`, which the passthrough marks
/// as content after the commit.
fn repeats_whole(prefix: &[u8], data: &Value) -> bool {
    let named = prefix
        .strip_prefix(b"event:")
        .map(|rest| {
            let end = rest.iter().position(|&b| b == b'\n' || b == b'\r');
            rest[..end.unwrap_or(rest.len())].trim_ascii()
        })
        .filter(|n| !n.is_empty());
    let ty = match named {
        Some(n) => n,
        None => match data.get("type").and_then(Value::as_str) {
            Some(t) => t.as_bytes(),
            None => return false,
        },
    };
    ty.ends_with(b".done") || ty == b"response.completed" || ty == b"response.incomplete"
}

/// An event's lines before `data:` and its data as JSON.
fn split_event(bytes: &Bytes) -> Option<(Bytes, Value)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let at = if text.starts_with("data:") {
        0
    } else {
        text.find("\ndata:")? + 1
    };
    let rest = &text[at + "data:".len()..];
    let line = rest.split(['\n', '\r']).next()?.trim_start();
    let data: Value = serde_json::from_str(line).ok()?;
    Some((bytes.slice(..at), data))
}

fn join_event(prefix: &Bytes, data: &Value) -> Bytes {
    let mut v = Vec::with_capacity(prefix.len() + 64);
    v.extend_from_slice(prefix);
    v.extend_from_slice(b"data: ");
    // Serializing a `Value` does not fail.
    let _ = serde_json::to_writer(&mut v, data);
    v.extend_from_slice(b"\n\n");
    Bytes::from(v)
}

/// The text strings of a content event: their channel key and path.
fn find_texts(
    v: &Value,
    path: &mut Vec<PathStep>,
    key: &mut String,
    text: bool,
    found: &mut Vec<(String, Vec<PathStep>)>,
) {
    match v {
        Value::String(_) if text => found.push((key.clone(), path.clone())),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(PathStep::Index(i));
                let len = key.len();
                key.push_str(&format!("[{i}]"));
                find_texts(item, path, key, text, found);
                key.truncate(len);
                path.pop();
            }
        }
        Value::Object(map) => {
            let len = key.len();
            if let Some(i) = map.get("index") {
                key.push_str(&format!("#{i}"));
            }
            for (k, child) in map {
                path.push(PathStep::Key(k.clone()));
                let l2 = key.len();
                key.push('.');
                key.push_str(k);
                find_texts(child, path, key, TEXT_KEYS.contains(&k.as_str()), found);
                key.truncate(l2);
                path.pop();
            }
            key.truncate(len);
        }
        _ => {}
    }
}

fn get<'a>(v: &'a Value, path: &[PathStep]) -> Option<&'a Value> {
    let mut cur = v;
    for step in path {
        cur = match step {
            PathStep::Key(k) => cur.get(k.as_str())?,
            PathStep::Index(i) => cur.get(*i)?,
        };
    }
    Some(cur)
}

fn get_mut<'a>(v: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    let mut cur = v;
    for step in path {
        cur = match step {
            PathStep::Key(k) => cur.get_mut(k.as_str())?,
            PathStep::Index(i) => cur.get_mut(*i)?,
        };
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_guardrails::{Action, Detector, Rule};

    fn guard() -> StreamGuard {
        let rules = RuleSet::new(&[Rule::builtin(Detector::Card, Action::Redact)], Some(256));
        StreamGuard::new(
            vec![("pii".into(), Arc::new(rules.unwrap()), 256)],
            Vec::new(),
            "m",
            Instant::now() + std::time::Duration::from_secs(60),
        )
    }

    fn event(kind: EventKind, data: serde_json::Value) -> Emitted {
        Emitted {
            bytes: Bytes::from(format!("data: {data}\n\n")),
            kind,
        }
    }

    fn args(e: &Emitted) -> String {
        let (_, v) = split_event(&e.bytes).unwrap();
        v.pointer("/choices/0/delta/tool_calls/0/function/arguments")
            .and_then(|a| a.as_str())
            .unwrap_or("")
            .to_string()
    }

    /// A card split across two tool-call argument deltas (OpenAI chat) is redacted, each event
    /// stays valid JSON, and the text held back comes out before the finish event.
    #[test]
    fn tool_call_arguments_are_redacted_across_events() {
        let mut g = guard();
        let delta = |a: &str| {
            event(
                EventKind::Content,
                serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": 0, "function": {"arguments": a}}]}}]}),
            )
        };
        let mut events = vec![delta("{\"card\": \"4111 1111 "), delta("1111 1111\"}")];
        events.push(event(
            EventKind::Trailer,
            serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ));
        g.filter(&mut events).unwrap();
        let all: String = events.iter().map(args).collect();
        assert_eq!(all, "{\"card\": \"[REDACTED:card]\"}");
        assert_eq!(events.last().unwrap().kind, EventKind::Trailer);
        let v: Vec<_> = g.verdicts().into_iter().map(|(n, v, _)| (n, v)).collect();
        assert_eq!(v, vec![("pii", Verdict::Redact)]);
    }

    /// Two channels in one event (two tool calls' arguments in one chunk): the text each holds
    /// back comes out in an event of its own, carrying no other channel's text again.
    #[test]
    fn held_text_of_one_channel_never_repeats_another_channels() {
        let mut g = guard();
        let chunk = |a: &str, b: &str| {
            event(
                EventKind::Content,
                serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": 0, "function": {"arguments": a}},
                    {"index": 1, "function": {"arguments": b}}]}}]}),
            )
        };
        let mut events = vec![chunk("{\"a\": \"4111 1111 ", "{\"b\": \"4111 1111 ")];
        events.push(chunk("1111 1111\"}", "1111 1111\"}"));
        events.push(event(
            EventKind::Trailer,
            serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ));
        g.filter(&mut events).unwrap();
        let of = |i: usize| -> String {
            events
                .iter()
                .map(|e| {
                    let (_, v) = split_event(&e.bytes).unwrap();
                    v.pointer(&format!(
                        "/choices/0/delta/tool_calls/{i}/function/arguments"
                    ))
                    .and_then(|a| a.as_str())
                    .unwrap_or("")
                    .to_string()
                })
                .collect()
        };
        assert_eq!(of(0), "{\"a\": \"[REDACTED:card]\"}");
        assert_eq!(of(1), "{\"b\": \"[REDACTED:card]\"}");
    }

    /// A Responses API `…done` event repeats the whole text: it is redacted as the deltas were.
    #[test]
    fn a_done_event_with_the_whole_text_is_redacted_too() {
        let mut g = guard();
        let mut events = vec![
            Emitted {
                bytes: Bytes::from(format!(
                    "event: response.output_text.delta\ndata: {}\n\n",
                    serde_json::json!({"type": "response.output_text.delta", "delta": "pay 4111111111111111"})
                )),
                kind: EventKind::Content,
            },
            Emitted {
                bytes: Bytes::from(format!(
                    "event: response.output_text.done\ndata: {}\n\n",
                    serde_json::json!({"type": "response.output_text.done", "text": "pay 4111111111111111"})
                )),
                kind: EventKind::Trailer,
            },
        ];
        g.filter(&mut events).unwrap();
        let all = events
            .iter()
            .map(|e| String::from_utf8(e.bytes.to_vec()).unwrap())
            .collect::<String>();
        assert!(!all.contains("4111"), "{all}");
        assert_eq!(all.matches("[REDACTED:card]").count(), 2, "{all}");
    }

    /// Anthropic's `event:` line stays in front of a rewritten event.
    #[test]
    fn an_event_line_is_kept() {
        let mut g = guard();
        let mut events = vec![Emitted {
            bytes: Bytes::from_static(
                b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
            ),
            kind: EventKind::Content,
        }];
        g.filter(&mut events).unwrap();
        g.finish(&mut events).unwrap();
        let text = String::from_utf8(events[0].bytes.to_vec()).unwrap();
        assert!(
            text.starts_with("event: content_block_delta\ndata: {"),
            "{text}"
        );
        let held: String = events
            .iter()
            .map(|e| {
                split_event(&e.bytes).unwrap().1["delta"]["text"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(held, "hi");
    }
}

#[cfg(test)]
mod split_tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_guardrails::{Action, Detector, Rule};

    const WINDOW: usize = 256;

    fn rules() -> Arc<RuleSet> {
        let rules: Vec<Rule> = [Detector::Card, Detector::Email, Detector::ApiKey]
            .into_iter()
            .map(|d| Rule::builtin(d, Action::Redact))
            .collect();
        Arc::new(RuleSet::new(&rules, Some(WINDOW)).unwrap())
    }

    fn sse(name: &str, data: serde_json::Value, kind: EventKind) -> Emitted {
        Emitted {
            bytes: Bytes::from(format!("event: {name}\ndata: {data}\n\n")),
            kind,
        }
    }

    fn delta(t: &str) -> Emitted {
        sse(
            "content_block_delta",
            serde_json::json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": t}}),
            EventKind::Content,
        )
    }

    fn ping() -> Emitted {
        sse(
            "ping",
            serde_json::json!({"type": "ping"}),
            EventKind::Preamble,
        )
    }

    /// A textless content event that is not a boundary of the text block: a tool block's
    /// argument-less start would be one, so the stand-in is an OpenAI-style empty chunk.
    fn empty_chunk() -> Emitted {
        Emitted {
            bytes: Bytes::from_static(b"data: {\"choices\":[{\"index\":0,\"delta\":{}}]}\n\n"),
            kind: EventKind::Preamble,
        }
    }

    fn name(e: &Emitted) -> String {
        let t = std::str::from_utf8(&e.bytes).unwrap();
        t.strip_prefix("event: ")
            .map_or("chunk", |r| r.split('\n').next().unwrap())
            .to_string()
    }

    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("4111 1111 1111 1111".to_string()),
            Just("jane.doe@example.com".to_string()),
            Just("sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345".to_string()),
            Just("héllo ✓ 🦀".to_string()),
            "[0-9 @.a-z-]{0,10}",
        ]
    }

    proptest! {
        /// An Anthropic text block split into deltas at any points, with pings and empty
        /// chunks between them anywhere: the text the client gets is the whole text redacted
        /// at once, every delta comes between the block's start and stop, and every other
        /// event comes once, in its order.
        #[test]
        fn redaction_over_any_split_with_events_between_equals_the_whole(
            pieces in prop::collection::vec(piece(), 0..48),
            cuts in prop::collection::vec(0.0f64..1.0, 0..12),
            between in prop::collection::vec((0usize..40, any::<bool>()), 0..8),
            batch in 1usize..4,
        ) {
            let whole: String = pieces.concat();
            let mut points: Vec<usize> = cuts.iter().map(|f| {
                let mut i = (f * whole.len() as f64) as usize;
                while !whole.is_char_boundary(i) { i -= 1; }
                i
            }).collect();
            points.sort_unstable();
            points.push(whole.len());
            let mut deltas = Vec::new();
            let mut at = 0;
            for p in points {
                deltas.push(whole[at..p].to_string());
                at = p;
            }
            let mut upstream = vec![
                sse("message_start", serde_json::json!({"type": "message_start"}), EventKind::Preamble),
                sse("content_block_start", serde_json::json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}), EventKind::Preamble),
            ];
            let mut others = Vec::new();
            for (i, d) in deltas.iter().enumerate() {
                upstream.push(delta(d));
                for (n, (after, is_ping)) in between.iter().enumerate() {
                    if after % deltas.len() == i {
                        let e = if *is_ping { ping() } else { empty_chunk() };
                        others.push((n, name(&e)));
                        upstream.push(e);
                    }
                }
            }
            upstream.push(sse("content_block_stop",
                serde_json::json!({"type": "content_block_stop", "index": 0}), EventKind::Content));
            upstream.push(sse("message_delta", serde_json::json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn"}}), EventKind::Trailer));
            upstream.push(sse("message_stop", serde_json::json!({"type": "message_stop"}), EventKind::Trailer));
            let names_in: Vec<String> = upstream.iter().map(name)
                .filter(|n| n != "content_block_delta").collect();

            let mut g = StreamGuard::new(
                vec![("pii".into(), rules(), WINDOW)],
                Vec::new(),
                "m",
                Instant::now() + std::time::Duration::from_secs(60),
            );
            let mut client = Vec::new();
            for chunk in upstream.chunks(batch) {
                let mut events = chunk.to_vec();
                g.filter(&mut events).unwrap();
                client.extend(events);
            }
            let mut rest = Vec::new();
            g.finish(&mut rest).unwrap();
            client.extend(rest);

            let expected = rules().apply(&whole).unwrap().text.into_owned();
            let mut got = String::new();
            let (mut started, mut stopped) = (false, false);
            for e in &client {
                match name(e).as_str() {
                    "content_block_start" => started = true,
                    "content_block_stop" => stopped = true,
                    "content_block_delta" => {
                        prop_assert!(started && !stopped, "a delta outside its block");
                        let (_, v) = split_event(&e.bytes).unwrap();
                        got.push_str(v["delta"]["text"].as_str().unwrap());
                    }
                    _ => {}
                }
            }
            prop_assert_eq!(got, expected);
            let names_out: Vec<String> = client.iter().map(name)
                .filter(|n| n != "content_block_delta").collect();
            prop_assert_eq!(names_out, names_in);
        }
    }
}
