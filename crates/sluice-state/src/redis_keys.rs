//! The Redis key of every counter and record, and the Cluster hash slot it falls in.
//!
//! Two layouts:
//! - **plain** (one server, Sentinel): `<prefix>:<kind>:<key>`, the layout from before Cluster
//!   support, so an upgrade keeps its counters, budgets and records;
//! - **tagged** (Cluster): `<prefix>:{<group>}:<kind>:<key>`. Redis Cluster hashes only the text
//!   between the first `{` and the next `}`, so every counter of one group lands in one slot,
//!   and an admission whose checks share a group is one script on one node: one round trip.
//!
//! A key's group ([`group`]) is its own hash tag when it has one (`{team-a}k42` → `team-a`),
//! else its text before the first `/` (`k42/gpt-4o` → `k42`), else the whole key. So the
//! conventional names of one virtual key (`k42`, `k42/<model>`) share a slot by construction,
//! and keys of one team share a slot when named `{team}...`. A prefix with a hash tag of its
//! own (`{sluice}`) puts every key in one slot: any admission works, one node holds it all.
//!
//! Idempotency records are one key per script, so they keep `<prefix>:i:<n>:<scope>:<key>` in
//! both layouts and spread over the cluster by their whole name.

use redis::cluster_routing::Slot;

use crate::check::{Check, CheckKind};
use crate::idempotency::RecordId;

/// How keys are named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `<prefix>:<kind>:<key>`: one server or Sentinel.
    Plain,
    /// `<prefix>:{<group>}:<kind>:<key>`: Cluster.
    Tagged,
}

/// Names the keys of one store.
#[derive(Clone, Debug)]
pub(crate) struct KeyLayout {
    prefix: String,
    layout: Layout,
}

/// The part of a check's key that picks its Cluster hash slot: its hash tag (`{...}`, non-empty)
/// if it has one, else the text before its first `/`, else the whole key.
pub(crate) fn group(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key.split('/').next().unwrap_or(key)
}

fn tag(kind: CheckKind) -> char {
    match kind {
        CheckKind::Requests => 'r',
        CheckKind::Tokens => 't',
        CheckKind::Concurrency => 'c',
        CheckKind::Budget => 'b',
    }
}

impl KeyLayout {
    pub fn new(prefix: &str, layout: Layout) -> Self {
        KeyLayout {
            prefix: prefix.to_string(),
            layout,
        }
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The counter of `kind` named `key`.
    pub fn counter(&self, kind: CheckKind, key: &str) -> String {
        let (prefix, tag) = (&self.prefix, tag(kind));
        match self.layout {
            Layout::Plain => format!("{prefix}:{tag}:{key}"),
            Layout::Tagged => {
                // `{}` is no hash tag at all (Redis would hash the whole key), so the empty
                // group (a key that is empty or starts with `/`) gets a tag of its own.
                let group = Some(group(key)).filter(|g| !g.is_empty()).unwrap_or("/");
                format!("{prefix}:{{{group}}}:{tag}:{key}")
            }
        }
    }

    pub fn check(&self, check: &Check) -> String {
        self.counter(check.kind(), check.key())
    }

    pub fn record(&self, record: &RecordId) -> String {
        format!("{}:i:{}", self.prefix, record.name)
    }

    /// A cached answer: `<prefix>:q:<digest hex>`, in both layouts (one key per call, so
    /// with Cluster entries spread over the nodes by their digest).
    pub fn cache_entry(&self, digest_hex: &str) -> String {
        format!("{}:q:{digest_hex}", self.prefix)
    }

    /// The index of a namespace's cached answers, for purges: a sorted set of entry keys
    /// scored by their expiry.
    pub fn cache_namespace_index(&self, namespace: &str) -> String {
        format!("{}:qn:{namespace}", self.prefix)
    }

    /// The index of a route's cached answers, as [`KeyLayout::cache_namespace_index`].
    pub fn cache_route_index(&self, route: &str) -> String {
        format!("{}:qr:{route}", self.prefix)
    }

    /// A resumable stream's events (a Redis stream) and its owner: `<prefix>:rs:{<id>}` and
    /// `<prefix>:rs:{<id>}:o`, one hash slot for both with Cluster.
    pub fn resumable(&self, id: &str) -> (String, String) {
        let events = format!("{}:rs:{{{id}}}", self.prefix);
        let owner = format!("{events}:o");
        (events, owner)
    }

    /// The hash slot of a key with Cluster; `None` (one group for all) otherwise, where a
    /// script may touch any keys.
    pub fn slot(&self, redis_key: &str) -> Option<Slot> {
        match self.layout {
            Layout::Plain => None,
            Layout::Tagged => Some(Slot::for_key(redis_key)),
        }
    }

    /// Whether one script may touch every counter of `checks`: always on one server; with
    /// Cluster, when they fall in one hash slot.
    pub fn one_slot(&self, checks: &[Check]) -> bool {
        let mut slots = checks.iter().map(|c| self.slot(&self.check(c)));
        match slots.next() {
            None => true,
            Some(first) => slots.all(|s| s == first),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// CRC16/XMODEM of the hash tag, mod 16384: Redis Cluster's key slot, written out here so
    /// the test does not trust the redis crate's routing to check our layout.
    fn key_slot(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let hashed = match key.find('{') {
            Some(open) => match key[open + 1..].find('}') {
                Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
                _ => bytes,
            },
            None => bytes,
        };
        let mut crc: u16 = 0;
        for &b in hashed {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc % 16384
    }

    #[test]
    fn the_slot_function_matches_redis() {
        // CLUSTER KEYSLOT answers of a real server.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("bar"), 5061);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
        assert_ne!(key_slot("foo{}{bar}"), key_slot("bar"));
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
        for key in ["foo", "{user1000}.following", "a{b}c", "x{}y"] {
            assert_eq!(
                Slot::for_key(key),
                Slot::new(key_slot(key)).unwrap(),
                "{key}"
            );
        }
    }

    /// What one admission of a virtual key touches: rate, tokens, concurrency and budget of
    /// the key, the same on the key × model counter.
    fn admission(id: &str, model: &str) -> Vec<Check> {
        let key: Arc<str> = Arc::from(id);
        let key_model: Arc<str> = Arc::from(format!("{id}/{model}"));
        let minute = Duration::from_secs(60);
        let mut checks = Vec::new();
        for key in [key.clone(), key_model] {
            checks.extend([
                Check::Rate {
                    key: key.clone(),
                    limit: 600,
                    period: minute,
                },
                Check::Tokens {
                    key: key.clone(),
                    limit: 100_000,
                    period: minute,
                    reserve: 10,
                },
                Check::Concurrency {
                    key: key.clone(),
                    limit: 4,
                },
                Check::Budget {
                    key,
                    limit_micros: 1_000_000,
                    period: minute,
                },
            ]);
        }
        checks
    }

    #[test]
    fn every_key_one_admission_touches_shares_one_slot() {
        let ids = [
            "k42",
            "k:7",
            "team-a",
            "{team-a}k1",
            "{team-a}k2",
            "a}b",
            "a{b",
            "ünï/cödé",
            "",
        ];
        for prefix in ["sluice", "s:prod", "{sluice}", "p{", "p}"] {
            let layout = KeyLayout::new(prefix, Layout::Tagged);
            for id in ids {
                let checks = admission(id, "gpt-4o");
                let slots: Vec<u16> = checks.iter().map(|c| key_slot(&layout.check(c))).collect();
                assert!(
                    slots.iter().all(|s| *s == slots[0]),
                    "prefix {prefix:?}, key {id:?}: {slots:?}"
                );
                assert!(layout.one_slot(&checks));
            }
        }
        // A team's keys share a slot, so a team counter can join their admissions.
        let layout = KeyLayout::new("sluice", Layout::Tagged);
        let mut team = admission("{team-a}k1", "m");
        team.push(Check::Budget {
            key: Arc::from("{team-a}"),
            limit_micros: 5,
            period: Duration::from_secs(60),
        });
        assert!(layout.one_slot(&team));
    }

    #[test]
    fn keys_spread_over_slots_and_unrelated_keys_are_not_one_slot() {
        let layout = KeyLayout::new("sluice", Layout::Tagged);
        let slots: std::collections::HashSet<u16> = (0..200)
            .map(|i| key_slot(&layout.counter(CheckKind::Requests, &format!("k{i}"))))
            .collect();
        assert!(slots.len() > 150, "{}", slots.len());
        let mut mixed = admission("k1", "m");
        mixed.extend(admission("k2", "m"));
        assert!(!layout.one_slot(&mixed));
        // Without Cluster any keys go together; one hash tag in the prefix does the same.
        assert!(KeyLayout::new("sluice", Layout::Plain).one_slot(&mixed));
        assert!(KeyLayout::new("{sluice}", Layout::Tagged).one_slot(&mixed));
    }

    #[test]
    fn the_plain_layout_is_the_one_before_cluster_support() {
        let plain = KeyLayout::new("sluice", Layout::Plain);
        assert_eq!(
            plain.counter(CheckKind::Requests, "k42/m"),
            "sluice:r:k42/m"
        );
        assert_eq!(plain.counter(CheckKind::Budget, "k42"), "sluice:b:k42");
        let tagged = KeyLayout::new("sluice", Layout::Tagged);
        assert_eq!(
            tagged.counter(CheckKind::Tokens, "k42/m"),
            "sluice:{k42}:t:k42/m"
        );
        assert_eq!(
            tagged.counter(CheckKind::Concurrency, "{team}k1"),
            "sluice:{team}:c:{team}k1"
        );
        assert_eq!(group("{}x/y"), "{}x");
    }
}
