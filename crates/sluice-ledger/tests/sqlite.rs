//! The embedded SQLite sink, through the real writer queue, on a file in a temp dir: records
//! land whole, `/admin/usage` answers what the records add up to (and what a direct SQL sum
//! says), WAL and the schema version are set, retention deletes by age and by size, and the
//! queue's accounting holds when the sink stalls.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use sluice_ledger::query::{render_csv, render_json, totals};
use sluice_ledger::sink::{OtlpSink, SqliteSink};
use sluice_ledger::{
    now_us, Capture, Catalog, Ledger, Pricing, RequestRecord, Sink, SinkConfig, SinkError,
    SqliteConfig,
};
use support::{
    all_queries, assert_rows_eq, direct_sum_sql, expected_rows, record, test_config, totals_array,
};
use tokio::time::Instant;

const DAY: i64 = 86_400_000_000;

/// Midnight UTC three days ago: records must be recent, or the sink's own retention pass
/// (30 days by default, run on the first write) would rightly delete them.
fn base() -> i64 {
    now_us() / DAY * DAY - 3 * DAY
}

fn direct_sum(path: &Path, from: i64, to: i64) -> [i64; 8] {
    let conn = Connection::open(path).unwrap();
    conn.query_row(&direct_sum_sql(from, to), [], |r| {
        Ok([
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
        ])
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_land_whole_and_usage_adds_up() {
    let base = base();
    let dir = tempfile::tempdir().unwrap();
    let config = SinkConfig::Sqlite(SqliteConfig {
        path: "ledger/sub/l.db".into(),
        ..SqliteConfig::default()
    });
    // A relative path is taken from the config's directory; missing directories are made.
    let sink = Sink::open(&config, dir.path(), None).await.unwrap();
    let path = dir.path().join("ledger/sub/l.db");
    assert!(path.is_file());
    let catalog = Catalog::shipped();
    // Three days, one record a minute, across hour and day boundaries.
    let records: Vec<RequestRecord> = (0..4_320u64)
        .map(|i| record(&catalog, i, base + i as i64 * 60_000_000))
        .collect();
    let ledger = Ledger::start(&test_config(), sink.clone());
    for r in &records {
        ledger.record(r.clone());
    }
    let report = ledger.shutdown(Duration::from_secs(20)).await;
    assert!(report.flushed, "{report:?}");
    assert_eq!(report.stats.written, 4_320, "{report:?}");
    assert_eq!(report.stats.dropped_full + report.stats.dropped_sink, 0);
    assert_eq!(
        report.stats.unpriced,
        records
            .iter()
            .filter(|r| r.pricing == Pricing::Unpriced)
            .count() as u64
    );

    // Every grouping and bucketing answers what the records add up to, computed apart from
    // any SQL, and its totals equal a direct SQL sum; a sub-range too.
    for (from, to) in [
        (base, base + 3 * DAY),
        (base + DAY / 3, base + DAY + 7_200_000_000),
    ] {
        for q in all_queries(from, to) {
            let rows = sink.usage(&q).await.unwrap();
            assert_rows_eq(&rows, &expected_rows(&records, &q), &q);
            assert_eq!(
                totals_array(&totals(&rows)),
                direct_sum(&path, from, to),
                "{q:?}"
            );
        }
    }
    // Unpriced records are counted and their cost is NULL, not 0.
    let conn = Connection::open(&path).unwrap();
    let (unpriced, null_costs): (i64, i64) = conn
        .query_row(
            "SELECT SUM(pricing = 1), SUM(pricing = 1 AND cost_micros IS NULL) FROM sluice_requests",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(unpriced > 0);
    assert_eq!(unpriced, null_costs);

    // One record read back field by field.
    let r = &records[3];
    type Row = (
        String,
        Option<String>,
        String,
        i64,
        Option<String>,
        Option<i64>,
        i64,
        bool,
    );
    let row: Row = conn
        .query_row(
            "SELECT request_id, key_id, route, attempts, attempt_classes, first_byte_us, \
             input_tokens, stream FROM sluice_requests WHERE request_id = 'req-3'",
            [],
            |x| {
                Ok((
                    x.get(0)?,
                    x.get(1)?,
                    x.get(2)?,
                    x.get(3)?,
                    x.get(4)?,
                    x.get(5)?,
                    x.get(6)?,
                    x.get(7)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(
        row,
        (
            "req-3".to_string(),
            Some("k3".to_string()),
            "chat".to_string(),
            2,
            Some("connect".to_string()),
            Some(20_003),
            r.tokens.input as i64,
            false
        )
    );
    let (entry, cost): (Option<String>, Option<i64>) = conn
        .query_row(
            "SELECT price_entry, cost_micros FROM sluice_requests WHERE request_id = 'req-2'",
            [],
            |x| Ok((x.get(0)?, x.get(1)?)),
        )
        .unwrap();
    assert_eq!(entry.as_deref(), records[2].pricing.entry());
    assert_eq!(cost, records[2].pricing.cost_micros());
    assert_eq!(entry.as_deref(), Some("anthropic/claude-sonnet-4-5*"));

    // The renderings carry the SQL's numbers.
    let q = &all_queries(base, base + 3 * DAY)[8]; // model by none
    let rows = sink.usage(q).await.unwrap();
    let json: serde_json::Value = serde_json::from_str(&render_json(q, &rows)).unwrap();
    assert_eq!(json["totals"]["requests"], 4_320);
    assert_eq!(render_csv(&rows).lines().count(), rows.len() + 1);
}

#[tokio::test]
async fn the_file_is_wal_and_versioned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let sink = SqliteSink::open(&path, 30, 1 << 30).await.unwrap();
    sink.write(vec![record(&Catalog::shipped(), 1, base())])
        .await
        .unwrap();
    {
        let conn = Connection::open(&path).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 3);
    }
    drop(sink);
    // Reopening keeps the records; a newer schema is refused, saying so.
    let again = SqliteSink::open(&path, 30, 1 << 30).await.unwrap();
    let rows = again
        .usage(&all_queries(base(), base() + 1)[0])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    drop(again);
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 7")
        .unwrap();
    let e = SqliteSink::open(&path, 30, 1 << 30).await.unwrap_err();
    assert!(
        matches!(e, SinkError::SchemaTooNew { found: 7, known: 3 }),
        "{e}"
    );
    assert!(e.to_string().contains("upgrade Sluice"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_by_age_then_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let max_bytes = 1 << 20;
    let sink = SqliteSink::open(&path, 2, max_bytes).await.unwrap();
    let catalog = Catalog::shipped();
    // Retention is run below as if it were ten days from now; the records the sink's own
    // first pass (run with the real clock) sees are all recent.
    let real_now = now_us();
    let now = real_now + 10 * DAY;
    // 1,000 records older than two days by then, then 4,000 recent ones with 2 KB of captured
    // text each: ~8 MB, well over the 1 MiB cap.
    let old: Vec<_> = (0..1_000)
        .map(|i| record(&catalog, i, real_now - 3_600_000_000 + i as i64))
        .collect();
    sink.write(old).await.unwrap();
    let text = "lorem ipsum ".repeat(170);
    for chunk in 0..8 {
        let batch = (0..500)
            .map(|i| {
                let n = chunk * 500 + i;
                let mut r = record(&catalog, 10_000 + n, now - DAY + n as i64 * 1_000_000);
                r.capture = Some(Box::new(Capture::new(&text, "ok", 4096)));
                r
            })
            .collect();
        sink.write(batch).await.unwrap();
    }
    let file_before = std::fs::metadata(&path).unwrap().len() + wal_len(&path);
    assert!(file_before > 4 * max_bytes, "{file_before}");

    let report = sink.enforce_retention(now).await.unwrap();
    assert_eq!(report.by_age, 1_000);
    assert!(report.by_size > 0 && report.by_size < 4_000, "{report:?}");
    let conn = Connection::open(&path).unwrap();
    let (left, oldest): (i64, i64) = conn
        .query_row(
            "SELECT COUNT(*), MIN(ts_us) FROM sluice_requests",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(left as u64, 4_000 - report.by_size);
    // The oldest went first: what is left is the newest, in one run.
    assert_eq!(oldest, now - DAY + report.by_size as i64 * 1_000_000);
    // And the files on disk shrank to about the cap.
    let file_after = std::fs::metadata(&path).unwrap().len() + wal_len(&path);
    let pages: (i64, i64) = conn
        .query_row("SELECT (SELECT page_count FROM pragma_page_count), (SELECT freelist_count FROM pragma_freelist_count)", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    assert!(
        file_after <= max_bytes + max_bytes / 4,
        "{file_after} bytes on disk (wal {}), pages {pages:?}, {report:?}, {left} left",
        wal_len(&path)
    );
}

/// A version-2 file's DDL as it shipped (before the `guardrails` column): `sluice_records`
/// with one JSON array a record and a view reading the array's elements by position.
fn version_2_file(path: &Path) -> Connection {
    const COLUMNS: [&str; 32] = [
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
    let fields: Vec<String> = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, c)| format!("rec ->> {i} AS {c}"))
        .collect();
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE sluice_records (ts_us INTEGER NOT NULL, rec TEXT NOT NULL);
         CREATE VIEW sluice_requests AS SELECT rowid AS seq, ts_us, {} FROM sluice_records;
         PRAGMA user_version = 2;",
        fields.join(", ")
    ))
    .unwrap();
    conn
}

fn wal_len(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |m| m.len())
}

fn stalled_otlp() -> Sink {
    // A collector that never answers.
    Sink::Otlp(OtlpSink::new(
        Arc::new(|_body| Box::pin(std::future::pending())),
        "test",
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_sink_never_slows_record_and_every_record_is_counted() {
    let mut config = test_config();
    config.queue_capacity = 200;
    config.batch_size = 50;
    config.write_timeout = Duration::from_millis(100);
    let ledger = Ledger::start(&config, stalled_otlp());
    let catalog = Catalog::shipped();
    let r = record(&catalog, 1, base());
    let mut slowest = Duration::ZERO;
    let sent = 20_000u64;
    let started = Instant::now();
    for _ in 0..sent {
        let rec = r.clone();
        let t = Instant::now();
        ledger.record(rec);
        slowest = slowest.max(t.elapsed());
        if started.elapsed() < Duration::from_millis(300) {
            tokio::task::yield_now().await;
        }
    }
    // record() is a try_send: even with the sink hung it returns at once.
    assert!(
        slowest < Duration::from_millis(100),
        "slowest record() took {slowest:?}"
    );
    let s = ledger.stats();
    assert!(s.dropped_full > 0, "{s:?}");
    assert_eq!(s.accepted + s.dropped_full, sent, "{s:?}");
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(
        ledger.stats().dropped_sink > 0,
        "timed-out batches are counted: {:?}",
        ledger.stats()
    );
    let report = ledger.shutdown(Duration::from_millis(300)).await;
    let s = report.stats;
    assert_eq!(s.written, 0);
    assert_eq!(
        s.written + s.dropped_full + s.dropped_sink + s.lost_at_shutdown,
        sent,
        "every record is in exactly one counter: {s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_writes_what_is_queued_within_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let sink = Sink::Sqlite(SqliteSink::open(&path, 30, 1 << 30).await.unwrap());
    let mut config = test_config();
    // Nothing is flushed by time: only shutdown writes the partial batch.
    config.flush_interval = Duration::from_secs(60);
    config.batch_size = 1_000;
    let ledger = Ledger::start(&config, sink);
    let handle = ledger.handle();
    let catalog = Catalog::shipped();
    for i in 0..2_500 {
        handle.record(record(&catalog, i, base() + i as i64));
    }
    let report = ledger.shutdown(Duration::from_secs(10)).await;
    assert!(report.flushed);
    assert_eq!(report.stats.written, 2_500, "{report:?}");
    let n: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM sluice_requests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2_500);
    // After shutdown a record is refused and counted, never silently lost.
    handle.record(record(&catalog, 9, base()));
    assert_eq!(handle.stats().dropped_closed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_sink_at_shutdown_is_bounded_by_the_grace_and_counted() {
    let mut config = test_config();
    config.write_timeout = Duration::from_secs(30);
    let ledger = Ledger::start(&config, stalled_otlp());
    let catalog = Catalog::shipped();
    for i in 0..1_200 {
        ledger.record(record(&catalog, i, base()));
    }
    let started = Instant::now();
    let report = ledger.shutdown(Duration::from_millis(200)).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(!report.flushed);
    assert_eq!(report.stats.lost_at_shutdown, 1_200, "{report:?}");
}

#[tokio::test]
async fn the_none_sink_counts_records_as_written_nowhere() {
    let ledger = Ledger::start(&test_config(), Sink::None);
    ledger.record(record(&Catalog::shipped(), 1, base()));
    let report = ledger.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.stats.accepted, 1);
    assert_eq!(report.stats.written, 1);
    // And it cannot answer usage, saying why.
    let e = Sink::None.usage(&all_queries(0, 1)[0]).await.unwrap_err();
    assert!(e.to_string().contains("keeps no records"), "{e}");
}

/// A file written by a build with schema version 1 (a plain `sluice_requests` table with an
/// index on `ts_us`) is migrated on open: every row readable through the view as before, the
/// usage query sums them, and new records go on after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_file_is_migrated_with_its_rows() {
    const V1: &str = "
CREATE TABLE sluice_requests (
    ts_us BIGINT NOT NULL, request_id TEXT NOT NULL, key_id TEXT, team TEXT, owner TEXT,
    route TEXT NOT NULL, client_api TEXT NOT NULL, requested_model TEXT, served_model TEXT,
    upstream TEXT, provider TEXT, attempts INTEGER NOT NULL, attempt_classes TEXT,
    status INTEGER NOT NULL, end_reason TEXT NOT NULL, stream BOOLEAN NOT NULL,
    input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL,
    cache_read_tokens BIGINT NOT NULL, cache_write_tokens BIGINT NOT NULL,
    cache_write_1h_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
    pricing SMALLINT NOT NULL, price_entry TEXT, cost_micros BIGINT, first_byte_us BIGINT,
    first_token_us BIGINT, total_us BIGINT NOT NULL, cache_hit BOOLEAN NOT NULL,
    idempotent_replay BOOLEAN NOT NULL, prompt TEXT, response TEXT, capture_truncated BOOLEAN
);
CREATE INDEX sluice_requests_ts ON sluice_requests (ts_us);
PRAGMA user_version = 1;";
    let base = base();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(V1).unwrap();
        // Two rows in the same microsecond, one a priced stream, one unpriced.
        for (id, key, stream, cost) in [
            ("a", Some("k1"), true, Some(1_500)),
            ("b", None, false, None),
            ("c", Some("k1"), false, Some(700)),
        ] {
            let ts = if id == "c" { base + 5 } else { base };
            conn.execute(
                "INSERT INTO sluice_requests VALUES (?1, ?2, ?3, NULL, NULL, 'chat', \
                 'openai.chat', 'gpt-4o', 'gpt-4o', 'oai', 'openai', 1, NULL, 200, 'ok', ?4, \
                 100, 20, 0, 0, 0, 0, ?5, NULL, ?6, 1000, 2000, 3000, 0, 0, NULL, NULL, NULL)",
                rusqlite::params![
                    ts,
                    id,
                    key,
                    stream,
                    if cost.is_some() { 0 } else { 1 },
                    cost
                ],
            )
            .unwrap();
        }
    }
    let sink = SqliteSink::open(&path, 30, 1 << 30).await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 3);
    /// seq, ts_us, request_id, key_id, stream, cost_micros.
    type Row = (i64, i64, String, Option<String>, bool, Option<i64>);
    let rows: Vec<Row> = conn
        .prepare(
            "SELECT seq, ts_us, request_id, key_id, stream, cost_micros FROM sluice_requests \
             ORDER BY seq",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(rows[0].3.as_deref(), Some("k1"));
    assert!(rows[0].4 && !rows[1].4);
    assert_eq!(
        (rows[0].5, rows[1].5, rows[2].5),
        (Some(1_500), None, Some(700))
    );
    for r in &rows {
        assert!(r.0 >= r.1, "a row's seq is at least its time: {r:?}");
    }
    assert!(rows[0].0 < rows[1].0, "seqs are unique");
    // The old table is gone; the view and the usage query read the migrated rows.
    let tables: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'sluice_requests_v1'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0);
    let usage = sink.usage(&all_queries(base, base + DAY)[0]).await.unwrap();
    assert_eq!(usage.iter().map(|r| r.requests).sum::<i64>(), 3);
    assert_eq!(usage.iter().map(|r| r.cost_micros).sum::<i64>(), 2_200);
    // A new record, older in time than the migrated ones, still gets a later seq.
    let catalog = Catalog::shipped();
    sink.write(vec![record(&catalog, 9, base - 1)])
        .await
        .unwrap();
    let (seq, ts): (i64, i64) = conn
        .query_row(
            "SELECT seq, ts_us FROM sluice_requests WHERE request_id = 'req-9'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(seq > rows[2].0 && seq >= ts, "{seq} {ts}");
}

/// Every field of a record lands in its own column of the view: the JSON row is written in
/// the order the view reads it, so a value in the wrong place would show here.
#[tokio::test]
async fn every_field_reads_back_from_its_column() {
    use rusqlite::types::Value;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let sink = SqliteSink::open(&path, 30, 1 << 30).await.unwrap();
    let catalog = Catalog::shipped();
    let mut r = record(&catalog, 1, base() + 7);
    r.attempts = 3;
    r.attempt_classes = vec!["connect", "status_503"];
    r.status = 201;
    r.tokens.cache_write_1h = 17;
    r.tokens.reasoning = 19;
    r.idempotent_replay = true;
    r.capture = Some(Box::new(Capture::new("the prompt", "the answer", 4096)));
    r.guardrails = Some("no-secrets:redact:0.12ms,policy:allow:3.10ms".into());
    let t = r.tokens;
    let text = |s: &str| Value::Text(s.to_string());
    let int = |n: i64| Value::Integer(n);
    let opt = |s: Option<&str>| s.map_or(Value::Null, text);
    let expected: Vec<(&str, Value)> = vec![
        ("ts_us", int(r.ts_us)),
        ("request_id", text(&r.request_id)),
        ("key_id", opt(r.key_id.as_deref())),
        ("team", opt(r.team.as_deref())),
        ("owner", opt(r.owner.as_deref())),
        ("route", text(&r.route)),
        ("client_api", text(r.client_api)),
        ("requested_model", opt(r.requested_model.as_deref())),
        ("served_model", opt(r.served_model.as_deref())),
        ("upstream", opt(r.upstream.as_deref())),
        ("provider", opt(r.provider.as_deref())),
        ("attempts", int(3)),
        ("attempt_classes", text("connect,status_503")),
        ("status", int(201)),
        ("end_reason", text(r.end_reason)),
        ("stream", int(i64::from(r.stream))),
        ("input_tokens", int(t.input as i64)),
        ("output_tokens", int(t.output as i64)),
        ("cache_read_tokens", int(t.cache_read as i64)),
        ("cache_write_tokens", int(t.cache_write as i64)),
        ("cache_write_1h_tokens", int(17)),
        ("reasoning_tokens", int(19)),
        ("pricing", int(i64::from(r.pricing.code()))),
        ("price_entry", opt(r.pricing.entry())),
        (
            "cost_micros",
            r.pricing.cost_micros().map_or(Value::Null, int),
        ),
        (
            "first_byte_us",
            int(r.latency.first_byte_us.unwrap() as i64),
        ),
        (
            "first_token_us",
            int(r.latency.first_token_us.unwrap() as i64),
        ),
        ("total_us", int(r.latency.total_us as i64)),
        ("cache_hit", int(i64::from(r.cache_hit))),
        ("idempotent_replay", int(1)),
        ("prompt", text("the prompt")),
        ("response", text("the answer")),
        ("capture_truncated", int(0)),
        (
            "guardrails",
            text("no-secrets:redact:0.12ms,policy:allow:3.10ms"),
        ),
    ];
    sink.write(vec![r]).await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let columns: Vec<&str> = expected.iter().map(|(c, _)| *c).collect();
    let row: Vec<Value> = conn
        .query_row(
            &format!("SELECT {} FROM sluice_requests", columns.join(", ")),
            [],
            |x| (0..columns.len()).map(|i| x.get(i)).collect(),
        )
        .unwrap();
    for ((column, want), got) in expected.iter().zip(&row) {
        assert_eq!(got, want, "{column}");
    }
}

/// A version 2 file made before the `guardrails` column (its view has the 32 columns after
/// `ts_us`, its rows' arrays as many): opening it makes the view again, the old rows read
/// NULL there and go on counting, and a new record's verdicts read back.
#[tokio::test]
async fn a_file_from_before_the_guardrails_column_is_read_and_extended() {
    let base = base();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    {
        let conn = version_2_file(&path);
        conn.execute(
            "INSERT INTO sluice_records (rowid, ts_us, rec) VALUES (?1, ?1, ?2)",
            rusqlite::params![
                base,
                r#"["old",null,null,null,"chat","openai.chat","gpt-4o","gpt-4o","oai","openai",1,null,200,"ok",false,100,20,0,0,0,0,0,null,900,1000,2000,3000,false,false,null,null,null]"#
            ],
        )
        .unwrap();
    }
    let sink = SqliteSink::open(&path, 30, 1 << 30).await.unwrap();
    let catalog = Catalog::shipped();
    let mut r = record(&catalog, 1, base + 1);
    r.guardrails = Some("pii:redact:0.05ms".into());
    sink.write(vec![r]).await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let rows: Vec<(String, Option<String>, Option<i64>)> = conn
        .prepare("SELECT request_id, guardrails, cost_micros FROM sluice_requests ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!((rows[0].0.as_str(), rows[0].1.as_deref()), ("old", None));
    assert_eq!(
        rows[0].2,
        Some(900),
        "the old row's columns are where they were"
    );
    assert_eq!(rows[1].1.as_deref(), Some("pii:redact:0.05ms"));
    let usage = sink.usage(&all_queries(base, base + DAY)[0]).await.unwrap();
    assert_eq!(usage.iter().map(|r| r.requests).sum::<i64>(), 2);
    // Opening it again changes nothing.
    drop(sink);
    SqliteSink::open(&path, 30, 1 << 30).await.unwrap();
}

/// A version-2 file (one JSON row per record, `sluice_records`) is migrated on open: its
/// records read back through the view with their rowids as `seq`, and new records go on after.
#[tokio::test]
async fn a_version_2_file_is_migrated_with_its_rows() {
    let base = base();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    {
        let conn = version_2_file(&path);
        for (seq, id, key, cost) in [
            (base + 1, "a", "\"k1\"", "1500"),
            (base + 2, "b", "null", "null"),
        ] {
            let rec = format!(
                "[\"{id}\",{key},null,null,\"chat\",\"openai.chat\",\"gpt-4o\",\"gpt-4o\",\
                 \"oai\",\"openai\",1,null,200,\"ok\",true,100,20,0,0,0,0,0,null,{cost},\
                 1000,2000,3000,false,false,null,null,null]"
            );
            conn.execute(
                "INSERT INTO sluice_records (rowid, ts_us, rec) VALUES (?1, ?2, ?3)",
                rusqlite::params![seq, base, rec],
            )
            .unwrap();
        }
    }
    let sink = SqliteSink::open(&path, 30, 1 << 30).await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 3);
    type Row = (i64, i64, String, Option<String>, bool, Option<i64>);
    let read = |conn: &Connection| -> Vec<Row> {
        conn.prepare(
            "SELECT seq, ts_us, request_id, key_id, stream, cost_micros FROM sluice_requests \
             ORDER BY seq",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let rows = read(&conn);
    assert_eq!(
        rows,
        vec![
            (
                base + 1,
                base,
                "a".into(),
                Some("k1".into()),
                true,
                Some(1_500)
            ),
            (base + 2, base, "b".into(), None, true, None),
        ]
    );
    let old: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'sluice_records'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(old, 0, "version 2's table is gone");
    let catalog = Catalog::shipped();
    sink.write(vec![record(&catalog, 9, base - 1)])
        .await
        .unwrap();
    let rows = read(&conn);
    assert_eq!(rows.len(), 3);
    assert!(rows[2].0 > base + 2, "new rows go on after: {rows:?}");
}

/// A batch larger than a row's share is cut into rows: every record reads back once, the
/// records of a row share its `seq`, which is at least each of their times, and a query's
/// `seq` bound never hides a record inside its time range.
#[tokio::test]
async fn a_large_batch_is_cut_into_rows_and_reads_back_whole() {
    let base = base();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.db");
    let sink = SqliteSink::open(&path, 30, 1 << 30).await.unwrap();
    let catalog = Catalog::shipped();
    // Out of time order within the batch, as records finish in another order than they start.
    let batch: Vec<RequestRecord> = (0..100)
        .map(|i| record(&catalog, i, base + ((i * 37) % 100) as i64))
        .collect();
    sink.write(batch).await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM sluice_rows", [], |r| r.get(0))
        .unwrap();
    assert!(
        (2..100).contains(&rows),
        "several records a row: {rows} rows"
    );
    let mut stmt = conn
        .prepare("SELECT seq, ts_us, request_id FROM sluice_requests")
        .unwrap();
    let got: Vec<(i64, i64, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got.len(), 100);
    let mut ids: Vec<&str> = got.iter().map(|r| r.2.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 100, "each record once");
    for (seq, ts, id) in &got {
        assert!(seq >= ts, "{id}: seq {seq} < ts {ts}");
    }
    // The usage query over the second half of the range counts exactly the records in it.
    let q = &all_queries(base + 50, base + 100)[0];
    let usage = sink.usage(q).await.unwrap();
    assert_eq!(usage.iter().map(|r| r.requests).sum::<i64>(), 50);
}
