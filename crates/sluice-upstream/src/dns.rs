//! Name resolution of `base_url`'s host: every address it resolves to, cached for
//! `PoolConfig::dns_refresh`, and the order in which a new connection tries them.
//!
//! Re-resolution is lazy: the first connect after the cache expired resolves again (other
//! connects wait for it rather than resolving in parallel). No background task, so an idle
//! upstream costs no lookups.
//!
//! NOTE: connections to an address that left DNS are not drained; they live until the
//! server closes them or `max_connection_age`. We accept that because a deployment that
//! moves servers also stops the old ones, which closes (or GOAWAYs) their connections.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// The addresses of one host, refreshed at most every `refresh`.
pub(crate) struct Resolver {
    host: String,
    port: u16,
    /// The host is an IP address: nothing to resolve.
    literal: Option<SocketAddr>,
    refresh: Duration,
    /// Held across a lookup, so that connects starting meanwhile wait for its answer.
    cache: Mutex<Option<Cached>>,
}

struct Cached {
    addrs: Arc<[SocketAddr]>,
    expires: Instant,
}

/// What a connect gets: the addresses, and the time it spent on DNS (`None` when the answer
/// was cached and nobody was resolving, or the host is an IP address).
pub(crate) struct Resolved {
    pub(crate) addrs: Arc<[SocketAddr]>,
    pub(crate) took: Option<Duration>,
}

impl Resolver {
    /// `host` without IPv6 brackets.
    pub(crate) fn new(host: &str, port: u16, refresh: Duration) -> Resolver {
        Resolver {
            host: host.to_string(),
            port,
            literal: host
                .parse::<IpAddr>()
                .ok()
                .map(|ip| SocketAddr::new(ip, port)),
            refresh,
            cache: Mutex::new(None),
        }
    }

    /// A resolver whose host "resolves" to `addrs` for an hour, for tests of what the
    /// connector does with several addresses.
    #[cfg(test)]
    pub(crate) fn fixed(addrs: Vec<SocketAddr>) -> Resolver {
        Resolver {
            host: "fixed.invalid".into(),
            port: 0,
            literal: None,
            refresh: Duration::from_secs(3600),
            cache: Mutex::new(Some(Cached {
                addrs: addrs.into(),
                expires: Instant::now() + Duration::from_secs(3600),
            })),
        }
    }

    /// Every address of the host, from the cache while it is fresh.
    ///
    /// # Errors
    /// The resolver's error, or `NotFound` when the name has no address, unless an earlier
    /// answer exists: a failed refresh keeps using the last good addresses (and the next
    /// connect tries again), since a resolver hiccup should not take a working upstream down.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the lookup; the cache is left as it was.
    pub(crate) async fn resolve(&self) -> io::Result<Resolved> {
        if let Some(addr) = self.literal {
            return Ok(Resolved {
                addrs: Arc::from([addr]),
                took: None,
            });
        }
        let start = Instant::now();
        let (mut cache, waited) = match self.cache.try_lock() {
            Ok(c) => (c, false),
            Err(_) => (self.cache.lock().await, true),
        };
        if let Some(c) = cache.as_ref().filter(|c| Instant::now() < c.expires) {
            return Ok(Resolved {
                addrs: c.addrs.clone(),
                took: waited.then(|| start.elapsed()),
            });
        }
        let looked_up = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map(|it| it.collect::<Vec<_>>());
        let took = Some(start.elapsed());
        match looked_up {
            Ok(addrs) if !addrs.is_empty() => {
                let addrs: Arc<[SocketAddr]> = addrs.into();
                *cache = Some(Cached {
                    addrs: addrs.clone(),
                    expires: Instant::now() + self.refresh,
                });
                Ok(Resolved { addrs, took })
            }
            failed => {
                let err = failed.err().unwrap_or_else(|| {
                    io::Error::new(io::ErrorKind::NotFound, "the name resolved to no address")
                });
                match cache.as_ref() {
                    Some(stale) => {
                        tracing::debug!(host = %self.host, error = %err,
                            "re-resolving the upstream failed; keeping the last addresses");
                        Ok(Resolved {
                            addrs: stale.addrs.clone(),
                            took,
                        })
                    }
                    None => Err(err),
                }
            }
        }
    }
}

/// The order in which a new connection tries `addrs`: starting at its `turn` (the lane's
/// count of connects so far, so consecutive connections start at consecutive addresses),
/// then the rest in order, as fallbacks when an address refuses.
pub(crate) fn rotation(addrs: &[SocketAddr], turn: usize) -> impl Iterator<Item = SocketAddr> + '_ {
    let n = addrs.len();
    let first = if n == 0 { 0 } else { turn % n };
    addrs[first..].iter().chain(&addrs[..first]).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(n: u8) -> Vec<SocketAddr> {
        (1..=n)
            .map(|i| SocketAddr::from(([10, 0, 0, i], 443)))
            .collect()
    }

    fn last_octet(a: SocketAddr) -> u8 {
        match a.ip() {
            IpAddr::V4(v4) => v4.octets()[3],
            IpAddr::V6(_) => unreachable!("test addresses are IPv4"),
        }
    }

    #[test]
    fn consecutive_connections_start_at_consecutive_addresses() {
        let a = addrs(3);
        let firsts: Vec<u8> = (0..6)
            .map(|turn| last_octet(rotation(&a, turn).next().unwrap()))
            .collect();
        assert_eq!(firsts, [1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn every_address_is_a_fallback_exactly_once() {
        let a = addrs(4);
        for turn in 0..8 {
            let order: Vec<u8> = rotation(&a, turn).map(last_octet).collect();
            let start = (turn % 4) as u8 + 1;
            let expected: Vec<u8> = (0..4).map(|i| (start - 1 + i) % 4 + 1).collect();
            assert_eq!(order, expected, "turn {turn}");
        }
    }

    #[test]
    fn no_addresses_yield_nothing() {
        assert_eq!(rotation(&[], 5).count(), 0);
    }

    #[tokio::test]
    async fn an_ip_literal_is_not_resolved() {
        let r = Resolver::new("::1", 8080, Duration::from_secs(30));
        let got = r.resolve().await.unwrap();
        assert_eq!(
            &*got.addrs,
            [SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], 8080))]
        );
        assert_eq!(got.took, None);
    }

    #[tokio::test]
    async fn localhost_is_resolved_once_then_cached_until_refresh() {
        let r = Resolver::new("localhost", 80, Duration::from_secs(30));
        let first = r.resolve().await.unwrap();
        assert!(first.took.is_some());
        assert!(first
            .addrs
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 80));
        let second = r.resolve().await.unwrap();
        assert_eq!(second.took, None, "a fresh cache entry costs no lookup");
        assert_eq!(first.addrs, second.addrs);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_entry_is_resolved_again() {
        let r = Resolver::new("localhost", 80, Duration::from_secs(30));
        r.resolve().await.unwrap();
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(r.resolve().await.unwrap().took.is_some());
    }
}
