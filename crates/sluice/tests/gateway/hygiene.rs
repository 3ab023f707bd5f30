//! Issue 15, items 4 and 5: what clients can make the gateway write. A newline or an ANSI escape
//! in `model` forged a whole log line, `X-Request-Id: a status=999` forged a field, a 10 MB
//! `model` made a 10 MB log line and a 10 MB 404 body, and a 502 named the upstream's address.
//! Now client values are escaped and capped in logs, request ids are validated, error bodies
//! quote a short escaped prefix, and name upstreams by their configured name only.

use crate::support::*;
use crate::{gateway, gateway_at, Setup};

/// The gateway's access log, in the default text format, as written to its file.
struct Logs(std::path::PathBuf);

impl Logs {
    fn new(name: &str) -> Logs {
        let p =
            std::env::temp_dir().join(format!("sluice-hygiene-{name}-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&p);
        Logs(p)
    }

    /// The `server` lines that send the access log here.
    fn setting(&self) -> String {
        format!("access_log = \"{}\"", self.0.display())
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }

    /// The request lines, once `n` have been written (the writer is its own thread).
    async fn request_lines(&self, n: usize) -> Vec<String> {
        for _ in 0..200 {
            let lines: Vec<String> = self.text().lines().map(str::to_string).collect();
            if lines.len() >= n {
                return lines;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.text().lines().map(str::to_string).collect()
    }
}

#[tokio::test]
async fn client_values_cannot_forge_log_lines_or_fields() {
    let logs = Logs::new("forge");
    let mock = mock("").await;
    let setting = logs.setting();
    let gw = gateway(
        &mock,
        Setup {
            server: &setting,
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

    let lines = logs.request_lines(2).await;
    let text = logs.text();
    assert!(!text.contains('\u{1b}'), "no raw escape reaches the log");
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
    let logs = Logs::new("address");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let setting = logs.setting();
    let gw = gateway_at(
        &format!("http://127.0.0.1:{port}/v1"),
        Setup {
            server: &setting,
            ..Setup::default()
        },
    )
    .await;
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
    let line = logs
        .request_lines(1)
        .await
        .pop()
        .expect("the request's log line");
    assert!(
        line.contains(&format!("127.0.0.1:{port}")),
        "the log has the address: {line}"
    );
}
