//! What hot reload adds to each request: the request takes the current config generation
//! from an `ArcSwap` (`load_full`) where it used to clone a plain `Arc`. Both are measured
//! here, alone and with a second thread loading the same cell (two requests at once).
//!
//! Run: `cargo bench -p sluice-gateway --bench state_load -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use criterion::{criterion_group, criterion_main, Criterion};

/// Stands in for the gateway's `State`: what it holds does not change the cost of taking it.
struct Generation {
    _config: Vec<u8>,
}

fn bench(c: &mut Criterion) {
    let plain = Arc::new(Generation {
        _config: vec![0; 4096],
    });
    let cell = Arc::new(ArcSwap::from_pointee(Generation {
        _config: vec![0; 4096],
    }));
    let mut g = c.benchmark_group("take_the_state");
    g.bench_function("arc_clone (before)", |b| {
        b.iter(|| black_box(plain.clone()))
    });
    g.bench_function("arc_swap_load_full (reload)", |b| {
        b.iter(|| black_box(cell.load_full()))
    });
    // A second thread takes the state in a loop meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let other = {
        let (cell, plain, stop) = (cell.clone(), plain.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                black_box(cell.load_full());
                black_box(plain.clone());
            }
        })
    };
    g.bench_function("arc_clone, contended (before)", |b| {
        b.iter(|| black_box(plain.clone()))
    });
    g.bench_function("arc_swap_load_full, contended (reload)", |b| {
        b.iter(|| black_box(cell.load_full()))
    });
    g.finish();
    stop.store(true, Ordering::Relaxed);
    let _ = other.join();
}

criterion_group!(benches, bench);
criterion_main!(benches);
