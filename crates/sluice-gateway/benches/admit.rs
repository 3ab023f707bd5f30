//! CPU cost of the admit stage per request, in memory, through the gateway's own `Keys`: the
//! key found by its secret (SHA-256 and a map probe), the route's verdict, five checks (the
//! key's requests, tokens and concurrency, its budget, the key × model rate) admitted, the
//! `x-ratelimit-*` headers, and the settlement with the usage and the price table. Beside it:
//! a route without keys (what invariant 10 promises costs nothing) and an invalid key (the
//! 401 path of a key flood). Target: at most 2 µs of CPU per request.
//!
//! Measured in CPU time of the benchmark thread (`/proc/thread-self/schedstat`), not wall
//! time: on a machine shared with builds, wall time counts the time the thread waited for a
//! core. Elsewhere (no such file) it falls back to wall time.
//!
//! Run: `cargo bench -p sluice-gateway --bench admit -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, SamplingMode};
use futures_util::FutureExt;
use http::{HeaderMap, HeaderValue};
use sluice_gateway::admit::{reservation, Keys, Outcome};
use sluice_gateway::config::Config;

#[path = "../../sluice-state/benches/support/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::ThreadCpuTime;

fn sha256_hex(s: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// `keys` virtual keys with five checks each (limits high enough never to refuse), a keyed
/// route (`gpt-*`) and a route without keys (`free-*`); and one key `sk-bench-typical` with
/// the usual two (requests and tokens).
fn config(keys: usize) -> Config {
    let mut text = String::from(
        r#"
[[upstream]]
name = "u"
base_url = "http://127.0.0.1:9/v1"

[[route]]
name = "chat"
models = ["gpt-*"]
upstream = "u"

[[route]]
name = "free"
models = ["free-*"]
upstream = "u"
keys = "off"

[[price]]
models = ["gpt-4o*"]
input = 2.5
output = 10.0
"#,
    );
    text.push_str(&format!(
        r#"
[[key]]
id = "typical"
hash = "{}"
requests = {{ limit = 1000000000, per = "1m" }}
tokens = {{ limit = 1000000000000, per = "1m" }}
"#,
        sha256_hex("sk-bench-typical")
    ));
    for i in 0..keys {
        text.push_str(&format!(
            r#"
[[key]]
id = "k{i}"
hash = "{}"
team = "t{}"
requests = {{ limit = 1000000000, per = "1m" }}
tokens = {{ limit = 1000000000000, per = "1m" }}
concurrency = 100000
budget = {{ limit = 1000000000.0, per = "1d" }}

[[key.model_limits]]
models = ["gpt-4o"]
requests = {{ limit = 1000000000, per = "1m" }}
"#,
            sha256_hex(&format!("sk-bench-{i}")),
            i % 8
        ));
    }
    Config::from_toml(&text, &|_| None).expect("bench config")
}

fn headers(key: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
    );
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h
}

/// One request through the admit stage and its settlement (with the `x-ratelimit-*` headers
/// put in a response's header map when `headers`); returns the spend. `client` is the
/// request's own header map, which the stage rewrites (the credential) as the gateway does.
fn request(keys: &Keys, h: &mut HeaderMap, route: usize, model: &str, headers: bool) -> u64 {
    let id = keys.identify(h);
    if keys.screen(&id).is_err() {
        return 0;
    }
    let Ok(key) = keys.authorize(route, model, id, h) else {
        return 0;
    };
    let admitted = keys
        .admit(route, key.as_ref(), model, reservation(256, 2000))
        .now_or_never()
        .expect("memory admits at once");
    let Ok(Some(ticket)) = admitted else {
        return 0;
    };
    if headers {
        // Into a response's header map, as the gateway does.
        let mut out = HeaderMap::with_capacity(16);
        for (name, value) in ticket.headers() {
            out.insert(name, value);
        }
        black_box(&out);
    }
    ticket.settle(Outcome {
        usage: Some(sluice_providers::Usage {
            cache_write: 0,
            input: 480,
            output: 120,
            cached_input: 0,
            reasoning: 0,
        }),
        status: 200,
        model,
        served: "chat",
        provider: "openai",
        cached: false,
    })
}

fn bench(c: &mut Criterion<ThreadCpuTime>) {
    let mut g = c.benchmark_group("admit");
    g.sampling_mode(SamplingMode::Flat);
    for n in [1usize, 10_000] {
        let cfg = config(n);
        let keys = Keys::in_memory(&cfg);
        let clients: Vec<HeaderMap> = (0..n).map(|i| headers(&format!("sk-bench-{i}"))).collect();
        let mut i = 0usize;
        // The copy of a request's headers is set up outside the measured time: the gateway
        // works on the request's own map.
        g.bench_function(BenchmarkId::new("key_5_checks", n), |b| {
            b.iter_batched_ref(
                || {
                    i = (i + 7919) % n;
                    clients[i].clone()
                },
                |h| black_box(request(&keys, h, 0, "gpt-4o", true)),
                BatchSize::SmallInput,
            )
        });
        if n == 1 {
            g.bench_function("key_5_checks_without_headers/1", |b| {
                b.iter_batched_ref(
                    || clients[0].clone(),
                    |h| black_box(request(&keys, h, 0, "gpt-4o", false)),
                    BatchSize::SmallInput,
                )
            });
            let typical = headers("sk-bench-typical");
            g.bench_function("key_2_checks/1", |b| {
                b.iter_batched_ref(
                    || typical.clone(),
                    |h| black_box(request(&keys, h, 0, "gpt-4o", true)),
                    BatchSize::SmallInput,
                )
            });
        }
    }
    let keys = Keys::in_memory(&config(1));
    g.bench_function("route_without_keys", |b| {
        b.iter_batched_ref(
            HeaderMap::new,
            |h| black_box(request(&keys, h, 1, "free-1", true)),
            BatchSize::SmallInput,
        )
    });
    let invalid: Vec<HeaderMap> = (0..10_000u64)
        .map(|_| headers(&format!("sk-{:032x}", fastrand::u128(..))))
        .collect();
    let mut n = 0usize;
    g.bench_function("invalid_key_401", |b| {
        b.iter(|| {
            n = (n + 1) % invalid.len();
            let id = keys.identify(&invalid[n]);
            black_box(keys.screen(&id).is_err())
        })
    });
    g.finish();
}

fn cpu() -> Criterion<ThreadCpuTime> {
    Criterion::default().with_measurement(ThreadCpuTime)
}

criterion_group! {
    name = benches;
    config = cpu();
    targets = bench
}
criterion_main!(benches);
