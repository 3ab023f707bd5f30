//! Issue 15, items 4 and 5: what clients can make the gateway write. A newline or an ANSI escape
//! in `model` forged a whole log line, `X-Request-Id: a status=999` forged a field, a 10 MB
//! `model` made a 10 MB log line and a 10 MB 404 body, and a 502 named the upstream's address.
//! Now client values are escaped and capped in logs, request ids are validated, error bodies
//! quote a short escaped prefix, and name upstreams by their configured name only.

use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::support::*;
use crate::{gateway, gateway_at, Setup};

/// The gateway's log, in the default text format, as written.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Captures this thread's logs (the test runtime is single-threaded: the gateway's tasks
    /// run here too).
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let w = logs.clone();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || w.clone())
            .finish();
        (logs.clone(), tracing::subscriber::set_default(sub))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn request_lines(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains("sluice::request"))
            .map(str::to_string)
            .collect()
    }
}

#[tokio::test]
async fn client_values_cannot_forge_log_lines_or_fields() {
    let (logs, _guard) = Logs::capture();
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            models: r#"["gpt-4o*"]"#,
            ..Default::default()
        },
    )
    .await;
    let forged_model =
        "gpt-4o\n2026-01-01T00:00:00.000000Z  INFO sluice::request: request status=200 \u{1b}[2J";
    let body = serde_json::json!({ "model": forged_model }).to_string();
    let mut req = request("POST", "/v1/chat/completions", "", &body);
    req.headers_mut()
        .insert("x-request-id", "a status=999".parse().unwrap());
    let r = h1(gw.addr(), req).await;
    assert_eq!(r.status, 200);
    let rid = r.headers["x-request-id"].to_str().unwrap().to_string();
    assert!(rid.starts_with("sl-"), "an invalid id is replaced: {rid}");
    // A 10 MB model: a capped log value and a short 404.
    let huge = format!("x{}", "y".repeat(10 << 20));
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "",
            &serde_json::json!({ "model": huge }).to_string(),
        ),
    )
    .await;
    assert_eq!(r.status, 404);
    assert!(r.body.len() < 1024, "a {} byte 404", r.body.len());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("xyyy") && msg.contains("[cut "), "{msg}");

    let text = logs.text();
    assert!(!text.contains('\u{1b}'), "no raw escape reaches the log");
    let lines = logs.request_lines();
    assert_eq!(
        lines.len(),
        2,
        "one line per request, none forged:\n{text:.2000}"
    );
    assert!(
        lines[0].contains(r#"model="gpt-4o\n2026-01-01T00:00:00.000000Z  INFO sluice::request: request status=200 \u{1b}[2J""#),
        "{}",
        lines[0]
    );
    assert!(!text.contains("status=999"), "{text:.2000}");
    assert!(lines[0].contains(&format!("request_id={rid}")));
    assert!(lines[1].len() < 2048, "a {} byte log line", lines[1].len());
    assert!(lines[1].contains("[cut "), "{:.400}", lines[1]);
}

#[tokio::test]
async fn error_bodies_name_the_upstream_and_the_log_has_the_address() {
    let (logs, _guard) = Logs::capture();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let gw = gateway_at(&format!("http://127.0.0.1:{port}/v1"), Setup::default()).await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", r#"{"model":"m"}"#),
    )
    .await;
    assert_eq!(r.status, 502);
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert!(body.contains("upstream `mock`"), "{body}");
    assert!(
        !body.contains("127.0.0.1") && !body.contains(&port.to_string()),
        "no address in the body: {body}"
    );
    assert!(
        !body.contains("os error"),
        "no OS error in the body: {body}"
    );
    let line = logs.request_lines().pop().expect("the request's log line");
    assert!(
        line.contains(&format!("127.0.0.1:{port}")),
        "the log has the address: {line}"
    );
}
