//! When to refresh a short-lived access token (Vertex AI's service-account tokens, Entra ID's
//! client-credentials tokens), as a pure state machine: the gateway's one refresh task per
//! credential drives it, and every request only reads the token it holds.
//!
//! The rules:
//! - **Refresh early.** A token of lifetime `L` is due for refresh at
//!   `min(80 % of L, L - skew)` after it was asked for, but never before half of `L` (so a
//!   token shorter than twice the skew is not refreshed the moment it arrives): one hour with
//!   the default 5-minute skew refreshes after 48 minutes, two seconds after one second.
//! - **Serve the old token until it truly expires.** A refresh in flight or failing does not
//!   take the current token away: requests keep using it until its `expires_at`, so no
//!   request waits at expiry as long as one refresh succeeds inside the window between the
//!   refresh time and the expiry.
//! - **One refresh in flight.** [`TokenCache::begin_refresh`] says yes once, until the
//!   refresh's result is reported; requests never start one.
//! - **Failures back off** from [`RefreshPolicy::retry_min`], doubling up to
//!   [`RefreshPolicy::retry_max`], but while a token is live a retry comes no later than
//!   halfway to its expiry. Once no live token is left, requests get
//!   [`TokenCache::last_error`] (for tokens, a [`super::oauth::TokenError`], classified).
//! - **Lifetimes count from when the token was asked for**, not from when the answer came:
//!   the endpoint's clock started then, so a slow answer cannot make a token look fresher
//!   than it is.
//!
//! Time is a [`Duration`] on the caller's monotonic clock since an origin it fixes (for the
//! gateway, `tokio::time::Instant::now() - origin`, so paused-time tests work). Nothing here
//! reads a clock.
//!
//! ```
//! use std::time::Duration;
//! use sluice_providers::sign::refresh::{RefreshPolicy, TokenCache};
//!
//! let s = Duration::from_secs;
//! let mut cache: TokenCache<&str, String> = TokenCache::new(RefreshPolicy::default());
//! assert_eq!(cache.token(s(0)), None);
//! assert!(cache.begin_refresh(s(0)));            // the refresh task fetches the first token
//! assert!(!cache.begin_refresh(s(0)));           // one in flight
//! cache.refresh_succeeded(s(1), "t1", s(3600));  // asked for at 0: lives until 3600
//! assert_eq!(cache.token(s(10)), Some(&"t1"));
//! assert_eq!(cache.due_at(), Some(s(2880)));     // 80 % of an hour
//! assert!(cache.begin_refresh(s(2880)));
//! assert_eq!(cache.token(s(3599)), Some(&"t1")); // still served while the refresh runs
//! assert_eq!(cache.token(s(3600)), None);        // ... until it truly expires
//! ```

use std::time::Duration;

/// The refresh schedule's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefreshPolicy {
    /// Refresh at least this long before expiry (when 80 % of the lifetime is later).
    /// Default 5 minutes.
    pub skew: Duration,
    /// The first retry after a failed refresh. Default 250 ms.
    pub retry_min: Duration,
    /// The longest wait between retries. Default 30 s.
    pub retry_max: Duration,
}

impl Default for RefreshPolicy {
    fn default() -> Self {
        RefreshPolicy {
            skew: Duration::from_secs(300),
            retry_min: Duration::from_millis(250),
            retry_max: Duration::from_secs(30),
        }
    }
}

impl RefreshPolicy {
    /// How long after it was asked for a token of `lifetime` is due for refresh:
    /// `min(80 % of lifetime, lifetime - skew)`, at least half the lifetime.
    pub fn refresh_after(&self, lifetime: Duration) -> Duration {
        let at_80 = lifetime.mul_f64(0.8);
        let before_skew = lifetime.saturating_sub(self.skew);
        at_80.min(before_skew).max(lifetime / 2)
    }

    fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        self.retry_min
            .saturating_mul(1 << doublings)
            .min(self.retry_max)
    }
}

// === impl TokenState ===

/// A token and its schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenState<T> {
    /// The token.
    pub token: T,
    /// When it was asked for.
    pub acquired_at: Duration,
    /// When the refresh is due ([`RefreshPolicy::refresh_after`] past `acquired_at`).
    pub refresh_at: Duration,
    /// When it stops being valid.
    pub expires_at: Duration,
}

impl<T> TokenState<T> {
    /// A token asked for at `acquired_at` that lives `lifetime`.
    pub fn new(
        token: T,
        acquired_at: Duration,
        lifetime: Duration,
        policy: &RefreshPolicy,
    ) -> TokenState<T> {
        TokenState {
            token,
            acquired_at,
            refresh_at: acquired_at.saturating_add(policy.refresh_after(lifetime)),
            expires_at: acquired_at.saturating_add(lifetime),
        }
    }

    /// Whether a refresh is due at `now`.
    pub fn needs_refresh(&self, now: Duration) -> bool {
        now >= self.refresh_at
    }

    /// Whether the token may still be sent at `now`.
    pub fn usable(&self, now: Duration) -> bool {
        now < self.expires_at
    }
}

// === impl TokenCache ===

/// One credential's token and the state of its refresh. `E` is the refresh's error (kept for
/// the requests that find no live token).
///
/// The refresh task's loop: wait until [`due_at`](Self::due_at) (or until woken by a request
/// that found no token), call [`begin_refresh`](Self::begin_refresh), and when it says yes,
/// fetch a token and report [`refresh_succeeded`](Self::refresh_succeeded) or
/// [`refresh_failed`](Self::refresh_failed). Requests call [`token`](Self::token).
#[derive(Clone, Debug)]
pub struct TokenCache<T, E> {
    policy: RefreshPolicy,
    current: Option<TokenState<T>>,
    /// When the refresh in flight began.
    in_flight: Option<Duration>,
    /// Refreshes failed in a row.
    failures: u32,
    retry_at: Option<Duration>,
    last_error: Option<E>,
    refreshes: u64,
    /// Tokens refused in a row, each while still young (see [`invalidate`](Self::invalidate)).
    refused: u32,
}

impl<T, E> TokenCache<T, E> {
    /// An empty cache: the first refresh is due at once.
    pub fn new(policy: RefreshPolicy) -> TokenCache<T, E> {
        TokenCache {
            policy,
            current: None,
            in_flight: None,
            failures: 0,
            retry_at: None,
            last_error: None,
            refreshes: 0,
            refused: 0,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &RefreshPolicy {
        &self.policy
    }

    /// The token to send at `now`, if one is live. Never starts a refresh.
    pub fn token(&self, now: Duration) -> Option<&T> {
        self.current
            .as_ref()
            .filter(|s| s.usable(now))
            .map(|s| &s.token)
    }

    /// The current token and its schedule, live or not.
    pub fn state(&self) -> Option<&TokenState<T>> {
        self.current.as_ref()
    }

    /// When the next refresh should begin: at once (`Duration::ZERO`) without a token, the
    /// token's refresh time, or the retry time after a failure. `None` while one is in
    /// flight.
    pub fn due_at(&self) -> Option<Duration> {
        if self.in_flight.is_some() {
            return None;
        }
        if let Some(at) = self.retry_at {
            return Some(at);
        }
        Some(
            self.current
                .as_ref()
                .map_or(Duration::ZERO, |s| s.refresh_at),
        )
    }

    /// Whether a refresh should begin at `now`; if so it is marked in flight (and counted),
    /// and the caller must report its result. `false` while one is in flight or before it is
    /// due.
    pub fn begin_refresh(&mut self, now: Duration) -> bool {
        match self.due_at() {
            Some(at) if at <= now => {
                self.in_flight = Some(now);
                self.refreshes += 1;
                true
            }
            _ => false,
        }
    }

    /// Whether a refresh is in flight.
    pub fn is_refreshing(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Refreshes begun so far (successful or not).
    pub fn refreshes(&self) -> u64 {
        self.refreshes
    }

    /// The refresh that began last produced `token`, valid for `lifetime` from when it was
    /// asked for (`now` if none was marked in flight). The old token is replaced and the
    /// failure count cleared.
    pub fn refresh_succeeded(&mut self, now: Duration, token: T, lifetime: Duration) {
        let asked = self.in_flight.take().unwrap_or(now);
        self.current = Some(TokenState::new(token, asked, lifetime, &self.policy));
        self.failures = 0;
        self.retry_at = None;
        self.last_error = None;
    }

    /// The refresh that began last failed at `now` with `error`. The current token, if live,
    /// keeps serving. Returns when the retry is due.
    pub fn refresh_failed(&mut self, now: Duration, error: E) -> Duration {
        self.in_flight = None;
        self.failures = self.failures.saturating_add(1);
        let backoff = self.policy.backoff(self.failures);
        let delay = match self.current.as_ref().filter(|s| s.usable(now)) {
            // Leave time for more attempts before the live token runs out.
            Some(s) => {
                backoff.min((s.expires_at.saturating_sub(now) / 2).max(self.policy.retry_min))
            }
            None => backoff,
        };
        let at = now.saturating_add(delay);
        self.retry_at = Some(at);
        self.last_error = Some(error);
        at
    }

    /// Refreshes failed in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The last refresh's error, until a refresh succeeds: what a request that finds no live
    /// token answers with.
    pub fn last_error(&self) -> Option<&E> {
        self.last_error.as_ref()
    }

    /// The upstream refused the current token at `now` (revoked, or a clock disagreement):
    /// drop it; a refresh is due at once unless one is in flight. Requests find no token
    /// until the refresh succeeds.
    ///
    /// A credential whose every token is refused (a wrong scope or audience) would otherwise
    /// fetch a new token per round trip: a token refused within [`RefreshPolicy::retry_max`]
    /// of being asked for, after another such refusal, waits the failure backoff first.
    pub fn invalidate(&mut self, now: Duration) {
        let young = self
            .current
            .as_ref()
            .is_some_and(|s| now.saturating_sub(s.acquired_at) < self.policy.retry_max);
        self.refused = if young {
            self.refused.saturating_add(1)
        } else {
            1
        };
        self.current = None;
        self.retry_at =
            (self.refused > 1).then(|| now.saturating_add(self.policy.backoff(self.refused - 1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn refresh_times() {
        let p = RefreshPolicy::default();
        assert_eq!(p.refresh_after(s(3600)), s(2880), "80 % comes first");
        assert_eq!(
            p.refresh_after(s(1000)),
            s(700),
            "the skew comes first: 1000 - 300"
        );
        assert_eq!(
            p.refresh_after(s(2)),
            s(1),
            "never before half the lifetime"
        );
        let tight = RefreshPolicy { skew: ms(100), ..p };
        assert_eq!(tight.refresh_after(s(2)), ms(1600));
    }

    #[test]
    fn failures_back_off_and_keep_the_live_token() {
        let mut c: TokenCache<u32, &str> = TokenCache::new(RefreshPolicy {
            skew: s(10),
            ..RefreshPolicy::default()
        });
        assert!(c.begin_refresh(s(0)));
        c.refresh_succeeded(s(0), 1, s(100));
        assert_eq!(c.due_at(), Some(s(80)));
        assert!(!c.begin_refresh(s(79)));
        assert!(c.begin_refresh(s(80)));
        assert_eq!(c.refresh_failed(s(80), "503"), s(80) + ms(250));
        assert_eq!(c.token(s(81)), Some(&1));
        assert!(c.begin_refresh(s(81)));
        assert_eq!(c.refresh_failed(s(81), "503"), s(81) + ms(500));
        // Near expiry, retries come no later than halfway to it.
        for _ in 0..6 {
            let at = c.due_at().unwrap();
            assert!(c.begin_refresh(at));
            let next = c.refresh_failed(at, "503");
            assert!(next <= at + (s(100) - at) / 2 + ms(250), "{next:?} {at:?}");
        }
        assert_eq!(c.failures(), 8);
        // Expired: no token, the error for requests, retries at the backoff.
        assert_eq!(c.token(s(100)), None);
        assert_eq!(c.last_error(), Some(&"503"));
        assert!(c.begin_refresh(s(100)));
        assert_eq!(
            c.refresh_failed(s(100), "invalid_grant"),
            s(130),
            "capped at 30 s"
        );
        assert!(c.begin_refresh(s(130)));
        c.refresh_succeeded(s(131), 2, s(100));
        assert_eq!(c.last_error(), None);
        assert_eq!(c.failures(), 0);
        let st = c.state().unwrap();
        assert_eq!((st.acquired_at, st.expires_at), (s(130), s(230)));
        assert_eq!(c.refreshes(), 11);
    }

    #[test]
    fn invalidate_drops_the_token_and_asks_for_a_refresh() {
        let mut c: TokenCache<u32, ()> = TokenCache::new(RefreshPolicy::default());
        assert!(c.begin_refresh(s(0)));
        c.refresh_succeeded(s(0), 1, s(3600));
        c.invalidate(s(1));
        assert_eq!(c.token(s(1)), None);
        assert_eq!(c.due_at(), Some(Duration::ZERO));
        assert!(c.begin_refresh(s(1)));
        c.invalidate(s(1));
        assert!(!c.begin_refresh(s(1)), "still one in flight");
    }

    #[test]
    fn tokens_refused_young_again_and_again_back_off() {
        let policy = RefreshPolicy::default();
        let mut c: TokenCache<u32, ()> = TokenCache::new(policy);
        let ms = Duration::from_millis;
        assert!(c.begin_refresh(ms(0)));
        c.refresh_succeeded(ms(0), 1, s(3600));
        // The first refusal refreshes at once (a revoked token).
        c.invalidate(ms(10));
        assert_eq!(c.due_at(), Some(Duration::ZERO));
        assert!(c.begin_refresh(ms(10)));
        c.refresh_succeeded(ms(10), 2, s(3600));
        // Its successor refused at once too: the next waits retry_min, then twice that.
        c.invalidate(ms(20));
        assert_eq!(c.due_at(), Some(ms(20) + policy.retry_min));
        assert!(!c.begin_refresh(ms(21)));
        assert!(c.begin_refresh(ms(20) + policy.retry_min));
        c.refresh_succeeded(ms(300), 3, s(3600));
        c.invalidate(ms(310));
        assert_eq!(c.due_at(), Some(ms(310) + policy.retry_min * 2));
        // A token that served past retry_max and then was refused: at once again.
        assert!(c.begin_refresh(ms(310) + policy.retry_min * 2));
        c.refresh_succeeded(ms(900), 4, s(3600));
        c.invalidate(ms(900) + policy.retry_max);
        assert_eq!(c.due_at(), Some(Duration::ZERO));
    }
}
