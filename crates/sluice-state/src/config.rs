//! Configuration of the state store. Plain structs with documented defaults: the gateway parses
//! its TOML (durations, sizes) into these and calls [`StateConfig::validate`] at startup.

use std::time::Duration;

use crate::redis_keys::{KeyLayout, Layout};
use crate::redis_url::{RedisUrl, Topology};

/// The whole state store configuration.
#[derive(Clone, Debug, Default)]
pub struct StateConfig {
    /// Where limits, budgets and idempotency records live. Default: [`BackendConfig::Memory`].
    pub backend: BackendConfig,
    /// Limits of the in-memory store (the backend itself, or the fail-open fallback of Redis).
    pub memory: MemoryConfig,
    /// Idempotency record settings, for both backends.
    pub idempotency: IdempotencyConfig,
}

/// Which backend holds the state.
#[derive(Clone, Debug, Default)]
pub enum BackendConfig {
    /// This process only: no setup, limits are per instance.
    #[default]
    Memory,
    /// Shared by every instance that points at the same Redis and [`RedisConfig::prefix`].
    Redis(RedisConfig),
}

/// What the store does when Redis is slow or down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// Answer from local in-memory state (limits become per instance, starting from zero),
    /// count it in [`crate::StatsSnapshot::fallbacks`] and log a rate-limited warning.
    #[default]
    FailOpen,
    /// Return [`crate::StateError`], which the gateway maps to 503.
    FailClosed,
}

impl FailureMode {
    /// The config spelling: `fail_open` or `fail_closed`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::FailOpen => "fail_open",
            FailureMode::FailClosed => "fail_closed",
        }
    }
}

impl std::str::FromStr for FailureMode {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "fail_open" => Ok(FailureMode::FailOpen),
            "fail_closed" => Ok(FailureMode::FailClosed),
            _ => Err(ConfigError {
                field: "on_failure",
                reason: format!("`{s}`: expected `fail_open` or `fail_closed`"),
            }),
        }
    }
}

/// The Redis backend. Its `Debug` hides the URL's credentials.
#[derive(Clone)]
pub struct RedisConfig {
    /// Where Redis is; never logged (it may hold a password). Required. One of:
    /// - `redis://[user:password@]host:port[/db]`: one server;
    /// - `redis+sentinel://[user:password@]host:26379[,host:26379...]/<master name>[/db]`: the
    ///   primary the sentinels name, followed across failovers (the credentials are the
    ///   primary's; the sentinels are asked without any);
    /// - `redis+cluster://[user:password@]host:6379[,host:6379...]`: a Redis Cluster, found
    ///   through any of the listed nodes (db 0 only). The counters of one admission must share
    ///   a hash slot: see the README's Cluster section and [`RedisConfig::shares_slot`].
    ///
    /// TLS (`rediss://`) is not built in.
    pub url: String,
    /// Prefix of every key this store writes (`<prefix>:r:<key>` ...). Instances that share
    /// limits must use the same prefix. Default `sluice`.
    pub prefix: String,
    /// Deadline of every call to Redis, admission and settle included. Default 5 ms.
    pub call_timeout: Duration,
    /// Deadline of connecting (at startup and on reconnect). Default 250 ms.
    pub connect_timeout: Duration,
    /// What to do when Redis is slow or down. Default [`FailureMode::FailOpen`].
    pub on_failure: FailureMode,
    /// Consecutive failed calls (timeouts, connection errors) that mark Redis down; while down
    /// no request waits for it. Default 3.
    pub trip_after: u32,
    /// While Redis is down, how often the store pings it to come back. Default 500 ms.
    pub probe_interval: Duration,
    /// A concurrency lease's lifetime without renewal: a crashed instance's slots are free
    /// after this. Live leases are renewed every third of it, in batches. Default 30 s.
    pub lease_ttl: Duration,
    /// Bound of the queue of fire-and-forget settles and record releases (from `Drop`); when
    /// full, the work is dropped and counted (leases then expire by their TTL). Default 4096.
    pub settle_queue: usize,
    /// At most one "Redis is down" warning per this interval. Default 10 s.
    pub warn_interval: Duration,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let RedisConfig {
            url,
            prefix,
            call_timeout,
            connect_timeout,
            on_failure,
            trip_after,
            probe_interval,
            lease_ttl,
            settle_queue,
            warn_interval,
        } = self;
        f.debug_struct("RedisConfig")
            .field("url", &redact(url))
            .field("prefix", prefix)
            .field("call_timeout", call_timeout)
            .field("connect_timeout", connect_timeout)
            .field("on_failure", on_failure)
            .field("trip_after", trip_after)
            .field("probe_interval", probe_interval)
            .field("lease_ttl", lease_ttl)
            .field("settle_queue", settle_queue)
            .field("warn_interval", warn_interval)
            .finish()
    }
}

impl RedisConfig {
    /// The URL with any user and password replaced by `***`, fit for logs and admin views:
    /// `redis+sentinel://***@s1:26379,s2:26379/mymaster`.
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }

    /// Whether one admission may carry `checks`: always, except with Redis Cluster when their
    /// counters fall in several hash slots (the store then refuses the admission as an
    /// invalid check). For the gateway's config check: with Cluster, every admission it can
    /// build must pass this.
    ///
    /// A counter's slot is picked by its key's group: the key's hash tag (`{team-a}k42` →
    /// `team-a`) if it has one, else its text before the first `/` (`k42/gpt-4o` → `k42`),
    /// else the whole key; unless `prefix` has a hash tag of its own (`{sluice}`), which puts
    /// every counter in one slot.
    pub fn shares_slot(&self, checks: &[crate::Check]) -> bool {
        let layout = match RedisUrl::parse(&self.url).map(|u| u.topology) {
            Ok(Topology::Cluster) => Layout::Tagged,
            _ => Layout::Plain,
        };
        KeyLayout::new(&self.prefix, layout).one_slot(checks)
    }
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        (None, Some(_)) => "***".into(),
        _ => url.to_string(),
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: String::new(),
            prefix: "sluice".into(),
            call_timeout: Duration::from_millis(5),
            connect_timeout: Duration::from_millis(250),
            on_failure: FailureMode::FailOpen,
            trip_after: 3,
            probe_interval: Duration::from_millis(500),
            lease_ttl: Duration::from_secs(30),
            settle_queue: 4096,
            warn_interval: Duration::from_secs(10),
        }
    }
}

/// Bounds of the in-memory store.
#[derive(Clone, Debug)]
pub struct MemoryConfig {
    /// Live limiter entries (one per key and kind) at most; an admission that would add one more
    /// after a sweep fails with [`crate::StateError::MemoryFull`]. Default 1,000,000.
    pub max_entries: usize,
    /// How often each part of the table drops entries that no longer matter (a full bucket, a
    /// past budget period). Default 10 s.
    pub sweep_interval: Duration,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_entries: 1_000_000,
            sweep_interval: Duration::from_secs(10),
        }
    }
}

/// Idempotency records.
#[derive(Clone, Debug)]
pub struct IdempotencyConfig {
    /// Largest response (body plus headers) kept for replay; a larger one is not stored and its
    /// record is released, so a retry runs again. Default 1 MiB.
    pub max_response_bytes: usize,
    /// How long an in-flight record blocks duplicates if its owner never completes or releases
    /// it (a crashed instance). Should be the gateway's longest request. Default 10 min.
    pub in_flight_ttl: Duration,
    /// In memory: records at most (in flight and done). Default 100,000.
    pub max_records: usize,
    /// In memory: bytes of stored responses at most; beyond, new responses are not stored.
    /// Default 64 MiB.
    pub max_total_bytes: usize,
    /// Longest pause between two polls while waiting for an in-flight duplicate. Default 50 ms.
    pub poll_max_interval: Duration,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        IdempotencyConfig {
            max_response_bytes: 1024 * 1024,
            in_flight_ttl: Duration::from_secs(600),
            max_records: 100_000,
            max_total_bytes: 64 * 1024 * 1024,
            poll_max_interval: Duration::from_millis(50),
        }
    }
}

/// A configuration value that cannot work: the field (relative to the state section) and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {reason}")]
pub struct ConfigError {
    /// The field, e.g. `redis.call_timeout`.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl StateConfig {
    /// Checks every value before the store is built.
    ///
    /// # Errors
    /// The first field that cannot work, with the reason.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |field: &'static str, reason: &str| {
            Err(ConfigError {
                field,
                reason: reason.to_string(),
            })
        };
        if self.memory.max_entries == 0 {
            return fail("memory.max_entries", "must be at least 1");
        }
        if self.memory.sweep_interval.is_zero() {
            return fail("memory.sweep_interval", "must be above zero");
        }
        let idem = &self.idempotency;
        if idem.in_flight_ttl < Duration::from_millis(1) {
            return fail("idempotency.in_flight_ttl", "must be at least 1ms");
        }
        if idem.max_records == 0 {
            return fail("idempotency.max_records", "must be at least 1");
        }
        if idem.poll_max_interval.is_zero() {
            return fail("idempotency.poll_max_interval", "must be above zero");
        }
        if let BackendConfig::Redis(redis) = &self.backend {
            if redis.url.is_empty() {
                return fail("redis.url", "required for the redis backend");
            }
            RedisUrl::parse(&redis.url)?;
            if redis.prefix.is_empty() {
                return fail("redis.prefix", "must not be empty");
            }
            if redis.call_timeout.is_zero() {
                return fail("redis.call_timeout", "must be above zero");
            }
            if redis.connect_timeout.is_zero() {
                return fail("redis.connect_timeout", "must be above zero");
            }
            if redis.trip_after == 0 {
                return fail("redis.trip_after", "must be at least 1");
            }
            if redis.probe_interval.is_zero() {
                return fail("redis.probe_interval", "must be above zero");
            }
            if redis.lease_ttl < Duration::from_millis(30) {
                return fail("redis.lease_ttl", "must be at least 30ms");
            }
            if redis.settle_queue == 0 {
                return fail("redis.settle_queue", "must be at least 1");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_redis_credentials() {
        let config = RedisConfig {
            url: "redis://user:s3cret@10.0.0.5:6379/0".into(),
            ..RedisConfig::default()
        };
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("user"),
            "{shown}"
        );
        assert!(shown.contains("redis://***@10.0.0.5:6379/0"), "{shown}");
    }

    #[test]
    fn validation_names_the_field() {
        let mut config = StateConfig {
            backend: BackendConfig::Redis(RedisConfig::default()),
            ..StateConfig::default()
        };
        assert_eq!(config.validate().unwrap_err().field, "redis.url");
        config.backend = BackendConfig::Redis(RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            call_timeout: Duration::ZERO,
            ..RedisConfig::default()
        });
        let err = config.validate().unwrap_err();
        assert_eq!(err.to_string(), "redis.call_timeout: must be above zero");
        config.backend = BackendConfig::Redis(RedisConfig {
            url: "redis://:pw@127.0.0.1:6379".into(),
            ..RedisConfig::default()
        });
        assert_eq!(config.validate(), Ok(()));
        assert_eq!("fail_closed".parse(), Ok(FailureMode::FailClosed));
        assert!("closed".parse::<FailureMode>().is_err());
    }

    fn with_url(url: &str) -> StateConfig {
        StateConfig {
            backend: BackendConfig::Redis(RedisConfig {
                url: url.into(),
                ..RedisConfig::default()
            }),
            ..StateConfig::default()
        }
    }

    #[test]
    fn sentinel_and_cluster_urls_are_checked_and_shown_without_credentials() {
        for url in [
            "redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26379/mymaster",
            "redis+sentinel://s1,s2,s3/mymaster/2",
            "redis+cluster://user:pw@10.0.0.1:6379,10.0.0.2:6379",
        ] {
            assert_eq!(with_url(url).validate(), Ok(()), "{url}");
        }
        let err = with_url("redis+cluster://:s3cret@n1:6379/2")
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "redis.url");
        assert!(err.reason.contains("only db 0"), "{err}");
        let err = with_url("redis+sentinel://:s3cret@s1:26379")
            .validate()
            .unwrap_err();
        assert!(err.reason.contains("master name"), "{err}");
        assert!(!err.to_string().contains("s3cret"));

        let config = RedisConfig {
            url: "redis+sentinel://user:s3cret@s1:26379,s2:26379/mymaster".into(),
            ..RedisConfig::default()
        };
        assert_eq!(
            config.redacted_url(),
            "redis+sentinel://***@s1:26379,s2:26379/mymaster"
        );
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[test]
    fn only_a_cluster_needs_an_admissions_counters_in_one_slot() {
        let minute = Duration::from_secs(60);
        let rate = |key: &str| crate::Check::Rate {
            key: key.into(),
            limit: 10,
            period: minute,
        };
        let one_key = [rate("k42"), rate("k42/gpt-4o")];
        let two_keys = [rate("k42"), rate("route:chat")];
        let config = |url: &str, prefix: &str| RedisConfig {
            url: url.into(),
            prefix: prefix.into(),
            ..RedisConfig::default()
        };
        for url in ["redis://h:6379", "redis+sentinel://s1/m"] {
            assert!(config(url, "sluice").shares_slot(&two_keys));
        }
        let cluster = config("redis+cluster://n1,n2", "sluice");
        assert!(cluster.shares_slot(&one_key));
        assert!(!cluster.shares_slot(&two_keys));
        // A hash tag in the prefix puts everything in one slot.
        assert!(config("redis+cluster://n1,n2", "{sluice}").shares_slot(&two_keys));
    }
}
