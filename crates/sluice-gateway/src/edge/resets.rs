//! Requests cancelled by their client, counted per client address: the defence against HTTP/2
//! "rapid reset" (CVE-2023-44487) and its reconnecting variant, where each stream is reset right
//! after it is accepted, so that the gateway does upstream work the client never waits for.
//!
//! An address past `client_resets.per_ip` cancels within `window` is blocked for `block`: its
//! new connections are refused at accept and its new requests get a 429 before any work. The
//! per-connection count lives on the connection ([`super::watch::ConnTracker`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::watch::WindowCount;
use crate::config::ClientResets;

/// Addresses tracked at most; past it, addresses that are neither blocked nor counting in a
/// current window are forgotten, and if none is, new ones are not tracked (fail open: a
/// limit that cannot count must not refuse).
const MAX_TRACKED: usize = 65_536;

#[derive(Debug, Default)]
struct IpCancels {
    window: WindowCount,
    blocked_until_ms: u64,
    last_ms: u64,
}

/// Cancels per client address, and the addresses blocked for them.
#[derive(Debug)]
pub(crate) struct ResetGuard {
    cfg: ClientResets,
    epoch: Instant,
    by_ip: Mutex<HashMap<IpAddr, IpCancels>>,
    /// The latest end of any block: while it is past, no address is blocked and lookups take no
    /// lock (the common case costs one atomic load).
    any_blocked_until_ms: AtomicU64,
}

impl ResetGuard {
    pub(crate) fn new(cfg: ClientResets, epoch: Instant) -> Self {
        ResetGuard {
            cfg,
            epoch,
            by_ip: Mutex::new(HashMap::new()),
            any_blocked_until_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn config(&self) -> &ClientResets {
        &self.cfg
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Counts one cancelled request from `ip`; true if that blocked the address just now.
    pub(crate) fn record(&self, ip: IpAddr) -> bool {
        let now = self.now_ms();
        let mut map = self.by_ip.lock();
        if map.len() >= MAX_TRACKED && !map.contains_key(&ip) {
            let window_ms = self.cfg.window.as_millis() as u64;
            map.retain(|_, c| {
                c.blocked_until_ms > now || now.saturating_sub(c.last_ms) < window_ms
            });
            if map.len() >= MAX_TRACKED {
                return false;
            }
        }
        let c = map.entry(ip).or_default();
        c.last_ms = now;
        if c.blocked_until_ms > now {
            return false;
        }
        if !c.window.hit(now, self.cfg.window, self.cfg.per_ip) {
            return false;
        }
        let until = now.saturating_add(self.cfg.block.as_millis() as u64);
        c.blocked_until_ms = until;
        c.window = WindowCount::default();
        self.any_blocked_until_ms.fetch_max(until, Ordering::AcqRel);
        true
    }

    /// How much longer `ip` is blocked, if it is.
    pub(crate) fn blocked(&self, ip: IpAddr) -> Option<Duration> {
        let any_until = self.any_blocked_until_ms.load(Ordering::Acquire);
        // No address was ever blocked (every request asks): no clock read.
        if any_until == 0 {
            return None;
        }
        let now = self.now_ms();
        if any_until <= now {
            return None;
        }
        let map = self.by_ip.lock();
        let until = map.get(&ip)?.blocked_until_ms;
        (until > now).then(|| Duration::from_millis(until - now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_address_past_its_cancels_is_blocked_for_a_while() {
        let g = ResetGuard::new(
            ClientResets {
                per_connection: 100,
                per_ip: 3,
                window: Duration::from_secs(10),
                block: Duration::from_secs(5),
            },
            Instant::now(),
        );
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(g.blocked(a), None);
        assert!(!(0..3).any(|_| g.record(a)));
        assert!(g.record(a), "the 4th cancel within the window");
        assert_eq!(g.blocked(a), Some(Duration::from_secs(5)));
        assert_eq!(g.blocked(b), None, "only that address");
        assert!(!g.record(a), "already blocked");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(g.blocked(a), None);
    }
}
