//! Configuration of the response cache: [`CacheConfig`] per route (`cache = { ttl = "1h" }`),
//! [`CacheStoreConfig`] once for the store. Plain structs with documented defaults, like the
//! rest of the state's configuration; the gateway fills them from its TOML and calls
//! `validate()` at startup.

use std::time::Duration;

use crate::ConfigError;

/// Largest response a route may cache: Redis refuses values above 512 MiB, and an answer this
/// large is no answer to keep.
pub const MAX_CACHED_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// How a hit on a streaming request is replayed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Replay {
    /// Every stored event at once.
    #[default]
    Instant,
    /// Each event at its original offset from the start of the response.
    Paced,
}

impl Replay {
    /// The config spelling: `instant` or `paced`.
    pub fn as_str(self) -> &'static str {
        match self {
            Replay::Instant => "instant",
            Replay::Paced => "paced",
        }
    }
}

impl std::str::FromStr for Replay {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "instant" => Ok(Replay::Instant),
            "paced" => Ok(Replay::Paced),
            _ => Err(ConfigError {
                field: "cache.replay",
                reason: format!("`{s}`: expected `instant` or `paced`"),
            }),
        }
    }
}

/// A route's cache (`cache = { ttl = "1h" }`); a route without one caches nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// How long an answer is served. A request's `x-sluice-cache-ttl` may shorten it, never
    /// lengthen it. Default 1 h.
    pub ttl: Duration,
    /// Largest answer stored (body or events, plus headers); larger ones are not stored.
    /// Default 1 MiB; at most [`MAX_CACHED_RESPONSE_BYTES`].
    pub max_bytes: usize,
    /// Share answers between every key of the route (one namespace for the route) instead
    /// of keeping each key's apart. Only for answers that are the same for everyone by
    /// design. Default false.
    pub shared: bool,
    /// How a hit on a streaming request is replayed. Default [`Replay::Instant`].
    pub replay: Replay,
    /// Longest a request waits for an identical one in flight (single flight) before going
    /// upstream itself; the request's own deadline bounds it too. Default 30 s.
    pub wait: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            ttl: Duration::from_secs(3600),
            max_bytes: 1024 * 1024,
            shared: false,
            replay: Replay::Instant,
            wait: Duration::from_secs(30),
        }
    }
}

impl CacheConfig {
    /// Checks every value (fields named relative to the route: `cache.ttl`).
    ///
    /// # Errors
    /// The first field that cannot work, with the reason.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let CacheConfig {
            ttl,
            max_bytes,
            shared: _,
            replay: _,
            wait: _,
        } = self;
        if *ttl < Duration::from_millis(1) {
            return fail("cache.ttl", "must be at least 1ms");
        }
        if *max_bytes == 0 || *max_bytes > MAX_CACHED_RESPONSE_BYTES {
            return fail("cache.max_bytes", "must be from 1 byte to 256MiB");
        }
        Ok(())
    }

    /// The rules of one store: the route's TTL, or the request's `x-sluice-cache-ttl` when
    /// shorter, and the route's byte bound.
    pub fn policy(&self, requested_ttl: Option<Duration>) -> PutPolicy {
        PutPolicy {
            ttl: requested_ttl.map_or(self.ttl, |t| t.min(self.ttl)),
            max_bytes: self.max_bytes,
        }
    }
}

/// How one answer is stored: for how long, and up to what size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutPolicy {
    /// Served this long; zero stores nothing ([`crate::PutOutcome::NotCacheable`]).
    pub ttl: Duration,
    /// Larger answers ([`crate::CachedResponse::stored_len`]) are not stored.
    pub max_bytes: usize,
}

/// The cache's bounds, once per gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheStoreConfig {
    /// In memory: entries at most; the least recently used go first. Default 100,000.
    pub max_entries: usize,
    /// In memory: bytes at most (answers plus about 200 bytes of bookkeeping each); the least
    /// recently used go first. Default 128 MiB.
    pub max_bytes: usize,
    /// With Redis: stores waiting for Redis at most; beyond, a store is dropped and counted
    /// (`puts_dropped`). Default 1024.
    pub put_queue: usize,
    /// With Redis: bytes of stores waiting for Redis at most. Default 32 MiB.
    pub max_queued_bytes: usize,
}

impl Default for CacheStoreConfig {
    fn default() -> Self {
        CacheStoreConfig {
            max_entries: 100_000,
            max_bytes: 128 * 1024 * 1024,
            put_queue: 1024,
            max_queued_bytes: 32 * 1024 * 1024,
        }
    }
}

impl CacheStoreConfig {
    /// Checks every value (fields named relative to the state section: `cache.max_entries`).
    ///
    /// # Errors
    /// The first field that cannot work, with the reason.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let CacheStoreConfig {
            max_entries,
            max_bytes,
            put_queue,
            max_queued_bytes,
        } = self;
        if *max_entries == 0 || *max_entries >= u32::MAX as usize {
            return fail("cache.max_entries", "must be from 1 to 4294967294");
        }
        if *max_bytes == 0 {
            return fail("cache.max_bytes", "must be at least 1 byte");
        }
        if *put_queue == 0 {
            return fail("cache.put_queue", "must be at least 1");
        }
        if *max_queued_bytes == 0 {
            return fail("cache.max_queued_bytes", "must be at least 1 byte");
        }
        Ok(())
    }
}

fn fail(field: &'static str, reason: &str) -> Result<(), ConfigError> {
    Err(ConfigError {
        field,
        reason: reason.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field_and_requests_only_shorten_the_ttl() {
        assert_eq!(CacheConfig::default().validate(), Ok(()));
        assert_eq!(CacheStoreConfig::default().validate(), Ok(()));
        let zero_ttl = CacheConfig {
            ttl: Duration::ZERO,
            ..CacheConfig::default()
        };
        assert_eq!(zero_ttl.validate().unwrap_err().field, "cache.ttl");
        let huge = CacheConfig {
            max_bytes: MAX_CACHED_RESPONSE_BYTES + 1,
            ..CacheConfig::default()
        };
        assert_eq!(huge.validate().unwrap_err().field, "cache.max_bytes");
        let store = CacheStoreConfig {
            put_queue: 0,
            ..CacheStoreConfig::default()
        };
        assert_eq!(store.validate().unwrap_err().field, "cache.put_queue");
        assert_eq!("paced".parse::<Replay>(), Ok(Replay::Paced));
        assert!("slow".parse::<Replay>().is_err());

        let route = CacheConfig::default();
        let hour = Duration::from_secs(3600);
        assert_eq!(route.policy(None).ttl, hour);
        assert_eq!(
            route.policy(Some(Duration::from_secs(60))).ttl,
            Duration::from_secs(60)
        );
        assert_eq!(route.policy(Some(hour * 2)).ttl, hour);
    }
}
