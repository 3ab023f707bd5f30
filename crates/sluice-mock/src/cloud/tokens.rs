//! The bearer tokens the mock issued, until they expire: what the Vertex and Azure paths
//! check an `Authorization: Bearer` against.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use ring::rand::{SecureRandom, SystemRandom};
use tokio::time::Instant;

/// How long an expired token is remembered as expired (rather than unknown), so a late
/// request is told its token expired.
const REMEMBER_EXPIRED: Duration = Duration::from_secs(600);

/// Which endpoint issued a token; a token is only good where its issuer's tokens are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Issuer {
    /// `POST /token` (Vertex AI).
    Google,
    /// `POST /{tenant}/oauth2/v2.0/token` (Azure OpenAI).
    Entra,
}

/// What a presented token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BearerCheck {
    /// Issued by the right endpoint and not expired.
    Live,
    /// Issued by the right endpoint, expired.
    Expired,
    /// Never issued (or by the other endpoint, or forgotten).
    Unknown,
}

#[derive(Debug)]
pub(crate) struct TokenStore {
    live: HashMap<String, (Issuer, Instant)>,
    /// Tokens in the order they were issued, for pruning.
    order: VecDeque<String>,
    max: usize,
}

impl TokenStore {
    pub(crate) fn new(max: usize) -> TokenStore {
        TokenStore {
            live: HashMap::new(),
            order: VecDeque::new(),
            max: max.max(1),
        }
    }

    /// A new token of `issuer` that lives `ttl`.
    pub(crate) fn issue(&mut self, issuer: Issuer, ttl: Duration) -> String {
        let now = Instant::now();
        self.prune(now);
        let mut bytes = [0u8; 16];
        // The system's random source does not fail on the platforms the mock runs on; a
        // zeroed token would still be unique below through the counter.
        let _ = SystemRandom::new().fill(&mut bytes);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let token = match issuer {
            Issuer::Google => format!("ya29.mock-{hex}{:x}", self.order.len()),
            Issuer::Entra => format!("entra.mock-{hex}{:x}", self.order.len()),
        };
        self.live.insert(token.clone(), (issuer, now + ttl));
        self.order.push_back(token.clone());
        token
    }

    /// Whether `token` is a live token of `issuer`.
    pub(crate) fn check(&self, token: &str, issuer: Issuer) -> BearerCheck {
        match self.live.get(token) {
            Some((i, _)) if *i != issuer => BearerCheck::Unknown,
            Some((_, expires)) if Instant::now() < *expires => BearerCheck::Live,
            Some(_) => BearerCheck::Expired,
            None => BearerCheck::Unknown,
        }
    }

    /// Forgets every token (`POST /__mock/revoke_tokens`): the next request with one gets 401.
    pub(crate) fn revoke_all(&mut self) {
        self.live.clear();
        self.order.clear();
    }

    /// Drops tokens expired long ago, and the oldest beyond the cap.
    fn prune(&mut self, now: Instant) {
        while let Some(t) = self.order.front() {
            let stale = self
                .live
                .get(t)
                .is_none_or(|(_, exp)| now.saturating_duration_since(*exp) > REMEMBER_EXPIRED);
            if !stale && self.order.len() < self.max {
                break;
            }
            if let Some(t) = self.order.pop_front() {
                self.live.remove(&t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokens_live_expire_and_are_bounded() {
        let mut s = TokenStore::new(3);
        let g = s.issue(Issuer::Google, Duration::from_secs(2));
        let e = s.issue(Issuer::Entra, Duration::from_secs(60));
        assert_ne!(g, e);
        assert_eq!(s.check(&g, Issuer::Google), BearerCheck::Live);
        assert_eq!(s.check(&g, Issuer::Entra), BearerCheck::Unknown);
        assert_eq!(s.check("ya29.other", Issuer::Google), BearerCheck::Unknown);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(s.check(&g, Issuer::Google), BearerCheck::Expired);
        assert_eq!(s.check(&e, Issuer::Entra), BearerCheck::Live);
        let more: Vec<_> = (0..3)
            .map(|_| s.issue(Issuer::Google, Duration::from_secs(60)))
            .collect();
        assert_eq!(s.check(&g, Issuer::Google), BearerCheck::Unknown, "the cap");
        assert!(more
            .iter()
            .all(|t| s.check(t, Issuer::Google) == BearerCheck::Live));
        s.revoke_all();
        assert_eq!(s.check(&more[2], Issuer::Google), BearerCheck::Unknown);
    }
}
