//! The writer: a bounded queue between the request path and the sink.
//!
//! The request path calls [`LedgerHandle::record`], which is a `try_send` into a bounded
//! channel: it never waits, and a full queue drops the record and counts it. One background
//! task takes records out in batches (a batch is written when it is full or when
//! `flush_interval` has passed; the task looks every 10 ms) and writes each with a deadline
//! (`write_timeout`); a batch the
//! sink refuses or does not take in time is dropped and counted. Drops are logged at most once
//! per [`WARN_EVERY`], with the running counts, so a dead sink neither slows requests nor
//! floods the log (DESIGN.md invariants 1, 11, 13).
//!
//! Every record handed to `record` ends in exactly one counter: `written`, `dropped_full`,
//! `dropped_sink`, `dropped_closed` (recorded after shutdown began) or, when the grace runs
//! out, `lost_at_shutdown`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::LedgerConfig;
use crate::record::{now_us, Pricing, RequestRecord};
use crate::sink::Sink;

/// Drop warnings are logged at most this often.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// The ledger's counters, as plain atomics for the telemetry crate to export.
#[derive(Debug, Default)]
pub struct LedgerStats {
    /// Records taken into the queue.
    pub accepted: AtomicU64,
    /// Records the sink stored.
    pub written: AtomicU64,
    /// Records dropped because the queue was full.
    pub dropped_full: AtomicU64,
    /// Records dropped because the sink failed, refused or timed out.
    pub dropped_sink: AtomicU64,
    /// Records handed in after shutdown began.
    pub dropped_closed: AtomicU64,
    /// Records still queued when the shutdown grace ran out.
    pub lost_at_shutdown: AtomicU64,
    /// Batches the sink failed.
    pub failed_batches: AtomicU64,
    /// Records handed to `record()` that used tokens no price applied to (they are queued
    /// like any other, without a cost).
    pub unpriced: AtomicU64,
    last_warn_us: AtomicI64,
}

/// A copy of [`LedgerStats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// See [`LedgerStats::accepted`].
    pub accepted: u64,
    /// See [`LedgerStats::written`].
    pub written: u64,
    /// See [`LedgerStats::dropped_full`].
    pub dropped_full: u64,
    /// See [`LedgerStats::dropped_sink`].
    pub dropped_sink: u64,
    /// See [`LedgerStats::dropped_closed`].
    pub dropped_closed: u64,
    /// See [`LedgerStats::lost_at_shutdown`].
    pub lost_at_shutdown: u64,
    /// See [`LedgerStats::failed_batches`].
    pub failed_batches: u64,
    /// See [`LedgerStats::unpriced`].
    pub unpriced: u64,
    /// Records waiting in the queue now.
    pub queued: u64,
}

impl LedgerStats {
    fn snapshot(&self, queued: usize) -> StatsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            accepted: get(&self.accepted),
            written: get(&self.written),
            dropped_full: get(&self.dropped_full),
            dropped_sink: get(&self.dropped_sink),
            dropped_closed: get(&self.dropped_closed),
            lost_at_shutdown: get(&self.lost_at_shutdown),
            failed_batches: get(&self.failed_batches),
            unpriced: get(&self.unpriced),
            queued: queued as u64,
        }
    }

    /// True at most once per [`WARN_EVERY`] across all callers.
    fn may_warn(&self) -> bool {
        let now = now_us();
        let last = self.last_warn_us.load(Ordering::Relaxed);
        now - last >= WARN_EVERY.as_micros() as i64
            && self
                .last_warn_us
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    fn warn_drops(&self, why: &str, sink: &str) {
        if self.may_warn() {
            let s = self.snapshot(0);
            tracing::warn!(
                sink,
                reason = why,
                dropped_full = s.dropped_full,
                dropped_sink = s.dropped_sink,
                written = s.written,
                "ledger: dropping request records (requests are not affected)"
            );
        }
    }
}

/// What shutdown managed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// The queue was emptied within the grace.
    pub flushed: bool,
    /// The counters at the end (`lost_at_shutdown` says what the grace could not save).
    pub stats: StatsSnapshot,
}

/// The request path's side of the ledger: cheap to clone, never waits.
#[derive(Clone, Debug)]
pub struct LedgerHandle {
    tx: mpsc::Sender<RequestRecord>,
    stats: Arc<LedgerStats>,
    sink: &'static str,
}

impl LedgerHandle {
    /// Hands a record to the writer. Never waits: when the queue is full the record is
    /// dropped and counted (`dropped_full`), and a warning is logged at most every 10 s.
    pub fn record(&self, record: RequestRecord) {
        if matches!(record.pricing, Pricing::Unpriced) {
            self.stats.unpriced.fetch_add(1, Ordering::Relaxed);
        }
        match self.tx.try_send(record) {
            Ok(()) => {
                self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.stats.dropped_full.fetch_add(1, Ordering::Relaxed);
                self.stats.warn_drops("the queue is full", self.sink);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.stats.dropped_closed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The counters now.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats
            .snapshot(self.tx.max_capacity() - self.tx.capacity())
    }

    /// The counters themselves, for an exporter that reads them on scrape.
    pub fn stats_ref(&self) -> &Arc<LedgerStats> {
        &self.stats
    }
}

/// The ledger: the queue and its writer task. Dropping it asks the writer to write what is
/// queued and stop (without waiting); [`Ledger::shutdown`] waits, within a grace.
#[derive(Debug)]
pub struct Ledger {
    handle: LedgerHandle,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Ledger {
    /// Starts the writer for `sink` with `config`'s queue capacity, batch size, flush interval
    /// and write timeout. Must be called inside a tokio runtime.
    pub fn start(config: &LedgerConfig, sink: Sink) -> Ledger {
        let (tx, rx) = mpsc::channel(config.queue_capacity.max(1));
        let stats = Arc::new(LedgerStats::default());
        let (stop_tx, stop_rx) = oneshot::channel();
        let kind = sink.kind();
        let writer = Writer {
            rx,
            sink,
            stats: stats.clone(),
            batch: config.batch_size.max(1),
            flush_interval: config.flush_interval,
            write_timeout: config.write_timeout,
        };
        let task = tokio::spawn(writer.run(stop_rx));
        Ledger {
            handle: LedgerHandle {
                tx,
                stats,
                sink: kind,
            },
            stop: Some(stop_tx),
            task: Some(task),
        }
    }

    /// A handle for the request path.
    pub fn handle(&self) -> LedgerHandle {
        self.handle.clone()
    }

    /// Same as [`LedgerHandle::record`].
    pub fn record(&self, record: RequestRecord) {
        self.handle.record(record);
    }

    /// The counters now.
    pub fn stats(&self) -> StatsSnapshot {
        self.handle.stats()
    }

    /// Stops taking records (later ones count as `dropped_closed`), writes what is queued,
    /// and waits for that at most `grace`. What is still unwritten then is counted as
    /// `lost_at_shutdown` and said in a warning.
    ///
    /// NOTE: a SQLite batch already handed to the blocking pool when the grace ends may still
    /// land after it; it is counted lost, so the count errs high, never low.
    pub async fn shutdown(mut self, grace: Duration) -> ShutdownReport {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let mut flushed = true;
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(grace, &mut task).await.is_err() {
                flushed = false;
                task.abort();
                let _ = task.await;
            }
        }
        let stats = &self.handle.stats;
        let s = stats.snapshot(0);
        let lost = s.accepted.saturating_sub(s.written + s.dropped_sink);
        if lost > 0 {
            stats.lost_at_shutdown.store(lost, Ordering::Relaxed);
            tracing::warn!(
                lost,
                grace = ?grace,
                "ledger: request records not written within the shutdown grace"
            );
        }
        ShutdownReport {
            flushed,
            stats: stats.snapshot(0),
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        // The writer drains what is queued and exits on its own.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct Writer {
    rx: mpsc::Receiver<RequestRecord>,
    sink: Sink,
    stats: Arc<LedgerStats>,
    batch: usize,
    flush_interval: Duration,
    write_timeout: Duration,
}

/// How often the writer looks at the queue, at most (the flush interval when shorter).
const DRAIN_EVERY: Duration = Duration::from_millis(10);

impl Writer {
    /// Takes records out every [`DRAIN_EVERY`], writes full batches at once and a partial one
    /// when `flush_interval` has passed since the last write; on stop, closes the queue and
    /// writes everything in it.
    ///
    /// NOTE: the writer polls on a timer rather than awaiting each record. Awaiting would park
    /// it between records, and each `try_send` would then wake it: a futex wake-up on the
    /// request path for every request (benches/record.rs, build + price + `record()`:
    /// 1.14 µs that way, 0.67 µs polling). We accept up to 10 ms more latency before a record
    /// is written; the
    /// queue (65,536 by default) holds 10 ms of 6.5 M records/s.
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let mut buf: Vec<RequestRecord> = Vec::with_capacity(self.batch);
        let every = self.flush_interval.min(DRAIN_EVERY);
        let mut last_write = Instant::now();
        let mut stopping = false;
        loop {
            tokio::select! {
                biased;
                // A dropped sender stops the writer too.
                _ = &mut stop, if !stopping => {
                    stopping = true;
                    self.rx.close();
                }
                _ = tokio::time::sleep(every), if !stopping => {}
            }
            let mut closed = false;
            loop {
                match self.rx.try_recv() {
                    Ok(r) => {
                        buf.push(r);
                        if buf.len() >= self.batch {
                            self.flush(&mut buf).await;
                            last_write = Instant::now();
                        }
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            if closed || stopping {
                // After `close()` the loop above ran until the queue was empty.
                if !buf.is_empty() {
                    self.flush(&mut buf).await;
                }
                return;
            }
            if !buf.is_empty() && last_write.elapsed() >= self.flush_interval {
                self.flush(&mut buf).await;
                last_write = Instant::now();
            }
        }
    }

    async fn flush(&self, buf: &mut Vec<RequestRecord>) {
        let n = buf.len() as u64;
        let batch = std::mem::replace(buf, Vec::with_capacity(self.batch));
        let outcome = tokio::time::timeout(self.write_timeout, self.sink.write(batch)).await;
        let why = match outcome {
            Ok(Ok(())) => {
                self.stats.written.fetch_add(n, Ordering::Relaxed);
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!(
                "the sink did not take a batch within {:?}",
                self.write_timeout
            ),
        };
        self.stats.dropped_sink.fetch_add(n, Ordering::Relaxed);
        self.stats.failed_batches.fetch_add(1, Ordering::Relaxed);
        self.stats.warn_drops(&why, self.sink.kind());
    }
}
