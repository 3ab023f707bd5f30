//! The two token endpoints, answering and refusing as Google's and Microsoft's do.
//!
//! - `POST /token` (Google, RFC 7523 JWT bearer grant): the assertion must be an RS256 JWT
//!   whose `iss` is a configured service account, signed by its key (`kid` picks it when
//!   given), with an `aud` ending in `/token`, a `scope`, and `iat`/`exp` at most an hour
//!   apart around now. Errors are `{"error", "error_description"}` with Google's texts
//!   (`invalid_grant` "Invalid JWT Signature.", ...).
//! - `POST /{tenant}/oauth2/v2.0/token` (Entra ID client credentials): a configured
//!   `client_id` with its `client_secret`, `grant_type=client_credentials`, a `scope` ending
//!   in `/.default`. Errors carry Entra's `AADSTS` codes (`invalid_client` AADSTS7000215 for
//!   a wrong secret, ...).
//!
//! Both answer `{"access_token", "expires_in", "token_type": "Bearer"}` with a token from the
//! shared store, valid for [`super::CloudConfig::token_ttl`].

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http::StatusCode;
use ring::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};
use serde::Deserialize;
use serde_json::json;
use sluice_providers::sign::google::JWT_BEARER_GRANT;
use sluice_providers::sign::oauth::parse_form;

use super::{CloudState, Issuer};
use crate::route::Reply;
use crate::stats::AuthEvent;

/// Google's clock tolerance for `iat` in the future.
const IAT_SKEW_SECS: u64 = 300;

/// An OAuth error reply (RFC 6749 §5.2).
pub(crate) fn oauth_error(status: StatusCode, error: &str, description: &str) -> Reply {
    Reply::Full {
        status,
        body: Bytes::from(json!({ "error": error, "error_description": description }).to_string()),
        headers: vec![("cache-control", "no-store".to_string())],
    }
}

fn refused(status: StatusCode, error: &str, description: &str) -> (Reply, AuthEvent) {
    (
        oauth_error(status, error, description),
        AuthEvent::TokenRefused,
    )
}

fn issued(cloud: &CloudState, issuer: Issuer) -> Reply {
    let ttl = cloud.cfg.token_ttl;
    let token = cloud.tokens().issue(issuer, ttl);
    let expires_in = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    Reply::Full {
        status: StatusCode::OK,
        body: Bytes::from(
            json!({
                "access_token": token,
                "expires_in": expires_in.max(1),
                "token_type": "Bearer",
            })
            .to_string(),
        ),
        headers: vec![("cache-control", "no-store".to_string())],
    }
}

fn form(body: &[u8]) -> Option<Vec<(String, String)>> {
    parse_form(std::str::from_utf8(body).ok()?)
}

fn field<'a>(form: &'a [(String, String)], name: &str) -> Option<&'a str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

// === POST /token ===

#[derive(Deserialize)]
struct JwtHeader {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

#[derive(Deserialize)]
struct Claims {
    iss: Option<String>,
    scope: Option<String>,
    aud: Option<String>,
    iat: Option<u64>,
    exp: Option<u64>,
}

fn b64(segment: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(segment.trim_end_matches('=')).ok()
}

/// `POST /token`: a JWT-bearer grant.
pub(crate) fn google_token(body: &[u8], cloud: &CloudState) -> (Reply, AuthEvent) {
    let bad = StatusCode::BAD_REQUEST;
    let Some(form) = form(body) else {
        return refused(bad, "invalid_request", "The request body is not a form.");
    };
    match field(&form, "grant_type") {
        Some(JWT_BEARER_GRANT) => {}
        Some(g) => {
            return refused(
                bad,
                "unsupported_grant_type",
                &format!("Invalid grant_type: {g}"),
            )
        }
        None => {
            return refused(
                bad,
                "invalid_request",
                "Missing required parameter: grant_type",
            )
        }
    }
    let Some(assertion) = field(&form, "assertion") else {
        return refused(
            bad,
            "invalid_request",
            "Missing required parameter: assertion",
        );
    };
    let parts: Vec<&str> = assertion.split('.').collect();
    let decoded = match parts.as_slice() {
        [h, c, s] => (|| Some((b64(h)?, b64(c)?, b64(s)?)))(),
        _ => None,
    };
    let Some((header, claims, signature)) = decoded else {
        return refused(
            bad,
            "invalid_grant",
            "Invalid JWT: not three base64url segments.",
        );
    };
    let (Ok(header), Ok(claims)) = (
        serde_json::from_slice::<JwtHeader>(&header),
        serde_json::from_slice::<Claims>(&claims),
    ) else {
        return refused(
            bad,
            "invalid_grant",
            "Invalid JWT: the header or claims are not JSON.",
        );
    };
    if header.alg != "RS256" {
        return refused(bad, "invalid_grant", "Invalid JWT: only RS256 is accepted.");
    }
    let iss = claims.iss.as_deref().unwrap_or("");
    let accounts: Vec<_> = cloud
        .cfg
        .service_accounts
        .iter()
        .filter(|a| a.client_email == iss)
        .collect();
    if accounts.is_empty() {
        return refused(bad, "invalid_grant", "Invalid grant: account not found");
    }
    let signed = &assertion[..parts[0].len() + 1 + parts[1].len()];
    let verified = accounts.iter().any(|a| {
        let kid_matches = match header.kid.as_deref() {
            Some(kid) if !a.key_id.is_empty() => kid == a.key_id,
            _ => true,
        };
        kid_matches
            && UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &a.public_key_der)
                .verify(signed.as_bytes(), &signature)
                .is_ok()
    });
    if !verified {
        return refused(bad, "invalid_grant", "Invalid JWT Signature.");
    }
    if !claims
        .aud
        .as_deref()
        .is_some_and(|a| a.split('?').next().unwrap_or(a).ends_with("/token"))
    {
        return refused(
            bad,
            "invalid_grant",
            "Invalid JWT: Failed audience check. The right audience is the token endpoint's URL.",
        );
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let timely = match (claims.iat, claims.exp) {
        (Some(iat), Some(exp)) => {
            iat <= now + IAT_SKEW_SECS && exp > now && exp > iat && exp - iat <= 3600
        }
        _ => false,
    };
    if !timely {
        return refused(
            bad,
            "invalid_grant",
            "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable \
             timeframe. Check your iat and exp values in the JWT claim.",
        );
    }
    if claims.scope.as_deref().is_none_or(|s| s.trim().is_empty()) {
        return refused(
            bad,
            "invalid_scope",
            "Invalid OAuth scope or ID token audience provided.",
        );
    }
    (issued(cloud, Issuer::Google), AuthEvent::GoogleTokenIssued)
}

// === POST /{tenant}/oauth2/v2.0/token ===

/// Entra's error body: the OAuth pair plus its `error_codes`.
fn entra_error(status: StatusCode, error: &str, code: u32, text: &str) -> (Reply, AuthEvent) {
    let description = format!("AADSTS{code}: {text} Trace ID: 00000000-0000-0000-0000-000000000000 Correlation ID: 00000000-0000-0000-0000-000000000000 Timestamp: 2026-01-01 00:00:00Z");
    let body = json!({
        "error": error,
        "error_description": description,
        "error_codes": [code],
        "timestamp": "2026-01-01 00:00:00Z",
        "trace_id": "00000000-0000-0000-0000-000000000000",
        "correlation_id": "00000000-0000-0000-0000-000000000000",
    });
    (
        Reply::Full {
            status,
            body: Bytes::from(body.to_string()),
            headers: vec![("cache-control", "no-store".to_string())],
        },
        AuthEvent::TokenRefused,
    )
}

/// Whether `tenant` can be a tenant: a GUID or a domain name.
fn valid_tenant(tenant: &str) -> bool {
    !tenant.is_empty()
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'))
}

/// `POST /{tenant}/oauth2/v2.0/token`: a client-credentials grant.
pub(crate) fn entra_token(tenant: &str, body: &[u8], cloud: &CloudState) -> (Reply, AuthEvent) {
    let bad = StatusCode::BAD_REQUEST;
    if !valid_tenant(tenant) {
        return entra_error(
            bad,
            "invalid_tenant",
            90002,
            &format!("Tenant '{tenant}' not found."),
        );
    }
    let Some(form) = form(body) else {
        return entra_error(
            bad,
            "invalid_request",
            900144,
            "The request body must contain the following parameter: 'grant_type'.",
        );
    };
    match field(&form, "grant_type") {
        Some("client_credentials") => {}
        Some(g) => {
            return entra_error(
                bad,
                "unsupported_grant_type",
                70003,
                &format!("The app requested an unsupported grant type '{g}'."),
            )
        }
        None => {
            return entra_error(
                bad,
                "invalid_request",
                900144,
                "The request body must contain the following parameter: 'grant_type'.",
            )
        }
    }
    let Some(client_id) = field(&form, "client_id") else {
        return entra_error(
            bad,
            "invalid_request",
            900144,
            "The request body must contain the following parameter: 'client_id'.",
        );
    };
    if !field(&form, "scope").is_some_and(|s| s.ends_with("/.default")) {
        return entra_error(
            bad,
            "invalid_scope",
            1002012,
            "The provided value for scope is not valid. Client credential flows must have a \
             scope value with /.default suffixed to the resource identifier \
             (application ID URI).",
        );
    }
    let Some(client) = cloud
        .cfg
        .entra_clients
        .iter()
        .find(|c| c.client_id == client_id)
    else {
        return entra_error(
            bad,
            "unauthorized_client",
            700016,
            &format!(
                "Application with identifier '{client_id}' was not found in the directory \
                 '{tenant}'."
            ),
        );
    };
    if field(&form, "client_secret") != Some(client.client_secret.as_str()) {
        return entra_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            7000215,
            &format!(
                "Invalid client secret provided. Ensure the secret being sent in the request is \
                 the client secret value, not the client secret ID, for a secret added to app \
                 '{client_id}'."
            ),
        );
    }
    (issued(cloud, Issuer::Entra), AuthEvent::EntraTokenIssued)
}

/// The token endpoints' answer to an injected failure (`status`, `fail_with=STATUS` and the
/// policy faults): RFC 6749's `temporarily_unavailable` / `server_error` for 5xx, Google's
/// rate-limit text for 429, `invalid_request` otherwise.
pub(crate) fn fault_reply(status: StatusCode) -> Reply {
    let (error, text) = match status.as_u16() {
        429 => (
            "rate_limit_exceeded",
            "Rate limit exceeded. Try again later.",
        ),
        503 => (
            "temporarily_unavailable",
            "The service is temporarily unavailable.",
        ),
        500..=599 => ("server_error", "The server encountered an internal error."),
        _ => (
            "invalid_request",
            "The request was refused by the mock's status knob.",
        ),
    };
    let mut r = oauth_error(status, error, text);
    if let Reply::Full { headers, .. } = &mut r {
        if matches!(status.as_u16(), 429 | 503) {
            headers.push(("retry-after", "1".to_string()));
        }
    }
    r
}

/// Seconds since the epoch, for tests that sign their own assertions.
#[cfg(test)]
pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use ring::rand::SystemRandom;
    use sluice_providers::sign::google::ServiceAccountKey;
    use sluice_providers::sign::oauth::parse_token_response;

    use std::time::Duration;

    use super::*;
    use crate::cloud::{test_service_account_json, CloudConfig};

    fn reply(r: &Reply) -> (u16, serde_json::Value) {
        let Reply::Full { status, body, .. } = r else {
            panic!("not a full reply")
        };
        (status.as_u16(), serde_json::from_slice(body).unwrap())
    }

    fn key() -> ServiceAccountKey {
        ServiceAccountKey::from_json(test_service_account_json("http://m/token").as_bytes())
            .unwrap()
    }

    #[tokio::test]
    async fn google_grants() {
        let cloud = CloudState::new(CloudConfig {
            token_ttl: Duration::from_millis(1500),
            ..CloudConfig::default()
        });
        let rng = SystemRandom::new();
        let req = key().token_request(now_unix(), &rng).unwrap();
        let (r, ev) = google_token(req.body.as_bytes(), &cloud);
        assert_eq!(ev, AuthEvent::GoogleTokenIssued);
        let (status, v) = reply(&r);
        assert_eq!(status, 200);
        assert_eq!(v["expires_in"], 2, "rounded up");
        let Reply::Full { body, .. } = &r else {
            unreachable!()
        };
        let token = parse_token_response(200, body).unwrap();
        assert_eq!(
            cloud.tokens().check(token.secret(), Issuer::Google),
            super::super::BearerCheck::Live
        );

        // A stale assertion, a forged one, an unknown account.
        let old = key().token_request(now_unix() - 7200, &rng).unwrap();
        let (r, _) = google_token(old.body.as_bytes(), &cloud);
        assert!(reply(&r).1["error_description"]
            .as_str()
            .unwrap()
            .contains("iat and exp"));
        let forged = req.body.replace('.', ".x");
        let (r, ev) = google_token(forged.as_bytes(), &cloud);
        assert_eq!(ev, AuthEvent::TokenRefused);
        assert_eq!(reply(&r).1["error"], "invalid_grant");
        let mut other: serde_json::Value =
            serde_json::from_str(&test_service_account_json("http://m/token")).unwrap();
        other["client_email"] = json!("nobody@x.iam.gserviceaccount.com");
        let k = ServiceAccountKey::from_json(other.to_string().as_bytes()).unwrap();
        let (r, _) = google_token(
            k.token_request(now_unix(), &rng).unwrap().body.as_bytes(),
            &cloud,
        );
        assert_eq!(
            reply(&r).1["error_description"],
            "Invalid grant: account not found"
        );
        let (r, _) = google_token(b"grant_type=password", &cloud);
        assert_eq!(
            reply(&r),
            (
                400,
                json!({"error": "unsupported_grant_type", "error_description": "Invalid grant_type: password"})
            )
        );
    }

    #[tokio::test]
    async fn entra_grants() {
        let cloud = CloudState::new(CloudConfig::default());
        let ok = format!(
            "client_id={}&client_secret={}&scope=https%3A%2F%2Fcognitiveservices.azure.com%2F.default&grant_type=client_credentials",
            super::super::TEST_ENTRA_CLIENT_ID,
            super::super::TEST_ENTRA_CLIENT_SECRET
        );
        let (r, ev) = entra_token("contoso.onmicrosoft.com", ok.as_bytes(), &cloud);
        assert_eq!((reply(&r).0, ev), (200, AuthEvent::EntraTokenIssued));
        let wrong = ok.replace("secret&", "wrong&");
        let (r, _) = entra_token("t", wrong.as_bytes(), &cloud);
        let (status, v) = reply(&r);
        assert_eq!((status, v["error"].as_str()), (401, Some("invalid_client")));
        assert!(v["error_description"]
            .as_str()
            .unwrap()
            .starts_with("AADSTS7000215"));
        let (r, _) = entra_token("t", ok.replace(".default", "x").as_bytes(), &cloud);
        assert_eq!(reply(&r).1["error"], "invalid_scope");
        let (r, _) = entra_token("../x", ok.as_bytes(), &cloud);
        assert_eq!(reply(&r).1["error"], "invalid_tenant");
    }
}
