//! `sluice mock` as a user runs it: the binary, its first stdout line, and the guide's curl
//! examples run verbatim against it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

struct Mock {
    child: Child,
    port: u16,
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &[&str]) -> Mock {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["mock", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening on 127.0.0.1:")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .parse()
        .unwrap();
    Mock { child, port }
}

fn readme_examples() -> Vec<String> {
    let page = include_str!("../../../docs/guide/src/mock.md");
    page.lines()
        .filter(|l| l.starts_with("curl "))
        .map(str::to_string)
        .collect()
}

#[test]
#[cfg_attr(
    no_curl,
    ignore = "curl is not installed: apt-get install curl (the build script looks on the PATH)"
)]
fn readme_curl_examples_work() {
    // The build script found curl (or CI=true is set): it must run.
    assert!(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl is not installed (CI must have it; elsewhere rebuild to mark this test ignored)"
    );
    let mock = start(&[]);
    let examples = readme_examples();
    assert!(examples.len() >= 4, "{examples:?}");
    for ex in examples {
        let cmd = ex.replace("localhost:9090", &format!("127.0.0.1:{}", mock.port));
        let out = Command::new("sh").args(["-c", &cmd]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{cmd}: {out:?}");
        assert!(!stdout.trim().is_empty(), "{cmd} printed nothing");
        if cmd.contains("stream\":true") {
            assert!(stdout.contains("data: "), "{cmd}: {stdout}");
        }
        if cmd.contains("status=429") {
            assert_eq!(stdout.trim(), "429");
        }
        if cmd.contains("/__mock/stats") {
            let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert!(v["totals"]["requests"].as_u64().unwrap() >= 4, "{v}");
        }
    }
}

#[test]
fn tls_cert_is_written_for_clients() {
    let dir = std::env::temp_dir().join(format!("sluice-mock-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pem = dir.join("mock.pem");
    let _mock = start(&["--tls", "--tls-cert-out", pem.to_str().unwrap()]);
    let text = std::fs::read_to_string(&pem).unwrap();
    assert!(text.starts_with("-----BEGIN CERTIFICATE-----"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_defaults_are_rejected_with_the_key() {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "mock",
            "--listen",
            "127.0.0.1:0",
            "--defaults",
            "tokens=many",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tokens"), "{err}");
}
