//! A real `redis-server` per test, on a free loopback port, with no persistence; killed when
//! dropped. The tests that start one are `#[ignore]`d when the crate was built without the
//! binary (see build.rs), except under `CI=true`, where they run and fail. `topology.rs` starts
//! several: a Cluster, a primary with a replica and sentinels.

#![allow(dead_code)]

pub mod topology;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sluice_state::{BackendConfig, FailureMode, RedisConfig, StateConfig, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// `redis-server`'s arguments.
    args: Vec<String>,
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("no free port")
        .port()
}

pub fn binary() -> String {
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
        let port = free_port();
        RedisServer::start_with(port, RedisServer::args(port, &[])).await
    }

    /// The arguments of a server on `port` without persistence, then `extra`.
    pub fn args(port: u16, extra: &[&str]) -> Vec<String> {
        let port = port.to_string();
        [
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        .iter()
        .chain(&["--protected-mode", "no", "--loglevel", "warning"])
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
    }

    /// A server on `port` run with `args` (a config file first, if any), answering PING.
    pub async fn start_with(port: u16, args: Vec<String>) -> RedisServer {
        assert!(
            available(),
            "redis-server is not installed: install it (CI: .ci/run does) or set $REDIS_SERVER"
        );
        let mut server = RedisServer {
            child: None,
            port,
            args,
        };
        server.restart().await;
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the server (again) on its port and waits until it answers PING.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new(binary())
            .args(&self.args)
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

    pub async fn ping(&self) -> bool {
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

fn key(s: &str) -> Arc<str> {
    Arc::from(s)
}

/// Two stores (two gateway instances) admitting at once against one 600/min limit named
/// `name`, 400 requests each from 4 tasks, as fast as they can: together they admit the
/// limit, give or take the refills while the test runs.
pub async fn two_stores_keep_one_rate_limit(a: &Store, b: &Store, name: &str) {
    let check = {
        let name = key(name);
        move || {
            vec![sluice_state::Check::Rate {
                key: name.clone(),
                limit: 600,
                period: Duration::from_secs(60),
            }]
        }
    };
    let admit = |store: Store, checks| async move {
        match store.admit(checks).await.expect("redis answers") {
            sluice_state::Decision::Admitted(_) => true,
            sluice_state::Decision::Refused(_) => false,
        }
    };
    let started = Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            let check = check.clone();
            tokio::spawn(async move {
                let mut admitted = 0u32;
                for _ in 0..100 {
                    admitted += u32::from(admit(store.clone(), check()).await);
                }
                admitted
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    let elapsed = started.elapsed();
    // One request refills every 100 ms while the test runs: 600 to 602 when it takes under
    // 200 ms; a loaded machine may take longer, and then more refills are honest.
    let refills = 1 + (elapsed.as_millis() / 100) as u32;
    eprintln!("{name}: admitted {total} of 800 in {elapsed:?}");
    assert!(
        (600..=600 + refills.max(2)).contains(&total),
        "admitted {total} in {elapsed:?}"
    );
    assert!(!admit(a.clone(), check()).await || !admit(b.clone(), check()).await);
    assert_eq!(a.stats().mode, sluice_state::StoreMode::Shared);
    assert_eq!(a.stats().fallbacks + b.stats().fallbacks, 0);
}
