//! The pool's counters, shared by the lanes, the connection tasks and the response bodies;
//! [`PoolCounters`] is their snapshot.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::snapshot::PoolCounters;
use super::state::DrainReason;

/// Counters shared by the pools, the connection tasks and the bodies.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    open_connections: AtomicUsize,
    connections_ever: AtomicUsize,
    in_flight: AtomicUsize,
    pub(crate) connects: AtomicU64,
    pub(crate) connect_failures: AtomicU64,
    pub(crate) goaways: AtomicU64,
    pub(crate) refused_streams: AtomicU64,
    pub(crate) transparent_retries: AtomicU64,
    pub(crate) stale_retries: AtomicU64,
    drains_goaway: AtomicU64,
    drains_max_age: AtomicU64,
    drains_max_requests: AtomicU64,
    pub(crate) degradations: AtomicU64,
    pub(crate) ping_timeouts: AtomicU64,
    pub(crate) pool_acquire_timeouts: AtomicU64,
    pub(crate) pool_full: AtomicU64,
}

impl Counters {
    pub(crate) fn open_connections(&self) -> usize {
        self.open_connections.load(Ordering::Relaxed)
    }

    /// Connections ever opened: under `Auto`, the first one shows that HTTP/2 was chosen.
    pub(crate) fn connections_ever(&self) -> usize {
        self.connections_ever.load(Ordering::Relaxed)
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub(crate) fn drained(&self, reason: DrainReason) {
        let c = match reason {
            DrainReason::GoAway => &self.drains_goaway,
            DrainReason::MaxAge => &self.drains_max_age,
            DrainReason::MaxRequests => &self.drains_max_requests,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn pool_counters(&self) -> PoolCounters {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PoolCounters {
            connects: g(&self.connects),
            connect_failures: g(&self.connect_failures),
            goaways: g(&self.goaways),
            refused_streams: g(&self.refused_streams),
            transparent_retries: g(&self.transparent_retries),
            stale_retries: g(&self.stale_retries),
            drains_goaway: g(&self.drains_goaway),
            drains_max_age: g(&self.drains_max_age),
            drains_max_requests: g(&self.drains_max_requests),
            degradations: g(&self.degradations),
            ping_timeouts: g(&self.ping_timeouts),
            pool_acquire_timeouts: g(&self.pool_acquire_timeouts),
            pool_full: g(&self.pool_full),
        }
    }

    /// Counts a connection as open until the returned guard (moved into its task) drops.
    pub(crate) fn connection_opened(self: &Arc<Self>) -> OpenConnection {
        self.open_connections.fetch_add(1, Ordering::Relaxed);
        self.connections_ever.fetch_add(1, Ordering::Relaxed);
        OpenConnection(self.clone())
    }
}

/// One open connection, for [`UpstreamStats::open_connections`](crate::UpstreamStats::open_connections).
pub(crate) struct OpenConnection(Arc<Counters>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One request in flight, for [`UpstreamStats::in_flight`](crate::UpstreamStats::in_flight); travels into the body.
pub(crate) struct InFlight(Arc<Counters>);

impl InFlight {
    pub(crate) fn new(counters: &Arc<Counters>) -> Self {
        counters.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(counters.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
