//! Which caller may use which servers and tools ([`KeyGrants`], the seam to the gateway's key
//! table), and how many tool calls a key may make ([`CallLimiter`]).
//!
//! The gateway's key stage authenticates the caller and hands over its key id; this crate
//! cannot see the key table, so the decision is a trait with a config-backed implementation
//! ([`ConfigGrants`], from `[[mcp.grant]]`). The lead can swap in one backed by the key table.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use sluice_config::{glob_match, McpGrant, McpLimit};
use tokio::time::Instant;

/// Decides what a caller may see and call. Called on every list (per tool) and every call:
/// keep it cheap and non-blocking.
pub trait KeyGrants: Send + Sync + 'static {
    /// Whether `key` (`None`: a caller without a key) may see and call `tool` (the server's
    /// own name for it, without the prefix) on `server`.
    fn may_use(&self, key: Option<&str>, server: &str, tool: &str) -> bool;

    /// Whether `key` may use anything on `server`: decides the fan-out, and the visibility of
    /// the server's prompts and resources.
    fn may_use_server(&self, key: Option<&str>, server: &str) -> bool;
}

/// [`KeyGrants`] from `[[mcp.grant]]` entries: allowed if any grant's `keys`, `server` and
/// `tools` globs all match. A caller without a key is matched as the empty key id (only `*`
/// matches it). Nothing is allowed without a grant.
#[derive(Clone, Debug, Default)]
pub struct ConfigGrants {
    grants: Vec<McpGrant>,
}

impl ConfigGrants {
    /// Grants from the config.
    pub fn new(grants: &[McpGrant]) -> ConfigGrants {
        ConfigGrants {
            grants: grants.to_vec(),
        }
    }

    fn matching<'a>(
        &'a self,
        key: Option<&'a str>,
        server: &'a str,
    ) -> impl Iterator<Item = &'a McpGrant> + 'a {
        let key = key.unwrap_or("");
        self.grants.iter().filter(move |g| {
            glob_match(&g.server, server) && g.keys.iter().any(|k| glob_match(k, key))
        })
    }
}

impl KeyGrants for ConfigGrants {
    fn may_use(&self, key: Option<&str>, server: &str, tool: &str) -> bool {
        self.matching(key, server)
            .any(|g| g.tools.iter().any(|t| glob_match(t, tool)))
    }

    fn may_use_server(&self, key: Option<&str>, server: &str) -> bool {
        self.matching(key, server).next().is_some()
    }
}

/// Per-key tool-call limits (GCRA: a token bucket kept as one "theoretical arrival time" per
/// key), in memory on this instance.
///
/// NOTE: each instance counts on its own, so N instances let a key make up to N times its
/// limit. The shared-store version (sluice-state's limiter) can replace this behind the same
/// `check`; until then this bounds a runaway agent per instance.
#[derive(Debug)]
pub struct CallLimiter {
    rules: Vec<McpLimit>,
    /// (rule index, key id) → the time the bucket is empty again.
    tat: Mutex<HashMap<(usize, String), Instant>>,
}

/// Keys tracked at most. Past it, entries whose bucket has refilled are swept; if none has,
/// new keys go uncounted until some have: memory stays bounded before limits are exact.
const MAX_TRACKED_KEYS: usize = 100_000;

impl CallLimiter {
    /// Limits from the config.
    pub fn new(rules: &[McpLimit]) -> CallLimiter {
        CallLimiter {
            rules: rules.to_vec(),
            tat: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one call for `key` at `now`; `Err(wait)` when its limit is reached, with how
    /// long until a call would be allowed. Keys that match no rule are not limited.
    pub fn check(&self, key: Option<&str>, now: Instant) -> Result<(), Duration> {
        let k = key.unwrap_or("");
        let Some((idx, rule)) = self
            .rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.keys.iter().any(|g| glob_match(g, k)))
        else {
            return Ok(());
        };
        let per = rule.calls.per;
        let interval = per / u32::try_from(rule.calls.limit).unwrap_or(u32::MAX).max(1);
        // A full bucket holds `limit` calls: the arrival time may run `per - interval` ahead.
        let tolerance = per.saturating_sub(interval);
        let mut map = self.tat.lock();
        if map.len() >= MAX_TRACKED_KEYS && !map.contains_key(&(idx, k.to_string())) {
            map.retain(|_, t| *t > now);
            if map.len() >= MAX_TRACKED_KEYS {
                return Ok(());
            }
        }
        let tat = map.entry((idx, k.to_string())).or_insert(now);
        let start = (*tat).max(now);
        if start.duration_since(now) > tolerance {
            return Err(start.duration_since(now) - tolerance);
        }
        *tat = start + interval;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_config::McpRate;

    fn grant(keys: &[&str], server: &str, tools: &[&str]) -> McpGrant {
        McpGrant {
            keys: keys.iter().map(|s| s.to_string()).collect(),
            server: server.into(),
            tools: tools.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn grants_add_up_and_deny_by_default() {
        let g = ConfigGrants::new(&[
            grant(&["team-*"], "github", &["create_*"]),
            grant(&["alice"], "*", &["*"]),
        ]);
        assert!(g.may_use(Some("team-a"), "github", "create_issue"));
        assert!(!g.may_use(Some("team-a"), "github", "delete_repo"));
        assert!(!g.may_use(Some("team-a"), "files", "read"));
        assert!(g.may_use(Some("alice"), "files", "read"));
        assert!(!g.may_use(None, "github", "create_issue"));
        assert!(g.may_use_server(Some("team-a"), "github"));
        assert!(!g.may_use_server(Some("bob"), "github"));
        let open = ConfigGrants::new(&[grant(&["*"], "*", &["*"])]);
        assert!(open.may_use(None, "x", "y"));
        assert!(!ConfigGrants::default().may_use(Some("a"), "x", "y"));
    }

    #[test]
    fn gcra_allows_the_burst_then_the_rate() {
        let l = CallLimiter::new(&[McpLimit {
            keys: vec!["*".into()],
            calls: McpRate {
                limit: 3,
                per: Duration::from_secs(3),
            },
        }]);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(l.check(Some("a"), t0).is_ok());
        }
        let wait = l.check(Some("a"), t0).unwrap_err();
        assert_eq!(wait, Duration::from_secs(1));
        // Another key has its own bucket.
        assert!(l.check(Some("b"), t0).is_ok());
        assert!(l.check(Some("a"), t0 + Duration::from_secs(1)).is_ok());
        assert!(l.check(Some("a"), t0 + Duration::from_secs(1)).is_err());
    }
}
