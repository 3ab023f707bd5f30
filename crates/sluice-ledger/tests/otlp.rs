//! The OTLP logs sink: what it posts decodes, with `prost` and message definitions written here
//! from opentelemetry-proto (`logs/v1/logs.proto`, `common/v1/common.proto`), independently of
//! the sink's hand-written encoder, into one `LogRecord` per request record; a collector that
//! refuses is counted as dropped records.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message as _;
use sluice_ledger::sink::{OtlpSink, PostLogs};
use sluice_ledger::{now_us, Capture, Catalog, Ledger, Sink, SinkConfig};
use support::{record, test_config};

#[derive(Clone, PartialEq, prost::Message)]
struct ExportLogsServiceRequest {
    #[prost(message, repeated, tag = "1")]
    resource_logs: Vec<ResourceLogs>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ResourceLogs {
    #[prost(message, optional, tag = "1")]
    resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    scope_logs: Vec<ScopeLogs>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Resource {
    #[prost(message, repeated, tag = "1")]
    attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ScopeLogs {
    #[prost(message, optional, tag = "1")]
    scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    log_records: Vec<LogRecord>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct InstrumentationScope {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LogRecord {
    #[prost(fixed64, tag = "1")]
    time_unix_nano: u64,
    #[prost(fixed64, tag = "11")]
    observed_time_unix_nano: u64,
    #[prost(int32, tag = "2")]
    severity_number: i32,
    #[prost(string, tag = "3")]
    severity_text: String,
    #[prost(message, optional, tag = "5")]
    body: Option<AnyValue>,
    #[prost(message, repeated, tag = "6")]
    attributes: Vec<KeyValue>,
    #[prost(uint32, tag = "7")]
    dropped_attributes_count: u32,
    #[prost(fixed32, tag = "8")]
    flags: u32,
    #[prost(bytes = "vec", tag = "9")]
    trace_id: Vec<u8>,
    #[prost(string, tag = "12")]
    event_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct KeyValue {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(message, optional, tag = "2")]
    value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct AnyValue {
    #[prost(oneof = "Value", tags = "1, 2, 3, 4")]
    value: Option<Value>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Value {
    #[prost(string, tag = "1")]
    String(String),
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(int64, tag = "3")]
    Int(i64),
    #[prost(double, tag = "4")]
    Double(f64),
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

/// A collector that keeps the bodies it is posted, or refuses them all.
fn collector(refuse: bool) -> (PostLogs, Arc<Mutex<Vec<Vec<u8>>>>) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = bodies.clone();
    let post: PostLogs = Arc::new(move |body| {
        let kept = kept.clone();
        Box::pin(async move {
            if refuse {
                return Err("collector answered 503".to_string());
            }
            kept.lock().unwrap().push(body);
            Ok(())
        })
    });
    (post, bodies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_record_is_one_log_record_with_its_fields() {
    let (post, bodies) = collector(false);
    let sink = Sink::open(&SinkConfig::Otlp, "/".as_ref(), Some(post))
        .await
        .unwrap();
    let ledger = Ledger::start(&test_config(), sink);
    let catalog = Catalog::shipped();
    let now = now_us();
    let mut records: Vec<_> = (0..1_234)
        .map(|i| record(&catalog, i, now + i as i64))
        .collect();
    records[2].capture = Some(Box::new(Capture::new(
        "Authorization: Bearer sk-live-0123456789abcdef\nhello",
        "hi there",
        1024,
    )));
    records[2].guardrails = Some("no-secrets:redact:0.12ms".into());
    for r in &records {
        ledger.record(r.clone());
    }
    let report = ledger.shutdown(Duration::from_secs(10)).await;
    assert_eq!(report.stats.written, 1_234, "{report:?}");

    let mut logs = Vec::new();
    for body in bodies.lock().unwrap().iter() {
        let req = ExportLogsServiceRequest::decode(body.as_slice()).expect("valid protobuf");
        assert_eq!(req.resource_logs.len(), 1);
        let rl = &req.resource_logs[0];
        let res = rl.resource.as_ref().unwrap();
        assert_eq!(
            attr(&res.attributes, "service.name"),
            Some(&Value::String("sluice".into()))
        );
        let sl = &rl.scope_logs[0];
        assert_eq!(sl.scope.as_ref().unwrap().name, "sluice.ledger");
        logs.extend(sl.log_records.iter().cloned());
    }
    assert_eq!(logs.len(), 1_234);

    let log = logs
        .iter()
        .find(|l| attr(&l.attributes, "sluice.request_id") == Some(&Value::String("req-2".into())))
        .unwrap();
    let r = &records[2];
    assert_eq!(log.time_unix_nano, r.ts_us as u64 * 1_000);
    assert_eq!(log.severity_number, 9);
    assert_eq!(log.event_name, "sluice.request");
    let a = &log.attributes;
    assert_eq!(
        attr(a, "sluice.guardrails"),
        Some(&Value::String("no-secrets:redact:0.12ms".into()))
    );
    // A record without guardrails has no such attribute.
    assert!(
        logs.iter()
            .filter(|l| attr(&l.attributes, "sluice.request_id")
                != Some(&Value::String("req-2".into())))
            .all(|l| attr(&l.attributes, "sluice.guardrails").is_none())
    );
    assert_eq!(
        attr(a, "sluice.route"),
        Some(&Value::String("support".into()))
    );
    assert_eq!(
        attr(a, "gen_ai.response.model"),
        Some(&Value::String("claude-sonnet-4-5-20250929".into()))
    );
    assert_eq!(
        attr(a, "gen_ai.usage.input_tokens"),
        Some(&Value::Int(r.tokens.input as i64))
    );
    assert_eq!(
        attr(a, "sluice.usage.cache_read_tokens"),
        Some(&Value::Int(1_000))
    );
    assert_eq!(
        attr(a, "sluice.cost_micros"),
        Some(&Value::Int(r.pricing.cost_micros().unwrap()))
    );
    assert_eq!(
        attr(a, "sluice.pricing"),
        Some(&Value::String("priced".into()))
    );
    assert_eq!(attr(a, "sluice.stream"), Some(&Value::Bool(true)));
    assert_eq!(attr(a, "http.response.status_code"), Some(&Value::Int(200)));
    // The captured prompt left redacted.
    assert_eq!(
        attr(a, "sluice.capture.prompt"),
        Some(&Value::String("Authorization: [REDACTED]\nhello".into()))
    );
    // A refusal has no served model, no usage and no cost attribute.
    let refused = logs
        .iter()
        .find(|l| attr(&l.attributes, "sluice.request_id") == Some(&Value::String("req-9".into())))
        .unwrap();
    assert_eq!(attr(&refused.attributes, "gen_ai.response.model"), None);
    assert_eq!(attr(&refused.attributes, "sluice.cost_micros"), None);
    assert_eq!(
        attr(&refused.attributes, "sluice.pricing"),
        Some(&Value::String("no_usage".into()))
    );
}

#[tokio::test]
async fn a_refusing_collector_drops_counted_records() {
    let (post, _) = collector(true);
    let ledger = Ledger::start(&test_config(), Sink::Otlp(OtlpSink::new(post, "svc")));
    let catalog = Catalog::shipped();
    for i in 0..700 {
        ledger.record(record(&catalog, i, now_us()));
    }
    let report = ledger.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.stats.dropped_sink, 700, "{report:?}");
    assert_eq!(report.stats.failed_batches, 2, "{report:?}");
    // And the OTLP sink keeps nothing to query.
    let (post, _) = collector(false);
    let e = Sink::Otlp(OtlpSink::new(post, "svc"))
        .usage(&support::all_queries(0, 1)[0])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("`otlp`"), "{e}");
}

#[tokio::test]
async fn the_otlp_sink_needs_the_exporter() {
    let e = Sink::open(&SinkConfig::Otlp, "/".as_ref(), None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("needs the OTLP exporter"), "{e}");
}
