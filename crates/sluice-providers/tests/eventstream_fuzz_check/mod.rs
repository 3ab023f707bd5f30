//! The property the `eventstream` fuzz target checks (`fuzz/fuzz_targets/eventstream.rs`), also
//! run by `cargo test` over pseudo-random inputs (`tests/eventstream.rs`): arbitrary bytes,
//! split into chunks the input's first bytes choose, through the event-stream decoder.
//!
//! - It never panics.
//! - Chunking changes nothing: the messages and the error (if any) are those of the same bytes
//!   pushed at once.
//! - It holds at most one capped message plus one chunk.
//! - Each message it returns is exactly the bytes it came from: encoding it again gives them.
//! - The Bedrock stream translator, fed the same bytes for either client family, never panics,
//!   gives the same events however the bytes are chunked, and ends with at most one error
//!   event, last.

#![allow(dead_code)]

use sluice_providers::bedrock::{BedrockStream, BedrockStreamOptions};
use sluice_providers::eventstream::{DecodeError, Decoder, Message};
use sluice_providers::stream::{Emitted, EventKind};
use sluice_providers::Operation;

/// A small cap, so that the fuzzer meets "too long" as easily as "fits".
const MAX: usize = 4096;

/// Everything the decoder made of `chunks`: the messages, then how it ended.
pub fn decode_all<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<Message>, Result<(), DecodeError>) {
    let mut d = Decoder::with_max_message_len(MAX);
    let mut out = Vec::new();
    for chunk in chunks {
        d.push(chunk);
        assert!(
            d.buffered() <= MAX + chunk.len(),
            "holds {} bytes after a {}-byte chunk",
            d.buffered(),
            chunk.len()
        );
        loop {
            match d.next_message() {
                Ok(Some(m)) => out.push(m),
                Ok(None) => break,
                Err(e) => return (out, Err(e)),
            }
        }
    }
    (out, d.finish())
}

/// Splits `data` into chunks whose sizes the first byte seeds.
pub fn chunks(data: &[u8]) -> Vec<&[u8]> {
    let Some((&seed, mut rest)) = data.split_first() else {
        return Vec::new();
    };
    let mut x = u32::from(seed) | 1;
    let mut out = Vec::new();
    while !rest.is_empty() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let n = (x as usize % 40 + 1).min(rest.len());
        let (a, b) = rest.split_at(n);
        out.push(a);
        rest = b;
    }
    out
}

/// The client events a Bedrock stream translator makes of `chunks`.
pub fn translate_all<'a>(
    op: Operation,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<Emitted> {
    let mut t = BedrockStream::new(&BedrockStreamOptions::new(op, "m"));
    let mut out = Vec::new();
    for c in chunks {
        t.feed(c, &mut out);
    }
    t.end(&mut out);
    assert!(t.is_closed(), "the client's stream is closed at the end");
    out
}

/// Bytes through the Bedrock translator for both client families, whole and chunked.
pub fn check_translation(pieces: &[&[u8]]) {
    let body: Vec<u8> = pieces.concat();
    for op in [Operation::ChatCompletions, Operation::Messages] {
        let whole = translate_all(op, [&body[..]]);
        let chunked = translate_all(op, pieces.iter().copied());
        assert_eq!(whole, chunked, "chunking changed the client's events");
        let errors = whole.iter().filter(|e| e.kind == EventKind::Error).count();
        assert!(errors <= 1, "one error event at most");
        if errors == 1 {
            assert_eq!(whole.last().map(|e| e.kind), Some(EventKind::Error));
        }
        for e in &whole {
            assert!(e.bytes.ends_with(b"\n\n"), "complete events only");
        }
    }
}

pub fn check(data: &[u8]) {
    let pieces = chunks(data);
    let body: Vec<u8> = pieces.concat();
    let whole = decode_all([&body[..]]);
    let chunked = decode_all(pieces.iter().copied());
    assert_eq!(whole, chunked, "chunking changed the result");
    let mut at = 0;
    for m in &whole.0 {
        let wire = m.to_bytes().expect("a decoded message encodes");
        assert_eq!(
            &body[at..at + wire.len()],
            &wire[..],
            "message at byte {at}"
        );
        at += wire.len();
    }
    check_translation(&pieces);
}
