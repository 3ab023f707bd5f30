//! OAuth tokens for Vertex AI and Azure OpenAI: the service-account assertion and token
//! request (compared with goldens: RS256 is deterministic, and the signature is checked with
//! the key's public half), Entra ID's client-credentials request, the token endpoints'
//! answers and errors as Google and Microsoft document them, and the refresh schedule's
//! properties.
//!
//! `SLUICE_BLESS=1 cargo test -p sluice-providers --test oauth` rewrites `tests/golden/oauth/`.

use std::path::PathBuf;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use proptest::prelude::*;
use ring::rand::SystemRandom;
use ring::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};
use serde_json::{json, Value};
use sluice_providers::sign::entra::ClientCredentials;
use sluice_providers::sign::google::{KeyError, ServiceAccountKey, CLOUD_PLATFORM_SCOPE};
use sluice_providers::sign::oauth::{parse_form, parse_token_response, TokenError};
use sluice_providers::sign::refresh::{RefreshPolicy, TokenCache};
use sluice_providers::ErrorClass;

/// 2026-01-01T00:00:00Z.
const NOW: u64 = 1_767_225_600;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn key_json() -> Vec<u8> {
    std::fs::read(dir().join("fixtures/google/service_account.json")).unwrap()
}

fn key() -> ServiceAccountKey {
    ServiceAccountKey::from_json(&key_json()).unwrap()
}

/// Compares with `tests/golden/oauth/{name}` as JSON values, or writes it under `SLUICE_BLESS`.
fn check(name: &str, actual: &Value) {
    let p = dir().join("golden/oauth").join(name);
    let pretty = serde_json::to_string_pretty(actual).unwrap() + "\n";
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, pretty).unwrap();
        return;
    }
    let expected = std::fs::read(&p)
        .unwrap_or_else(|_| panic!("{name}: missing (SLUICE_BLESS=1 writes it):\n{pretty}"));
    let expected: Value = serde_json::from_slice(&expected).unwrap();
    assert_eq!(&expected, actual, "{name} differs:\n{pretty}");
}

fn b64_json(segment: &str) -> Value {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(segment).unwrap()).unwrap()
}

#[test]
fn the_service_account_token_request() {
    let key = key();
    assert_eq!(
        key.client_email(),
        "sluice-test@sluice-test.iam.gserviceaccount.com"
    );
    assert_eq!(key.project_id(), Some("sluice-test"));
    let req = key.token_request(NOW, &SystemRandom::new()).unwrap();
    assert_eq!(req.url, "https://oauth2.googleapis.com/token");
    let form = parse_form(&req.body).unwrap();
    assert_eq!(form[0].0, "grant_type");
    assert_eq!(form[1].0, "assertion");
    let assertion = &form[1].1;
    let parts: Vec<&str> = assertion.split('.').collect();
    assert_eq!(parts.len(), 3);
    // The signature is RS256 over `header.claims`, by the key's public half.
    let signed = &assertion[..parts[0].len() + 1 + parts[1].len()];
    let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, key.public_key_der())
        .verify(signed.as_bytes(), &sig)
        .expect("the assertion verifies with the key's public half");
    // A changed claim does not.
    let forged = format!("{}.{}", parts[0], URL_SAFE_NO_PAD.encode(br#"{"iss":"x"}"#));
    assert!(
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, key.public_key_der())
            .verify(forged.as_bytes(), &sig)
            .is_err()
    );
    check(
        "google_token_request.json",
        &json!({
            "url": req.url,
            "form": form.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
            "jwt_header": b64_json(parts[0]),
            "jwt_claims": b64_json(parts[1]),
        }),
    );
    // Deterministic: the same time gives the same bytes; another time another assertion.
    let again = key.token_request(NOW, &SystemRandom::new()).unwrap();
    assert_eq!(again.body, req.body);
    assert_ne!(
        key.token_request(NOW + 1, &SystemRandom::new())
            .unwrap()
            .body,
        req.body
    );
}

#[test]
fn assertion_claims_follow_the_token_uri_and_scope() {
    let key = key().with_token_uri("http://127.0.0.1:9090/token");
    let a = key
        .assertion(
            "https://www.googleapis.com/auth/other",
            NOW,
            &SystemRandom::new(),
        )
        .unwrap();
    let claims = b64_json(a.split('.').nth(1).unwrap());
    assert_eq!(claims["aud"], "http://127.0.0.1:9090/token");
    assert_eq!(claims["scope"], "https://www.googleapis.com/auth/other");
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        3600
    );
    let r = key.token_request(NOW, &SystemRandom::new()).unwrap();
    assert_eq!(r.url, "http://127.0.0.1:9090/token");
    let a = &parse_form(&r.body).unwrap()[1].1;
    assert_eq!(
        b64_json(a.split('.').nth(1).unwrap())["scope"],
        CLOUD_PLATFORM_SCOPE
    );
}

#[test]
fn debug_never_shows_the_private_key() {
    let key = key();
    let d = format!("{key:?}");
    assert!(d.contains("sluice-test@"), "{d}");
    assert!(!d.contains("MII"), "{d}");
    let r = key.token_request(NOW, &SystemRandom::new()).unwrap();
    assert!(!format!("{r:?}").contains("eyJ"));
}

#[test]
fn pkcs1_keys_and_missing_optional_fields() {
    // The same key as PKCS#1 (`RSA PRIVATE KEY`), no `private_key_id`, no `token_uri`.
    let v: Value = serde_json::from_slice(&key_json()).unwrap();
    let mut v2 = json!({
        "type": "service_account",
        "client_email": v["client_email"],
        "private_key": v["private_key"],
    });
    let pkcs8 = ServiceAccountKey::from_json(v2.to_string().as_bytes()).unwrap();
    assert_eq!(pkcs8.private_key_id(), "");
    assert_eq!(pkcs8.token_uri(), "https://oauth2.googleapis.com/token");
    let header = b64_json(
        pkcs8
            .assertion(CLOUD_PLATFORM_SCOPE, NOW, &SystemRandom::new())
            .unwrap()
            .split('.')
            .next()
            .unwrap(),
    );
    assert_eq!(header, json!({"alg": "RS256", "typ": "JWT"}));
    v2["private_key"] =
        json!("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAA==\n-----END ENCRYPTED PRIVATE KEY-----\n");
    assert_eq!(
        ServiceAccountKey::from_json(v2.to_string().as_bytes())
            .unwrap_err()
            .metric_label(),
        "pem"
    );
    assert!(matches!(
        ServiceAccountKey::from_json(b"{"),
        Err(KeyError::Json(_))
    ));
}

#[test]
fn the_entra_token_request() {
    let c = ClientCredentials::new(
        "00000000-0000-0000-0000-00000000000a",
        "11111111-2222-3333-4444-555555555555",
        "Zx8Q~secret+value/with=specials",
    )
    .unwrap();
    let r = c.token_request();
    check(
        "entra_token_request.json",
        &json!({
            "url": r.url,
            "form": parse_form(&r.body).unwrap().iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        }),
    );
}

#[test]
fn token_endpoint_answers() {
    // Google (developers.google.com/identity/protocols/oauth2/service-account#httprest).
    let t = parse_token_response(
        200,
        br#"{"access_token":"1/8xbJqaOZXSUZbHLl5EOtu1pxz3fmmetKx9W8CV4t79M","scope":"https://www.googleapis.com/auth/cloud-platform","token_type":"Bearer","expires_in":3599}"#,
    )
    .unwrap();
    assert_eq!(t.expires_in, Duration::from_secs(3599));
    // Entra (learn.microsoft.com, "client credentials flow": successful response).
    let t = parse_token_response(
        200,
        br#"{"token_type":"Bearer","expires_in":3599,"ext_expires_in":3599,"access_token":"eyJ0eXAiOiJKV1Qi"}"#,
    )
    .unwrap();
    assert_eq!(t.secret(), "eyJ0eXAiOiJKV1Qi");
    // Entra's error for a wrong secret: verbatim, auth, final.
    let e = parse_token_response(
        401,
        br#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '11111111-2222-3333-4444-555555555555'.","error_codes":[7000215],"timestamp":"2026-01-01 00:00:00Z","trace_id":"t","correlation_id":"c"}"#,
    )
    .unwrap_err();
    assert!(matches!(&e, TokenError::Refused { error, .. } if error == "invalid_client"));
    assert!(e.to_string().contains("AADSTS7000215"), "{e}");
    let p = e.to_provider_error();
    assert_eq!((p.class, p.status.as_u16()), (ErrorClass::Auth, 401));
    // Google's error for a bad signature or a skewed clock.
    let e = parse_token_response(
        400,
        br#"{"error":"invalid_grant","error_description":"Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."}"#,
    )
    .unwrap_err();
    assert_eq!(e.class(), ErrorClass::Auth);
    assert!(e.to_string().contains("iat and exp"));
}

// === the refresh schedule ===

proptest! {
    /// A refresh task following the policy, whose every refresh succeeds inside its window
    /// (before the token it replaces expires, as the cache counts it), and requests at
    /// arbitrary times: no request
    /// after the first token finds none, none gets a token the endpoint considers expired
    /// (the endpoint starts a token's clock when the request reaches it, after the task
    /// asked), and each token has at most one refresh begun while it was current.
    #[test]
    fn never_an_expired_token_and_one_refresh_per_lifetime(
        lifetimes_ms in prop::collection::vec(2_000u64..7_200_000, 1..40),
        // Where inside the window each refresh completes, in thousandths of the window.
        latency_permille in prop::collection::vec(0u64..1000, 1..40),
        gaps_ms in prop::collection::vec(0u64..5_000, 1..300),
        skew_ms in 0u64..600_000,
    ) {
        let policy = RefreshPolicy { skew: Duration::from_millis(skew_ms), ..RefreshPolicy::default() };
        let mut cache: TokenCache<u64, ()> = TokenCache::new(policy);
        let ms = Duration::from_millis;
        let lifetime = |n: u64| ms(lifetimes_ms[(n as usize) % lifetimes_ms.len()]);
        // When the endpoint says each token expires.
        let mut real_expiry = vec![lifetime(0)];

        prop_assert!(cache.begin_refresh(ms(0)));
        cache.refresh_succeeded(ms(0), 0, lifetime(0));
        let mut begun_for = std::collections::HashSet::new();
        // (done_at, issued_at) of the refresh in flight.
        let mut in_flight: Option<(Duration, Duration)> = None;
        let mut now = ms(0);
        for (i, gap) in gaps_ms.iter().enumerate() {
            let request_at = now + ms(*gap);
            // The refresh task, up to the request.
            loop {
                if let Some((done, issued)) = in_flight {
                    if done > request_at {
                        break;
                    }
                    in_flight = None;
                    let id = real_expiry.len() as u64;
                    let life = lifetime(id);
                    real_expiry.push(issued + life);
                    cache.refresh_succeeded(done, id, life);
                    continue;
                }
                let due = cache.due_at().expect("nothing in flight");
                if due > request_at {
                    break;
                }
                let (current, expires_at) = cache.state().map(|s| (s.token, s.expires_at)).unwrap();
                prop_assert!(cache.begin_refresh(due));
                prop_assert!(!cache.begin_refresh(due), "a second refresh while one is in flight");
                prop_assert!(begun_for.insert(current), "two refreshes for token {}", current);
                // Completes inside the window [due, the current token's expiry as the cache
                // counts it, which is never later than the endpoint's); the endpoint got the
                // request halfway.
                prop_assert!(expires_at <= real_expiry[current as usize]);
                let window = expires_at.saturating_sub(due);
                let p = latency_permille[i % latency_permille.len()];
                let latency = window.mul_f64(p as f64 / 1000.0);
                in_flight = Some((due + latency, due + latency / 2));
            }
            now = request_at;
            let tok = cache.token(now);
            prop_assert!(tok.is_some(), "no token at {:?}", now);
            let tok = *tok.unwrap();
            prop_assert!(
                real_expiry[tok as usize] > now,
                "token {} expired at {:?}, served at {:?}", tok, real_expiry[tok as usize], now
            );
            // Requests never start a refresh: it is due later, or in flight.
            prop_assert!(!cache.begin_refresh(now));
        }
    }

    /// Refreshes that keep failing: the token is served until the endpoint's expiry and not
    /// a moment longer, even when the first answer was slow (its lifetime counts from the
    /// request, not the answer), and retries never overlap.
    #[test]
    fn a_failing_refresh_never_serves_past_the_real_expiry(
        lifetime_ms in 2_000u64..100_000,
        latency_ms in 0u64..1_500,
        gaps_ms in prop::collection::vec(0u64..700, 1..400),
    ) {
        let ms = Duration::from_millis;
        let mut cache: TokenCache<u64, &str> = TokenCache::new(RefreshPolicy::default());
        prop_assert!(cache.begin_refresh(ms(0)));
        // Asked at 0, the endpoint issued it halfway through the answer's latency.
        let real_expiry = ms(latency_ms / 2 + lifetime_ms);
        cache.refresh_succeeded(ms(latency_ms), 0, ms(lifetime_ms));
        let mut now = ms(latency_ms);
        for gap in gaps_ms {
            let t = now + ms(gap);
            while let Some(due) = cache.due_at().filter(|d| *d <= t) {
                prop_assert!(cache.begin_refresh(due));
                prop_assert!(!cache.begin_refresh(due));
                let retry = cache.refresh_failed(due, "unavailable");
                prop_assert!(retry > due);
            }
            now = t;
            if cache.token(now).is_some() {
                prop_assert!(now < real_expiry, "served at {:?}, expired at {:?}", now, real_expiry);
            } else {
                prop_assert!(now >= ms(lifetime_ms));
                prop_assert_eq!(cache.last_error(), Some(&"unavailable"));
            }
        }
    }

    /// Refresh times: never before half the lifetime, never after 80 % of it or after
    /// `lifetime - skew` when that is later than half.
    #[test]
    fn refresh_time_bounds(lifetime_ms in 1u64..10_000_000, skew_ms in 0u64..1_000_000) {
        let p = RefreshPolicy { skew: Duration::from_millis(skew_ms), ..RefreshPolicy::default() };
        let l = Duration::from_millis(lifetime_ms);
        let at = p.refresh_after(l);
        prop_assert!(at >= l / 2);
        prop_assert!(at <= l.mul_f64(0.8) + Duration::from_nanos(1));
        prop_assert!(at < l);
        if l.saturating_sub(p.skew) >= l / 2 {
            prop_assert!(at <= l - p.skew);
        }
    }
}
