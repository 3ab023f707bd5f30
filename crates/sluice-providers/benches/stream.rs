//! Stream translation cost per event, on one core: translated events per second for each
//! translating pair (goal: at least 1,000,000 per second), and what a passthrough costs per
//! event (classification and usage only; the bytes are not copied). Events are decoded once up
//! front, so this measures the translator alone (the decoder has its own bench in sluice-sse).
//!
//! Run: `cargo bench -p sluice-providers --bench stream -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_providers::stream::{translator, Emitted, EventKind, StreamOptions};
use sluice_providers::{Operation, ProviderKind};
use sluice_sse::{Decoder, Event, Item};

const EVENTS: usize = 2000;

const WORDS: [&str; 10] = [
    "Hello", " there", ",", " how", " can", " I", " help", " you", " today", "?",
];

fn decode(stream: Bytes) -> Vec<Event> {
    let mut dec = Decoder::new();
    dec.feed(stream);
    dec.finish();
    let mut v = Vec::new();
    while let Some(item) = dec.next_item() {
        if let Item::Event(ev) = item.expect("valid stream") {
            v.push(ev);
        }
    }
    v
}

/// An OpenAI chat stream: role chunk, `n` content chunks of ~200 bytes, finish, usage, [DONE].
fn openai_text(n: usize) -> Vec<Event> {
    let head = "{\"id\":\"chatcmpl-9xQz7Lb2Kc\",\"object\":\"chat.completion.chunk\",\"created\":1732900000,\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"index\":0,\"delta\":";
    let mut s = BytesMut::new();
    s.extend_from_slice(
        format!("data: {head}{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n").as_bytes(),
    );
    for i in 0..n {
        let w = WORDS[i % WORDS.len()];
        s.extend_from_slice(
            format!("data: {head}{{\"content\":\"{w}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n")
                .as_bytes(),
        );
    }
    s.extend_from_slice(
        format!("data: {head}{{}},\"logprobs\":null,\"finish_reason\":\"stop\"}}]}}\n\n")
            .as_bytes(),
    );
    s.extend_from_slice(b"data: {\"id\":\"chatcmpl-9xQz7Lb2Kc\",\"object\":\"chat.completion.chunk\",\"created\":1732900000,\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2000,\"total_tokens\":2010}}\n\ndata: [DONE]\n\n");
    decode(s.freeze())
}

/// An OpenAI stream of one tool call whose arguments come in `n` fragments.
fn openai_tool(n: usize) -> Vec<Event> {
    let head = "{\"id\":\"chatcmpl-9xQz7Lb2Kc\",\"object\":\"chat.completion.chunk\",\"created\":1732900000,\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"index\":0,\"delta\":";
    let mut s = BytesMut::new();
    s.extend_from_slice(format!("data: {head}{{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{{\"index\":0,\"id\":\"call_abc\",\"type\":\"function\",\"function\":{{\"name\":\"write\",\"arguments\":\"\"}}}}]}},\"finish_reason\":null}}]}}\n\n").as_bytes());
    for i in 0..n {
        let frag = ["{\\\"text\\\": \\\"", "Hello", " wor", "ld\\n", "\\\"}"][i % 5];
        s.extend_from_slice(format!("data: {head}{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":\"{frag}\"}}}}]}},\"finish_reason\":null}}]}}\n\n").as_bytes());
    }
    s.extend_from_slice(
        format!("data: {head}{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\ndata: [DONE]\n\n")
            .as_bytes(),
    );
    decode(s.freeze())
}

/// An Anthropic stream: message_start, a text block with `n` deltas, message_delta, stop.
fn anthropic_text(n: usize) -> Vec<Event> {
    let mut s = BytesMut::new();
    s.extend_from_slice(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-20250514\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    for i in 0..n {
        let w = WORDS[i % WORDS.len()];
        s.extend_from_slice(format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{w}\"}}}}\n\n").as_bytes());
    }
    s.extend_from_slice(b"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2000}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    decode(s.freeze())
}

/// A Gemini stream of `n` chunks, each a whole response with usage, the last with STOP.
fn gemini_text(n: usize) -> Vec<Event> {
    let mut s = BytesMut::new();
    for i in 0..n {
        let w = WORDS[i % WORDS.len()];
        let finish = if i + 1 == n {
            "\"finishReason\": \"STOP\","
        } else {
            ""
        };
        s.extend_from_slice(format!("data: {{\"candidates\": [{{\"content\": {{\"parts\": [{{\"text\": \"{w}\"}}],\"role\": \"model\"}},{finish}\"index\": 0}}],\"usageMetadata\": {{\"promptTokenCount\": 4,\"candidatesTokenCount\": {i},\"totalTokenCount\": {}}},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"IZI2acSKMoWl0-kPmYj2yQc\"}}\n\n", i + 4).as_bytes());
    }
    decode(s.freeze())
}

fn bench_pair(
    c: &mut Criterion,
    name: &str,
    op: Operation,
    provider: &ProviderKind,
    events: &[Event],
) {
    let mut group = c.benchmark_group("stream");
    group.throughput(Throughput::Elements(events.len() as u64));
    let mut out = Vec::with_capacity(events.len() * 2);
    group.bench_function(name, |b| {
        b.iter(|| {
            let mut opts = StreamOptions::new(op, provider, "model");
            opts.client_wants_usage = true;
            let mut t = translator(&opts);
            out.clear();
            for ev in events {
                t.event(ev, &mut out);
            }
            t.end(&mut out);
            black_box(out.len())
        })
    });
    group.finish();
}

fn translated(c: &mut Criterion) {
    let openai = ProviderKind::OpenAi;
    let anthropic = ProviderKind::Anthropic {
        version: "2023-06-01".into(),
    };
    let gemini = ProviderKind::Gemini;
    bench_pair(
        c,
        "anthropic_to_openai",
        Operation::ChatCompletions,
        &anthropic,
        &anthropic_text(EVENTS),
    );
    bench_pair(
        c,
        "openai_to_anthropic",
        Operation::Messages,
        &openai,
        &openai_text(EVENTS),
    );
    bench_pair(
        c,
        "openai_tool_args_to_anthropic",
        Operation::Messages,
        &openai,
        &openai_tool(EVENTS),
    );
    bench_pair(
        c,
        "gemini_to_openai",
        Operation::ChatCompletions,
        &gemini,
        &gemini_text(EVENTS),
    );
    bench_pair(
        c,
        "gemini_to_anthropic",
        Operation::Messages,
        &gemini,
        &gemini_text(EVENTS),
    );
    // The Responses API (issue 28): each delta is one event, and the text is kept for the
    // `.done` events and the final response.
    bench_pair(
        c,
        "anthropic_to_responses",
        Operation::Responses,
        &anthropic,
        &anthropic_text(EVENTS),
    );
    bench_pair(
        c,
        "gemini_to_responses",
        Operation::Responses,
        &gemini,
        &gemini_text(EVENTS),
    );
    // Gemini-native clients (issue 28).
    bench_pair(
        c,
        "anthropic_to_gemini",
        Operation::StreamGenerateContent,
        &anthropic,
        &anthropic_text(EVENTS),
    );
    bench_pair(
        c,
        "openai_to_gemini",
        Operation::StreamGenerateContent,
        &openai,
        &openai_text(EVENTS),
    );
    bench_pair(
        c,
        "passthrough_openai",
        Operation::ChatCompletions,
        &openai,
        &openai_text(EVENTS),
    );
    bench_pair(
        c,
        "passthrough_anthropic",
        Operation::Messages,
        &anthropic,
        &anthropic_text(EVENTS),
    );
}

/// The relay without translators: each event's raw bytes forwarded, nothing looked at. The
/// passthrough's cost per event is its time minus this.
fn bare_forwarding(c: &mut Criterion) {
    let events = openai_text(EVENTS);
    let mut group = c.benchmark_group("stream");
    group.throughput(Throughput::Elements(events.len() as u64));
    let mut out = Vec::with_capacity(events.len());
    group.bench_function("bare_forwarding", |b| {
        b.iter(|| {
            out.clear();
            for ev in &events {
                out.push(Emitted {
                    bytes: ev.raw().clone(),
                    kind: EventKind::Content,
                });
            }
            black_box(out.len())
        })
    });
    group.finish();
}

criterion_group!(benches, translated, bare_forwarding);
criterion_main!(benches);
