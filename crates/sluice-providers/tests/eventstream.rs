//! The event-stream decoder, property-tested: any messages, encoded and re-chunked at every
//! byte boundary (and byte by byte), decode to the same messages; random bytes never panic and
//! decode the same however chunked; any single flipped bit in a message is a CRC error.

mod eventstream_fuzz_check;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_providers::eventstream::{DecodeError, Decoder, HeaderValue, Message, Str};

fn header_value() -> impl Strategy<Value = HeaderValue> {
    prop_oneof![
        any::<bool>().prop_map(HeaderValue::Bool),
        any::<i8>().prop_map(HeaderValue::Byte),
        any::<i16>().prop_map(HeaderValue::Int16),
        any::<i32>().prop_map(HeaderValue::Int32),
        any::<i64>().prop_map(HeaderValue::Int64),
        prop::collection::vec(any::<u8>(), 0..40)
            .prop_map(|v| HeaderValue::ByteArray(Bytes::from(v))),
        "[a-zA-Z:/ é-]{0,30}".prop_map(|s| HeaderValue::String(Str::from(s))),
        any::<i64>().prop_map(HeaderValue::Timestamp),
        any::<[u8; 16]>().prop_map(HeaderValue::Uuid),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (
        prop::collection::vec(("[a-z:-]{1,20}", header_value()), 0..6),
        prop::collection::vec(any::<u8>(), 0..120),
    )
        .prop_map(|(headers, payload)| {
            headers
                .into_iter()
                .fold(Message::new(payload), |m, (name, value)| {
                    m.with_header(Str::from(name), value)
                })
        })
}

fn encode(messages: &[Message]) -> Vec<u8> {
    let mut out = BytesMut::new();
    for m in messages {
        m.encode(&mut out).unwrap();
    }
    out.to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn rechunked_at_every_byte_boundary(messages in prop::collection::vec(message(), 0..4)) {
        let wire = encode(&messages);
        for cut in 0..=wire.len() {
            let (got, end) = eventstream_fuzz_check::decode_all([&wire[..cut], &wire[cut..]]);
            prop_assert_eq!(end, Ok(()));
            prop_assert_eq!(&got, &messages, "cut at {}", cut);
        }
        let bytes = wire.iter().map(std::slice::from_ref);
        prop_assert_eq!(eventstream_fuzz_check::decode_all(bytes), (messages, Ok(())));
    }

    #[test]
    fn a_flipped_bit_is_a_crc_error(m in message(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut wire = m.to_bytes().unwrap().to_vec();
        let i = at.index(wire.len());
        wire[i] ^= 1 << bit;
        let mut d = Decoder::new();
        d.push(&wire);
        let got = d.next_message();
        prop_assert!(
            matches!(got, Err(DecodeError::PreludeCrc { .. } | DecodeError::MessageCrc { .. })),
            "byte {} bit {}: {:?}", i, bit, got
        );
    }

    #[test]
    fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..600)) {
        eventstream_fuzz_check::check(&data);
    }

    #[test]
    fn a_valid_prefix_then_garbage(m in message(), junk in prop::collection::vec(any::<u8>(), 1..64)) {
        let mut wire = m.to_bytes().unwrap().to_vec();
        wire.extend_from_slice(&junk);
        let (got, end) = eventstream_fuzz_check::decode_all([&wire[..]]);
        prop_assert_eq!(got, vec![m]);
        prop_assert!(end.is_err());
        eventstream_fuzz_check::check(&wire);
    }
}

/// A ConverseStream of events drawn from the documented types with random fields (indexes
/// that do not match, missing members, wrong JSON, exceptions anywhere), framed correctly, so
/// the translator's state machine rather than the framing is what the input exercises.
fn bedrock_event() -> impl Strategy<Value = Message> {
    let text = "[a-zA-Z \\\"{}:]{0,12}";
    let payload = prop_oneof![
        Just(r#"{"role":"assistant"}"#.to_string()),
        (0u32..3, text).prop_map(|(i, t)| format!(
            r#"{{"contentBlockIndex":{i},"delta":{{"text":{}}}}}"#,
            serde_json::Value::from(t)
        )),
        (0u32..3, text).prop_map(|(i, t)| format!(
            r#"{{"contentBlockIndex":{i},"delta":{{"toolUse":{{"input":{}}}}}}}"#,
            serde_json::Value::from(t)
        )),
        (0u32..3, text).prop_map(|(i, t)| format!(
            r#"{{"contentBlockIndex":{i},"delta":{{"reasoningContent":{{"text":{}}}}}}}"#,
            serde_json::Value::from(t)
        )),
        (0u32..3).prop_map(|i| format!(
            r#"{{"contentBlockIndex":{i},"start":{{"toolUse":{{"toolUseId":"t{i}","name":"f"}}}}}}"#
        )),
        (0u32..3).prop_map(|i| format!(r#"{{"contentBlockIndex":{i}}}"#)),
        prop::sample::select(vec![
            "end_turn",
            "tool_use",
            "max_tokens",
            "guardrail_intervened"
        ])
        .prop_map(|r| format!(r#"{{"stopReason":"{r}"}}"#)),
        Just(r#"{"usage":{"inputTokens":3,"outputTokens":4,"totalTokens":7}}"#.to_string()),
        text.prop_map(|t| t.to_string()),
    ];
    let kind = prop::sample::select(vec![
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "throttlingException",
        "somethingNew",
    ]);
    (kind, payload).prop_map(|(kind, payload)| {
        let m = Message::new(payload);
        if kind.ends_with("Exception") {
            m.with_str(":message-type", "exception")
                .with_str(":exception-type", kind)
        } else {
            m.with_str(":message-type", "event")
                .with_str(":event-type", kind)
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn bedrock_streams_of_any_events(events in prop::collection::vec(bedrock_event(), 0..12), seed in any::<u8>()) {
        let wire = encode(&events);
        let mut data = vec![seed];
        data.extend_from_slice(&wire);
        eventstream_fuzz_check::check(&data);
    }
}

/// Random bytes that start with a valid prelude get past the first check, where the
/// interesting failures are.
#[test]
fn valid_preludes_with_random_bodies() {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..3000 {
        let total = 16 + (next() % 200) as u32;
        let headers = (next() % u64::from(total - 15)) as u32;
        let mut wire = Vec::new();
        wire.extend_from_slice(&total.to_be_bytes());
        wire.extend_from_slice(&headers.to_be_bytes());
        let crc = crc32(&wire);
        wire.extend_from_slice(&crc.to_be_bytes());
        while wire.len() < total as usize - 4 {
            wire.push(next() as u8);
        }
        let crc = crc32(&wire);
        wire.extend_from_slice(&crc.to_be_bytes());
        let mut seeded = vec![next() as u8];
        seeded.extend_from_slice(&wire);
        eventstream_fuzz_check::check(&seeded);
    }
}

/// CRC-32 (IEEE), bit by bit: an implementation apart from the one under test.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
