//! The response cache over real sockets, the mock's counters proving when no upstream request
//! was made (DESIGN.md invariant 14): a repeated stream replayed with the same events, per-key
//! namespaces (shared only when the route says so), errors, cut, cancelled and filtered answers
//! never served, 50 identical requests making one upstream call, the request's own say
//! (`no-cache`, `no-store`, `x-sluice-cache-ttl`), `/admin/cache`, and with a real
//! `redis-server`: two instances sharing answers, and Redis down being a miss.

#[path = "../../../sluice-state/tests/support/mod.rs"]
pub(crate) mod redis_support;

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use sluice::Server;
use sluice_gateway::config::Config;
use sluice_mock::MockServer;

use crate::support::*;

const KEY_A: &str = "sk-cache-a";
const KEY_B: &str = "sk-cache-b";
/// A key with request and token limits.
const KEY_C: &str = "sk-cache-c";

fn hash(key: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Routes `private*` (per-key answers), `shared*` (`shared = true`), `paced*`
/// (`replay = "paced"`) and `plain*` (no cache), keys `a` and `b`, and `extra` appended.
fn config(mock: &MockServer, extra: &str) -> Config {
    let text = config_text(mock, extra);
    Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn config_text(mock: &MockServer, extra: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
access_log = "off"

[[upstream]]
name = "mock"
base_url = "{url}/v1"
protocol = "h2c"

[[route]]
name = "private"
models = ["private*"]
upstream = "mock"
retry = {{ attempts = 1 }}
cache = {{ ttl = "1h" }}

[[route]]
name = "shared"
models = ["shared*"]
upstream = "mock"
cache = {{ ttl = "1h", shared = true, max_bytes = "16KiB" }}

[[route]]
name = "paced"
models = ["paced*"]
upstream = "mock"
cache = {{ replay = "paced" }}

[[route]]
name = "plain"
models = ["plain*"]
upstream = "mock"

[[key]]
id = "a"
hash = "{a}"

[[key]]
id = "b"
hash = "{b}"

[[key]]
id = "c"
hash = "{c}"
requests = {{ limit = 1000, per = "1h" }}
tokens = {{ limit = 100000, per = "1h" }}
{extra}
"#,
        url = mock.url(),
        a = hash(KEY_A),
        b = hash(KEY_B),
        c = hash(KEY_C),
    )
}

async fn start(mock: &MockServer, extra: &str) -> Server {
    Server::start(config(mock, extra)).await.unwrap()
}

fn body(model: &str, stream: bool) -> String {
    format!(
        r#"{{"model":"{model}","stream":{stream},"messages":[{{"role":"user","content":"what is a sluice?"}}]}}"#
    )
}

fn post(key: &str, body: &str, headers: &[(&str, &str)]) -> Request<Bytes> {
    post_to("/v1/chat/completions", key, body, headers)
}

fn post_to(path: &str, key: &str, body: &str, headers: &[(&str, &str)]) -> Request<Bytes> {
    let mut b = Request::builder()
        .method("POST")
        .uri(format!("http://gw{path}"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"));
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    b.body(Bytes::from(body.to_string())).unwrap()
}

fn cache_header(r: &Resp) -> &str {
    r.headers
        .get("x-sluice-cache")
        .map_or("-", |v| v.to_str().unwrap())
}

/// Upstream requests the mock has received so far.
fn upstream_calls(mock: &MockServer) -> u64 {
    mock.stats().totals().requests
}

async fn admin(server: &Server, method: &str, path: &str) -> serde_json::Value {
    let r = h1(server.admin_addr(), request(method, path, "", "")).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

#[tokio::test]
async fn a_repeated_stream_is_replayed_with_the_same_events_and_no_upstream_request() {
    let mock = mock("tokens=12, interval_ms=5").await;
    let gw = start(&mock, "").await;
    let req = body("private-gpt", true);
    let first = h1(gw.addr(), post(KEY_A, &req, &[])).await;
    assert_eq!(first.status, 200);
    assert_eq!(cache_header(&first), "miss");
    assert_eq!(upstream_calls(&mock), 1);
    let events = sse(&first.body);
    assert!(events.len() > 12, "{events:?}");
    assert_eq!(events.last().unwrap().1, "[DONE]");

    // Over HTTP/2 this time: the same events, byte for byte, and no upstream request.
    let send = h2_connect(gw.addr()).await;
    let again = h2(&send, post(KEY_A, &req, &[])).await;
    assert_eq!(again.status, 200);
    assert_eq!(cache_header(&again), "hit");
    assert_eq!(again.headers["content-type"], "text/event-stream");
    assert!(again.headers["age"]
        .to_str()
        .unwrap()
        .parse::<u64>()
        .is_ok());
    assert_eq!(
        again.body, first.body,
        "the replay is the stream as it was sent"
    );
    assert_eq!(upstream_calls(&mock), 1, "a hit makes no upstream request");

    // The answer's text, assembled from the deltas, is the same too (and not empty).
    let text = |events: &[(Option<String>, String)]| -> String {
        events
            .iter()
            .filter(|(_, d)| d != "[DONE]")
            .filter_map(|(_, d)| {
                let v: serde_json::Value = serde_json::from_str(d).unwrap();
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(String::from)
            })
            .collect()
    };
    assert!(!text(&events).is_empty());
    assert_eq!(text(&sse(&again.body)), text(&events));

    // `stream` is not part of the key: a non-streaming request gets the stored stream
    // assembled into one body (its text, finish reason and usage), without an upstream call.
    let whole = body("private-gpt", false);
    let w1 = h1(gw.addr(), post(KEY_A, &whole, &[])).await;
    assert_eq!((w1.status.as_u16(), cache_header(&w1)), (200, "hit"));
    assert_eq!(w1.headers["content-type"], "application/json");
    let v = w1.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        text(&events).as_str()
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 12);
    assert_eq!(upstream_calls(&mock), 1);

    // And the reverse: a whole answer stored, then asked for as a stream, is re-emitted as
    // chunks with its text, ending with [DONE].
    let other_q = whole.replace("sluice", "weir");
    let w2 = h1(gw.addr(), post(KEY_A, &other_q, &[])).await;
    assert_eq!((w2.status.as_u16(), cache_header(&w2)), (200, "miss"));
    let w3 = h1(gw.addr(), post(KEY_A, &other_q, &[])).await;
    assert_eq!(cache_header(&w3), "hit");
    assert_eq!(w3.body, w2.body);
    assert_eq!(w3.headers["content-type"], w2.headers["content-type"]);
    let s = h1(
        gw.addr(),
        post(KEY_A, &other_q.replace("false", "true"), &[]),
    )
    .await;
    assert_eq!(cache_header(&s), "hit");
    assert_eq!(s.headers["content-type"], "text/event-stream");
    let chunks = sse(&s.body);
    assert_eq!(chunks.last().unwrap().1, "[DONE]");
    assert_eq!(
        text(&chunks),
        w2.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
    );
    assert_eq!(upstream_calls(&mock), 2);

    // Whitespace and key order do not change the key; a changed message does.
    let reordered = r#"{"messages":[{"content":"what is a sluice?","role":"user"}],  "stream":false, "model":"private-gpt"}"#;
    let w4 = h1(gw.addr(), post(KEY_A, reordered, &[])).await;
    assert_eq!(cache_header(&w4), "hit");
    let other = whole.replace("sluice", "lock");
    let w5 = h1(gw.addr(), post(KEY_A, &other, &[])).await;
    assert_eq!(cache_header(&w5), "miss");
    assert_eq!(upstream_calls(&mock), 3);

    // A route without a cache says nothing about one.
    let plain = h1(gw.addr(), post(KEY_A, &body("plain-gpt", false), &[])).await;
    assert_eq!(plain.status, 200);
    assert!(plain.headers.get("x-sluice-cache").is_none());
    gw.shutdown().await;
}

#[tokio::test]
async fn a_paced_replay_keeps_the_streams_timing() {
    let mock = mock("tokens=6, interval_ms=60").await;
    let gw = start(&mock, "").await;
    let req = body("paced-gpt", true);
    let t = tokio::time::Instant::now();
    let first = h1(gw.addr(), post(KEY_A, &req, &[])).await;
    let took = t.elapsed();
    assert_eq!(cache_header(&first), "miss");
    let t = tokio::time::Instant::now();
    let again = h1(gw.addr(), post(KEY_A, &req, &[])).await;
    let replayed = t.elapsed();
    assert_eq!(cache_header(&again), "hit");
    assert_eq!(again.body, first.body);
    assert_eq!(upstream_calls(&mock), 1);
    // Six gaps of 60 ms at least, as the original had.
    assert!(
        replayed >= Duration::from_millis(300) && took >= Duration::from_millis(300),
        "original {took:?}, paced replay {replayed:?}"
    );
}

#[tokio::test]
async fn two_keys_never_see_each_others_answers_unless_the_route_shares_them() {
    let mock = mock("tokens=4").await;
    let gw = start(&mock, "").await;
    let private = body("private-gpt", false);
    let a1 = h1(gw.addr(), post(KEY_A, &private, &[])).await;
    let b1 = h1(gw.addr(), post(KEY_B, &private, &[])).await;
    assert_eq!((cache_header(&a1), cache_header(&b1)), ("miss", "miss"));
    assert_eq!(upstream_calls(&mock), 2, "b did not get a's answer");
    let a2 = h1(gw.addr(), post(KEY_A, &private, &[])).await;
    let b2 = h1(gw.addr(), post(KEY_B, &private, &[])).await;
    assert_eq!((cache_header(&a2), cache_header(&b2)), ("hit", "hit"));
    assert_eq!((a2.body.clone(), b2.body.clone()), (a1.body, b1.body));
    assert_eq!(upstream_calls(&mock), 2);

    let shared = body("shared-gpt", false);
    let a = h1(gw.addr(), post(KEY_A, &shared, &[])).await;
    let b = h1(gw.addr(), post(KEY_B, &shared, &[])).await;
    assert_eq!((cache_header(&a), cache_header(&b)), ("miss", "hit"));
    assert_eq!(a.body, b.body);
    assert_eq!(upstream_calls(&mock), 3);

    // Purging a's namespace leaves b's answers.
    let purged = admin(&gw, "DELETE", "/admin/cache?key=a").await;
    assert_eq!(purged["purged"], 1);
    let a3 = h1(gw.addr(), post(KEY_A, &private, &[])).await;
    let b3 = h1(gw.addr(), post(KEY_B, &private, &[])).await;
    assert_eq!((cache_header(&a3), cache_header(&b3)), ("miss", "hit"));
    assert_eq!(upstream_calls(&mock), 4);
}

/// Sends `req` with `xmock` and drains the answer; then the same request without faults must
/// go upstream (nothing was stored) and is stored.
async fn never_stored(gw: &Server, mock: &MockServer, req: &str, xmock: &str) -> Resp {
    let before = upstream_calls(mock);
    let bad = h1(gw.addr(), post(KEY_A, req, &[("x-mock", xmock)])).await;
    assert_eq!(cache_header(&bad), "miss", "{xmock}");
    assert_eq!(upstream_calls(mock), before + 1);
    let good = h1(gw.addr(), post(KEY_A, req, &[])).await;
    assert_eq!(
        cache_header(&good),
        "miss",
        "{xmock}: its answer was not stored"
    );
    assert_eq!(good.status, 200);
    assert_eq!(upstream_calls(mock), before + 2);
    let hit = h1(gw.addr(), post(KEY_A, req, &[("x-mock", xmock)])).await;
    assert_eq!(cache_header(&hit), "hit", "{xmock}: the good answer was");
    assert_eq!(hit.body, good.body);
    bad
}

#[tokio::test]
async fn errors_cut_streams_and_filtered_answers_are_never_served() {
    let mock = mock("tokens=8").await;
    let gw = start(&mock, "").await;
    // An upstream error (not retried on this route).
    let r = never_stored(&gw, &mock, &body("private-e1", false), "status=400").await;
    assert_eq!(r.status, 400);
    // A stream cut after its first content.
    let r = never_stored(
        &gw,
        &mock,
        &body("private-e2", true),
        "abort_after=4, interval_ms=10",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_ne!(sse(&r.body).last().unwrap().1, "[DONE]");
    // A stream with an error event inside it.
    let r = never_stored(
        &gw,
        &mock,
        &body("private-e3", true),
        "stream_error_after=3:server",
    )
    .await;
    assert!(String::from_utf8_lossy(&r.body).contains("error"));
    // A content-filtered stream: a 200 whose finish_reason is content_filter.
    let r = never_stored(
        &gw,
        &mock,
        &body("private-e4", true),
        "stream_error_after=2:content_filter",
    )
    .await;
    assert!(String::from_utf8_lossy(&r.body).contains("content_filter"));
    // OpenAI's filter of a whole request is a 400 (the mock's shape); a whole 200 with
    // finish_reason content_filter is refused by the same check (`admit::cache`'s tests).
    let r = never_stored(
        &gw,
        &mock,
        &body("private-e5", false),
        "error=content_filter",
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].is_object());
    // A stream the client cancelled halfway.
    let req = body("private-e6", true);
    let before = upstream_calls(&mock);
    let send = h2_connect(gw.addr()).await;
    let resp = h2_send(
        &send,
        post(KEY_A, &req, &[("x-mock", "tokens=50, interval_ms=20")]),
    )
    .await
    .unwrap();
    let mut body_stream = resp.into_body();
    let first = body_stream.data().await.unwrap().unwrap();
    assert!(!first.is_empty());
    drop(body_stream);
    wait_for(mock.stats(), "the upstream stream cancelled", |s| {
        s.totals.cancelled >= 1
    })
    .await;
    let after = h1(gw.addr(), post(KEY_A, &req, &[])).await;
    assert_eq!(
        cache_header(&after),
        "miss",
        "a cancelled stream is not stored"
    );
    assert_eq!(upstream_calls(&mock), before + 2);
    // An answer over the route's max_bytes (16 KiB on `shared`).
    let big = body("shared-big", false);
    let r1 = h1(
        gw.addr(),
        post(KEY_A, &big, &[("x-mock", "body_bytes=20000")]),
    )
    .await;
    assert_eq!((r1.status.as_u16(), cache_header(&r1)), (200, "miss"));
    let r2 = h1(
        gw.addr(),
        post(KEY_A, &big, &[("x-mock", "body_bytes=20000")]),
    )
    .await;
    assert_eq!(cache_header(&r2), "miss", "too large to keep");

    let stats = admin(&gw, "GET", "/admin/cache").await;
    assert_eq!(stats["backend"], "memory");
    assert!(stats["refused_too_large"].as_u64().unwrap() >= 1, "{stats}");
    let metrics = h1(gw.admin_addr(), request("GET", "/metrics", "", "")).await;
    let text = String::from_utf8_lossy(&metrics.body);
    for line in [
        "sluice_cache_stores_total{route=\"private\",outcome=\"content_filter\"} 1",
        "sluice_cache_stores_total{route=\"private\",outcome=\"incomplete\"}",
        "sluice_cache_stores_total{route=\"private\",outcome=\"not_ok\"}",
        "sluice_cache_total{route=\"private\",outcome=\"hit\"} 5",
    ] {
        assert!(text.contains(line), "no `{line}` in\n{text}");
    }
}

/// An Anthropic-speaking upstream and its cached route `claude*`, for `start`'s `extra`.
fn anthropic_route(mock: &MockServer) -> String {
    format!(
        "[[upstream]]\nname = \"claude\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\
         provider = \"anthropic\"\n\n[[route]]\nname = \"claude\"\nmodels = [\"claude*\"]\n\
         upstream = \"claude\"\nretry = {{ attempts = 1 }}\ncache = {{ ttl = \"1h\" }}\n",
        mock.url()
    )
}

#[tokio::test]
async fn a_whole_answer_filtered_by_the_provider_is_asked_for_again() {
    let mock = mock("tokens=8").await;
    let gw = start(&mock, &anthropic_route(&mock)).await;
    // Each asked twice, identical: a 200 with the provider's filter finish both times, and
    // both times upstream (nothing was stored).
    let cases = [
        ("/v1/chat/completions", body("private-f1", false)),
        (
            "/v1/messages",
            r#"{"model":"claude-f2","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#
                .to_string(),
        ),
        (
            "/v1/responses",
            r#"{"model":"private-f3","input":"what is a sluice?"}"#.to_string(),
        ),
    ];
    for (path, req) in &cases {
        for round in 0..2 {
            let before = upstream_calls(&mock);
            let r = h1(
                gw.addr(),
                post_to(path, KEY_A, req, &[("x-mock", "filter_after=2")]),
            )
            .await;
            assert_eq!(
                r.status,
                200,
                "{path}: {}",
                String::from_utf8_lossy(&r.body)
            );
            let v = r.json();
            let filtered = match *path {
                "/v1/chat/completions" => v["choices"][0]["finish_reason"] == "content_filter",
                "/v1/messages" => v["stop_reason"] == "refusal",
                _ => v["incomplete_details"]["reason"] == "content_filter",
            };
            assert!(filtered, "{path}: {v}");
            assert_eq!(cache_header(&r), "miss", "{path}, round {round}");
            assert_eq!(
                upstream_calls(&mock),
                before + 1,
                "{path}, round {round}: asked upstream"
            );
        }
    }
    let metrics = h1(gw.admin_addr(), request("GET", "/metrics", "", "")).await;
    let text = String::from_utf8_lossy(&metrics.body);
    for line in [
        "sluice_cache_stores_total{route=\"private\",outcome=\"content_filter\"} 4",
        "sluice_cache_stores_total{route=\"claude\",outcome=\"content_filter\"} 2",
    ] {
        assert!(text.contains(line), "no `{line}` in\n{text}");
    }
    assert!(!text.contains("sluice_cache_total{route=\"private\",outcome=\"hit\"}"));
}

/// Event names and data of a Responses stream.
fn responses_events(body: &[u8]) -> Vec<(String, serde_json::Value)> {
    sse(body)
        .into_iter()
        .map(|(e, d)| (e.unwrap_or_default(), serde_json::from_str(&d).unwrap()))
        .collect()
}

#[tokio::test]
async fn a_whole_responses_answer_is_replayed_as_the_responses_stream() {
    let mock = mock("tokens=9").await;
    let gw = start(&mock, "").await;
    let whole = r#"{"model":"private-r","input":"what is a sluice?"}"#;
    let first = h1(gw.addr(), post_to("/v1/responses", KEY_A, whole, &[])).await;
    assert_eq!((first.status.as_u16(), cache_header(&first)), (200, "miss"));
    let stored = first.json();
    assert_eq!(stored["status"], "completed");
    let text: String = stored["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!text.is_empty());

    let streamed = whole.replace('}', r#","stream":true}"#);
    let s = h1(gw.addr(), post_to("/v1/responses", KEY_A, &streamed, &[])).await;
    assert_eq!((s.status.as_u16(), cache_header(&s)), (200, "hit"));
    assert_eq!(s.headers["content-type"], "text/event-stream");
    let events = responses_events(&s.body);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, (name, v)) in events.iter().enumerate() {
        assert_eq!(v["type"], name.as_str());
        assert_eq!(v["sequence_number"], i, "{v}");
    }
    let deltas: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, text);
    assert_eq!(events[0].1["response"]["status"], "in_progress");
    assert_eq!(events[0].1["response"]["id"], stored["id"]);
    assert_eq!(
        events[8].1["response"], stored,
        "completed: the stored response"
    );
    assert_eq!(upstream_calls(&mock), 1, "a hit makes no upstream request");

    // The stream it was converted from is not what is kept: a whole request still gets the
    // stored body, byte for byte.
    let again = h1(gw.addr(), post_to("/v1/responses", KEY_A, whole, &[])).await;
    assert_eq!(cache_header(&again), "hit");
    assert_eq!(again.body, first.body);
    assert_eq!(upstream_calls(&mock), 1);
}

#[tokio::test]
async fn the_access_log_says_what_the_cache_did() {
    let mock = mock("tokens=4").await;
    let log = std::env::temp_dir().join(format!("sluice-cache-log-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let text = config_text(&mock, "").replace(
        "access_log = \"off\"",
        &format!("access_log = \"{}\"\nlog_format = \"json\"", log.display()),
    );
    let gw = Server::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let req = body("private-log", false);
    let mut sent = Vec::new();
    for (req, headers, expect) in [
        (&req, &[][..], Some("miss")),
        (&req, &[][..], Some("hit")),
        (&req, &[("cache-control", "no-cache")][..], Some("bypass")),
        (&body("private-log", true), &[][..], Some("hit")),
        (&body("plain-log", false), &[][..], None),
    ] {
        let r = h1(gw.addr(), post(KEY_A, req, headers)).await;
        assert_eq!(r.status, 200);
        let id = r.headers["x-request-id"].to_str().unwrap().to_string();
        sent.push((id, expect));
    }
    // The writer flushes every 20 ms (up to 320 ms apart when idle).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let lines: Vec<serde_json::Value> = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if lines.len() >= sent.len() {
            break lines;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} access log lines",
            lines.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let _ = std::fs::remove_file(&log);
    for (id, expect) in sent {
        let line = lines
            .iter()
            .find(|l| l["request_id"] == id.as_str())
            .unwrap_or_else(|| panic!("no line for {id} in {lines:?}"));
        assert_eq!(line["cache"].as_str(), expect, "{line}");
    }
    assert_eq!(
        upstream_calls(&mock),
        3,
        "the miss, the bypass and the plain route"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_identical_concurrent_requests_make_one_upstream_call() {
    let mock = mock("tokens=8, ttft_ms=300").await;
    let gw = start(&mock, "").await;
    for (model, stream) in [("private-flight", false), ("private-flight-s", true)] {
        let before = upstream_calls(&mock);
        let req = body(model, stream);
        let send = h2_connect(gw.addr()).await;
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let send = send.clone();
                let req = req.clone();
                tokio::spawn(async move { h2(&send, post(KEY_A, &req, &[])).await })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        assert_eq!(upstream_calls(&mock) - before, 1, "stream={stream}");
        let hits = answers.iter().filter(|r| cache_header(r) == "hit").count();
        assert_eq!(hits, 49, "stream={stream}");
        for r in &answers {
            assert_eq!(r.status, 200);
            assert_eq!(r.body, answers[0].body);
        }
    }
    let stats = admin(&gw, "GET", "/admin/cache").await;
    assert!(
        stats["flight_waiters_served"].as_u64().unwrap() >= 98,
        "{stats}"
    );
}

#[tokio::test]
async fn requests_choose_no_cache_no_store_and_a_shorter_ttl() {
    let mock = mock("tokens=3").await;
    let gw = start(&mock, "").await;
    let req = body("private-cc", false);
    // no-store: neither looked up nor stored.
    let r = h1(
        gw.addr(),
        post(KEY_A, &req, &[("cache-control", "no-store")]),
    )
    .await;
    assert_eq!(cache_header(&r), "bypass");
    let r = h1(gw.addr(), post(KEY_A, &req, &[])).await;
    assert_eq!(cache_header(&r), "miss");
    // Stored now; no-cache skips the lookup (a fresh answer) but stores it.
    let r = h1(
        gw.addr(),
        post(KEY_A, &req, &[("cache-control", "no-cache")]),
    )
    .await;
    assert_eq!(cache_header(&r), "bypass");
    assert_eq!(upstream_calls(&mock), 3);
    let r = h1(gw.addr(), post(KEY_A, &req, &[])).await;
    assert_eq!(cache_header(&r), "hit");
    assert_eq!(upstream_calls(&mock), 3);

    // x-sluice-cache-ttl shortens the route's TTL for the answer it stores.
    let short = body("private-ttl", false);
    let r = h1(
        gw.addr(),
        post(KEY_A, &short, &[("x-sluice-cache-ttl", "300ms")]),
    )
    .await;
    assert_eq!(cache_header(&r), "miss");
    let r = h1(gw.addr(), post(KEY_A, &short, &[])).await;
    assert_eq!(cache_header(&r), "hit");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = h1(gw.addr(), post(KEY_A, &short, &[])).await;
    assert_eq!(cache_header(&r), "miss", "expired");
    let bad = h1(
        gw.addr(),
        post(KEY_A, &short, &[("x-sluice-cache-ttl", "soon")]),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert!(
        String::from_utf8_lossy(&bad.body).contains("x-sluice-cache-ttl"),
        "{}",
        String::from_utf8_lossy(&bad.body)
    );

    // /admin/cache: counters, entries per route, and a route purged.
    let stats = admin(&gw, "GET", "/admin/cache").await;
    assert!(stats["hits"].as_u64().unwrap() >= 2, "{stats}");
    assert!(stats["entries"].as_u64().unwrap() >= 1, "{stats}");
    assert!(stats["bytes"].as_u64().unwrap() > 0, "{stats}");
    assert!(stats["hit_rate"].as_f64().unwrap() > 0.0, "{stats}");
    let private = stats["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "private")
        .unwrap()
        .clone();
    assert!(private["entries"].as_u64().unwrap() >= 1, "{stats}");
    let purged = admin(&gw, "DELETE", "/admin/cache?route=private").await;
    assert!(purged["purged"].as_u64().unwrap() >= 1);
    let r = h1(gw.addr(), post(KEY_A, &req, &[])).await;
    assert_eq!(cache_header(&r), "miss", "purged");
}

/// Two instances on one real `redis-server`: an answer stored by one is a hit on the other;
/// with Redis gone, requests are misses answered upstream, never errors or long waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server on this machine (see crates/sluice/build.rs)"
)]
async fn two_instances_share_answers_in_redis_and_redis_down_is_a_miss() {
    let mut redis = redis_support::RedisServer::start().await;
    let mock = mock("tokens=5").await;
    let state = format!(
        "\n[state]\nredis = \"{}\"\ncall_timeout = \"100ms\"\nprobe_interval = \"100ms\"\n",
        redis.url()
    );
    let one = start(&mock, &state).await;
    let two = start(&mock, &state).await;
    for (stored, (model, stream)) in [("private-redis", false), ("private-redis-s", true)]
        .into_iter()
        .enumerate()
    {
        let req = body(model, stream);
        let before = upstream_calls(&mock);
        let first = h1(one.addr(), post(KEY_A, &req, &[])).await;
        assert_eq!(cache_header(&first), "miss");
        // The store to Redis is queued off the request path: wait until it lands.
        let mut landed = false;
        for _ in 0..100 {
            let stats = admin(&one, "GET", "/admin/cache").await;
            if stats["stores"].as_u64().unwrap() > stored as u64 {
                landed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(landed, "the store reached Redis");
        let hit = h1(two.addr(), post(KEY_A, &req, &[])).await;
        assert_eq!(
            cache_header(&hit),
            "hit",
            "the other instance finds it in Redis"
        );
        assert_eq!(hit.body, first.body);
        assert_eq!(
            upstream_calls(&mock) - before,
            1,
            "the hit made no upstream call"
        );
        // Key b still sees nothing of key a's, on either instance.
        let b = h1(two.addr(), post(KEY_B, &req, &[])).await;
        assert_eq!(cache_header(&b), "miss");
    }
    let stats = admin(&two, "GET", "/admin/cache").await;
    assert_eq!(stats["backend"], "redis");
    assert!(stats["hits"].as_u64().unwrap() >= 2, "{stats}");

    redis.kill();
    let req = body("private-redis", false);
    let t = tokio::time::Instant::now();
    for gw in [&one, &two] {
        let r = h1(gw.addr(), post(KEY_A, &req, &[])).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(cache_header(&r), "miss");
    }
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "Redis down costs at most its call deadline: {:?}",
        t.elapsed()
    );
}

/// A hit is on the books once, as a hit with the tokens and cost it saved (the stored
/// answer's), no attempt, and no spend: `/admin/usage` counts it apart.
#[tokio::test]
async fn a_hit_is_on_the_books_with_what_it_saved_and_spends_nothing() {
    let dir = std::env::temp_dir().join(format!("sluice-cache-ledger-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("ledger.db");
    let _ = std::fs::remove_file(&db);
    let mock = mock("tokens=20").await;
    let extra = format!(
        "\n[ledger]\nflush_interval = \"100ms\"\nsink = {{ kind = \"sqlite\", path = \"{}\" }}\n\n[[price]]\nmodels = [\"private-*\"]\ninput = 2.5\noutput = 10.0\n",
        db.display()
    );
    let gw = start(&mock, &extra).await;
    let req = body("private-books", true);
    let miss = h1(gw.addr(), post(KEY_A, &req, &[])).await;
    let hit = h1(gw.addr(), post(KEY_A, &req, &[])).await;
    assert_eq!((cache_header(&miss), cache_header(&hit)), ("miss", "hit"));
    let usage = loop {
        let u = admin(&gw, "GET", "/admin/usage?group_by=route").await;
        if u["totals"]["requests"] == 2 {
            break u;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    gw.shutdown().await;
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut q = conn
        .prepare(
            "SELECT cache_hit, input_tokens, output_tokens, cost_micros, attempts, stream, \
             status, key_id FROM sluice_requests ORDER BY ts_us",
        )
        .unwrap();
    type Row = (bool, i64, i64, i64, i64, bool, i64, String);
    let rows: Vec<Row> = q
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let (m, h) = (&rows[0], &rows[1]);
    assert!(!m.0 && h.0, "{rows:?}");
    assert_eq!(m.2, 20, "the miss's output tokens: {rows:?}");
    assert_eq!(
        (h.1, h.2, h.3),
        (m.1, m.2, m.3),
        "the hit saved what the miss cost"
    );
    assert!(m.3 > 0, "{rows:?}");
    assert_eq!((m.4, h.4), (1, 0), "attempts upstream");
    assert!(h.5, "replayed as a stream");
    assert_eq!((h.6, h.7.as_str()), (200, "a"));
    let totals = &usage["totals"];
    assert_eq!(totals["cache_hits"], 1, "{usage}");
    assert_eq!(totals["saved_micros"], m.3, "{usage}");
    assert_eq!(
        totals["cost_micros"], m.3,
        "only the miss is spend: {usage}"
    );
    assert_eq!(totals["output_tokens"], m.2, "{usage}");
}

/// Limits count a hit as a request, but not as tokens: the tokens its admission reserved are
/// given back, and only the miss's tokens are spent.
#[tokio::test]
async fn a_hit_counts_as_a_request_but_spends_no_tokens() {
    let mock = mock("tokens=40").await;
    let gw = start(&mock, "").await;
    // Each admission reserves max_tokens plus the prompt's estimate (over 500 tokens).
    let req = body("private-limits", false)
        .replace("\"stream\":false", "\"stream\":false,\"max_tokens\":500");
    let miss = h1(gw.addr(), post(KEY_C, &req, &[])).await;
    assert_eq!(cache_header(&miss), "miss");
    let spent = miss.json()["usage"]["total_tokens"].as_u64().unwrap();
    assert!(spent >= 40, "{spent}");
    for left in (994..=998).rev() {
        let hit = h1(gw.addr(), post(KEY_C, &req, &[])).await;
        assert_eq!(cache_header(&hit), "hit");
        assert_eq!(
            hit.headers["x-ratelimit-remaining-requests"],
            left.to_string().as_str()
        );
    }
    assert_eq!(upstream_calls(&mock), 1);
    let key = admin(&gw, "GET", "/admin/keys/c").await;
    assert_eq!(key["usage"]["requests"]["used"], 6, "{key}");
    // The token bucket drains as time passes (100,000 an hour: a token every 36 ms), so what
    // is left of the miss's tokens may be a few fewer; the five hits' reservations (over 500
    // tokens each) are not there.
    let used = key["usage"]["tokens"]["used"].as_u64().unwrap();
    assert!(used <= spent && used + 5 >= spent, "{spent} spent: {key}");
}

/// A reload that turns a route's cache on starts caching at once; one that changes its
/// settings keeps the answers already stored; one that turns it off stops serving them.
#[tokio::test]
async fn a_reload_turns_the_cache_on_and_off_and_keeps_its_answers() {
    let mock = mock("tokens=3").await;
    let path =
        std::env::temp_dir().join(format!("sluice-cache-reload-{}.toml", std::process::id()));
    let text = |cache: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n[[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n[[route]]\nname = \"r\"\nmodels = [\"*\"]\nupstream = \"mock\"\n{cache}\n",
            mock.url()
        )
    };
    std::fs::write(&path, text("")).unwrap();
    let gw = Server::start_with_source(
        Config::load(&path).unwrap(),
        sluice_gateway::ConfigSource {
            path: path.clone(),
            overrides: sluice_gateway::Overrides::default(),
            text: None,
        },
    )
    .await
    .unwrap();
    let ask = |gw: std::net::SocketAddr| async move {
        let r = h1(
            gw,
            request("POST", "/v1/chat/completions", "", &body("gpt-4o", false)),
        )
        .await;
        assert_eq!(r.status, 200);
        r.headers
            .get("x-sluice-cache")
            .map(|v| v.to_str().unwrap().to_string())
    };
    assert_eq!(ask(gw.addr()).await, None);
    std::fs::write(&path, text("cache = { ttl = \"1h\" }")).unwrap();
    gw.reload().await.unwrap();
    assert_eq!(ask(gw.addr()).await.as_deref(), Some("miss"));
    assert_eq!(ask(gw.addr()).await.as_deref(), Some("hit"));
    std::fs::write(&path, text("cache = { ttl = \"2h\", replay = \"paced\" }")).unwrap();
    gw.reload().await.unwrap();
    assert_eq!(
        ask(gw.addr()).await.as_deref(),
        Some("hit"),
        "kept across the reload"
    );
    std::fs::write(&path, text("")).unwrap();
    gw.reload().await.unwrap();
    assert_eq!(ask(gw.addr()).await, None);
    assert_eq!(upstream_calls(&mock), 3);
    let _ = std::fs::remove_file(&path);
}
