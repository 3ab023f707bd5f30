//! Sink throughput: records per second from `record()` to stored, through the real writer
//! (batches of 1,000), for embedded SQLite (a file in a temp dir) and PostgreSQL (a server this
//! bench starts, with the default `fsync = on`). Goal: at least 20,000 records/s for each.
//!
//! Run: `cargo bench -p sluice-ledger --bench sinks` (PostgreSQL is skipped, saying so, when
//! its binaries are not installed).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use sluice_ledger::{
    now_us, Catalog, Ledger, LedgerConfig, PostgresConfig, RequestRecord, Sink, SinkConfig,
    SqliteConfig,
};
use tokio::time::Instant;

const N: u64 = 200_000;

fn records() -> Vec<RequestRecord> {
    let catalog = Catalog::shipped();
    let now = now_us();
    (0..N)
        .map(|i| support::record(&catalog, i, now + i as i64))
        .collect()
}

/// Hands `records` to a ledger on `sink` as fast as possible and returns records/s until the
/// last is stored.
async fn run(sink: Sink, records: Vec<RequestRecord>) -> f64 {
    let config = LedgerConfig {
        queue_capacity: N as usize,
        batch_size: 1_000,
        flush_interval: Duration::from_millis(10),
        ..LedgerConfig::default()
    };
    let ledger = Ledger::start(&config, sink);
    let started = Instant::now();
    for r in records {
        ledger.record(r);
    }
    let report = ledger.shutdown(Duration::from_secs(120)).await;
    let secs = started.elapsed().as_secs_f64();
    assert!(report.flushed, "{report:?}");
    assert_eq!(report.stats.written, N, "{report:?}");
    N as f64 / secs
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let config = SinkConfig::Sqlite(SqliteConfig::default());
    for round in 1..=3 {
        let sink = Sink::open(&config, &dir.path().join(round.to_string()), None)
            .await
            .unwrap();
        let rate = run(sink, records()).await;
        println!("sqlite   round {round}: {N} records, {rate:>9.0} records/s");
    }
    if support::pg_bin().is_none() {
        println!("postgres: SKIP (PostgreSQL is not installed; apt-get install postgresql or set PG_BIN)");
        return;
    }
    let server = support::PgServer::start_with(true).await;
    let config = SinkConfig::Postgres(PostgresConfig {
        url: server.url(),
        pool_size: 4,
        connect_timeout: Duration::from_secs(5),
    });
    for round in 1..=3 {
        let sink = Sink::open(&config, dir.path(), None).await.unwrap();
        let rate = run(sink, records()).await;
        println!("postgres round {round}: {N} records, {rate:>9.0} records/s (fsync on)");
    }
}
