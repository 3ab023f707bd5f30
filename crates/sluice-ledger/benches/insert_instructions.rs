//! The SQLite sink's cost per record in instructions, for callgrind: writes `LEDGER_N` records
//! (default 20,000) in batches of 200 (what a busy gateway's writer hands the sink) straight to
//! `SqliteSink::write`. Run it twice with different `LEDGER_N` under
//! `valgrind --tool=callgrind` and divide the difference by the difference in records; the
//! fixed costs (opening, the schema) cancel. `bench/ledger_insert.sh` does exactly that.

#[path = "../tests/support/mod.rs"]
mod support;

use sluice_ledger::sink::SqliteSink;
use sluice_ledger::{now_us, Catalog};

const BATCH: usize = 200;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: u64 = std::env::var("LEDGER_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let catalog = Catalog::shipped();
    let now = now_us();
    let dir = tempfile::tempdir().unwrap();
    let sink = SqliteSink::open(&dir.path().join("ledger.db"), 0, u64::MAX)
        .await
        .unwrap();
    // `LEDGER_SINK_OFF=1`: build and drop the records only, to subtract.
    let off = std::env::var_os("LEDGER_SINK_OFF").is_some();
    let mut batch = Vec::with_capacity(BATCH);
    for i in 0..n {
        batch.push(support::record(&catalog, i, now + i as i64));
        if batch.len() == BATCH {
            let full = std::mem::take(&mut batch);
            if !off {
                sink.write(full).await.unwrap();
            }
        }
    }
    if !batch.is_empty() {
        sink.write(batch).await.unwrap();
    }
    println!("{n} records written");
    // `LEDGER_QUERY=1`: how long the usage queries take over what was written (the compact
    // rows are read through a view that unpacks their JSON).
    if std::env::var_os("LEDGER_QUERY").is_some() {
        for q in support::all_queries(now, now + n as i64 + 1) {
            let started = tokio::time::Instant::now();
            let rows = sink.usage(&q).await.unwrap();
            println!(
                "usage by {:?}/{:?}: {} rows in {:.1} ms",
                q.group_by,
                q.bucket,
                rows.len(),
                started.elapsed().as_secs_f64() * 1e3
            );
        }
    }
}
