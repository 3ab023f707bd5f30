//! The events ready for the client, oldest first.
//!
//! A passthrough stream has one at a time (an upstream event in, the same event out), so the
//! first sits in place and a stream never allocates for it; only a translation that makes
//! several events of one, and a preamble of more than one event held until the commit, queue
//! behind it. That queue is freed when it drains, so a stream does not keep a burst's room to
//! its end.

use std::collections::VecDeque;

use bytes::Bytes;

/// Events ready for the client: the oldest in place, the rest behind it.
#[derive(Default)]
pub(crate) struct Outbox {
    first: Option<Bytes>,
    rest: VecDeque<Bytes>,
}

impl Outbox {
    /// Queues `b` after the events already here.
    pub(crate) fn push(&mut self, b: Bytes) {
        if self.first.is_none() && self.rest.is_empty() {
            self.first = Some(b);
        } else {
            self.rest.push_back(b);
        }
    }

    /// The oldest event.
    pub(crate) fn pop(&mut self) -> Option<Bytes> {
        if let Some(b) = self.first.take() {
            return Some(b);
        }
        let b = self.rest.pop_front();
        if b.is_some() && self.rest.is_empty() {
            self.rest = VecDeque::new();
        }
        b
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none() && self.rest.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    /// Drops every event (and the queue's room).
    pub(crate) fn clear(&mut self) {
        *self = Outbox::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    #[test]
    fn events_come_out_in_the_order_they_went_in() {
        let mut o = Outbox::default();
        assert!(o.is_empty());
        o.push(b("1"));
        o.push(b("2"));
        assert_eq!(o.len(), 2);
        assert_eq!(o.pop(), Some(b("1")));
        // Queued behind "2", not in the free first place: the order holds.
        for s in ["3", "4", "5"] {
            o.push(b(s));
        }
        let got: Vec<_> = std::iter::from_fn(|| o.pop()).collect();
        assert_eq!(got, [b("2"), b("3"), b("4"), b("5")]);
        assert!(o.is_empty());
    }

    #[test]
    fn one_at_a_time_allocates_nothing_and_a_drained_queue_is_freed() {
        let mut o = Outbox::default();
        for s in ["a", "b", "c"] {
            o.push(b(s));
            assert_eq!(o.rest.capacity(), 0);
            assert_eq!(o.pop(), Some(b(s)));
        }
        for s in ["x", "y", "z"] {
            o.push(b(s));
        }
        assert!(o.rest.capacity() > 0);
        while o.pop().is_some() {}
        assert_eq!(o.rest.capacity(), 0);
        assert_eq!(o.pop(), None);
        o.push(b("x"));
        o.push(b("y"));
        o.clear();
        assert!(o.is_empty());
        assert_eq!((o.len(), o.rest.capacity()), (0, 0));
    }
}
