//! The PostgreSQL sink against a real server started by each test (see support/mod.rs): the
//! schema is created and versioned, records land whole, `/admin/usage` answers what the
//! records add up to and what a direct SQL sum says, and killing the server mid-run loses no
//! request — only records, every one counted — and writing resumes when it is back.

mod support;

use std::time::Duration;

use sluice_ledger::query::totals;
use sluice_ledger::sink::PostgresSink;
use sluice_ledger::{
    now_us, Catalog, Ledger, PostgresConfig, RequestRecord, Sink, SinkConfig, SinkError,
};
use support::{
    all_queries, assert_rows_eq, direct_sum_sql, eventually, expected_rows, record, test_config,
    totals_array, PgServer,
};
use tokio::time::Instant;

const DAY: i64 = 86_400_000_000;

fn pg_config(server: &PgServer) -> PostgresConfig {
    PostgresConfig {
        url: server.url(),
        pool_size: 4,
        connect_timeout: Duration::from_secs(1),
    }
}

async fn direct_sum(client: &tokio_postgres::Client, from: i64, to: i64) -> [i64; 8] {
    let row = client
        .query_one(&direct_sum_sql(from, to), &[])
        .await
        .unwrap();
    std::array::from_fn(|i| row.get::<_, Option<i64>>(i).unwrap_or(0))
}

async fn count(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT COUNT(*) FROM sluice_requests", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "no PostgreSQL: install it (apt-get install postgresql) or set PG_BIN"
)]
async fn records_land_whole_and_usage_adds_up() {
    let server = PgServer::start().await;
    let sink = Sink::open(
        &SinkConfig::Postgres(pg_config(&server)),
        "/".as_ref(),
        None,
    )
    .await
    .unwrap();
    let client = server.client().await;
    let version: i64 = client
        .query_one("SELECT MAX(version) FROM sluice_ledger_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 1);

    let base = now_us() / DAY * DAY - 3 * DAY;
    let catalog = Catalog::shipped();
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
    assert_eq!(count(&client).await, 4_320);

    for (from, to) in [
        (base, base + 3 * DAY),
        (base + DAY / 3, base + DAY + 7_200_000_000),
    ] {
        for q in all_queries(from, to) {
            let rows = sink.usage(&q).await.unwrap();
            assert_rows_eq(&rows, &expected_rows(&records, &q), &q);
            assert_eq!(
                totals_array(&totals(&rows)),
                direct_sum(&client, from, to).await,
                "{q:?}"
            );
        }
    }

    // One record read back: NULLs stay NULL, the price entry and cost are the record's.
    let row = client
        .query_one(
            "SELECT key_id, attempt_classes, price_entry, cost_micros, stream, cache_hit \
             FROM sluice_requests WHERE request_id = 'req-15'",
            &[],
        )
        .await
        .unwrap();
    let r = &records[15];
    assert_eq!(row.get::<_, Option<String>>(0), None);
    assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("connect"));
    assert_eq!(
        row.get::<_, Option<String>>(2).as_deref(),
        r.pricing.entry()
    );
    assert_eq!(row.get::<_, Option<i64>>(3), r.pricing.cost_micros());
    assert_eq!(row.get::<_, bool>(4), r.stream);
    assert_eq!(row.get::<_, bool>(5), r.cache_hit);

    // A second instance starting on the same database finds the schema in place; a newer
    // schema is refused at start, saying so.
    PostgresSink::new(&pg_config(&server))
        .unwrap()
        .ensure_schema()
        .await
        .unwrap();
    client
        .execute("UPDATE sluice_ledger_schema SET version = 9", &[])
        .await
        .unwrap();
    let e = Sink::open(
        &SinkConfig::Postgres(pg_config(&server)),
        "/".as_ref(),
        None,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(e, SinkError::SchemaTooNew { found: 9, known: 1 }),
        "{e}"
    );
}

/// Records handed in as requests would: about 4,000 a second.
#[derive(Default)]
struct Load {
    sent: u64,
    slowest: Duration,
}

impl Load {
    async fn send_for(&mut self, ledger: &Ledger, catalog: &Catalog, now: i64, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            for _ in 0..40 {
                let r = record(catalog, self.sent, now + self.sent as i64);
                let t = Instant::now();
                ledger.record(r);
                self.slowest = self.slowest.max(t.elapsed());
                self.sent += 1;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "no PostgreSQL: install it (apt-get install postgresql) or set PG_BIN"
)]
async fn killing_postgres_mid_run_drops_counted_records_and_writing_resumes() {
    let mut server = PgServer::start().await;
    let sink = Sink::open(
        &SinkConfig::Postgres(pg_config(&server)),
        "/".as_ref(),
        None,
    )
    .await
    .unwrap();
    let mut config = test_config();
    config.batch_size = 200;
    config.write_timeout = Duration::from_secs(2);
    let ledger = Ledger::start(&config, sink);
    let catalog = Catalog::shipped();
    let now = now_us();
    let mut load = Load::default();
    load.send_for(&ledger, &catalog, now, Duration::from_millis(800))
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            ledger.stats().written > 0
        })
        .await,
        "nothing written while the server was up: {:?}",
        ledger.stats()
    );

    server.kill();
    load.send_for(&ledger, &catalog, now, Duration::from_millis(1_500))
        .await;
    let while_down = ledger.stats();
    assert!(
        while_down.dropped_sink > 0,
        "records dropped while down are counted: {while_down:?}"
    );

    server.restart().await;
    let written_at_restart = ledger.stats().written;
    load.send_for(&ledger, &catalog, now, Duration::from_millis(1_000))
        .await;
    assert!(
        eventually(Duration::from_secs(15), || async {
            ledger.stats().written > written_at_restart + 1_000
        })
        .await,
        "writing did not resume after the restart: {:?}",
        ledger.stats()
    );

    // The request path never waited on the dead database.
    let (sent, slowest) = (load.sent, load.slowest);
    // (A bound far below the 1 s connect and 2 s write timeouts a waiting call would show;
    // loose enough for a loaded 2-core CI machine descheduling the thread.)
    assert!(
        slowest < Duration::from_millis(100),
        "slowest record() took {slowest:?}"
    );
    let report = ledger.shutdown(Duration::from_secs(15)).await;
    let s = report.stats;
    assert!(report.flushed, "{s:?}");
    assert_eq!(s.accepted + s.dropped_full, sent, "{s:?}");
    assert_eq!(
        s.written + s.dropped_sink,
        s.accepted,
        "every record is counted once: {s:?}"
    );
    // What the database holds is what was counted written, except that a batch whose commit
    // the server made just as it was killed, before its answer reached us, is stored yet
    // counted dropped: at most one batch.
    let stored = count(&server.client().await).await as u64;
    assert!(
        stored >= s.written && stored <= s.written + config.batch_size as u64,
        "stored {stored}, counted written {}: {s:?}",
        s.written
    );
    eprintln!(
        "kill test: sent {sent}, written {}, dropped while down {}, stored {stored}, slowest record() {slowest:?}",
        s.written, s.dropped_sink
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "no PostgreSQL: install it (apt-get install postgresql) or set PG_BIN"
)]
async fn a_server_down_at_start_is_not_fatal_and_is_used_once_up() {
    let mut server = PgServer::start().await;
    server.kill();
    // The gateway starts with the database down: records are dropped and counted...
    let sink = Sink::open(
        &SinkConfig::Postgres(pg_config(&server)),
        "/".as_ref(),
        None,
    )
    .await
    .unwrap();
    let ledger = Ledger::start(&test_config(), sink.clone());
    let catalog = Catalog::shipped();
    let now = now_us();
    for i in 0..100 {
        ledger.record(record(&catalog, i, now));
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            ledger.stats().dropped_sink == 100
        })
        .await
    );
    // ... and once it is up, the schema is created on the first connection and records land.
    server.restart().await;
    let mut i = 100;
    let landed = eventually(Duration::from_secs(15), || {
        ledger.record(record(&catalog, i, now));
        i += 1;
        async { ledger.stats().written > 0 }
    })
    .await;
    assert!(landed, "{:?}", ledger.stats());
    let report = ledger.shutdown(Duration::from_secs(10)).await;
    assert_eq!(
        count(&server.client().await).await as u64,
        report.stats.written,
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "no PostgreSQL: install it (apt-get install postgresql) or set PG_BIN"
)]
async fn a_hung_server_costs_each_batch_its_write_timeout_and_no_more() {
    let server = PgServer::start().await;
    let sink = Sink::open(
        &SinkConfig::Postgres(pg_config(&server)),
        "/".as_ref(),
        None,
    )
    .await
    .unwrap();
    let mut config = test_config();
    config.write_timeout = Duration::from_millis(300);
    let ledger = Ledger::start(&config, sink);
    let catalog = Catalog::shipped();
    let now = now_us();
    let mut load = Load::default();
    load.send_for(&ledger, &catalog, now, Duration::from_millis(300))
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            ledger.stats().written > 0
        })
        .await
    );

    // SIGSTOP: connections stay open, nothing answers. Batches are abandoned after the write
    // timeout and counted; the request path does not notice.
    server.freeze();
    load.send_for(&ledger, &catalog, now, Duration::from_millis(1_200))
        .await;
    let frozen = ledger.stats();
    server.thaw();
    assert!(frozen.dropped_sink + frozen.dropped_full > 0, "{frozen:?}");
    assert!(frozen.failed_batches > 0, "{frozen:?}");
    let written_at_thaw = frozen.written;
    load.send_for(&ledger, &catalog, now, Duration::from_millis(500))
        .await;
    assert!(
        eventually(Duration::from_secs(15), || async {
            ledger.stats().written > written_at_thaw
        })
        .await,
        "writing did not resume after the server answered again: {:?}",
        ledger.stats()
    );
    assert!(
        load.slowest < Duration::from_millis(100),
        "slowest record() took {:?}",
        load.slowest
    );
    let report = ledger.shutdown(Duration::from_secs(15)).await;
    let s = report.stats;
    assert_eq!(s.accepted + s.dropped_full, load.sent, "{s:?}");
    assert_eq!(
        s.written + s.dropped_sink + s.lost_at_shutdown,
        s.accepted,
        "{s:?}"
    );
}

/// A table made before the `guardrails` column (an older build's, with its rows): the sink
/// adds the column at start, the old rows read NULL there, and a new record's verdicts land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "no PostgreSQL: install it (apt-get install postgresql) or set PG_BIN"
)]
async fn an_older_table_gets_the_guardrails_column_and_keeps_its_rows() {
    let server = PgServer::start().await;
    let client = server.client().await;
    let catalog = Catalog::shipped();
    let now = now_us();
    // The older build: its table, its schema version, one row.
    {
        let old = PostgresSink::new(&pg_config(&server)).unwrap();
        old.ensure_schema().await.unwrap();
        client
            .batch_execute("ALTER TABLE sluice_requests DROP COLUMN guardrails")
            .await
            .unwrap();
        client
            .execute(
                "INSERT INTO sluice_requests (ts_us, request_id, route, client_api, attempts, \
                 status, end_reason, stream, input_tokens, output_tokens, cache_read_tokens, \
                 cache_write_tokens, cache_write_1h_tokens, reasoning_tokens, pricing, total_us, \
                 cache_hit, idempotent_replay) VALUES ($1, 'old', 'chat', 'openai.chat', 1, 200, \
                 'ok', false, 1, 1, 0, 0, 0, 0, 2, 10, false, false)",
                &[&now],
            )
            .await
            .unwrap();
    }
    let sink = PostgresSink::new(&pg_config(&server)).unwrap();
    sink.ensure_schema().await.unwrap();
    let mut r = record(&catalog, 2, now + 1);
    r.guardrails = Some("no-secrets:redact:0.12ms,policy:allow:3.10ms".into());
    sink.write(&[r]).await.unwrap();
    let rows = client
        .query(
            "SELECT request_id, guardrails FROM sluice_requests ORDER BY ts_us",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<(String, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        [
            ("old".to_string(), None),
            (
                "req-2".to_string(),
                Some("no-secrets:redact:0.12ms,policy:allow:3.10ms".to_string())
            )
        ]
    );
    let version: i64 = client
        .query_one("SELECT MAX(version) FROM sluice_ledger_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 1, "a nullable column added needs no new version");
}

/// Every field of a record lands in its own column with its own value: the COPY stream is
/// written by hand, so a field in the wrong place or of the wrong width would show here (a
/// wrong width PostgreSQL refuses; a wrong place only a read-back finds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "no PostgreSQL: install it (apt-get install postgresql) or set PG_BIN"
)]
async fn every_field_reads_back_from_its_column() {
    let server = PgServer::start().await;
    let sink = PostgresSink::new(&pg_config(&server)).unwrap();
    sink.ensure_schema().await.unwrap();
    let catalog = Catalog::shipped();
    let mut r = record(&catalog, 1, now_us());
    r.attempts = 3;
    r.attempt_classes = vec!["connect", "status_503"];
    r.status = 201;
    r.tokens.cache_write_1h = 17;
    r.tokens.reasoning = 19;
    r.idempotent_replay = true;
    r.capture = Some(Box::new(sluice_ledger::Capture::new(
        "the prompt, with \"quotes\" and é",
        "the answer",
        4096,
    )));
    r.guardrails = Some("no-secrets:redact:0.12ms".into());
    // A second record with every optional field empty.
    let mut bare = RequestRecord::new(now_us(), "bare".into(), "r".into(), "openai.chat");
    bare.end_reason = "ok";
    sink.write(&[r.clone(), bare]).await.unwrap();
    let client = server.client().await;
    let row = client
        .query_one(
            "SELECT ts_us, request_id, key_id, team, owner, route, client_api, requested_model, \
             served_model, upstream, provider, attempts, attempt_classes, status, end_reason, \
             stream, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
             cache_write_1h_tokens, reasoning_tokens, pricing, price_entry, cost_micros, \
             first_byte_us, first_token_us, total_us, cache_hit, idempotent_replay, prompt, \
             response, capture_truncated, guardrails FROM sluice_requests \
             WHERE request_id = 'req-1'",
            &[],
        )
        .await
        .unwrap();
    let t = r.tokens;
    let s = |i: usize| row.get::<_, Option<String>>(i);
    let n = |i: usize| row.get::<_, Option<i64>>(i);
    assert_eq!(row.get::<_, i64>(0), r.ts_us);
    assert_eq!(s(1).as_deref(), Some(&*r.request_id));
    assert_eq!(s(2).as_deref(), r.key_id.as_deref());
    assert_eq!(s(3).as_deref(), r.team.as_deref());
    assert_eq!(s(4).as_deref(), r.owner.as_deref());
    assert_eq!(s(5).as_deref(), Some(&*r.route));
    assert_eq!(s(6).as_deref(), Some(r.client_api));
    assert_eq!(s(7).as_deref(), r.requested_model.as_deref());
    assert_eq!(s(8).as_deref(), r.served_model.as_deref());
    assert_eq!(s(9).as_deref(), r.upstream.as_deref());
    assert_eq!(s(10).as_deref(), r.provider.as_deref());
    assert_eq!(row.get::<_, i32>(11), 3);
    assert_eq!(s(12).as_deref(), Some("connect,status_503"));
    assert_eq!(row.get::<_, i32>(13), 201);
    assert_eq!(s(14).as_deref(), Some(r.end_reason));
    assert_eq!(row.get::<_, bool>(15), r.stream);
    for (i, v) in [
        t.input,
        t.output,
        t.cache_read,
        t.cache_write,
        t.cache_write_1h,
        t.reasoning,
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(n(16 + i), Some(v as i64), "token column {}", 16 + i);
    }
    assert_eq!(row.get::<_, i16>(22), r.pricing.code());
    assert_eq!(s(23).as_deref(), r.pricing.entry());
    assert_eq!(n(24), r.pricing.cost_micros());
    assert_eq!(n(25), r.latency.first_byte_us.map(|v| v as i64));
    assert_eq!(n(26), r.latency.first_token_us.map(|v| v as i64));
    assert_eq!(n(27), Some(r.latency.total_us as i64));
    assert_eq!(row.get::<_, bool>(28), r.cache_hit);
    assert!(row.get::<_, bool>(29));
    assert_eq!(s(30).as_deref(), Some("the prompt, with \"quotes\" and é"));
    assert_eq!(s(31).as_deref(), Some("the answer"));
    assert_eq!(row.get::<_, Option<bool>>(32), Some(false));
    assert_eq!(s(33).as_deref(), Some("no-secrets:redact:0.12ms"));
    let bare = client
        .query_one(
            "SELECT key_id, attempt_classes, price_entry, cost_micros, first_byte_us, prompt, \
             capture_truncated, guardrails FROM sluice_requests WHERE request_id = 'bare'",
            &[],
        )
        .await
        .unwrap();
    for i in 0..8 {
        assert!(
            bare.try_get::<_, Option<String>>(i)
                .map(|v| v.is_none())
                .or_else(|_| bare.try_get::<_, Option<i64>>(i).map(|v| v.is_none()))
                .or_else(|_| bare.try_get::<_, Option<bool>>(i).map(|v| v.is_none()))
                .unwrap(),
            "column {i} of the bare record is NULL"
        );
    }
}
