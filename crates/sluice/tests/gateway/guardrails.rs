//! Guardrails as `sluice serve` runs them: the access log line records each check's verdict
//! and time, `/metrics` counts them, and a refused prompt ends `content_blocked`.

use std::time::Duration;

use crate::support::*;
use crate::{gateway, Setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_and_metrics_record_the_verdicts() {
    let dir = std::env::temp_dir().join(format!("sluice-guard-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("access.log");
    let _ = std::fs::remove_file(&log);
    let m = mock("tokens=2").await;
    let server = format!("access_log = \"{}\"\nlog_format = \"json\"", log.display());
    let gw = gateway(
        &m,
        Setup {
            server: &server,
            upstream: "[[guardrail]]\nname = \"no-pii\"\nkind = \"builtin\"\n\
                       detectors = { card = \"redact\", private_key = \"deny\" }\n",
            route: "guardrails = [\"no-pii\"]",
            ..Setup::default()
        },
    )
    .await;
    let card =
        r#"{"model":"gpt-4o","messages":[{"role":"user","content":"card 4111 1111 1111 1111"}]}"#;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", card)).await;
    assert_eq!(r.status, 200);
    let key = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"-----BEGIN PRIVATE KEY-----"}]}"#;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", key)).await;
    assert_eq!(r.status, 400);
    // The writer is a thread of its own: wait for both lines.
    let mut lines = Vec::new();
    for _ in 0..100 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        lines = text.lines().map(str::to_string).collect();
        if lines.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lines.len(), 2, "{lines:?}");
    let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    let g = first["guardrails"].as_str().unwrap();
    assert!(
        g.starts_with("no-pii(redact:") && g.contains("ms),no-pii(allow:"),
        "{g}"
    );
    let second: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    assert!(second["guardrails"]
        .as_str()
        .unwrap()
        .starts_with("no-pii(deny:"));
    assert_eq!(second["end_reason"], "content_blocked");
    let metrics = h1(gw.admin_addr(), request("GET", "/metrics", "", ""))
        .await
        .body;
    let metrics = String::from_utf8_lossy(&metrics);
    for line in [
        "sluice_guardrail_total{guardrail=\"no-pii\",verdict=\"redact\"} 1",
        "sluice_guardrail_total{guardrail=\"no-pii\",verdict=\"deny\"} 1",
        "sluice_request_end_total{reason=\"content_blocked\"} 1",
    ] {
        assert!(metrics.contains(line), "{line}:\n{metrics}");
    }
    drop(gw);
    let _ = std::fs::remove_dir_all(dir);
}
