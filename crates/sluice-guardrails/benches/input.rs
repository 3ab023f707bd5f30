//! Built-in input checks per KiB of prompt (goal: ≤ 5 µs/KiB): every built-in detector on a
//! prompt of ordinary prose with no finding (the common case), with one card number to
//! redact, and the whole request body (JSON parse, walk, check, no rewrite). And a stream's
//! window check: one answer of 1 KiB pushed through the streaming redactor in 4-byte deltas
//! (a token an event), per delta.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::sync::Arc;

use sluice_guardrails::{json, Action, Detector, Rule, RuleSet, StreamRedactor};

fn prose(kib: usize) -> String {
    let line = "The quarterly report shows revenue grew 12% to 4.2 million in Q3, driven by \
                the new onboarding flow; churn fell from 3.1% to 2.4% (see table 7). ";
    let mut s = String::new();
    while s.len() < kib * 1024 {
        s.push_str(line);
    }
    s.truncate(kib * 1024);
    s
}

fn rules() -> RuleSet {
    let rules: Vec<Rule> = Detector::ALL
        .into_iter()
        .map(|d| Rule::builtin(d, Action::Redact))
        .collect();
    RuleSet::new(&rules, Some(256)).expect("built-in rules")
}

fn bench(c: &mut Criterion) {
    let set = rules();
    let mut g = c.benchmark_group("input_check");
    for kib in [1usize, 16] {
        let clean = prose(kib);
        g.throughput(Throughput::Bytes(clean.len() as u64));
        g.bench_function(format!("clean_{kib}KiB"), |b| {
            b.iter(|| set.apply(std::hint::black_box(&clean)).map(|c| c.verdict))
        });
        let mut with_card = clean.clone();
        with_card.replace_range(100..119, "4111 1111 1111 1111");
        g.bench_function(format!("one_card_{kib}KiB"), |b| {
            b.iter(|| {
                set.apply(std::hint::black_box(&with_card))
                    .map(|c| c.verdict)
            })
        });
        let body = serde_json::json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": clean},
            ]
        })
        .to_string();
        g.bench_function(format!("request_body_{kib}KiB"), |b| {
            b.iter_batched(
                || body.as_bytes(),
                |bytes| {
                    let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
                    json::check_body(&set, &mut v).map(|r| r.0)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
    let set = Arc::new(rules());
    let answer = prose(1);
    let deltas: Vec<&str> = answer
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let mut g = c.benchmark_group("stream_window");
    g.throughput(Throughput::Elements(deltas.len() as u64));
    g.bench_function("1KiB_in_4_byte_deltas", |b| {
        b.iter(|| {
            let mut r = StreamRedactor::new(set.clone(), 256);
            let mut out = 0;
            for d in &deltas {
                out += r.push(d).unwrap().len();
            }
            out + r.finish().unwrap().len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
