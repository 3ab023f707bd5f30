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

use super::json_row::JsonRow;
use super::schema::{self, SQLITE_ROWS as RECORDS};
use super::SinkError;
use crate::query::{UsageQuery, UsageRow};
use crate::record::RequestRecord;

/// How often retention runs, at most (it runs after a write).
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// The SQLite sink. Cloning shares the connection.
#[derive(Clone)]
pub struct SqliteSink {
    inner: Arc<Inner>,
}

/// The write connection and what the writer carries from batch to batch.
struct Writer {
    db: Connection,
    /// The last rowid given (see [`schema::SQLITE_ROWS`]).
    last_seq: i64,
    /// The JSON of one row, reused.
    json: JsonRow,
}

struct Inner {
    path: PathBuf,
    conn: Mutex<Writer>,
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
            let last_seq = last_seq(&conn)?;
            Ok(Writer {
                db: conn,
                last_seq,
                json: JsonRow::default(),
            })
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
            let mut w = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            let Writer { db, last_seq, json } = &mut *w;
            insert(db, last_seq, json, &batch)?;
            if due {
                let report = retention(db, inner.retention_days, inner.max_bytes, crate::now_us())?;
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
            let w = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            retention(&w.db, inner.retention_days, inner.max_bytes, now_us)
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
            let sql = query.sql("?1", "?2", &schema::sqlite_usage_source("?1"));
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
    if version > schema::SQLITE_VERSION {
        return Err(SinkError::SchemaTooNew {
            found: version,
            known: schema::SQLITE_VERSION,
        });
    }
    let step = match version {
        0 => schema::sqlite_create_v3(),
        1 => schema::sqlite_migrate_v1_to_v3(),
        2 => schema::sqlite_migrate_v2_to_v3(),
        _ => String::new(),
    };
    if !step.is_empty() {
        conn.execute_batch(&format!(
            "BEGIN; {step} PRAGMA user_version = {}; COMMIT;",
            schema::SQLITE_VERSION
        ))?;
    }
    // A view made by an older build lacks the columns added since: made again.
    let present: i64 = conn.query_row(
        &format!(
            "SELECT COUNT(*) FROM pragma_table_info('{}') WHERE name = ?1",
            schema::TABLE
        ),
        [schema::ADDED[schema::ADDED.len() - 1].0],
        |r| r.get(0),
    )?;
    if present == 0 {
        conn.execute_batch(&format!(
            "BEGIN; {} COMMIT;",
            schema::sqlite_recreate_view()
        ))?;
    }
    Ok(())
}

/// The highest rowid stored (0 for none): where the writer's sequence goes on from.
fn last_seq(conn: &Connection) -> Result<i64, SinkError> {
    Ok(conn.query_row(
        &format!(
            "SELECT COALESCE(MAX(rowid), 0) FROM {}",
            schema::SQLITE_ROWS
        ),
        [],
        |r| r.get(0),
    )?)
}

/// Inserts `batch` in one transaction, [`schema::RECORDS_PER_ROW`] records a row; each row's
/// rowid is the next of `last_seq` and at least the latest `ts_us` of its records (see
/// [`schema::SQLITE_ROWS`]).
fn insert(
    conn: &mut Connection,
    last_seq: &mut i64,
    json: &mut JsonRow,
    batch: &[RequestRecord],
) -> Result<(), SinkError> {
    let tx = conn.transaction()?;
    let mut seq = *last_seq;
    {
        let mut stmt = tx.prepare_cached(&format!(
            "INSERT INTO {} (rowid, recs) VALUES (?1, ?2)",
            schema::SQLITE_ROWS
        ))?;
        for row in batch.chunks(schema::RECORDS_PER_ROW) {
            let latest = row.iter().map(|r| r.ts_us).max().unwrap_or(0);
            seq = (seq + 1).max(latest);
            stmt.raw_bind_parameter(1, seq)?;
            stmt.raw_bind_parameter(2, json.records(row))?;
            stmt.raw_execute()?;
        }
    }
    tx.commit()?;
    *last_seq = seq;
    Ok(())
}

/// Bytes the records take: the database's pages less the free ones.
fn used_bytes(conn: &Connection) -> Result<u64, SinkError> {
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    Ok(u64::try_from((pages - free) * size).unwrap_or(0))
}

/// Runs the `DELETE` statement `sql` (one parameter) and returns how many records the rows it
/// deleted held.
fn delete_counting(conn: &Connection, sql: &str, param: i64) -> Result<u64, SinkError> {
    let mut stmt = conn.prepare(&format!("{sql} RETURNING json_array_length(recs)"))?;
    let mut rows = stmt.query([param])?;
    let mut records = 0u64;
    while let Some(r) = rows.next()? {
        records += u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0);
    }
    Ok(records)
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
        // rowid >= ts_us, so this deletes only records older than the cutoff, by a range on
        // the rowid; one that ended long after it began (a rowid past the cutoff) goes on a
        // later pass, at most its own duration late.
        report.by_age = delete_counting(
            conn,
            &format!("DELETE FROM {RECORDS} WHERE rowid < ?1"),
            cutoff,
        )?;
    }
    // Deleting by size removes the oldest rows in proportion to the excess (plus 5%, as rows
    // differ in size), re-measuring after each step; bounded at 10 steps a pass (the next pass
    // continues).
    for _ in 0..10 {
        let used = used_bytes(conn)?;
        if used <= max_bytes {
            break;
        }
        // Rows, not records: a row holds several (see `schema::SQLITE_ROWS`).
        let rows: i64 =
            conn.query_row(&format!("SELECT COUNT(*) FROM {RECORDS}"), [], |r| r.get(0))?;
        if rows == 0 {
            break;
        }
        let excess = (used - max_bytes) as f64 / used as f64;
        let step = ((rows as f64 * excess * 1.05).ceil() as i64).clamp(1, rows);
        report.by_size += delete_counting(
            conn,
            &format!(
                "DELETE FROM {RECORDS} WHERE rowid IN \
                 (SELECT rowid FROM {RECORDS} ORDER BY rowid LIMIT ?1)"
            ),
            step,
        )?;
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
