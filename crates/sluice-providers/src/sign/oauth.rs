//! OAuth 2.0 access tokens for providers that take a short-lived bearer token minted from a
//! longer-lived credential: the token request (a form POST: RFC 7523's JWT bearer grant for
//! Google service accounts, RFC 6749 §4.4's client credentials for Entra ID), the token
//! endpoint's answer, and its errors, classified for the policy stage.
//!
//! The gateway sends [`TokenRequest`] and hands the status and body it got back to
//! [`parse_token_response`]. Neither side of the exchange is ever printed: `Debug` of a
//! request redacts its body (the assertion or the client secret), `Debug` of an
//! [`AccessToken`] its secret, and [`TokenError`]s carry the endpoint's `error` and
//! `error_description`, which name the problem without repeating the credential.

use std::fmt;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::StatusCode;
use serde::Deserialize;

use crate::error::{ErrorClass, ProviderError};

/// The form body's content type.
pub const FORM_CONTENT_TYPE: &str = "application/x-www-form-urlencoded";

/// The largest token response read: a Google or Entra answer is under 4 KiB.
pub const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

// === impl TokenRequest ===

/// A token request to POST: where, and the form body. `Debug` leaves out the body, which
/// holds the credential.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenRequest {
    /// The token endpoint (absolute URL).
    pub url: String,
    /// The `application/x-www-form-urlencoded` body.
    pub body: String,
}

impl TokenRequest {
    /// The headers to send with it: `content-type` (the form) and `accept: application/json`.
    pub fn headers(&self) -> [(HeaderName, HeaderValue); 2] {
        [
            (
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(FORM_CONTENT_TYPE),
            ),
            (
                http::header::ACCEPT,
                HeaderValue::from_static("application/json"),
            ),
        ]
    }
}

impl fmt::Debug for TokenRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenRequest")
            .field("url", &self.url)
            .field("body", &"** redacted **")
            .finish()
    }
}

/// Appends `name=value` to a form body (`&` first unless it is empty), both percent-encoded:
/// everything but the RFC 3986 unreserved characters, so a secret holding `+`, `&` or `=`
/// arrives intact.
pub fn push_form_pair(out: &mut String, name: &str, value: &str) {
    if !out.is_empty() {
        out.push('&');
    }
    push_form_encoded(out, name);
    out.push('=');
    push_form_encoded(out, value);
}

fn push_form_encoded(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// The pairs of a form body, decoded (`+` is a space); `None` for a malformed escape or
/// text that is not UTF-8 once decoded.
pub fn parse_form(body: &str) -> Option<Vec<(String, String)>> {
    fn decode(s: &str) -> Option<String> {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' => {
                    let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                    out.push(u8::from_str_radix(hex, 16).ok()?);
                    i += 2;
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8(out).ok()
    }
    body.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((decode(k)?, decode(v)?))
        })
        .collect()
}

// === impl AccessToken ===

/// A bearer token from a token endpoint. `Debug` redacts the token.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    secret: String,
    /// How long the endpoint said it lives (`expires_in`), from when it was asked for.
    pub expires_in: Duration,
}

impl AccessToken {
    /// A token (for tests and mocks; the gateway gets them from [`parse_token_response`]).
    pub fn new(secret: impl Into<String>, expires_in: Duration) -> AccessToken {
        AccessToken {
            secret: secret.into(),
            expires_in,
        }
    }

    /// The token itself. Only the request writer should read it.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// `Authorization: Bearer {token}`, marked sensitive so it never reaches a log.
    ///
    /// # Errors
    /// [`TokenError::Malformed`] if the token holds a byte a header cannot (a control
    /// character); the error does not repeat the token.
    pub fn authorization(&self) -> Result<(HeaderName, HeaderValue), TokenError> {
        let mut v = HeaderValue::try_from(format!("Bearer {}", self.secret)).map_err(|_| {
            TokenError::Malformed {
                status: 200,
                reason: "the access token holds a character a header cannot".into(),
            }
        })?;
        v.set_sensitive(true);
        Ok((http::header::AUTHORIZATION, v))
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken")
            .field("secret", &"** redacted **")
            .field("expires_in", &self.expires_in)
            .finish()
    }
}

// === impl TokenError ===

/// Why no token came back from an exchange. Each says which side is wrong and what to do; none
/// holds the credential or a token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The endpoint answered an OAuth error (`{"error": ..., "error_description": ...}`,
    /// RFC 6749 §5.2): `invalid_grant` (a bad signature, a clock off by more than minutes, a
    /// deleted key), `invalid_client` (a wrong client secret), `invalid_scope`, ...
    #[error("the token endpoint refused the credential ({status}): {error}{}", description.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The OAuth `error` code.
        error: String,
        /// The `error_description`, as the endpoint wrote it (capped at 1 KiB).
        description: Option<String>,
    },
    /// A non-2xx answer that is not an OAuth error (a proxy's page, an overloaded endpoint).
    #[error("the token endpoint answered {status} without an OAuth error: {snippet}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The start of the body (at most 256 bytes), or the status's reason.
        snippet: String,
    },
    /// A 2xx answer without a usable token (no `access_token`, no `expires_in`, a token type
    /// other than `Bearer`).
    #[error("the token endpoint's answer ({status}) is not a usable token: {reason}")]
    Malformed {
        /// The HTTP status.
        status: u16,
        /// What is missing or wrong.
        reason: String,
    },
    /// The assertion could not be signed (the system's random source failed).
    #[error("cannot sign the token request's assertion: {0}")]
    Signing(&'static str),
}

impl TokenError {
    /// A low-cardinality label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            TokenError::Refused { .. } => "refused",
            TokenError::Status { .. } => "status",
            TokenError::Malformed { .. } => "malformed",
            TokenError::Signing(_) => "signing",
        }
    }

    /// The class the policy stage decides by: a refused credential is [`ErrorClass::Auth`]
    /// (final until someone fixes the key); 429 is rate limited, 503 overloaded, other 5xx
    /// and 408 server errors (all retryable: the old token, if still live, keeps serving);
    /// any other status is auth (a wrong token URL is a configuration error, not transient);
    /// a malformed answer is a server error.
    pub fn class(&self) -> ErrorClass {
        match self {
            TokenError::Refused { status, .. } | TokenError::Status { status, .. } => {
                match status {
                    429 => ErrorClass::RateLimited,
                    503 => ErrorClass::Overloaded,
                    408 | 500..=599 => ErrorClass::ServerError,
                    _ => ErrorClass::Auth,
                }
            }
            TokenError::Malformed { .. } | TokenError::Signing(_) => ErrorClass::ServerError,
        }
    }

    /// The error as a [`ProviderError`], for a request that has no live token to send: the
    /// class above, the endpoint's status (502 when it gave no error status), the OAuth
    /// `error` as the code (`token_endpoint_{label}` otherwise), and this error's message.
    pub fn to_provider_error(&self) -> ProviderError {
        let status = match self {
            TokenError::Refused { status, .. } | TokenError::Status { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            TokenError::Malformed { .. } | TokenError::Signing(_) => StatusCode::BAD_GATEWAY,
        };
        let code = match self {
            TokenError::Refused { error, .. } => error.clone(),
            other => format!("token_endpoint_{}", other.metric_label()),
        };
        ProviderError {
            class: self.class(),
            status,
            code: Some(code),
            message: crate::error::capped(&self.to_string()).to_string(),
            retry_after: None,
        }
    }
}

// === parse_token_response ===

#[derive(Deserialize)]
struct Success {
    access_token: Option<String>,
    // Entra's v1 endpoint sends strings ("3599"); v2 and Google send numbers.
    expires_in: Option<serde_json::Value>,
    token_type: Option<String>,
}

#[derive(Deserialize)]
struct OAuthError {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// Reads a token endpoint's answer.
///
/// # Errors
/// [`TokenError::Refused`] for an OAuth error body, [`TokenError::Status`] for any other
/// non-2xx, [`TokenError::Malformed`] for a 2xx without `access_token` and `expires_in` or
/// with a `token_type` other than `Bearer`.
pub fn parse_token_response(status: u16, body: &[u8]) -> Result<AccessToken, TokenError> {
    let body = &body[..body.len().min(MAX_TOKEN_RESPONSE)];
    if !(200..300).contains(&status) {
        if let Ok(e) = serde_json::from_slice::<OAuthError>(body) {
            if !e.error.is_empty() {
                return Err(TokenError::Refused {
                    status,
                    error: crate::error::capped(&e.error).to_string(),
                    description: e
                        .error_description
                        .filter(|d| !d.is_empty())
                        .map(|d| crate::error::capped(&d).to_string()),
                });
            }
        }
        let text = String::from_utf8_lossy(&body[..body.len().min(256)]);
        let text = text.trim();
        let snippet = if text.is_empty() || text.starts_with('<') {
            StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no body")
                .to_string()
        } else {
            text.to_string()
        };
        return Err(TokenError::Status { status, snippet });
    }
    let malformed = |reason: &str| TokenError::Malformed {
        status,
        reason: reason.to_string(),
    };
    let s: Success = serde_json::from_slice(body)
        .map_err(|e| malformed(&format!("not a JSON token response ({e})")))?;
    let token = s
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| malformed("no `access_token`"))?;
    if let Some(t) = s.token_type.as_deref() {
        if !t.eq_ignore_ascii_case("bearer") {
            return Err(malformed(&format!("`token_type` is `{t}`, not `Bearer`")));
        }
    }
    let secs = match s.expires_in {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    }
    .ok_or_else(|| malformed("no `expires_in` (seconds) to schedule the refresh by"))?;
    if secs == 0 {
        return Err(malformed("`expires_in` is 0: the token is dead on arrival"));
    }
    Ok(AccessToken {
        secret: token,
        expires_in: Duration::from_secs(secs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_pairs_round_trip() {
        let mut s = String::new();
        push_form_pair(&mut s, "client_secret", "a+b&c=d e~");
        push_form_pair(&mut s, "scope", "https://x/.default");
        assert_eq!(
            s,
            "client_secret=a%2Bb%26c%3Dd%20e~&scope=https%3A%2F%2Fx%2F.default"
        );
        assert_eq!(
            parse_form(&s).unwrap(),
            [
                ("client_secret".to_string(), "a+b&c=d e~".to_string()),
                ("scope".to_string(), "https://x/.default".to_string()),
            ]
        );
        assert_eq!(
            parse_form("a=b+c&d").unwrap(),
            [("a".into(), "b c".into()), ("d".into(), String::new())]
        );
        assert_eq!(parse_form("a=%zz"), None);
        assert_eq!(parse_form("a=%4"), None);
    }

    #[test]
    fn google_and_entra_answers() {
        let t = parse_token_response(
            200,
            br#"{"access_token":"ya29.c.abc","expires_in":3599,"token_type":"Bearer"}"#,
        )
        .unwrap();
        assert_eq!(t.secret(), "ya29.c.abc");
        assert_eq!(t.expires_in, Duration::from_secs(3599));
        let (name, value) = t.authorization().unwrap();
        assert_eq!(name, http::header::AUTHORIZATION);
        assert_eq!(value, "Bearer ya29.c.abc");
        assert!(value.is_sensitive());
        assert!(!format!("{t:?}").contains("ya29"));
        // Entra v1's string `expires_in`, extra fields.
        let t = parse_token_response(
            200,
            br#"{"token_type":"Bearer","expires_in":"3599","ext_expires_in":3599,"access_token":"eyJ0"}"#,
        )
        .unwrap();
        assert_eq!(t.expires_in, Duration::from_secs(3599));
    }

    #[test]
    fn refusals_are_verbatim_and_classified() {
        let e = parse_token_response(
            400,
            br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the token endpoint refused the credential (400): invalid_grant: Invalid JWT Signature."
        );
        assert_eq!(e.class(), ErrorClass::Auth);
        let p = e.to_provider_error();
        assert_eq!(p.status, 400);
        assert_eq!(p.code.as_deref(), Some("invalid_grant"));
        assert!(!p.class.is_retryable());

        let e = parse_token_response(503, b"<html>down</html>").unwrap_err();
        assert_eq!(
            e,
            TokenError::Status {
                status: 503,
                snippet: "Service Unavailable".into()
            }
        );
        assert_eq!(e.class(), ErrorClass::Overloaded);
        assert_eq!(
            e.to_provider_error().code.as_deref(),
            Some("token_endpoint_status")
        );
        let e = parse_token_response(
            500,
            br#"{"error":"server_error","error_description":"AADSTS50000"}"#,
        )
        .unwrap_err();
        assert!(e.class().is_retryable());
        assert_eq!(
            parse_token_response(429, b"{}").unwrap_err().class(),
            ErrorClass::RateLimited
        );
    }

    #[test]
    fn malformed_successes() {
        for (body, needle) in [
            (&br#"{"expires_in":1}"#[..], "access_token"),
            (br#"{"access_token":"x"}"#, "expires_in"),
            (br#"{"access_token":"x","expires_in":0}"#, "dead on arrival"),
            (
                br#"{"access_token":"x","expires_in":9,"token_type":"mac"}"#,
                "mac",
            ),
            (b"not json", "not a JSON"),
        ] {
            let e = parse_token_response(200, body).unwrap_err();
            assert!(e.to_string().contains(needle), "{e}");
            assert_eq!(e.metric_label(), "malformed");
            assert_eq!(e.to_provider_error().status, 502);
        }
    }

    #[test]
    fn debug_redacts_the_body() {
        let r = TokenRequest {
            url: "https://login/token".into(),
            body: "client_secret=hunter2".into(),
        };
        assert!(!format!("{r:?}").contains("hunter2"));
        assert_eq!(r.headers()[0].1, FORM_CONTENT_TYPE);
    }
}
