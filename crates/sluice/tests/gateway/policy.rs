//! The policy stage over real sockets: retries, backoff and Retry-After, fallbacks by class,
//! one deadline, the retry budget, and streams that fail over until their first content.

use std::time::Duration;

use sluice::Server;
use sluice_gateway::config::Config;
use sluice_mock::MockServer;
use tokio::time::Instant;

use crate::support::*;

/// A gateway with one upstream per mock (`a`, `b`, ...) and `route` as its only route.
async fn gateway_over(mocks: &[&MockServer], upstream_extra: &str, route: &str) -> Server {
    gateway_logging_to("off", mocks, upstream_extra, route).await
}

/// `gateway_over` with its access log at `log` (a path, or `off`), one JSON object a line.
async fn gateway_logging_to(
    log: &str,
    mocks: &[&MockServer],
    upstream_extra: &str,
    route: &str,
) -> Server {
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"{log}\"\nlog_format = \"json\"\n"
    );
    for (i, m) in mocks.iter().enumerate() {
        let name = (b'a' + i as u8) as char;
        text.push_str(&format!(
            "\n[[upstream]]\nname = \"{name}\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n{upstream_extra}\n",
            m.url()
        ));
    }
    text.push_str(&format!("\n[[route]]\nmodels = [\"*\"]\n{route}\n"));
    let cfg = Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Server::start(cfg).await.unwrap()
}

fn requests(m: &MockServer) -> u64 {
    m.stats().snapshot().totals.requests
}

fn header<'a>(r: &'a Resp, name: &str) -> &'a str {
    r.headers
        .get(name)
        .map(|v| v.to_str().unwrap())
        .unwrap_or("")
}

const PRIMARY_THEN_B: &str =
    "targets = [{ upstream = \"a\" }]\nfallbacks = [{ upstream = \"b\", model = \"fallback-model\" }]\n";

#[tokio::test]
async fn persistent_429_backs_off_honours_retry_after_then_falls_back() {
    let a = mock("status=429, retry_after=1").await;
    let b = mock("").await;
    let gw = gateway_over(&[&a, &b], "", PRIMARY_THEN_B).await;
    let t0 = Instant::now();
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    let took = t0.elapsed();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // Two attempts on `a` (the default `attempts = 2`), one second apart as Retry-After
    // asked, then the fallback.
    assert_eq!(requests(&a), 2);
    assert_eq!(requests(&b), 1);
    assert!(took >= Duration::from_millis(950), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(header(&r, "x-sluice-upstream"), "b");
    assert_eq!(header(&r, "x-sluice-attempts"), "3");
    // The response names the model that answered, and carries its usage.
    assert_eq!(r.json()["model"], "fallback-model");
    assert!(r.json()["usage"]["completion_tokens"].as_u64().unwrap() > 0);
}

const CHAT: &str = r#"{"model":"gpt-4o"}"#;
const STREAM: &str = r#"{"model":"gpt-4o","stream":true}"#;

#[tokio::test]
async fn a_retry_after_beyond_max_retry_after_falls_back_at_once() {
    let a = mock("status=429, retry_after=30").await;
    let b = mock("").await;
    let gw = gateway_over(&[&a, &b], "", PRIMARY_THEN_B).await;
    let t0 = Instant::now();
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!((requests(&a), requests(&b)), (1, 1));
}

#[tokio::test]
async fn final_errors_are_returned_as_they_are_after_one_attempt() {
    let a = mock("status=400").await;
    let b = mock("").await;
    let gw = gateway_over(&[&a, &b], "", PRIMARY_THEN_B).await;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["code"],
        "mock_400",
        "the upstream's own error body"
    );
    assert_eq!((requests(&a), requests(&b)), (1, 0));
    assert_eq!(header(&r, "x-sluice-attempts"), "1");
}

#[tokio::test]
async fn a_silent_target_is_abandoned_at_the_first_byte_timeout_and_never_retried() {
    // `ttft_ms` holds a non-streaming response's headers.
    let a = mock("ttft_ms=5000").await;
    let b = mock("").await;
    let gw = gateway_over(
        &[&a, &b],
        "timeouts = { first_byte = \"300ms\" }",
        PRIMARY_THEN_B,
    )
    .await;
    let t0 = Instant::now();
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!((requests(&a), requests(&b)), (1, 1));
    // The silent attempt was cancelled, not left running.
    wait_for(a.stats(), "the silent request cancelled", |s| {
        s.totals.cancelled == 1
    })
    .await;
}

#[tokio::test]
async fn a_failed_attempt_is_logged_with_the_time_it_took() {
    let a = mock("ttft_ms=5000").await;
    let b = mock("").await;
    let log =
        std::env::temp_dir().join(format!("sluice-policy-attempts-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let gw = gateway_logging_to(
        &log.display().to_string(),
        &[&a, &b],
        "timeouts = { first_byte = \"300ms\" }",
        PRIMARY_THEN_B,
    )
    .await;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    // The writer flushes every 20 ms.
    let deadline = Instant::now() + Duration::from_secs(5);
    let line = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(l) = text.lines().next() {
            break l.to_string();
        }
        assert!(Instant::now() < deadline, "no access log line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let _ = std::fs::remove_file(&log);
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    // `a:-:<class>/<cause>:<ms>ms,b:200:ok:<ms>ms`
    let attempts = v["attempts"].as_str().unwrap();
    let (first, second) = attempts.split_once(',').unwrap_or_else(|| panic!("{line}"));
    assert!(first.starts_with("a:"), "{line}");
    assert!(second.starts_with("b:200:ok:"), "{line}");
    let ms: f64 = first
        .rsplit(':')
        .next()
        .and_then(|d| d.strip_suffix("ms"))
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    // It lasted until its first-byte timeout, not no time at all.
    assert!((300.0..2000.0).contains(&ms), "{ms} ms: {line}");
}

#[tokio::test]
async fn a_slow_first_token_falls_back_within_first_token_and_the_client_sees_one_clean_stream() {
    // Streams: headers at once, the first token after `ttft_ms`.
    let a = mock("ttft_ms=5000").await;
    let b = mock("tokens=3").await;
    let gw = gateway_over(
        &[&a, &b],
        "timeouts = { first_token = \"300ms\" }",
        PRIMARY_THEN_B,
    )
    .await;
    let t0 = Instant::now();
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", STREAM),
    )
    .await;
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(r.status, 200);
    let events = sse(&r.body);
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let roles = events
        .iter()
        .filter(|(_, d)| d.contains("\"role\""))
        .count();
    assert_eq!(
        roles, 1,
        "one role chunk: the abandoned stream's preamble was held"
    );
    assert!(events.iter().all(|(_, d)| !d.contains("\"error\"")));
    assert!(events[0].1.contains("fallback-model"), "{events:?}");
    assert_eq!((requests(&a), requests(&b)), (1, 1));
}

#[tokio::test]
async fn a_stream_reset_before_its_first_content_fails_over_invisibly() {
    // One event (message_start: preamble), then the upstream resets. (With no interval, h2
    // would see the reset before the response headers: a different failure.)
    let a = mock("abort_after=1, interval_ms=20").await;
    let b = mock("tokens=3").await;
    let gw = gateway_over(&[&a, &b], "", PRIMARY_THEN_B).await;
    let body = r#"{"model":"c","max_tokens":50,"stream":true}"#;
    let r = h1(gw.addr(), request("POST", "/v1/messages", "", body)).await;
    let events = sse(&r.body);
    let starts = events
        .iter()
        .filter(|(e, _)| e.as_deref() == Some("message_start"))
        .count();
    assert_eq!(starts, 1, "{events:?}");
    assert_eq!(
        events.last().unwrap().0.as_deref(),
        Some("message_stop"),
        "{events:?}"
    );
    // Retryable: the primary got its second attempt (the same target, the only one of its
    // tier) before the fallback.
    assert!(requests(&a) >= 1);
    assert_eq!(requests(&b), 1);
}

#[tokio::test]
async fn a_cut_after_content_ends_with_an_error_event_and_is_never_retried() {
    let a = mock("tokens=10, abort_after=4, interval_ms=20").await;
    let b = mock("").await;
    let gw = gateway_over(&[&a, &b], "", PRIMARY_THEN_B).await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", STREAM),
    )
    .await;
    let events = sse(&r.body);
    let last: serde_json::Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["error"]["code"], "upstream_reset");
    assert_eq!(events.len(), 5, "4 events, then the error: {events:?}");
    assert_eq!((requests(&a), requests(&b)), (1, 0));
}

#[tokio::test]
async fn the_deadline_is_never_exceeded_by_backoff() {
    // Retry-After 2 s fits max_retry_after, but not the client's 1 s deadline: no waiting.
    let a = mock("status=503, retry_after=2").await;
    let gw = gateway_over(&[&a], "", "upstream = \"a\"").await;
    let t0 = Instant::now();
    let mut req = request("POST", "/v1/chat/completions", "", CHAT);
    req.headers_mut()
        .insert("x-sluice-timeout", "1s".parse().unwrap());
    let r = h1(gw.addr(), req).await;
    assert_eq!(r.status, 503);
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(requests(&a), 1);
    // Backoff (no Retry-After) is cut short by the deadline too.
    let a = mock("status=500").await;
    let gw = gateway_over(
        &[&a],
        "",
        "upstream = \"a\"\nretry = { attempts = 10, backoff = \"300ms\", max_backoff = \"300ms\" }",
    )
    .await;
    let t0 = Instant::now();
    let mut req = request("POST", "/v1/chat/completions", "", CHAT);
    req.headers_mut()
        .insert("x-sluice-timeout", "700ms".parse().unwrap());
    let r = h1(gw.addr(), req).await;
    assert_eq!(r.status, 500);
    assert!(
        t0.elapsed() < Duration::from_millis(750),
        "{:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn the_retry_budget_stops_a_retry_storm() {
    let a = mock("status=500").await;
    let gw = gateway_over(
        &[&a],
        "retry_budget = { ratio = 0.1, min_per_second = 1 }",
        "upstream = \"a\"\nretry = { attempts = 3, backoff = \"1ms\", max_backoff = \"1ms\" }",
    )
    .await;
    let n = 300;
    let addr = gw.addr();
    let mut tasks = Vec::new();
    for _ in 0..n {
        tasks.push(tokio::spawn(async move {
            h1(addr, request("POST", "/v1/chat/completions", "", CHAT))
                .await
                .status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 500);
    }
    let sent = requests(&a);
    // Without a budget: 3 × 300 = 900. With it: 300 + 0.1 × 300 + 1/s × 10 s.
    assert!(sent <= n + 30 + 10, "{sent} upstream requests");
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains("sluice_retry_budget_exhausted_total{upstream=\"a\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn never_sent_failures_go_to_another_target() {
    // `a` refuses connections (a closed port).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let b = mock("").await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n[[upstream]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nprotocol = \"http1\"\n[[upstream]]\nname = \"b\"\nbase_url = \"{}/v1\"\n[[route]]\nmodels = [\"*\"]\ntargets = [{{ upstream = \"a\" }}, {{ upstream = \"b\" }}]\n",
        b.url()
    );
    let gw = Server::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    for _ in 0..4 {
        let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
        assert_eq!(r.status, 200);
        assert_eq!(header(&r, "x-sluice-upstream"), "b");
    }
}

/// The text of an OpenAI stream's content deltas.
fn openai_text(body: &[u8]) -> String {
    sse(body)
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

/// `a` serves, `b` (with `b_extra`, e.g. its prefill capability) is the fallback, and the
/// route continues cut streams.
async fn continuing(a: &MockServer, b: &MockServer, b_extra: &str) -> Server {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"a\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\
         [[upstream]]\nname = \"b\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n{b_extra}\n\
         [[route]]\nmodels = [\"*\"]\ntargets = [{{ upstream = \"a\" }}]\n\
         fallbacks = [{{ upstream = \"b\" }}]\ncontinuation = true\n",
        a.url(),
        b.url()
    );
    Server::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap()
}

const CONTINUED: &str =
    r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"tell me"}]}"#;

#[tokio::test]
async fn a_cut_stream_is_continued_byte_exact_on_a_prefill_target() {
    // `a` cuts every stream after 5 events; `b` takes an assistant prefill and goes on.
    let a = mock("tokens=12, abort_after=5, interval_ms=10").await;
    let b = mock("tokens=12").await;
    // `b` is OpenAI-compatible and says it continues a trailing assistant message.
    let gw = continuing(&a, &b, "prefill = true").await;
    let direct = h1(
        b.addr(),
        request("POST", "/v1/chat/completions", "", CONTINUED),
    )
    .await;
    let full = openai_text(&direct.body);
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", CONTINUED),
    )
    .await;
    let events = sse(&r.body);
    assert!(
        events.iter().all(|(_, d)| !d.contains("\"error\"")),
        "{events:?}"
    );
    assert_eq!(events.last().unwrap().1, "[DONE]");
    assert_eq!(
        openai_text(&r.body),
        full,
        "no duplicated and no missing text"
    );
    let roles = events
        .iter()
        .filter(|(_, d)| d.contains("\"role\""))
        .count();
    assert_eq!(roles, 1, "the continuation's preamble is dropped");
    // The continuation carried the text already sent as a prefill.
    let snap = b.stats().snapshot();
    let cont = snap.requests.last().unwrap();
    assert!(cont.prefill.is_some(), "{:?}", cont.prefill);
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains("sluice_continuations_total{reason=\"ok\"} 1"),
        "{metrics}"
    );
}

/// The failover check for a stall (issue 30): `a` stalls every stream after its role chunk and
/// 20 tokens, far longer than its 300 ms idle timeout; `b` takes a prefill. Over HTTP/2 and
/// HTTP/1.1 upstreams: the client gets the whole text once, the stalled request is cancelled
/// upstream (RST_STREAM, or the connection closed), and `b` was asked to continue the 20
/// tokens already sent. On a route without continuation the stall ends with the error event.
#[tokio::test]
async fn a_stream_stalled_after_20_tokens_is_continued_and_the_stall_cancelled_upstream() {
    for protocol in ["h2c", "http1"] {
        let a = mock("tokens=40, interval_ms=2, stall_after=21:20000").await;
        let b = mock("tokens=40").await;
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
             [[upstream]]\nname = \"a\"\nbase_url = \"{}/v1\"\nprotocol = \"{protocol}\"\n\
             timeouts = {{ idle = \"300ms\" }}\n\
             [[upstream]]\nname = \"b\"\nbase_url = \"{}/v1\"\nprotocol = \"{protocol}\"\n\
             prefill = true\n\
             [[route]]\nmodels = [\"off-*\"]\ntargets = [{{ upstream = \"a\" }}]\n\
             fallbacks = [{{ upstream = \"b\" }}]\n\
             [[route]]\nmodels = [\"*\"]\ntargets = [{{ upstream = \"a\" }}]\n\
             fallbacks = [{{ upstream = \"b\" }}]\ncontinuation = true\n",
            a.url(),
            b.url()
        );
        let gw = Server::start(Config::from_toml(&text, &|_| None).unwrap())
            .await
            .unwrap();
        let direct = h1(
            b.addr(),
            request("POST", "/v1/chat/completions", "", CONTINUED),
        )
        .await;
        let full = openai_text(&direct.body);
        let words_sent_before_the_stall: String = sse(&direct.body)
            .iter()
            .filter_map(|(_, d)| serde_json::from_str::<serde_json::Value>(d).ok())
            .filter_map(|v| {
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_string)
            })
            .filter(|t| !t.is_empty())
            .take(20)
            .collect();
        let t0 = Instant::now();
        let r = h1(
            gw.addr(),
            request("POST", "/v1/chat/completions", "", CONTINUED),
        )
        .await;
        let took = t0.elapsed();
        let events = sse(&r.body);
        assert!(
            events.iter().all(|(_, d)| !d.contains("\"error\"")),
            "{protocol}: {events:?}"
        );
        assert_eq!(events.last().unwrap().1, "[DONE]", "{protocol}");
        assert_eq!(
            openai_text(&r.body),
            full,
            "{protocol}: the whole text, nothing duplicated or missing"
        );
        let roles = events
            .iter()
            .filter(|(_, d)| d.contains("\"role\""))
            .count();
        assert_eq!(roles, 1, "{protocol}: one preamble");
        // Continued after the idle timeout, not after the stall's 20 s.
        assert!(took < Duration::from_secs(5), "{protocol}: {took:?}");
        // The stalled request was cancelled upstream, while it was still stalling.
        let snap = wait_for(a.stats(), "the stalled stream cancelled upstream", |s| {
            s.totals.cancelled == 1
        })
        .await;
        assert_eq!(snap.totals.completed, 0, "{protocol}");
        let stalled = snap.requests.last().unwrap();
        assert_eq!(stalled.events_sent, 21, "{protocol}: role + 20 tokens");
        // `b` continued from exactly the text already sent.
        let snap = b.stats().snapshot();
        assert_eq!(
            snap.totals.requests, 2,
            "{protocol}: the direct run and the continuation"
        );
        let prefill = snap.requests.last().unwrap().prefill;
        let prefill = prefill.unwrap_or_else(|| panic!("{protocol}: no prefill"));
        assert_eq!(
            prefill.bytes,
            words_sent_before_the_stall.len(),
            "{protocol}"
        );
        assert!(prefill.continued, "{protocol}");
        let metrics = gw.telemetry().encode();
        assert!(
            metrics.contains("sluice_continuations_total{reason=\"ok\"} 1"),
            "{protocol}: {metrics}"
        );
        // Usage summed: the continuation's 20 output tokens, and the stalled attempt's, which
        // never reported its own, estimated from the text it sent.
        let output: u64 = metrics
            .lines()
            .find(|l| l.starts_with("sluice_tokens_total") && l.contains("kind=\"output\""))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{protocol}: no output tokens in {metrics}"));
        let estimate = (words_sent_before_the_stall.len() as u64).div_ceil(4);
        assert_eq!(output, 20 + estimate, "{protocol}");
        // With continuation off the same stall ends, after what was sent, with the explicit
        // error event, and nobody is asked to continue.
        let off = CONTINUED.replace("gpt-4o", "off-gpt");
        let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", &off)).await;
        let events = sse(&r.body);
        assert_eq!(
            events.len(),
            22,
            "{protocol}: role, 20 tokens, the error: {events:?}"
        );
        let last: serde_json::Value = serde_json::from_str(&events[21].1).unwrap();
        assert_eq!(last["error"]["code"], "idle_timeout", "{protocol}");
        assert_eq!(b.stats().snapshot().totals.requests, 2, "{protocol}");
        wait_for(a.stats(), "the second stall cancelled upstream", |s| {
            s.totals.cancelled == 2
        })
        .await;
        gw.shutdown().await;
    }
}

#[tokio::test]
async fn a_stalled_anthropic_stream_is_continued_in_its_open_text_block() {
    let a = mock("tokens=30, interval_ms=2, stall_after=12:20000").await;
    let b = mock("tokens=30").await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"a\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\
         provider = \"anthropic\"\ntimeouts = {{ idle = \"300ms\" }}\n\
         [[upstream]]\nname = \"b\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\
         provider = \"anthropic\"\n\
         [[route]]\nmodels = [\"*\"]\ntargets = [{{ upstream = \"a\" }}]\n\
         fallbacks = [{{ upstream = \"b\" }}]\ncontinuation = true\n",
        a.url(),
        b.url()
    );
    let gw = Server::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let body = r#"{"model":"c","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"tell me"}]}"#;
    let text_of = |b: &[u8]| -> String {
        sse(b)
            .iter()
            .filter(|(e, _)| e.as_deref() == Some("content_block_delta"))
            .filter_map(|(_, d)| serde_json::from_str::<serde_json::Value>(d).ok())
            .filter_map(|v| v["delta"]["text"].as_str().map(str::to_string))
            .collect()
    };
    let full = text_of(
        &h1(b.addr(), request("POST", "/v1/messages", "", body))
            .await
            .body,
    );
    let r = h1(gw.addr(), request("POST", "/v1/messages", "", body)).await;
    let events = sse(&r.body);
    assert_eq!(text_of(&r.body), full, "{events:?}");
    let count = |name: &str| {
        events
            .iter()
            .filter(|(e, _)| e.as_deref() == Some(name))
            .count()
    };
    assert_eq!(count("message_start"), 1);
    assert_eq!(count("content_block_start"), 1, "one text block, continued");
    assert_eq!(count("message_stop"), 1);
    assert_eq!(count("error"), 0);
    wait_for(a.stats(), "the stall cancelled upstream", |s| {
        s.totals.cancelled == 1
    })
    .await;
    // `a` takes a prefill too, but it just stalled: the continuation went to `b`.
    assert_eq!(requests(&a), 1);
    assert_eq!(requests(&b), 2, "the direct run and the continuation");
    let cont = b.stats().snapshot().requests.last().unwrap().prefill;
    assert!(cont.is_some_and(|p| p.continued), "{cont:?}");
}

/// Stalls are continued within the same limit as cuts: a continuation target that stalls
/// too is continued once more, then the third stall ends the stream with the error event,
/// every stalled request cancelled upstream and the text sent a clean prefix of the answer.
#[tokio::test]
async fn stalls_are_continued_at_most_twice_per_request() {
    let a = mock("tokens=40, interval_ms=2, stall_after=21:20000").await;
    let b = mock("tokens=40, interval_ms=2, stall_after=5:20000").await;
    let plain = mock("tokens=40").await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"a\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\
         timeouts = {{ idle = \"300ms\" }}\n\
         [[upstream]]\nname = \"b\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\
         prefill = true\ntimeouts = {{ idle = \"300ms\" }}\n\
         [[route]]\nmodels = [\"*\"]\ntargets = [{{ upstream = \"a\" }}]\n\
         fallbacks = [{{ upstream = \"b\" }}]\ncontinuation = true\n",
        a.url(),
        b.url()
    );
    let gw = Server::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let full = openai_text(
        &h1(
            plain.addr(),
            request("POST", "/v1/chat/completions", "", CONTINUED),
        )
        .await
        .body,
    );
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", CONTINUED),
    )
    .await;
    let events = sse(&r.body);
    let last: serde_json::Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["error"]["code"], "idle_timeout", "{events:?}");
    let sent = openai_text(&r.body);
    assert!(
        full.starts_with(&sent) && sent.len() < full.len(),
        "a clean prefix: {sent:?} of {full:?}"
    );
    // `b` was asked twice, each time to go on from all the text sent so far.
    let snap = wait_for(b.stats(), "both continuations cancelled upstream", |s| {
        s.totals.cancelled == 2
    })
    .await;
    assert_eq!(snap.totals.requests, 2);
    let prefills: Vec<usize> = snap
        .requests
        .iter()
        .map(|r| r.prefill.expect("a prefill").bytes)
        .collect();
    assert!(prefills[0] < prefills[1], "{prefills:?}");
    assert!(
        prefills[1] < sent.len(),
        "{prefills:?}, {} sent",
        sent.len()
    );
    wait_for(a.stats(), "the first stall cancelled upstream", |s| {
        s.totals.cancelled == 1
    })
    .await;
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains("sluice_continuations_total{reason=\"ok\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_refused_prefill_gives_the_client_the_original_error() {
    let a = mock("tokens=12, abort_after=5, interval_ms=10").await;
    let b = mock("prefill=reject").await;
    let gw = continuing(&a, &b, "prefill = true").await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", CONTINUED),
    )
    .await;
    let events = sse(&r.body);
    let last: serde_json::Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["error"]["code"], "upstream_reset", "{events:?}");
    assert_eq!(requests(&b), 1, "the prefill was asked for, and refused");
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains("sluice_continuations_total{reason=\"failed\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_anthropic_stream_is_continued_in_its_open_text_block() {
    let a = mock("tokens=12, abort_after=6, interval_ms=10").await;
    let b = mock("tokens=12").await;
    let gw = continuing(&a, &b, "provider = \"anthropic\"").await;
    let body = r#"{"model":"c","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"tell me"}]}"#;
    let text_of = |b: &[u8]| -> String {
        sse(b)
            .iter()
            .filter(|(e, _)| e.as_deref() == Some("content_block_delta"))
            .filter_map(|(_, d)| serde_json::from_str::<serde_json::Value>(d).ok())
            .filter_map(|v| v["delta"]["text"].as_str().map(str::to_string))
            .collect()
    };
    let full = text_of(
        &h1(b.addr(), request("POST", "/v1/messages", "", body))
            .await
            .body,
    );
    let r = h1(gw.addr(), request("POST", "/v1/messages", "", body)).await;
    let events = sse(&r.body);
    assert_eq!(text_of(&r.body), full, "{events:?}");
    let count = |name: &str| {
        events
            .iter()
            .filter(|(e, _)| e.as_deref() == Some(name))
            .count()
    };
    assert_eq!(count("message_start"), 1);
    assert_eq!(count("message_stop"), 1);
    assert_eq!(count("error"), 0);
}

#[tokio::test]
async fn a_malformed_chunk_passes_through_without_killing_the_stream() {
    // Event 3 (after the first content) is not JSON: relayed as the upstream sent it.
    let a = mock("tokens=5, malformed=3").await;
    let gw = gateway_over(&[&a], "", "upstream = \"a\"").await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", STREAM),
    )
    .await;
    let events = sse(&r.body);
    assert_eq!(events.last().unwrap().1, "[DONE]", "{events:?}");
    assert!(
        events
            .iter()
            .any(|(_, d)| serde_json::from_str::<serde_json::Value>(d).is_err() && d != "[DONE]"),
        "the malformed event reached the client: {events:?}"
    );
    assert!(events.iter().all(|(_, d)| !d.contains("\"error\"")));
}

#[tokio::test]
async fn an_upstream_without_done_ends_cleanly_at_its_eof() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = s.read(&mut buf).await;
                let chunk = |t: &str| {
                    format!(
                        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n"
                    )
                };
                let body = format!(
                    "{}{}data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n",
                    chunk("hello"),
                    chunk(" world")
                );
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}"
                        )
                        .as_bytes(),
                    )
                    .await;
                let _ = s.shutdown().await;
            });
        }
    });
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n[[upstream]]\nname = \"raw\"\nbase_url = \"http://{addr}/v1\"\nprotocol = \"http1\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"raw\"\n"
    );
    let gw = Server::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", STREAM),
    )
    .await;
    let events = sse(&r.body);
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        events.iter().all(|(_, d)| !d.contains("error")),
        "{events:?}"
    );
    assert!(
        events.iter().all(|(_, d)| d != "[DONE]"),
        "never a synthetic [DONE]"
    );
}

#[tokio::test]
async fn a_500_once_is_retried_on_the_same_target() {
    let a = mock("fail_first=1, fail_with=500").await;
    let gw = gateway_over(&[&a], "", "upstream = \"a\"").await;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    assert_eq!(header(&r, "x-sluice-attempts"), "2");
    assert_eq!(requests(&a), 2);
}

#[tokio::test]
async fn a_maybe_processed_failure_is_retried_only_with_an_idempotency_key() {
    // The upstream read the request, then reset: it may have processed it.
    let a = mock("fail_first=1, fail_with=reset").await;
    let gw = gateway_over(&[&a], "", "upstream = \"a\"").await;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 502, "not retried without a key");
    assert_eq!(requests(&a), 1);
    let a = mock("fail_first=1, fail_with=reset").await;
    let gw = gateway_over(&[&a], "", "upstream = \"a\"").await;
    let mut req = request("POST", "/v1/chat/completions", "", CHAT);
    req.headers_mut()
        .insert("idempotency-key", "k-123".parse().unwrap());
    let r = h1(gw.addr(), req).await;
    assert_eq!(r.status, 200, "retried with one");
    assert_eq!(header(&r, "x-sluice-attempts"), "2");
}

#[tokio::test]
async fn context_length_goes_only_to_a_target_with_a_larger_window() {
    let a = mock("error=context_length").await;
    let small = mock("").await;
    let large = mock("").await;
    let gw = gateway_over(
        &[&a, &small, &large],
        "",
        "targets = [{ upstream = \"a\", context_window = 8000 }]\nfallbacks = [{ upstream = \"b\", context_window = 4000 }, { upstream = \"c\", context_window = 128000 }]",
    )
    .await;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    assert_eq!(header(&r, "x-sluice-upstream"), "c");
    assert_eq!(
        (requests(&a), requests(&small), requests(&large)),
        (1, 0, 1),
        "never resent to the same target, never to a smaller window"
    );
}

#[tokio::test]
async fn a_content_filter_refusal_is_returned_after_exactly_one_attempt() {
    let a = mock("error=content_filter").await;
    let b = mock("").await;
    let gw = gateway_over(&[&a, &b], "", PRIMARY_THEN_B).await;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 400);
    assert_eq!(header(&r, "x-sluice-attempts"), "1");
    assert_eq!((requests(&a), requests(&b)), (1, 0), "never routed around");
}
