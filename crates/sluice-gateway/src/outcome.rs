//! The request's outcome, settled exactly once: the key's ticket first (its tokens, leases
//! and spend, from the usage the request reported), then the telemetry record, handed the
//! key and the spend as plain facts. On every path: whoever decides the outcome calls
//! [`Finish::finish`]; a request dropped unfinished (its client went away) is settled as
//! `client_gone` by the drop.
//!
//! With the ledger on, the same moment writes the request's ledger record (DESIGN.md
//! invariant 13: every request that reached admission is on the books once): priced by the
//! same pricing as the key's budget, handed to the ledger's queue without waiting.
//!
//! It travels with the request through the stages that may end it (the request path, the
//! policy's attempts, the relay), so it sits below them, just above the admission whose
//! ticket it settles.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use sluice_ledger::{Latency, LedgerHandle, Pricing};
use sluice_providers::Operation;
use sluice_telemetry::{EndReason, KeyFacts, RequestRecord};

use crate::admit::{CacheRun, Outcome, Pricer, Ticket, VirtualKey};

/// Where a generation's requests are booked: the ledger's queue and the prices in force.
#[derive(Debug)]
pub(crate) struct Books {
    pub(crate) ledger: LedgerHandle,
    pub(crate) pricer: Arc<Pricer>,
}

/// A request's record and its key's ticket, settled together once.
#[derive(Debug)]
pub(crate) struct Finish {
    record: RequestRecord,
    /// The request's key and limits, settled when it finishes.
    ticket: Option<Box<Ticket>>,
    /// The ledger, when it is on.
    books: Option<Arc<Books>>,
    /// On a route with a cache: the answer being recorded for it (see `admit::cache`).
    /// Settled unstored if the request finishes without storing it.
    pub(crate) cache: Option<Box<CacheRun>>,
    /// Answered from the cache: the tokens the stored answer cost, which this request saved.
    /// Boxed: only hits have it, and inline it took the guard's box (544 bytes) past
    /// jemalloc's 512-byte class.
    pub(crate) cache_saved: Option<Box<sluice_providers::Usage>>,
}

impl Finish {
    pub(crate) fn new(record: RequestRecord, books: Option<Arc<Books>>) -> Self {
        Finish {
            record,
            ticket: None,
            books,
            cache: None,
            cache_saved: None,
        }
    }

    /// Puts the request on the books (a model call; local endpoints are not).
    pub(crate) fn book(&mut self, books: Option<Arc<Books>>) {
        self.books = books;
    }

    /// The admitted request's ticket, settled when the request finishes.
    pub(crate) fn set_ticket(&mut self, ticket: Ticket) {
        self.ticket = Some(Box::new(ticket));
    }

    /// A stream's event as sent to the client, recorded for the cache when the route has one.
    #[inline]
    pub(crate) fn cache_event(&mut self, bytes: &bytes::Bytes) {
        if let Some(run) = self.cache.as_mut() {
            run.event(bytes);
        }
    }

    /// The answer can no longer be cached (an error event after the commit, a splice).
    pub(crate) fn cache_spoil(&mut self) {
        if let Some(run) = self.cache.as_mut() {
            run.spoil_incomplete();
        }
    }

    /// The stream ended cleanly: offer it to the cache (call before `finish`, after the
    /// usage is recorded).
    pub(crate) fn cache_store_stream(&mut self) {
        if let Some(run) = self.cache.take() {
            run.store_stream(self.record.status, self.record.usage);
        }
    }

    /// A whole answer is ready: offer it to the cache (call before `finish`).
    pub(crate) fn cache_store_whole(
        &mut self,
        status: http::StatusCode,
        headers: &http::HeaderMap,
        body: &bytes::Bytes,
    ) {
        if let Some(run) = self.cache.take() {
            run.store_whole(status, headers, body, self.record.usage);
        }
    }

    pub(crate) fn ticket(&self) -> Option<&Ticket> {
        self.ticket.as_deref()
    }

    pub(crate) fn ticket_mut(&mut self) -> Option<&mut Ticket> {
        self.ticket.as_deref_mut()
    }

    /// Settles the ticket, then finishes the record with the key and its spend. Once: later
    /// calls (and the drop) do nothing.
    pub(crate) fn finish(&mut self, reason: EndReason) {
        if self.record.is_finished() {
            return;
        }
        if let Some(run) = self.cache.take() {
            // Whoever had a complete success stored it already. A client gone leaves the
            // flight abandoned (a waiter leads the next one); any other end tells waiters
            // there is no answer to share.
            if reason != EndReason::ClientGone {
                run.fail();
            }
        }
        let cached = self.cache_saved.is_some();
        let r = &self.record;
        let settled = self.ticket.take().map(|t| {
            let key = t.key().cloned();
            let spend = t.settle(Outcome {
                usage: r.usage,
                status: r.status,
                model: &r.model,
                served: &r.usage_label,
                provider: r.provider,
                cached,
            });
            (key, spend)
        });
        let (key, spend) = match &settled {
            Some((key, spend)) => (key.as_deref(), Some(*spend)),
            None => (None, None),
        };
        let facts = key.map(|k| KeyFacts {
            id: k.id(),
            team: k.team(),
            owner: k.owner(),
        });
        self.record.finish_keyed(reason, facts, spend);
        match self.books.take() {
            Some(books) => {
                let rec = self.ledger_record(&books, reason, key);
                if let (Pricing::Priced { cost, .. }, false) = (&rec.pricing, cached) {
                    self.record
                        .add_spend(u64::try_from(cost.micros).unwrap_or(0));
                }
                books.ledger.record(rec);
            }
            // Without books only a keyed request is priced (its budget's spend).
            None => self.record.add_spend(spend.unwrap_or(0)),
        }
    }

    /// The request's ledger record, priced as its budget was.
    fn ledger_record(
        &self,
        books: &Books,
        reason: EndReason,
        key: Option<&VirtualKey>,
    ) -> sluice_ledger::RequestRecord {
        let r = &self.record;
        let total = r.started().elapsed();
        let now = sluice_ledger::now_us();
        let ts_us = now
            - i64::try_from(total.as_micros())
                .unwrap_or(i64::MAX)
                .min(now);
        let text = |s: &str| (!s.is_empty()).then(|| Arc::<str>::from(s));
        let mut rec = sluice_ledger::RequestRecord::new(
            ts_us,
            Arc::from(r.request_id.as_str()),
            text(&r.route).unwrap_or_else(|| Arc::from("-")),
            r.op.map_or("-", client_api),
        );
        if let Some(k) = key {
            rec.key_id = Some(Arc::from(k.id()));
            rec.team = k.team().map(Arc::from);
            rec.owner = k.owner().map(Arc::from);
        }
        rec.requested_model = text(&r.model);
        rec.served_model = if r.renamed {
            text(&r.usage_label)
        } else {
            text(&r.model)
        };
        rec.upstream = text(&r.upstream);
        rec.provider = text(r.provider);
        rec.attempts = u16::try_from(r.attempts.len()).unwrap_or(u16::MAX);
        rec.attempt_classes = r
            .attempts
            .iter()
            .filter(|a| a.outcome != "ok")
            .map(|a| a.outcome)
            .collect();
        rec.status = r.status;
        rec.end_reason = reason.as_str();
        rec.stream = r.is_stream();
        rec.cache_hit = self.cache_saved.is_some();
        // A hit's record carries what it saved: the stored answer's tokens, priced as the
        // upstream would have charged (the ledger counts hits apart from spend).
        if let Some(u) = self.cache_saved.as_deref().or(r.usage.as_ref()) {
            rec.tokens = crate::admit::tokens(u);
            let model = rec.served_model.as_deref().unwrap_or_default();
            rec.pricing = books.pricer.pricing(r.provider, model, u);
        } else {
            rec.pricing = Pricing::NoUsage;
        }
        let us = |d: std::time::Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        rec.latency = Latency {
            first_byte_us: r.timings.map(|t| us(t.first_byte)),
            first_token_us: r.first_byte_after().map(us),
            total_us: us(total),
        };
        rec.idempotent_replay = r.replay;
        rec.guardrails = r.guardrails.as_deref().map(|g| ledger_guardrails(g));
        rec
    }
}

/// The log line's `name(verdict:0.12ms),…` as the ledger's compact `name:verdict:0.12ms,…`
/// (guardrail names are letters, digits, `-`, `_` and `.`, so the brackets are the log's own).
fn ledger_guardrails(log: &str) -> Box<str> {
    log.chars()
        .filter(|&c| c != ')')
        .map(|c| if c == '(' { ':' } else { c })
        .collect::<String>()
        .into_boxed_str()
}

/// The ledger's name for the API the client spoke.
fn client_api(op: Operation) -> &'static str {
    match op {
        Operation::ChatCompletions => "openai.chat",
        Operation::Completions => "openai.completions",
        Operation::Embeddings => "openai.embeddings",
        Operation::Responses => "openai.responses",
        Operation::Messages => "anthropic.messages",
        Operation::CountTokens => "anthropic.count_tokens",
        Operation::GenerateContent => "gemini.generate_content",
        Operation::StreamGenerateContent => "gemini.stream_generate_content",
    }
}

impl Deref for Finish {
    type Target = RequestRecord;

    fn deref(&self) -> &RequestRecord {
        &self.record
    }
}

impl DerefMut for Finish {
    fn deref_mut(&mut self) -> &mut RequestRecord {
        &mut self.record
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.finish(EndReason::ClientGone);
    }
}

#[cfg(all(test, target_pointer_width = "64"))]
mod size_tests {
    /// The guard is one allocation a request: past 512 bytes jemalloc gives it 640.
    #[test]
    fn the_finish_guard_fits_a_512_byte_allocation() {
        let size = std::mem::size_of::<super::Finish>();
        assert!(size <= 512, "Finish is {size} bytes");
    }
}
