//! How many client connections the gateway holds: `server.max_connections` in all (by default
//! derived from the open-file limit, leaving room for the upstream lanes) and, opt-in,
//! `server.max_connections_per_ip` per peer address.
//!
//! At the cap a new connection does not simply bounce: the connection that has been idle the
//! longest (no request in flight) is closed to make room, as nginx reuses its keep-alive
//! connections when it runs out. So a pile of idle or silent sockets cannot lock clients out;
//! only when every connection has a request in flight is the new one refused, at once and
//! counted.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;

use super::watch::{CloseReason, ConnTracker};

/// Why a new connection was refused. Low cardinality: a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `max_connections` connections are open and all have a request in flight.
    MaxConnections,
    /// The peer has `max_connections_per_ip` connections open.
    PerIp,
    /// The peer is blocked for cancelling too many requests.
    Blocked,
}

impl Refusal {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refusal::MaxConnections => "max_connections",
            Refusal::PerIp => "max_connections_per_ip",
            Refusal::Blocked => "blocked",
        }
    }
}

#[derive(Debug, Default)]
struct Registry {
    next_id: u64,
    conns: HashMap<u64, Arc<ConnTracker>>,
    per_ip: HashMap<IpAddr, usize>,
}

/// The connection caps and the open connections they count.
#[derive(Debug)]
pub(crate) struct ConnLimits {
    max: usize,
    per_ip: Option<usize>,
    reg: Mutex<Registry>,
}

/// An admitted connection's place; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct ConnSlot {
    limits: Arc<ConnLimits>,
    id: u64,
    ip: IpAddr,
    /// The evicted connection this one replaced, if any (for the log).
    pub(crate) evicted: Option<std::net::SocketAddr>,
}

impl ConnLimits {
    pub(crate) fn new(max: usize, per_ip: Option<usize>) -> Arc<ConnLimits> {
        Arc::new(ConnLimits {
            max,
            per_ip,
            reg: Mutex::new(Registry::default()),
        })
    }

    /// The cap in force.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.reg.lock().conns.len()
    }

    /// Takes a place for `conn`, closing the longest-idle connection if the gateway is at its
    /// cap.
    ///
    /// # Errors
    /// The [`Refusal`] when there is no place.
    ///
    /// NOTE: at the cap this scans every open connection for the longest idle (O(n) under the
    /// lock, n ≤ `max_connections`); below the cap admission is O(1). We accept the scan
    /// because it only happens when the gateway is full, where closing the right connection
    /// matters more than the microseconds.
    pub(crate) fn admit(self: &Arc<Self>, conn: &Arc<ConnTracker>) -> Result<ConnSlot, Refusal> {
        let ip = conn.peer_ip();
        let mut reg = self.reg.lock();
        if let Some(cap) = self.per_ip.filter(|_| !conn.trusted_peer) {
            if reg.per_ip.get(&ip).copied().unwrap_or(0) >= cap {
                return Err(Refusal::PerIp);
            }
        }
        let mut evicted = None;
        if reg.conns.len() >= self.max {
            // Connections already closing still hold their place for a moment; they do not
            // count against the cap, or a burst would refuse while they go.
            let mut closing = 0;
            let mut victim: Option<&Arc<ConnTracker>> = None;
            for c in reg.conns.values() {
                if c.closing().is_some() {
                    closing += 1;
                    continue;
                }
                if c.in_flight() > 0 {
                    continue;
                }
                // Never served a request first (the likely abusers), then the longest idle.
                let key = |c: &ConnTracker| (c.requests() > 0, c.idle_since_ms());
                if victim.is_none_or(|v| key(c) < key(v)) {
                    victim = Some(c);
                }
            }
            if reg.conns.len() - closing >= self.max {
                let Some(v) = victim else {
                    return Err(Refusal::MaxConnections);
                };
                v.close(CloseReason::Evicted);
                evicted = Some(v.peer);
            }
        }
        reg.next_id += 1;
        let id = reg.next_id;
        reg.conns.insert(id, conn.clone());
        *reg.per_ip.entry(ip).or_default() += 1;
        Ok(ConnSlot {
            limits: self.clone(),
            id,
            ip,
            evicted,
        })
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut reg = self.limits.reg.lock();
        reg.conns.remove(&self.id);
        if let Some(n) = reg.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                reg.per_ip.remove(&self.ip);
            }
        }
    }
}

/// The default `max_connections`: what the open-file limit leaves after the upstream lanes.
/// Each lane's default cap is at most (soft limit − 256) / 4 (see
/// [`sluice_upstream::FdLimit::lane_ceiling`]); two lanes take half of what is left after the
/// reserve, and client connections get the other half.
pub(crate) fn default_max_connections(limit: &sluice_upstream::FdLimit) -> usize {
    limit.lane_ceiling().saturating_mul(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    fn conn(epoch: Instant, peer: &str) -> Arc<ConnTracker> {
        Arc::new(ConnTracker::new(epoch, peer.parse().unwrap(), false, None))
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_the_longest_idle_goes_and_busy_ones_stay() {
        let epoch = Instant::now();
        let l = ConnLimits::new(3, None);
        let busy = conn(epoch, "10.0.0.1:1");
        let _s1 = l.admit(&busy).unwrap();
        busy.request_started();
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let served = conn(epoch, "10.0.0.2:1");
        let _s2 = l.admit(&served).unwrap();
        served.request_started();
        served.request_ended();
        let silent = conn(epoch, "10.0.0.3:1");
        let _s3 = l.admit(&silent).unwrap();
        // Full: the silent one (never sent a request) goes first, though it is the youngest.
        let fourth = conn(epoch, "10.0.0.4:1");
        let s4 = l.admit(&fourth).unwrap();
        assert_eq!(silent.closing(), Some(CloseReason::Evicted));
        assert_eq!(s4.evicted, Some("10.0.0.3:1".parse().unwrap()));
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        fourth.request_started();
        fourth.request_ended();
        // Then the one idle the longest.
        let _s5 = l.admit(&conn(epoch, "10.0.0.5:1")).unwrap();
        assert_eq!(served.closing(), Some(CloseReason::Evicted));
        assert_eq!(busy.closing(), None, "a request in flight is never evicted");
        assert_eq!(
            l.open(),
            5,
            "the evicted hold their place until they are gone"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn when_all_are_busy_the_new_one_is_refused_and_per_ip_caps_count_peers() {
        let epoch = Instant::now();
        let l = ConnLimits::new(1, Some(1));
        let a = conn(epoch, "10.0.0.1:1");
        let s = l.admit(&a).unwrap();
        a.request_started();
        assert_eq!(
            l.admit(&conn(epoch, "10.0.0.2:1")).unwrap_err(),
            Refusal::MaxConnections
        );
        drop(s);
        assert_eq!(l.open(), 0);
        let l = ConnLimits::new(10, Some(2));
        let _a = l.admit(&conn(epoch, "10.0.0.1:1")).unwrap();
        let _b = l.admit(&conn(epoch, "10.0.0.1:2")).unwrap();
        assert_eq!(
            l.admit(&conn(epoch, "10.0.0.1:3")).unwrap_err(),
            Refusal::PerIp
        );
        l.admit(&conn(epoch, "10.0.0.2:1")).unwrap();
        let proxy = Arc::new(ConnTracker::new(
            epoch,
            "10.0.0.1:4".parse().unwrap(),
            true,
            None,
        ));
        l.admit(&proxy)
            .expect("trusted proxies are not capped per address");
    }

    #[test]
    fn the_default_cap_leaves_the_upstream_lanes_their_share() {
        let limit = sluice_upstream::FdLimit {
            soft: Some(20_000),
            hard: Some(20_000),
            raised_from: None,
            problem: None,
        };
        let clients = default_max_connections(&limit);
        assert_eq!(clients, 9872);
        assert!(clients + 2 * limit.lane_ceiling() + 256 <= 20_000);
    }
}
