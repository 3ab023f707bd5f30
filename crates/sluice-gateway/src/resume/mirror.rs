//! A resumable stream's copy in Redis: one task per stream writes its entries in order, a
//! batch per call, so the pump never waits for Redis.

use sluice_state::{LogEntry, StreamLogs};
use tokio::sync::mpsc;

use super::Stream;

/// Entries waiting for Redis, at most; past it the copy is given up (see `Stream::mirror`).
const QUEUE: usize = 4096;
/// Tries of one batch (a slow or restarting Redis) before the copy is given up; a retry
/// leaves out what the last try wrote (a timeout is no proof that nothing landed).
const APPEND_TRIES: u32 = 5;
/// Entries written per call.
const BATCH: usize = 64;

/// Starts the writer of `s`'s copy; the sender goes to the stream.
pub(crate) fn start(logs: StreamLogs, s: &Stream) -> mpsc::Sender<LogEntry> {
    let (tx, mut rx) = mpsc::channel::<LogEntry>(QUEUE);
    let id = s.id_str().to_string();
    let owner = s.owner.as_deref().unwrap_or("").to_string();
    let keep = s.keep;
    tokio::spawn(async move {
        if let Err(e) = logs.open(&id, &owner, keep).await {
            tracing::warn!(stream = %id, error = %e, "could not copy a resumable stream to Redis");
            return;
        }
        let mut batch = Vec::with_capacity(BATCH);
        while rx.recv_many(&mut batch, BATCH).await > 0 {
            let ended = batch.iter().any(|e| matches!(e, LogEntry::End(_)));
            let mut entries = std::mem::take(&mut batch);
            let mut tries = 0;
            while let Err(e) = logs.append(&id, entries.clone(), keep).await {
                tries += 1;
                if tries == APPEND_TRIES {
                    tracing::warn!(stream = %id, error = %e, "could not copy a resumable stream to Redis");
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                // A call that timed out may have landed: what is there is not sent again.
                if let Ok(Some(last)) = logs.last_entry(&id).await {
                    entries.retain(|e| e.entry() > last);
                }
            }
            if ended {
                return;
            }
        }
    });
    tx
}
