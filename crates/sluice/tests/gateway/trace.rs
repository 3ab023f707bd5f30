//! OpenTelemetry traces end to end: the gateway exports OTLP/HTTP protobuf to a real receiver
//! (`collector`), continues the client's `traceparent` and sends its own upstream.

use std::time::Duration;

use sluice::Server;
use sluice_gateway::config::Config;
use sluice_mock::MockServer;

use crate::collector::{Collector, Span};
use crate::support::*;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

async fn traced_gateway(mock: &MockServer, endpoint: &str, telemetry: &str) -> Server {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\n[[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\n[[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\n\n[telemetry]\nendpoint = \"{endpoint}\"\nbatch_interval = \"50ms\"\nservice_name = \"sluice-test\"\nheaders = {{ \"x-collector-key\" = \"${{COLLECTOR_KEY}}\" }}\n{telemetry}\n",
        mock.url()
    );
    let cfg = Config::from_toml(&text, &|k| {
        (k == "COLLECTOR_KEY").then(|| "ck-secret".to_string())
    })
    .unwrap_or_else(|e| panic!("{e}\n{text}"));
    Server::start(cfg).await.unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn with_header(
    mut r: http::Request<bytes::Bytes>,
    k: &'static str,
    v: &str,
) -> http::Request<bytes::Bytes> {
    r.headers_mut().insert(k, v.parse().unwrap());
    r
}

/// The mock's record of the `traceparent` it received on its last request.
fn upstream_traceparent(mock: &MockServer) -> Option<String> {
    let snap = mock.stats().snapshot();
    let last = snap.requests.last()?;
    last.headers
        .iter()
        .find(|(k, _)| k == "traceparent")
        .map(|(_, v)| v.clone())
}

#[tokio::test]
async fn request_attempt_and_phase_spans_reach_the_collector() {
    let collector = Collector::start().await;
    let mock = mock("").await;
    let gw = traced_gateway(&mock, &format!("http://{}", collector.addr), "").await;
    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let r = h1(
        gw.addr(),
        with_header(
            request(
                "POST",
                "/v1/chat/completions",
                "tokens=4",
                r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#,
            ),
            "traceparent",
            &traceparent,
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    let usage = r.json()["usage"].clone();
    // The upstream continues the client's trace under the gateway's request span.
    let up = upstream_traceparent(&mock).expect("traceparent sent upstream");
    assert!(up.starts_with(&format!("00-{CLIENT_TRACE}-")), "{up}");
    assert!(up.ends_with("-01"), "{up}");
    let gateway_span = up[36..52].to_string();
    assert_ne!(gateway_span, CLIENT_SPAN);

    let spans = collector
        .wait_for("request, attempt and phase spans", |s| s.len() >= 4)
        .await;
    let by_name = |n: &str| -> &Span {
        spans
            .iter()
            .find(|s| s.name == n)
            .unwrap_or_else(|| panic!("no span {n}: {spans:#?}"))
    };
    let req = by_name("chat gpt-4o");
    assert_eq!(hex(&req.trace_id), CLIENT_TRACE);
    assert_eq!(hex(&req.span_id), gateway_span);
    assert_eq!(hex(&req.parent_span_id), CLIENT_SPAN);
    assert_eq!(req.kind, 2, "SERVER");
    assert_eq!(req.flags & 0x301, 0x301, "sampled, remote parent");
    assert!(req.end_time_unix_nano > req.start_time_unix_nano);
    assert_eq!(req.str("gen_ai.operation.name"), Some("chat"));
    assert_eq!(req.str("gen_ai.provider.name"), Some("openai"));
    assert_eq!(req.str("gen_ai.request.model"), Some("gpt-4o"));
    assert!(req.str("gen_ai.response.model").is_some(), "{req:#?}");
    assert_eq!(
        req.int("gen_ai.usage.input_tokens"),
        usage["prompt_tokens"].as_i64()
    );
    assert_eq!(
        req.int("gen_ai.usage.output_tokens"),
        usage["completion_tokens"].as_i64()
    );
    assert_eq!(req.int("http.response.status_code"), Some(200));
    assert_eq!(req.str("sluice.end_reason"), Some("completed"));
    assert_eq!(req.status.as_ref().map_or(0, |s| s.code), 0);

    let attempt = by_name("attempt mock");
    assert_eq!(attempt.kind, 3, "CLIENT");
    assert_eq!(attempt.parent_span_id, req.span_id);
    assert_eq!(attempt.str("sluice.attempt.outcome"), Some("ok"));
    assert!(attempt.start_time_unix_nano >= req.start_time_unix_nano);
    assert!(attempt.end_time_unix_nano <= req.end_time_unix_nano);
    for phase in ["acquire", "connect", "first_byte"] {
        let p = by_name(phase);
        assert_eq!(p.parent_span_id, attempt.span_id, "{phase}");
        assert_eq!(p.trace_id, req.trace_id);
        assert!(p.end_time_unix_nano >= p.start_time_unix_nano, "{phase}");
    }

    let got = collector.received.lock();
    let (parts, export) = &got.requests[0];
    // Configured headers go to the collector; the resource names the service.
    assert_eq!(parts.headers["x-collector-key"], "ck-secret");
    let res = export.resource_spans[0].resource.as_ref().unwrap();
    assert!(res.attributes.iter().any(|kv| kv.key == "service.name"
        && kv.value.as_ref().and_then(|v| v.value.clone())
            == Some(crate::collector::Value::Str("sluice-test".into()))));
    assert_eq!(
        export.resource_spans[0].scope_spans[0]
            .scope
            .as_ref()
            .unwrap()
            .name,
        "sluice"
    );
}

#[tokio::test]
async fn streams_report_usage_and_failed_attempts_are_errors() {
    let collector = Collector::start().await;
    let mock = mock("").await;
    let gw = traced_gateway(&mock, &format!("http://{}/v1/traces", collector.addr), "").await;
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/messages",
            "tokens=5",
            r#"{"model":"claude-x","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    // A new trace (no client traceparent) is started and sent upstream.
    let up = upstream_traceparent(&mock).expect("traceparent sent upstream");
    assert_eq!(up.len(), 55);
    let spans = collector
        .wait_for("the stream's span", |s| {
            s.iter().any(|s| s.name == "chat claude-x")
        })
        .await;
    let req = spans.iter().find(|s| s.name == "chat claude-x").unwrap();
    assert!(req.parent_span_id.is_empty(), "a root span");
    assert_eq!(hex(&req.trace_id), up[3..35]);
    assert_eq!(req.str("gen_ai.provider.name"), Some("anthropic"));
    assert_eq!(req.int("gen_ai.usage.output_tokens"), Some(5));
    assert!(req.int("gen_ai.usage.input_tokens").is_some(), "{req:#?}");

    // An upstream error: the attempt and the request are errors, with the status.
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "status=500",
            r#"{"model":"broken"}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 500);
    let spans = collector
        .wait_for("the failed request's span", |s| {
            s.iter().any(|s| s.name == "chat broken")
        })
        .await;
    let req = spans.iter().find(|s| s.name == "chat broken").unwrap();
    assert_eq!(req.status.as_ref().unwrap().code, 2, "ERROR");
    assert_eq!(req.int("http.response.status_code"), Some(500));
    assert_eq!(req.str("error.type"), Some("upstream_error"));
    let attempts: Vec<_> = spans
        .iter()
        .filter(|s| s.parent_span_id == req.span_id)
        .collect();
    assert!(!attempts.is_empty());
    assert!(attempts
        .iter()
        .all(|a| a.status.as_ref().unwrap().code == 2));
    assert!(attempts
        .iter()
        .all(|a| a.int("http.response.status_code") == Some(500)));
}

#[tokio::test]
async fn sampling_follows_the_ratio_and_the_client_flag() {
    let collector = Collector::start().await;
    let mock = mock("").await;
    let gw = traced_gateway(
        &mock,
        &format!("http://{}", collector.addr),
        "sampling_ratio = 0.0",
    )
    .await;
    // Not sampled: no span, and no traceparent invented for the upstream.
    for _ in 0..5 {
        let r = h1(
            gw.addr(),
            request("POST", "/v1/chat/completions", "", r#"{"model":"m"}"#),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(upstream_traceparent(&mock), None);
    }
    // A client's unsampled traceparent passes unchanged.
    let unsampled = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-00");
    let r = h1(
        gw.addr(),
        with_header(
            request("POST", "/v1/chat/completions", "", r#"{"model":"m"}"#),
            "traceparent",
            &unsampled,
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        upstream_traceparent(&mock).as_deref(),
        Some(unsampled.as_str())
    );
    // A sampled one is recorded whatever the ratio.
    let sampled = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    h1(
        gw.addr(),
        with_header(
            request("POST", "/v1/chat/completions", "", r#"{"model":"sampled"}"#),
            "traceparent",
            &sampled,
        ),
    )
    .await;
    let spans = collector
        .wait_for("the sampled request", |s| {
            s.iter().any(|s| s.name == "chat sampled")
        })
        .await;
    assert!(
        spans.iter().all(|s| hex(&s.trace_id) == CLIENT_TRACE),
        "only the sampled trace"
    );
}

#[tokio::test]
async fn a_dead_collector_costs_only_a_counter() {
    // Nothing listens there: every export fails; the queue is tiny, so it also fills.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mock = mock("").await;
    let gw = traced_gateway(
        &mock,
        &format!("http://127.0.0.1:{port}"),
        "batch_size = 4\nqueue_size = 8\nexport_timeout = \"200ms\"",
    )
    .await;
    let addr = gw.addr();
    let t0 = tokio::time::Instant::now();
    let calls: Vec<_> = (0..40)
        .map(|_| {
            tokio::spawn(async move {
                h1(
                    addr,
                    request("POST", "/v1/chat/completions", "", r#"{"model":"m"}"#),
                )
                .await
                .status
            })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap(), 200);
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let m = String::from_utf8(
            h1(gw.admin_addr(), request("GET", "/metrics", "", ""))
                .await
                .body
                .to_vec(),
        )
        .unwrap();
        let dropped = |reason: &str| {
            m.lines()
                .find(|l| {
                    l.starts_with(&format!(
                        "sluice_trace_spans_dropped_total{{reason=\"{reason}\"}}"
                    ))
                })
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        if dropped("queue_full") > 0 && dropped("export_failed") > 0 {
            assert!(
                m.contains("sluice_trace_exports_total{outcome=\"failed\"}"),
                "{m}"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{m}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
