//! `sluice serve` and `sluice check-config` as a user runs them: the shipped example config, a
//! JSON request log line without secrets, and a graceful exit on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn first_line_addr(child: &mut Child) -> String {
    first_line_and_rest(child).0
}

/// The address of the first line (`listening on ADDR`), and the rest of stdout.
fn first_line_and_rest(child: &mut Child) -> (String, BufReader<std::process::ChildStdout>) {
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (addr, out)
}

/// `sluice mock` on an ephemeral port, and its address.
fn spawn_mock() -> (Proc, String) {
    let mut mock = Proc(
        Command::new(BIN)
            .args(["mock", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let addr = first_line_addr(&mut mock.0);
    (mock, addr)
}

/// Sends SIGTERM, asserts a clean exit, and returns what the process wrote to stderr.
fn sigterm_and_logs(p: &mut Proc, what: &str) -> String {
    let status = Command::new("kill")
        .args(["-TERM", &p.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = p.0.wait().unwrap();
    assert!(exit.success(), "graceful exit ({what}): {exit:?}");
    let mut logs = String::new();
    p.0.stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    logs
}

fn post(addr: &str, path: &str, body: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn example_config_is_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../sluice.example.toml");
    let out = Command::new(BIN)
        .args(["check-config", example])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[test]
fn bad_config_names_the_field() {
    let dir = std::env::temp_dir().join(format!("sluice-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[upstream]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:1/v1\"\ntimeouts = { idle = \"soon\" }\n[[route]]\nmodels = [\"*\"]\nupstream = \"a\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check-config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("upstream[0].timeouts.idle"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn serve_logs_json_without_secrets_and_exits_on_sigterm() {
    let (_mock, mock_addr) = spawn_mock();
    let dir = std::env::temp_dir().join(format!("sluice-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("sluice.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nshutdown_grace = \"5s\"\n[[upstream]]\nname = \"mock\"\nbase_url = \"http://{mock_addr}/v1\"\nprotocol = \"h2c\"\nauth = {{ type = \"bearer\", env = \"SLUICE_TEST_KEY\" }}\n[[route]]\nmodels = [\"billed-*\"]\nupstream = \"mock\"\non_client_disconnect = \"drain\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\n"
        ),
    )
    .unwrap();
    let mut gw = Proc(
        Command::new(BIN)
            .args([
                "serve",
                "--config",
                cfg.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .args(["--log-format", "json"])
            .env("SLUICE_TEST_KEY", "sk-very-secret-123")
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (addr, mut stdout) = first_line_and_rest(&mut gw.0);
    let resp = post(
        &addr,
        "/v1/chat/completions",
        r#"{"model":"gpt-4o","stream":true}"#,
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("data: [DONE]"), "{resp}");
    let resp = post(&addr, "/v1/chat/completions", r#"{"model":"#);
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    // The upstream rejects a request for lack of a session header: passed through, and logged
    // with the names (not the values) of the session headers that were sent.
    let mut s = TcpStream::connect(&addr).unwrap();
    let body = r#"{"model":"gpt-4o"}"#;
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-mock: require_header=x-session-id\r\ncookie: sid=cookie-secret\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    assert!(resp.contains("missing_session_id"), "{resp}");

    // A drain route: the client leaves after the first bytes; the gateway reads the upstream to
    // its end and logs the usage it reported.
    let mut s = TcpStream::connect(&addr).unwrap();
    let body = r#"{"model":"billed-1","stream":true,"stream_options":{"include_usage":true}}"#;
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-mock: tokens=8, interval_ms=20\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 64];
    let _ = s.read(&mut first).unwrap();
    drop(s);
    // Give the drain time to finish (8 events, 20 ms apart). This is a plain test thread, not a
    // tokio worker, so the sleep blocks nothing else.
    #[allow(clippy::disallowed_methods)]
    std::thread::sleep(Duration::from_millis(600));

    let logs = sigterm_and_logs(&mut gw, "json logs");
    // The access log: stdout, after the `listening on` and `admin on` lines.
    let mut access = String::new();
    stdout.read_to_string(&mut access).unwrap();
    for (name, text) in [("operational", &logs), ("access", &access)] {
        assert!(
            !text.contains("sk-very-secret-123"),
            "a secret reached the {name} log:\n{text}"
        );
    }
    let lines: Vec<serde_json::Value> = access
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v.get("request_id").is_some())
        .collect();
    assert_eq!(lines.len(), 4, "one line per request:\n{access}");
    assert!(
        !logs.contains("sluice::request"),
        "request lines stay out of the operational log"
    );
    assert_eq!(lines[3]["end_reason"], "client_gone");
    let drained = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["target"] == "sluice::drain")
        .unwrap_or_else(|| panic!("no drain line in:\n{logs}"));
    assert_eq!(drained["fields"]["outcome"], "drained");
    let usage: serde_json::Value =
        serde_json::from_str(drained["fields"]["usage"].as_str().unwrap()).unwrap();
    assert_eq!(usage["completion_tokens"], 8, "{drained}");
    let ok = &lines[0];
    assert_eq!(ok["end_reason"], "completed");
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["upstream"], "mock");
    assert!(
        ok["attempts"].as_str().unwrap().starts_with("mock:200:ok:"),
        "{ok}"
    );
    assert!(ok["request_id"].as_str().unwrap().starts_with("sl-"));
    assert!(ok["events"].as_u64().unwrap() > 3);
    // Phase timings: the first request opened the upstream connection.
    assert!(ok["acquire_ms"].as_f64().is_some(), "{ok}");
    assert!(ok["connect_ms"].as_f64().is_some(), "{ok}");
    assert!(ok["upstream_first_byte_ms"].as_f64().is_some(), "{ok}");
    assert!(ok["upstream_last_byte_ms"].as_f64().is_some(), "{ok}");
    assert_eq!(lines[1]["end_reason"], "bad_request");
    assert_eq!(lines[2]["status"], 400);
    let session_warn = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["fields"]["message"] == "upstream rejected a request mentioning a session")
        .unwrap_or_else(|| panic!("no session warning in:\n{logs}"));
    let sent = session_warn["fields"]["session_headers_sent"]
        .as_str()
        .unwrap();
    assert!(
        sent.contains("cookie") && sent.contains("authorization"),
        "{sent}"
    );
    assert_eq!(session_warn["fields"]["request_id"], lines[2]["request_id"]);
    assert!(
        !logs.contains("cookie-secret"),
        "a header value reached the logs"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `server.workers`: the named number of connection threads (seen in /proc), or by default
/// none and tokio's shared runtime; either way calls are answered, SIGHUP reloads the config
/// and SIGTERM ends the process cleanly.
#[cfg(target_os = "linux")]
#[test]
fn serve_on_worker_threads_or_one_shared_runtime() {
    let (_mock, mock_addr) = spawn_mock();
    let dir = std::env::temp_dir().join(format!("sluice-workers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for workers in [3, 0] {
        let cfg = dir.join(format!("w{workers}.toml"));
        // 0 is the default: left out.
        let line = if workers == 0 {
            String::new()
        } else {
            format!("workers = {workers}\n")
        };
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{line}access_log = \"off\"\n[[upstream]]\nname = \"mock\"\nbase_url = \"http://{mock_addr}/v1\"\nprotocol = \"http1\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\n"
        );
        std::fs::write(&cfg, &text).unwrap();
        let mut gw = Proc(
            Command::new(BIN)
                .args(["serve", "--config", cfg.to_str().unwrap()])
                .env("RUST_LOG", "info")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let addr = first_line_addr(&mut gw.0);
        for _ in 0..4 {
            let resp = post(
                &addr,
                "/v1/chat/completions",
                r#"{"model":"gpt-4o","stream":true}"#,
            );
            assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
            assert!(resp.contains("data: [DONE]"), "{resp}");
        }
        let threads = std::fs::read_dir(format!("/proc/{}/task", gw.0.id()))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with("sluice-worker-"))
            .count();
        assert_eq!(threads, workers, "worker threads with workers = {workers}");
        // SIGHUP reloads for the connections on the threads too: the route now takes gpt-* only.
        let other = || post(&addr, "/v1/chat/completions", r#"{"model":"other"}"#);
        assert!(other().starts_with("HTTP/1.1 200"));
        std::fs::write(&cfg, text.replace("[\"*\"]", "[\"gpt-*\"]")).unwrap();
        let hup = Command::new("kill")
            .args(["-HUP", &gw.0.id().to_string()])
            .status()
            .unwrap();
        assert!(hup.success());
        let mut last = String::new();
        for _ in 0..100 {
            last = other();
            if last.contains("model_not_found") {
                break;
            }
            // A plain test thread: the sleep blocks nothing else.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(last.contains("model_not_found"), "after the reload: {last}");
        let logs = sigterm_and_logs(&mut gw, &format!("workers = {workers}"));
        assert_eq!(
            logs.contains("client connections are served on 3 worker threads"),
            workers == 3,
            "{logs}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
