//! The body of the `translate_stream` fuzz target, shared with the plain test that runs it in
//! CI over a corpus (`fuzz/fuzz_targets/translate_stream.rs` includes this file by path).
//!
//! Arbitrary upstream bytes, arbitrarily chunked, through every translator: it must not panic;
//! a translating translator must emit only complete SSE events whose data is JSON (or
//! `[DONE]`) and, for a fresh stream, a stream that follows the client's protocol; a
//! passthrough must emit exactly the upstream's events, in order, less at most the usage
//! chunks; and nothing may be held beyond the bounds.

use bytes::Bytes;
use serde_json::Value;
use sluice_providers::stream::{translator, Emitted, SpliceState, StreamOptions};
use sluice_providers::{Family, Operation, ProviderKind, Usage};
use sluice_sse::{Decoder, Item};

#[path = "../stream_support/mod.rs"]
mod stream_support;

const OPS: [Operation; 4] = [
    Operation::ChatCompletions,
    Operation::Messages,
    Operation::Completions,
    Operation::Responses,
];

/// Most bytes the translator may hold: one tool call's arguments (its cap is 1 MiB, far above
/// any fuzz input, so the input's length bounds it).
fn held_bound(input: &[u8]) -> usize {
    input.len()
}

/// `data[0]` picks the client op and the upstream, `data[1]` the options and the chunk size;
/// the rest is the upstream's stream.
pub fn check(data: &[u8]) {
    let (head, input) = data.split_at(data.len().min(2));
    let pick = usize::from(head.first().copied().unwrap_or(0));
    let flags = head.get(1).copied().unwrap_or(0);
    // Half the `Completions` picks are a Gemini-native client instead (the other ops keep the
    // picks they had).
    let op = if pick & 0x80 != 0 && pick % 4 == 2 {
        Operation::StreamGenerateContent
    } else {
        OPS[pick % 4]
    };
    let provider = match (pick / 4) % 4 {
        0 => ProviderKind::OpenAi,
        1 => ProviderKind::Azure {
            api_version: "2024-10-21".into(),
        },
        2 => ProviderKind::Anthropic {
            version: "2023-06-01".into(),
        },
        _ => ProviderKind::Gemini,
    };
    let continuation = flags & 4 != 0;
    let splice = SpliceState {
        id: "cut\"id".into(),
        created: 7,
        model: "m\\odel".into(),
        open_text_block: Some(0),
        next_block: 1,
        next_tool_call: 0,
        usage: Usage {
            input: 3,
            output: 2,
            ..Usage::default()
        },
    };
    let mut opts = StreamOptions::new(op, &provider, "model \u{1F600}");
    opts.client_wants_usage = flags & 1 != 0;
    opts.track_text = flags & 2 != 0;
    opts.continuation = continuation;
    opts.splice = (flags & 8 != 0).then_some(&splice);
    let chunk = usize::from(flags >> 4);

    let translating = (matches!(op, Operation::ChatCompletions | Operation::Messages)
        && (provider.family() != op.family() || continuation))
        || (op == Operation::Responses && provider.family() != Family::OpenAi)
        || (op == Operation::StreamGenerateContent
            && (provider.family() != Family::Gemini || continuation));
    // A Responses client's `.done` events repeat the whole answer, so its writer holds the
    // text, reasoning and arguments (escaped: Gemini's arguments object grows by its quotes'
    // escapes) until the end.
    let bound = if op == Operation::Responses {
        2 * held_bound(input)
    } else {
        held_bound(input)
    };

    let mut t = translator(&opts);
    let mut dec = Decoder::with_max_event_bytes(4096).expect("in range");
    let input = Bytes::copy_from_slice(input);
    let mut out: Vec<Emitted> = Vec::new();
    let mut raws: Vec<Bytes> = Vec::new();
    let mut at = 0;
    let mut clean = true;
    'feed: while at < input.len() {
        let n = if chunk == 0 {
            input.len() - at
        } else {
            chunk.min(input.len() - at)
        };
        dec.feed(input.slice(at..at + n));
        at += n;
        while let Some(item) = dec.next_item() {
            match item {
                Ok(Item::Event(ev)) => {
                    raws.push(ev.raw().clone());
                    t.event(&ev, &mut out);
                    assert!(t.held_bytes() <= bound);
                }
                Ok(_) => {}
                Err(_) => {
                    clean = false;
                    break 'feed;
                }
            }
        }
    }
    if clean {
        dec.finish();
        while let Some(item) = dec.next_item() {
            match item {
                Ok(Item::Event(ev)) => {
                    raws.push(ev.raw().clone());
                    t.event(&ev, &mut out);
                }
                Ok(_) => {}
                Err(_) => clean = false,
            }
        }
        if clean {
            t.end(&mut out);
        }
    }
    let _ = (t.usage(), t.text(), t.splice_state());

    if translating {
        for e in &out {
            let (_, data) = stream_support::decode_one(&e.bytes);
            if data != "[DONE]" {
                serde_json::from_str::<Value>(&data)
                    .unwrap_or_else(|err| panic!("invalid JSON in a data line ({err}): {data}"));
            }
        }
        // A fresh stream follows the client's protocol (a continuation starts mid-message,
        // and OpenAI-shaped upstreams may omit what OpenAI clients need, so only these).
        if op == Operation::Responses {
            // Named events whose data repeats the name, numbered from 0.
            for (i, e) in out.iter().enumerate() {
                let (name, data) = stream_support::decode_one(&e.bytes);
                let v: Value = serde_json::from_str(&data).expect("checked above");
                assert_eq!(v["type"], name.as_str(), "{data}");
                assert_eq!(v["sequence_number"], i as u64, "{data}");
            }
        } else if op == Operation::StreamGenerateContent {
            // Unnamed events, each a whole response or an error.
            for e in &out {
                let (name, data) = stream_support::decode_one(&e.bytes);
                assert_eq!(name, "message", "{data}");
                let v: Value = serde_json::from_str(&data).expect("checked above");
                assert!(
                    v.get("candidates").is_some() || v.get("error").is_some(),
                    "{data}"
                );
            }
        } else if !continuation {
            match (op.family(), provider.family()) {
                (Family::OpenAi, Family::Anthropic | Family::Gemini) => {
                    let _ = stream_support::openai_message(&out);
                }
                (Family::Anthropic, _) => {
                    let _ = stream_support::anthropic_message(&out);
                }
                _ => {}
            }
        }
    } else {
        // Passthrough: the upstream's events, in order; only usage chunks may be missing.
        let mut it = raws.iter();
        for e in &out {
            assert!(
                it.by_ref().any(|raw| raw == &e.bytes),
                "a passthrough emitted bytes that are not an upstream event, in order"
            );
        }
        if provider.family() != Family::OpenAi || opts.client_wants_usage {
            assert_eq!(out.len(), raws.len(), "a passthrough dropped an event");
        }
    }
}
