//! A stream's deadlines on one timer: the end of the whole exchange (`total`), the idle or
//! first-token deadline, and the next heartbeat.
//!
//! A tokio `Sleep` is 112 bytes on the heap; a timer each was 336 bytes a stream. Here the
//! deadlines are plain instants and one `Sleep` is armed at the earliest of them (never later).
//! A deadline moved later (the idle clock restarted by each upstream event, the heartbeat by
//! each write) only changes its instant: the timer fires at the old time, finds nothing due and
//! is armed again. So a stream pays at most one wake per heartbeat period, instead of a
//! timer-wheel update per event.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{sleep_until, Instant, Sleep};

use super::RelayTimers;

/// Which deadline passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// The end of the whole exchange.
    Total,
    /// The idle (or, before the commit, first-token) deadline.
    Idle,
    /// Time for a heartbeat.
    Heartbeat,
}

/// Rounds of "fired, nothing due, armed again" in one poll before yielding: the timer never
/// fires before its deadline, so one is the norm; the bound only keeps a clock that misbehaves
/// from spinning a worker.
const MAX_REARMS: usize = 4;

/// The stream's deadlines and the one timer armed at the earliest.
pub(crate) struct StreamClock {
    timer: Pin<Box<Sleep>>,
    total_by: Instant,
    idle_at: Instant,
    heartbeat_at: Instant,
    /// The longest gap between events after the first content.
    idle: Duration,
    heartbeat: Duration,
}

impl StreamClock {
    /// A clock for `timers`, its idle deadline at `idle_at` (the first attempt's first-token
    /// deadline); the first heartbeat is due one period from now.
    pub(crate) fn new(timers: RelayTimers, idle_at: Instant) -> Self {
        let heartbeat_at = Instant::now() + timers.heartbeat;
        StreamClock {
            timer: Box::pin(sleep_until(timers.total_by.min(idle_at).min(heartbeat_at))),
            total_by: timers.total_by,
            idle_at,
            heartbeat_at,
            idle: timers.idle,
            heartbeat: timers.heartbeat,
        }
    }

    /// The longest gap between events after the first content.
    pub(crate) fn idle(&self) -> Duration {
        self.idle
    }

    /// The end of the whole exchange.
    pub(crate) fn total_by(&self) -> Instant {
        self.total_by
    }

    /// Moves the idle deadline to `at`.
    pub(crate) fn set_idle(&mut self, at: Instant) {
        self.idle_at = at;
        self.arm_before(at);
    }

    /// The next heartbeat is due one period after `now` (something was just written).
    pub(crate) fn wrote(&mut self, now: Instant) {
        // Later than before: the timer, armed no later than the old heartbeat, stays.
        self.heartbeat_at = now + self.heartbeat;
    }

    /// Arms the timer earlier if `at` is before where it is armed.
    fn arm_before(&mut self, at: Instant) {
        if at < self.timer.deadline() {
            self.timer.as_mut().reset(at);
        }
    }

    /// The earliest deadline in force (the idle one only while `idle_armed`).
    fn earliest(&self, idle_armed: bool) -> Instant {
        let at = self.total_by.min(self.heartbeat_at);
        if idle_armed {
            at.min(self.idle_at)
        } else {
            at
        }
    }

    /// The first deadline that has passed, in the order total, idle, heartbeat; `Pending`
    /// (with the waker registered) until one has. `idle_armed` false leaves the idle deadline
    /// out (while another attempt is being made, its own deadlines bound it). A deadline that
    /// passed stays due until it is moved (the total one for good).
    pub(crate) fn poll_due(&mut self, cx: &mut Context<'_>, idle_armed: bool) -> Poll<Due> {
        for _ in 0..MAX_REARMS {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            if now >= self.total_by {
                return Poll::Ready(Due::Total);
            }
            if idle_armed && now >= self.idle_at {
                return Poll::Ready(Due::Idle);
            }
            if now >= self.heartbeat_at {
                return Poll::Ready(Due::Heartbeat);
            }
            let at = self.earliest(idle_armed);
            self.timer.as_mut().reset(at);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn clock(total_by: Instant, idle_at: Instant, heartbeat: Duration) -> StreamClock {
        let timers = RelayTimers {
            idle: S,
            total_by,
            heartbeat,
        };
        StreamClock::new(timers, idle_at)
    }

    /// Waits for the next due deadline; what it was and when (seconds from `t0`).
    async fn next(clock: &mut StreamClock, idle_armed: bool, t0: Instant) -> (Due, Duration) {
        let due = poll_fn(|cx| clock.poll_due(cx, idle_armed)).await;
        (due, t0.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn each_deadline_fires_at_its_own_time_with_its_kind() {
        let t0 = Instant::now();
        let mut c = clock(t0 + 10 * S, t0 + 3 * S, 2 * S);
        assert_eq!(next(&mut c, true, t0).await, (Due::Heartbeat, 2 * S));
        c.wrote(Instant::now());
        assert_eq!(next(&mut c, true, t0).await, (Due::Idle, 3 * S));
        // The idle clock restarted (an event came): the heartbeat is next, at 2 + 2 s.
        c.set_idle(Instant::now() + 5 * S);
        assert_eq!(next(&mut c, true, t0).await, (Due::Heartbeat, 4 * S));
        c.wrote(Instant::now());
        assert_eq!(next(&mut c, true, t0).await, (Due::Heartbeat, 6 * S));
        c.wrote(Instant::now());
        assert_eq!(next(&mut c, true, t0).await, (Due::Idle, 8 * S));
        c.set_idle(Instant::now() + 5 * S);
        c.wrote(Instant::now());
        // Total (10 s) comes before the heartbeat (10 s too) and the idle deadline (13 s).
        assert_eq!(next(&mut c, true, t0).await, (Due::Total, 10 * S));
        // And stays due.
        assert_eq!(next(&mut c, true, t0).await, (Due::Total, 10 * S));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_later_does_not_fire_at_its_old_time() {
        let t0 = Instant::now();
        let mut c = clock(t0 + 100 * S, t0 + 3 * S, 10 * S);
        // Events every second for 5 s, each restarting the idle clock (3 s).
        for _ in 0..5 {
            tokio::time::sleep(S).await;
            c.set_idle(Instant::now() + 3 * S);
        }
        // The last event at 5 s: idle at 8 s, not at any of the earlier deadlines.
        assert_eq!(next(&mut c, true, t0).await, (Due::Idle, 8 * S));
        // Writes push the heartbeat on the same way.
        c.set_idle(t0 + 50 * S);
        tokio::time::sleep(S).await;
        c.wrote(Instant::now());
        assert_eq!(next(&mut c, true, t0).await, (Due::Heartbeat, 19 * S));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_earlier_fires_then() {
        let t0 = Instant::now();
        let mut c = clock(t0 + 100 * S, t0 + 60 * S, 30 * S);
        // A new attempt's first-token deadline, earlier than anything armed.
        c.set_idle(t0 + 2 * S);
        assert_eq!(next(&mut c, true, t0).await, (Due::Idle, 2 * S));
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_deadline_is_left_out_while_not_armed() {
        let t0 = Instant::now();
        let mut c = clock(t0 + 20 * S, t0 + 3 * S, 5 * S);
        // Past the idle deadline, but it is not in force: the heartbeat is what comes.
        assert_eq!(next(&mut c, false, t0).await, (Due::Heartbeat, 5 * S));
        c.wrote(Instant::now());
        // In force again (the next attempt answered): due at once, as it passed long ago.
        assert_eq!(next(&mut c, true, t0).await, (Due::Idle, 5 * S));
        c.set_idle(t0 + 100 * S);
        assert_eq!(next(&mut c, true, t0).await, (Due::Heartbeat, 10 * S));
        c.set_idle(t0 + 100 * S);
        c.wrote(Instant::now() + 100 * S);
        assert_eq!(next(&mut c, false, t0).await, (Due::Total, 20 * S));
    }
}
