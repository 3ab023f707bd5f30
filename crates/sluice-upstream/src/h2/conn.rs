//! One HTTP/2 connection of a lane (a "shard"): its handshake, the driver task that runs it,
//! the PING loop that measures its RTT and judges its health, its state, and the lease that
//! holds one of its stream slots.
//!
//! Ownership: the lane's shard list and every open stream's [`StreamLease`] hold the
//! [`Shard`]; dropping the last of them aborts both tasks, which closes the socket. The tasks
//! hold only [`ShardShared`] and a `Weak` of the lane ([`LaneEvents`]), so they never keep a pool
//! alive.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use h2::{Ping, PingPong};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, Instant};

use super::health::{self, Health};
use super::tap::{FrameSink, Tapped};
use crate::config::{Lane, PoolConfig, Protocol};
use crate::connect::Io;
use crate::error::UpstreamError;
use crate::shard::{Counters, DrainReason, PoolCtx, ShardState};
use crate::timing::ConnectPhases;

/// What a shard tells the lane that owns it, and asks of it; the lane (`pool/lane.rs`)
/// implements it. The shard and its tasks hold it as a `Weak`, so they never keep a pool alive.
///
/// NOTE: a trait rather than the lane's own type so that the connection does not name the pool
/// that holds it: `pool/` uses `h2/`, never the reverse. It costs an indirect call where a
/// shard changes state or a stream ends, next to an atomic update and a wake-up.
pub(crate) trait LaneEvents: Send + Sync {
    /// A slot freed or a shard changed state: wake the oldest waiting request.
    fn wake_head(&self);
    /// A shard became degraded: open a replacement if the lane needs one.
    fn maintain(self: Arc<Self>);
    /// Drop finished shards (and drain those past `max_age`).
    fn prune_and_check_age(&self, max_age: Option<Duration>);
    /// The lowest RTT any live shard of the lane has shown (the lane's baseline).
    fn best_rtt(&self) -> Option<Duration>;
    /// A Ready shard answered a PING in time.
    fn healthy_pong(&self);
}

/// No GOAWAY seen yet (stream ids are 31-bit, so this is never a real last-stream-id).
const NO_GOAWAY: u32 = u32::MAX;

/// State shared by the shard, its tasks and its tap.
pub(crate) struct ShardShared {
    pub(crate) id: u64,
    pub(crate) lane: Lane,
    pub(crate) protocol: Protocol,
    pub(crate) opened_at: Instant,
    /// Our `max_streams_per_connection`.
    pub(crate) max_streams: usize,
    state: AtomicU8,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) requests: AtomicU64,
    /// Socket bytes read and written, for the admin snapshot.
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) health: Mutex<Health>,
    /// Milliseconds after `opened_at` of the last DATA frame, or of the moment the shard went
    /// from idle to busy (so a stream that just started is not "stalled since long ago").
    last_progress_ms: AtomicU64,
    goaway_last_id: AtomicU32,
    /// Tells the driver to drop the connection now (PING timeout).
    close: Notify,
    lane_shared: Weak<dyn LaneEvents>,
    counters: Arc<Counters>,
}

impl ShardShared {
    pub(crate) fn state(&self) -> ShardState {
        ShardState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Nothing left to do: closed, or draining with no stream left. The lane drops it.
    pub(crate) fn finished(&self) -> bool {
        match self.state() {
            ShardState::Closed => true,
            ShardState::Draining => self.in_flight.load(Ordering::Acquire) == 0,
            _ => false,
        }
    }

    fn wake_lane(&self) {
        if let Some(lane) = self.lane_shared.upgrade() {
            lane.wake_head();
        }
    }

    /// No new streams from now on; the shard closes when its last stream ends. Does not lock
    /// the lane (callers may hold its lock).
    pub(crate) fn drain(&self, reason: DrainReason) {
        let moved = self
            .state
            .fetch_update(
                Ordering::AcqRel,
                Ordering::Acquire,
                |s| match ShardState::from_u8(s) {
                    ShardState::Ready | ShardState::Degraded => Some(ShardState::Draining as u8),
                    _ => None,
                },
            )
            .is_ok();
        if moved {
            self.counters.drained(reason);
            tracing::debug!(shard = self.id, ?reason, "upstream h2 connection draining");
            self.wake_lane();
        }
    }

    pub(crate) fn set_closed(&self) {
        self.state
            .store(ShardState::Closed as u8, Ordering::Release);
        self.wake_lane();
    }

    /// Ready ↔ Degraded; draining and closed shards stay as they are. A shard that becomes
    /// degraded makes its lane open a replacement (below `max_connections`).
    fn set_degraded(&self, degraded: bool) {
        let (from, to) = if degraded {
            (ShardState::Ready, ShardState::Degraded)
        } else {
            (ShardState::Degraded, ShardState::Ready)
        };
        let moved = self
            .state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if moved {
            if degraded {
                self.counters.degradations.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(shard = self.id, "upstream h2 connection degraded");
                if let Some(lane) = self.lane_shared.upgrade() {
                    lane.maintain();
                }
            }
            self.wake_lane();
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.opened_at.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn stalled(&self, stall_timeout: Duration) -> bool {
        let since = self
            .now_ms()
            .saturating_sub(self.last_progress_ms.load(Ordering::Relaxed));
        self.in_flight.load(Ordering::Acquire) > 0 && Duration::from_millis(since) >= stall_timeout
    }

    /// The last-stream-id of a GOAWAY received on this connection.
    pub(crate) fn goaway_last_id(&self) -> Option<u32> {
        let id = self.goaway_last_id.load(Ordering::Acquire);
        (id != NO_GOAWAY).then_some(id)
    }

    /// Learns from a stream error: a GOAWAY from the server means no new streams go to this
    /// connection (open ones finish); an I/O error means it is gone.
    pub(crate) fn observe(&self, e: &h2::Error) {
        if e.is_go_away() && e.is_remote() {
            self.drain(DrainReason::GoAway);
        } else if e.is_io() {
            self.set_closed();
        }
    }
}

impl FrameSink for ShardShared {
    fn bytes(&self, read: usize, written: usize) {
        if read > 0 {
            self.bytes_in.fetch_add(read as u64, Ordering::Relaxed);
        }
        if written > 0 {
            self.bytes_out.fetch_add(written as u64, Ordering::Relaxed);
        }
    }

    fn data(&self) {
        self.last_progress_ms
            .store(self.now_ms(), Ordering::Relaxed);
    }

    fn goaway(&self, last_stream_id: u32, error_code: u32) {
        // A graceful shutdown sends GOAWAY(2^31-1) and then the real last id: keep the lowest.
        let before = self
            .goaway_last_id
            .fetch_min(last_stream_id, Ordering::AcqRel);
        if before == NO_GOAWAY {
            self.counters.goaways.fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(
            shard = self.id,
            last_stream_id,
            error_code,
            "upstream sent GOAWAY"
        );
        self.drain(DrainReason::GoAway);
    }
}

// A poisoned lock only means a panic elsewhere; the data behind these locks stays consistent
// (every update is a single assignment or take).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One HTTP/2 connection. Dropping it aborts its tasks, which closes the socket.
pub(crate) struct Shard {
    pub(crate) shared: Arc<ShardShared>,
    /// How the connection was opened, until its first stream takes it: that stream's
    /// request is the one that waited for the connect.
    opened: Mutex<Option<ConnectPhases>>,
    send: SendRequest<Bytes>,
    driver: JoinHandle<()>,
    pinger: Option<JoinHandle<()>>,
}

impl Drop for Shard {
    fn drop(&mut self) {
        // Explicit, rather than relying on h2 noticing that every SendRequest is gone (hyper
        // documents an h2 bug where a parked Connection is not woken by that).
        self.driver.abort();
        if let Some(p) = &self.pinger {
            p.abort();
        }
    }
}

impl Shard {
    /// The server's current SETTINGS_MAX_CONCURRENT_STREAMS (h2 updates it live).
    pub(crate) fn server_max_streams(&self) -> usize {
        self.send.current_max_send_streams()
    }

    /// How many streams may be open at once now: ours, or the server's if lower.
    pub(crate) fn cap(&self) -> usize {
        self.shared.max_streams.min(self.server_max_streams())
    }

    /// Takes one stream slot. Called by the lane under its lock, after the chooser checked
    /// `in_flight < cap`, so the cap holds (h2 itself would queue streams past the server's
    /// limit without bound).
    pub(crate) fn lease(self: &Arc<Self>, ctx: &PoolCtx) -> StreamLease {
        let s = &self.shared;
        if s.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            s.last_progress_ms.store(s.now_ms(), Ordering::Relaxed);
        }
        let served = s.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if ctx
            .cfg
            .max_requests_per_connection
            .is_some_and(|max| served >= max)
        {
            s.drain(DrainReason::MaxRequests);
        }
        StreamLease {
            shard: self.clone(),
            opened: lock(&self.opened).take(),
        }
    }

    /// Drains the shard once it is older than `max_connection_age`.
    pub(crate) fn check_age(&self, max_age: Option<Duration>) {
        if max_age.is_some_and(|max| self.shared.opened_at.elapsed() >= max) {
            self.shared.drain(DrainReason::MaxAge);
        }
    }

    /// Handshakes on a connected socket and starts the driver and PING tasks.
    pub(crate) async fn open(
        ctx: &Arc<PoolCtx>,
        lane: Lane,
        lane_shared: Weak<dyn LaneEvents>,
        io: Io,
        protocol: Protocol,
        mut opened: ConnectPhases,
    ) -> Result<Arc<Shard>, UpstreamError> {
        let s = ctx.settings;
        let max_streams = ctx.cfg.lane(lane).max_streams_per_connection as usize;
        let shared = Arc::new(ShardShared {
            id: ctx.next_shard_id.fetch_add(1, Ordering::Relaxed),
            lane,
            protocol,
            opened_at: Instant::now(),
            max_streams,
            state: AtomicU8::new(ShardState::Ready as u8),
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            health: Mutex::new(Health::default()),
            last_progress_ms: AtomicU64::new(0),
            goaway_last_id: AtomicU32::new(NO_GOAWAY),
            close: Notify::new(),
            lane_shared: lane_shared.clone(),
            counters: ctx.counters.clone(),
        });
        let io = Tapped::new(io, shared.clone() as Arc<dyn FrameSink>);
        let (send, mut conn) = h2::client::Builder::new()
            .initial_window_size(s.stream_window)
            .initial_connection_window_size(s.connection_window)
            // Our own bound until the server's SETTINGS arrive (h2's default is unlimited).
            .initial_max_send_streams(max_streams)
            .enable_push(false)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|e| UpstreamError::Protocol(format!("HTTP/2 handshake failed: {e}")))?;
        // Usable only from here: the handshake is part of the wait for this connection.
        opened.ready = Instant::now();
        let ping = conn.ping_pong();
        let open = ctx.counters.connection_opened();
        let task_shared = shared.clone();
        let driver = tokio::spawn(async move {
            let _open = open;
            tokio::select! {
                r = &mut conn => if let Err(e) = r {
                    tracing::debug!(error = %e, "upstream h2 connection ended with an error");
                },
                // A PING timeout: drop the connection (and fail its streams) now.
                _ = task_shared.close.notified() => {}
            }
            task_shared.set_closed();
        });
        let pinger = ping.map(|pp| {
            tokio::spawn(ping_loop(
                pp,
                shared.clone(),
                lane_shared,
                HealthSettings::of(&ctx.cfg),
            ))
        });
        Ok(Arc::new(Shard {
            shared,
            opened: Mutex::new(Some(opened)),
            send,
            driver,
            pinger,
        }))
    }
}

/// The health knobs the PING loop needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HealthSettings {
    pub(crate) interval: Duration,
    pub(crate) factor: f64,
    pub(crate) floor: Duration,
    pub(crate) stall_timeout: Duration,
    pub(crate) max_age: Option<Duration>,
}

impl HealthSettings {
    fn of(cfg: &PoolConfig) -> HealthSettings {
        HealthSettings {
            interval: cfg.ping_interval,
            factor: cfg.degraded_rtt_factor,
            floor: cfg.degraded_rtt_floor,
            stall_timeout: cfg.stall_timeout,
            max_age: cfg.max_connection_age,
        }
    }
}

/// A PING every `interval`: RTT into the shard's [`Health`], Degraded/Ready from its
/// verdict, close on a PING timeout, drain on age. Ends when the connection closes or the
/// shard is dropped (which aborts it).
async fn ping_loop(
    mut pp: PingPong,
    shared: Arc<ShardShared>,
    lane: Weak<dyn LaneEvents>,
    h: HealthSettings,
) {
    let ping_timeout = (2 * h.interval).max(Duration::from_secs(1));
    loop {
        sleep(h.interval).await;
        if shared.state() == ShardState::Closed {
            return;
        }
        let Some(lane_now) = lane.upgrade() else {
            return;
        };
        lane_now.prune_and_check_age(h.max_age);
        let best = lane_now.best_rtt();
        drop(lane_now);
        let threshold = health::threshold(best, h.factor, h.floor);
        let start = Instant::now();
        let mut pong = std::pin::pin!(pp.ping(Ping::opaque()));
        let mut slow = false;
        let outcome = loop {
            tokio::select! {
                r = &mut pong => break Some(r),
                // The PONG is already later than the threshold (stuck behind a throttled
                // link): degrade now rather than after the PONG or the timeout.
                _ = sleep_until(start + threshold), if !slow => {
                    slow = true;
                    lock(&shared.health).degrade();
                    shared.set_degraded(true);
                }
                _ = sleep_until(start + ping_timeout) => break None,
            }
        };
        match outcome {
            None => {
                shared
                    .counters
                    .ping_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(shard = shared.id, "upstream h2 PING timed out; closing");
                shared.close.notify_one();
                shared.set_closed();
                return;
            }
            // The connection is gone; the driver marks the shard closed.
            Some(Err(_)) => return,
            Some(Ok(_)) => {
                let rtt = start.elapsed();
                let stalled = shared.stalled(h.stall_timeout);
                let degraded = lock(&shared.health).on_pong(rtt, threshold, stalled);
                shared.set_degraded(degraded);
                if !degraded && !slow {
                    if let Some(lane) = lane.upgrade() {
                        lane.healthy_pong();
                    }
                }
            }
        }
    }
}

/// One stream slot on a shard; frees the slot when dropped (end of response, error, or the
/// caller dropping the response). Holds the connection open while its stream is.
pub(crate) struct StreamLease {
    shard: Arc<Shard>,
    /// How the connection was opened, if this is its first stream.
    pub(crate) opened: Option<ConnectPhases>,
}

impl StreamLease {
    /// A handle to open the stream with.
    pub(crate) fn send_request(&self) -> SendRequest<Bytes> {
        self.shard.send.clone()
    }

    pub(crate) fn shard(&self) -> &ShardShared {
        &self.shard.shared
    }

    /// Learns from a stream error (see [`ShardShared::observe`]).
    pub(crate) fn observe(&self, e: &h2::Error) {
        self.shard.shared.observe(e);
    }
}

impl Drop for StreamLease {
    fn drop(&mut self) {
        let s = &self.shard.shared;
        let was = s.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(lane) = s.lane_shared.upgrade() {
            if was == 1 && s.state() == ShardState::Draining {
                // The last stream of a draining shard ended: close it now.
                lane.prune_and_check_age(None);
            }
            lane.wake_head();
        }
    }
}
