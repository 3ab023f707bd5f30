//! A minimal W3C WebDriver client for chromedriver: the six commands the dashboard test
//! needs, as JSON over HTTP/1.1 on loopback. (A WebDriver crate would bring its own HTTP and
//! TLS stacks for what is a handful of POSTs here.)

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpStream;

/// The browser and its driver, found as `build.rs` finds them.
pub fn binaries() -> (PathBuf, PathBuf) {
    let find = |names: &[&str], var: &str| -> PathBuf {
        if let Some(p) = std::env::var_os(var) {
            return PathBuf::from(p);
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .flat_map(|d| names.iter().map(move |n| d.join(n)))
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "{} not found (install Debian's chromium and chromium-driver)",
                    names[0]
                )
            })
    };
    (
        find(
            &["chromium", "chromium-browser", "google-chrome"],
            "SLUICE_CHROMIUM",
        ),
        find(&["chromedriver"], "SLUICE_CHROMEDRIVER"),
    )
}

/// A running chromedriver; killed when dropped.
pub struct Driver {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    pub async fn start(chromedriver: &Path) -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let d = Driver {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(v) = d.call("GET", "/status", None).await {
                if v["value"]["ready"] == true {
                    return d;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "chromedriver did not get ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .map_err(|e| e.to_string())?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(30), send.send_request(req))
            .await
            .map_err(|_| format!("{method} {path}: no answer in 30 s"))?
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{method} {path}: {status}: {v}"));
        }
        Ok(v)
    }

    /// A new headless session in a fresh profile.
    pub async fn session(&self, chromium: &Path, profile: &Path) -> Session<'_> {
        let caps = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": chromium.display().to_string(),
                    "args": [
                        "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                        "--window-size=1440,1100",
                        format!("--user-data-dir={}", profile.display()),
                    ],
                },
                "goog:loggingPrefs": { "browser": "ALL" },
            }}
        });
        let v = self
            .call("POST", "/session", Some(caps))
            .await
            .expect("a browser session");
        let id = v["value"]["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        Session { driver: self, id }
    }
}

/// One browser session; closed by [`Session::close`].
pub struct Session<'a> {
    driver: &'a Driver,
    id: String,
}

impl Session<'_> {
    async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let p = format!("/session/{}{path}", self.id);
        self.driver.call(method, &p, body).await.unwrap()["value"].take()
    }

    pub async fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url }))).await;
    }

    /// Runs `script` (a function body) in the page and returns what it returns.
    pub async fn eval(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let v = self.cmd("GET", "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 PNG"))
            .expect("valid base64")
    }

    /// The browser console's entries so far (chromedriver's log endpoint).
    pub async fn console(&self) -> Vec<Value> {
        let v = self
            .cmd("POST", "/se/log", Some(json!({ "type": "browser" })))
            .await;
        v.as_array().cloned().unwrap_or_default()
    }

    pub async fn close(self) {
        let _ = self
            .driver
            .call("DELETE", &format!("/session/{}", self.id), None)
            .await;
    }
}
