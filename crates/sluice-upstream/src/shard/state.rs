//! The state of a pooled connection of either protocol, and why one stops taking requests.

/// The state of one pooled connection. HTTP/2 connections are `Ready`, `Degraded`,
/// `Draining` or `Closed`; HTTP/1.1 connections are `Idle`, `InUse` or `Draining`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ShardState {
    /// HTTP/2: takes new streams (up to its cap).
    Ready = 0,
    /// Slow PING RTT or stalled streams: no new streams; open ones continue; recovers after
    /// 3 good pings.
    Degraded = 1,
    /// GOAWAY received, or an age or request limit reached: no new streams; closes when its
    /// last stream ends. HTTP/1.1: its request continues, then it closes.
    Draining = 2,
    /// Gone (I/O error, PING timeout, server closed it).
    Closed = 3,
    /// HTTP/1.1: kept alive, waiting for the next request.
    Idle = 4,
    /// HTTP/1.1: carrying a request (until its response body ends).
    InUse = 5,
}

impl ShardState {
    pub(crate) fn from_u8(v: u8) -> ShardState {
        match v {
            0 => ShardState::Ready,
            1 => ShardState::Degraded,
            2 => ShardState::Draining,
            4 => ShardState::Idle,
            5 => ShardState::InUse,
            _ => ShardState::Closed,
        }
    }

    /// `"ready"`, `"degraded"`, `"draining"`, `"closed"`, `"idle"` or `"in_use"`, for
    /// metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ShardState::Ready => "ready",
            ShardState::Degraded => "degraded",
            ShardState::Draining => "draining",
            ShardState::Closed => "closed",
            ShardState::Idle => "idle",
            ShardState::InUse => "in_use",
        }
    }
}

/// Why a connection was drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DrainReason {
    GoAway,
    MaxAge,
    MaxRequests,
}
