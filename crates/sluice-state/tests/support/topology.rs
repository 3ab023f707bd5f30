//! Several real servers per test: a Redis Cluster of three primaries (`redis-server
//! --cluster-enabled yes` and `redis-cli --cluster create`), and a primary with one replica
//! watched by three sentinels (`redis-server --sentinel`, which is what Debian's
//! `redis-sentinel` runs). Each set lives in a private directory removed when it is dropped,
//! with its processes.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use super::{free_port, RedisServer};

/// A directory of this test process, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sluice-state-{what}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("cannot create a temporary directory");
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn redis_cli() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// A plain connection to one server (a node, a sentinel), for the test's own commands.
pub async fn connect(port: u16) -> MultiplexedConnection {
    try_connect(port)
        .await
        .expect("cannot connect to a test server")
}

/// [`connect`] for a poll that may meet a server dropping its clients (a demoted primary):
/// a failure is "not yet", not the test's failure.
pub async fn try_connect(port: u16) -> redis::RedisResult<MultiplexedConnection> {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))?
        .get_multiplexed_async_connection()
        .await
}

/// Polls `f` every 50 ms until it is true; panics with `what` after `within`.
async fn wait_for<F, Fut>(within: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// === impl RedisCluster ===

/// Three primaries, no replicas, the 16384 slots split between them by `redis-cli`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    _dir: TempDir,
}

impl RedisCluster {
    pub async fn start() -> RedisCluster {
        let dir = TempDir::new("cluster");
        let mut nodes = Vec::new();
        for i in 0..3 {
            let port = free_port();
            // The bus port explicitly: the default (port + 10000) may be taken or above 65535.
            let bus = free_port().to_string();
            let config = dir.path(&format!("nodes-{i}.conf"));
            let args = RedisServer::args(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &config,
                    "--cluster-port",
                    &bus,
                    "--cluster-node-timeout",
                    "2000",
                    "--dir",
                    &dir.path(""),
                ],
            );
            nodes.push(RedisServer::start_with(port, args).await);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let cli = redis_cli();
        let created = tokio::task::spawn_blocking(move || {
            Command::new(cli)
                .args(["--cluster", "create"])
                .args(&addresses)
                .args(["--cluster-replicas", "0", "--cluster-yes"])
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .status()
        })
        .await
        .unwrap()
        .expect("cannot run redis-cli: install redis-tools or set $REDIS_CLI");
        assert!(created.success(), "redis-cli --cluster create failed");
        for node in &nodes {
            let conn = connect(node.port()).await;
            wait_for(Duration::from_secs(20), "cluster_state:ok", || {
                let mut conn = conn.clone();
                async move {
                    let info: String = redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query_async(&mut conn)
                        .await
                        .unwrap_or_default();
                    info.contains("cluster_state:ok")
                }
            })
            .await;
            // Every node must also know every other: a node that has not met one yet answers
            // its slots with CLUSTERDOWN or a stale map.
            wait_for(Duration::from_secs(20), "3 known nodes", || {
                let mut conn = conn.clone();
                async move {
                    let nodes: String = redis::cmd("CLUSTER")
                        .arg("NODES")
                        .query_async(&mut conn)
                        .await
                        .unwrap_or_default();
                    nodes.lines().filter(|l| l.contains("connected")).count() == 3
                }
            })
            .await;
        }
        RedisCluster { nodes, _dir: dir }
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// How many keys each node holds.
    pub async fn key_counts(&self) -> Vec<u64> {
        let mut counts = Vec::new();
        for node in &self.nodes {
            let mut conn = connect(node.port()).await;
            counts.push(redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap());
        }
        counts
    }
}

// === impl SentinelSet ===

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "mymaster";

/// A primary, its replica, and three sentinels (quorum 2) that fail over half a second after
/// the primary stops answering.
pub struct SentinelSet {
    pub primary: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<RedisServer>,
    _dir: TempDir,
}

impl SentinelSet {
    pub async fn start() -> SentinelSet {
        let dir = TempDir::new("sentinel");
        // Replication writes an RDB file (a full sync, a demoted primary's resync) even without
        // `save`: into the private directory, not the test's working directory.
        let (primary_dir, replica_dir) = (dir.path("primary"), dir.path("replica"));
        for d in [&primary_dir, &replica_dir] {
            std::fs::create_dir(d).expect("cannot create a server's directory");
        }
        let port = free_port();
        let primary =
            RedisServer::start_with(port, RedisServer::args(port, &["--dir", &primary_dir])).await;
        let port = free_port();
        let primary_port = primary.port().to_string();
        let replica = RedisServer::start_with(
            port,
            RedisServer::args(
                port,
                &[
                    "--dir",
                    &replica_dir,
                    "--replicaof",
                    "127.0.0.1",
                    &primary_port,
                ],
            ),
        )
        .await;
        let conn = connect(replica.port()).await;
        wait_for(Duration::from_secs(10), "the replica in sync", || {
            let mut conn = conn.clone();
            async move {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_default();
                info.contains("master_link_status:up")
            }
        })
        .await;
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = free_port();
            // A sentinel rewrites its config file, so each has its own, in the private dir.
            let config = dir.path(&format!("sentinel-{i}.conf"));
            std::fs::write(
                &config,
                format!(
                    "port {port}\n\
                     bind 127.0.0.1\n\
                     protected-mode no\n\
                     dir {}\n\
                     sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n\
                     sentinel down-after-milliseconds {MASTER} 500\n\
                     sentinel failover-timeout {MASTER} 3000\n\
                     sentinel parallel-syncs {MASTER} 1\n",
                    dir.path(""),
                ),
            )
            .unwrap_or_else(|e| panic!("cannot write {config}: {e}"));
            let args = vec![
                config,
                "--sentinel".to_string(),
                "--loglevel".into(),
                "warning".into(),
            ];
            sentinels.push(RedisServer::start_with(port, args).await);
        }
        // A failover needs the sentinels to know each other (they meet through the primary's
        // hello channel, every 2 s) and the replica.
        for sentinel in &sentinels {
            let conn = connect(sentinel.port()).await;
            wait_for(
                Duration::from_secs(20),
                "sentinels knowing each other and the replica",
                || {
                    let mut conn = conn.clone();
                    async move {
                        let others: Vec<redis::Value> = redis::cmd("SENTINEL")
                            .arg("SENTINELS")
                            .arg(MASTER)
                            .query_async(&mut conn)
                            .await
                            .unwrap_or_default();
                        let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                            .arg("REPLICAS")
                            .arg(MASTER)
                            .query_async(&mut conn)
                            .await
                            .unwrap_or_default();
                        others.len() == 2 && replicas.len() == 1
                    }
                },
            )
            .await;
        }
        SentinelSet {
            primary,
            replica,
            sentinels,
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// The primary's port as sentinel `i` reports it.
    pub async fn primary_port(&self, i: usize) -> Option<u16> {
        let mut conn = connect(self.sentinels[i].port()).await;
        let address: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER)
            .query_async(&mut conn)
            .await
            .ok()?;
        address.map(|(_, port)| port)
    }
}
