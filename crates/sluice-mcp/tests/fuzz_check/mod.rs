//! The property of the MCP fuzz target (`fuzz/fuzz_targets/mcp.rs`), shared with
//! `tests/fuzz_mcp.rs`, which runs it over deterministic pseudo-random inputs: whatever a
//! client sends as a JSON-RPC body, routing headers or session id, the gateway's parsing never
//! panics, and no session id it did not mint (unaltered) is accepted.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use sluice_mcp::jsonrpc::{self, Kind};
use sluice_mcp::protocol::{self, Version};
use sluice_mcp::session::{key_tag, SessionClaims, SessionCodec, UpstreamEntry, UpstreamState};

fn codec() -> &'static (SessionCodec, String) {
    static C: OnceLock<(SessionCodec, String)> = OnceLock::new();
    C.get_or_init(|| {
        let codec = SessionCodec::new(
            b"fuzz-secret-0123456789abcdef012345",
            Duration::from_secs(3600),
        );
        let id = codec.mint(&claims()).expect("mint");
        (codec, id)
    })
}

pub fn claims() -> SessionClaims {
    SessionClaims {
        issued_at: sluice_mcp::session::unix_now(SystemTime::now()),
        version: Version::V2025_11_25,
        key_tag: key_tag(Some("fuzz")),
        upstreams: vec![
            UpstreamEntry {
                server: "alpha".into(),
                state: UpstreamState::Session {
                    version: Version::V2025_06_18,
                    id: "0123456789abcdef0123456789abcdef".into(),
                },
            },
            UpstreamEntry {
                server: "beta".into(),
                state: UpstreamState::Sessionless {
                    version: Version::V2026_07_28,
                },
            },
            UpstreamEntry {
                server: "gamma".into(),
                state: UpstreamState::Unavailable,
            },
        ],
    }
}

/// The minted id every mutation starts from.
#[allow(dead_code)] // tests/fuzz_mcp.rs uses it; the fuzz target does not
pub fn minted() -> &'static str {
    &codec().1
}

pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => framing(rest),
        1 => foreign_session_id(rest),
        2 => altered_session_id(rest),
        _ => envelope(rest),
    }
}

fn framing(body: &[u8]) {
    match jsonrpc::parse(body) {
        Ok(m) => {
            if let Kind::Request { id, .. } | Kind::Response { id } = &m.kind {
                assert!(id.is_string() || id.is_i64() || id.is_u64(), "{id}");
            }
            // What is forwarded parses again to the same kind.
            let again = jsonrpc::parse(&m.to_bytes()).expect("a parsed message re-serializes");
            assert_eq!(again.kind, m.kind);
        }
        Err(rejected) => {
            let (id, e) = *rejected;
            assert!(e.code <= -32600 || e.code == jsonrpc::INVALID_PARAMS);
            let out = jsonrpc::error_body(id.as_ref(), &e);
            serde_json::from_slice::<serde_json::Value>(&out).expect("error bodies are JSON");
        }
    }
    let _ = jsonrpc::peek(body);
    let _ = jsonrpc::with_result_type(Bytes::copy_from_slice(body));
}

fn foreign_session_id(raw: &[u8]) {
    let (codec, _) = codec();
    let s = String::from_utf8_lossy(raw);
    assert!(
        codec
            .verify(&s, key_tag(Some("fuzz")), SystemTime::now())
            .is_err(),
        "{s}"
    );
}

fn altered_session_id(edit: &[u8]) {
    let (codec, id) = codec();
    let mut b = id.clone().into_bytes();
    // Each pair of input bytes: a position and a value to put there (or, past the end, to
    // append); an odd byte out truncates.
    for pair in edit.chunks(2) {
        match pair {
            [at, v] => {
                let i = *at as usize * b.len() / 256;
                if i < b.len() {
                    b[i] = *v;
                } else {
                    b.push(*v);
                }
            }
            [cut] => b.truncate(*cut as usize * b.len() / 256),
            _ => {}
        }
    }
    let s = String::from_utf8_lossy(&b);
    let r = codec.verify(&s, key_tag(Some("fuzz")), SystemTime::now());
    if s == id.as_str() {
        assert_eq!(r.expect("the minted id"), claims_of(codec, id));
    } else {
        assert!(r.is_err(), "an altered id was accepted: {s}");
    }
}

fn claims_of(codec: &SessionCodec, id: &str) -> SessionClaims {
    codec
        .verify(id, key_tag(Some("fuzz")), SystemTime::now())
        .expect("minted")
}

fn envelope(data: &[u8]) {
    // method \0 mcp-method \0 mcp-name \0 mcp-protocol-version \0 body
    let mut parts = data.splitn(5, |&b| b == 0);
    let method = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let mut headers = http::HeaderMap::new();
    for name in [protocol::METHOD, protocol::NAME, protocol::PROTOCOL_VERSION] {
        if let Some(v) = parts
            .next()
            .and_then(|v| http::HeaderValue::from_bytes(v).ok())
        {
            headers.insert(name, v);
        }
    }
    let body = parts.next().unwrap_or_default();
    let params = serde_json::from_slice::<serde_json::Value>(body).ok();
    if let Ok(env) = protocol::check_envelope(&method, params.as_ref(), &headers) {
        // Accepted only with the routing headers agreeing with the body.
        assert_eq!(
            headers.get(protocol::METHOD).and_then(|v| v.to_str().ok()),
            Some(method.as_str())
        );
        assert!(env.meta.contains_key(protocol::META_PROTOCOL_VERSION));
    }
    if let Ok(s) = std::str::from_utf8(body) {
        if let Some(d) = protocol::decode_header_value(s) {
            let _ = protocol::encode_header_value(&d);
        }
    }
}
