//! What translation adds to a stream's first event (issue 28: at most 0.2 ms at the median):
//! the gateway's work from the upstream's first bytes to the client's first content event,
//! per stream, its setup included (translators built, the preamble parsed and written), for
//! the cloud routes and for a passthrough route beside them.
//!
//! Each iteration takes the head of an upstream's answer as it comes off the wire (its
//! preamble and first text delta, in one read) and runs it the way the relay does until the
//! first client event that is content:
//! - `passthrough/openai_chat`: an OpenAI chat stream to an OpenAI chat client: the SSE decoder
//!   and the OpenAI passthrough (the baseline every route pays);
//! - `bedrock/*`: ConverseStream framing (`messageStart`, the first `contentBlockDelta`)
//!   through a [`BedrockStream`] (event-stream decoder, CRC checks, writer), then the SSE
//!   decoder and the client family's passthrough, as on a Bedrock route;
//! - `vertex_gemini/*`, `vertex_claude/*`: Vertex answers in Gemini's and Anthropic's own
//!   stream formats, so their streams take the SSE translators of those families: the SSE
//!   decoder and the translator.
//!
//! The figure to read is a cloud route's time less the passthrough's.
//!
//! Run: `cargo bench -p sluice-providers --bench first_event -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion};
use sluice_providers::bedrock::{BedrockStream, BedrockStreamOptions};
use sluice_providers::eventstream::Message;
use sluice_providers::stream::{translator, Emitted, EventKind, StreamOptions};
use sluice_providers::{Operation, ProviderKind};
use sluice_sse::Item;

const BEDROCK_MODEL: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";

fn event(kind: &'static str, payload: &str) -> Message {
    Message::new(payload.to_string())
        .with_str(":event-type", kind)
        .with_str(":content-type", "application/json")
        .with_str(":message-type", "event")
}

/// ConverseStream's first read: `messageStart` and the first text delta, framed.
fn bedrock_head() -> Bytes {
    let mut s = BytesMut::new();
    event(
        "messageStart",
        r#"{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGH","role":"assistant"}"#,
    )
    .encode(&mut s)
    .expect("encodes");
    event(
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcdefghijklmnopq"}"#,
    )
    .encode(&mut s)
    .expect("encodes");
    s.freeze()
}

/// An OpenAI chat stream's first read: the role chunk and the first content chunk.
const OPENAI_HEAD: &str = concat!(
    "data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,",
    "\"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"fp_44709d6fcb\",\"choices\":[{\"index\":0,",
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,",
    "\"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"fp_44709d6fcb\",\"choices\":[{\"index\":0,",
    "\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
);

/// A Gemini stream's (Vertex's Gemini models) first chunk.
const GEMINI_HEAD: &str = concat!(
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hello\"}],\"role\": \"model\"},",
    "\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 4,\"candidatesTokenCount\": 1,",
    "\"totalTokenCount\": 5},\"modelVersion\": \"gemini-2.5-flash\",",
    "\"responseId\": \"IZI2acSKMoWl0-kPmYj2yQc\"}\n\n",
);

/// An Anthropic stream's (Vertex's Claude models) first read: `message_start`,
/// `content_block_start`, `ping` and the first text delta.
const ANTHROPIC_HEAD: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":",
    "\"msg_vrtx_01\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":",
    "\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":",
    "{\"input_tokens\":11,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,",
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: ping\ndata: {\"type\": \"ping\"}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,",
    "\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
);

/// SSE `head` through a fresh decoder and the translator for `op` from `provider` (built here:
/// its setup is part of the first event's cost), until the first content event; its size.
fn sse_first(
    op: Operation,
    provider: &ProviderKind,
    head: &Bytes,
    out: &mut Vec<Emitted>,
) -> usize {
    let mut opts = StreamOptions::new(op, provider, "client-model");
    opts.client_wants_usage = true;
    opts.created = 1_767_225_600;
    let mut t = translator(&opts);
    let mut sse = sluice_sse::Decoder::default();
    sse.feed(head.clone());
    out.clear();
    while let Some(Ok(item)) = sse.next_item() {
        if let Item::Event(ev) = item {
            t.event(&ev, out);
            if let Some(e) = out.iter().find(|e| e.kind == EventKind::Content) {
                return e.bytes.len();
            }
        }
    }
    panic!("no content event");
}

/// A Bedrock route's first event: the framed head through a [`BedrockStream`], its SSE
/// events through the decoder and the client family's passthrough, as the relay does.
fn bedrock_first(
    op: Operation,
    head: &Bytes,
    scratch: &mut Vec<Emitted>,
    out: &mut Vec<Emitted>,
) -> usize {
    let mut o = BedrockStreamOptions::new(op, BEDROCK_MODEL);
    o.client_wants_usage = true;
    o.created = 1_767_225_600;
    let mut b = BedrockStream::new(&o);
    let passthrough = match op.family() {
        sluice_providers::Family::Anthropic => ProviderKind::anthropic(),
        sluice_providers::Family::Gemini => ProviderKind::Gemini,
        sluice_providers::Family::OpenAi => ProviderKind::OpenAi,
    };
    let mut t = translator(&StreamOptions::new(op, &passthrough, BEDROCK_MODEL));
    let mut sse = sluice_sse::Decoder::default();
    scratch.clear();
    b.feed(head, scratch);
    for e in scratch.drain(..) {
        sse.feed(e.bytes);
    }
    out.clear();
    while let Some(Ok(item)) = sse.next_item() {
        if let Item::Event(ev) = item {
            t.event(&ev, out);
            if let Some(e) = out.iter().find(|e| e.kind == EventKind::Content) {
                return e.bytes.len();
            }
        }
    }
    panic!("no content event");
}

fn first_event(c: &mut Criterion) {
    let mut g = c.benchmark_group("first_event");
    let mut out = Vec::with_capacity(8);
    let mut scratch = Vec::with_capacity(8);

    let openai = Bytes::from_static(OPENAI_HEAD.as_bytes());
    g.bench_function("passthrough/openai_chat", |b| {
        b.iter(|| {
            black_box(sse_first(
                Operation::ChatCompletions,
                &ProviderKind::OpenAi,
                &openai,
                &mut out,
            ))
        })
    });

    let bedrock = bedrock_head();
    for (name, op) in [
        ("bedrock/to_openai_chat", Operation::ChatCompletions),
        ("bedrock/to_anthropic", Operation::Messages),
        ("bedrock/to_responses", Operation::Responses),
        ("bedrock/to_gemini", Operation::StreamGenerateContent),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| black_box(bedrock_first(op, &bedrock, &mut scratch, &mut out)))
        });
    }

    let gemini = Bytes::from_static(GEMINI_HEAD.as_bytes());
    let anthropic = Bytes::from_static(ANTHROPIC_HEAD.as_bytes());
    let claude = ProviderKind::anthropic();
    for (name, op, provider, head) in [
        (
            "vertex_gemini/to_openai_chat",
            Operation::ChatCompletions,
            &ProviderKind::Gemini,
            &gemini,
        ),
        (
            "vertex_gemini/to_responses",
            Operation::Responses,
            &ProviderKind::Gemini,
            &gemini,
        ),
        (
            "vertex_claude/to_openai_chat",
            Operation::ChatCompletions,
            &claude,
            &anthropic,
        ),
        (
            "vertex_claude/to_responses",
            Operation::Responses,
            &claude,
            &anthropic,
        ),
        (
            "vertex_claude/to_gemini",
            Operation::StreamGenerateContent,
            &claude,
            &anthropic,
        ),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| black_box(sse_first(op, provider, head, &mut out)))
        });
    }
    g.finish();
}

criterion_group!(benches, first_event);
criterion_main!(benches);
