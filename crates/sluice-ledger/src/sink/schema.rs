//! The table both databases keep, written once: SQLite reads these type names by affinity
//! (`BIGINT` → integer, `BOOLEAN` → numeric), PostgreSQL literally, so one DDL serves both and
//! the usage query reads the same columns from either.
//!
//! Times are integer microseconds since the Unix epoch (UTC), so hour and day buckets are
//! integer division in both databases, with no time-zone or timestamp-type differences.
//! Money is integer micro-dollars; `cost_micros` is NULL for an unpriced request, so a sum
//! never counts it as free.

/// This build's PostgreSQL schema version (`sluice_ledger_schema`).
pub(crate) const VERSION: i64 = 1;

/// This build's SQLite schema version (`user_version`): 2 keeps the columns of version 1 as the
/// view `sluice_requests` over compact rows (below).
pub(crate) const SQLITE_VERSION: i64 = 2;

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
pub(crate) const COLUMNS: [&str; 34] = [
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
    "guardrails",
];

/// Version 1's columns (a v1 SQLite table has these only).
const COLUMNS_V1: usize = 33;

/// Columns added since version 1 without a version of their own: nullable, so a file or table
/// an older build made (or an older build still writing to it) reads them as NULL, and an older
/// build opens what a newer one made. Each is added when missing: PostgreSQL by `ADD COLUMN IF
/// NOT EXISTS`, SQLite by re-creating its view (the rows' arrays simply end earlier).
pub(crate) const ADDED: [(&str, &str); 1] = [("guardrails", "TEXT")];

/// PostgreSQL: the columns of [`ADDED`] a table made by an older build lacks.
pub(crate) fn pg_add_columns() -> String {
    ADDED
        .iter()
        .map(|(c, ty)| format!("ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS {c} {ty};\n"))
        .collect()
}

/// SQLite: the view again, with every column of this build.
pub(crate) fn sqlite_recreate_view() -> String {
    format!("DROP VIEW IF EXISTS {TABLE}; {}", sqlite_view())
}

/// SQLite's storage: one row per record holding `ts_us` and the other 32 columns as one JSON
/// array, `rec`, in [`COLUMNS`] order; the view `sluice_requests` gives them back as the columns
/// of version 1 (what the usage queries, and anyone with `sqlite3`, read).
///
/// Why not a plain table: SQLite's cost per record grows with the number of bound values and
/// with each index (callgrind, `bench/ledger_insert.sh`: 33 bound values and the `ts_us` index
/// were ~16.5 K instructions a record, on the gateway's CPU); three values and no index are
/// ~6 K with the JSON written. Instead of an index on `ts_us`, the writer gives each row a
/// rowid that is at least its `ts_us` and increasing (`seq` in the view), so a query's lower
/// time bound is also a rowid bound: a range scan from `from`, not a full scan.
pub(crate) const SQLITE_RECORDS: &str = "sluice_records";

/// The SQLite DDL of version 2: the table and the view (built from [`COLUMNS`]).
pub(crate) fn sqlite_create_v2() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {SQLITE_RECORDS} (ts_us INTEGER NOT NULL, rec TEXT NOT NULL);
         {}",
        sqlite_view()
    )
}

/// The view over [`SQLITE_RECORDS`]: a row's array shorter than [`COLUMNS`] (written before a
/// column was added) reads NULL in the missing ones.
fn sqlite_view() -> String {
    let fields = COLUMNS[1..]
        .iter()
        .enumerate()
        .map(|(i, c)| format!("rec ->> {i} AS {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "CREATE VIEW IF NOT EXISTS {TABLE} AS SELECT rowid AS seq, ts_us, {fields} \
         FROM {SQLITE_RECORDS};"
    )
}

/// Moves version 1's rows (a plain `sluice_requests` table) into version 2's layout: rowids
/// `ts_us + n` for the n-th row in time order are unique and at least `ts_us`.
pub(crate) fn sqlite_migrate_v1_to_v2() -> String {
    let values = COLUMNS[1..COLUMNS_V1].join(", ");
    format!(
        "ALTER TABLE {TABLE} RENAME TO sluice_requests_v1;
         {create}
         INSERT INTO {SQLITE_RECORDS} (rowid, ts_us, rec)
           SELECT ts_us + ROW_NUMBER() OVER (ORDER BY ts_us, rowid), ts_us, json_array({values})
           FROM sluice_requests_v1;
         DROP TABLE sluice_requests_v1;",
        create = sqlite_create_v2()
    )
}

/// `a, b, c` of [`COLUMNS`].
pub(crate) fn column_list() -> String {
    COLUMNS.join(", ")
}
