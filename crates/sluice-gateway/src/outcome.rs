//! The request's outcome, settled exactly once: the key's ticket first (its tokens, leases
//! and spend, from the usage the request reported), then the telemetry record, handed the
//! key and the spend as plain facts. On every path: whoever decides the outcome calls
//! [`Finish::finish`]; a request dropped unfinished (its client went away) is settled as
//! `client_gone` by the drop.
//!
//! It travels with the request through the stages that may end it (the request path, the
//! policy's attempts, the relay), so it sits below them, just above the admission whose
//! ticket it settles.

use std::ops::{Deref, DerefMut};

use sluice_telemetry::{EndReason, KeyFacts, RequestRecord};

use crate::admit::{Outcome, Ticket};

/// A request's record and its key's ticket, settled together once.
#[derive(Debug)]
pub(crate) struct Finish {
    record: RequestRecord,
    /// The request's key and limits, settled when it finishes.
    ticket: Option<Box<Ticket>>,
}

impl Finish {
    pub(crate) fn new(record: RequestRecord) -> Self {
        Finish {
            record,
            ticket: None,
        }
    }

    /// The admitted request's ticket, settled when the request finishes.
    pub(crate) fn set_ticket(&mut self, ticket: Ticket) {
        self.ticket = Some(Box::new(ticket));
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
        let r = &self.record;
        let settled = self.ticket.take().map(|t| {
            let key = t.key().cloned();
            let spend = t.settle(Outcome {
                usage: r.usage,
                status: r.status,
                model: &r.model,
                served: &r.usage_label,
                provider: r.provider,
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
