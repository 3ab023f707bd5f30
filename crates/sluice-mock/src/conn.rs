//! What a connection's handlers share.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::cloud::CloudState;
use crate::faults::FaultState;
use crate::knobs::Behavior;
use crate::stats::{ConnStats, Stats};
use crate::throttle::Rate;

/// Server settings and state every connection reads.
#[derive(Debug)]
pub(crate) struct ServerCfg {
    pub(crate) defaults: Behavior,
    pub(crate) h2_max_concurrent_streams: Option<u32>,
    pub(crate) h1_idle_timeout: Option<Duration>,
    pub(crate) h1_stale_close: Option<Duration>,
    pub(crate) h1_stale_close_rst: bool,
    pub(crate) max_recorded_body: usize,
    pub(crate) faults: FaultState,
    pub(crate) cloud: CloudState,
}

/// One connection's context, cloned into each of its request handlers.
#[derive(Clone, Debug)]
pub(crate) struct ConnCtx {
    pub(crate) cfg: Arc<ServerCfg>,
    pub(crate) stats: Stats,
    pub(crate) conn: Arc<ConnStats>,
    pub(crate) rate: Rate,
    /// Ends the whole connection at once (`fail_with=close` on HTTP/2).
    pub(crate) kill: Arc<Notify>,
    /// Close the TCP connection with RST instead of FIN when it is dropped.
    pub(crate) rst: Arc<AtomicBool>,
}

impl ConnCtx {
    /// Makes the coming close of this connection an abortive one (TCP RST).
    pub(crate) fn close_with_rst(&self) {
        self.rst.store(true, Ordering::Relaxed);
    }
}
