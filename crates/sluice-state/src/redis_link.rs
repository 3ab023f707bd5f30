//! The connection to Redis, whatever its topology: one server, the primary the sentinels name,
//! or a Cluster. The backend asks for a [`Conn`] per call and reports failures back; nothing
//! here waits on a request's behalf beyond the call it is part of.
//!
//! - **One server**: the redis crate's `ConnectionManager`, which reconnects by itself.
//! - **Sentinel**: a multiplexed connection to the primary the sentinels name (see
//!   `redis_sentinel.rs`), made by [`Link::connect`], which the store's background task runs at
//!   startup, at once when a call loses the connection or lands on a replica (`READONLY`), while
//!   Redis is marked down, and when the sentinels name another primary (asked every probe
//!   interval: a planned failover leaves the old primary up and writable for seconds). Calls
//!   without a connection fail at once, so a failover costs a request at most the call
//!   deadline, then the configured failure mode until the promoted replica is found.
//! - **Cluster**: the redis crate's cluster connection, which follows `MOVED`/`ASK`, refreshes
//!   its slot map and reconnects to nodes by itself; it is made by [`Link::connect`] too, so an
//!   unreachable cluster at startup is not an error.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, Pipeline,
    RedisConnectionInfo, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};
use tokio::sync::Notify;

use crate::redis_sentinel::Sentinels;
use crate::redis_url::{RedisUrl, Topology};
use crate::{ConfigError, RedisConfig};

/// One call's connection: cheap to clone, a handle on a shared multiplexed connection.
#[derive(Clone)]
pub(crate) enum Conn {
    Manager(ConnectionManager),
    Direct(MultiplexedConnection),
    Cluster(ClusterConnection),
    /// No connection yet (Sentinel or Cluster, being connected): the call fails at once.
    Missing,
}

fn missing() -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::NotConnected,
        "not connected to Redis yet (the store's background task is connecting)",
    ))
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Manager(c) => c.req_packed_command(cmd),
            Conn::Direct(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Missing => Box::pin(async { Err(missing()) }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Manager(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Direct(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Missing => Box::pin(async { Err(missing()) }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Manager(c) => c.get_db(),
            Conn::Direct(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Missing => 0,
        }
    }
}

/// True when `e` says this store cannot be served now (counts towards marking Redis down), as
/// opposed to an error in one call (a script's own error, a reply that does not decode).
pub(crate) fn is_unavailable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::MasterNameNotFoundBySentinel
                | ErrorKind::Server(
                    ServerErrorKind::ReadOnly
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                )
        )
}

enum Kind {
    Single(ConnectionManager),
    Sentinel(Sentinels),
    Cluster(ClusterClient),
}

/// The connection in use (Sentinel, Cluster).
struct Current {
    /// Its number, so a failure seen on an old connection does not throw away its
    /// replacement.
    n: u64,
    conn: Conn,
    /// Sentinel: the primary's address.
    primary: Option<(String, u16)>,
}

/// The connection to Redis of one store.
pub(crate) struct Link {
    kind: Kind,
    current: RwLock<Option<Current>>,
    numbers: AtomicU64,
    /// Woken when a call lost the Sentinel primary, so it is looked up again at once rather
    /// than at the next probe.
    lost: Notify,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL or the credentials.
        let kind = match &self.kind {
            Kind::Single(_) => "single",
            Kind::Sentinel(_) => "sentinel",
            Kind::Cluster(_) => "cluster",
        };
        f.debug_struct("Link")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

fn millis_of(d: Duration) -> u64 {
    d.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

fn url_error() -> ConfigError {
    ConfigError {
        field: "redis.url",
        reason: "the redis client refused the URL's hosts or credentials".into(),
    }
}

fn node(host: &str, port: u16, redis: &RedisConnectionInfo) -> Result<ConnectionInfo, ConfigError> {
    Ok(ConnectionAddr::Tcp(host.to_string(), port)
        .into_connection_info()
        .map_err(|_| url_error())?
        .set_redis_settings(redis.clone()))
}

impl Link {
    /// Builds the link without connecting. `longest_call` is the longest deadline any call
    /// is given. Must run inside a tokio runtime.
    pub fn new(config: &RedisConfig, longest_call: Duration) -> Result<Link, ConfigError> {
        let url = RedisUrl::parse(&config.url)?;
        let mut credentials = RedisConnectionInfo::default().set_db(url.db);
        if let Some(user) = &url.username {
            credentials = credentials.set_username(user);
        }
        if let Some(password) = &url.password {
            credentials = credentials.set_password(password);
        }
        let kind = match url.topology {
            Topology::Single => {
                let client = redis::Client::open(config.url.as_str()).map_err(|_| url_error())?;
                let manager = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(config.connect_timeout))
                    .set_response_timeout(None)
                    .set_number_of_retries(1)
                    .set_min_delay(Duration::from_millis(10))
                    .set_max_delay(config.probe_interval);
                Kind::Single(
                    ConnectionManager::new_lazy_with_config(client, manager)
                        .map_err(|_| url_error())?,
                )
            }
            Topology::Sentinel { master } => {
                // The URL's credentials are the data nodes'; the sentinels are asked without
                // any (see the README).
                let sentinels = url
                    .hosts
                    .iter()
                    .map(|(host, port)| node(host, *port, &RedisConnectionInfo::default()))
                    .collect::<Result<Vec<_>, _>>()?;
                Kind::Sentinel(Sentinels::new(
                    sentinels,
                    master,
                    credentials,
                    config.connect_timeout,
                ))
            }
            Topology::Cluster => {
                let nodes = url
                    .hosts
                    .iter()
                    .map(|(host, port)| node(host, *port, &credentials))
                    .collect::<Result<Vec<_>, _>>()?;
                // A call the store gave up on (its deadline passed) lives on inside the cluster
                // connection, retrying (by default 16 times, waiting up to minutes): bound it by
                // the longest deadline, and keep the retries to what a redirect or a slot map
                // refresh needs.
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(config.connect_timeout)
                    .overall_response_timeout(Some(longest_call))
                    .retries(2)
                    .min_retry_wait(1)
                    .max_retry_wait(millis_of(config.probe_interval))
                    .build()
                    .map_err(|_| url_error())?;
                Kind::Cluster(client)
            }
        };
        Ok(Link {
            kind,
            current: RwLock::new(None),
            numbers: AtomicU64::new(1),
            lost: Notify::new(),
        })
    }

    /// The connection for one call, and its number (0 with one server) for
    /// [`Link::failed`].
    pub fn get(&self) -> (Conn, u64) {
        if let Kind::Single(manager) = &self.kind {
            return (Conn::Manager(manager.clone()), 0);
        }
        match &*self.current.read().unwrap_or_else(|p| p.into_inner()) {
            Some(current) => (current.conn.clone(), current.n),
            None => (Conn::Missing, 0),
        }
    }

    /// Whether the background task should connect now (Sentinel, Cluster: not connected).
    pub fn wants_connect(&self) -> bool {
        !matches!(self.kind, Kind::Single(_))
            && self
                .current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .is_none()
    }

    /// A call on connection `n` failed with `e`. With Sentinel, a lost connection or a
    /// replica's answer means the primary is elsewhere (or gone): the connection is dropped
    /// and the background task looks the primary up again.
    pub fn failed(&self, n: u64, e: &RedisError) {
        if n == 0 || !matches!(self.kind, Kind::Sentinel(_)) || !is_unavailable(e) {
            return;
        }
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|c| c.n == n) {
            *current = None;
            drop(current);
            self.lost.notify_one();
        }
    }

    /// Resolves when a call lost the Sentinel primary (never otherwise).
    pub async fn lost(&self) {
        self.lost.notified().await;
    }

    /// Connects: with Sentinel, asks the sentinels for the primary (checking it is one) and
    /// connects to it, replacing any connection; with Cluster, connects if not connected. The
    /// caller bounds it with a deadline; dropped midway, it leaves the link as it was.
    pub async fn connect(&self) -> RedisResult<()> {
        let (conn, primary) = match &self.kind {
            Kind::Single(_) => return Ok(()),
            Kind::Sentinel(sentinels) => {
                let (primary, conn) = sentinels.find_primary().await?;
                (Conn::Direct(conn), Some(primary))
            }
            Kind::Cluster(client) => {
                if !self.wants_connect() {
                    return Ok(());
                }
                (Conn::Cluster(client.get_async_connection().await?), None)
            }
        };
        let n = self.numbers.fetch_add(1, Ordering::Relaxed);
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        let before = current.as_ref().and_then(|c| c.primary.as_ref());
        if let (Some(before), Some((host, port))) = (before, &primary) {
            if *before != (host.clone(), *port) {
                tracing::info!(
                    primary = %format!("{host}:{port}"),
                    "shared state store (redis): the sentinels name a new primary; following it"
                );
            }
        }
        *current = Some(Current { n, conn, primary });
        Ok(())
    }

    /// Sentinel: whether the sentinels now name another primary than the one connected to
    /// (the highest configuration epoch wins). Bounded by the sentinels' answer timeout; false
    /// when none answers, and always false without Sentinel.
    pub async fn primary_moved(&self) -> bool {
        let Kind::Sentinel(sentinels) = &self.kind else {
            return false;
        };
        let Ok(named) = sentinels.ask().await else {
            return false;
        };
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        match (
            named.first(),
            current.as_ref().and_then(|c| c.primary.as_ref()),
        ) {
            (Some(best), Some(primary)) => best.address != *primary,
            _ => false,
        }
    }
}
