//! The property the `eventstream` fuzz target checks (`fuzz/fuzz_targets/eventstream.rs`), also
//! run by `cargo test` over pseudo-random inputs (`tests/eventstream.rs`): arbitrary bytes,
//! split into chunks the input's first bytes choose, through the event-stream decoder.
//!
//! - It never panics.
//! - Chunking changes nothing: the messages and the error (if any) are those of the same bytes
//!   pushed at once.
//! - It holds at most one capped message plus one chunk.
//! - Each message it returns is exactly the bytes it came from: encoding it again gives them.

#![allow(dead_code)]

use sluice_providers::eventstream::{DecodeError, Decoder, Message};

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
}
