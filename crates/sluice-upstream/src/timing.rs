//! Phase timings of one request: where its time went between [`crate::Upstream::send`] and
//! the end of its response body (waiting for a slot, DNS, TCP, TLS, writing, first byte, last
//! byte).
//!
//! A [`Recorder`] travels with the request through the pool; the connectors hand it the
//! phases of the connection they opened ([`ConnectPhases`]); `send` turns it into a
//! [`PhaseTimings`] when the response headers arrive, and the [`crate::ResponseBody`] adds
//! the last byte.

use std::fmt::Write as _;
use std::time::Duration;

use tokio::time::Instant;

/// Where one request's time went, for metrics, logs and a `Server-Timing` header.
///
/// `send` puts it into the response's extensions
/// (`resp.extensions().get::<PhaseTimings>()`, without [`PhaseTimings::last_byte`]); the
/// complete record, with the last byte once the body ended, is
/// [`crate::ResponseBody::timings`].
///
/// `written`, `first_byte` and `last_byte` are offsets from the start of `send`; the others
/// are the lengths of their phases. A request that reused an open connection has no `dns`,
/// `connect` or `tls`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseTimings {
    /// Time spent waiting for a connection or stream slot, not counting the connect this
    /// request waited for (that is `dns` + `connect` + `tls`). It does count waiting for
    /// another request's connect, or for a busy connection to free a slot.
    pub acquire: Duration,
    /// Name resolution, when this request's connection was opened for it and had to resolve
    /// `base_url`'s host (or wait for a resolution in progress). `None` when the connection
    /// was reused, the addresses came from the DNS cache (see `PoolConfig::dns_refresh`), or
    /// the host is an IP address.
    pub dns: Option<Duration>,
    /// The TCP connect (all addresses tried), when this request's connection was opened for
    /// it. `None` when the connection was reused.
    pub connect: Option<Duration>,
    /// The TLS handshake, when this request's connection was opened for it over `https://`.
    /// `None` when the connection was reused or is plain TCP.
    pub tls: Option<Duration>,
    /// From the start of `send` until the request's head and body were handed to the
    /// connection (HTTP/2: queued on its stream; HTTP/1.1: given to the connection's task),
    /// which writes them to the socket moments later as flow control allows.
    pub written: Duration,
    /// From the start of `send` until the response headers arrived (time to first byte).
    pub first_byte: Duration,
    /// From the start of `send` until the response body reached its end (trailers included).
    /// `None` while the body is still being read, and for a body that failed or was dropped
    /// before its end.
    pub last_byte: Option<Duration>,
}

impl PhaseTimings {
    /// A `Server-Timing` header value (W3C Server Timing): each present phase as
    /// `name;dur=MILLISECONDS`, joined by `", "`, in the order `acquire`, `dns`, `connect`,
    /// `tls`, `written`, `ttfb`, `last`. Milliseconds have at most 3 decimals (microsecond
    /// precision), trailing zeros dropped. Absent phases are omitted, e.g.
    /// `acquire;dur=0.12, written;dur=0.3, ttfb;dur=201.5`.
    pub fn server_timing_header(&self) -> String {
        let phases = [
            ("acquire", Some(self.acquire)),
            ("dns", self.dns),
            ("connect", self.connect),
            ("tls", self.tls),
            ("written", Some(self.written)),
            ("ttfb", Some(self.first_byte)),
            ("last", self.last_byte),
        ];
        let mut out = String::new();
        for (name, dur) in phases {
            let Some(dur) = dur else { continue };
            if !out.is_empty() {
                out.push_str(", ");
            }
            let _ = write!(out, "{name};dur={}", millis(dur));
        }
        out
    }
}

/// `d` in milliseconds with at most 3 decimals and no trailing zeros: `0.12`, `5`, `1.001`.
fn millis(d: Duration) -> String {
    let micros = d.as_micros();
    let (whole, frac) = (micros / 1000, micros % 1000);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:03}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// How one connection was opened: when, and how long each step took.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectPhases {
    pub(crate) started: Instant,
    /// When the connection could take requests (after TLS; for HTTP/2, after its handshake).
    pub(crate) ready: Instant,
    pub(crate) dns: Option<Duration>,
    pub(crate) connect: Duration,
    pub(crate) tls: Option<Duration>,
}

/// Collects one request's phases while it goes through the pool.
#[derive(Debug)]
pub(crate) struct Recorder {
    start: Instant,
    acquire: Duration,
    conn: Option<ConnectPhases>,
    written: Option<Instant>,
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            acquire: Duration::ZERO,
            conn: None,
            written: None,
        }
    }

    /// A wait for a slot, from `from` until now, that ended on a connection opened as
    /// described by `conn` (`None`: an open connection).
    ///
    /// A connection that became ready only after the wait began was opened (at least partly)
    /// for this request: its phases become this request's, and the part of the wait it
    /// covers is connect time, not acquire time. One that was ready before is a reuse.
    pub(crate) fn waited(&mut self, from: Instant, conn: Option<ConnectPhases>) {
        let now = Instant::now();
        let mut wait = now.saturating_duration_since(from);
        if let Some(c) = conn.filter(|c| c.ready > from) {
            let overlap = c
                .ready
                .min(now)
                .saturating_duration_since(c.started.max(from));
            wait = wait.saturating_sub(overlap);
            self.conn = Some(c);
        }
        self.acquire += wait;
    }

    /// This request opened a connection itself (not while waiting for a slot).
    pub(crate) fn connected(&mut self, conn: ConnectPhases) {
        self.conn = Some(conn);
    }

    /// The request's head and body were handed to the connection.
    pub(crate) fn written(&mut self) {
        self.written = Some(Instant::now());
    }

    /// The response headers arrived now: the timings so far, and the start of `send`.
    pub(crate) fn first_byte(self) -> (PhaseTimings, Instant) {
        let now = Instant::now();
        let since = |t: Instant| t.saturating_duration_since(self.start);
        let timings = PhaseTimings {
            acquire: self.acquire,
            dns: self.conn.and_then(|c| c.dns),
            connect: self.conn.map(|c| c.connect),
            tls: self.conn.and_then(|c| c.tls),
            written: since(self.written.unwrap_or(now)),
            first_byte: since(now),
            last_byte: None,
        };
        (timings, self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn millis_has_at_most_three_decimals_without_trailing_zeros() {
        assert_eq!(millis(Duration::ZERO), "0");
        assert_eq!(millis(Duration::from_micros(120)), "0.12");
        assert_eq!(millis(Duration::from_micros(1_001)), "1.001");
        assert_eq!(millis(ms(5)), "5");
        assert_eq!(millis(Duration::from_nanos(2_500_999)), "2.5");
    }

    #[test]
    fn server_timing_lists_present_phases_in_order() {
        let t = PhaseTimings {
            acquire: Duration::from_micros(120),
            dns: None,
            connect: Some(ms(1)),
            tls: None,
            written: Duration::from_micros(1_300),
            first_byte: ms(201),
            last_byte: Some(ms(250)),
        };
        assert_eq!(
            t.server_timing_header(),
            "acquire;dur=0.12, connect;dur=1, written;dur=1.3, ttfb;dur=201, last;dur=250"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connect_during_the_wait_is_not_acquire_time() {
        let mut r = Recorder::new();
        let from = Instant::now();
        tokio::time::advance(ms(10)).await;
        let started = Instant::now();
        tokio::time::advance(ms(30)).await;
        let ready = Instant::now();
        tokio::time::advance(ms(5)).await;
        let conn = ConnectPhases {
            started,
            ready,
            dns: Some(ms(3)),
            connect: ms(20),
            tls: Some(ms(7)),
        };
        r.waited(from, Some(conn));
        let (t, _) = r.first_byte();
        assert_eq!(t.acquire, ms(15));
        assert_eq!(
            (t.dns, t.connect, t.tls),
            (Some(ms(3)), Some(ms(20)), Some(ms(7)))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_ready_before_the_wait_is_a_reuse() {
        let started = Instant::now();
        tokio::time::advance(ms(10)).await;
        let conn = ConnectPhases {
            started,
            ready: Instant::now(),
            dns: None,
            connect: ms(10),
            tls: None,
        };
        tokio::time::advance(ms(1)).await;
        let mut r = Recorder::new();
        let from = Instant::now();
        tokio::time::advance(ms(4)).await;
        r.waited(from, Some(conn));
        let (t, _) = r.first_byte();
        assert_eq!(t.acquire, ms(4));
        assert_eq!((t.dns, t.connect, t.tls), (None, None, None));
        assert_eq!(t.first_byte, ms(4));
    }
}
