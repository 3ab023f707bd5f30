//! The memory budget for buffered bodies: bytes of request bodies and of non-streaming response
//! bodies held in the gateway at once, across all requests.
//!
//! Each request holds a [`BodyLease`]. The ingress charges the request body to it as the bytes
//! arrive (or all at once when `Content-Length` declares them), the non-streaming path charges
//! the response body as it reads it, and the bytes go back to the budget when the last holder
//! of the lease lets go: the request's context (which keeps the body for retries) and the
//! response body (which keeps it until the client has taken it). A charge that would pass the
//! budget fails at once; the request gets a 503 instead of the process growing.
//!
//! NOTE: streams are not charged: the relay holds at most one upstream chunk, one partial
//! event (`max_event_bytes`) and a bounded preamble per stream, and its backpressure keeps it
//! there; those bounds are per stream, this one is across bodies that are held whole.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The process-wide budget.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    limit: u64,
    used: AtomicU64,
}

impl BodyBudget {
    pub(crate) fn new(limit: u64) -> Arc<BodyBudget> {
        Arc::new(BodyBudget {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// Bytes held now.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The budget in bytes.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    fn try_take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// A charge would pass the budget.
#[derive(Clone, Copy, Debug, thiserror::Error)]
#[error("the gateway holds as many request and response bodies as its memory budget ({limit} bytes) allows")]
pub(crate) struct OverBudget {
    /// The budget in bytes.
    pub(crate) limit: u64,
}

/// One request's share of the budget, given back when the last `Arc` to it is dropped. The
/// request path holds it in its `RequestCtx`, the response body until the client has it.
#[derive(Debug)]
pub(crate) struct BodyLease {
    budget: Arc<BodyBudget>,
    held: AtomicU64,
}

impl BodyLease {
    pub(crate) fn new(budget: Arc<BodyBudget>) -> Arc<BodyLease> {
        Arc::new(BodyLease {
            budget,
            held: AtomicU64::new(0),
        })
    }

    /// Charges `n` more bytes to the request.
    ///
    /// # Errors
    /// [`OverBudget`] if the budget cannot take them; nothing is charged then.
    pub(crate) fn charge(&self, n: u64) -> Result<(), OverBudget> {
        if n == 0 {
            return Ok(());
        }
        if !self.budget.try_take(n) {
            return Err(OverBudget {
                limit: self.budget.limit,
            });
        }
        self.held.fetch_add(n, Ordering::AcqRel);
        Ok(())
    }

    /// Gives `n` bytes back early (a buffer that was dropped before the request ended).
    pub(crate) fn release(&self, n: u64) {
        let n = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                Some(h.saturating_sub(n))
            })
            .map_or(0, |before| before.min(n));
        self.budget.give_back(n);
    }

    /// Bytes charged to the request now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

impl Drop for BodyLease {
    fn drop(&mut self) {
        self.budget.give_back(*self.held.get_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_limit_and_come_back_when_the_lease_goes() {
        let b = BodyBudget::new(100);
        let a = BodyLease::new(b.clone());
        let c = BodyLease::new(b.clone());
        a.charge(60).unwrap();
        assert!(c.charge(41).is_err(), "60 + 41 > 100");
        assert_eq!(b.used(), 60, "a refused charge takes nothing");
        c.charge(40).unwrap();
        assert_eq!(b.used(), 100);
        c.release(15);
        assert_eq!((b.used(), c.held()), (85, 25));
        c.release(1000);
        assert_eq!((b.used(), c.held()), (60, 0), "never more than was held");
        drop(a);
        assert_eq!(b.used(), 0);
        assert_eq!(b.limit(), 100);
    }
}
