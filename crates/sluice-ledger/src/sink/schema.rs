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

/// This build's SQLite schema version (`user_version`): 2 and 3 keep the columns of version 1
/// as the view `sluice_requests` over compact rows (below).
pub(crate) const SQLITE_VERSION: i64 = 3;

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
/// an older build made (or an older build still writing to it) reads them as NULL. Each is
/// added when missing: PostgreSQL by `ADD COLUMN IF NOT EXISTS`, SQLite by re-creating its view
/// (the records' arrays simply end earlier).
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

/// SQLite's storage in version 2: one row per record holding `ts_us` and the other columns
/// as one JSON array, `rec`, in [`COLUMNS`] order. Only read when migrating.
pub(crate) const SQLITE_RECORDS_V2: &str = "sluice_records";

/// SQLite's storage since version 3: one row holds up to [`RECORDS_PER_ROW`] records as a JSON
/// array of arrays, `recs`, each record's values in [`COLUMNS`] order (`ts_us` first); the
/// view `sluice_requests` gives them back one per record, as named columns (what anyone with
/// `sqlite3` reads; the usage API reads [`sqlite_usage_source`]).
///
/// Why not a plain table: SQLite's cost per row grows with the number of bound values and
/// with each index, and a row has a fixed cost of its own (the statement's run, the B-tree's
/// cell and page bookkeeping): callgrind (`bench/ledger_insert.sh`) measured 33 bound values
/// and the `ts_us` index at ~16.5 K instructions a record, one JSON row a record at ~8 K, and
/// rows of 32 records at ~3.6 K (docs/BENCHMARKS.md, the ledger's fourth pass), all on the
/// gateway's CPU. Instead of an index on `ts_us`, the writer gives each row a rowid that is at
/// least the latest `ts_us` among its records and increasing (`seq` in the view, shared by a
/// row's records), so a query's lower time bound is also a rowid bound: a range scan from
/// `from`, not a full scan.
pub(crate) const SQLITE_ROWS: &str = "sluice_rows";

/// Records a row holds at most (a batch is cut into rows of this many).
pub(crate) const RECORDS_PER_ROW: usize = 32;

/// The SQLite DDL of version 3: the table and the view (built from [`COLUMNS`]).
pub(crate) fn sqlite_create_v3() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {SQLITE_ROWS} (recs TEXT NOT NULL);
         {}",
        sqlite_view()
    )
}

/// The view over [`SQLITE_ROWS`]: a record's array shorter than [`COLUMNS`] (written before a
/// column was added) reads NULL in the missing ones.
fn sqlite_view() -> String {
    let fields = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, c)| format!("j.value ->> {i} AS {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "CREATE VIEW IF NOT EXISTS {TABLE} AS SELECT r.rowid AS seq, {fields} \
         FROM {SQLITE_ROWS} r, json_each(r.recs) j;"
    )
}

/// What the SQLite sink's usage query reads instead of the view: the same columns, from rows
/// whose rowid is at least `p_from` (a range scan: see [`SQLITE_ROWS`]).
///
/// Why not the view: there each column is `j.value ->> i`, and SQLite asks `json_each` for
/// `j.value` anew for every column, rendering the record's array as text and parsing it back
/// each time (~12 times a record for a usage query). Here the innermost subquery yields each
/// record once (`LIMIT -1 OFFSET 0` keeps SQLite from flattening it into the outer query, so
/// `v` is computed once a record), as JSONB, which the column reads index without parsing.
pub(crate) fn sqlite_usage_source(p_from: &str) -> String {
    let fields = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, c)| format!("v ->> {i} AS {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "(SELECT seq, {fields} FROM (SELECT r.rowid AS seq, jsonb(j.value) AS v \
         FROM {SQLITE_ROWS} r, json_each(r.recs) j WHERE r.rowid >= {p_from} LIMIT -1 OFFSET 0))"
    )
}

/// Moves version 1's rows (a plain `sluice_requests` table) into version 3's layout, one
/// record a row: rowids `ts_us + n` for the n-th row in time order are unique and at least
/// `ts_us`.
pub(crate) fn sqlite_migrate_v1_to_v3() -> String {
    let values = COLUMNS[..COLUMNS_V1].join(", ");
    format!(
        "ALTER TABLE {TABLE} RENAME TO sluice_requests_v1;
         {create}
         INSERT INTO {SQLITE_ROWS} (rowid, recs)
           SELECT ts_us + ROW_NUMBER() OVER (ORDER BY ts_us, rowid), json_array(json_array({values}))
           FROM sluice_requests_v1;
         DROP TABLE sluice_requests_v1;",
        create = sqlite_create_v3()
    )
}

/// Moves version 2's rows into version 3's layout, one record a row, keeping their rowids
/// (already at least their `ts_us` and increasing). A version-2 array written before a column
/// was added is shorter: `rec -> i` past its end is NULL.
pub(crate) fn sqlite_migrate_v2_to_v3() -> String {
    let values = (0..COLUMNS.len() - 1)
        .map(|i| format!("rec -> {i}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "DROP VIEW IF EXISTS {TABLE};
         {create}
         INSERT INTO {SQLITE_ROWS} (rowid, recs)
           SELECT rowid, json_array(json_array(ts_us, {values})) FROM {SQLITE_RECORDS_V2};
         DROP TABLE {SQLITE_RECORDS_V2};",
        create = sqlite_create_v3()
    )
}

/// `a, b, c` of [`COLUMNS`].
pub(crate) fn column_list() -> String {
    COLUMNS.join(", ")
}
