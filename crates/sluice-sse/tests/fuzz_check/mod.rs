//! The body of the `decode` fuzz target, shared with the plain test that runs it in CI
//! (`fuzz/fuzz_targets/decode.rs` includes this file by path).

use bytes::Bytes;
use sluice_sse::{DecodeError, Decoder, Item};

/// Decodes `input`, split into chunks by `sizes` (cycled; 0 means "one chunk"), and returns the
/// items and the final error, checking the memory bound after every step.
pub fn decode_chunked(
    input: &[u8],
    sizes: &[usize],
    max: usize,
) -> (Vec<Item>, Option<DecodeError>) {
    let mut dec = Decoder::with_max_event_bytes(max).expect("max is in range");
    let input = Bytes::copy_from_slice(input);
    let mut items = Vec::new();
    let mut at = 0;
    let mut size = sizes.iter().copied().cycle();
    let drain = |dec: &mut Decoder, items: &mut Vec<Item>| -> Option<DecodeError> {
        while let Some(r) = dec.next_item() {
            // The decoder never holds more copied bytes than the limit.
            assert!(
                dec.buffered_bytes() <= max,
                "buffered {} > {max}",
                dec.buffered_bytes()
            );
            match r {
                Ok(item) => items.push(item),
                Err(e) => return Some(e),
            }
        }
        assert!(
            dec.buffered_bytes() <= max,
            "buffered {} > {max}",
            dec.buffered_bytes()
        );
        None
    };
    while at < input.len() {
        let n = match size.next() {
            Some(0) | None => input.len() - at,
            Some(n) => n.min(input.len() - at),
        };
        dec.feed(input.slice(at..at + n));
        at += n;
        if let Some(e) = drain(&mut dec, &mut items) {
            return (items, Some(e));
        }
    }
    dec.finish();
    let err = drain(&mut dec, &mut items);
    (items, err)
}

/// The fuzz property: `data[0]` picks a small limit, `data[1..4]` chunk sizes, the rest is the
/// stream. Decoding must not panic, must stay within the limit, must give the same result
/// however the stream is chunked, and (unless an event was too large) its raw spans must
/// reproduce the input exactly.
pub fn check(data: &[u8]) {
    let (head, input) = data.split_at(data.len().min(4));
    let max = 1 + usize::from(head.first().copied().unwrap_or(255)) * 4;
    let sizes: Vec<usize> = head.iter().skip(1).map(|&b| usize::from(b % 17)).collect();

    let (items, err) = decode_chunked(input, &sizes, max);
    let (whole_items, whole_err) = decode_chunked(input, &[0], max);
    assert_eq!(items, whole_items, "chunking changed the items");
    assert_eq!(err, whole_err, "chunking changed the error");

    if !matches!(err, Some(DecodeError::EventTooLarge { .. })) {
        let mut raw: Vec<u8> = items.iter().flat_map(|i| i.raw().to_vec()).collect();
        if let Some(DecodeError::Truncated { raw: rest }) = &err {
            raw.extend_from_slice(rest);
        }
        assert_eq!(raw, input, "raw spans do not reproduce the input");
    }
    for item in &items {
        if let Item::Event(ev) = item {
            assert!(ev.raw().len() <= max);
            let _ = ev.data_str();
        }
    }
}
