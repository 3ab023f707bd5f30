//! The OTLP logs sink: each record becomes one OTLP `LogRecord`, posted to the collector the
//! gateway already exports traces to.
//!
//! NOTE: the protobuf is written by hand, as the gateway's trace exporter writes its spans
//! (`sluice-gateway/src/trace/otlp.rs`): OTLP 1.x field numbers are frozen and the part a
//! ledger sends is a handful of messages, against a code generator or the `opentelemetry`
//! crates' runtime. The ledger does no HTTP itself (it depends on none of our crates): the
//! caller hands it [`PostLogs`], a function that posts the body (`application/x-protobuf`) to
//! `/v1/logs` with the collector's headers, so the one OTLP client stays in the gateway. Tests
//! decode the bytes with `prost` from independently written message definitions.
//!
//! Field numbers: opentelemetry-proto `collector/logs/v1/logs_service.proto`,
//! `logs/v1/logs.proto`, `common/v1/common.proto`, `resource/v1/resource.proto`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::SinkError;
use crate::record::{sat_i64, RequestRecord};

/// Posts one encoded `ExportLogsServiceRequest` to the collector; `Err` with a short reason
/// when the collector did not take it (the batch is then counted as dropped).
pub type PostLogs =
    Arc<dyn Fn(Vec<u8>) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// The OTLP logs sink.
#[derive(Clone)]
pub struct OtlpSink {
    post: PostLogs,
    service_name: Arc<str>,
}

impl std::fmt::Debug for OtlpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpSink")
            .field("service_name", &self.service_name)
            .finish_non_exhaustive()
    }
}

impl OtlpSink {
    /// A sink posting through `post`, naming `service_name` as the resource's `service.name`.
    pub fn new(post: PostLogs, service_name: &str) -> Self {
        OtlpSink {
            post,
            service_name: Arc::from(service_name),
        }
    }

    /// Encodes and posts `batch` as one export request.
    ///
    /// # Errors
    /// The collector refused it or could not be reached.
    pub async fn write(&self, batch: &[RequestRecord]) -> Result<(), SinkError> {
        let body = encode_logs(&self.service_name, batch);
        (self.post)(body).await.map_err(SinkError::Otlp)
    }
}

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

/// An append-only protobuf writer; nested messages are encoded into their own buffer first.
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

    fn fixed64(&mut self, field: u32, v: u64) {
        self.tag(field, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn message(&mut self, field: u32, build: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::default();
        build(&mut inner);
        self.bytes(field, &inner.buf);
    }

    /// `KeyValue { key = 1; AnyValue value = 2 }` with a string value
    /// (`AnyValue.string_value = 1`).
    fn attr_str(&mut self, field: u32, key: &str, value: &str) {
        self.message(field, |kv| {
            kv.bytes(1, key.as_bytes());
            kv.message(2, |any| any.bytes(1, value.as_bytes()));
        });
    }

    /// ... with an int value (`AnyValue.int_value = 3`, two's complement varint).
    fn attr_int(&mut self, field: u32, key: &str, value: i64) {
        self.message(field, |kv| {
            kv.bytes(1, key.as_bytes());
            kv.message(2, |any| {
                any.tag(3, VARINT);
                any.varint(value as u64);
            });
        });
    }

    /// ... with a bool value (`AnyValue.bool_value = 2`).
    fn attr_bool(&mut self, field: u32, key: &str, value: bool) {
        self.message(field, |kv| {
            kv.bytes(1, key.as_bytes());
            kv.message(2, |any| {
                any.tag(2, VARINT);
                any.varint(u64::from(value));
            });
        });
    }
}

/// `SeverityNumber.SEVERITY_NUMBER_INFO`.
const SEVERITY_INFO: u64 = 9;

/// The body of `POST /v1/logs`: one resource (`service.name`), one scope (`sluice.ledger`),
/// one `LogRecord` per record, its fields as attributes (`gen_ai.*` names where the GenAI
/// semantic conventions have one, `sluice.*` otherwise; absent values are left out).
pub fn encode_logs(service_name: &str, batch: &[RequestRecord]) -> Vec<u8> {
    let mut w = Writer::default();
    // ExportLogsServiceRequest.resource_logs = 1
    w.message(1, |rl| {
        // ResourceLogs.resource = 1 { attributes = 1 }
        rl.message(1, |res| {
            res.attr_str(1, "service.name", service_name);
            res.attr_str(1, "service.version", env!("CARGO_PKG_VERSION"));
        });
        // ResourceLogs.scope_logs = 2
        rl.message(2, |sl| {
            // ScopeLogs.scope = 1 { name = 1; version = 2 }
            sl.message(1, |scope| {
                scope.bytes(1, b"sluice.ledger");
                scope.bytes(2, env!("CARGO_PKG_VERSION").as_bytes());
            });
            for r in batch {
                // ScopeLogs.log_records = 2
                sl.message(2, |lr| log_record(lr, r));
            }
        });
    });
    w.buf
}

/// `LogRecord`: time_unix_nano = 1 (fixed64), severity_number = 2, severity_text = 3,
/// body = 5, attributes = 6, observed_time_unix_nano = 11 (fixed64), event_name = 12.
fn log_record(w: &mut Writer, r: &RequestRecord) {
    let nanos = u64::try_from(r.ts_us).unwrap_or(0).saturating_mul(1_000);
    w.fixed64(1, nanos);
    w.tag(2, VARINT);
    w.varint(SEVERITY_INFO);
    w.bytes(3, b"INFO");
    w.message(5, |any| any.bytes(1, b"sluice.request"));
    let a = 6;
    w.attr_str(a, "sluice.request_id", &r.request_id);
    let opt = |w: &mut Writer, k: &str, v: &Option<Arc<str>>| {
        if let Some(v) = v {
            w.attr_str(a, k, v);
        }
    };
    opt(w, "sluice.key_id", &r.key_id);
    opt(w, "sluice.team", &r.team);
    opt(w, "sluice.owner", &r.owner);
    w.attr_str(a, "sluice.route", &r.route);
    w.attr_str(a, "sluice.client_api", r.client_api);
    opt(w, "gen_ai.request.model", &r.requested_model);
    opt(w, "gen_ai.response.model", &r.served_model);
    opt(w, "sluice.upstream", &r.upstream);
    opt(w, "gen_ai.provider.name", &r.provider);
    w.attr_int(a, "sluice.attempts", i64::from(r.attempts));
    if let Some(c) = r.attempt_classes_joined() {
        w.attr_str(a, "sluice.attempt_classes", &c);
    }
    w.attr_int(a, "http.response.status_code", i64::from(r.status));
    w.attr_str(a, "sluice.end_reason", r.end_reason);
    w.attr_bool(a, "sluice.stream", r.stream);
    let t = &r.tokens;
    w.attr_int(a, "gen_ai.usage.input_tokens", sat_i64(t.input));
    w.attr_int(a, "gen_ai.usage.output_tokens", sat_i64(t.output));
    w.attr_int(a, "sluice.usage.cache_read_tokens", sat_i64(t.cache_read));
    w.attr_int(a, "sluice.usage.cache_write_tokens", sat_i64(t.cache_write));
    w.attr_int(
        a,
        "sluice.usage.cache_write_1h_tokens",
        sat_i64(t.cache_write_1h),
    );
    w.attr_int(a, "sluice.usage.reasoning_tokens", sat_i64(t.reasoning));
    w.attr_str(
        a,
        "sluice.pricing",
        match r.pricing.code() {
            0 => "priced",
            1 => "unpriced",
            _ => "no_usage",
        },
    );
    if let Some(cost) = r.pricing.cost_micros() {
        w.attr_int(a, "sluice.cost_micros", cost);
    }
    if let Some(entry) = r.pricing.entry() {
        w.attr_str(a, "sluice.price_entry", entry);
    }
    if let Some(v) = r.latency.first_byte_us {
        w.attr_int(a, "sluice.first_byte_us", sat_i64(v));
    }
    if let Some(v) = r.latency.first_token_us {
        w.attr_int(a, "sluice.first_token_us", sat_i64(v));
    }
    w.attr_int(a, "sluice.total_us", sat_i64(r.latency.total_us));
    w.attr_bool(a, "sluice.cache_hit", r.cache_hit);
    w.attr_bool(a, "sluice.idempotent_replay", r.idempotent_replay);
    if let Some(g) = &r.guardrails {
        w.attr_str(a, "sluice.guardrails", g);
    }
    if let Some(c) = &r.capture {
        w.attr_str(a, "sluice.capture.prompt", &c.prompt);
        w.attr_str(a, "sluice.capture.response", &c.response);
    }
    w.fixed64(11, nanos);
    w.bytes(12, b"sluice.request");
}
