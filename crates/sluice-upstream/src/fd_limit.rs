//! The process's open-file limit (RLIMIT_NOFILE): read once, the soft limit raised to the hard
//! limit (as nginx's `worker_rlimit_nofile` and HAProxy's automatic `ulimit-n` do), and the
//! ceiling it puts on a lane's default connection cap.
//!
//! Every HTTP/1.1 request in flight holds a socket, and so does the client connection it came
//! in on. A default cap the process cannot back with file descriptors would turn a burst into
//! `EMFILE` on accept and connect (every client and upstream failing at once) instead of a
//! bounded wait for a slot.

use std::sync::OnceLock;

/// File descriptors set aside for everything that is not a proxied request: listeners, the
/// runtime's epoll and event fds, DNS sockets, log files, certificate files, admin clients.
const RESERVED: u64 = 256;

/// What a lane's default cap may never exceed when the limit is unknown (non-Unix), or so
/// large that it does not bind.
const UNBOUNDED_CEILING: usize = usize::MAX;

/// The process's open-file limit as [`fd_limit`] found it and left it.
///
/// Its `Display` is the startup log line, e.g. `open files: soft limit 20000 (raised from
/// 1024), hard 20000; a lane's default connection cap is at most 4936`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdLimit {
    /// The soft limit in force after the raise; `None` when unlimited or unknown.
    pub soft: Option<u64>,
    /// The hard limit; `None` when unlimited or unknown.
    pub hard: Option<u64>,
    /// The soft limit before the raise, when it was raised.
    pub raised_from: Option<u64>,
    /// Why the soft limit could not be read or raised, if it could not.
    pub problem: Option<String>,
}

impl FdLimit {
    /// The most connections one lane's default `max_connections` may be:
    /// (soft limit − 256 reserved) / 4, because each proxied request holds two descriptors (the
    /// client's connection and the upstream's) and the two lanes share the process. At least 1;
    /// `usize::MAX` when the limit is unlimited or unknown.
    ///
    /// NOTE: we accept that several busy HTTP/1.1 upstreams can together exceed this (each
    /// lane is checked on its own): dividing by the number of upstreams would shrink every
    /// upstream's cap for the sake of ones that may carry no traffic. Such deployments raise
    /// the hard limit (`LimitNOFILE=`, `ulimit -Hn`) instead.
    pub fn lane_ceiling(&self) -> usize {
        match self.soft {
            None => UNBOUNDED_CEILING,
            Some(soft) => {
                let per_lane = soft.saturating_sub(RESERVED) / 4;
                usize::try_from(per_lane).unwrap_or(usize::MAX).max(1)
            }
        }
    }
}

impl std::fmt::Display for FdLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |v: Option<u64>| v.map_or_else(|| "unlimited".to_string(), |v| v.to_string());
        write!(f, "open files: soft limit {}", n(self.soft))?;
        if let Some(from) = self.raised_from {
            write!(f, " (raised from {from})")?;
        }
        write!(f, ", hard {}", n(self.hard))?;
        match self.lane_ceiling() {
            UNBOUNDED_CEILING => write!(f, "; lane connection caps are not bounded by it")?,
            c => write!(f, "; a lane's default connection cap is at most {c}")?,
        }
        if let Some(p) = &self.problem {
            write!(f, " ({p})")?;
        }
        Ok(())
    }
}

/// The process's open-file limit. The first call raises the soft limit to the hard limit (once
/// per process; later calls return the same answer). [`crate::Upstream::new`] calls it, so that
/// default caps are derived from the raised limit; a server calls it at startup to log it.
///
/// Never fails: a limit that cannot be read or raised is reported in [`FdLimit::problem`] and
/// the limit in force is used.
pub fn fd_limit() -> FdLimit {
    static LIMIT: OnceLock<FdLimit> = OnceLock::new();
    LIMIT.get_or_init(raise).clone()
}

#[cfg(unix)]
fn raise() -> FdLimit {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let before = getrlimit(Resource::Nofile);
    let mut out = FdLimit {
        soft: before.current,
        hard: before.maximum,
        raised_from: None,
        problem: None,
    };
    // An unlimited hard limit is not a valid soft limit for open files on every system
    // (macOS wants at most OPEN_MAX); 2^20 is Linux's default nr_open.
    let target = before.maximum.unwrap_or(1 << 20);
    if let Some(current) = before.current.filter(|c| *c < target) {
        let new = Rlimit {
            current: Some(target),
            maximum: before.maximum,
        };
        match setrlimit(Resource::Nofile, new) {
            Ok(()) => {
                out.soft = getrlimit(Resource::Nofile).current;
                out.raised_from = Some(current);
            }
            Err(e) => out.problem = Some(format!("could not raise the soft limit: {e}")),
        }
    }
    out
}

#[cfg(not(unix))]
fn raise() -> FdLimit {
    FdLimit {
        soft: None,
        hard: None,
        raised_from: None,
        problem: Some("the open-file limit is not read on this platform".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soft(n: Option<u64>) -> FdLimit {
        FdLimit {
            soft: n,
            hard: n,
            raised_from: None,
            problem: None,
        }
    }

    #[test]
    fn the_ceiling_leaves_a_reserve_and_counts_two_sockets_per_request_and_two_lanes() {
        assert_eq!(soft(Some(1024)).lane_ceiling(), (1024 - 256) / 4);
        assert_eq!(soft(Some(20_000)).lane_ceiling(), 4936);
        assert_eq!(soft(Some(10)).lane_ceiling(), 1, "never 0");
        assert_eq!(soft(None).lane_ceiling(), usize::MAX);
    }

    #[test]
    fn the_log_line_says_what_was_raised_and_the_ceiling() {
        let mut l = soft(Some(20_000));
        l.raised_from = Some(1024);
        assert_eq!(
            l.to_string(),
            "open files: soft limit 20000 (raised from 1024), hard 20000; \
             a lane's default connection cap is at most 4936"
        );
        assert!(soft(None).to_string().contains("not bounded"));
    }

    #[cfg(unix)]
    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let l = fd_limit();
        assert_eq!(l, fd_limit(), "read once");
        if l.problem.is_none() {
            let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
            assert_eq!(now.current, l.soft);
            assert_eq!(now.current, l.hard.or(Some(1 << 20)));
        }
    }
}
