//! Why requests failed, counted by cause, the run's failure threshold, and the pause after
//! failed connects.
//!
//! A bench that prints "0 ok, 38195 errors" and exits 0 lies twice: it says nothing about why,
//! and a script running it believes it passed. Every scenario therefore counts its failures by
//! [`Failure`] cause and checks them against a threshold ([`check_error_rate`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use sluice_upstream::UpstreamError;
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

/// Why one request failed. [`Failure::label`] is the key of the breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The target refused the TCP connection: nothing listens there.
    ConnectRefused,
    /// Any other connect failure (unreachable, DNS).
    Connect,
    /// TCP connect plus TLS took too long.
    ConnectTimeout,
    /// The TLS handshake failed.
    Tls,
    /// The bench's own client had no connection slot in time: the load generator, not the
    /// target, was the bottleneck (raise `--connections`).
    ClientSaturated,
    /// Over the per-request timeout.
    Timeout,
    /// HTTP/2 REFUSED_STREAM.
    RefusedStream,
    /// Above a graceful GOAWAY's last stream.
    GoAway,
    /// Reset before the response headers.
    Reset,
    /// The connection closed before the response headers.
    Closed,
    /// The target broke the protocol.
    Protocol,
    /// A status other than 2xx.
    Status(u16),
    /// The response body broke off after the headers (reset, closed).
    Body,
    /// A stream carried an error event.
    ErrorEvent,
    /// A stream ended without its end marker (`[DONE]`, `message_stop`).
    Cut,
}

impl Failure {
    /// The cause's key in reports: `connect_refused`, `timeout`, `status_503`, ...
    pub fn label(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Failure::ConnectRefused => "connect_refused",
            Failure::Connect => "connect_failed",
            Failure::ConnectTimeout => "connect_timeout",
            Failure::Tls => "tls",
            Failure::ClientSaturated => "client_saturated",
            Failure::Timeout => "timeout",
            Failure::RefusedStream => "refused_stream",
            Failure::GoAway => "goaway",
            Failure::Reset => "reset_before_headers",
            Failure::Closed => "closed_before_headers",
            Failure::Protocol => "protocol_error",
            Failure::Status(s) => return Cow::Owned(format!("status_{s}")),
            Failure::Body => "body_cut",
            Failure::ErrorEvent => "error_event",
            Failure::Cut => "stream_cut",
        })
    }

    /// The cause of a failed send.
    pub fn of(e: &UpstreamError) -> Failure {
        match e {
            UpstreamError::Connect { source, .. }
                if source.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                Failure::ConnectRefused
            }
            UpstreamError::Connect { .. } => Failure::Connect,
            UpstreamError::ConnectTimeout(_) => Failure::ConnectTimeout,
            UpstreamError::Tls(_) => Failure::Tls,
            UpstreamError::PoolAcquireTimeout { .. } | UpstreamError::PoolFull { .. } => {
                Failure::ClientSaturated
            }
            // The client's deadline is the request's budget.
            UpstreamError::Deadline => Failure::Timeout,
            UpstreamError::Refused => Failure::RefusedStream,
            UpstreamError::GoAway => Failure::GoAway,
            UpstreamError::Reset(_) => Failure::Reset,
            UpstreamError::Closed => Failure::Closed,
            UpstreamError::Protocol(_) => Failure::Protocol,
        }
    }

    /// The connection could not be made: the next requests should wait (see
    /// [`ConnectBackoff`]).
    pub fn is_connect(&self) -> bool {
        matches!(
            self,
            Failure::ConnectRefused | Failure::Connect | Failure::ConnectTimeout
        )
    }
}

/// Failures counted by cause, with the first message of each (at most
/// [`Causes::MAX_SAMPLES`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Causes {
    /// Failures per cause ([`Failure::label`]).
    pub counts: BTreeMap<String, u64>,
    /// The first message of each cause, e.g. `connect_refused: upstream ... refused ...`.
    pub samples: Vec<String>,
}

impl Causes {
    /// Most messages kept.
    pub const MAX_SAMPLES: usize = 8;

    /// Counts one failure; `message` is asked for only for the first of its cause.
    pub fn record(&mut self, f: Failure, message: impl FnOnce() -> String) {
        let label = f.label();
        match self.counts.get_mut(label.as_ref()) {
            Some(n) => *n += 1,
            None => {
                if self.samples.len() < Self::MAX_SAMPLES {
                    self.samples.push(format!("{label}: {}", message()));
                }
                self.counts.insert(label.into_owned(), 1);
            }
        }
    }

    /// Adds `other`'s counts and samples.
    pub fn merge(&mut self, other: &Causes) {
        for (k, n) in &other.counts {
            *self.counts.entry(k.clone()).or_insert(0) += n;
        }
        for s in &other.samples {
            if self.samples.len() < Self::MAX_SAMPLES && !self.samples.contains(s) {
                self.samples.push(s.clone());
            }
        }
    }

    /// Failures in all.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Failures of one cause.
    pub fn count(&self, f: Failure) -> u64 {
        self.counts.get(f.label().as_ref()).copied().unwrap_or(0)
    }

    /// One line, the commonest cause first: `connect_refused 38195, status_503 2`; empty when
    /// nothing failed.
    pub fn line(&self) -> String {
        let mut v: Vec<_> = self.counts.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The default `--max-error-rate`: a run fails when most of its requests failed.
pub const DEFAULT_MAX_ERROR_RATE: f64 = 0.5;

/// A run whose share of failed requests exceeded the threshold it was given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.message())]
pub struct TooManyFailures {
    /// What was counted (`requests`, `streams`, `probes`, ...).
    pub what: String,
    /// Failed.
    pub failed: u64,
    /// Ended in all (failed or not).
    pub total: u64,
    /// The threshold, a share in 0..=1.
    pub max_rate: f64,
    /// The breakdown by cause (`Causes::line`).
    pub causes: String,
}

impl TooManyFailures {
    fn message(&self) -> String {
        if self.total == 0 {
            return format!(
                "no {} ended: nothing was measured (is the run long enough?)",
                self.what
            );
        }
        let pct = 100.0 * self.failed as f64 / self.total as f64;
        let mut m = format!(
            "{} of {} {} failed ({pct:.1}%), more than --max-error-rate {} allows",
            self.failed, self.total, self.what, self.max_rate
        );
        if !self.causes.is_empty() {
            m.push_str(&format!(": {}", self.causes));
        }
        m
    }
}

/// `Err` when more than `max_rate` (a share in 0..=1) of `total` failed, or nothing ended at
/// all (a run that measured nothing must not pass).
///
/// # Errors
/// [`TooManyFailures`], whose message gives the counts and the causes.
pub fn check_error_rate(
    what: &str,
    failed: u64,
    total: u64,
    max_rate: f64,
    causes: &Causes,
) -> Result<(), TooManyFailures> {
    if total > 0 && failed as f64 <= max_rate * total as f64 {
        return Ok(());
    }
    Err(TooManyFailures {
        what: what.to_string(),
        failed,
        total,
        max_rate,
        causes: causes.line(),
    })
}

/// After a failed connect every request of the run waits before the next attempt, and then
/// one request alone tries the target (the others wait for its outcome): a target that is
/// down gets one connect per pause, not tens of thousands per second. The pause starts at
/// [`ConnectBackoff::FIRST`], doubles with each failed try, stops at [`ConnectBackoff::MAX`],
/// and any answer from the target ends it.
#[derive(Debug, Default)]
pub struct ConnectBackoff {
    state: Mutex<BackoffState>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct BackoffState {
    /// Failed tries in a row.
    rounds: u32,
    /// No request starts before this.
    until: Option<Instant>,
    /// A request is trying the target after a pause, since then.
    trying_since: Option<Instant>,
    /// The last connect failure.
    last: Option<Failure>,
}

/// What a waiting request does next.
enum Step {
    Go,
    SleepUntil(Instant),
    AwaitTry(Instant),
}

impl ConnectBackoff {
    /// The first pause.
    pub const FIRST: Duration = Duration::from_millis(10);
    /// The longest pause.
    pub const MAX: Duration = Duration::from_secs(1);

    /// Waits out the current pause and, while the target is failing, the try of the request
    /// that went first. A try that never reports (its task was dropped) holds the others
    /// back for [`ConnectBackoff::MAX`] at most.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits (a request cancelled after being let through counts as a
    /// try that never reported).
    pub async fn wait(&self) {
        loop {
            let changed = self.changed.notified();
            let step = {
                let mut s = self.state.lock();
                let now = Instant::now();
                match (s.until, s.trying_since) {
                    (Some(t), _) if t > now => Step::SleepUntil(t),
                    (None, _) => Step::Go,
                    (Some(_), Some(since)) if now < since + Self::MAX => {
                        Step::AwaitTry(since + Self::MAX)
                    }
                    (Some(_), _) => {
                        s.trying_since = Some(now);
                        Step::Go
                    }
                }
            };
            match step {
                Step::Go => return,
                Step::SleepUntil(t) => sleep_until(t).await,
                Step::AwaitTry(by) => {
                    let _ = tokio::time::timeout_at(by, changed).await;
                }
            }
        }
    }

    /// [`ConnectBackoff::wait`], but at most until `deadline`: `Err` with the cause of the
    /// last failed connect when the pause outlasted it (the request was never sent).
    ///
    /// # Errors
    /// The failure that started the pause.
    ///
    /// # Cancel safety
    /// As [`ConnectBackoff::wait`].
    pub async fn wait_by(&self, deadline: Instant) -> Result<(), Failure> {
        match tokio::time::timeout_at(deadline, self.wait()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(self.state.lock().last.unwrap_or(Failure::Connect)),
        }
    }

    /// The request let through to try will not be sent after all (the run is over): let the
    /// next one try.
    pub fn abandon(&self) {
        self.state.lock().trying_since = None;
        self.changed.notify_waiters();
    }

    /// The current pause ends at this instant (`None`: the target is not known to be down).
    pub fn until(&self) -> Option<Instant> {
        self.state.lock().until
    }

    /// Records how a request ended: a connect failure starts or lengthens the pause (once per
    /// try: the failures of requests sent together count once), anything else ends it.
    pub fn record(&self, failure: Option<Failure>) {
        let mut s = self.state.lock();
        let now = Instant::now();
        match failure {
            Some(f) if f.is_connect() => {
                if s.until.is_some_and(|t| t > now) {
                    return;
                }
                s.rounds = s.rounds.saturating_add(1);
                let pause = Self::FIRST
                    .saturating_mul(1 << s.rounds.saturating_sub(1).min(16))
                    .min(Self::MAX);
                s.until = Some(now + pause);
                s.trying_since = None;
                s.last = Some(f);
            }
            // A failure after the connect (a status, a timeout) says the target is there.
            _ => {
                if s.until.is_none() {
                    return;
                }
                *s = BackoffState::default();
            }
        }
        drop(s);
        self.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn causes_count_and_sample_once_per_cause() {
        let mut c = Causes::default();
        for _ in 0..3 {
            c.record(Failure::ConnectRefused, || "refused".into());
        }
        c.record(Failure::Status(503), || "status 503".into());
        c.record(Failure::Timeout, || "slow".into());
        assert_eq!(c.total(), 5);
        assert_eq!(c.count(Failure::ConnectRefused), 3);
        assert_eq!(c.count(Failure::Status(503)), 1);
        assert_eq!(
            c.line(),
            "connect_refused 3, status_503 1, timeout 1",
            "commonest first, then by name"
        );
        assert_eq!(c.samples[0], "connect_refused: refused");
        assert_eq!(c.samples.len(), 3);
        let mut d = Causes::default();
        d.record(Failure::Timeout, || "slow".into());
        d.merge(&c);
        assert_eq!(d.count(Failure::Timeout), 2);
        assert_eq!(d.samples.len(), 3);
    }

    #[test]
    fn the_threshold_allows_up_to_its_share_and_nothing_measured_fails() {
        let c = Causes::default();
        assert!(check_error_rate("requests", 5, 10, 0.5, &c).is_ok());
        let e = check_error_rate("requests", 6, 10, 0.5, &c).unwrap_err();
        assert_eq!(
            e.to_string(),
            "6 of 10 requests failed (60.0%), more than --max-error-rate 0.5 allows"
        );
        assert!(check_error_rate("requests", 0, 10, 0.0, &c).is_ok());
        assert!(check_error_rate("requests", 1, 10, 0.0, &c).is_err());
        let none = check_error_rate("probes", 0, 0, 1.0, &c).unwrap_err();
        assert!(none.to_string().starts_with("no probes ended"), "{none}");
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_pause_one_request_tries_and_the_others_wait_for_it() {
        let b = Arc::new(ConnectBackoff::default());
        b.record(Some(Failure::ConnectRefused));
        let t0 = Instant::now();
        let gone = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let (b, gone) = (b.clone(), gone.clone());
            tasks.push(tokio::spawn(async move {
                b.wait().await;
                gone.fetch_add(1, Ordering::SeqCst);
            }));
        }
        tokio::time::sleep(ConnectBackoff::FIRST * 3).await;
        assert_eq!(gone.load(Ordering::SeqCst), 1, "one try after the pause");
        // It failed again: another pause, another single try.
        b.record(Some(Failure::ConnectRefused));
        assert_eq!(
            b.until(),
            Some(t0 + ConnectBackoff::FIRST * 3 + ConnectBackoff::FIRST * 2)
        );
        tokio::time::sleep(ConnectBackoff::FIRST * 3).await;
        assert_eq!(gone.load(Ordering::SeqCst), 2);
        // The target answered: everyone goes.
        b.record(None);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(gone.load(Ordering::SeqCst), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn connect_failures_back_off_per_round_and_a_success_resets() {
        let b = ConnectBackoff::default();
        assert_eq!(b.until(), None);
        let t0 = Instant::now();
        // A round of 50 concurrent failures counts once.
        for _ in 0..50 {
            b.record(Some(Failure::ConnectRefused));
        }
        assert_eq!(b.until(), Some(t0 + ConnectBackoff::FIRST));
        b.wait().await;
        assert_eq!(Instant::now(), t0 + ConnectBackoff::FIRST);
        b.record(Some(Failure::ConnectRefused));
        assert_eq!(b.until(), Some(Instant::now() + ConnectBackoff::FIRST * 2));
        for _ in 0..20 {
            b.wait().await;
            b.record(Some(Failure::Connect));
        }
        assert_eq!(b.until(), Some(Instant::now() + ConnectBackoff::MAX));
        // A status means the target answered: no more pausing.
        b.record(Some(Failure::Status(503)));
        assert_eq!(b.until(), None);
        b.record(Some(Failure::ConnectTimeout));
        assert_eq!(b.until(), Some(Instant::now() + ConnectBackoff::FIRST));
        b.record(None);
        assert_eq!(b.until(), None);
        // Nothing to wait for.
        let t = Instant::now();
        b.wait().await;
        assert_eq!(Instant::now(), t);
    }
}
