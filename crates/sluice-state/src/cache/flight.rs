//! Single flight: identical requests arriving while the first is upstream wait for its answer
//! instead of all going upstream.
//!
//! One table per process (and per [`crate::ResponseCache`]) from digest to the flight's watch
//! channel. The leader holds the sender inside its [`FlightGuard`]; followers hold receivers.
//! The leader's answer is handed to followers directly (an `Arc`, not a second lookup), so a
//! Redis that is slow or down does not stop it.
//!
//! NOTE: per instance only. Identical requests arriving at two instances at once both go
//! upstream; a cross-instance flight (a Redis lock key and polling) would put a Redis round
//! trip on every miss and a poll loop on every follower, for duplicates that a load balancer
//! spreading by key mostly sends to one instance anyway.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
use tokio::time::Instant;

use super::entry::CachedResponse;

/// Where a flight stands.
#[derive(Clone, Debug)]
pub(crate) enum FlightState {
    Running,
    Filled(Arc<CachedResponse>),
    Uncacheable,
}

/// Digest → (flight number, the flight's state).
type Table = HashMap<[u8; 32], (u64, watch::Receiver<FlightState>)>;

/// The flights in progress, and finished ones whose answer is still being stored in Redis
/// (followers arriving meanwhile get the answer at once).
#[derive(Debug, Default)]
pub(crate) struct Flights {
    map: Mutex<Table>,
    next_id: AtomicU64,
}

/// Joining a flight: lead it, or follow the one in progress.
pub(crate) enum Joined {
    Leader(u64, watch::Sender<FlightState>),
    Follower(watch::Receiver<FlightState>),
}

impl Flights {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn join(&self, digest: [u8; 32]) -> Joined {
        let mut map = self.lock();
        if let Some((_, rx)) = map.get(&digest) {
            let live = match &*rx.borrow() {
                FlightState::Filled(_) => true,
                // A leader that is gone without a word left no answer: lead a new flight.
                FlightState::Running => rx.has_changed().is_ok(),
                FlightState::Uncacheable => false,
            };
            if live {
                return Joined::Follower(rx.clone());
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = watch::channel(FlightState::Running);
        map.insert(digest, (id, rx));
        Joined::Leader(id, tx)
    }

    /// Ends flight `id` of `digest`, if it is still the one in the table.
    pub fn end(&self, digest: &[u8; 32], id: u64) {
        let mut map = self.lock();
        if map.get(digest).is_some_and(|(current, _)| *current == id) {
            map.remove(digest);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Removes a finished flight from the table when dropped: at once with the memory backend,
/// after the Redis store of its answer otherwise.
#[derive(Debug)]
pub(crate) struct FlightEnd {
    pub flights: Arc<Flights>,
    pub digest: [u8; 32],
    pub id: u64,
}

impl Drop for FlightEnd {
    fn drop(&mut self) {
        self.flights.end(&self.digest, self.id);
    }
}

/// What a follower got. Cancel-safe: dropping [`FlightWaiter::wait`] leaves the flight alone.
#[derive(Clone, Debug)]
pub enum Waited {
    /// The leader's answer: answer it as a hit (`Age: 0`).
    Filled(Arc<CachedResponse>),
    /// The leader's answer must not be cached (an error, a cut stream, a content filter):
    /// go upstream.
    Uncacheable,
    /// The leader went away without an answer (cancelled, dropped): call
    /// [`crate::ResponseCache::begin`] again (one of the followers leads next).
    Abandoned,
    /// The deadline passed first: go upstream.
    TimedOut,
}

impl Waited {
    /// `filled`, `uncacheable`, `abandoned`, `timed_out`: a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Waited::Filled(_) => "filled",
            Waited::Uncacheable => "uncacheable",
            Waited::Abandoned => "abandoned",
            Waited::TimedOut => "timed_out",
        }
    }
}

/// A follower's wait for the leader of its flight.
#[derive(Debug)]
pub struct FlightWaiter {
    pub(crate) rx: watch::Receiver<FlightState>,
    pub(crate) served: Arc<AtomicU64>,
}

impl FlightWaiter {
    /// Waits for the leader until `deadline` (the caller's bound: e.g. the request's time to
    /// first byte).
    pub async fn wait(mut self, deadline: Instant) -> Waited {
        let rx = &mut self.rx;
        let waited = tokio::time::timeout_at(deadline, async move {
            rx.wait_for(|s| !matches!(s, FlightState::Running))
                .await
                .map(|s| s.clone())
        });
        match waited.await {
            Ok(Ok(FlightState::Filled(entry))) => {
                self.served.fetch_add(1, Ordering::Relaxed);
                Waited::Filled(entry)
            }
            Ok(Ok(_)) => Waited::Uncacheable,
            Ok(Err(_closed)) => Waited::Abandoned,
            Err(_elapsed) => Waited::TimedOut,
        }
    }
}
