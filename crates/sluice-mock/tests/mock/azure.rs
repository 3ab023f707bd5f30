//! Azure OpenAI deployments over real sockets, with Entra ID client-credentials tokens from
//! the mock's own endpoint (requested by `sluice_providers::sign::entra`) or an `api-key`.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use sluice_mock::{
    CloudConfig, MockConfig, MockServer, TEST_ENTRA_CLIENT_ID, TEST_ENTRA_CLIENT_SECRET,
};
use sluice_providers::sign::entra::ClientCredentials;
use sluice_providers::sign::oauth::{parse_token_response, AccessToken, TokenError};
use sluice_providers::{ErrorClass, ProviderKind};

use crate::support::*;

const CHAT: &str = r#"{"messages":[{"role":"user","content":"hello"}]}"#;

fn chat_path() -> String {
    let azure = ProviderKind::Azure {
        api_version: "2024-10-21".into(),
    };
    format!(
        "/openai{}",
        azure
            .path(
                sluice_providers::Operation::ChatCompletions,
                "gpt-4o-prod",
                false
            )
            .unwrap()
    )
}

async fn entra_token(mock: &MockServer, secret: &str) -> Result<AccessToken, TokenError> {
    let creds = ClientCredentials::new("contoso.onmicrosoft.com", TEST_ENTRA_CLIENT_ID, secret)
        .unwrap()
        .with_authority(&mock.url())
        .unwrap();
    let t = creds.token_request();
    let path = t.url.strip_prefix(&mock.url()).unwrap().to_string();
    let mut req = request("POST", &path, "", &t.body);
    for (k, v) in t.headers() {
        req.headers_mut().insert(k, v);
    }
    let r = h1(mock.addr(), req).await;
    parse_token_response(r.status.as_u16(), &r.body)
}

fn bearer(mut req: Request<Bytes>, t: &AccessToken) -> Request<Bytes> {
    let (k, v) = t.authorization().unwrap();
    req.headers_mut().insert(k, v);
    req
}

#[tokio::test]
async fn entra_tokens_or_api_keys() {
    let mock = MockServer::start_with(
        MockConfig::default(),
        CloudConfig {
            token_ttl: Duration::from_secs(2),
            ..CloudConfig::default()
        },
    )
    .await
    .unwrap();
    let token = entra_token(&mock, TEST_ENTRA_CLIENT_SECRET).await.unwrap();
    let issued = tokio::time::Instant::now();
    assert_eq!(token.expires_in, Duration::from_secs(2));
    let r = h1(
        mock.addr(),
        bearer(request("POST", &chat_path(), "tokens=3", CHAT), &token),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-4o-prod", "the deployment answers");
    // A stream, on HTTP/2.
    let send = h2_connect(mock.addr()).await;
    let streamed = CHAT.replace('{', r#"{"stream":true,"#);
    let r = h2(
        &send,
        bearer(request("POST", &chat_path(), "tokens=3", &streamed), &token),
    )
    .await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    // `api-key` instead.
    let mut req = request("POST", &chat_path(), "", CHAT);
    req.headers_mut()
        .insert("api-key", "anything".parse().unwrap());
    assert_eq!(h1(mock.addr(), req).await.status, 200);
    // No credentials; an expired token.
    let r = h1(mock.addr(), request("POST", &chat_path(), "", CHAT)).await;
    assert_eq!(
        (r.status.as_u16(), r.json()["error"]["code"].as_str()),
        (401, Some("401"))
    );
    tokio::time::sleep_until(issued + Duration::from_millis(2100)).await;
    let r = h1(
        mock.addr(),
        bearer(request("POST", &chat_path(), "", CHAT), &token),
    )
    .await;
    assert_eq!(r.status, 401);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("expired"));
    let totals = mock.stats().totals().auth;
    assert_eq!(
        (
            totals.entra_tokens_issued,
            totals.bearer_accepted,
            totals.api_key_accepted,
            totals.bearer_expired,
            totals.bearer_rejected
        ),
        (1, 2, 1, 1, 1)
    );
}

#[tokio::test]
async fn a_wrong_secret_is_entras_invalid_client() {
    let mock = mock_default().await;
    let e = entra_token(&mock, "wrong").await.unwrap_err();
    let TokenError::Refused {
        status,
        error,
        description,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!((*status, error.as_str()), (401, "invalid_client"));
    assert!(description.as_deref().unwrap().starts_with("AADSTS7000215"));
    assert_eq!(e.to_provider_error().class, ErrorClass::Auth);
    assert!(
        !e.to_string().contains("wrong"),
        "the secret is not echoed: {e}"
    );
    assert_eq!(mock.stats().totals().auth.token_requests_refused, 1);
}
