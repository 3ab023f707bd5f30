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
    // The input check allowed the prompt; the header names the guardrail watching the
    // stream, whose last comment says it redacted the answer.
    assert_eq!(
        header(&a, "x-sluice-guardrails"),
        "no-pii(allow),no-pii(watch)"
    );
    assert!(
        a.body
            .trim_end()
            .ends_with(": x-sluice-guardrails no-pii(redact)"),
        "{}",
        a.body
    );
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

// === external checkers on streams ===

/// What a stream checker got: each check's texts.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>;

/// A checker of streamed answers (`stage: "output"`): `allow`, `modify` (upper-cases),
/// `deny-forbidden` (refuses a window with "forbidden" in it) or `hang`.
async fn stream_checker(mode: &'static str) -> (SocketAddr, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Default::default();
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: http::Request<hyper::body::Incoming>| {
                        let log = log.clone();
                        async move {
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                            let texts: Vec<String> = v["texts"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|t| t.as_str().unwrap().to_string())
                                .collect();
                            log.lock().unwrap().push(texts.clone());
                            let answer = if v["guardrail"] != "policy" || v["stage"] != "output" {
                                serde_json::json!({"verdict": "deny", "reason": "unnamed check"})
                            } else {
                                match mode {
                                    "allow" => serde_json::json!({"verdict": "allow"}),
                                    "modify" => {
                                        let up: Vec<String> =
                                            texts.iter().map(|t| t.to_uppercase()).collect();
                                        serde_json::json!({"verdict": "modify", "texts": up})
                                    }
                                    "deny-forbidden" => {
                                        if texts.iter().any(|t| t.contains("forbidden")) {
                                            serde_json::json!({"verdict": "deny", "reason": "policy 9: no forbidden words"})
                                        } else {
                                            serde_json::json!({"verdict": "allow"})
                                        }
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
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

fn output_policy(addr: SocketAddr, on_error: &str, window: usize) -> String {
    format!(
        "[[guardrail]]\nname = \"policy\"\nkind = \"http\"\nstage = \"output\"\n\
         url = \"http://{addr}/check\"\ntimeout = \"300ms\"\nmax_in_flight = 4\n\
         on_error = \"{on_error}\"\nwindow = {window}\n"
    )
}

/// An external checker sees a streamed answer in windows, each before the client does: what
/// it allows goes on as it was, what it modifies goes on modified, and the pieces it saw are
/// the whole answer, none much over the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_checker_sees_a_stream_in_windows_and_may_modify_it() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let said = "the quick brown fox jumps over the lazy dog and then it runs far away to rest";
    for (mode, expected, verdict) in [
        ("allow", said.to_string(), "allow"),
        ("modify", said.to_uppercase(), "modify"),
    ] {
        let (addr, seen) = stream_checker(mode).await;
        let gw = gateway(&mock, &output_policy(addr, "deny", 16), "\"policy\"").await;
        let a = post(
            gw.addr(),
            "/v1/chat/completions",
            &format!("say={said}, token_bytes=3"),
            chat("tell me", true),
        )
        .await;
        assert_eq!(a.status, 200, "{}", a.body);
        let (deltas, error) = stream_text(&a.body);
        assert_eq!(error, None, "{mode}: {}", a.body);
        assert_eq!(deltas.concat(), expected, "{mode}");
        // No input check: the header names the guardrail watching the stream.
        assert_eq!(header(&a, "x-sluice-guardrails"), "policy(watch)");
        assert!(
            a.body
                .trim_end()
                .ends_with(&format!(": x-sluice-guardrails policy({verdict})")),
            "{}",
            a.body
        );
        let seen = seen.lock().unwrap().clone();
        let windows: Vec<String> = seen.into_iter().flatten().collect();
        assert_eq!(windows.concat(), said, "{mode}: {windows:?}");
        assert!(windows.len() >= 4, "{windows:?}");
        // A window is sent once 16 bytes are held: at most 16 + one 3-byte delta.
        assert!(windows.iter().all(|w| w.len() <= 18), "{windows:?}");
        let metrics = gw.telemetry().encode();
        let line =
            format!("sluice_guardrail_total{{guardrail=\"policy\",verdict=\"{verdict}\"}} 1");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}

/// A checker's deny mid-stream ends it with `content_blocked` in the client's API, the
/// refused window never reaches the client, and the upstream is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_checker_denying_mid_stream_ends_it_and_cancels_the_upstream() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let (addr, _) = stream_checker("deny-forbidden").await;
    let gw = gateway(&mock, &output_policy(addr, "allow", 64), "\"policy\"").await;
    let said = format!(
        "{} a forbidden word {}",
        "fine words ".repeat(20),
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
    assert!(
        a.body.contains("policy 9: no forbidden words"),
        "{}",
        a.body
    );
    let text = deltas.concat();
    assert!(!text.contains("forbidden"), "{text}");
    assert!(text.starts_with("fine words fine words"), "{text}");
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

/// A checker that hangs on a stream: at its deadline, `on_error = "allow"` lets the window
/// through (verdict `error`), `on_error = "deny"` ends the stream with `content_blocked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_checker_on_a_stream_gives_its_on_error_verdict_at_its_deadline() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let (addr, seen) = stream_checker("hang").await;
    // Shorter than the window: one check, at the answer's end.
    let said = "a short answer";
    for on_error in ["allow", "deny"] {
        let gw = gateway(&mock, &output_policy(addr, on_error, 256), "\"policy\"").await;
        let started = Instant::now();
        let a = post(
            gw.addr(),
            "/v1/chat/completions",
            &format!("say={said}, token_bytes=4"),
            chat("tell me", true),
        )
        .await;
        let took = started.elapsed();
        assert_eq!(a.status, 200);
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(3),
            "{on_error}: answered after {took:?}"
        );
        let (deltas, error) = stream_text(&a.body);
        if on_error == "allow" {
            assert_eq!(error, None, "{}", a.body);
            assert_eq!(deltas.concat(), said);
            assert!(
                a.body
                    .trim_end()
                    .ends_with(": x-sluice-guardrails policy(error)"),
                "{}",
                a.body
            );
        } else {
            assert_eq!(error.as_deref(), Some("content_blocked"), "{}", a.body);
            assert_eq!(deltas.concat(), "", "{}", a.body);
            assert!(a.body.contains("could not decide"), "{}", a.body);
        }
    }
    assert_eq!(seen.lock().unwrap().len(), 2);
}

// === the response cache ===

/// A shared cache keeps answers apart by the guardrails they were made under: an answer
/// stored for a key without output guardrails is never served to a key with stricter ones
/// (its own request goes upstream and is redacted), and a hit says which guardrails apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_cache_serves_an_answer_only_under_the_guardrails_it_was_made_under() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let hash = |k: &str| {
        let d = ring::digest::digest(&ring::digest::SHA256, k.as_bytes());
        d.as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\
         {NO_PII}\
         [[key]]\nid = \"guarded\"\nhash = \"{}\"\nguardrails = [\"no-pii\"]\n\
         [[key]]\nid = \"plain\"\nhash = \"{}\"\n\
         [[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\nretry = {{ attempts = 1 }}\n\
         cache = {{ ttl = \"1h\", shared = true }}\n",
        mock.url(),
        hash("sk-guarded"),
        hash("sk-plain")
    );
    let gw = Gateway::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let ask = |key: &'static str| {
        let at = gw.addr();
        async move {
            post_as(
                at,
                "/v1/chat/completions",
                "say=my card is 4111 1111 1111 1111",
                chat("what is your card?", false),
                Some(key),
            )
            .await
        }
    };
    let upstream_calls = || mock.stats().totals().requests;
    let content = |a: &Answer| {
        let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let plain = ask("sk-plain").await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert_eq!(content(&plain), "my card is 4111 1111 1111 1111");
    assert_eq!(upstream_calls(), 1);
    // The guarded key asks the same: not the plain key's answer.
    let guarded = ask("sk-guarded").await;
    assert_eq!(guarded.status, 200, "{}", guarded.body);
    assert_eq!(header(&guarded, "x-sluice-cache"), "miss");
    assert_eq!(content(&guarded), "my card is [REDACTED:card]");
    assert_eq!(
        header(&guarded, "x-sluice-guardrails"),
        "no-pii(allow),no-pii(redact)"
    );
    assert_eq!(upstream_calls(), 2);
    // Each key's next ask is a hit of its own answer; the guarded one's says its guardrails.
    let again = ask("sk-guarded").await;
    assert_eq!(header(&again, "x-sluice-cache"), "hit");
    assert_eq!(content(&again), "my card is [REDACTED:card]");
    assert_eq!(
        header(&again, "x-sluice-guardrails"),
        "no-pii(allow),no-pii(cached)"
    );
    let plain_again = ask("sk-plain").await;
    assert_eq!(header(&plain_again, "x-sluice-cache"), "hit");
    assert_eq!(content(&plain_again), "my card is 4111 1111 1111 1111");
    assert!(plain_again.headers.get("x-sluice-guardrails").is_none());
    assert_eq!(upstream_calls(), 2);
}
