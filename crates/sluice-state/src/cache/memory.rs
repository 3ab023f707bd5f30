//! The in-memory cache: one LRU list bounded by entries and bytes, with a TTL per entry.
//!
//! Every operation but purge is O(1): a hash table of slot numbers over a slab of nodes linked
//! in recency order (most recent at the head). Expiry is lazy, with no task or timer per entry:
//! a lookup that finds an expired entry drops it, and each store drops up to
//! [`EXPIRED_PER_PUT`] expired entries from the tail; anything else expired is evicted like
//! any old entry when room is needed.
//!
//! NOTE: one mutex over the whole list. A hit holds it for a hash lookup and two link updates
//! (tens of ns); sharding would make the LRU order and the byte bound per shard, which small
//! configurations (and their tests) would notice, for contention not measured to matter.

use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hashbrown::HashTable;
use tokio::time::Instant;

use super::entry::{CacheKey, CachedResponse};
use crate::CacheScope;

/// Expired entries a store drops from the LRU tail at most, so a store's cost stays bounded.
const EXPIRED_PER_PUT: usize = 4;
const NIL: u32 = u32::MAX;

struct Node {
    digest: [u8; 32],
    hash: u64,
    entry: Arc<CachedResponse>,
    route: Arc<str>,
    namespace: Arc<str>,
    stored: Instant,
    expires: Instant,
    footprint: usize,
}

struct Slot {
    node: Option<Node>,
    prev: u32,
    next: u32,
}

/// What a lookup found.
pub(crate) enum Found {
    Hit(Arc<CachedResponse>, Duration),
    /// Not there (or stored by another route or namespace).
    Absent,
    /// There but expired; dropped now.
    Expired,
}

/// What a store did.
pub(crate) enum Stored {
    /// Stored, evicting this many entries.
    Stored { evicted: u64 },
    /// Larger than the whole byte bound.
    TooLarge,
}

#[derive(Default)]
struct Lru {
    index: HashTable<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    len: usize,
    bytes: usize,
}

impl Lru {
    fn new() -> Self {
        Lru {
            head: NIL,
            tail: NIL,
            ..Lru::default()
        }
    }

    fn node(&self, i: u32) -> &Node {
        self.slots[i as usize]
            .node
            .as_ref()
            .expect("indexed slots hold a node")
    }

    fn find(&self, hash: u64, digest: &[u8; 32]) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(hash, |&i| {
                slots[i as usize]
                    .node
                    .as_ref()
                    .is_some_and(|n| n.digest == *digest)
            })
            .copied()
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let s = &self.slots[i as usize];
            (s.prev, s.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        let old = self.head;
        {
            let s = &mut self.slots[i as usize];
            s.prev = NIL;
            s.next = old;
        }
        match old {
            NIL => self.tail = i,
            o => self.slots[o as usize].prev = i,
        }
        self.head = i;
    }

    fn remove(&mut self, i: u32) -> Node {
        self.unlink(i);
        let node = self.slots[i as usize]
            .node
            .take()
            .expect("indexed slots hold a node");
        if let Ok(found) = self.index.find_entry(node.hash, |&j| j == i) {
            found.remove();
        }
        self.free.push(i);
        self.len -= 1;
        self.bytes -= node.footprint;
        node
    }

    fn insert(&mut self, node: Node) {
        let hash = node.hash;
        self.len += 1;
        self.bytes += node.footprint;
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize].node = Some(node);
                i
            }
            None => {
                self.slots.push(Slot {
                    node: Some(node),
                    prev: NIL,
                    next: NIL,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slots = &self.slots;
        self.index.insert_unique(hash, i, |&j| {
            slots[j as usize].node.as_ref().map_or(0, |n| n.hash)
        });
        self.push_front(i);
    }
}

/// Cached answers in this process's memory.
pub(crate) struct MemoryCache {
    lru: Mutex<Lru>,
    /// Seeded per process: digests are SHA-256 of client bodies, whose low bits a client
    /// could grind to crowd one bucket if they were used as the hash directly.
    hasher: foldhash::fast::RandomState,
    max_entries: usize,
    max_bytes: usize,
}

impl std::fmt::Debug for MemoryCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lru = self.lock();
        f.debug_struct("MemoryCache")
            .field("entries", &lru.len)
            .field("bytes", &lru.bytes)
            .finish_non_exhaustive()
    }
}

impl MemoryCache {
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        MemoryCache {
            lru: Mutex::new(Lru::new()),
            hasher: foldhash::fast::RandomState::default(),
            max_entries: max_entries.min(NIL as usize - 1),
            max_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        // A panic while holding the lock leaves at worst an entry unlinked: better than
        // refusing every later lookup.
        self.lru
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn get(&self, key: &CacheKey) -> Found {
        let hash = self.hasher.hash_one(key.digest);
        let now = Instant::now();
        let mut lru = self.lock();
        let Some(i) = lru.find(hash, &key.digest) else {
            return Found::Absent;
        };
        let node = lru.node(i);
        if node.expires <= now {
            lru.remove(i);
            return Found::Expired;
        }
        if *node.namespace != *key.namespace || *node.route != *key.route {
            return Found::Absent;
        }
        let hit = Found::Hit(node.entry.clone(), now - node.stored);
        lru.unlink(i);
        lru.push_front(i);
        hit
    }

    pub fn put(&self, key: &CacheKey, entry: Arc<CachedResponse>, ttl: Duration) -> Stored {
        let footprint = entry.footprint();
        if footprint > self.max_bytes {
            return Stored::TooLarge;
        }
        let hash = self.hasher.hash_one(key.digest);
        let now = Instant::now();
        let mut lru = self.lock();
        if let Some(i) = lru.find(hash, &key.digest) {
            lru.remove(i);
        }
        let mut evicted = 0;
        for _ in 0..EXPIRED_PER_PUT {
            match lru.tail {
                NIL => break,
                t if lru.node(t).expires <= now => {
                    lru.remove(t);
                }
                _ => break,
            }
        }
        while lru.len >= self.max_entries || lru.bytes + footprint > self.max_bytes {
            let tail = lru.tail;
            if tail == NIL {
                break;
            }
            lru.remove(tail);
            evicted += 1;
        }
        lru.insert(Node {
            digest: key.digest,
            hash,
            entry,
            route: key.route.clone(),
            namespace: key.namespace.clone(),
            stored: now,
            expires: now + ttl,
            footprint,
        });
        Stored::Stored { evicted }
    }

    /// Drops every entry of `scope` (live or expired); returns how many were live.
    pub fn purge(&self, scope: &CacheScope) -> u64 {
        let now = Instant::now();
        let mut lru = self.lock();
        let mut purged = 0;
        for i in 0..lru.slots.len() as u32 {
            let Some(node) = &lru.slots[i as usize].node else {
                continue;
            };
            if scope.matches(&node.route, &node.namespace) {
                purged += u64::from(node.expires > now);
                lru.remove(i);
            }
        }
        purged
    }

    /// Live entries of `scope`.
    pub fn count(&self, scope: &CacheScope) -> u64 {
        let now = Instant::now();
        let lru = self.lock();
        lru.slots
            .iter()
            .filter_map(|s| s.node.as_ref())
            .filter(|n| n.expires > now && scope.matches(&n.route, &n.namespace))
            .count() as u64
    }

    /// Entries and bytes held (expired ones not yet dropped included).
    pub fn size(&self) -> (u64, u64) {
        let lru = self.lock();
        (lru.len as u64, lru.bytes as u64)
    }
}
