//! A real `redis-server` per test, on a free loopback port, with no persistence; killed when
//! dropped. The tests that start one are `#[ignore]`d when the crate was built without the
//! binary (see build.rs), except under `CI=true`, where they run and fail.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sluice_state::{BackendConfig, FailureMode, RedisConfig, StateConfig, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
}

fn binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

fn available() -> bool {
    Command::new(binary())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl RedisServer {
    /// A running server.
    ///
    /// # Panics
    /// Without `redis-server` (removed since the build, or the ignored tests were asked for,
    /// or CI lacks it), or if it does not come up.
    pub async fn start() -> RedisServer {
        assert!(
            available(),
            "redis-server is not installed: install it (CI: .ci/run does) or set $REDIS_SERVER"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("no free port")
            .port();
        let mut server = RedisServer { child: None, port };
        server.restart().await;
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the server (again) on its port and waits until it answers PING.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new(binary())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--loglevel", "warning"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ping().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("redis-server did not answer on port {}", self.port);
    }

    async fn ping(&self) -> bool {
        let Ok(mut conn) = TcpStream::connect(("127.0.0.1", self.port)).await else {
            return false;
        };
        let mut buf = [0u8; 7];
        conn.write_all(b"PING\r\n").await.is_ok()
            && tokio::time::timeout(Duration::from_secs(1), conn.read_exact(&mut buf))
                .await
                .is_ok_and(|r| r.is_ok())
            && &buf == b"+PONG\r\n"
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the server keeps its connections but answers nothing (a slow Redis).
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`RedisServer::freeze`].
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("not running").id();
        let status = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("cannot run kill");
        assert!(status.success());
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A frozen server ignores SIGKILL only until it is continued.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill();
    }
}

/// A Redis store config for tests: generous deadline (the machine is shared), failing closed
/// so that a Redis problem shows as an error instead of a silent fallback.
pub fn redis_config(url: &str) -> RedisConfig {
    RedisConfig {
        url: url.to_string(),
        call_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        on_failure: FailureMode::FailClosed,
        ..RedisConfig::default()
    }
}

pub async fn redis_store(config: RedisConfig) -> Store {
    Store::new(StateConfig {
        backend: BackendConfig::Redis(config),
        ..StateConfig::default()
    })
    .await
    .expect("valid config")
}

/// Polls `f` every 10 ms until it is true or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
