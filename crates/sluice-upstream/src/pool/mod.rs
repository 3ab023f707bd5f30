//! The upstream's connection pool: lanes, choosing an HTTP/2 shard, draining, transparent
//! retries of requests the server provably did not process, and a snapshot.
//!
//! ```text
//! Pool
//!  └─ lane (Stream | Short), each with its own connections
//!      ├─ HTTP/2: shards (lane.rs), each one connection (h2/conn.rs) with a PING loop
//!      │   (h2/health.rs) and a frame tap (h2/tap.rs); the shard for a stream is chosen by
//!      │   select.rs
//!      └─ HTTP/1.1: a keep-alive pool (h1/), one request per connection, each
//!          connection tracked for the snapshot, rotation and the idle timeout
//! ```
//!
//! The pool uses `h1/` and `h2/`; what they share with it (connection states, snapshots,
//! counters, [`PoolCtx`]) is in `shard/`, below all three, so neither protocol names the pool.
//!
//! A lane that reaches its connection cap (either protocol) logs a warning, at most once per
//! 10 s (shard/cap_warning.rs), and its waiting requests fail naming the limit
//! ([`LaneLimit`](crate::LaneLimit)).

mod lane;
mod select;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use tokio::time::Instant;

use crate::config::{Lane, PoolConfig};
use crate::connect::Connector;
use crate::error::UpstreamError;
use crate::h1::H1Pool;
use crate::h2::{self, Sent};
use crate::shard::{AlpnPolicy, Counters, H2Settings, PoolCtx, PoolSnapshot};
use crate::target::Target;
use crate::timing::Recorder;
use lane::{Acquired, H2Lane};

/// Retries of a request that the server provably did not process (REFUSED_STREAM, a stream
/// above a GOAWAY's last-stream-id, a connection found dead before the request was written).
const MAX_TRANSPARENT_RETRIES: usize = 2;

/// The pool of one upstream.
pub(crate) struct Pool {
    ctx: Arc<PoolCtx>,
    /// `None` when the protocol can never be HTTP/2 (Http1, or Auto over http://).
    h2: Option<[H2Lane; 2]>,
    h1: [Arc<H1Pool>; 2],
}

impl Pool {
    /// `ceiling`: the open-file ceiling on default connection caps
    /// ([`crate::FdLimit::lane_ceiling`]).
    pub(crate) fn new(
        connector: Arc<Connector>,
        settings: Option<H2Settings>,
        cfg: PoolConfig,
        counters: Arc<Counters>,
        ceiling: usize,
    ) -> Pool {
        let has_h2 = settings.is_some();
        let settings = settings.unwrap_or(H2Settings {
            stream_window: 0,
            connection_window: 0,
            alpn: AlpnPolicy::None,
        });
        let ctx = Arc::new(PoolCtx::new(connector, settings, cfg, counters, ceiling));
        let h1 = Lane::ALL.map(|lane| Arc::new(H1Pool::new(ctx.clone(), lane)));
        let h2 = has_h2.then(|| Lane::ALL.map(|lane| H2Lane::new(lane, ctx.clone())));
        Pool { ctx, h2, h1 }
    }

    /// Whether requests go over HTTP/2 (configured for it, and ALPN did not choose
    /// http/1.1).
    pub(crate) fn uses_h2(&self) -> bool {
        self.h2.is_some() && !self.ctx.fell_back()
    }

    pub(crate) fn fell_back(&self) -> bool {
        self.ctx.fell_back()
    }

    pub(crate) fn h1(&self, lane: Lane) -> &Arc<H1Pool> {
        &self.h1[lane.index()]
    }

    /// Sends over HTTP/2 on `lane`, retrying on another shard (at most twice, within
    /// `deadline`) when the server provably did not process the request. `rec` gets every
    /// wait for a slot and the connect this request waited for, if any.
    ///
    /// `req` is borrowed, not taken: under `Auto` it may still go out over HTTP/1.1, and each
    /// attempt builds its own HTTP/2 head from it (see [`h2::exchange`]).
    pub(crate) async fn send_h2(
        &self,
        lane: Lane,
        target: &Target,
        req: &Request<Bytes>,
        deadline: Instant,
        rec: &mut Recorder,
    ) -> Result<Sent, UpstreamError> {
        let Some(lanes) = &self.h2 else {
            return Ok(Sent::Http1(None));
        };
        let h2lane = &lanes[lane.index()];
        let mut avoid = None;
        let mut retries = 0;
        loop {
            let shard_id;
            // The lease is made inside the awaited expression: a local would keep its room
            // in this future beside the exchange that takes it.
            let err = match {
                let waiting = Instant::now();
                let lease = match h2lane.acquire(deadline, avoid).await? {
                    Acquired::Stream(lease) => {
                        rec.waited(waiting, lease.opened);
                        lease
                    }
                    Acquired::Http1(connected) => {
                        rec.waited(waiting, connected.as_ref().map(|c| c.phases));
                        return Ok(Sent::Http1(connected));
                    }
                };
                shard_id = lease.shard().id;
                h2::exchange(lease, target, req, deadline, rec)
            }
            .await
            {
                Ok(sent) => return Ok(sent),
                Err(e) => e,
            };
            let counters = &self.ctx.counters;
            if matches!(err, h2::Failed::NotProcessed(UpstreamError::Refused)) {
                counters.refused_streams.fetch_add(1, Ordering::Relaxed);
            }
            match err {
                h2::Failed::NotProcessed(e)
                    if retries < MAX_TRANSPARENT_RETRIES && Instant::now() < deadline =>
                {
                    retries += 1;
                    counters.transparent_retries.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, retries, "retrying an unprocessed request");
                    avoid = Some(shard_id);
                }
                h2::Failed::NotProcessed(e) | h2::Failed::Processed(e) => return Err(e),
            }
        }
    }

    pub(crate) fn snapshot(&self) -> PoolSnapshot {
        let lanes = Lane::ALL
            .iter()
            .map(|&lane| match &self.h2 {
                Some(l) if !self.ctx.fell_back() => l[lane.index()].snapshot(),
                _ => self.h1(lane).snapshot(),
            })
            .collect();
        PoolSnapshot {
            lanes,
            counters: self.ctx.counters.pool_counters(),
        }
    }
}
