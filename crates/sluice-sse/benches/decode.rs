//! Decoder throughput against `eventsource-stream` and `sseer`, on the same inputs in the same
//! run: (a) an OpenAI-style chat stream of ~200-byte events, (b) 1 MB events. Inputs are split
//! into deterministic 1.4–16 KB chunks, as a network would deliver them.
//!
//! Run: `cargo bench -p sluice-sse --bench decode -- --warm-up-time 1 --measurement-time 3`

use std::convert::Infallible;
use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use sluice_sse::{Decoder, Item};

/// xorshift64*: the same chunking on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Splits `stream` into pieces of 1.4 KB to 16 KB.
fn network_chunks(stream: &Bytes) -> Vec<Bytes> {
    let mut rng = Rng(0x00C0_FFEE);
    let mut chunks = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        let n = (1400 + (rng.next() % (16 * 1024 - 1400)) as usize).min(stream.len() - at);
        chunks.push(stream.slice(at..at + n));
        at += n;
    }
    chunks
}

/// Several thousand `chat.completion.chunk` events of about 200 bytes each (196–204).
fn openai_stream(events: usize) -> Bytes {
    let words = [
        "Hello", " there", ",", " how", " can", " I", " help", " you", " today", "?",
    ];
    let mut out = BytesMut::new();
    for i in 0..events {
        let word = words[i % words.len()];
        out.extend_from_slice(
            format!(
                "data: {{\"id\":\"chatcmpl-9xQz7Lb2Kc\",\"object\":\"chat.completion.chunk\",\
                 \"created\":1732900000,\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\
                 \"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
            )
            .as_bytes(),
        );
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out.freeze()
}

/// `count` events whose single data line is `size` bytes of JSON-ish text.
fn large_events(count: usize, size: usize) -> Bytes {
    let mut out = BytesMut::new();
    for _ in 0..count {
        out.extend_from_slice(b"data: {\"text\":\"");
        out.extend(std::iter::repeat_n(b'a', size));
        out.extend_from_slice(b"\"}\n\n");
    }
    out.freeze()
}

/// Our decoder: total data bytes of all events.
fn sluice(chunks: &[Bytes]) -> usize {
    let mut dec = Decoder::new();
    let mut total = 0;
    for chunk in chunks {
        dec.feed(chunk.clone());
        while let Some(item) = dec.next_item() {
            if let Item::Event(ev) = item.expect("valid stream") {
                total += ev.data().len();
            }
        }
    }
    dec.finish();
    assert!(dec.next_item().is_none());
    total
}

fn eventsource_stream(chunks: &[Bytes]) -> usize {
    let stream = futures::stream::iter(chunks.iter().cloned().map(Ok::<_, Infallible>));
    futures::executor::block_on(stream.eventsource().fold(0, |total, ev| async move {
        total + ev.expect("valid stream").data.len()
    }))
}

fn sseer(chunks: &[Bytes]) -> usize {
    let stream = futures::stream::iter(chunks.iter().cloned().map(Ok::<_, Infallible>));
    futures::executor::block_on(
        sseer::EventStream::new(stream).fold(0, |total, ev| async move {
            total + ev.expect("valid stream").data.len()
        }),
    )
}

type Parser = fn(&[Bytes]) -> usize;

const PARSERS: [(&str, Parser); 3] = [
    ("sluice-sse", sluice),
    ("sseer", sseer),
    ("eventsource-stream", eventsource_stream),
];

fn bench_input(c: &mut Criterion, name: &str, stream: &Bytes, samples: usize) {
    let chunks = network_chunks(stream);
    let expected = sluice(&chunks);
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.sample_size(samples);
    for (parser, run) in PARSERS {
        // All three must agree on what they decoded, or the comparison means nothing.
        assert_eq!(run(&chunks), expected, "{parser} decoded different data");
        group.bench_with_input(BenchmarkId::from_parameter(parser), &chunks, |b, chunks| {
            b.iter(|| black_box(run(black_box(chunks))))
        });
    }
    group.finish();
}

fn decode(c: &mut Criterion) {
    bench_input(c, "openai_chat_5000x200B", &openai_stream(5000), 50);
    bench_input(c, "large_events_4x1MB", &large_events(4, 1_000_000), 10);
}

criterion_group!(benches, decode);
criterion_main!(benches);
