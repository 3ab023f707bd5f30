//! Limits per key, per key × model and per route: requests (GCRA), tokens (reserved at
//! admission, reconciled with the real usage, partial on cancel) and concurrency. Refusals are
//! 429 in the client's format with `Retry-After` and `x-ratelimit-*`; successes carry the
//! same headers.

use std::time::Duration;

use tokio::time::Instant;

use crate::support::*;
use crate::{bearer, gateway, hash, post, CHAT};

fn route(extra: &str) -> String {
    format!("[[route]]\nname = \"chat\"\nmodels = [\"*\"]\nupstream = \"mock\"\n{extra}\n")
}

fn key(id: &str, secret: &str, extra: &str) -> String {
    format!(
        "[[key]]\nid = \"{id}\"\nhash = \"{}\"\n{extra}\n",
        hash(secret)
    )
}

fn header<'a>(r: &'a Resp, name: &str) -> &'a str {
    r.headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", r.headers))
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn a_request_limit_counts_down_in_headers_then_refuses_with_retry_after() {
    let mock = mock("").await;
    let keys = key(
        "limited",
        "sk-limited",
        "requests = { limit = 3, per = \"1m\" }",
    );
    let gw = gateway(&mock, &route(""), &keys).await;
    for left in ["2", "1", "0"] {
        let r = h1(
            gw.addr(),
            post("/v1/chat/completions", bearer("sk-limited"), CHAT),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(header(&r, "x-ratelimit-limit-requests"), "3");
        assert_eq!(header(&r, "x-ratelimit-remaining-requests"), left);
        assert!(header(&r, "x-ratelimit-reset-requests").ends_with('s'));
    }
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-limited"), CHAT),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "rate_limited");
    assert_eq!(r.json()["error"]["type"], "rate_limit_exceeded");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("key `limited`") && msg.contains("3 requests per 1m"),
        "{msg}"
    );
    // One request comes back every 20 s.
    let retry: u64 = header(&r, "retry-after").parse().unwrap();
    assert!((19..=20).contains(&retry), "{retry}");
    assert_eq!(header(&r, "x-ratelimit-remaining-requests"), "0");
    // Anthropic clients get Anthropic's shape.
    let body = r#"{"model":"claude","max_tokens":10,"messages":[]}"#;
    let r = h1(
        gw.addr(),
        post("/v1/messages", Some(("x-api-key", "sk-limited")), body),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(mock.stats().snapshot().requests.len(), 3);
    let metrics = gw.telemetry().encode();
    assert!(metrics.contains("sluice_key_refusals_total{reason=\"rate_limited\"} 2"));
    assert!(metrics.contains("sluice_request_end_total{reason=\"limited\"} 2"));
}

#[tokio::test]
async fn route_limits_hold_for_requests_without_keys_and_key_model_limits_per_model() {
    let mock = mock("").await;
    let routes = "[[route]]\nname = \"free\"\nmodels = [\"free-*\"]\nupstream = \"open\"\nkeys = \"off\"\nlimits = { requests = { limit = 2, per = \"1h\" } }\n\n[[route]]\nname = \"chat\"\nmodels = [\"*\"]\nupstream = \"mock\"\n";
    let keys = key(
        "k",
        "sk-alpha",
        "[[key.model_limits]]\nmodels = [\"gpt-4o-mini\"]\nrequests = { limit = 1, per = \"1h\" }",
    );
    let gw = gateway(&mock, routes, &keys).await;
    let free = r#"{"model":"free-1","messages":[]}"#;
    for _ in 0..2 {
        let r = h1(gw.addr(), post("/v1/chat/completions", None, free)).await;
        assert_eq!(r.status, 200);
    }
    let r = h1(gw.addr(), post("/v1/chat/completions", None, free)).await;
    assert_eq!(r.status, 429);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("route `free`"), "{msg}");

    let mini = r#"{"model":"gpt-4o-mini","messages":[]}"#;
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-alpha"), mini),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(header(&r, "x-ratelimit-remaining-requests"), "0");
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-alpha"), mini),
    )
    .await;
    assert_eq!(r.status, 429);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("on models gpt-4o-mini"), "{msg}");
    // Another model of the same key is not held by that entry.
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-alpha"), CHAT),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(!r.headers.contains_key("x-ratelimit-limit-requests"));
}

/// Tokens used so far by `id`'s own token limit, from the admin view.
async fn tokens_used(gw: &sluice::Server, id: &str) -> u64 {
    let r = h1(
        gw.admin_addr(),
        request("GET", &format!("/admin/keys/{id}"), "", ""),
    )
    .await;
    assert_eq!(r.status, 200);
    r.json()["usage"]["tokens"]["used"].as_u64().unwrap()
}

#[tokio::test]
async fn tokens_are_reserved_from_max_tokens_and_reconciled_with_the_usage() {
    let mock = mock("").await;
    let keys = key("t", "sk-alpha", "tokens = { limit = 1000, per = \"1h\" }");
    let gw = gateway(&mock, &route(""), &keys).await;
    let body = |max: u32| {
        format!(
            r#"{{"model":"gpt-4o","max_tokens":{max},"messages":[{{"role":"user","content":"hi"}}]}}"#
        )
    };
    let mut used = 0;
    // Each reserves 900 of 1000: only reconciliation with the real usage lets the next pass.
    for _ in 0..3 {
        let r = h1(
            gw.addr(),
            post("/v1/chat/completions", bearer("sk-alpha"), &body(900)),
        )
        .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let u = &r.json()["usage"];
        used += u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap();
        // The header is read at admission: the reservation is still in it.
        let remaining: u64 = header(&r, "x-ratelimit-remaining-tokens").parse().unwrap();
        assert!(remaining <= 100, "{remaining}");
    }
    let now = tokens_used(&gw, "t").await;
    assert!(now.abs_diff(used) <= 1, "used {now}, usage said {used}");
    // Asking for more than is left: 429, and nothing was taken.
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-alpha"), &body(990)),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "tokens_limited");
    assert!(header(&r, "retry-after").parse::<u64>().unwrap() >= 1);
    assert!(tokens_used(&gw, "t").await.abs_diff(used) <= 1);
    // A max_tokens above the whole limit reserves the limit: it waits for a full bucket
    // instead of never passing.
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-alpha"), &body(5000)),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "tokens_limited");
}

#[tokio::test]
async fn a_cancelled_stream_is_charged_its_partial_usage_not_its_reservation() {
    let mock = mock("").await;
    let keys = key("t", "sk-alpha", "tokens = { limit = 100000, per = \"1h\" }");
    let gw = gateway(&mock, &route(""), &keys).await;
    let body = r#"{"model":"claude","max_tokens":5000,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let send = h2_connect(gw.addr()).await;
    let mut req = post("/v1/messages", Some(("x-api-key", "sk-alpha")), body);
    req.headers_mut()
        .insert("x-mock", "tokens=200, interval_ms=10".parse().unwrap());
    let resp = h2_send(&send, req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let (_, mut stream) = resp.into_parts();
    // Read a few events, then leave.
    let mut got = 0;
    while got < 600 {
        let c = stream.data().await.unwrap().unwrap();
        let _ = stream.flow_control().release_capacity(c.len());
        got += c.len();
    }
    let reserved = tokens_used(&gw, "t").await;
    // (A 100,000-per-hour bucket refills about 28 tokens a second.)
    assert!(
        reserved >= 4900,
        "the reservation holds while it runs: {reserved}"
    );
    drop(stream);
    drop(send);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = tokens_used(&gw, "t").await;
        if now < 4000 {
            // message_start's input tokens and the output seen so far.
            assert!(now > 0, "partial usage is charged");
            break;
        }
        assert!(Instant::now() < deadline, "still {now} tokens held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_concurrency_cap_refuses_while_a_stream_runs_and_frees_when_it_ends() {
    let mock = mock("").await;
    let keys = key("c", "sk-conc", "concurrency = 1");
    let gw = gateway(&mock, &route(""), &keys).await;
    let stream = r#"{"model":"gpt-4o","stream":true,"messages":[]}"#;
    let send = h2_connect(gw.addr()).await;
    let mut req = post("/v1/chat/completions", bearer("sk-conc"), stream);
    req.headers_mut()
        .insert("x-mock", "tokens=500, interval_ms=10".parse().unwrap());
    let resp = h2_send(&send, req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-ratelimit-limit-concurrency"], "1");
    assert_eq!(resp.headers()["x-ratelimit-remaining-concurrency"], "0");
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-conc"), CHAT),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "concurrency_limited");
    drop(resp);
    drop(send);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = h1(
            gw.addr(),
            post("/v1/chat/completions", bearer("sk-conc"), CHAT),
        )
        .await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 429);
        assert!(Instant::now() < deadline, "the slot was never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_token_limit_under_concurrent_load_is_overshot_by_at_most_one_reservation() {
    let mock = mock("").await;
    let keys = key("t", "sk-alpha", "tokens = { limit = 3000, per = \"1h\" }");
    let gw = gateway(&mock, &route(""), &keys).await;
    let body = r#"{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"count to a hundred"}]}"#;
    let reservation = sluice_gateway::admit::reservation(100, body.len());
    // Eight clients at once, each until its first refusal.
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let addr = gw.addr();
            tokio::spawn(async move {
                let mut used = 0;
                loop {
                    let mut req = post("/v1/chat/completions", bearer("sk-alpha"), body);
                    req.headers_mut()
                        .insert("x-mock", "tokens=100".parse().unwrap());
                    let r = h1(addr, req).await;
                    if r.status == 429 {
                        return used;
                    }
                    assert_eq!(r.status, 200);
                    let u = &r.json()["usage"];
                    used += u["prompt_tokens"].as_u64().unwrap()
                        + u["completion_tokens"].as_u64().unwrap();
                }
            })
        })
        .collect();
    let mut total = 0;
    for c in clients {
        total += c.await.unwrap();
    }
    eprintln!("admitted {total} tokens against 3000 (reservation {reservation})");
    // The bucket refills under a token a second; a second of slack.
    assert!(total <= 3000 + reservation + 1, "{total}");
    assert!(total + reservation >= 3000, "{total}");
}

/// Content deltas and the final error event of an OpenAI stream's body.
fn stream_parts(body: &[u8]) -> (usize, Option<serde_json::Value>) {
    let text = String::from_utf8_lossy(body);
    let mut deltas = 0;
    let mut error = None;
    for data in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
            continue;
        };
        if v.get("error").is_some() {
            error = Some(v);
        } else if v["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
        {
            deltas += 1;
        }
    }
    (deltas, error)
}

#[tokio::test]
async fn a_stream_past_a_cut_streams_token_limit_is_cut_with_an_error_event() {
    let mock = mock("").await;
    let keys = format!(
        "{}{}",
        key(
            "capped",
            "sk-capped",
            "tokens = { limit = 1000, per = \"1h\", cut_streams = true }"
        ),
        key(
            "plain",
            "sk-plain",
            "tokens = { limit = 1000, per = \"1h\" }"
        ),
    );
    let gw = gateway(&mock, &route(""), &keys).await;
    let body = r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    // 8 bytes of text a token: the cap counts about 2 tokens per delta.
    let knobs = "tokens=2000, interval_ms=1, token_bytes=8";
    let mut req = post("/v1/chat/completions", bearer("sk-capped"), body);
    req.headers_mut().insert("x-mock", knobs.parse().unwrap());
    let r = h1(gw.addr(), req).await;
    assert_eq!(r.status, 200);
    let (deltas, error) = stream_parts(&r.body);
    let error = error.unwrap_or_else(|| {
        panic!(
            "no error event after {deltas} deltas: {}",
            String::from_utf8_lossy(&r.body[r.body.len().saturating_sub(300)..])
        )
    });
    assert_eq!(error["error"]["code"], "token_limit_exceeded", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1000 tokens"),
        "{error}"
    );
    // (1000 - the input estimate) / 2 tokens a delta: the cut comes near 490 deltas, never
    // before the cap and at most an event after it.
    assert!(
        (450..=500).contains(&deltas),
        "{deltas} deltas before the cut"
    );
    // The upstream was cancelled, not read to its end.
    let snap = wait_for(mock.stats(), "the capped stream's cancel", |s| {
        s.requests
            .last()
            .is_some_and(|r| matches!(r.outcome, sluice_mock::Outcome::Cancelled(_)))
    })
    .await;
    assert_eq!(snap.requests.len(), 1);
    // The key is charged what it got (the estimate, no usage came): about the cap.
    let used = tokens_used(&gw, "capped").await;
    assert!((950..=1100).contains(&used), "charged {used}");

    // Without `cut_streams` the same stream runs to its end: the cut is opt-in.
    let mut req = post("/v1/chat/completions", bearer("sk-plain"), body);
    req.headers_mut().insert("x-mock", knobs.parse().unwrap());
    let r = h1(gw.addr(), req).await;
    assert_eq!(r.status, 200);
    let (deltas, error) = stream_parts(&r.body);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(deltas, 2000);
    assert!(String::from_utf8_lossy(&r.body).ends_with("data: [DONE]\n\n"));
}

#[test]
fn cut_streams_is_refused_on_a_requests_limit() {
    let text = "[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n[[route]]\nname = \"r\"\nmodels = [\"*\"]\nupstream = \"u\"\n\n[[key]]\nid = \"k\"\nhash = \"sha256:0000000000000000000000000000000000000000000000000000000000000000\"\nrequests = { limit = 10, per = \"1m\", cut_streams = true }\n";
    let e = sluice_gateway::config::Config::from_toml(text, &|_| None).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("requests.cut_streams") && msg.contains("only a tokens limit"),
        "{msg}"
    );
}
