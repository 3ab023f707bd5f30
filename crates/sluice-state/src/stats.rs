//! Counters the gateway turns into metrics (`sluice_state_*`). Plain atomics, read with
//! [`crate::Store::stats`].

use std::sync::atomic::{AtomicU64, Ordering};

/// Where the store answers from right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// The memory backend: this instance only.
    Memory,
    /// Redis, shared by every instance.
    Shared,
    /// Redis is down and the store answers from local memory (`fail_open`).
    Fallback,
    /// Redis is down and the store refuses (`fail_closed`).
    Unavailable,
}

impl StoreMode {
    /// `memory`, `shared`, `fallback` or `unavailable`: a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreMode::Memory => "memory",
            StoreMode::Shared => "shared",
            StoreMode::Fallback => "fallback",
            StoreMode::Unavailable => "unavailable",
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub round_trips: AtomicU64,
    pub timeouts: AtomicU64,
    pub errors: AtomicU64,
    pub fallbacks: AtomicU64,
    pub refused_unavailable: AtomicU64,
    pub detached_dropped: AtomicU64,
    pub leases_renewed: AtomicU64,
    pub leases_lost: AtomicU64,
    pub trips: AtomicU64,
    pub recoveries: AtomicU64,
    pub spend_dropped: AtomicU64,
}

impl Stats {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self, mode: StoreMode) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            mode,
            round_trips: get(&self.round_trips),
            timeouts: get(&self.timeouts),
            errors: get(&self.errors),
            fallbacks: get(&self.fallbacks),
            refused_unavailable: get(&self.refused_unavailable),
            detached_dropped: get(&self.detached_dropped),
            leases_renewed: get(&self.leases_renewed),
            leases_lost: get(&self.leases_lost),
            trips: get(&self.trips),
            recoveries: get(&self.recoveries),
            spend_dropped: get(&self.spend_dropped),
        }
    }
}

/// The store's counters at one moment; all count since the store was built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Where the store answers from now (a gauge).
    pub mode: StoreMode,
    /// Calls to Redis that answered in time.
    pub round_trips: u64,
    /// Calls to Redis that hit the call deadline.
    pub timeouts: u64,
    /// Calls to Redis that failed (connection errors, error replies).
    pub errors: u64,
    /// Operations answered from local memory because Redis failed or was down (`fail_open`).
    pub fallbacks: u64,
    /// Operations refused because Redis failed or was down (`fail_closed`).
    pub refused_unavailable: u64,
    /// Background settles and releases dropped because their queue was full.
    pub detached_dropped: u64,
    /// Concurrency leases renewed.
    pub leases_renewed: u64,
    /// Live leases found expired at renewal (renewal came too late; their slot was freed).
    pub leases_lost: u64,
    /// Times Redis was marked down.
    pub trips: u64,
    /// Times Redis came back.
    pub recoveries: u64,
    /// Budget spends that could not reach Redis and found the owed-spend table full (10,000
    /// counters), so they were not counted in the shared budget.
    pub spend_dropped: u64,
}
