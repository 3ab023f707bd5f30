//! The virtual keys: who a request is, from the key its SDK sends. Keys are known only by
//! their SHA-256, so the table holds no secret, and a lookup costs one hash of the presented
//! key and one map probe.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use http::header::{self, HeaderMap};

use crate::config::KeyConfig;

/// Headers that carry an API key, in any provider's spelling: what the SDKs send.
pub(crate) const KEY_HEADERS: [&str; 4] =
    ["authorization", "x-api-key", "api-key", "x-goog-api-key"];

/// One virtual key, as the gateway holds it: its config, and its counters' names (built once,
/// so a request clones `Arc`s instead of formatting strings).
#[derive(Debug)]
pub struct VirtualKey {
    pub(crate) config: KeyConfig,
    /// The name of the key's own counters: `k:<id>` (`{<team>}k:<id>` in a `[[team]]`).
    pub(crate) counter: Arc<str>,
    /// Per `model_limits` entry: `k:<id>/m<index>` (the `/` keeps it in its key's hash slot
    /// on a Redis Cluster, so a key and key × model admission is one round trip).
    pub(crate) model_counters: Vec<Arc<str>>,
    /// The key's metric counters (labelled by team and owner, shared with keys of the same
    /// labels), resolved once.
    pub(crate) metrics: super::metrics::KeyCounters,
    /// The `[[team]]` its `team` names, whose limits and budget it shares.
    pub(crate) team: Option<Arc<TeamPlan>>,
}

/// A `[[team]]`: its limits and budget, and the name of its counters, `{<id>}t`. A team's keys
/// name theirs `{<id>}k:<key>`: the hash tag puts a key's and its team's counters in one hash
/// slot on a Redis Cluster, so the key and its team are still one admission, one round trip.
#[derive(Debug)]
pub(crate) struct TeamPlan {
    pub(crate) config: crate::config::TeamConfig,
    pub(crate) counter: Arc<str>,
}

impl VirtualKey {
    /// The key's id.
    pub fn id(&self) -> &str {
        &self.config.id
    }

    /// Its `team`, if set.
    pub fn team(&self) -> Option<&str> {
        self.config.team.as_deref()
    }

    /// Its `owner`, if set.
    pub fn owner(&self) -> Option<&str> {
        self.config.owner.as_deref()
    }
}

/// Who a request says it is.
#[derive(Clone, Debug)]
pub enum Identity {
    /// No key header at all.
    Anonymous,
    /// A key the gateway does not know (perhaps the upstream's own, for passthrough).
    Unknown,
    /// A known, revoked key.
    Revoked(Arc<VirtualKey>),
    /// A known key.
    Key(Arc<VirtualKey>),
}

/// The key table: SHA-256 of the secret → key.
#[derive(Debug, Default)]
pub(crate) struct KeyTable {
    by_hash: HashMap<[u8; 32], Arc<VirtualKey>, DigestHash>,
    by_id: HashMap<String, Arc<VirtualKey>>,
}

impl KeyTable {
    pub(crate) fn new(keys: Vec<Arc<VirtualKey>>) -> Self {
        let mut t = KeyTable::default();
        for k in keys {
            t.by_hash.insert(k.config.hash, k.clone());
            t.by_id.insert(k.config.id.clone(), k);
        }
        t
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    pub(crate) fn by_id(&self, id: &str) -> Option<&Arc<VirtualKey>> {
        self.by_id.get(id)
    }

    pub(crate) fn ids(&self) -> impl Iterator<Item = &Arc<VirtualKey>> {
        self.by_id.values()
    }

    /// Who the request's key headers say it is. No key header: no hashing at all.
    pub(crate) fn identify(&self, headers: &HeaderMap) -> Identity {
        let Some(secret) = presented_key(headers) else {
            return Identity::Anonymous;
        };
        if self.is_empty() {
            return Identity::Unknown;
        }
        let digest = sha256(secret);
        match self.by_hash.get(&digest) {
            None => Identity::Unknown,
            Some(k) if k.config.revoked => Identity::Revoked(k.clone()),
            Some(k) => Identity::Key(k.clone()),
        }
    }
}

/// SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// The key a client sent: `Authorization: Bearer <key>` (as the OpenAI SDKs send it), else
/// `x-api-key` (Anthropic), `api-key` (Azure) or `x-goog-api-key` (Gemini). Surrounding
/// whitespace is not part of the key.
pub(crate) fn presented_key(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.as_bytes();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") {
            return non_empty(v[7..].trim_ascii());
        }
    }
    KEY_HEADERS[1..]
        .iter()
        .find_map(|n| headers.get(*n))
        .and_then(|v| non_empty(v.as_bytes().trim_ascii()))
}

fn non_empty(b: &[u8]) -> Option<&[u8]> {
    (!b.is_empty()).then_some(b)
}

/// Removes every header that can carry an API key, so none reaches the upstream (which gets
/// its own credential from the upstream's `auth`).
pub(crate) fn strip_keys(headers: &mut HeaderMap) {
    // A scan of the few header names is cheaper than hashing each key header's name to
    // remove it, and most requests carry one of them at most.
    let mut present = [false; KEY_HEADERS.len()];
    for name in headers.keys() {
        if let Some(i) = KEY_HEADERS.iter().position(|k| *k == name.as_str()) {
            present[i] = true;
        }
    }
    for (n, _) in KEY_HEADERS.iter().zip(present).filter(|(_, p)| *p) {
        headers.remove(*n);
    }
}

/// The table is keyed by SHA-256 digests, which are already uniformly distributed and cannot
/// be steered by a client (that would take a preimage): their first eight bytes are the hash.
/// NOTE: SipHash here would cost more than the rest of the lookup and protect nothing.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DigestHash;

impl BuildHasher for DigestHash {
    type Hasher = DigestHasher;
    fn build_hasher(&self) -> DigestHasher {
        DigestHasher(0)
    }
}

#[derive(Debug)]
pub(crate) struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // A [u8; 32] is written as its length, then its bytes in one call.
        if let Some(first) = bytes.first_chunk::<8>() {
            self.0 = u64::from_le_bytes(*first);
        }
    }

    fn write_usize(&mut self, _: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    http::HeaderName::from_static(k),
                    HeaderValue::from_static(v),
                )
            })
            .collect()
    }

    #[test]
    fn the_key_comes_from_any_sdks_header() {
        let h = headers(&[("authorization", "Bearer  sk-1 ")]);
        assert_eq!(presented_key(&h), Some(&b"sk-1"[..]));
        let h = headers(&[("authorization", "bearer sk-2")]);
        assert_eq!(presented_key(&h), Some(&b"sk-2"[..]));
        let h = headers(&[("x-api-key", "sk-3")]);
        assert_eq!(presented_key(&h), Some(&b"sk-3"[..]));
        let h = headers(&[("authorization", "Basic abc"), ("api-key", "sk-4")]);
        assert_eq!(presented_key(&h), Some(&b"sk-4"[..]));
        assert_eq!(
            presented_key(&headers(&[("authorization", "Bearer ")])),
            None
        );
        assert_eq!(presented_key(&HeaderMap::new()), None);
        let mut h = headers(&[
            ("authorization", "Bearer x"),
            ("x-api-key", "y"),
            ("x-goog-api-key", "z"),
            ("cookie", "c"),
        ]);
        strip_keys(&mut h);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn sha256_of_a_known_string() {
        // printf %s test | sha256sum
        let d = sha256(b"test");
        assert_eq!(d[..4], [0x9f, 0x86, 0xd0, 0x81]);
    }
}
