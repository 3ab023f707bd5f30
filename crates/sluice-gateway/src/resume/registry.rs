//! The process's resumable streams: found by id for a reconnect, capped in number and in the
//! bytes their logs may hold, and remembered for a while after they expire (so a late
//! reconnect gets 410 rather than 404).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use sluice_config::ResumableConfig;
use tokio::time::Instant;

use super::{Stream, StreamId};

/// The resumable streams of this process (kept across reloads).
pub(crate) struct Registry {
    streams: Mutex<HashMap<StreamId, Arc<Stream>>>,
    gone: Mutex<Gone>,
    /// Bytes reserved by the streams in `streams` (each its `max_bytes`).
    reserved: AtomicU64,
    max_streams: AtomicUsize,
    max_bytes: AtomicU64,
    /// With `[state]` in Redis: the logs mirrored there, for reconnects to other instances.
    logs: Mutex<Option<sluice_state::StreamLogs>>,
}

/// Expired streams, newest last, at most as many as `max_streams`.
#[derive(Default)]
struct Gone {
    order: VecDeque<StreamId>,
    owners: HashMap<StreamId, (Option<Box<str>>, Instant)>,
}

/// What a reconnect's id names.
pub(crate) enum Lookup {
    Found(Arc<Stream>),
    /// It was this key's, and its log has expired.
    Gone,
    /// Not one this key may read (never made, another key's, or long forgotten).
    NotFound,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (streams, reserved) = self.usage();
        f.debug_struct("Registry")
            .field("streams", &streams)
            .field("reserved", &reserved)
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            streams: Mutex::default(),
            gone: Mutex::default(),
            reserved: AtomicU64::new(0),
            max_streams: AtomicUsize::new(10_000),
            max_bytes: AtomicU64::new(1 << 30),
            logs: Mutex::default(),
        }
    }
}

impl Registry {
    /// The caps of `[server]` (`resumable_streams`, `resumable_log_bytes`).
    pub(crate) fn set_caps(&self, streams: usize, bytes: u64) {
        self.max_streams.store(streams, Ordering::Relaxed);
        self.max_bytes.store(bytes, Ordering::Relaxed);
    }

    /// The store's Redis, if it has one (set by every generation).
    pub(crate) fn set_logs(&self, logs: Option<sluice_state::StreamLogs>) {
        *self.logs.lock() = logs;
    }

    /// The logs in Redis, if any.
    pub(crate) fn logs(&self) -> Option<sluice_state::StreamLogs> {
        self.logs.lock().clone()
    }

    /// A new resumable stream, or `None` when the caps leave no room for it.
    pub(crate) fn admit(
        &self,
        owner: Option<&str>,
        cfg: ResumableConfig,
        background: bool,
    ) -> Option<Arc<Stream>> {
        let want = cfg.max_bytes as u64;
        let mut streams = self.streams.lock();
        if streams.len() >= self.max_streams.load(Ordering::Relaxed) {
            return None;
        }
        let reserved = self.reserved.load(Ordering::Relaxed);
        if reserved + want > self.max_bytes.load(Ordering::Relaxed) {
            return None;
        }
        self.reserved.store(reserved + want, Ordering::Relaxed);
        let id = super::new_stream_id();
        let s = Arc::new(Stream::new(
            id,
            owner.map(Into::into),
            cfg.keep,
            cfg.max_bytes,
            background,
        ));
        streams.insert(id, s.clone());
        drop(streams);
        if let Some(logs) = self.logs() {
            s.set_mirror(super::mirror::start(logs, &s));
        }
        Some(s)
    }

    /// The stream `id` if `owner` may read it.
    pub(crate) fn lookup(&self, id: &StreamId, owner: Option<&str>) -> Lookup {
        if let Some(s) = self.streams.lock().get(id) {
            if s.owner.as_deref() == owner {
                return Lookup::Found(s.clone());
            }
            return Lookup::NotFound;
        }
        match self.gone.lock().owners.get(id) {
            Some((o, _)) if o.as_deref() == owner => Lookup::Gone,
            _ => Lookup::NotFound,
        }
    }

    /// The stream's log has expired: its room is given back and its id remembered.
    pub(crate) fn remove(&self, s: &Stream) {
        if self.streams.lock().remove(&s.id).is_none() {
            return;
        }
        self.reserved
            .fetch_sub(s.max_bytes as u64, Ordering::Relaxed);
        let mut gone = self.gone.lock();
        let now = Instant::now();
        // Forget the oldest past the cap, and any remembered longer than its own `keep`.
        let cap = self.max_streams.load(Ordering::Relaxed).max(1);
        while gone.order.len() >= cap {
            if let Some(old) = gone.order.pop_front() {
                gone.owners.remove(&old);
            }
        }
        while let Some(old) = gone.order.front().copied() {
            match gone.owners.get(&old) {
                Some((_, until)) if *until > now => break,
                _ => {
                    gone.order.pop_front();
                    gone.owners.remove(&old);
                }
            }
        }
        gone.order.push_back(s.id);
        gone.owners.insert(s.id, (s.owner.clone(), now + s.keep));
    }

    /// Removes `s` after its `keep` (a background response that never had a pump).
    pub(crate) fn remove_later(self: &Arc<Self>, s: Arc<Stream>) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(s.keep).await;
            this.remove(&s);
        });
    }

    /// Streams held now and the bytes they reserve.
    pub(crate) fn usage(&self) -> (usize, u64) {
        (
            self.streams.lock().len(),
            self.reserved.load(Ordering::Relaxed),
        )
    }

    /// The stream of a background response (its id is `resp_` and the stream's).
    pub(crate) fn response(&self, response_id: &str) -> Option<StreamId> {
        let hex = response_id.strip_prefix("resp_")?.as_bytes();
        let id: StreamId = hex.try_into().ok()?;
        id.iter().all(u8::is_ascii_hexdigit).then_some(id)
    }
}
