//! What reading a request body's routing fields costs per byte: `head::route_request` (the
//! body probe the request path runs, which also checks the whole body is JSON) on chat
//! requests of ~0.1, 4 and 64 KB, beside serde_json skipping the same body
//! (`IgnoredAny`: the least serde can do to check it is JSON) in the same run.
//!
//! Run: `cargo bench -p sluice-gateway --bench probe -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use http::Method;
use sluice_gateway::config::Config;
use sluice_gateway::route::head::{route_request, Routed};

/// A chat request of about `target` bytes: a system prompt and turns of English prose with
/// the escapes real prompts carry (newlines, quotes, a tab, a non-ASCII character escaped).
fn chat_body(target: usize) -> Vec<u8> {
    const PROSE: &str = "The gateway forwards each event as it arrives, and a slow client \
        slows only its own stream.\\n Retries happen only when no byte reached the client; \
        \\\"idempotent\\\" requests may be sent again.\\tSee section 4.2 \\u00e9t\\u00e9.\\n";
    let mut messages = vec![format!(
        r#"{{"role":"system","content":"You are a helpful assistant.\n{PROSE}"}}"#
    )];
    let mut size = messages[0].len() + 100;
    let mut turn = 0;
    while size < target {
        let role = if turn % 2 == 0 { "user" } else { "assistant" };
        let m = format!(r#"{{"role":"{role}","content":"{}"}}"#, PROSE.repeat(4));
        size += m.len() + 1;
        messages.push(m);
        turn += 1;
    }
    format!(
        r#"{{"model":"gpt-4o","messages":[{}],"temperature":0.7,"max_tokens":512,"stream":true}}"#,
        messages.join(",")
    )
    .into_bytes()
}

fn bench(c: &mut Criterion) {
    let config = Config::from_toml(
        r#"
[[upstream]]
name = "u"
base_url = "http://127.0.0.1:9/v1"

[[route]]
models = ["gpt-*"]
upstream = "u"
"#,
        &|_| None,
    )
    .expect("bench config");
    let small =
        br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"max_tokens":16}"#;
    let bodies = [
        ("0.1KB", small.to_vec()),
        ("4KB", chat_body(4 * 1024)),
        ("64KB", chat_body(64 * 1024)),
    ];
    let mut g = c.benchmark_group("probe");
    for (name, body) in &bodies {
        // Both read it as JSON, and the probe finds what routing needs.
        assert!(serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok());
        let routed = route_request(&config, &Method::POST, "/v1/chat/completions", body);
        assert!(matches!(routed, Ok(Routed::Model { .. })), "{routed:?}");
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_with_input(BenchmarkId::new("sluice", name), body, |b, body| {
            b.iter(|| {
                route_request(
                    &config,
                    &Method::POST,
                    black_box("/v1/chat/completions"),
                    black_box(body),
                )
            })
        });
        g.bench_with_input(
            BenchmarkId::new("serde_ignored_any", name),
            body,
            |b, body| b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(body))),
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
