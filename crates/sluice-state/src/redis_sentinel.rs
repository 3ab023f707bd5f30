//! Finding the primary through Redis Sentinel.
//!
//! Every sentinel is asked at once, in one round trip each, for the primary's address
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME`) and the configuration epoch it belongs to
//! (`config-epoch` of `SENTINEL MASTER`). The highest epoch wins, as it does among the
//! sentinels themselves: during a failover the sentinel that led it names the promoted replica
//! with a new epoch while the others still name the old primary (until its hello messages reach
//! them, within 2 s). The winner must then answer `ROLE` as a primary before it is used.
//!
//! NOTE: the redis crate's `Sentinel` asks the sentinels in list order, waits for each answer in
//! turn and ignores epochs: one hung sentinel stalls every lookup, and during a planned failover
//! (the old primary alive and still a primary until Sentinel demotes it, about 8 s later) it can
//! pick either. So this asks them itself, with the crate's connections.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    RedisConnectionInfo, RedisError, RedisResult, ServerErrorKind, Value,
};

/// `SENTINEL MASTER`'s fields.
type MasterInfo = HashMap<String, String>;

/// Where a sentinel says the primary is, and since which configuration epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    pub address: (String, u16),
    pub epoch: u64,
}

/// The sentinels of one store, and the connections to them kept between lookups (the store's
/// background task asks every probe interval whether the primary moved).
pub(crate) struct Sentinels {
    nodes: Vec<ConnectionInfo>,
    conns: Mutex<Vec<Option<MultiplexedConnection>>>,
    master: String,
    /// The primary's credentials and db.
    credentials: RedisConnectionInfo,
    config: AsyncConnectionConfig,
    /// How long one sentinel may take to answer: a hung one is skipped after this.
    ask_timeout: Duration,
}

impl Sentinels {
    pub fn new(
        nodes: Vec<ConnectionInfo>,
        master: String,
        credentials: RedisConnectionInfo,
        connect_timeout: Duration,
    ) -> Sentinels {
        Sentinels {
            conns: Mutex::new(vec![None; nodes.len()]),
            nodes,
            master,
            credentials,
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(None),
            // Half the connect deadline: the other half is for connecting to the primary.
            ask_timeout: connect_timeout / 2,
        }
    }

    fn conns(&self) -> std::sync::MutexGuard<'_, Vec<Option<MultiplexedConnection>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn ask_one(&self, i: usize) -> RedisResult<Named> {
        let cached = self.conns()[i].clone();
        let mut conn = match cached {
            Some(conn) => conn,
            None => {
                let conn = redis::Client::open(self.nodes[i].clone())?
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await?;
                self.conns()[i] = Some(conn.clone());
                conn
            }
        };
        let mut pipe = redis::pipe();
        pipe.cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master)
            .cmd("SENTINEL")
            .arg("MASTER")
            .arg(&self.master);
        let answer: RedisResult<(Option<(String, u16)>, MasterInfo)> =
            pipe.query_async(&mut conn).await;
        let (address, master) = match answer {
            Ok(answer) => answer,
            Err(e) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    self.conns()[i] = None;
                }
                return Err(e);
            }
        };
        let address = address.ok_or_else(|| {
            RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "a sentinel does not monitor the master name of redis.url",
            ))
        })?;
        let epoch = master
            .get("config-epoch")
            .and_then(|e| e.parse().ok())
            .unwrap_or(0);
        Ok(Named { address, epoch })
    }

    /// What every sentinel that answers within its timeout names, highest epoch first, each
    /// address once.
    ///
    /// # Errors
    /// No sentinel answered: the last error.
    pub async fn ask(&self) -> RedisResult<Vec<Named>> {
        let asks = (0..self.nodes.len()).map(|i| async move {
            tokio::time::timeout(self.ask_timeout, self.ask_one(i))
                .await
                .unwrap_or_else(|_| {
                    Err(RedisError::from((
                        ErrorKind::Io,
                        "a sentinel did not answer in time",
                    )))
                })
        });
        let mut named = Vec::new();
        let mut last = None;
        for answer in join_all(asks).await {
            match answer {
                Ok(n) => named.push(n),
                Err(e) => last = Some(e),
            }
        }
        if named.is_empty() {
            return Err(
                last.unwrap_or_else(|| RedisError::from((ErrorKind::Io, "no sentinel configured")))
            );
        }
        // Stable: among equal epochs, the configured order.
        named.sort_by_key(|n| std::cmp::Reverse(n.epoch));
        let mut seen = Vec::new();
        named.retain(|n| {
            let new = !seen.contains(&n.address);
            seen.push(n.address.clone());
            new
        });
        Ok(named)
    }

    /// Connects to `address` and keeps the connection if that server says it is a primary.
    pub async fn primary_at(&self, address: &(String, u16)) -> RedisResult<MultiplexedConnection> {
        let primary = ConnectionAddr::Tcp(address.0.clone(), address.1)
            .into_connection_info()?
            .set_redis_settings(self.credentials.clone());
        let mut conn = redis::Client::open(primary)?
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
        let is_primary = match role.first() {
            Some(Value::BulkString(b)) => b == b"master",
            Some(Value::SimpleString(s)) => s == "master",
            _ => false,
        };
        if !is_primary {
            // A sentinel that has not seen the failover yet names the demoted primary.
            return Err(RedisError::from((
                ErrorKind::Server(ServerErrorKind::ReadOnly),
                "the server a sentinel named is not a primary",
            )));
        }
        Ok(conn)
    }

    /// Asks the sentinels and connects to the primary they name (highest epoch first).
    ///
    /// # Errors
    /// No sentinel answered, or no server they named is a primary: the last error.
    pub async fn find_primary(&self) -> RedisResult<((String, u16), MultiplexedConnection)> {
        let mut last = None;
        for named in self.ask().await? {
            match self.primary_at(&named.address).await {
                Ok(conn) => return Ok((named.address, conn)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| RedisError::from((ErrorKind::Io, "no primary found"))))
    }
}
