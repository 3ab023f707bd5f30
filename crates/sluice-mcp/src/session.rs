//! Client session ids that carry their own state: the upstream session of every server, the
//! negotiated version, the key the session belongs to and when it was issued, signed with
//! HMAC-SHA256 under `mcp.session_secret`. Any instance holding the secret serves the next
//! request of a session; nothing is stored (an instance may keep soft state on top: upstream
//! sessions it repaired, ids it saw deleted; losing it costs a re-`initialize` upstream).
//!
//! Layout (then base64url without padding):
//!
//! ```text
//! format(1) issued_at(8, BE unix seconds) version(1) key_tag(8)
//! count(1) { name_len(1) name  state(1) [version(1)] [id_len(1) id] }*
//! tag(32) = HMAC-SHA256(secret, "sluice-mcp-session" || all of the above)
//! ```
//!
//! NOTE: the id is signed, not encrypted: a client can read its own upstream session ids (and
//! the servers' names) but cannot change or forge any. We accept this because those ids are
//! useless without the upstream credentials, which the client never sees; encrypting (AEAD)
//! would hide them at a similar cost if that ever matters.
//!
//! The tag is checked (in constant time, `ring::hmac::verify`) before a byte of the payload is
//! interpreted, and every length is bounded, so a forged or altered id costs one HMAC and is
//! refused, never a panic.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::hmac;

use crate::protocol::Version;

/// The largest session id accepted, in characters (a header value of a few servers' ids is
/// a few hundred).
pub const MAX_SESSION_ID_LEN: usize = 8 * 1024;

const FORMAT: u8 = 1;
const DOMAIN: &[u8] = b"sluice-mcp-session";
const TAG_LEN: usize = 32;

/// The state of one upstream server within a client session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamState {
    /// The server could not be reached when the session began: left out of its answers.
    Unavailable,
    /// Served without an upstream session: a stateless server, a 2026-07-28 server, or a
    /// stdio server (one process, shared).
    Sessionless {
        /// The version spoken to it.
        version: Version,
    },
    /// An upstream session.
    Session {
        /// The version the server negotiated.
        version: Version,
        /// Its `Mcp-Session-Id` (visible ASCII, at most 255 bytes).
        id: String,
    },
}

/// One server's part of a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamEntry {
    /// The server's configured name.
    pub server: String,
    /// Its state.
    pub state: UpstreamState,
}

/// What a session id says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionClaims {
    /// Unix seconds at `initialize`.
    pub issued_at: u64,
    /// The version negotiated with the client.
    pub version: Version,
    /// The first 8 bytes of SHA-256 of the key id the session belongs to ([`key_tag`]).
    pub key_tag: [u8; 8],
    /// The servers the key could use when the session began.
    pub upstreams: Vec<UpstreamEntry>,
}

impl SessionClaims {
    /// The entry of `server`, if the session has one.
    pub fn upstream(&self, server: &str) -> Option<&UpstreamEntry> {
        self.upstreams.iter().find(|u| u.server == server)
    }
}

/// Why a session id was refused. All of them answer 404 (the client starts a new session);
/// the variants are for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// Not base64url, too long or too short.
    #[error("the session id is malformed")]
    Malformed,
    /// The tag does not match: forged, altered, or signed with another secret.
    #[error("the session id's signature does not match")]
    BadSignature,
    /// Signed by us but unreadable (another format).
    #[error("the session id has an unknown format")]
    UnknownFormat,
    /// Older than `mcp.session_ttl`.
    #[error("the session has expired")]
    Expired,
    /// Issued to another key.
    #[error("the session belongs to another key")]
    WrongKey,
}

impl SessionError {
    /// A short, fixed label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SessionError::Malformed => "malformed",
            SessionError::BadSignature => "bad_signature",
            SessionError::UnknownFormat => "unknown_format",
            SessionError::Expired => "expired",
            SessionError::WrongKey => "wrong_key",
        }
    }
}

/// Why claims could not be made into an id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MintError {
    /// More than 255 servers, or a name or upstream id past 255 bytes or not visible ASCII.
    #[error("cannot encode the session: {0}")]
    TooLarge(&'static str),
}

/// Mints and verifies session ids under one secret.
#[derive(Clone)]
pub struct SessionCodec {
    key: hmac::Key,
    ttl: Duration,
}

impl std::fmt::Debug for SessionCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCodec")
            .field("key", &"<redacted>")
            .field("ttl", &self.ttl)
            .finish()
    }
}

/// The key tag of a key id (`None`: a caller without a key).
pub fn key_tag(key_id: Option<&str>) -> [u8; 8] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    match key_id {
        Some(k) => {
            ctx.update(b"k:");
            ctx.update(k.as_bytes());
        }
        None => ctx.update(b"anonymous"),
    }
    let d = ctx.finish();
    let mut t = [0u8; 8];
    t.copy_from_slice(&d.as_ref()[..8]);
    t
}

impl SessionCodec {
    /// A codec for `secret`; ids older than `ttl` are refused.
    pub fn new(secret: &[u8], ttl: Duration) -> SessionCodec {
        SessionCodec {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            ttl,
        }
    }

    /// The id of `claims`.
    ///
    /// # Errors
    /// A server name or upstream id that does not fit the layout.
    pub fn mint(&self, claims: &SessionClaims) -> Result<String, MintError> {
        let mut p = Vec::with_capacity(64 + claims.upstreams.len() * 48);
        p.push(FORMAT);
        p.extend_from_slice(&claims.issued_at.to_be_bytes());
        p.push(claims.version.code());
        p.extend_from_slice(&claims.key_tag);
        let count =
            u8::try_from(claims.upstreams.len()).map_err(|_| MintError::TooLarge("servers"))?;
        p.push(count);
        for u in &claims.upstreams {
            push_short(&mut p, u.server.as_bytes(), "server name")?;
            match &u.state {
                UpstreamState::Unavailable => p.push(0),
                UpstreamState::Sessionless { version } => {
                    p.push(1);
                    p.push(version.code());
                }
                UpstreamState::Session { version, id } => {
                    if !id.bytes().all(|b| b.is_ascii_graphic()) {
                        return Err(MintError::TooLarge("upstream session id"));
                    }
                    p.push(2);
                    p.push(version.code());
                    push_short(&mut p, id.as_bytes(), "upstream session id")?;
                }
            }
        }
        let tag = self.sign(&p);
        p.extend_from_slice(tag.as_ref());
        Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&p))
    }

    /// The claims of `id`, if it is ours, unaltered, unexpired at `now` and issued to the key
    /// whose tag is `key`.
    ///
    /// # Errors
    /// Why it was refused.
    pub fn verify(
        &self,
        id: &str,
        key: [u8; 8],
        now: SystemTime,
    ) -> Result<SessionClaims, SessionError> {
        if id.len() > MAX_SESSION_ID_LEN {
            return Err(SessionError::Malformed);
        }
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(id.as_bytes())
            .map_err(|_| SessionError::Malformed)?;
        if raw.len() < TAG_LEN + 1 {
            return Err(SessionError::Malformed);
        }
        let (payload, tag) = raw.split_at(raw.len() - TAG_LEN);
        let mut ctx_bytes = Vec::with_capacity(DOMAIN.len() + payload.len());
        ctx_bytes.extend_from_slice(DOMAIN);
        ctx_bytes.extend_from_slice(payload);
        hmac::verify(&self.key, &ctx_bytes, tag).map_err(|_| SessionError::BadSignature)?;
        let claims = decode(payload).ok_or(SessionError::UnknownFormat)?;
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // A clock a little behind another instance's is not an expiry.
        if claims.issued_at > now + 300 || now.saturating_sub(claims.issued_at) > self.ttl.as_secs()
        {
            return Err(SessionError::Expired);
        }
        if claims.key_tag != key {
            return Err(SessionError::WrongKey);
        }
        Ok(claims)
    }

    fn sign(&self, payload: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(DOMAIN);
        ctx.update(payload);
        ctx.sign()
    }
}

fn push_short(p: &mut Vec<u8>, bytes: &[u8], what: &'static str) -> Result<(), MintError> {
    let len = u8::try_from(bytes.len()).map_err(|_| MintError::TooLarge(what))?;
    p.push(len);
    p.extend_from_slice(bytes);
    Ok(())
}

/// Reads a payload whose tag was checked. Still bounds-checked everywhere: a secret shared
/// with a buggy minter must not make a panic.
fn decode(p: &[u8]) -> Option<SessionClaims> {
    let mut r = Reader(p);
    if r.u8()? != FORMAT {
        return None;
    }
    let issued_at = u64::from_be_bytes(r.take(8)?.try_into().ok()?);
    let version = Version::from_code(r.u8()?)?;
    let key_tag: [u8; 8] = r.take(8)?.try_into().ok()?;
    let count = r.u8()?;
    let mut upstreams = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let server = r.short_str()?;
        let state = match r.u8()? {
            0 => UpstreamState::Unavailable,
            1 => UpstreamState::Sessionless {
                version: Version::from_code(r.u8()?)?,
            },
            2 => UpstreamState::Session {
                version: Version::from_code(r.u8()?)?,
                id: r.short_str()?,
            },
            _ => return None,
        };
        upstreams.push(UpstreamEntry { server, state });
    }
    if !r.0.is_empty() {
        return None;
    }
    Some(SessionClaims {
        issued_at,
        version,
        key_tag,
        upstreams,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u8(&mut self) -> Option<u8> {
        let (b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*b)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn short_str(&mut self) -> Option<String> {
        let n = self.u8()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

/// Unix seconds now.
pub fn unix_now(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> SessionClaims {
        SessionClaims {
            issued_at: unix_now(SystemTime::now()),
            version: Version::V2025_11_25,
            key_tag: key_tag(Some("alice")),
            upstreams: vec![
                UpstreamEntry {
                    server: "alpha".into(),
                    state: UpstreamState::Session {
                        version: Version::V2025_11_25,
                        id: "9afdbc8c1de24dc785a0f6cba41fb8cc".into(),
                    },
                },
                UpstreamEntry {
                    server: "beta".into(),
                    state: UpstreamState::Sessionless {
                        version: Version::V2026_07_28,
                    },
                },
                UpstreamEntry {
                    server: "gamma".into(),
                    state: UpstreamState::Unavailable,
                },
            ],
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let codec = SessionCodec::new(&[7; 32], Duration::from_secs(3600));
        let c = claims();
        let id = codec.mint(&c).unwrap();
        assert!(id.bytes().all(|b| b.is_ascii_graphic()));
        let now = SystemTime::now();
        assert_eq!(codec.verify(&id, c.key_tag, now).unwrap(), c);
        // Another key's session.
        assert_eq!(
            codec.verify(&id, key_tag(Some("bob")), now),
            Err(SessionError::WrongKey)
        );
        assert_ne!(key_tag(None), key_tag(Some("")));
        // Another secret.
        let other = SessionCodec::new(&[8; 32], Duration::from_secs(3600));
        assert_eq!(
            other.verify(&id, c.key_tag, now),
            Err(SessionError::BadSignature)
        );
        // Every single-character change is refused.
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        for i in 0..id.len() {
            let mut b = id.clone().into_bytes();
            b[i] = alphabet[(alphabet.iter().position(|&x| x == b[i]).unwrap() + 1) % 64];
            let s = String::from_utf8(b).unwrap();
            assert!(codec.verify(&s, c.key_tag, now).is_err(), "{i}");
        }
        // Expiry.
        let later = now + Duration::from_secs(3601);
        assert_eq!(
            codec.verify(&id, c.key_tag, later),
            Err(SessionError::Expired)
        );
        assert_eq!(
            codec.verify("not base64!", c.key_tag, now),
            Err(SessionError::Malformed)
        );
        assert_eq!(
            codec.verify("", c.key_tag, now),
            Err(SessionError::Malformed)
        );
    }

    #[test]
    fn what_cannot_be_encoded_is_refused() {
        let codec = SessionCodec::new(&[7; 32], Duration::from_secs(3600));
        let mut c = claims();
        c.upstreams[0].state = UpstreamState::Session {
            version: Version::V2025_11_25,
            id: "x".repeat(256),
        };
        assert!(codec.mint(&c).is_err());
        c.upstreams[0].state = UpstreamState::Session {
            version: Version::V2025_11_25,
            id: "has space".into(),
        };
        assert!(codec.mint(&c).is_err());
    }
}
