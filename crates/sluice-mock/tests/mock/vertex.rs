//! Vertex AI over real sockets: a token from the mock's own `/token` for an assertion signed
//! by `sluice_providers::sign::google`, Gemini and Claude called with it, the token expiring
//! (2 s lifetime) and the next call refused with Google's 401; assertions and tokens the mock
//! did not issue refused; Anthropic-on-Vertex body checks; and the refresh schedule of
//! `sluice_providers::sign::refresh` driving a load of requests across several expiries with
//! no failure and one token per refresh.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use ring::rand::SystemRandom;
use serde_json::json;
use sluice_mock::{CloudConfig, MockConfig, MockServer};
use sluice_providers::request::UpstreamRequest;
use sluice_providers::sign::google::ServiceAccountKey;
use sluice_providers::sign::oauth::{parse_token_response, AccessToken, TokenError, TokenRequest};
use sluice_providers::sign::refresh::{RefreshPolicy, TokenCache};
use sluice_providers::vertex::{self, Project};
use sluice_providers::{ErrorClass, Operation};
use tokio::time::Instant;

use crate::support::*;

const PROJECT: Project<'static> = Project {
    id: "sluice-test",
    location: "us-east5",
};
const GEMINI_BODY: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}"#;

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn mock_ttl(ttl: Duration) -> MockServer {
    MockServer::start_with(
        MockConfig::default(),
        CloudConfig {
            token_ttl: ttl,
            ..CloudConfig::default()
        },
    )
    .await
    .unwrap()
}

fn key(mock: &MockServer) -> ServiceAccountKey {
    ServiceAccountKey::from_json(mock.service_account_json().as_bytes()).unwrap()
}

fn token_post(t: &TokenRequest, xmock: &str) -> Request<Bytes> {
    let path = t.url.split_once("/token").map(|_| "/token").unwrap();
    let mut req = request("POST", path, xmock, &t.body);
    for (k, v) in t.headers() {
        req.headers_mut().insert(k, v);
    }
    req
}

async fn fetch_token(mock: &MockServer) -> Result<AccessToken, TokenError> {
    let t = key(mock)
        .token_request(now_unix(), &SystemRandom::new())
        .unwrap();
    let r = h1(mock.addr(), token_post(&t, "")).await;
    parse_token_response(r.status.as_u16(), &r.body)
}

fn with_token(mut req: Request<Bytes>, token: &AccessToken) -> Request<Bytes> {
    let (k, v) = token.authorization().unwrap();
    req.headers_mut().insert(k, v);
    req
}

fn gemini_path(stream: bool) -> String {
    vertex::gemini_path(
        &PROJECT,
        Operation::ChatCompletions,
        "gemini-2.5-flash",
        stream,
    )
    .unwrap()
}

#[tokio::test]
async fn token_exchange_call_and_expiry() {
    let mock = mock_ttl(Duration::from_secs(2)).await;
    let token = fetch_token(&mock).await.unwrap();
    assert_eq!(token.expires_in, Duration::from_secs(2));
    let issued = Instant::now();

    let r = h1(
        mock.addr(),
        with_token(
            request("POST", &gemini_path(false), "tokens=3", GEMINI_BODY),
            &token,
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.json()["candidates"][0]["finishReason"], "STOP");
    let send = h2_connect(mock.addr()).await;
    let r = h2(
        &send,
        with_token(
            request("POST", &gemini_path(true), "tokens=3", GEMINI_BODY),
            &token,
        ),
    )
    .await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    assert_eq!(sse(&r.body).len(), 4);

    tokio::time::sleep_until(issued + Duration::from_millis(2100)).await;
    let r = h1(
        mock.addr(),
        with_token(
            request("POST", &gemini_path(false), "", GEMINI_BODY),
            &token,
        ),
    )
    .await;
    assert_eq!(r.status, 401);
    let v = r.json();
    assert_eq!(v["error"]["status"], "UNAUTHENTICATED");
    assert_eq!(v["error"]["details"][0]["reason"], "ACCESS_TOKEN_EXPIRED");
    assert!(r.headers["www-authenticate"]
        .to_str()
        .unwrap()
        .contains("invalid_token"));
    let e = vertex::classify(r.status, &r.headers, &r.body, now_unix());
    assert_eq!(e.class, ErrorClass::Auth);

    let snap = mock.stats().snapshot();
    let t = &snap.totals.auth;
    assert_eq!(
        (t.google_tokens_issued, t.bearer_accepted, t.bearer_expired),
        (1, 2, 1)
    );
    let last = snap.requests.last().unwrap();
    assert_eq!(last.auth, Some("bearer_expired"));
    assert_eq!(last.model.as_deref(), Some("gemini-2.5-flash"));
}

#[tokio::test]
async fn missing_unknown_and_foreign_tokens_are_refused() {
    let mock = mock_default().await;
    let reason = |r: &Resp| {
        assert_eq!(r.status, 401);
        r.json()["error"]["details"][0]["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let r = h1(
        mock.addr(),
        request("POST", &gemini_path(false), "", GEMINI_BODY),
    )
    .await;
    assert_eq!(reason(&r), "CREDENTIALS_MISSING");
    let bogus = AccessToken::new("ya29.not-issued", Duration::from_secs(60));
    let r = h1(
        mock.addr(),
        with_token(
            request("POST", &gemini_path(false), "", GEMINI_BODY),
            &bogus,
        ),
    )
    .await;
    assert_eq!(reason(&r), "ACCESS_TOKEN_TYPE_UNSUPPORTED");
    // A token from the Entra endpoint is not a Google token.
    let entra = sluice_providers::sign::entra::ClientCredentials::new(
        "tenant",
        sluice_mock::TEST_ENTRA_CLIENT_ID,
        sluice_mock::TEST_ENTRA_CLIENT_SECRET,
    )
    .unwrap()
    .with_authority(&mock.url())
    .unwrap()
    .token_request();
    let path = entra.url.strip_prefix(&mock.url()).unwrap().to_string();
    let r = h1(mock.addr(), request("POST", &path, "", &entra.body)).await;
    let entra_token = parse_token_response(r.status.as_u16(), &r.body).unwrap();
    let r = h1(
        mock.addr(),
        with_token(
            request("POST", &gemini_path(false), "", GEMINI_BODY),
            &entra_token,
        ),
    )
    .await;
    assert_eq!(reason(&r), "ACCESS_TOKEN_TYPE_UNSUPPORTED");
    // Revoked: every token forgotten.
    let token = fetch_token(&mock).await.unwrap();
    let ok = h1(
        mock.addr(),
        with_token(
            request("POST", &gemini_path(false), "", GEMINI_BODY),
            &token,
        ),
    )
    .await;
    assert_eq!(ok.status, 200);
    assert_eq!(
        h1(
            mock.addr(),
            request("POST", "/__mock/revoke_tokens", "", "")
        )
        .await
        .status,
        200
    );
    let r = h1(
        mock.addr(),
        with_token(
            request("POST", &gemini_path(false), "", GEMINI_BODY),
            &token,
        ),
    )
    .await;
    assert_eq!(r.status, 401);
    // Missing, never issued, Entra's, revoked.
    assert_eq!(mock.stats().totals().auth.bearer_rejected, 4);
}

#[tokio::test]
async fn bad_assertions_and_token_faults_are_refused_in_oauth_shape() {
    let mock = mock_default().await;
    let t = key(&mock)
        .token_request(now_unix(), &SystemRandom::new())
        .unwrap();
    // A claim changed after signing.
    let mut form = sluice_providers::sign::oauth::parse_form(&t.body).unwrap();
    let parts: Vec<String> = form[1].1.split('.').map(str::to_string).collect();
    let claims = r#"{"iss":"sluice-test@sluice-test.iam.gserviceaccount.com","scope":"x","aud":"http://mock/token","iat":1,"exp":2}"#;
    use base64::Engine as _;
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims),
        parts[2]
    );
    form[1].1 = forged;
    let mut body = String::new();
    for (k, v) in &form {
        sluice_providers::sign::oauth::push_form_pair(&mut body, k, v);
    }
    let forged = TokenRequest {
        url: t.url.clone(),
        body,
    };
    let r = h1(mock.addr(), token_post(&forged, "")).await;
    let e = parse_token_response(r.status.as_u16(), &r.body).unwrap_err();
    assert_eq!(
        e,
        TokenError::Refused {
            status: 400,
            error: "invalid_grant".into(),
            description: Some("Invalid JWT Signature.".into())
        }
    );
    assert_eq!(e.to_provider_error().class, ErrorClass::Auth);
    // The token endpoint down on command: a retryable, classified failure.
    let r = h1(mock.addr(), token_post(&t, "status=503")).await;
    let e = parse_token_response(r.status.as_u16(), &r.body).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Overloaded);
    assert!(e.to_string().contains("temporarily_unavailable"), "{e}");
    let totals = mock.stats().totals();
    assert_eq!(
        (
            totals.auth.token_requests_refused,
            totals.auth.google_tokens_issued
        ),
        (2, 0)
    );
}

#[tokio::test]
async fn the_token_endpoints_have_their_own_behaviour() {
    let mock = MockServer::start_with(
        MockConfig::default(),
        CloudConfig {
            token_behavior: Some(
                sluice_mock::Behavior::default()
                    .with_spec("fail_first=2")
                    .unwrap(),
            ),
            ..CloudConfig::default()
        },
    )
    .await
    .unwrap();
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        outcomes.push(fetch_token(&mock).await.map(|_| ()).map_err(|e| e.class()));
    }
    assert_eq!(
        outcomes,
        [
            Err(ErrorClass::Overloaded),
            Err(ErrorClass::Overloaded),
            Ok(())
        ]
    );
    let token = fetch_token(&mock).await.unwrap();
    let r = h1(
        mock.addr(),
        with_token(
            request("POST", &gemini_path(false), "", GEMINI_BODY),
            &token,
        ),
    )
    .await;
    assert_eq!(r.status, 200, "model paths keep the server's defaults");
}

/// An Anthropic Messages body as the gateway sends it to Claude on Vertex.
fn claude_request(stream: bool) -> UpstreamRequest {
    let body = json!({"model": "claude-sonnet-4-5@20250929", "max_tokens": 64, "stream": stream,
        "messages": [{"role": "user", "content": "hello"}]});
    let up = UpstreamRequest {
        path: String::new(),
        body: Bytes::from(body.to_string()),
        stream,
        model: "claude-sonnet-4-5@20250929".into(),
        dropped: Vec::new(),
        translated: false,
        client_wants_usage: true,
    };
    vertex::anthropic_request(up, Operation::Messages, &PROJECT).unwrap()
}

#[tokio::test]
async fn claude_on_vertex() {
    let mock = mock_default().await;
    let token = fetch_token(&mock).await.unwrap();
    let call = |path: &str, body: &str| with_token(request("POST", path, "tokens=4", body), &token);

    let up = claude_request(false);
    assert!(up
        .path
        .ends_with("/publishers/anthropic/models/claude-sonnet-4-5%4020250929:rawPredict"));
    let r = h1(
        mock.addr(),
        call(&up.path, std::str::from_utf8(&up.body).unwrap()),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let v = r.json();
    assert_eq!(
        (v["type"].as_str(), v["stop_reason"].as_str()),
        (Some("message"), Some("end_turn"))
    );
    let snap = mock.stats().snapshot();
    let rec = snap.request(r.request_id()).unwrap();
    assert_eq!(rec.model.as_deref(), Some("claude-sonnet-4-5@20250929"));
    assert_eq!(rec.api, Some(sluice_mock::Api::Anthropic));

    let up = claude_request(true);
    assert!(up.path.ends_with(":streamRawPredict"));
    let r = h1(
        mock.addr(),
        call(&up.path, std::str::from_utf8(&up.body).unwrap()),
    )
    .await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let names: Vec<_> = sse(&r.body).into_iter().map(|(e, _)| e.unwrap()).collect();
    assert_eq!(
        names.iter().filter(|n| *n == "content_block_delta").count(),
        4
    );
    assert_eq!(names.last().map(String::as_str), Some("message_stop"));

    // What Vertex refuses: a model in the body, another or no anthropic_version.
    let path = claude_request(false).path;
    for (body, needle) in [
        (
            r#"{"model":"c","anthropic_version":"vertex-2023-10-16","max_tokens":5,"messages":[]}"#,
            "model: Extra inputs",
        ),
        (
            r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":5,"messages":[]}"#,
            "vertex-2023-10-16",
        ),
        (
            r#"{"max_tokens":5,"messages":[]}"#,
            "anthropic_version: Field required",
        ),
        (
            r#"{"anthropic_version":"vertex-2023-10-16","messages":[]}"#,
            "max_tokens: Field required",
        ),
    ] {
        let r = h1(mock.addr(), call(&path, body)).await;
        assert_eq!(r.status, 400);
        let v = r.json();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(needle),
            "{v}"
        );
    }
    // count_tokens is the `count-tokens` model's rawPredict.
    let count = vertex::anthropic_path(&PROJECT, Operation::CountTokens, "", false).unwrap();
    let r = h1(
        mock.addr(),
        call(&count, r#"{"model":"claude-x","anthropic_version":"vertex-2023-10-16","messages":[{"role":"user","content":"hi"}]}"#),
    )
    .await;
    assert!(r.json()["input_tokens"].as_u64().unwrap() > 0);
    // The Anthropic error shapes on the way back, e.g. an overloaded Claude.
    let r = h1(
        mock.addr(),
        with_token(
            request(
                "POST",
                &path,
                "error=overloaded",
                std::str::from_utf8(&claude_request(false).body).unwrap(),
            ),
            &token,
        ),
    )
    .await;
    assert_eq!(r.status, 529);
    assert_eq!(
        vertex::classify(r.status, &r.headers, &r.body, 0).class,
        ErrorClass::Overloaded
    );
}

/// The refresh schedule over the mock: 2-second tokens, a refresh task following
/// `TokenCache`, eight workers calling Vertex back to back for five seconds. No request finds
/// no token or gets a 401, none waits for a token after the first, and the mock issues one
/// token per refresh (about one per second), not one per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refreshes_keep_every_request_authorised_across_expiries() {
    let mock = Arc::new(mock_ttl(Duration::from_secs(2)).await);
    let origin = Instant::now();
    let cache: Arc<Mutex<TokenCache<AccessToken, TokenError>>> =
        Arc::new(Mutex::new(TokenCache::new(RefreshPolicy::default())));
    let stop = Arc::new(tokio::sync::Notify::new());

    // The refresh task: the only place tokens are fetched.
    let refresher = {
        let (mock, cache, stop) = (mock.clone(), cache.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let due = cache.lock().unwrap().due_at();
                if let Some(due) = due {
                    tokio::select! {
                        () = tokio::time::sleep_until(origin + due) => {}
                        () = stop.notified() => return,
                    }
                }
                if !cache.lock().unwrap().begin_refresh(origin.elapsed()) {
                    continue;
                }
                let result = fetch_token(&mock).await;
                let mut c = cache.lock().unwrap();
                match result {
                    Ok(t) => {
                        let lifetime = t.expires_in;
                        c.refresh_succeeded(origin.elapsed(), t, lifetime);
                    }
                    Err(e) => {
                        c.refresh_failed(origin.elapsed(), e);
                    }
                }
            }
        })
    };
    // The first token.
    while cache.lock().unwrap().token(origin.elapsed()).is_none() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let ok = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (mock, cache, ok) = (mock.clone(), cache.clone(), ok.clone());
        workers.push(tokio::spawn(async move {
            let mut send = h1_connect(mock.addr()).await;
            let mut failures = Vec::new();
            while origin.elapsed() < Duration::from_secs(5) {
                let token = cache.lock().unwrap().token(origin.elapsed()).cloned();
                let Some(token) = token else {
                    failures.push(format!("no token at {:?}", origin.elapsed()));
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                };
                let req = with_token(
                    request("POST", &gemini_path(false), "tokens=2", GEMINI_BODY),
                    &token,
                );
                let resp = h1_send(&mut send, req).await;
                let status = resp.status();
                use http_body_util::BodyExt;
                let _ = resp.into_body().collect().await;
                if status == 200 {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failures.push(format!("{status} at {:?}", origin.elapsed()));
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for w in workers {
        failures.extend(w.await.unwrap());
    }
    // A refresh in flight finishes first, so the mock's count and the cache's agree.
    stop.notify_one();
    refresher.await.unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    let totals = mock.stats().totals();
    let ok = ok.load(Ordering::Relaxed);
    let refreshes = cache.lock().unwrap().refreshes();
    assert_eq!(
        totals.auth.google_tokens_issued, refreshes,
        "one token per refresh"
    );
    // Five seconds of 2-second tokens refreshed at half-life: a token at 0 s, then about one
    // a second.
    assert!((4..=7).contains(&refreshes), "{refreshes} refreshes");
    assert!(ok > 20 * refreshes, "{ok} requests for {refreshes} tokens");
    assert_eq!(totals.auth.bearer_accepted, ok);
    assert_eq!(totals.auth.bearer_expired + totals.auth.bearer_rejected, 0);
}

#[tokio::test]
async fn the_test_service_account_is_served() {
    let mock = mock_default().await;
    let r = h1(
        mock.addr(),
        request("GET", "/__mock/service_account", "", ""),
    )
    .await;
    assert_eq!(r.status, 200);
    let key = ServiceAccountKey::from_json(&r.body).unwrap();
    assert_eq!(
        key.token_uri(),
        "http://mock/token",
        "the Host the client used"
    );
    assert_eq!(
        key.client_email(),
        "sluice-test@sluice-test.iam.gserviceaccount.com"
    );
    // Vertex's Gemini paths also answer under v1beta1.
    let token = fetch_token(&mock).await.unwrap();
    let beta = gemini_path(false).replacen("/v1/", "/v1beta1/", 1);
    let r = h1(
        mock.addr(),
        with_token(request("POST", &beta, "", GEMINI_BODY), &token),
    )
    .await;
    assert_eq!(r.status, 200);
}
