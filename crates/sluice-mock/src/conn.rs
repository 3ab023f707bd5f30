//! What a connection's handlers share.

use std::sync::Arc;

use crate::knobs::Behavior;
use crate::stats::{ConnStats, Stats};
use crate::throttle::Rate;

/// Server settings every connection reads.
#[derive(Debug)]
pub(crate) struct ServerCfg {
    pub(crate) defaults: Behavior,
    pub(crate) h2_max_concurrent_streams: Option<u32>,
}

/// One connection's context, cloned into each of its request handlers.
#[derive(Clone, Debug)]
pub(crate) struct ConnCtx {
    pub(crate) cfg: Arc<ServerCfg>,
    pub(crate) stats: Stats,
    pub(crate) conn: Arc<ConnStats>,
    pub(crate) rate: Rate,
}
