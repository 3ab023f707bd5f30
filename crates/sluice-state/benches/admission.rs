//! CPU cost of one request's auth and limits in memory: find the virtual key by its secret,
//! build its checks (rate and tokens per key, rate per key × model, concurrency, budget), admit,
//! settle with the real usage. Target: at most 2 µs of CPU per request.
//!
//! Measured in CPU time of the benchmark thread (`/proc/thread-self/schedstat`), not wall time:
//! on a machine shared with builds, wall time counts the time the thread waited for a core.
//! That account advances in scheduler ticks, so samples are flat and long. Elsewhere (no such
//! file) it falls back to wall time.
//!
//! Run: `cargo bench -p sluice-state --bench admission -- --warm-up-time 1 --measurement-time 3`

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use futures_util::FutureExt;
use sluice_state::{Check, Decision, IdempotencyConfig, MemoryConfig, Store, Usage};

#[path = "support/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::ThreadCpuTime;

/// What the gateway would keep per virtual key: its counters' names, built once.
struct VirtualKey {
    id: Arc<str>,
    per_model: Arc<str>,
}

const HIGH: u64 = 1 << 40;

fn checks(key: &VirtualKey) -> Vec<Check> {
    let minute = Duration::from_secs(60);
    vec![
        Check::Rate {
            key: key.id.clone(),
            limit: HIGH,
            period: minute,
        },
        Check::Tokens {
            key: key.id.clone(),
            limit: HIGH,
            period: minute,
            reserve: 1024,
        },
        Check::Rate {
            key: key.per_model.clone(),
            limit: HIGH,
            period: minute,
        },
        Check::Concurrency {
            key: key.id.clone(),
            limit: 1000,
        },
        Check::Budget {
            key: key.id.clone(),
            limit_micros: HIGH,
            period: Duration::from_secs(86_400),
        },
    ]
}

fn request(store: &Store, keys: &HashMap<String, VirtualKey>, secret: &str) {
    let key = keys.get(secret).expect("known key");
    let decision = store
        .admit(checks(key))
        .now_or_never()
        .expect("memory never waits")
        .expect("admitted");
    let Decision::Admitted(admission) = decision else {
        panic!("refused");
    };
    black_box(admission.quotas());
    admission.settle_detached(Usage {
        tokens: Some(300),
        spend_micros: 1500,
    });
}

fn admission(c: &mut Criterion<ThreadCpuTime>) {
    let mut group = c.benchmark_group("auth_admit_settle");
    // The scheduler's account advances in ticks (1 to 4 ms): equal samples of 100+ ms each keep
    // that rounding to a few percent, and it averages out.
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    for n_keys in [1usize, 10_000] {
        let store = Store::in_memory(&MemoryConfig::default(), &IdempotencyConfig::default());
        let keys: HashMap<String, VirtualKey> = (0..n_keys)
            .map(|i| {
                let secret = format!("sk-sluice-{i:08}-0123456789abcdef0123456789abcdef");
                let key = VirtualKey {
                    id: Arc::from(format!("k{i}")),
                    per_model: Arc::from(format!("k{i}/gpt-4o")),
                };
                (secret, key)
            })
            .collect();
        let secrets: Vec<&String> = keys.keys().collect();
        let mut next = 0;
        group.bench_function(BenchmarkId::from_parameter(format!("{n_keys}_keys")), |b| {
            b.iter(|| {
                next = (next + 1) % secrets.len();
                request(&store, &keys, secrets[next]);
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = admission
}
criterion_main!(benches);
