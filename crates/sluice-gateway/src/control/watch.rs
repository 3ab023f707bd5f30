//! `sluice serve --watch`: the config file polled (modification time, length and a hash of the
//! content), and reloaded once a change has settled.
//!
//! NOTE: polling rather than inotify/kqueue: one small read a second costs nothing, needs no
//! new dependency, and sees every way a file gets replaced (in place, by rename, through a
//! Kubernetes ConfigMap's symlink swap), which event APIs each report differently.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::Reloader;

/// What identifies one version of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint {
    modified: Option<SystemTime>,
    len: u64,
    hash: u64,
}

fn content_hash(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

async fn fingerprint(path: &std::path::Path) -> Option<(Fingerprint, String)> {
    let p = path.to_path_buf();
    // A blocking read of a small file, off the runtime's threads.
    let (meta, text) = tokio::task::spawn_blocking(move || {
        Some((
            std::fs::metadata(&p).ok()?,
            std::fs::read_to_string(&p).ok()?,
        ))
    })
    .await
    .ok()??;
    Some((
        Fingerprint {
            modified: meta.modified().ok(),
            len: meta.len(),
            hash: content_hash(&text),
        },
        text,
    ))
}

/// Polls the reloader's config file every `every` until `stop`, and reloads it when its
/// content differs from what runs and it has stayed the same for one more poll: a file caught
/// half-written is not loaded (and if a writer pauses longer than that, the half file fails
/// validation and the running config stays until the file is whole). What runs is the text
/// the gateway started from when the source has it (an edit made while it started is then
/// seen), else the file as the watch first finds it; a file only touched is not reloaded.
///
/// # Cancel safety
/// Stops at `stop`; a reload under way when the task is dropped is not applied or fully is.
pub(crate) async fn watch_file(reloader: Arc<Reloader>, every: Duration, stop: CancellationToken) {
    let Some(source) = reloader.source() else {
        return;
    };
    let path = source.path.clone();
    let mut running = match &source.text {
        Some(text) => Some(content_hash(text)),
        None => fingerprint(&path).await.map(|(f, _)| f.hash),
    };
    let mut last_seen = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let Some((now, text)) = fingerprint(&path).await else {
            // Gone for a moment (a replace by rename) or unreadable: the next poll sees.
            tracing::debug!(config = %path.display(), "config file unreadable; watching on");
            continue;
        };
        let settled = last_seen == Some(now);
        last_seen = Some(now);
        if running == Some(now.hash) || !settled {
            continue;
        }
        running = Some(now.hash);
        // Refusals are logged and counted by the reloader; the watch carries on either way.
        let _ = reloader.apply_text(text).await;
    }
}
