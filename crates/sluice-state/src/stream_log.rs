//! Resumable streams' logs in Redis Streams, so a reconnect that lands on another instance is
//! served too. The instance running a generation appends its events (entry id `0-{n+1}` for
//! event `n`, so a reader asks for the entries after `0-{n+1}`) and an end marker; any instance
//! reads them. Keys expire `keep` after the last write.
//!
//! NOTE: readers poll with `XRANGE` (every [`POLL`]) rather than `XREAD BLOCK`: a blocking
//! read would hold the multiplexed connection that the limit checks share.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::redis_backend::RedisBackend;
use crate::{StateError, Store};

/// How often a reader asks for new entries while none came.
pub const POLL: Duration = Duration::from_millis(20);
/// The deadline of each call: off the request path (the limit checks' own is far shorter),
/// and an event late is better than one lost.
const DEADLINE: Duration = Duration::from_millis(500);
/// Entries read per call.
const BATCH: usize = 256;

/// An `XRANGE` entry as Redis sends it: its id and its field-value pairs.
type RawEntry = (String, Vec<(String, Vec<u8>)>);

/// One entry of a stream's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEntry {
    /// Event `n` (its bytes as sent, `id:` line included).
    Event(u64, Bytes),
    /// The generation ended after this many events; no event follows.
    End(u64),
}

/// The logs of resumable streams in the store's Redis.
#[derive(Clone)]
pub struct StreamLogs {
    shared: Arc<RedisBackend>,
    /// Held so the store's background task runs as long as the logs are used.
    _store: Store,
}

impl std::fmt::Debug for StreamLogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamLogs").finish_non_exhaustive()
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

impl LogEntry {
    /// Its entry number in Redis (`0-{n}`).
    pub fn entry(&self) -> u64 {
        match self {
            LogEntry::Event(n, _) | LogEntry::End(n) => n + 1,
        }
    }
}

impl StreamLogs {
    /// The logs in `store`'s Redis; `None` for a store in memory.
    pub fn new(store: &Store) -> Option<StreamLogs> {
        Some(StreamLogs {
            shared: store.shared_backend()?,
            _store: store.clone(),
        })
    }

    /// Records the stream's owner (`""`: a route without keys), kept for `keep`.
    pub async fn open(&self, id: &str, owner: &str, keep: Duration) -> Result<(), StateError> {
        let (_, owner_key) = self.shared.keys().resumable(id);
        let owner = owner.to_string();
        self.shared
            .call_for(DEADLINE, |mut conn| async move {
                redis::cmd("SET")
                    .arg(&owner_key)
                    .arg(owner)
                    .arg("PX")
                    .arg(millis(keep))
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
    }

    /// Appends entries (in order) and pushes the keys' expiry to `keep` from now.
    pub async fn append(
        &self,
        id: &str,
        entries: Vec<LogEntry>,
        keep: Duration,
    ) -> Result<(), StateError> {
        let (events, owner) = self.shared.keys().resumable(id);
        let mut pipe = redis::pipe();
        for e in entries {
            match e {
                LogEntry::Event(n, b) => {
                    pipe.cmd("XADD")
                        .arg(&events)
                        .arg(format!("0-{}", n + 1))
                        .arg("e")
                        .arg(b.as_ref())
                        .ignore();
                }
                LogEntry::End(count) => {
                    pipe.cmd("XADD")
                        .arg(&events)
                        .arg(format!("0-{}", count + 1))
                        .arg("end")
                        .arg(1)
                        .ignore();
                }
            }
        }
        pipe.cmd("PEXPIRE").arg(&events).arg(millis(keep)).ignore();
        pipe.cmd("PEXPIRE").arg(&owner).arg(millis(keep)).ignore();
        self.shared
            .call_for(DEADLINE, |mut conn| async move {
                pipe.query_async::<()>(&mut conn).await
            })
            .await
    }

    /// The number of the log's last entry in Redis (event `n` is entry `n + 1`, the end
    /// marker after `c` events is `c + 1`), `None` for an empty log: what a retried append
    /// skips.
    pub async fn last_entry(&self, id: &str) -> Result<Option<u64>, StateError> {
        let (events, _) = self.shared.keys().resumable(id);
        let raw: Vec<RawEntry> = self
            .shared
            .call_for(DEADLINE, |mut conn| async move {
                redis::cmd("XREVRANGE")
                    .arg(&events)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Ok(raw
            .first()
            .and_then(|(e, _)| e.strip_prefix("0-")?.parse().ok()))
    }

    /// The stream's owner, `None` when Redis has no such stream (never made, or expired).
    pub async fn owner(&self, id: &str) -> Result<Option<String>, StateError> {
        let (_, owner_key) = self.shared.keys().resumable(id);
        self.shared
            .call_for(DEADLINE, |mut conn| async move {
                redis::cmd("GET")
                    .arg(&owner_key)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            })
            .await
    }

    /// The entries after event `after` (`None`: from the first), at most a batch.
    pub async fn read(&self, id: &str, after: Option<u64>) -> Result<Vec<LogEntry>, StateError> {
        let (events, _) = self.shared.keys().resumable(id);
        // Entry `0-{n+1}` is event n: after event `a`, from entry `0-{a+2}`.
        let start = format!("0-{}", after.map_or(1, |a| a + 2));
        let raw: Vec<RawEntry> = self
            .shared
            .call_for(DEADLINE, |mut conn| async move {
                redis::cmd("XRANGE")
                    .arg(&events)
                    .arg(start)
                    .arg("+")
                    .arg("COUNT")
                    .arg(BATCH)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        let mut out = Vec::with_capacity(raw.len());
        for (entry_id, fields) in raw {
            let n = entry_id
                .strip_prefix("0-")
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(1)
                .saturating_sub(1);
            match fields.into_iter().next() {
                Some((f, v)) if f == "e" => out.push(LogEntry::Event(n, Bytes::from(v))),
                _ => out.push(LogEntry::End(n)),
            }
        }
        Ok(out)
    }
}
