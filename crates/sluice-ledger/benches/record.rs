//! Request-path CPU of the ledger: build a request's record (names as `Arc` clones of config
//! strings, the request id and model from the request), price it with the shipped catalog, and
//! hand it to the queue. Goal: at most 2 µs per request in all.
//!
//! The queue's writer runs on another thread with the `none` sink, as it would with a real
//! one: `record()` is a `try_send`, so the request path's cost does not depend on the sink.
//!
//! Run: `cargo bench -p sluice-ledger --bench record -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use sluice_ledger::{Catalog, Latency, Ledger, LedgerConfig, RequestRecord, Sink, Tokens};

/// What the gateway keeps per route/key/upstream: names built once at config load.
struct Names {
    route: Arc<str>,
    key: Arc<str>,
    team: Arc<str>,
    owner: Arc<str>,
    upstream: Arc<str>,
    provider: Arc<str>,
}

fn build(names: &Names, catalog: &Catalog, request_id: &str, model: &str, i: u64) -> RequestRecord {
    let mut r = RequestRecord::new(
        1_764_633_600_000_000 + i as i64,
        Arc::from(request_id),
        names.route.clone(),
        "anthropic.messages",
    );
    r.key_id = Some(names.key.clone());
    r.team = Some(names.team.clone());
    r.owner = Some(names.owner.clone());
    let model: Arc<str> = Arc::from(model);
    r.requested_model = Some(model.clone());
    r.served_model = Some(model.clone());
    r.upstream = Some(names.upstream.clone());
    r.provider = Some(names.provider.clone());
    r.attempts = 1;
    r.status = 200;
    r.end_reason = "ok";
    r.stream = true;
    r.tokens = Tokens::from_anthropic(1_200 + i % 7, 300, 50_000, 2_000, 0, 0);
    r.pricing = catalog.pricing(&names.provider, &model, &r.tokens);
    r.latency = Latency {
        first_byte_us: Some(180_000),
        first_token_us: Some(210_000),
        total_us: 2_400_000,
    };
    r
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let config = LedgerConfig {
        queue_capacity: 65_536,
        ..LedgerConfig::default()
    };
    let ledger = Ledger::start(&config, Sink::None);
    let handle = ledger.handle();
    let catalog = Catalog::shipped();
    let names = Names {
        route: Arc::from("chat"),
        key: Arc::from("key-7f3a"),
        team: Arc::from("platform"),
        owner: Arc::from("ops@example.com"),
        upstream: Arc::from("anthropic-main"),
        provider: Arc::from("anthropic"),
    };
    let model = "claude-sonnet-4-5-20250929";
    let request_id = "01JEXAMPLE7Q9W3ZK5M2N4P6R8T0";
    let mut g = c.benchmark_group("ledger");
    g.measurement_time(Duration::from_secs(3));
    let mut i = 0u64;
    g.bench_function("build", |b| {
        b.iter(|| {
            i += 1;
            black_box(build(
                &names,
                &catalog,
                black_box(request_id),
                black_box(model),
                i,
            ))
        })
    });
    let tokens = Tokens::from_anthropic(1_200, 300, 50_000, 2_000, 0, 0);
    g.bench_function("price (prefix match)", |b| {
        b.iter(|| black_box(catalog.pricing("anthropic", black_box(model), &tokens)))
    });
    g.bench_function("price (exact match)", |b| {
        b.iter(|| black_box(catalog.pricing("openai", black_box("gpt-4o-mini"), &tokens)))
    });
    g.bench_function("build + price + record()", |b| {
        b.iter(|| {
            i += 1;
            handle.record(build(
                &names,
                &catalog,
                black_box(request_id),
                black_box(model),
                i,
            ));
        })
    });
    g.finish();
    let s = ledger.stats();
    eprintln!(
        "queue: accepted {}, dropped_full {} (either way record() returned at once)",
        s.accepted, s.dropped_full
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
