//! What the pool and the connections of both protocols (shards) share, so that the pool can
//! use `h1/` and `h2/` without either of them naming the pool: a connection's state and why it
//! drains (state.rs), the snapshot each fills in (snapshot.rs), the counters (counters.rs),
//! the cap warning (cap_warning.rs), and the context every lane and connection holds
//! ([`PoolCtx`]). Below `pool/`, `h1/` and `h2/`; above `config.rs`, `connect.rs` and
//! `error.rs`.

mod cap_warning;
mod counters;
mod snapshot;
mod state;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub(crate) use cap_warning::CapWarning;
pub(crate) use counters::{Counters, InFlight, OpenConnection};
pub use snapshot::{ConnectionSnapshot, LaneSnapshot, PoolCounters, PoolSnapshot};
pub(crate) use state::DrainReason;
pub use state::ShardState;

use crate::config::{Lane, PoolConfig, Wire};
use crate::connect::Connector;
use crate::error::LaneLimit;

/// Flow-control windows and ALPN policy, validated in `Upstream::new`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct H2Settings {
    pub(crate) stream_window: u32,
    pub(crate) connection_window: u32,
    /// TLS must negotiate h2 by ALPN: with `Auto`, a server that chose http/1.1 sends the
    /// request (and all later ones) to the HTTP/1.1 pool instead.
    pub(crate) alpn: AlpnPolicy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AlpnPolicy {
    /// h2c prior knowledge: no TLS, no ALPN.
    None,
    /// TLS, and h2 is required.
    Required,
    /// TLS, and http/1.1 is an acceptable answer.
    FallBack,
}

/// Everything the lanes and shards of one upstream share.
pub(crate) struct PoolCtx {
    pub(crate) connector: Arc<Connector>,
    pub(crate) settings: H2Settings,
    pub(crate) cfg: PoolConfig,
    pub(crate) counters: Arc<Counters>,
    fell_back: AtomicBool,
    /// Ids of connections of either protocol, unique in the pool.
    pub(crate) next_shard_id: AtomicU64,
    /// The open-file ceiling on default connection caps.
    ceiling: usize,
}

impl PoolCtx {
    pub(crate) fn new(
        connector: Arc<Connector>,
        settings: H2Settings,
        cfg: PoolConfig,
        counters: Arc<Counters>,
        ceiling: usize,
    ) -> PoolCtx {
        PoolCtx {
            connector,
            settings,
            cfg,
            counters,
            fell_back: AtomicBool::new(false),
            next_shard_id: AtomicU64::new(1),
            ceiling,
        }
    }

    /// `lane`'s connection cap in force on `wire`.
    pub(crate) fn cap(&self, lane: Lane, wire: Wire) -> usize {
        self.cfg.lane(lane).cap(wire, self.ceiling)
    }

    /// What limits `lane` when it has no free slot: its HTTP/2 cap if `live` connections
    /// reached it, else connections not ready yet.
    pub(crate) fn h2_limit(&self, lane: Lane, live: usize) -> LaneLimit {
        let max_connections = self.cap(lane, Wire::H2);
        if live >= max_connections {
            LaneLimit::H2Connections { max_connections }
        } else {
            LaneLimit::NotReady
        }
    }

    pub(crate) fn fell_back(&self) -> bool {
        self.fell_back.load(Ordering::Acquire)
    }

    pub(crate) fn set_fell_back(&self) {
        self.fell_back.store(true, Ordering::Release);
    }
}
