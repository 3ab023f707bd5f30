//! The wall clock, where a protocol needs it (`created` fields, HTTP dates). Durations and
//! deadlines use tokio's `Instant`.

/// Seconds since the Unix epoch (for `created` fields and HTTP-date `Retry-After`).
pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
