//! Live counters a running scenario bumps and a progress line reads; atomics only, so the
//! hot path pays a relaxed add per request.

use std::sync::atomic::{AtomicU64, Ordering};

/// Requests sent and how they ended, so far.
#[derive(Debug, Default)]
pub struct Progress {
    sent: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
}

impl Progress {
    /// A request was sent.
    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// A request ended: successfully, or not (error or timeout).
    pub fn ended(&self, ok: bool) {
        let c = if ok { &self.ok } else { &self.failed };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// `(sent, ok, failed)` right now.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    /// One line for a terminal, e.g. `12.0 s  sent 1200  ok 1198  failed 0  in flight 2`.
    pub fn line(&self, elapsed_s: f64) -> String {
        let (sent, ok, failed) = self.counts();
        let in_flight = sent.saturating_sub(ok + failed);
        format!("{elapsed_s:6.1} s  sent {sent}  ok {ok}  failed {failed}  in flight {in_flight}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_line() {
        let p = Progress::default();
        p.sent();
        p.sent();
        p.ended(true);
        assert_eq!(p.counts(), (2, 1, 0));
        assert_eq!(p.line(1.5), "   1.5 s  sent 2  ok 1  failed 0  in flight 1");
    }
}
