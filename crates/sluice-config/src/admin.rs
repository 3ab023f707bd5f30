//! `server.admin_listen` and `server.admin_token`: who may reach the admin plane.

use std::net::SocketAddr;

use subtle::ConstantTimeEq;

/// The admin plane's default address: loopback, its own port.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9901);

/// Tokens shorter than this are accepted with a warning: a bearer token on a reachable port
/// should not be guessable.
pub(super) const MIN_TOKEN_LEN: usize = 16;

/// The admin plane's bearer token. Never printed: `Debug` shows `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl AdminToken {
    /// A token; `None` when it is empty or not printable ASCII (it must fit in a header).
    pub fn new(token: &str) -> Option<AdminToken> {
        let ok = !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic());
        ok.then(|| AdminToken(token.to_string()))
    }

    /// Whether an `Authorization` header value is `Bearer <this token>`. The comparison
    /// takes the same time wherever the first difference is (only the length may show).
    pub fn matches_header(&self, value: &[u8]) -> bool {
        let Some(given) = strip_bearer(value) else {
            return false;
        };
        given.ct_eq(self.0.as_bytes()).into()
    }
}

/// The credentials after `Bearer ` (the scheme is case-insensitive, RFC 9110).
fn strip_bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

/// Whether an admin address is reachable only from this host.
impl crate::ServerConfig {
    /// The admin plane shows the config and the traffic: reachable from other hosts, it must
    /// ask for a token. Checked by validation, and again by startup and every reload after
    /// the command line's overrides (the file alone cannot see `--admin-listen`).
    ///
    /// # Errors
    /// The admin address is not loopback and `server.admin_token` is not set.
    pub fn check_admin_exposure(&self) -> Result<(), crate::ConfigError> {
        let admin = self.admin_addr();
        if admin.ip().is_loopback() || self.admin_token.is_some() {
            return Ok(());
        }
        Err(crate::ConfigError::new(
            "server.admin_listen",
            format!(
                "{admin} is reachable from other hosts, and the admin plane shows the config and \
                 the traffic: set server.admin_token (e.g. admin_token = \"${{SLUICE_ADMIN_TOKEN}}\") \
                 or listen on loopback (127.0.0.1:9901)"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_match_exactly() {
        let t = AdminToken::new("s3cret-token-0123456789").unwrap();
        assert!(t.matches_header(b"Bearer s3cret-token-0123456789"));
        assert!(t.matches_header(b"bearer s3cret-token-0123456789"));
        assert!(!t.matches_header(b"Bearer s3cret-token-012345678"));
        assert!(!t.matches_header(b"Bearer s3cret-token-01234567890"));
        assert!(!t.matches_header(b"Basic s3cret-token-0123456789"));
        assert!(!t.matches_header(b"s3cret-token-0123456789"));
        assert!(!t.matches_header(b""));
        assert!(AdminToken::new("").is_none());
        assert!(AdminToken::new("has space").is_none());
        assert_eq!(format!("{t:?}"), "AdminToken(<redacted>)");
    }
}
