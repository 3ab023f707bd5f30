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
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    Some((
        Fingerprint {
            modified: meta.modified().ok(),
            len: meta.len(),
            hash: h.finish(),
        },
        text,
    ))
}

/// Polls the reloader's config file every `every` until `stop`, and reloads it when it has
/// changed and then stayed the same for one more poll: a file caught half-written is not
/// loaded (and if a writer pauses longer than that, the half file fails validation and the
/// running config stays until the file is whole).
///
/// # Cancel safety
/// Stops at `stop`; a reload under way when the task is dropped is not applied or fully is.
pub(crate) async fn watch_file(reloader: Arc<Reloader>, every: Duration, stop: CancellationToken) {
    let Some(path) = reloader.source().map(|s| s.path.clone()) else {
        return;
    };
    let mut loaded = fingerprint(&path).await.map(|(f, _)| f);
    let mut last_seen = loaded;
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
        if loaded == Some(now) || !settled {
            continue;
        }
        loaded = Some(now);
        // Refusals are logged and counted by the reloader; the watch carries on either way.
        let _ = reloader.apply_text(text).await;
    }
}
