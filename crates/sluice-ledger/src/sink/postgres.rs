//! The PostgreSQL sink: several gateway instances writing one ledger.
//!
//! Batches go in with binary `COPY ... FROM STDIN`, one statement per batch (the fastest way
//! into PostgreSQL short of a bulk loader, and one round trip per batch).
//!
//! NOTE: the pool is a few lines here rather than `deadpool-postgres` or `bb8`. We need a fixed
//! cap, "is this connection closed" before reuse, a connection never reused after a failed or
//! abandoned statement, and — the part the pool crates do not do — a backoff shared by every
//! caller, so that while the server is down a batch is dropped at once instead of each batch
//! waiting out a connect timeout (which would back the queue up into the request path's
//! `try_send`). That is ~80 lines with one semaphore; a pool crate would add a dependency and
//! still need the backoff around it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{pin_mut, SinkExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_postgres::{Client, NoTls};

use super::schema::{self, TABLE};
use super::SinkError;
use crate::config::PostgresConfig;
use crate::query::{UsageQuery, UsageRow};
use crate::record::RequestRecord;

/// First wait after a failed connection attempt; doubles per failure up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between connection attempts: how late writing resumes, at worst, after
/// the server is back.
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// The PostgreSQL sink. Cloning shares the pool.
#[derive(Clone)]
pub struct PostgresSink {
    pool: Arc<Pool>,
}

impl std::fmt::Debug for PostgresSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connection string holds a password: never printed.
        f.debug_struct("PostgresSink")
            .field("pool_size", &self.pool.size)
            .finish_non_exhaustive()
    }
}

struct Pool {
    config: tokio_postgres::Config,
    size: usize,
    connect_timeout: Duration,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Client>>,
    backoff: Mutex<Backoff>,
    migrated: AtomicBool,
}

#[derive(Default)]
struct Backoff {
    /// No connection attempt before this.
    until: Option<Instant>,
    /// The next wait.
    delay: Duration,
}

/// A connection taken from the pool; back into it on drop only if [`Conn::ok`] was called
/// (a statement that failed or was abandoned half-way leaves a connection in an unknown state).
struct Conn {
    client: Option<Client>,
    pool: Arc<Pool>,
    reusable: bool,
    _permit: OwnedSemaphorePermit,
}

impl Conn {
    fn ok(&mut self) {
        self.reusable = true;
    }
}

impl std::ops::Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().expect("present until drop")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            if self.reusable && !c.is_closed() {
                self.pool
                    .idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(c);
            }
        }
    }
}

impl Pool {
    /// A connection: an idle one that is still open, else a new one, unless the server failed
    /// recently (then at once [`SinkError::Unavailable`]).
    async fn get(self: &Arc<Self>) -> Result<Conn, SinkError> {
        let permit =
            tokio::time::timeout(self.connect_timeout, self.permits.clone().acquire_owned())
                .await
                .map_err(|_| SinkError::Timeout(self.connect_timeout))?
                .map_err(|_| SinkError::Task("the pool is closed".into()))?;
        let reuse = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            idle.retain(|c| !c.is_closed());
            idle.pop()
        };
        if let Some(client) = reuse {
            return Ok(Conn {
                client: Some(client),
                pool: self.clone(),
                reusable: false,
                _permit: permit,
            });
        }
        let now = Instant::now();
        if let Some(until) = self.backoff().until.filter(|u| *u > now) {
            return Err(SinkError::Unavailable {
                retry_in: until - now,
            });
        }
        match self.connect().await {
            Ok(client) => {
                *self.backoff() = Backoff::default();
                let conn = Conn {
                    client: Some(client),
                    pool: self.clone(),
                    reusable: false,
                    _permit: permit,
                };
                if !self.migrated.load(Ordering::Acquire) {
                    migrate(&conn).await?;
                    self.migrated.store(true, Ordering::Release);
                }
                Ok(conn)
            }
            Err(e) => {
                let mut b = self.backoff();
                b.delay = (b.delay * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
                b.until = Some(Instant::now() + b.delay);
                Err(e)
            }
        }
    }

    fn backoff(&self) -> std::sync::MutexGuard<'_, Backoff> {
        self.backoff.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn connect(&self) -> Result<Client, SinkError> {
        let (client, connection) =
            tokio::time::timeout(self.connect_timeout, self.config.connect(NoTls))
                .await
                .map_err(|_| SinkError::Timeout(self.connect_timeout))??;
        // The connection task ends when the client is dropped (or the server goes away): it is
        // owned by the pooled client.
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "ledger: PostgreSQL connection ended");
            }
        });
        Ok(client)
    }
}

/// Creates or migrates the schema, under an advisory lock so that instances starting together
/// do not race.
async fn migrate(client: &Client) -> Result<(), SinkError> {
    client
        .batch_execute(&format!(
            "BEGIN;
             SELECT pg_advisory_xact_lock(7415269001);
             CREATE TABLE IF NOT EXISTS sluice_ledger_schema (version BIGINT NOT NULL);
             {create}
             {added}
             INSERT INTO sluice_ledger_schema (version)
                 SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM sluice_ledger_schema);
             COMMIT;",
            create = schema::CREATE_V1,
            added = schema::pg_add_columns()
        ))
        .await?;
    let version: i64 = client
        .query_one("SELECT MAX(version) FROM sluice_ledger_schema", &[])
        .await?
        .get(0);
    if version > schema::VERSION {
        return Err(SinkError::SchemaTooNew {
            found: version,
            known: schema::VERSION,
        });
    }
    Ok(())
}

impl PostgresSink {
    /// A sink for `config`; connects lazily (see [`PostgresSink::ensure_schema`]).
    ///
    /// # Errors
    /// The connection string does not parse (validation reports this first).
    pub fn new(config: &PostgresConfig) -> Result<Self, SinkError> {
        let mut pg: tokio_postgres::Config = config.url.parse()?;
        pg.connect_timeout(config.connect_timeout);
        pg.application_name("sluice-ledger");
        Ok(PostgresSink {
            pool: Arc::new(Pool {
                config: pg,
                size: config.pool_size,
                connect_timeout: config.connect_timeout,
                permits: Arc::new(Semaphore::new(config.pool_size)),
                idle: Mutex::new(Vec::new()),
                backoff: Mutex::new(Backoff::default()),
                migrated: AtomicBool::new(false),
            }),
        })
    }

    /// Connects and creates or migrates the schema now (it is otherwise done on the first
    /// connection).
    ///
    /// # Errors
    /// The server is unreachable, refuses, or holds a newer schema.
    pub async fn ensure_schema(&self) -> Result<(), SinkError> {
        // A new connection migrates before it is handed out; an idle one exists only after
        // a migration succeeded.
        let mut conn = self.pool.get().await?;
        conn.ok();
        Ok(())
    }

    /// Writes `batch` with one binary COPY. A pooled connection found dead (the server
    /// restarted since it was opened) is replaced once within the call.
    ///
    /// # Errors
    /// The batch is not stored: the server is down (or in backoff), refused, or failed.
    pub async fn write(&self, batch: &[RequestRecord]) -> Result<(), SinkError> {
        let mut last = None;
        for _ in 0..2 {
            let mut conn = self.pool.get().await?;
            match copy_in(&conn, batch).await {
                Ok(()) => {
                    conn.ok();
                    return Ok(());
                }
                // A connection that died under us is worth one retry on a fresh one; an error
                // the server gave on a live connection is not.
                Err(e) if conn.is_closed() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(SinkError::Task("unreachable".into())))
    }

    /// Answers `query` on a pooled connection.
    ///
    /// # Errors
    /// The server is down or failed.
    pub async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageRow>, SinkError> {
        let mut conn = self.pool.get().await?;
        let sql = query.sql("$1", "$2", super::schema::TABLE);
        let rows = conn.query(&sql, &[&query.from_us, &query.to_us]).await?;
        conn.ok();
        let mut out = rows
            .iter()
            .map(|r| {
                Ok(UsageRow {
                    bucket_start_us: r.try_get(0)?,
                    group: r.try_get(1)?,
                    requests: r.try_get(2)?,
                    input: r.try_get(3)?,
                    output: r.try_get(4)?,
                    cache_read: r.try_get(5)?,
                    cache_write: r.try_get(6)?,
                    reasoning: r.try_get(7)?,
                    cost_micros: r.try_get(8)?,
                    unpriced: r.try_get(9)?,
                    cache_hits: r.try_get(10)?,
                    saved_micros: r.try_get(11)?,
                })
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
        crate::query::sort_rows(&mut out);
        Ok(out)
    }
}

async fn copy_in(client: &Client, batch: &[RequestRecord]) -> Result<(), SinkError> {
    let sink = client
        .copy_in::<_, bytes::Bytes>(&format!(
            "COPY {TABLE} ({}) FROM STDIN (FORMAT binary)",
            schema::column_list()
        ))
        .await?;
    pin_mut!(sink);
    sink.send(super::pg_copy::encode(batch).freeze()).await?;
    sink.finish().await?;
    Ok(())
}
