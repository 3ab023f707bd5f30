//! Where records go: embedded SQLite (the default), PostgreSQL, OTLP logs, or nowhere.
//!
//! A concrete enum rather than a trait: the set is closed, and each sink has its own way to be
//! opened and queried. Both databases share one table layout (`schema.rs`) and one usage query
//! (`crate::query`), so `/admin/usage` answers the same way whichever is configured.

use std::path::Path;
use std::time::Duration;

use crate::config::SinkConfig;
use crate::query::{UsageQuery, UsageRow};
use crate::record::RequestRecord;

mod json_row;
pub mod otlp;
mod pg_copy;
pub mod postgres;
pub(crate) mod schema;
pub mod sqlite;

pub use otlp::{OtlpSink, PostLogs};
pub use postgres::PostgresSink;
pub use sqlite::{RetentionReport, SqliteSink};

/// A sink, opened.
#[derive(Clone, Debug)]
pub enum Sink {
    /// Embedded SQLite.
    Sqlite(SqliteSink),
    /// PostgreSQL.
    Postgres(PostgresSink),
    /// OTLP logs.
    Otlp(OtlpSink),
    /// Records are dropped (and counted as written nowhere: see [`crate::LedgerStats`]).
    None,
}

impl Sink {
    /// Opens the configured sink: creates the SQLite file (and its directory) or connects to
    /// PostgreSQL, and creates or migrates the schema.
    ///
    /// `config_dir` anchors a relative SQLite path; `otlp` is how log records reach the
    /// collector (the gateway's OTLP exporter), needed only for `kind = "otlp"`.
    ///
    /// PostgreSQL being down is not an error here: the sink starts disconnected, records are
    /// dropped (and counted) until it connects, and the schema is created on the first
    /// connection. A schema newer than this build, or a SQLite file that cannot be opened, is.
    ///
    /// # Errors
    /// [`SinkError`] saying what could not be opened and why.
    pub async fn open(
        config: &SinkConfig,
        config_dir: &Path,
        otlp: Option<PostLogs>,
    ) -> Result<Sink, SinkError> {
        Ok(match config {
            SinkConfig::Sqlite(c) => Sink::Sqlite(
                SqliteSink::open(&c.resolve(config_dir), c.retention_days, c.max_bytes).await?,
            ),
            SinkConfig::Postgres(c) => {
                let sink = PostgresSink::new(c)?;
                if let Err(e) = sink.ensure_schema().await {
                    if matches!(e, SinkError::SchemaTooNew { .. }) {
                        return Err(e);
                    }
                    tracing::warn!(
                        error = %e,
                        "ledger: PostgreSQL is not reachable at start; records are dropped \
                         (and counted) until it is"
                    );
                }
                Sink::Postgres(sink)
            }
            SinkConfig::Otlp => Sink::Otlp(OtlpSink::new(
                otlp.ok_or(SinkError::NoOtlpExporter)?,
                "sluice",
            )),
            SinkConfig::None => Sink::None,
        })
    }

    /// The sink's name, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Sink::Sqlite(_) => "sqlite",
            Sink::Postgres(_) => "postgres",
            Sink::Otlp(_) => "otlp",
            Sink::None => "none",
        }
    }

    /// Writes one batch, all or nothing.
    ///
    /// # Errors
    /// The batch was not stored; the caller counts its records as dropped.
    pub async fn write(&self, batch: Vec<RequestRecord>) -> Result<(), SinkError> {
        match self {
            Sink::Sqlite(s) => s.write(batch).await,
            Sink::Postgres(s) => s.write(&batch).await,
            Sink::Otlp(s) => s.write(&batch).await,
            Sink::None => Ok(()),
        }
    }

    /// Answers a usage query with the sink's SQL.
    ///
    /// # Errors
    /// The database failed, or the sink keeps no records to query (`otlp`, `none`).
    pub async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageRow>, SinkError> {
        match self {
            Sink::Sqlite(s) => s.usage(query).await,
            Sink::Postgres(s) => s.usage(query).await,
            Sink::Otlp(_) => Err(SinkError::NoQueries("otlp")),
            Sink::None => Err(SinkError::NoQueries("none")),
        }
    }
}

/// Why a sink could not open, write or answer.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// SQLite failed.
    #[error("ledger SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The SQLite file's directory could not be created.
    #[error("ledger SQLite: cannot create the directory {dir}: {source}")]
    CreateDir {
        /// The directory.
        dir: String,
        /// Why.
        source: std::io::Error,
    },
    /// PostgreSQL failed (the message comes from the server or the driver; it never holds the
    /// connection string).
    #[error("ledger PostgreSQL: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// PostgreSQL did not answer in time.
    #[error("ledger PostgreSQL: no answer within {0:?}")]
    Timeout(Duration),
    /// PostgreSQL is down and the sink is waiting before it tries again: the batch was dropped
    /// without a connection attempt, so a dead database costs nothing per batch.
    #[error("ledger PostgreSQL is unreachable; next connection attempt in {retry_in:?}")]
    Unavailable {
        /// How long until the next attempt.
        retry_in: Duration,
    },
    /// The database holds a newer schema than this build knows.
    #[error(
        "ledger schema version {found} is newer than this Sluice knows ({known}); upgrade \
         Sluice or point the ledger at another database"
    )]
    SchemaTooNew {
        /// The database's version.
        found: i64,
        /// This build's.
        known: i64,
    },
    /// The OTLP collector refused or did not take the batch.
    #[error("ledger OTLP export failed: {0}")]
    Otlp(String),
    /// `kind = "otlp"` without an OTLP exporter (tracing is not configured).
    #[error(
        "ledger sink `otlp` needs the OTLP exporter configured for traces; configure one or \
         choose another sink"
    )]
    NoOtlpExporter,
    /// The sink keeps no records to query.
    #[error("the `{0}` ledger sink keeps no records to query; usage needs `sqlite` or `postgres`")]
    NoQueries(&'static str),
    /// A record could not be written as the JSON of its SQLite row.
    #[error("ledger SQLite: cannot encode a record: {0}")]
    Encode(String),
    /// A blocking SQLite task panicked or was cancelled.
    #[error("ledger SQLite task failed: {0}")]
    Task(String),
}

impl SinkError {
    /// A low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SinkError::Sqlite(_) | SinkError::CreateDir { .. } | SinkError::Encode(_) => "sqlite",
            SinkError::Postgres(_) => "postgres",
            SinkError::Timeout(_) => "timeout",
            SinkError::Unavailable { .. } => "unavailable",
            SinkError::SchemaTooNew { .. } => "schema_too_new",
            SinkError::Otlp(_) | SinkError::NoOtlpExporter => "otlp",
            SinkError::NoQueries(_) => "no_queries",
            SinkError::Task(_) => "task",
        }
    }
}
