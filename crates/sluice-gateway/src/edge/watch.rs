//! One client connection, watched: requests in flight, idle time, a request head that is slow
//! to arrive, a response the client does not take, and the requests its client cancelled.
//!
//! The request path updates a [`ConnTracker`] with atomics only (a start, an end, a piece of a
//! response taken) and never wakes the connection's [`watchdog`]: it looks at the tracker at
//! the deadline that applies, or after the shortest client timeout, whichever comes first,
//! and is woken early only when someone asks the connection to close. So a connection costs
//! one timer, re-armed at most once per shortest timeout, whatever its request rate.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::ClientTimeouts;

/// Why the gateway closed a client connection. Low cardinality: a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CloseReason {
    /// No complete request head within `client_timeouts.header`.
    HeaderTimeout = 1,
    /// No request in flight for `client_timeouts.keep_alive`.
    KeepAliveTimeout,
    /// A non-streaming response was not taken for `client_timeouts.send`.
    SendTimeout,
    /// Too many cancelled requests: GOAWAY(ENHANCE_YOUR_CALM) on HTTP/2, a close on HTTP/1.1.
    Calm,
    /// Closed while idle to make room for a new connection at `max_connections`.
    Evicted,
}

impl CloseReason {
    /// The metric label and log value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::KeepAliveTimeout => "keep_alive_timeout",
            CloseReason::SendTimeout => "send_timeout",
            CloseReason::Calm => "enhance_your_calm",
            CloseReason::Evicted => "evicted",
        }
    }

    fn from_u8(v: u8) -> Option<CloseReason> {
        Some(match v {
            1 => CloseReason::HeaderTimeout,
            2 => CloseReason::KeepAliveTimeout,
            3 => CloseReason::SendTimeout,
            4 => CloseReason::Calm,
            5 => CloseReason::Evicted,
            _ => return None,
        })
    }
}

/// A count of events in fixed windows: more than the limit within one window trips it.
///
/// NOTE: fixed windows, not sliding ones: a burst straddling a boundary may reach twice the
/// limit before tripping. That bound is what the limit is documented as; a sliding log would
/// cost memory per event.
#[derive(Debug, Default)]
pub(crate) struct WindowCount {
    start_ms: u64,
    count: u32,
}

impl WindowCount {
    /// Counts one event at `now_ms`; true when the count within the window passed `limit`.
    pub(crate) fn hit(&mut self, now_ms: u64, window: Duration, limit: u32) -> bool {
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        if self.count == 0 || now_ms.saturating_sub(self.start_ms) >= window_ms {
            self.start_ms = now_ms;
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        self.count > limit
    }
}

/// New requests one connection may start: a token bucket refilled at `rate` per second, holding
/// at most `rate`.
#[derive(Debug)]
struct RequestRate {
    rate: f64,
    tokens: f64,
    last_ms: u64,
}

/// The shared state of one client connection.
#[derive(Debug)]
pub(crate) struct ConnTracker {
    /// Times below are milliseconds since this instant (the gateway's start), so that they fit
    /// in atomics and compare across connections (eviction picks the longest idle).
    epoch: Instant,
    pub(crate) peer: SocketAddr,
    /// `peer` as a header value (`X-Forwarded-For`), made once for all the requests.
    pub(crate) peer_header: Option<http::HeaderValue>,
    /// The peer is one of `trusted_proxies`: its connections carry many clients.
    pub(crate) trusted_peer: bool,
    accepted_ms: u64,
    in_flight: AtomicUsize,
    requests: AtomicU64,
    idle_since_ms: AtomicU64,
    /// When the first byte of a request head arrived on an idle HTTP/1.1 connection; 0 if none.
    head_started_ms: AtomicU64,
    /// Non-streaming responses being sent, and when one last handed a piece to the connection.
    sending: AtomicUsize,
    send_progress_ms: AtomicU64,
    h2: AtomicBool,
    close: AtomicU8,
    notify: Notify,
    cancels: Mutex<WindowCount>,
    rate: Option<Mutex<RequestRate>>,
}

impl ConnTracker {
    pub(crate) fn new(
        epoch: Instant,
        peer: SocketAddr,
        trusted_peer: bool,
        request_rate: Option<u32>,
    ) -> ConnTracker {
        let accepted_ms = ms_since(epoch);
        ConnTracker {
            epoch,
            peer,
            peer_header: crate::edge::client_ip::peer_header(peer),
            trusted_peer,
            accepted_ms,
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            idle_since_ms: AtomicU64::new(accepted_ms),
            head_started_ms: AtomicU64::new(0),
            sending: AtomicUsize::new(0),
            send_progress_ms: AtomicU64::new(accepted_ms),
            h2: AtomicBool::new(false),
            close: AtomicU8::new(0),
            notify: Notify::new(),
            cancels: Mutex::new(WindowCount::default()),
            rate: request_rate.map(|r| {
                Mutex::new(RequestRate {
                    rate: f64::from(r),
                    tokens: f64::from(r),
                    last_ms: accepted_ms,
                })
            }),
        }
    }

    /// Milliseconds since the gateway started.
    pub(crate) fn now_ms(&self) -> u64 {
        ms_since(self.epoch)
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// The peer's address, IPv4-mapped IPv6 shown as IPv4.
    pub(crate) fn peer_ip(&self) -> IpAddr {
        crate::edge::client_ip::canonical(self.peer.ip())
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Since when the connection has had no request in flight (ms since the epoch).
    pub(crate) fn idle_since_ms(&self) -> u64 {
        self.idle_since_ms.load(Ordering::Acquire)
    }

    pub(crate) fn set_h2(&self) {
        self.h2.store(true, Ordering::Relaxed);
    }

    pub(crate) fn is_h2(&self) -> bool {
        self.h2.load(Ordering::Relaxed)
    }

    /// Asks the connection to close (the first reason wins).
    pub(crate) fn close(&self, reason: CloseReason) {
        if self
            .close
            .compare_exchange(0, reason as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.notify.notify_one();
        }
    }

    /// Why the connection is closing, if it is.
    pub(crate) fn closing(&self) -> Option<CloseReason> {
        CloseReason::from_u8(self.close.load(Ordering::Acquire))
    }

    /// A request arrived (its head is complete).
    pub(crate) fn request_started(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.head_started_ms.store(0, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// A request ended (its response was taken, or dropped).
    pub(crate) fn request_ended(&self) {
        self.idle_since_ms.store(self.now_ms(), Ordering::Release);
        // Now idle (when this was the last): the keep-alive clock starts. The watchdog needs
        // no wake-up for it, nor for the other transitions below: see `watchdog`.
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// Bytes arrived from the client (called by the connection's I/O).
    pub(crate) fn bytes_read(&self) {
        // Only an idle HTTP/1.1 connection's next request head is timed here; a new
        // connection's first head is timed from the accept, and HTTP/2 frames between streams
        // (PING, SETTINGS, WINDOW_UPDATE) are not a request.
        if self.head_started_ms.load(Ordering::Relaxed) == 0
            && self.in_flight.load(Ordering::Relaxed) == 0
            && self.requests.load(Ordering::Relaxed) > 0
            && !self.is_h2()
        {
            self.head_started_ms
                .store(self.now_ms().max(1), Ordering::Relaxed);
        }
    }

    /// Bytes of a next request head arrived on this idle HTTP/1.1 connection and no request
    /// came of them yet.
    pub(crate) fn head_pending(&self) -> bool {
        self.head_started_ms.load(Ordering::Relaxed) != 0
    }

    /// A non-streaming response starts sending.
    pub(crate) fn send_started(&self) {
        self.send_progress_ms
            .store(self.now_ms(), Ordering::Release);
        self.sending.fetch_add(1, Ordering::AcqRel);
    }

    /// A non-streaming response handed a piece to the connection.
    pub(crate) fn send_progress(&self) {
        self.send_progress_ms
            .store(self.now_ms(), Ordering::Release);
    }

    /// A non-streaming response was sent (or dropped).
    pub(crate) fn send_ended(&self) {
        // The stamp matters only to the responses still sending (HTTP/2): with none left the
        // send deadline is not looked at, and the clock is not read.
        if self.sending.load(Ordering::Acquire) > 1 {
            self.send_progress_ms
                .store(self.now_ms(), Ordering::Release);
        }
        self.sending.fetch_sub(1, Ordering::AcqRel);
    }

    /// A request on this connection was cancelled by its client; true when that makes more
    /// than `limit` within `window`.
    pub(crate) fn cancelled(&self, window: Duration, limit: u32) -> bool {
        let now = self.now_ms();
        self.cancels.lock().hit(now, window, limit)
    }

    /// Takes a token for a new request; false when the connection is over its request rate.
    pub(crate) fn take_request_token(&self) -> bool {
        let Some(rate) = &self.rate else {
            return true;
        };
        let now = self.now_ms();
        let mut r = rate.lock();
        let elapsed = now.saturating_sub(r.last_ms) as f64 / 1000.0;
        r.tokens = (r.tokens + elapsed * r.rate).min(r.rate);
        r.last_ms = now;
        if r.tokens >= 1.0 {
            r.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The deadline that applies now, and the reason it would close the connection.
    fn deadline(&self, t: &ClientTimeouts) -> Option<(Instant, CloseReason)> {
        if self.in_flight() == 0 {
            if self.requests() == 0 {
                return Some((
                    self.at(self.accepted_ms) + t.header,
                    CloseReason::HeaderTimeout,
                ));
            }
            let idle = (
                self.at(self.idle_since_ms()) + t.keep_alive,
                CloseReason::KeepAliveTimeout,
            );
            let head = self.head_started_ms.load(Ordering::Relaxed);
            if head != 0 {
                let head = (self.at(head) + t.header, CloseReason::HeaderTimeout);
                return Some(if head.0 < idle.0 { head } else { idle });
            }
            return Some(idle);
        }
        if self.sending.load(Ordering::Acquire) > 0 {
            let progress = self.send_progress_ms.load(Ordering::Acquire);
            return Some((self.at(progress) + t.send, CloseReason::SendTimeout));
        }
        None
    }
}

fn ms_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Waits until the connection should close, and says why: a close asked for by someone else
/// (eviction, too many cancels), or one of its client timeouts.
///
/// # Cancel safety
/// Cancel safe: it only reads the tracker; a new call picks up where the last one left.
///
/// The request path never wakes it (only [`ConnTracker::close`] does): every deadline a
/// transition sets (a head started, a response sending, the connection idle) lies at least the
/// shortest client timeout after the transition, so the watchdog, which never sleeps longer
/// than that shortest timeout before it looks again, cannot miss one, and still closes at the
/// exact deadline. A keep-alive connection's requests then cost no timer and no wake-up each.
pub(crate) async fn watchdog(t: &ConnTracker, timeouts: &ClientTimeouts) -> CloseReason {
    let shortest = timeouts
        .header
        .min(timeouts.keep_alive)
        .min(timeouts.send)
        .max(Duration::from_millis(1));
    loop {
        let notified = t.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(r) = t.closing() {
            return r;
        }
        let now = Instant::now();
        let look_again = now + shortest;
        let at = match t.deadline(timeouts) {
            Some((at, reason)) => {
                if now >= at {
                    t.close(reason);
                    return reason;
                }
                at.min(look_again)
            }
            None => look_again,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = &mut notified => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts() -> ClientTimeouts {
        ClientTimeouts {
            header: Duration::from_secs(10),
            body_idle: Duration::from_secs(15),
            body: Duration::from_secs(60),
            keep_alive: Duration::from_secs(75),
            send: Duration::from_secs(30),
        }
    }

    fn tracker() -> ConnTracker {
        ConnTracker::new(Instant::now(), "127.0.0.1:1".parse().unwrap(), false, None)
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_new_connection_closes_at_the_header_timeout() {
        let t = tracker();
        let start = Instant::now();
        assert_eq!(watchdog(&t, &timeouts()).await, CloseReason::HeaderTimeout);
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn keep_alive_runs_from_the_last_response_and_a_slow_head_is_cut_at_header() {
        let t = tracker();
        t.request_started();
        let w = timeouts();
        let watch = watchdog(&t, &w);
        tokio::pin!(watch);
        // Busy with a stream for a long time: no timeout applies.
        assert!(tokio::time::timeout(Duration::from_secs(600), &mut watch)
            .await
            .is_err());
        t.request_ended();
        let idle = Instant::now();
        assert_eq!(watch.await, CloseReason::KeepAliveTimeout);
        assert_eq!(idle.elapsed(), Duration::from_secs(75));

        let t = tracker();
        t.request_started();
        t.request_ended();
        tokio::time::sleep(Duration::from_secs(30)).await;
        t.bytes_read();
        let head = Instant::now();
        assert_eq!(watchdog(&t, &w).await, CloseReason::HeaderTimeout);
        assert_eq!(head.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_not_taken_closes_at_the_send_timeout() {
        let t = tracker();
        t.request_started();
        t.send_started();
        tokio::time::sleep(Duration::from_secs(20)).await;
        t.send_progress();
        let last = Instant::now();
        assert_eq!(watchdog(&t, &timeouts()).await, CloseReason::SendTimeout);
        assert_eq!(last.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn a_close_request_wakes_the_watchdog() {
        let t = std::sync::Arc::new(tracker());
        t.request_started();
        let t2 = t.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            t2.close(CloseReason::Calm);
            t2.close(CloseReason::Evicted);
        });
        assert_eq!(watchdog(&t, &timeouts()).await, CloseReason::Calm);
    }

    #[test]
    fn window_counts_trip_past_the_limit_and_reset_with_the_window() {
        let mut w = WindowCount::default();
        let win = Duration::from_secs(10);
        assert!(!(0..3).any(|i| w.hit(i, win, 3)));
        assert!(w.hit(5, win, 3), "the 4th within the window");
        assert!(!w.hit(10_005, win, 3), "a new window");
    }

    #[tokio::test(start_paused = true)]
    async fn the_request_rate_is_a_token_bucket() {
        let t = ConnTracker::new(
            Instant::now(),
            "127.0.0.1:1".parse().unwrap(),
            false,
            Some(5),
        );
        assert_eq!((0..10).filter(|_| t.take_request_token()).count(), 5);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!((0..10).filter(|_| t.take_request_token()).count(), 2);
    }
}
