//! The embedded SQLite sink: a file next to the config, WAL, retention by age and size.
//!
//! SQLite calls block, so each batch runs on tokio's blocking pool with the one write
//! connection behind a mutex (only the writer task writes, so the mutex is never contended on
//! the write path; retention takes it too). Usage queries open their own read-only connection:
//! in WAL mode readers do not wait for the writer, nor it for them.
//!
//! NOTE: `synchronous = NORMAL` in WAL mode: a committed batch survives a crash of Sluice, and
//! the last batches before a power loss may not. We accept this for a usage ledger because the
//! alternative (`FULL`, an fsync per batch) costs the write path throughput for a guarantee the
//! in-memory queue in front of it does not give anyway.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags};
use tokio::time::Instant;

use super::schema::{self, TABLE};
use super::SinkError;
use crate::query::{UsageQuery, UsageRow};
use crate::record::{sat_i64, RequestRecord};

/// How often retention runs, at most (it runs after a write).
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// The SQLite sink. Cloning shares the connection.
#[derive(Clone)]
pub struct SqliteSink {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    conn: Mutex<Connection>,
    retention_days: u32,
    max_bytes: u64,
    last_retention: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for SqliteSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSink")
            .field("path", &self.inner.path)
            .field("retention_days", &self.inner.retention_days)
            .field("max_bytes", &self.inner.max_bytes)
            .finish()
    }
}

/// What a retention pass deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Records older than `retention_days`.
    pub by_age: u64,
    /// The oldest records, deleted to bring the file under `max_bytes`.
    pub by_size: u64,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SinkError> + Send + 'static,
) -> Result<T, SinkError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SinkError::Task(e.to_string()))?
}

impl SqliteSink {
    /// Opens (creating if needed) the database at `path` and its directory, in WAL mode, and
    /// creates or migrates the schema.
    ///
    /// # Errors
    /// The directory or file cannot be created or opened, or holds a newer schema.
    pub async fn open(path: &Path, retention_days: u32, max_bytes: u64) -> Result<Self, SinkError> {
        let path = path.to_path_buf();
        let p = path.clone();
        let conn = blocking(move || {
            if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|source| SinkError::CreateDir {
                    dir: dir.display().to_string(),
                    source,
                })?;
            }
            let conn = Connection::open(&p)?;
            conn.busy_timeout(Duration::from_secs(5))?;
            // auto_vacuum must be chosen before the first table exists; on an existing file it
            // is a no-op, which is why retention checks the freelist rather than assuming.
            conn.execute_batch(
                "PRAGMA auto_vacuum = INCREMENTAL;
                 PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = NORMAL;",
            )?;
            migrate(&conn)?;
            Ok(conn)
        })
        .await?;
        Ok(SqliteSink {
            inner: Arc::new(Inner {
                path,
                conn: Mutex::new(conn),
                retention_days,
                max_bytes,
                last_retention: Mutex::new(None),
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Inserts `batch` in one transaction with one prepared statement; then, at most once a
    /// minute, applies retention.
    ///
    /// # Errors
    /// SQLite refused the batch (nothing of it is stored).
    pub async fn write(&self, batch: Vec<RequestRecord>) -> Result<(), SinkError> {
        let due = {
            let mut last = self
                .inner
                .last_retention
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let due = last.is_none_or(|t| now.duration_since(t) >= RETENTION_EVERY);
            if due {
                *last = Some(now);
            }
            due
        };
        let inner = self.inner.clone();
        blocking(move || {
            let mut conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            insert(&mut conn, &batch)?;
            if due {
                let report = retention(
                    &conn,
                    inner.retention_days,
                    inner.max_bytes,
                    crate::now_us(),
                )?;
                if report != RetentionReport::default() {
                    tracing::info!(
                        by_age = report.by_age,
                        by_size = report.by_size,
                        "ledger: retention deleted old records"
                    );
                }
            }
            Ok(())
        })
        .await
    }

    /// Applies retention now, as if `now_us` were the time: deletes records older than
    /// `retention_days`, then the oldest records until the data fit in `max_bytes`, and gives
    /// the freed pages back to the file system.
    ///
    /// # Errors
    /// SQLite failed.
    pub async fn enforce_retention(&self, now_us: i64) -> Result<RetentionReport, SinkError> {
        let inner = self.inner.clone();
        blocking(move || {
            let conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            retention(&conn, inner.retention_days, inner.max_bytes, now_us)
        })
        .await
    }

    /// Answers `query` on a read-only connection of its own.
    ///
    /// # Errors
    /// SQLite failed.
    pub async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageRow>, SinkError> {
        let path = self.inner.path.clone();
        let query = query.clone();
        blocking(move || {
            let conn = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(Duration::from_secs(5))?;
            let sql = query.sql("?1", "?2");
            let mut stmt = conn.prepare(&sql)?;
            let rows = stmt.query_map(params![query.from_us, query.to_us], |r| {
                Ok(UsageRow {
                    bucket_start_us: r.get(0)?,
                    group: r.get(1)?,
                    requests: r.get(2)?,
                    input: r.get(3)?,
                    output: r.get(4)?,
                    cache_read: r.get(5)?,
                    cache_write: r.get(6)?,
                    reasoning: r.get(7)?,
                    cost_micros: r.get(8)?,
                    unpriced: r.get(9)?,
                    cache_hits: r.get(10)?,
                    saved_micros: r.get(11)?,
                })
            })?;
            let mut out = rows.collect::<Result<Vec<_>, _>>()?;
            crate::query::sort_rows(&mut out);
            Ok(out)
        })
        .await
    }
}

fn migrate(conn: &Connection) -> Result<(), SinkError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > schema::VERSION {
        return Err(SinkError::SchemaTooNew {
            found: version,
            known: schema::VERSION,
        });
    }
    if version < 1 {
        conn.execute_batch(&format!(
            "BEGIN; {} PRAGMA user_version = 1; COMMIT;",
            schema::CREATE_V1
        ))?;
    }
    Ok(())
}

fn insert(conn: &mut Connection, batch: &[RequestRecord]) -> Result<(), SinkError> {
    let sql = format!(
        "INSERT INTO {TABLE} ({}) VALUES ({})",
        schema::column_list(),
        (1..=schema::COLUMNS.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare(&sql)?;
        for r in batch {
            let t = &r.tokens;
            let classes = r.attempt_classes_joined();
            let capture = r.capture.as_deref();
            stmt.execute(params![
                r.ts_us,
                &*r.request_id,
                r.key_id.as_deref(),
                r.team.as_deref(),
                r.owner.as_deref(),
                &*r.route,
                r.client_api,
                r.requested_model.as_deref(),
                r.served_model.as_deref(),
                r.upstream.as_deref(),
                r.provider.as_deref(),
                r.attempts,
                classes,
                r.status,
                r.end_reason,
                r.stream,
                sat_i64(t.input),
                sat_i64(t.output),
                sat_i64(t.cache_read),
                sat_i64(t.cache_write),
                sat_i64(t.cache_write_1h),
                sat_i64(t.reasoning),
                r.pricing.code(),
                r.pricing.entry(),
                r.pricing.cost_micros(),
                r.latency.first_byte_us.map(sat_i64),
                r.latency.first_token_us.map(sat_i64),
                sat_i64(r.latency.total_us),
                r.cache_hit,
                r.idempotent_replay,
                capture.map(|c| c.prompt.as_str()),
                capture.map(|c| c.response.as_str()),
                capture.map(|c| c.prompt_truncated || c.response_truncated),
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Bytes the records take: the database's pages less the free ones.
fn used_bytes(conn: &Connection) -> Result<u64, SinkError> {
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    Ok(u64::try_from((pages - free) * size).unwrap_or(0))
}

fn retention(
    conn: &Connection,
    retention_days: u32,
    max_bytes: u64,
    now_us: i64,
) -> Result<RetentionReport, SinkError> {
    let mut report = RetentionReport::default();
    if retention_days > 0 {
        let cutoff = now_us - i64::from(retention_days) * 86_400 * 1_000_000;
        report.by_age =
            conn.execute(&format!("DELETE FROM {TABLE} WHERE ts_us < ?1"), [cutoff])? as u64;
    }
    // Deleting by size removes the oldest rows in proportion to the excess (plus 5%, as rows
    // differ in size), re-measuring after each step; bounded at 10 steps a pass (the next pass
    // continues).
    for _ in 0..10 {
        let used = used_bytes(conn)?;
        if used <= max_bytes {
            break;
        }
        let rows: i64 =
            conn.query_row(&format!("SELECT COUNT(*) FROM {TABLE}"), [], |r| r.get(0))?;
        if rows == 0 {
            break;
        }
        let excess = (used - max_bytes) as f64 / used as f64;
        let step = ((rows as f64 * excess * 1.05).ceil() as i64).clamp(1, rows);
        report.by_size += conn.execute(
            &format!(
                "DELETE FROM {TABLE} WHERE rowid IN \
                 (SELECT rowid FROM {TABLE} ORDER BY ts_us LIMIT ?1)"
            ),
            [step],
        )? as u64;
    }
    if report != RetentionReport::default() {
        // Freed pages go back to the file system, and the WAL is folded in and truncated, so
        // the files on disk shrink, not just the live data.
        // Each step of incremental_vacuum frees one page: step it to the end.
        let mut stmt = conn.prepare("PRAGMA incremental_vacuum")?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
        drop(rows);
        drop(stmt);
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    }
    Ok(report)
}
