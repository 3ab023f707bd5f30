//! Bedrock ConverseStream translation cost per event, on one core: translated events per
//! second (goal: at least 1,000,000), for each client family. `messages/*` feeds event-stream
//! messages decoded up front (the translator alone, as `benches/stream.rs` measures the SSE
//! pairs); `bytes/*` feeds the framed body in 16 KiB chunks, so the event-stream decoder (CRC
//! checks included) is in the figure too; `gateway/*` is what the gateway's relay does with a
//! Bedrock stream: the framed body through the translator, then the client's SSE events it
//! wrote through the SSE decoder and the client family's passthrough (commit and usage
//! classification), as for any upstream of the client's own format.
//!
//! Run: `cargo bench -p sluice-providers --bench bedrock -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_providers::bedrock::{BedrockStream, BedrockStreamOptions};
use sluice_providers::eventstream::{Decoder, Message};
use sluice_providers::Operation;

const EVENTS: usize = 2000;

const WORDS: [&str; 10] = [
    "Hello", " there", ",", " how", " can", " I", " help", " you", " today", "?",
];

fn event(kind: &'static str, payload: String) -> Message {
    Message::new(payload)
        .with_str(":event-type", kind)
        .with_str(":content-type", "application/json")
        .with_str(":message-type", "event")
}

/// messageStart, `n` text deltas (with the `p` padding Bedrock adds), stop, metadata.
fn text_stream(n: usize) -> Bytes {
    let mut s = BytesMut::new();
    let mut push = |m: Message| m.encode(&mut s).expect("encodes");
    push(event(
        "messageStart",
        r#"{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGH","role":"assistant"}"#.into(),
    ));
    for i in 0..n {
        let w = WORDS[i % WORDS.len()];
        push(event(
            "contentBlockDelta",
            format!(
                r#"{{"contentBlockIndex":0,"delta":{{"text":"{w}"}},"p":"abcdefghijklmnopq"}}"#
            ),
        ));
    }
    push(event(
        "contentBlockStop",
        r#"{"contentBlockIndex":0,"p":"abcdefgh"}"#.into(),
    ));
    push(event(
        "messageStop",
        r#"{"p":"abcdefgh","stopReason":"end_turn"}"#.into(),
    ));
    push(event("metadata", r#"{"metrics":{"latencyMs":403},"usage":{"inputTokens":11,"outputTokens":2000,"totalTokens":2011}}"#.into()));
    s.freeze()
}

/// One tool call whose arguments come in `n` fragments.
fn tool_stream(n: usize) -> Bytes {
    let mut s = BytesMut::new();
    let mut push = |m: Message| m.encode(&mut s).expect("encodes");
    push(event("messageStart", r#"{"role":"assistant"}"#.into()));
    push(event("contentBlockStart", r#"{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":"tooluse_kZJMlvQmRJ6eAyJE5GIl7Q","name":"write"}}}"#.into()));
    for i in 0..n {
        let frag = ["{\\\"text\\\": \\\"", "Hello", " wor", "ld\\n", "\\\"}"][i % 5];
        push(event(
            "contentBlockDelta",
            format!(r#"{{"contentBlockIndex":0,"delta":{{"toolUse":{{"input":"{frag}"}}}}}}"#),
        ));
    }
    push(event(
        "contentBlockStop",
        r#"{"contentBlockIndex":0}"#.into(),
    ));
    push(event("messageStop", r#"{"stopReason":"tool_use"}"#.into()));
    push(event(
        "metadata",
        r#"{"usage":{"inputTokens":11,"outputTokens":2000,"totalTokens":2011}}"#.into(),
    ));
    s.freeze()
}

fn decode(body: &Bytes) -> Vec<Message> {
    let mut d = Decoder::new();
    d.push(body);
    let mut v = Vec::new();
    while let Some(m) = d.next_message().expect("valid framing") {
        v.push(m);
    }
    v
}

fn options(op: Operation) -> BedrockStreamOptions<'static> {
    let mut o = BedrockStreamOptions::new(op, "anthropic.claude-3-5-sonnet-20240620-v1:0");
    o.client_wants_usage = true;
    o
}

fn bench_messages(c: &mut Criterion, name: &str, op: Operation, body: &Bytes) {
    let messages = decode(body);
    let mut group = c.benchmark_group("bedrock/messages");
    group.throughput(Throughput::Elements(messages.len() as u64));
    let mut out = Vec::with_capacity(messages.len() * 2);
    group.bench_function(name, |b| {
        b.iter(|| {
            let mut t = BedrockStream::new(&options(op));
            out.clear();
            for m in &messages {
                t.message(m, &mut out);
            }
            t.end(&mut out);
            black_box(out.len())
        })
    });
    group.finish();
}

fn bench_bytes(c: &mut Criterion, name: &str, op: Operation, body: &Bytes) {
    let events = decode(body).len();
    let mut group = c.benchmark_group("bedrock/bytes");
    group.throughput(Throughput::Elements(events as u64));
    let mut out = Vec::with_capacity(events * 2);
    group.bench_function(name, |b| {
        b.iter(|| {
            let mut t = BedrockStream::new(&options(op));
            out.clear();
            for chunk in body.chunks(16 * 1024) {
                t.feed(chunk, &mut out);
            }
            t.end(&mut out);
            black_box(out.len())
        })
    });
    group.finish();
}

/// The gateway's whole per-event work on a Bedrock stream (see the module docs).
fn bench_gateway(c: &mut Criterion, name: &str, op: Operation, body: &Bytes) {
    use sluice_providers::stream::{translator, StreamOptions};
    use sluice_sse::Item;
    let events = decode(body).len();
    let provider = match op.family() {
        sluice_providers::Family::Anthropic => sluice_providers::ProviderKind::anthropic(),
        sluice_providers::Family::Gemini => sluice_providers::ProviderKind::Gemini,
        sluice_providers::Family::OpenAi => sluice_providers::ProviderKind::OpenAi,
    };
    let mut group = c.benchmark_group("bedrock/gateway");
    group.throughput(Throughput::Elements(events as u64));
    let mut out = Vec::with_capacity(events * 2);
    let mut client = Vec::with_capacity(4);
    group.bench_function(name, |b| {
        b.iter(|| {
            let mut t = BedrockStream::new(&options(op));
            let mut pass = translator(&StreamOptions::new(op, &provider, "m"));
            let mut sse = sluice_sse::Decoder::default();
            let mut n = 0usize;
            let mut drain = |sse: &mut sluice_sse::Decoder, client: &mut Vec<_>| {
                while let Some(Ok(item)) = sse.next_item() {
                    if let Item::Event(ev) = item {
                        client.clear();
                        pass.event(&ev, client);
                        n += client.len();
                    }
                }
            };
            for chunk in body.chunks(16 * 1024) {
                out.clear();
                t.feed(chunk, &mut out);
                for e in out.drain(..) {
                    sse.feed(e.bytes);
                }
                drain(&mut sse, &mut client);
            }
            t.end(&mut out);
            for e in out.drain(..) {
                sse.feed(e.bytes);
            }
            sse.finish();
            drain(&mut sse, &mut client);
            black_box(n)
        })
    });
    group.finish();
}

/// The event-stream decoder alone, for the split between framing and translation.
fn bench_decode(c: &mut Criterion, body: &Bytes) {
    let events = decode(body).len();
    let mut group = c.benchmark_group("bedrock/decode");
    group.throughput(Throughput::Elements(events as u64));
    group.bench_function("text", |b| {
        b.iter(|| {
            let mut d = Decoder::new();
            let mut n = 0;
            for chunk in body.chunks(16 * 1024) {
                d.push(chunk);
                while let Some(m) = d.next_message().expect("valid framing") {
                    n += m.payload.len();
                }
            }
            black_box(n)
        })
    });
    group.finish();
}

fn translated(c: &mut Criterion) {
    let text = text_stream(EVENTS);
    let tool = tool_stream(EVENTS);
    bench_messages(c, "text_to_openai", Operation::ChatCompletions, &text);
    bench_messages(c, "text_to_anthropic", Operation::Messages, &text);
    bench_messages(c, "text_to_responses", Operation::Responses, &text);
    bench_messages(c, "text_to_gemini", Operation::StreamGenerateContent, &text);
    bench_messages(c, "tool_to_openai", Operation::ChatCompletions, &tool);
    bench_messages(c, "tool_to_anthropic", Operation::Messages, &tool);
    bench_bytes(c, "text_to_openai", Operation::ChatCompletions, &text);
    bench_bytes(c, "text_to_anthropic", Operation::Messages, &text);
    bench_decode(c, &text);
    bench_gateway(c, "text_to_openai", Operation::ChatCompletions, &text);
    bench_gateway(c, "text_to_anthropic", Operation::Messages, &text);
    bench_gateway(c, "text_to_responses", Operation::Responses, &text);
    bench_gateway(c, "text_to_gemini", Operation::StreamGenerateContent, &text);
}

criterion_group!(benches, translated);
criterion_main!(benches);
