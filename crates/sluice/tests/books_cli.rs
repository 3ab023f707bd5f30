//! `sluice serve` keeps its books by default (an SQLite file next to the config), flushes them
//! on SIGTERM, and `sluice usage` reads them back; `sluice prices` says what prices a model.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `args`, and returns it with the address of its first line (`listening on ADDR`).
fn spawn(args: &[&str]) -> (Proc, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    (Proc(child), addr)
}

fn chat(addr: &str) -> String {
    let body = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn run(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn serve_books_every_call_and_usage_reads_the_books() {
    let dir = std::env::temp_dir().join(format!("sluice-books-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (_mock, mock) = spawn(&["mock", "--listen", "127.0.0.1:0"]);
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\naccess_log = \"off\"\n\n[[upstream]]\nname = \"mock\"\nbase_url = \"http://{mock}/v1\"\n\n[[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\n"
        ),
    )
    .unwrap();
    let (mut gw, addr) = spawn(&["serve", "--config", config.to_str().unwrap()]);
    for _ in 0..3 {
        assert!(chat(&addr).starts_with("HTTP/1.1 200"));
    }
    // SIGTERM: the gateway drains, then flushes its books within the grace.
    let status = Command::new("kill")
        .args(["-TERM", &gw.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(gw.0.wait().unwrap().success());
    assert!(dir.join("sluice-ledger.db").exists(), "the default sink");
    let table = run(&["usage", "--config", config.to_str().unwrap()]);
    let row = table
        .lines()
        .find(|l| l.contains(" gpt-4o "))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[2], "3", "three requests: {table}");
    assert!(table.lines().any(|l| l.starts_with("TOTAL")), "{table}");
    let csv = run(&[
        "usage",
        "--config",
        config.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert!(csv.starts_with("bucket_start,group,requests"), "{csv}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn prices_names_the_entry_that_prices_a_model_and_says_when_none_does() {
    let gpt = run(&["prices", "gpt-4o"]);
    assert!(
        gpt.contains("openai/gpt-4o") && gpt.contains("2.50"),
        "{gpt}"
    );
    let none = run(&["prices", "no-such-model"]);
    assert!(none.contains("recorded as unpriced"), "{none}");
}
