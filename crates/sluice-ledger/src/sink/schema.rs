//! The table both databases keep, written once: SQLite reads these type names by affinity
//! (`BIGINT` → integer, `BOOLEAN` → numeric), PostgreSQL literally, so one DDL serves both and
//! the usage query reads the same columns from either.
//!
//! Times are integer microseconds since the Unix epoch (UTC), so hour and day buckets are
//! integer division in both databases, with no time-zone or timestamp-type differences.
//! Money is integer micro-dollars; `cost_micros` is NULL for an unpriced request, so a sum
//! never counts it as free.

/// This build's schema version (SQLite `user_version`, PostgreSQL `sluice_ledger_schema`).
pub(crate) const VERSION: i64 = 1;

/// The records' table.
pub(crate) const TABLE: &str = "sluice_requests";

/// Version 1.
pub(crate) const CREATE_V1: &str = "
CREATE TABLE IF NOT EXISTS sluice_requests (
    ts_us BIGINT NOT NULL,
    request_id TEXT NOT NULL,
    key_id TEXT,
    team TEXT,
    owner TEXT,
    route TEXT NOT NULL,
    client_api TEXT NOT NULL,
    requested_model TEXT,
    served_model TEXT,
    upstream TEXT,
    provider TEXT,
    attempts INTEGER NOT NULL,
    attempt_classes TEXT,
    status INTEGER NOT NULL,
    end_reason TEXT NOT NULL,
    stream BOOLEAN NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cache_read_tokens BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    cache_write_1h_tokens BIGINT NOT NULL,
    reasoning_tokens BIGINT NOT NULL,
    pricing SMALLINT NOT NULL,
    price_entry TEXT,
    cost_micros BIGINT,
    first_byte_us BIGINT,
    first_token_us BIGINT,
    total_us BIGINT NOT NULL,
    cache_hit BOOLEAN NOT NULL,
    idempotent_replay BOOLEAN NOT NULL,
    prompt TEXT,
    response TEXT,
    capture_truncated BOOLEAN
);
CREATE INDEX IF NOT EXISTS sluice_requests_ts ON sluice_requests (ts_us);
";

/// The columns in insert order (the order of the values the sinks bind).
pub(crate) const COLUMNS: [&str; 33] = [
    "ts_us",
    "request_id",
    "key_id",
    "team",
    "owner",
    "route",
    "client_api",
    "requested_model",
    "served_model",
    "upstream",
    "provider",
    "attempts",
    "attempt_classes",
    "status",
    "end_reason",
    "stream",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "reasoning_tokens",
    "pricing",
    "price_entry",
    "cost_micros",
    "first_byte_us",
    "first_token_us",
    "total_us",
    "cache_hit",
    "idempotent_replay",
    "prompt",
    "response",
    "capture_truncated",
];

/// `a, b, c` of [`COLUMNS`].
pub(crate) fn column_list() -> String {
    COLUMNS.join(", ")
}
