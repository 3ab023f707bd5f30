//! `sluice serve` reloading its config as an operator does it: `kill -HUP` (what
//! `systemctl reload` sends) and `--watch` (an edited file), with the version read back from
//! `/admin/config`.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `(listen, admin)` from the first two stdout lines.
fn addrs(child: &mut Child) -> (String, String) {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = |prefix: &str| {
        let line = lines.next().unwrap().unwrap();
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("unexpected line {line:?}"))
            .to_string()
    };
    (next("listening on "), next("admin on "))
}

fn http(addr: &str, method: &str, path: &str, body: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn version(admin: &str) -> u64 {
    let r = http(admin, "GET", "/admin/config", "");
    let body = r.split("\r\n\r\n").nth(1).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {r}"));
    v["version"].as_u64().unwrap()
}

async fn wait_version(admin: &str, want: u64) {
    // `--watch` polls every second and reloads a change once it has settled (two polls): on a
    // loaded machine that can take several seconds.
    let deadline = Instant::now() + Duration::from_secs(15);
    while version(admin) != want {
        assert!(
            Instant::now() < deadline,
            "config version never became {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A mock, and a config file routing `models` to it.
struct Setup {
    _mock: Proc,
    mock_addr: String,
    dir: TempDir,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let mut mock = Proc(
            Command::new(BIN)
                .args(["mock", "--listen", "127.0.0.1:0"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        BufReader::new(mock.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let mock_addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_string();
        let dir = TempDir(
            std::env::temp_dir().join(format!("sluice-reload-{name}-{}", std::process::id())),
        );
        std::fs::create_dir_all(&dir.0).unwrap();
        Setup {
            _mock: mock,
            mock_addr,
            dir,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.0.join("sluice.toml")
    }

    fn write(&self, models: &str) {
        std::fs::write(
            self.path(),
            format!(
                "[server]\naccess_log = \"off\"\n[[upstream]]\nname = \"mock\"\nbase_url = \"http://{}/v1\"\nprotocol = \"h2c\"\n[[route]]\nmodels = {models}\nupstream = \"mock\"\n",
                self.mock_addr
            ),
        )
        .unwrap();
    }

    fn serve(&self, extra: &[&str]) -> Proc {
        Proc(
            Command::new(BIN)
                .args(["serve", self.path().to_str().unwrap()])
                .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
                .args(extra)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    }
}

fn chat(addr: &str, model: &str) -> String {
    http(
        addr,
        "POST",
        "/v1/chat/completions",
        &format!(r#"{{"model":"{model}"}}"#),
    )
}

#[tokio::test]
async fn sighup_reloads_the_config_and_refuses_an_invalid_one() {
    let s = Setup::new("hup");
    s.write(r#"["gpt-*"]"#);
    let mut gw = s.serve(&[]);
    let (addr, admin) = addrs(&mut gw.0);
    assert_eq!(version(&admin), 1);
    assert!(chat(&addr, "other").starts_with("HTTP/1.1 404"));
    let pid = gw.0.id().to_string();
    let hup = || {
        let st = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
        assert!(st.success());
    };

    s.write(r#"["gpt-*", "other"]"#);
    hup();
    wait_version(&admin, 2).await;
    assert!(chat(&addr, "other").starts_with("HTTP/1.1 200"));

    // An invalid file: refused and logged; the running config and the process stay.
    std::fs::write(s.path(), "[[route]]\nmodels = 5\n").unwrap();
    hup();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(gw.0.try_wait().unwrap().is_none(), "still running");
    assert_eq!(version(&admin), 2);
    assert!(chat(&addr, "other").starts_with("HTTP/1.1 200"));
    let metrics = http(&admin, "GET", "/metrics", "");
    assert!(
        metrics.contains("sluice_config_reloads_total{result=\"invalid\"} 1"),
        "{metrics}"
    );

    let st = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(st.success());
    assert!(gw.0.wait().unwrap().success());
    let mut logs = String::new();
    gw.0.stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    assert!(logs.contains("config reloaded"), "{logs}");
    assert!(logs.contains("config reload refused"), "{logs}");
    assert!(logs.contains("route[0].models"), "{logs}");
}

#[tokio::test]
async fn watch_reloads_an_edited_file() {
    let s = Setup::new("watch");
    s.write(r#"["gpt-*"]"#);
    let mut gw = s.serve(&["--watch"]);
    let (addr, admin) = addrs(&mut gw.0);
    assert_eq!(version(&admin), 1);
    s.write(r#"["gpt-*", "other"]"#);
    wait_version(&admin, 2).await;
    assert!(chat(&addr, "other").starts_with("HTTP/1.1 200"));
}
