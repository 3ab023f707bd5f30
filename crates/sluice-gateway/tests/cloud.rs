//! Cloud upstreams end to end over real sockets: the official `openai` (chat and Responses) and
//! `anthropic` SDKs through the gateway to the mock's AWS Bedrock (Converse / ConverseStream, SigV4 checked by
//! the mock), Google Vertex AI (Gemini and Claude, with tokens from the mock's token endpoint)
//! and Azure OpenAI with Entra ID tokens (tests/python/cloud_sdk.py); botocore's own signer
//! recomputing every signature the gateway makes (tests/python/sigv4_upstream.py); and the
//! token refresh under load, with 2-second tokens (tests/python/token_load.py).
//!
//! Needs a Python with the SDKs (`$SLUICE_PYTHON`, else `.venv`; see sdk.rs): without one the
//! tests are ignored, except under `CI=true`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sluice_gateway::config::Config;
use sluice_gateway::Gateway;
use sluice_mock::{
    CloudConfig, MockConfig, MockServer, TEST_AWS_ACCESS_KEY_ID, TEST_AWS_SECRET_ACCESS_KEY,
    TEST_ENTRA_CLIENT_ID, TEST_ENTRA_CLIENT_SECRET,
};

#[path = "../../sluice-mock/tests/mock/python.rs"]
mod python;

#[path = "../../sluice-mock/tests/mock/checks.rs"]
mod checks;

use checks::run_checks;

const BEDROCK_MODEL: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";

/// The variables the gateway's config reads: the mock's test AWS keys and Entra client, and
/// a home with no AWS files.
fn cloud_env(mock_url: &str) -> impl Fn(&str) -> Option<String> + '_ {
    move |k| {
        Some(match k {
            "AWS_ACCESS_KEY_ID" => TEST_AWS_ACCESS_KEY_ID.to_string(),
            "AWS_SECRET_ACCESS_KEY" => TEST_AWS_SECRET_ACCESS_KEY.to_string(),
            "AZURE_TENANT_ID" => "sluice-test-tenant".to_string(),
            "AZURE_CLIENT_ID" => TEST_ENTRA_CLIENT_ID.to_string(),
            "AZURE_CLIENT_SECRET" => TEST_ENTRA_CLIENT_SECRET.to_string(),
            "AZURE_AUTHORITY_HOST" => mock_url.to_string(),
            "HOME" => "/nonexistent-sluice-test-home".to_string(),
            _ => return None,
        })
    }
}

/// The mock's service-account key file (its `token_uri` the mock's `/token`), written to a
/// file of its own.
fn key_file(mock: &MockServer, tag: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "sluice-cloud-{tag}-{}-{}.json",
        std::process::id(),
        mock.addr().port()
    ));
    std::fs::write(&path, mock.service_account_json()).unwrap();
    path
}

fn config(mock: &MockServer, key: &std::path::Path, retry: &str) -> String {
    let url = mock.url();
    format!(
        r#"[server]
listen = "127.0.0.1:0"
access_log = "off"

# HTTP/2 here (the signed `host` is the `:authority`), HTTP/1.1 for the others.
[[upstream]]
name = "bedrock"
base_url = "{url}"
provider = "bedrock"
region = "us-east-1"
protocol = "h2c"

[[upstream]]
name = "bedrock-invoke"
base_url = "{url}"
provider = "bedrock"
region = "us-east-1"
invoke_model = true

[[upstream]]
name = "vertex"
base_url = "{url}"
provider = "vertex"
project = "sluice-test"
location = "us-east5"
credentials_file = "{key}"

[[upstream]]
name = "azure"
base_url = "{url}/openai"
provider = "azure"
api_version = "2024-10-21"
auth = {{ type = "entra" }}

[[route]]
models = ["bedrock-claude"]
targets = [{{ upstream = "bedrock", model = "{BEDROCK_MODEL}" }}]
retry = {retry}

[[route]]
models = ["bedrock-invoke"]
targets = [{{ upstream = "bedrock-invoke", model = "{BEDROCK_MODEL}" }}]
retry = {retry}

[[route]]
models = ["vertex-gemini"]
targets = [{{ upstream = "vertex", model = "gemini-2.5-flash" }}]
retry = {retry}

[[route]]
models = ["vertex-claude"]
targets = [{{ upstream = "vertex", model = "claude-sonnet-4-5@20250929" }}]
retry = {retry}

[[route]]
models = ["azure-gpt"]
targets = [{{ upstream = "azure", model = "gpt4o-prod" }}]
retry = {retry}
"#,
        key = key.display()
    )
}

async fn gateway(text: &str, mock_url: &str) -> Gateway {
    let env = cloud_env(mock_url);
    let config = Config::from_toml(text, &env).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Gateway::start(config).await.unwrap()
}

/// Both SDKs, streamed and not, to each cloud; a Bedrock ThrottlingException and Vertex AI's
/// 429 are retried, then a 429 in each SDK's own error type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn official_sdks_reach_bedrock_vertex_and_azure_entra() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let key = key_file(&mock, "sdk");
    let gw = gateway(&config(&mock, &key, "{ attempts = 1 }"), &mock.url()).await;

    let throttling = MockConfig {
        defaults: sluice_mock::Behavior::default()
            .with_spec("status=429, retry_after=0")
            .unwrap(),
        ..MockConfig::default()
    };
    // The token endpoints answer as usual: only the model calls are throttled.
    let tokens_ok = CloudConfig {
        token_behavior: Some(sluice_mock::Behavior::default()),
        ..CloudConfig::default()
    };
    let errors = MockServer::start_with(throttling, tokens_ok).await.unwrap();
    let errors_key = key_file(&errors, "errors");
    let errors_gw = gateway(
        &config(&errors, &errors_key, "{ attempts = 2, backoff = \"1ms\" }"),
        &errors.url(),
    )
    .await;

    run_checks(
        "tests/python/cloud_sdk.py",
        vec![
            format!("http://{}", gw.addr()),
            mock.url(),
            format!("http://{}", errors_gw.addr()),
        ],
    )
    .await;
    let auth = mock.stats().totals().auth;
    assert!(auth.sigv4_accepted >= 5, "{auth:?}");
    assert_eq!(auth.sigv4_rejected, 0, "{auth:?}");
    assert_eq!(auth.bearer_expired + auth.bearer_rejected, 0, "{auth:?}");
    // One token per credential: the requests shared them.
    assert_eq!(auth.google_tokens_issued, 1, "{auth:?}");
    assert_eq!(auth.entra_tokens_issued, 1, "{auth:?}");
    // Two attempts per throttled request, each signed and accepted.
    assert_eq!(errors.stats().totals().auth.sigv4_rejected, 0);
    let _ = std::fs::remove_file(key);
    let _ = std::fs::remove_file(errors_key);
}

/// A Python test upstream that recomputes each request's SigV4 signature with botocore's own
/// signer (tests/python/sigv4_upstream.py), killed when dropped.
struct Botocore {
    child: Child,
    url: String,
}

impl Botocore {
    fn start() -> Botocore {
        let py = python::sdk_python();
        let script = python::workspace_root().join("tests/python/sigv4_upstream.py");
        let mut child = Command::new(py)
            .arg(script)
            .arg(TEST_AWS_ACCESS_KEY_ID)
            .arg(TEST_AWS_SECRET_ACCESS_KEY)
            .stdout(Stdio::piped())
            .spawn()
            .expect("cannot run python");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("sigv4_upstream.py said {line:?}"))
            .to_string();
        Botocore { child, url }
    }
}

impl Drop for Botocore {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// botocore agrees with every signature the gateway makes: plain and streamed Converse, an
/// ARN model id (its `:` and `/` encoded in the path, and again in the canonical request), a
/// body with non-ASCII text, a session token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn botocore_verifies_what_the_gateway_signs() {
    let upstream = Botocore::start();
    let text = format!(
        r#"[server]
listen = "127.0.0.1:0"
access_log = "off"

[[upstream]]
name = "bedrock"
base_url = "{url}"
provider = "bedrock"
region = "eu-west-3"

[[route]]
models = ["claude"]
targets = [{{ upstream = "bedrock", model = "anthropic.claude-3-5-sonnet-20240620-v1:0" }}]
retry = {{ attempts = 1 }}

[[route]]
models = ["arn"]
targets = [{{ upstream = "bedrock", model = "arn:aws:bedrock:eu-west-3:123456789012:inference-profile/eu.anthropic.claude-3-5-sonnet-20240620-v1:0" }}]
retry = {{ attempts = 1 }}
"#,
        url = upstream.url
    );
    let env = |k: &str| {
        Some(match k {
            "AWS_ACCESS_KEY_ID" => TEST_AWS_ACCESS_KEY_ID.to_string(),
            "AWS_SECRET_ACCESS_KEY" => TEST_AWS_SECRET_ACCESS_KEY.to_string(),
            "AWS_SESSION_TOKEN" => "sluice-test-session-token/+=".to_string(),
            "HOME" => "/nonexistent-sluice-test-home".to_string(),
            _ => return None,
        })
    };
    let gw = Gateway::start(Config::from_toml(&text, &env).unwrap())
        .await
        .unwrap();
    run_checks(
        "tests/python/sigv4_verify.py",
        vec![format!("http://{}", gw.addr()), upstream.url.clone()],
    )
    .await;
}

/// Tokens that live 2 seconds, and a steady load for 6: no request fails or waits at an
/// expiry, no expired token reaches the upstream, and the token endpoint sees about one
/// request per token lifetime (the refresh is due at half of such a short life), not one per
/// request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn short_tokens_are_refreshed_off_the_request_path() {
    let cloud = CloudConfig {
        token_ttl: Duration::from_secs(2),
        ..CloudConfig::default()
    };
    let mock = MockServer::start_with(MockConfig::default(), cloud)
        .await
        .unwrap();
    let key = key_file(&mock, "load");
    let gw = gateway(&config(&mock, &key, "{ attempts = 1 }"), &mock.url()).await;
    let out = run_checks(
        "tests/python/token_load.py",
        vec![format!("http://{}", gw.addr()), "6".into(), "8".into()],
    )
    .await;
    let auth = mock.stats().totals().auth;
    println!("{auth:?}");
    let requests: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("requests "))
        .and_then(|n| n.trim().parse().ok())
        .expect("token_load.py reports its requests");
    assert!(requests >= 100, "too little load to tell: {requests}");
    assert_eq!(auth.bearer_expired + auth.bearer_rejected, 0, "{auth:?}");
    // About 8 s of 2 s tokens (start-up, 6 s of load, the checks), each refreshed once, at
    // half its life (the earliest the schedule allows; an hour's token at 48 minutes): about
    // one per second, nowhere near one per request.
    let issued = auth.google_tokens_issued;
    assert!(
        (3..=14).contains(&issued),
        "{issued} tokens for {requests} requests"
    );
    let _ = std::fs::remove_file(key);
}

/// A client of the gateway: our own upstream client, pointed at it.
async fn post(gw: &Gateway, path: &str, body: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let client = sluice_upstream::Upstream::new(sluice_upstream::UpstreamConfig {
        name: "client".into(),
        base_url: format!("http://{}", gw.addr()).parse().unwrap(),
        protocol: sluice_upstream::Protocol::Http1,
        ..sluice_upstream::UpstreamConfig::default()
    })
    .unwrap();
    let mut req = http::Request::new(bytes::Bytes::from(body.to_string()));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = path.parse().unwrap();
    req.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let resp = client.send(req, deadline).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A token endpoint that refuses the credential: the client gets a 503 in its own API's
/// format at once (not after a timeout), naming the upstream and the OAuth error, never the
/// secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_credential_is_a_503_in_the_clients_format() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let key = key_file(&mock, "refused");
    let url = mock.url();
    let env = move |k: &str| match k {
        "AZURE_CLIENT_SECRET" => Some("not-the-secret-0123".to_string()),
        other => cloud_env(&url)(other),
    };
    let text = config(&mock, &key, "{ attempts = 1 }");
    let gw = Gateway::start(Config::from_toml(&text, &env).unwrap())
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let (status, body) = post(
        &gw,
        "/v1/chat/completions",
        r#"{"model":"azure-gpt","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(status, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["error"]["code"], "upstream_credentials_unavailable",
        "{v}"
    );
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("`azure`") && msg.contains("invalid_client"),
        "{msg}"
    );
    assert!(!body.contains("not-the-secret"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The Anthropic client gets Anthropic's error shape.
    let (status, body) = post(
        &gw,
        "/v1/messages",
        r#"{"model":"azure-gpt","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(status, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["type"], "error", "{v}");
    assert!(mock.stats().totals().auth.token_requests_refused >= 1);
    // Nothing reached the Azure path without a token.
    assert_eq!(mock.stats().totals().auth.bearer_accepted, 0);
    let _ = std::fs::remove_file(key);
}

/// A ConverseStream exception before the first content (ThrottlingException) is retried
/// like any rate limit; a Bedrock 400 (ValidationException about the input's length) is a
/// context-length error in the client's format, not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bedrock_errors_are_classified_for_the_policy() {
    let throttled = MockConfig {
        defaults: sluice_mock::Behavior::default()
            .with_spec("stream_error_after=0:rate_limit")
            .unwrap(),
        ..MockConfig::default()
    };
    let mock = MockServer::start(throttled).await.unwrap();
    let key = key_file(&mock, "stream-errors");
    let gw = gateway(
        &config(&mock, &key, "{ attempts = 3, backoff = \"1ms\" }"),
        &mock.url(),
    )
    .await;
    let (status, body) = post(
        &gw,
        "/v1/chat/completions",
        r#"{"model":"bedrock-claude","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // Three attempts, then the last one's error as the stream's error event.
    let streams = mock
        .stats()
        .snapshot()
        .requests
        .iter()
        .filter(|r| r.path.ends_with("/converse-stream"))
        .count();
    assert_eq!(streams, 3, "{body}");
    let lower = body.to_lowercase();
    assert!(
        lower.contains("\"error\"") && (lower.contains("throttl") || lower.contains("rate_limit")),
        "{body}"
    );

    // The same through InvokeModel's stream, for an Anthropic client: its error event.
    let (status, body) = post(
        &gw,
        "/v1/messages",
        r#"{"model":"bedrock-invoke","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let invokes = mock
        .stats()
        .snapshot()
        .requests
        .iter()
        .filter(|r| r.path.ends_with("/invoke-with-response-stream"))
        .count();
    assert_eq!(invokes, 3, "{body}");
    // The mock throttles InvokeModel streams as Anthropic does, inside a chunk.
    assert!(body.contains("event: error"), "{body}");
    assert!(body.contains("rate_limit_error"), "{body}");

    let invalid = MockConfig {
        defaults: sluice_mock::Behavior::default()
            .with_spec("error=context_length")
            .unwrap(),
        ..MockConfig::default()
    };
    let mock2 = MockServer::start(invalid).await.unwrap();
    let key2 = key_file(&mock2, "context");
    let gw2 = gateway(
        &config(&mock2, &key2, "{ attempts = 3, backoff = \"1ms\" }"),
        &mock2.url(),
    )
    .await;
    let (status, body) = post(
        &gw2,
        "/v1/messages",
        r#"{"model":"bedrock-claude","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    let converse = mock2
        .stats()
        .snapshot()
        .requests
        .iter()
        .filter(|r| r.path.starts_with("/model/"))
        .count();
    assert_eq!(converse, 1, "not retried");
    let _ = std::fs::remove_file(key);
    let _ = std::fs::remove_file(key2);
}

/// A Bedrock stream for an OpenAI client that did not ask for usage has no usage chunk (the
/// gateway reads Bedrock's `metadata` for its own books and removes the chunk), one that asked
/// gets it; an Anthropic client gets its usage in `message_delta` as always.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bedrock_stream_usage_is_the_clients_choice() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let key = key_file(&mock, "usage");
    let gw = gateway(&config(&mock, &key, "{ attempts = 1 }"), &mock.url()).await;
    let ask = |usage: bool| {
        format!(
            r#"{{"model":"bedrock-claude","stream":true,"stream_options":{{"include_usage":{usage}}},"messages":[{{"role":"user","content":"hi"}}]}}"#
        )
    };
    let (status, without) = post(&gw, "/v1/chat/completions", &ask(false)).await;
    assert_eq!(status, 200, "{without}");
    assert!(without.ends_with("data: [DONE]\n\n"), "{without}");
    assert!(!without.contains("\"prompt_tokens\""), "{without}");
    let (_, with) = post(&gw, "/v1/chat/completions", &ask(true)).await;
    assert!(with.contains("\"prompt_tokens\""), "{with}");
    assert!(with.ends_with("data: [DONE]\n\n"), "{with}");
    let (_, anthropic) = post(
        &gw,
        "/v1/messages",
        r#"{"model":"bedrock-claude","stream":true,"max_tokens":32,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert!(anthropic.contains("event: message_delta"), "{anthropic}");
    assert!(anthropic.contains("\"output_tokens\""), "{anthropic}");
    assert!(anthropic.contains("event: message_stop"), "{anthropic}");
    let _ = std::fs::remove_file(key);
}

/// A reload that leaves a Vertex upstream's credentials as they were keeps its token (and
/// refresh task): no new token, no wait; one that changes them starts anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_token_while_the_credentials_are_unchanged() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let key = key_file(&mock, "reload");
    let text = |location: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
             [[upstream]]\nname = \"vertex\"\nbase_url = \"{}\"\nprovider = \"vertex\"\n\
             location = \"{location}\"\ncredentials_file = \"{}\"\n\
             [[route]]\nmodels = [\"*\"]\ntargets = [{{ upstream = \"vertex\", model = \"gemini-2.5-flash\" }}]\n",
            mock.url(),
            key.display()
        )
    };
    let path = key.with_extension("toml");
    std::fs::write(&path, text("us-east5")).unwrap();
    let source = sluice_gateway::ConfigSource {
        path: path.clone(),
        overrides: Default::default(),
        text: None,
    };
    let gw = Gateway::start_with_source(Config::load(&path).unwrap(), source)
        .await
        .unwrap();
    let chat = r#"{"model":"g","messages":[{"role":"user","content":"hi"}]}"#;
    let tokens = || mock.stats().totals().auth.google_tokens_issued;
    assert_eq!(post(&gw, "/v1/chat/completions", chat).await.0, 200);
    assert_eq!(tokens(), 1);
    gw.reload().await.unwrap();
    assert_eq!(post(&gw, "/v1/chat/completions", chat).await.0, 200);
    assert_eq!(tokens(), 1, "the same credentials keep their token");
    std::fs::write(&path, text("europe-west4")).unwrap();
    gw.reload().await.unwrap();
    assert_eq!(post(&gw, "/v1/chat/completions", chat).await.0, 200);
    assert_eq!(tokens(), 2, "changed settings get a token of their own");
    let last = mock
        .stats()
        .snapshot()
        .requests
        .last()
        .unwrap()
        .path
        .clone();
    assert!(last.contains("/locations/europe-west4/"), "{last}");
    let _ = std::fs::remove_file(key);
    let _ = std::fs::remove_file(path);
}

/// Tokens the upstream stops accepting (the mock forgets them, as after a revocation): the
/// 401 drops the token, a new one is fetched, and the request is tried again with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_replaced_and_the_request_retried() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let key = key_file(&mock, "revoked");
    let gw = gateway(
        &config(&mock, &key, "{ attempts = 2, backoff = \"1ms\" }"),
        &mock.url(),
    )
    .await;
    let chat = r#"{"model":"vertex-gemini","messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(post(&gw, "/v1/chat/completions", chat).await.0, 200);
    let before = mock.stats().totals().auth;
    assert_eq!(before.google_tokens_issued, 1);
    let (status, _) = post(&gw, "/__mock/revoke_tokens", "").await;
    assert_eq!(
        status, 404,
        "the gateway does not serve the mock's control paths"
    );
    // Revoke at the mock itself.
    let revoke = sluice_upstream::Upstream::new(sluice_upstream::UpstreamConfig {
        name: "mock-control".into(),
        base_url: mock.url().parse().unwrap(),
        protocol: sluice_upstream::Protocol::Http1,
        ..sluice_upstream::UpstreamConfig::default()
    })
    .unwrap();
    let mut req = http::Request::new(bytes::Bytes::new());
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = "/__mock/revoke_tokens".parse().unwrap();
    let resp = revoke
        .send(req, tokio::time::Instant::now() + Duration::from_secs(5))
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let (status, body) = post(&gw, "/v1/chat/completions", chat).await;
    assert_eq!(status, 200, "{body}");
    let after = mock.stats().totals().auth;
    assert_eq!(after.google_tokens_issued, 2, "{after:?}");
    assert_eq!(after.bearer_rejected + after.bearer_expired, 1, "{after:?}");
    let _ = std::fs::remove_file(key);
}
