//! Guardrails as `sluice serve` runs them: the access log line and the ledger's row record
//! each check's verdict and time (a stream's output checks too, as it ended), `/metrics`
//! counts them, and a refused prompt ends `content_blocked`.

use std::time::Duration;

use crate::support::*;
use crate::{gateway, Setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_and_metrics_record_the_verdicts() {
    let dir = std::env::temp_dir().join(format!("sluice-guard-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("access.log");
    let db = dir.join("ledger.db");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&db);
    let m = mock("tokens=2").await;
    let server = format!(
        "access_log = \"{}\"\nlog_format = \"json\"\n\
         [ledger]\nflush_interval = \"100ms\"\nsink = {{ kind = \"sqlite\", path = \"{}\" }}",
        log.display(),
        db.display()
    );
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
    // A stream whose answer has a card: the header names the guardrail watching it, the
    // stream's last comment what it did.
    let stream = r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "say=pay with 4111 1111 1111 1111 now, token_bytes=4",
            stream,
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["x-sluice-guardrails"],
        "no-pii(allow),no-pii(watch)"
    );
    let body = String::from_utf8_lossy(&r.body);
    assert!(!body.contains("4111"), "{body}");
    assert!(
        body.trim_end()
            .ends_with(": x-sluice-guardrails no-pii(redact)"),
        "{body}"
    );
    // The writer is a thread of its own: wait for the three lines.
    let mut lines = Vec::new();
    for _ in 0..100 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        lines = text.lines().map(str::to_string).collect();
        if lines.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lines.len(), 3, "{lines:?}");
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
    let third: serde_json::Value = serde_json::from_str(&lines[2]).unwrap();
    let g = third["guardrails"].as_str().unwrap();
    assert!(
        g.starts_with("no-pii(allow:") && g.contains("ms),no-pii(redact:"),
        "{g}"
    );
    // The ledger's rows carry each check's verdict and time, `name:verdict:0.12ms`.
    let mut rows: Vec<(String, Option<String>)> = Vec::new();
    for _ in 0..100 {
        if let Ok(conn) = rusqlite::Connection::open(&db) {
            if let Ok(mut q) =
                conn.prepare("SELECT end_reason, guardrails FROM sluice_requests ORDER BY ts_us")
            {
                rows = q
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
            }
        }
        if rows.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rows.len(), 3, "{rows:?}");
    let shape = |g: &str, verdicts: &[&str]| {
        let parts: Vec<&str> = g.split(',').collect();
        parts.len() == verdicts.len()
            && parts.iter().zip(verdicts).all(|(p, v)| {
                let f: Vec<&str> = p.split(':').collect();
                f.len() == 3
                    && f[0] == "no-pii"
                    && f[1] == *v
                    && f[2]
                        .strip_suffix("ms")
                        .is_some_and(|n| n.parse::<f64>().is_ok())
            })
    };
    let g = |i: usize| rows[i].1.clone().unwrap_or_default();
    assert!(shape(&g(0), &["redact", "allow"]), "{rows:?}");
    assert!(shape(&g(1), &["deny"]), "{rows:?}");
    assert_eq!(rows[1].0, "content_blocked");
    assert!(shape(&g(2), &["allow", "redact"]), "{rows:?}");
    let metrics = h1(gw.admin_addr(), request("GET", "/metrics", "", ""))
        .await
        .body;
    let metrics = String::from_utf8_lossy(&metrics);
    for line in [
        "sluice_guardrail_total{guardrail=\"no-pii\",verdict=\"redact\"} 2",
        "sluice_guardrail_total{guardrail=\"no-pii\",verdict=\"deny\"} 1",
        "sluice_request_end_total{reason=\"content_blocked\"} 1",
    ] {
        assert!(metrics.contains(line), "{line}:\n{metrics}");
    }
    drop(gw);
    let _ = std::fs::remove_dir_all(dir);
}
