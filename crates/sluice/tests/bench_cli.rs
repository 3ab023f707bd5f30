//! `sluice bench rps` and `sluice bench probe` as a user runs them: the binary against the
//! binary's mock, JSON and table output.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

struct Mock {
    child: Child,
    url: String,
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mock() -> Mock {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["mock", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    Mock {
        child,
        url: format!("http://{addr}"),
    }
}

fn sluice(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn rps_json_and_table() {
    let m = mock();
    let url = format!("{}/v1/chat/completions", m.url);
    let json: serde_json::Value = serde_json::from_str(&sluice(&[
        "bench", "rps", "--url", &url, "-n", "50", "-c", "5", "--json",
    ]))
    .unwrap();
    assert_eq!(json["sent"], 50);
    assert_eq!(json["successes"], 50);
    assert_eq!(json["latency"]["count"], 50);
    let table = sluice(&[
        "bench",
        "rps",
        "--url",
        &url,
        "--protocol",
        "h2c",
        "--rate",
        "100",
        "--duration-s",
        "0.5",
    ]);
    assert!(table.contains("open model at 100 req/s"), "{table}");
    assert!(
        table.contains("50 sent, 50 ok, 0 timeouts, 0 errors"),
        "{table}"
    );
    // Not a terminal: no progress line in the output.
    assert!(!table.contains('\r'), "{table:?}");
}

#[test]
fn probe_json_and_table_with_a_shared_client() {
    let m = mock();
    let url = format!("{}/v1/chat/completions", m.url);
    let stats = format!("{}/__mock/stats", m.url);
    let args = [
        "bench",
        "probe",
        "--url",
        &url,
        "--protocol",
        "h2c",
        "--shared-client",
        "-k",
        "3",
        "--duration",
        "1",
        "--probe-interval",
        "0.1",
        "--mock-stats",
        &stats,
        "--stream-header",
        "x-mock: tokens=100000, interval_ms=20",
    ];
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let json: serde_json::Value = serde_json::from_str(&sluice(&with_json)).unwrap();
    let located = json["probes_located"].as_u64().unwrap();
    assert!(located >= 3, "{json}");
    assert_eq!(json["shared_with_long_stream"].as_u64(), Some(located));
    assert_eq!(json["long_streams_active_at_start"], 3);
    let table = sluice(&args);
    assert!(table.contains("shared with a long stream"), "{table}");
    assert!(table.contains("(100%)"), "{table}");
}
