//! OTLP/HTTP protobuf encoding of `ExportTraceServiceRequest`, written by hand.
//!
//! NOTE: we accept writing the protobuf ourselves because the part of OTLP a gateway sends is
//! small and frozen (OTLP 1.x is stable: field numbers never change): resource, scope, spans
//! with string/int attributes and a status. The alternatives were the `opentelemetry` +
//! `opentelemetry-otlp` crates (a second async runtime integration, `tonic`/`reqwest` or our own
//! HTTP glue, and a global-provider model that fits a per-gateway registry badly) or `prost`
//! with the `.proto` files (a code generator and `protoc` at build time, or checked-in
//! generated code). Here it is four wire types and ~10 messages. The test receiver decodes
//! with `prost` from independently written message definitions, so an encoding mistake fails
//! a test. Field numbers: opentelemetry-proto `trace/v1/trace.proto`,
//! `common/v1/common.proto`, `resource/v1/resource.proto`.

use super::span::{AttrValue, SpanData};

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// A protobuf writer: append-only, nested messages encoded into their own buffer first.
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn tag(&mut self, field: u32, wire: u32) {
        self.varint(u64::from(field << 3 | wire));
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.tag(field, LEN);
        self.varint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.tag(field, VARINT);
            self.varint(v);
        }
    }

    fn fixed64(&mut self, field: u32, v: u64) {
        self.tag(field, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn fixed32(&mut self, field: u32, v: u32) {
        self.tag(field, FIXED32);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn message(&mut self, field: u32, build: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::default();
        build(&mut inner);
        self.bytes(field, &inner.buf);
    }
}

/// `KeyValue { string key = 1; AnyValue value = 2; }`,
/// `AnyValue { oneof { string string_value = 1; bool bool_value = 2; int64 int_value = 3 } }`.
fn key_value(w: &mut Writer, field: u32, key: &str, value: &AttrValue) {
    w.message(field, |kv| {
        kv.string(1, key);
        kv.message(2, |any| match value {
            AttrValue::Str(s) => any.bytes(1, s.as_bytes()),
            AttrValue::Int(i) => {
                any.tag(3, VARINT);
                // int64 is encoded as the two's complement u64.
                any.varint(*i as u64);
            }
        });
    });
}

/// The body of `POST /v1/traces`: one resource (`service.name`, the SDK attributes), one
/// instrumentation scope (`sluice`), and `spans`.
pub fn export_request(service_name: &str, spans: &[SpanData]) -> Vec<u8> {
    let mut w = Writer::default();
    // ExportTraceServiceRequest.resource_spans = 1
    w.message(1, |rs| {
        // ResourceSpans.resource = 1: Resource.attributes = 1
        rs.message(1, |res| {
            key_value(res, 1, "service.name", &AttrValue::Str(service_name.into()));
            key_value(
                res,
                1,
                "service.version",
                &AttrValue::Str(env!("CARGO_PKG_VERSION").into()),
            );
            key_value(
                res,
                1,
                "telemetry.sdk.name",
                &AttrValue::Str("sluice".into()),
            );
            key_value(
                res,
                1,
                "telemetry.sdk.language",
                &AttrValue::Str("rust".into()),
            );
        });
        // ResourceSpans.scope_spans = 2
        rs.message(2, |ss| {
            // ScopeSpans.scope = 1: InstrumentationScope { name = 1; version = 2 }
            ss.message(1, |scope| {
                scope.string(1, "sluice");
                scope.string(2, env!("CARGO_PKG_VERSION"));
            });
            for s in spans {
                // ScopeSpans.spans = 2
                ss.message(2, |sp| span(sp, s));
            }
        });
    });
    w.buf
}

/// `Span`: trace_id = 1, span_id = 2, parent_span_id = 4, name = 5, kind = 6,
/// start_time_unix_nano = 7 (fixed64), end_time_unix_nano = 8 (fixed64), attributes = 9,
/// status = 15 (`Status { message = 2; code = 3 }`), flags = 16 (fixed32).
fn span(w: &mut Writer, s: &SpanData) {
    w.bytes(1, &s.trace_id);
    w.bytes(2, &s.span_id);
    if let Some(p) = &s.parent_span_id {
        w.bytes(4, p);
    }
    w.string(5, &s.name);
    w.uint(6, s.kind as u64);
    w.fixed64(7, s.start_unix_nanos);
    w.fixed64(8, s.end_unix_nanos);
    for (k, v) in &s.attributes {
        key_value(w, 9, k, v);
    }
    if s.status as u64 != 0 || !s.status_message.is_empty() {
        w.message(15, |st| {
            st.string(2, &s.status_message);
            st.uint(3, s.status as u64);
        });
    }
    // The W3C trace flags (sampled) and, bits 8-9, "the parent is known remote or not"
    // (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK = 0x100, IS_REMOTE = 0x200).
    let remote = match (&s.parent_span_id, s.parent_is_remote) {
        (Some(_), true) => 0x300,
        _ => 0x100,
    };
    w.fixed32(16, 0x01 | remote);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_little_endian_base_128() {
        let mut w = Writer::default();
        w.varint(1);
        w.varint(300);
        w.varint(u64::MAX);
        assert_eq!(&w.buf[..3], &[0x01, 0xac, 0x02]);
        assert_eq!(w.buf.len(), 3 + 10);
    }
}
