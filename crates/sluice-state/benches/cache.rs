//! The response cache's cost on the request path.
//!
//! - `cache_memory`: a hit (lookup, LRU touch, `Arc` clone) and a store (copy into one buffer,
//!   insert, evict) in memory, for a small answer (1 KiB) and a 64 KiB one, among 10,000
//!   entries (1,000 of 64 KiB). CPU time of the benchmark thread (see `support/thread_cpu.rs`). Target: a hit
//!   well under the 0.2 ms the issue allows over the gateway's floor.
//! - `cache_redis`: a hit from a `redis-server` on loopback (one round trip, `GET` and `PTTL`
//!   pipelined, and decoding the envelope), wall time: the round trip is the cost. Target:
//!   under 0.5 ms. Starts its own `redis-server` (`$REDIS_SERVER` or the one on `PATH`); skipped
//!   without one.
//!
//! Run: `cargo bench -p sluice-state --bench cache -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use futures_util::FutureExt;
use sluice_state::{
    BackendConfig, CacheKey, CacheStoreConfig, CachedBody, CachedResponse, CachedUsage, Lookup,
    PutPolicy, RedisConfig, ResponseCache, StateConfig, Store,
};

#[path = "support/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::ThreadCpuTime;

/// Answer sizes, and how many entries of each the memory cache holds while measured.
const SIZES: [(&str, usize, u32); 2] = [("1KiB", 1024, 10_000), ("64KiB", 64 * 1024, 1_000)];

fn key(n: u32) -> CacheKey {
    let mut digest = [0u8; 32];
    digest[..4].copy_from_slice(&n.to_be_bytes());
    digest[31] = 0x5a;
    CacheKey {
        digest,
        route: Arc::from("chat"),
        namespace: Arc::from("key:k42"),
    }
}

fn answer(len: usize) -> CachedResponse {
    CachedResponse {
        status: http::StatusCode::OK,
        headers: vec![(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        )],
        body: CachedBody::Whole(Bytes::from(vec![b'x'; len])),
        usage: CachedUsage {
            input: 1200,
            output: 300,
            ..CachedUsage::default()
        },
        stored_at: SystemTime::now(),
    }
}

const POLICY: PutPolicy = PutPolicy {
    ttl: Duration::from_secs(3600),
    max_bytes: 1 << 20,
};

fn memory(c: &mut Criterion<ThreadCpuTime>) {
    let mut group = c.benchmark_group("cache_memory");
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    for (name, len, entries) in SIZES {
        let cache = ResponseCache::in_memory(&CacheStoreConfig {
            max_bytes: 2 << 30,
            ..CacheStoreConfig::default()
        })
        .unwrap();
        let keys: Vec<CacheKey> = (0..entries).map(key).collect();
        for k in &keys {
            cache.put(k, answer(len), POLICY).now_or_never().unwrap();
        }
        let mut next = 0;
        group.bench_function(BenchmarkId::new("hit", name), |b| {
            b.iter(|| {
                next = (next + 1) % keys.len();
                let found = cache.get(&keys[next]).now_or_never().unwrap();
                assert!(matches!(found, Lookup::Hit(..)));
                black_box(found);
            })
        });
        let body = answer(len);
        group.bench_function(BenchmarkId::new("put", name), |b| {
            b.iter(|| {
                next = (next + 1) % keys.len();
                black_box(cache.put_detached(&keys[next], body.clone(), POLICY));
            })
        });
    }
    group.finish();
}

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis() -> Option<(Redis, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let child = Command::new(binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    Some((Redis(child), port))
}

fn redis(c: &mut Criterion) {
    let Some((_server, port)) = start_redis() else {
        eprintln!("cache_redis: no redis-server; skipped");
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cache = rt.block_on(async {
        // Wait for the server to listen.
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let store = Store::new(StateConfig {
            backend: BackendConfig::Redis(RedisConfig {
                url: format!("redis://127.0.0.1:{port}/"),
                call_timeout: Duration::from_secs(1),
                ..RedisConfig::default()
            }),
            ..StateConfig::default()
        })
        .await
        .unwrap();
        ResponseCache::new(&store, &CacheStoreConfig::default()).unwrap()
    });
    let mut group = c.benchmark_group("cache_redis");
    for (name, len, _) in SIZES {
        let keys: Vec<CacheKey> = (0..100).map(key).collect();
        rt.block_on(async {
            for k in &keys {
                cache.put(k, answer(len), POLICY).await;
            }
        });
        let mut next = 0;
        group.bench_function(BenchmarkId::new("hit", name), |b| {
            b.iter(|| {
                next = (next + 1) % keys.len();
                let found = rt.block_on(cache.get(&keys[next]));
                assert!(matches!(found, Lookup::Hit(..)));
                black_box(found);
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = in_memory;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = memory
}
criterion_group!(in_redis, redis);
criterion_main!(in_memory, in_redis);
