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
    // What the gateway's stream guard adds per content event besides the window check: the
    // event's data parsed into a `serde_json::Value` and written back (the text rewritten in
    // it), and the copy of the parsed data it used to keep per event as the channel's
    // template (now the event's bytes, a reference count). A typical OpenAI chat chunk.
    let chunk = br#"{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1733140000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}"#;
    let mut g = c.benchmark_group("stream_event");
    g.bench_function("parse_and_write_back", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_slice(std::hint::black_box(chunk)).unwrap();
            let mut out = Vec::with_capacity(chunk.len() + 16);
            serde_json::to_writer(&mut out, &v).unwrap();
            out.len()
        })
    });
    let parsed: serde_json::Value = serde_json::from_slice(chunk).unwrap();
    g.bench_function("template_copy_of_the_parsed_data", |b| {
        b.iter(|| std::hint::black_box(&parsed).clone())
    });
    let bytes = bytes_of(chunk);
    g.bench_function("template_as_the_event_bytes", |b| {
        b.iter(|| std::hint::black_box(&bytes).clone())
    });
    g.finish();
}

/// A reference-counted buffer, as the gateway's events are (`bytes::Bytes`; an `Arc` here,
/// the same one atomic increment, without a dependency for a bench).
fn bytes_of(b: &[u8]) -> Arc<[u8]> {
    Arc::from(b)
}

criterion_group!(benches, bench);
criterion_main!(benches);
