//! Guardrails through the whole gateway, over real sockets, with the mock behind it (which
//! records the bodies it received and sends the answer a test tells it to with `say`) and
//! external checkers started here (a small HTTP server: allows, denies, modifies, hangs; or
//! down).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use sluice_gateway::config::Config;
use sluice_gateway::Gateway;
use sluice_mock::{MockConfig, MockServer};

#[path = "../../sluice-mock/tests/mock/python.rs"]
mod python;

#[path = "../../sluice-mock/tests/mock/checks.rs"]
mod checks;

// === the client ===

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

/// POSTs `body` to the gateway over HTTP/1.1 and reads the whole answer.
async fn post(gw: SocketAddr, path: &str, mock: &str, body: serde_json::Value) -> Answer {
    post_as(gw, path, mock, body, None).await
}

/// `post`, with a virtual key.
async fn post_as(
    gw: SocketAddr,
    path: &str,
    mock: &str,
    body: serde_json::Value,
    key: Option<&str>,
) -> Answer {
    let stream = tokio::net::TcpStream::connect(gw).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post(path)
        .header("host", "gw")
        .header("content-type", "application/json")
        .header("x-mock", mock)
        .header("authorization", format!("Bearer {}", key.unwrap_or("none")))
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

fn chat(text: &str, stream: bool) -> serde_json::Value {
    serde_json::json!({
        "model": "gpt-4o-mini",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": text},
        ],
    })
}

/// The text deltas of an OpenAI chat stream, in order, and its error event's code if any.
fn stream_text(body: &str) -> (Vec<String>, Option<String>) {
    let mut deltas = Vec::new();
    let mut error = None;
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        if let Some(code) = v.pointer("/error/code").and_then(|c| c.as_str()) {
            error = Some(code.to_string());
        }
        if let Some(t) = v
            .pointer("/choices/0/delta/content")
            .and_then(|c| c.as_str())
        {
            deltas.push(t.to_string());
        }
    }
    (deltas, error)
}

fn header(a: &Answer, name: &str) -> String {
    a.headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

async fn gateway(mock: &MockServer, guardrails: &str, route_guardrails: &str) -> Gateway {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\
         {guardrails}\n\
         [[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\nretry = {{ attempts = 1 }}\n\
         guardrails = [{route_guardrails}]\n",
        mock.url()
    );
    let config = Config::from_toml(&text, &|v| std::env::var(v).ok()).unwrap();
    Gateway::start(config).await.unwrap()
}

const NO_PII: &str = "[[guardrail]]\nname = \"no-pii\"\nkind = \"builtin\"\n\
    detectors = { card = \"redact\", email = \"redact\", api_key = \"redact\", private_key = \"deny\" }\n";

// === rules ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_in_a_prompt_is_redacted_before_the_upstream_sees_it() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let gw = gateway(&mock, NO_PII, "\"no-pii\"").await;
    let a = post(
        gw.addr(),
        "/v1/chat/completions",
        "tokens=3",
        chat(
            "Refund card 4111 1111 1111 1111 please, to jane@example.com",
            false,
        ),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        header(&a, "x-sluice-guardrails"),
        "no-pii(redact),no-pii(allow)"
    );
    let snap = mock.stats().snapshot();
    let seen = String::from_utf8_lossy(&snap.requests.last().unwrap().body).to_string();
    assert!(
        seen.contains("Refund card [REDACTED:card] please, to [REDACTED:email]"),
        "{seen}"
    );
    assert!(!seen.contains("4111"), "{seen}");
    // The rest of the request is as the client sent it.
    assert!(seen.contains("You are terse."), "{seen}");
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains("sluice_guardrail_total{guardrail=\"no-pii\",verdict=\"redact\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_prompt_is_a_400_content_blocked_and_never_reaches_the_upstream() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let gw = gateway(&mock, NO_PII, "\"no-pii\"").await;
    let a = post(
        gw.addr(),
        "/v1/chat/completions",
        "tokens=3",
        chat(
            "here is my key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIE",
            false,
        ),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(v["error"]["code"], "content_blocked", "{}", a.body);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("no-pii"),
        "{}",
        a.body
    );
    assert_eq!(header(&a, "x-sluice-guardrails"), "no-pii(deny)");
    assert_eq!(mock.stats().totals().requests, 0, "the upstream was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_split_across_stream_events_is_redacted_at_the_client() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let gw = gateway(&mock, NO_PII, "\"no-pii\"").await;
    let said = "use key sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234 for it and card 4111111111111111 ok";
    let a = post(
        gw.addr(),
        "/v1/chat/completions",
        &format!("say={said}, token_bytes=3"),
        chat("what key?", true),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let (deltas, error) = stream_text(&a.body);
    assert_eq!(error, None, "{}", a.body);
    assert_eq!(
        deltas.concat(),
        "use key [REDACTED:api_key] for it and card [REDACTED:card] ok"
    );
    // The upstream sent the secret in pieces of 3 bytes: one event could not have held it.
    let snap = mock.stats().snapshot();
    assert!(snap.requests.last().unwrap().events_sent > 20);
    // The input check allowed the prompt; the stream's check redacted the answer.
    assert_eq!(header(&a, "x-sluice-guardrails"), "no-pii(allow)");
    let metrics = gw.telemetry().encode();
    for verdict in ["allow", "redact"] {
        let line =
            format!("sluice_guardrail_total{{guardrail=\"no-pii\",verdict=\"{verdict}\"}} 1");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}

/// A Responses client's stream stopped by a guardrail ends with `error` and `response.failed`
/// numbered on from the last event it received (the events withdrawn with the denied text
/// leave no gap), never in chat-completions shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_mid_stream_ends_a_responses_stream_in_its_own_shape() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let gw = gateway(&mock, NO_PII, "\"no-pii\"").await;
    let said = format!(
        "{} -----BEGIN PRIVATE KEY----- {}",
        "fine words ".repeat(30),
        "more text ".repeat(200)
    );
    let a = post(
        gw.addr(),
        "/v1/responses",
        &format!("say={said}, token_bytes=8, interval_ms=5"),
        serde_json::json!({"model": "gpt-4o-mini", "input": "tell me", "stream": true}),
    )
    .await;
    assert_eq!(a.status, 200);
    assert!(!a.body.contains("PRIVATE"), "{}", a.body);
    assert!(!a.body.contains("\"choices\""), "{}", a.body);
    let events: Vec<serde_json::Value> = a
        .body
        .split("\n\n")
        .filter_map(|block| block.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(events.len() > 3, "{}", a.body);
    for (i, v) in events.iter().enumerate() {
        assert_eq!(v["sequence_number"], i as u64, "numbered on: {v}");
    }
    let n = events.len();
    assert_eq!(events[n - 2]["type"], "error");
    assert_eq!(events[n - 2]["code"], "content_blocked");
    assert_eq!(events[n - 1]["type"], "response.failed");
    assert_eq!(
        events[n - 1]["response"]["error"]["code"],
        "content_blocked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_mid_stream_ends_with_content_blocked_and_cancels_the_upstream() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let gw = gateway(&mock, NO_PII, "\"no-pii\"").await;
    // A long answer, slow enough that the upstream is still sending when the key shows.
    let said = format!(
        "{} -----BEGIN PRIVATE KEY----- {}",
        "fine words ".repeat(30),
        "more text ".repeat(200)
    );
    let a = post(
        gw.addr(),
        "/v1/chat/completions",
        &format!("say={said}, token_bytes=8, interval_ms=5"),
        chat("tell me", true),
    )
    .await;
    assert_eq!(a.status, 200);
    let (deltas, error) = stream_text(&a.body);
    assert_eq!(error.as_deref(), Some("content_blocked"), "{}", a.body);
    assert!(!deltas.concat().contains("PRIVATE"), "{}", a.body);
    // The upstream saw the client go away long before its end.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let snap = mock.stats().snapshot();
        let r = snap.requests.last().unwrap();
        if matches!(r.outcome, sluice_mock::Outcome::Cancelled(_)) {
            assert!(r.events_sent < 200, "{} events sent", r.events_sent);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the upstream was not cancelled: {:?}",
            r.outcome
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_without_guardrails_is_untouched() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let gw = gateway(&mock, NO_PII, "").await;
    let a = post(
        gw.addr(),
        "/v1/chat/completions",
        "say=card 4111111111111111",
        chat("card 4111 1111 1111 1111", true),
    )
    .await;
    assert_eq!(a.status, 200);
    assert!(a.headers.get("x-sluice-guardrails").is_none());
    assert_eq!(stream_text(&a.body).0.concat(), "card 4111111111111111");
    let snap = mock.stats().snapshot();
    let seen = String::from_utf8_lossy(&snap.requests.last().unwrap().body).to_string();
    assert!(seen.contains("4111 1111 1111 1111"));
}

// === external checkers ===

/// A checker on a local port: `allow`, `deny`, `modify` (upper-cases every text) or `hang`.
async fn checker(mode: &'static str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: http::Request<hyper::body::Incoming>| async move {
                        let auth = req
                            .headers()
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_string());
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        let answer = if auth.as_deref() != Some("Bearer test-token") {
                            serde_json::json!({"verdict": "deny", "reason": "no credentials"})
                        } else if v["guardrail"] != "policy" || v["stage"] != "input" {
                            // The check names its guardrail and stage (one service, several
                            // guardrails): a request without them is refused, visibly.
                            serde_json::json!({"verdict": "deny", "reason": "unnamed check"})
                        } else {
                            match mode {
                                "allow" => serde_json::json!({"verdict": "allow"}),
                                "deny" => {
                                    serde_json::json!({"verdict": "deny", "reason": "policy 7 forbids this topic"})
                                }
                                "modify" => {
                                    let texts: Vec<String> = v["texts"]
                                        .as_array()
                                        .unwrap()
                                        .iter()
                                        .map(|t| t.as_str().unwrap().to_uppercase())
                                        .collect();
                                    serde_json::json!({"verdict": "modify", "texts": texts})
                                }
                                _ => {
                                    tokio::time::sleep(Duration::from_secs(30)).await;
                                    serde_json::json!({"verdict": "allow"})
                                }
                            }
                        };
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(answer.to_string()),
                        )))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

fn policy(addr: SocketAddr, on_error: &str) -> String {
    format!(
        "[[guardrail]]\nname = \"policy\"\nkind = \"http\"\nstage = \"input\"\n\
         url = \"http://{addr}/check\"\nheaders = {{ authorization = \"Bearer ${{GUARD_TEST_TOKEN:-test-token}}\" }}\n\
         timeout = \"300ms\"\nmax_in_flight = 4\non_error = \"{on_error}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_checker_allows_denies_and_modifies() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    for (mode, status, verdict) in [
        ("allow", 200, "allow"),
        ("deny", 400, "deny"),
        ("modify", 200, "modify"),
    ] {
        let addr = checker(mode).await;
        let gw = gateway(&mock, &policy(addr, "deny"), "\"policy\"").await;
        let a = post(
            gw.addr(),
            "/v1/chat/completions",
            "tokens=2",
            chat("hello there", false),
        )
        .await;
        assert_eq!(a.status, status, "{mode}: {}", a.body);
        assert_eq!(
            header(&a, "x-sluice-guardrails"),
            format!("policy({verdict})")
        );
        if mode == "deny" {
            assert!(a.body.contains("policy 7 forbids this topic"), "{}", a.body);
            assert!(a.body.contains("content_blocked"), "{}", a.body);
        }
        if mode == "modify" {
            let snap = mock.stats().snapshot();
            let seen = String::from_utf8_lossy(&snap.requests.last().unwrap().body).to_string();
            assert!(seen.contains("HELLO THERE"), "{seen}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_checker_gives_its_on_error_verdict_at_its_deadline() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let addr = checker("hang").await;
    for (on_error, status, verdict) in [("allow", 200, "error"), ("deny", 400, "deny")] {
        let gw = gateway(&mock, &policy(addr, on_error), "\"policy\"").await;
        let started = Instant::now();
        let a = post(
            gw.addr(),
            "/v1/chat/completions",
            "tokens=2",
            chat("hello", false),
        )
        .await;
        let took = started.elapsed();
        assert_eq!(a.status, status, "{on_error}: {}", a.body);
        assert_eq!(
            header(&a, "x-sluice-guardrails"),
            format!("policy({verdict})")
        );
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(3),
            "answered after {took:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checker_that_is_down_refuses_with_on_error_deny() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    // A port nobody listens on.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let gw = gateway(&mock, &policy(down, "deny"), "\"policy\"").await;
    let a = post(
        gw.addr(),
        "/v1/chat/completions",
        "tokens=2",
        chat("hello", false),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("content_blocked"), "{}", a.body);
    assert!(a.body.contains("could not decide"), "{}", a.body);
    assert_eq!(mock.stats().totals().requests, 0);
    // Fail open: the request goes on, and says so.
    let gw = gateway(&mock, &policy(down, "allow"), "\"policy\"").await;
    let a = post(
        gw.addr(),
        "/v1/chat/completions",
        "tokens=2",
        chat("hello", false),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(header(&a, "x-sluice-guardrails"), "policy(error)");
}

// === per key ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_guardrails_apply_to_its_requests_on_every_route() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let hash = |k: &str| {
        let d = ring::digest::digest(&ring::digest::SHA256, k.as_bytes());
        d.as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let keys = format!(
        "[[key]]\nid = \"guarded\"\nhash = \"{}\"\nguardrails = [\"no-pii\"]\n\
         [[key]]\nid = \"plain\"\nhash = \"{}\"\n",
        hash("sk-guarded"),
        hash("sk-plain")
    );
    let gw = gateway(&mock, &format!("{NO_PII}{keys}"), "").await;
    let prompt = || chat("card 4111 1111 1111 1111", false);
    let a = post_as(
        gw.addr(),
        "/v1/chat/completions",
        "tokens=2",
        prompt(),
        Some("sk-guarded"),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        header(&a, "x-sluice-guardrails"),
        "no-pii(redact),no-pii(allow)"
    );
    let seen = |mock: &MockServer| {
        let snap = mock.stats().snapshot();
        String::from_utf8_lossy(&snap.requests.last().unwrap().body).to_string()
    };
    assert!(
        seen(&mock).contains("card [REDACTED:card]"),
        "{}",
        seen(&mock)
    );
    let a = post_as(
        gw.addr(),
        "/v1/chat/completions",
        "tokens=2",
        prompt(),
        Some("sk-plain"),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.headers.get("x-sluice-guardrails").is_none());
    assert!(
        seen(&mock).contains("card 4111 1111 1111 1111"),
        "{}",
        seen(&mock)
    );
}

// === the official SDKs ===

/// The openai and anthropic SDKs see redacted streams (a secret split across events), a
/// denied prompt as `BadRequestError` (`content_blocked`) and a deny mid-stream as an
/// `APIError` (tests/python/guardrails_sdk.py).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn official_sdks_see_guardrails_act() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let gw = gateway(&mock, NO_PII, "\"no-pii\"").await;
    checks::run_checks(
        "tests/python/guardrails_sdk.py",
        vec![format!("http://{}", gw.addr())],
    )
    .await;
}

// === limits of a route ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_size_and_models_are_limited() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let limits = "[[guardrail]]\nname = \"limits\"\nkind = \"builtin\"\nstage = \"input\"\n\
                  max_prompt_tokens = 20\nmodels = [\"gpt-4o*\"]\n";
    let gw = gateway(&mock, limits, "\"limits\"").await;
    // "You are terse." and 40 bytes: about 14 tokens.
    let a = post(
        gw.addr(),
        "/v1/chat/completions",
        "tokens=2",
        chat(&"a".repeat(40), false),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = post(
        gw.addr(),
        "/v1/chat/completions",
        "tokens=2",
        chat(&"a".repeat(200), false),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(
        a.body.contains("over this route's limit of 20"),
        "{}",
        a.body
    );
    let mut other = chat("hi", false);
    other["model"] = "o3".into();
    let a = post(gw.addr(), "/v1/chat/completions", "tokens=2", other).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("not among the models"), "{}", a.body);
    assert_eq!(mock.stats().totals().requests, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_in_flight_are_bounded() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let addr = checker("hang").await;
    let config = policy(addr, "deny")
        .replace("max_in_flight = 4", "max_in_flight = 1")
        .replace("timeout = \"300ms\"", "timeout = \"2s\"");
    let gw = gateway(&mock, &config, "\"policy\"").await;
    let at = gw.addr();
    // The first check holds the one place for 2 s; the second is refused at once.
    let first = tokio::spawn(async move {
        post(at, "/v1/chat/completions", "tokens=2", chat("one", false)).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let second = post(
        gw.addr(),
        "/v1/chat/completions",
        "tokens=2",
        chat("two", false),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(second.status, 400, "{}", second.body);
    assert!(second.body.contains("in flight"), "{}", second.body);
    assert_eq!(first.await.unwrap().status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_never_holds_a_request_past_its_deadline() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let addr = checker("hang").await;
    // The checker may take 5 s; the route's whole request has 400 ms.
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n{}\n\
         [[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\ntimeout = \"400ms\"\nguardrails = [\"policy\"]\n",
        mock.url(),
        policy(addr, "deny").replace("timeout = \"300ms\"", "timeout = \"5s\"")
    );
    let gw = Gateway::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let started = Instant::now();
    let a = post(
        gw.addr(),
        "/v1/chat/completions",
        "tokens=2",
        chat("hello", false),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("could not decide"), "{}", a.body);
    assert!(
        took < Duration::from_millis(1500),
        "answered after {took:?}"
    );
}
