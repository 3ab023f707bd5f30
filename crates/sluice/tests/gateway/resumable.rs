//! Resumable streams over real sockets: a client cut at a random event reconnects with
//! `Last-Event-ID` and gets every remaining event once, in order, byte for byte what an uncut
//! run gets, from one upstream generation; a foreign key and an unknown id get 404, an
//! expired one 410; the caps turn new streams into ordinary ones and say so; a stream nobody
//! reads for `keep` is cancelled upstream.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use sluice::Server;
use sluice_gateway::config::Config;
use sluice_mock::{MockServer, Outcome};

use crate::support::*;

const KEY_A: &str = "sk-resume-a";
const KEY_B: &str = "sk-resume-b";

fn hash(key: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Route `r*` resumable (`keep` given), route `plain*` not; keys a and b.
pub(crate) fn config_text(mock_url: &str, keep: &str, server: &str, extra: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
access_log = "off"
{server}

[[upstream]]
name = "mock"
base_url = "{mock_url}/v1"
protocol = "h2c"

[[route]]
name = "resumable"
models = ["r*"]
upstream = "mock"
retry = {{ attempts = 1 }}
resumable = {{ keep = "{keep}", max_bytes = "4MiB" }}

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
{extra}
"#,
        a = hash(KEY_A),
        b = hash(KEY_B),
    )
}

async fn start(mock: &MockServer, keep: &str, server: &str) -> Server {
    let text = config_text(&mock.url(), keep, server, "");
    let cfg = Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Server::start(cfg).await.unwrap()
}

/// A streaming chat request with key `key`, the mock's `knobs`, and `Last-Event-ID` if given.
pub(crate) async fn open(
    addr: SocketAddr,
    key: &str,
    model: &str,
    knobs: &str,
    last: Option<&str>,
) -> http::Response<hyper::body::Incoming> {
    let body = format!(r#"{{"model":"{model}","stream":true}}"#);
    let mut req = request("POST", "/v1/chat/completions", knobs, &body);
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    if let Some(l) = last {
        req.headers_mut()
            .insert("last-event-id", l.parse().unwrap());
    }
    let mut send = h1_connect(addr).await;
    h1_send(&mut send, req).await
}

/// Complete SSE events (each with its blank line) at the front of `buf`, and the rest.
pub(crate) fn split_events(buf: &[u8]) -> (Vec<Vec<u8>>, usize) {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < buf.len() {
        if buf[i] == b'\n' && buf[i + 1] == b'\n' {
            out.push(buf[start..i + 2].to_vec());
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    (out, start)
}

/// Reads events until `stop_after` of them (then drops the connection) or the end.
pub(crate) async fn read_events(
    resp: http::Response<hyper::body::Incoming>,
    stop_after: Option<usize>,
) -> Vec<Vec<u8>> {
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    loop {
        if let Some(n) = stop_after {
            let (evs, _) = split_events(&buf);
            if evs.len() >= n {
                // What an SSE client keeps: whole events; a partial one is thrown away.
                return evs.into_iter().take(n).collect();
            }
        }
        match body.frame().await {
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    buf.extend_from_slice(&d);
                }
            }
            Some(Err(e)) => panic!("body error: {e}"),
            None => break,
        }
    }
    let (evs, rest) = split_events(&buf);
    assert_eq!(
        rest,
        buf.len(),
        "a partial event at the end: {}",
        String::from_utf8_lossy(&buf)
    );
    evs.into_iter().filter(|e| !e.starts_with(b":")).collect()
}

/// The `id:` of an event.
pub(crate) fn event_id(ev: &[u8]) -> String {
    let s = std::str::from_utf8(ev).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("id: "))
        .unwrap_or_else(|| panic!("no id in {s:?}"))
        .to_string()
}

/// The events with what differs between two runs of the same request replaced: the stream
/// id, the mock's completion id and its `created` time.
pub(crate) fn normalized(events: &[Vec<u8>], stream_id: &str) -> Vec<String> {
    let first = String::from_utf8(events[0].clone()).unwrap();
    let data: serde_json::Value = first
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .unwrap();
    let cid = data["id"].as_str().unwrap().to_string();
    let created = format!("\"created\":{}", data["created"]);
    events
        .iter()
        .map(|e| {
            String::from_utf8(e.clone())
                .unwrap()
                .replace(stream_id, "STREAM")
                .replace(&cid, "CID")
                .replace(&created, "\"created\":0")
        })
        .collect()
}

fn stream_id(h: &HeaderMap) -> String {
    h.get("x-sluice-stream-id")
        .unwrap_or_else(|| panic!("no x-sluice-stream-id in {h:?}"))
        .to_str()
        .unwrap()
        .to_string()
}

/// 100 trials, half at full speed and half paced: a client cut at a random event reconnects
/// with the last id it has and gets the rest, each event once, in order, equal byte for byte
/// to an uncut run; one upstream request each.
#[tokio::test]
async fn a_cut_client_resumes_every_remaining_event_exactly_once() {
    let mock = mock("").await;
    let gw = start(&mock, "30s", "").await;
    let addr = gw.addr();
    for (knobs, trials) in [("tokens=120", 50), ("tokens=40, interval_ms=2", 50)] {
        let resp = open(addr, KEY_A, "r1", knobs, None).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["x-sluice-resumable"], "on");
        let sid = stream_id(resp.headers());
        let whole = read_events(resp, None).await;
        assert!(whole.len() > 20, "{} events", whole.len());
        let expected = normalized(&whole, &sid);
        for (i, e) in whole.iter().enumerate() {
            assert_eq!(event_id(e), format!("{sid}-{i}"));
        }
        for trial in 0..trials {
            let before = mock.stats().snapshot().requests.len();
            let cut_at = fastrand::usize(1..whole.len());
            let resp = open(addr, KEY_A, "r1", knobs, None).await;
            let sid = stream_id(resp.headers());
            let mut got = read_events(resp, Some(cut_at)).await;
            let last = event_id(got.last().unwrap());
            let resp = open(addr, KEY_A, "r1", knobs, Some(&last)).await;
            assert_eq!(resp.status(), StatusCode::OK, "trial {trial} ({knobs})");
            assert_eq!(stream_id(resp.headers()), sid);
            got.extend(read_events(resp, None).await);
            assert_eq!(
                normalized(&got, &sid),
                expected,
                "trial {trial} ({knobs}): cut after {cut_at} events"
            );
            let snap = mock.stats().snapshot();
            assert_eq!(snap.requests.len(), before + 1, "one upstream generation");
        }
    }
    let snap = mock.stats().snapshot();
    assert!(snap
        .requests
        .iter()
        .all(|r| !matches!(r.outcome, Outcome::Cancelled(_))));
}

/// Another key asking for a stream's events gets 404, as does an id never made; the owner
/// still reads it after that.
#[tokio::test]
async fn only_the_streams_key_reads_it() {
    let mock = mock("").await;
    let gw = start(&mock, "30s", "").await;
    let addr = gw.addr();
    let resp = open(addr, KEY_A, "r1", "tokens=20", None).await;
    let sid = stream_id(resp.headers());
    let evs = read_events(resp, Some(3)).await;
    let last = event_id(&evs[2]);
    let foreign = open(addr, KEY_B, "r1", "", Some(&last)).await;
    assert_eq!(foreign.status(), StatusCode::NOT_FOUND);
    let body = foreign.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "stream_not_found", "{v}");
    for bad in [
        format!("{}-1", "0".repeat(32)),
        "not-an-id".to_string(),
        format!("{sid}-999999"),
    ] {
        let r = open(addr, KEY_A, "r1", "", Some(&bad)).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{bad}");
    }
    let own = open(addr, KEY_A, "r1", "", Some(&last)).await;
    assert_eq!(own.status(), StatusCode::OK);
    let rest = read_events(own, None).await;
    assert_eq!(event_id(&rest[0]), format!("{sid}-3"));
}

/// A log kept past its `keep` is gone: 410 in the client's format. A stream nobody reads for
/// `keep` is cancelled upstream, and its log ends with an error event.
#[tokio::test]
async fn expired_logs_are_gone_and_abandoned_generations_are_cancelled() {
    let mock = mock("").await;
    let gw = start(&mock, "300ms", "").await;
    let addr = gw.addr();
    let resp = open(addr, KEY_A, "r1", "tokens=5", None).await;
    let evs = read_events(resp, None).await;
    let last = event_id(&evs[1]);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let r = open(addr, KEY_A, "r1", "", Some(&last)).await;
    assert_eq!(r.status(), StatusCode::GONE);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "stream_expired", "{v}");
    // Another key is not told the stream ever existed.
    let r = open(addr, KEY_B, "r1", "", Some(&last)).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // Slow: 100 tokens 50 ms apart; the client leaves after two events.
    let resp = open(addr, KEY_A, "r1", "tokens=100, interval_ms=50", None).await;
    let evs = read_events(resp, Some(2)).await;
    let last = event_id(&evs[1]);
    let snap = wait_for(mock.stats(), "cancel after keep", |s| {
        s.requests
            .last()
            .is_some_and(|r| matches!(r.outcome, Outcome::Cancelled(_)))
    })
    .await;
    assert_eq!(snap.requests.len(), 2);
    // Within the log's own keep (from the cancel), the reconnect reads up to the error event.
    let r = open(addr, KEY_A, "r1", "", Some(&last)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let rest = read_events(r, None).await;
    let end = String::from_utf8(rest.last().unwrap().clone()).unwrap();
    assert!(end.contains("stream_abandoned"), "{end}");
}

/// Past `resumable_streams` a new stream is an ordinary one, and says so; a route without
/// `resumable` has no ids unless the request asks (`x-sluice-resumable: on`), and a request
/// may turn it off.
#[tokio::test]
async fn caps_and_the_request_header_decide_resumability() {
    let mock = mock("").await;
    let gw = start(&mock, "30s", "resumable_streams = 1").await;
    let addr = gw.addr();
    let first = open(addr, KEY_A, "r1", "tokens=3", None).await;
    assert_eq!(first.headers()["x-sluice-resumable"], "on");
    let evs = read_events(first, None).await;
    assert!(evs.iter().all(|e| e.starts_with(b"id: ")));
    // The first stream's log is kept for 30 s: no room for another.
    let second = open(addr, KEY_A, "r1", "tokens=3", None).await;
    assert_eq!(
        second.headers()["x-sluice-resumable"],
        "off; reason=capacity"
    );
    assert!(second.headers().get("x-sluice-stream-id").is_none());
    let evs = read_events(second, None).await;
    assert!(!evs.is_empty());
    assert!(evs.iter().all(|e| !e.starts_with(b"id: ")));

    let plain = open(addr, KEY_A, "plain1", "tokens=3", None).await;
    assert!(plain.headers().get("x-sluice-resumable").is_none());
    let evs = read_events(plain, None).await;
    assert!(evs.iter().all(|e| !e.starts_with(b"id: ")));
}

/// A request's `x-sluice-resumable: on` on a plain route, and `off` on a resumable one.
#[tokio::test]
async fn a_request_opts_in_or_out() {
    let mock = mock("").await;
    let gw = start(&mock, "30s", "").await;
    let addr = gw.addr();
    let send = |model: &'static str, v: &'static str| async move {
        let mut req = request(
            "POST",
            "/v1/chat/completions",
            "tokens=3",
            &format!(r#"{{"model":"{model}","stream":true}}"#),
        );
        let h = req.headers_mut();
        h.insert("authorization", format!("Bearer {KEY_A}").parse().unwrap());
        h.insert("x-sluice-resumable", v.parse().unwrap());
        let mut s = h1_connect(addr).await;
        h1_send(&mut s, req).await
    };
    let on = send("plain1", "on").await;
    assert_eq!(on.headers()["x-sluice-resumable"], "on");
    assert!(read_events(on, None)
        .await
        .iter()
        .all(|e| e.starts_with(b"id: ")));
    let off = send("r1", "off").await;
    assert!(off.headers().get("x-sluice-resumable").is_none());
    assert!(read_events(off, None)
        .await
        .iter()
        .all(|e| !e.starts_with(b"id: ")));
    let _ = Bytes::new();
}

/// A request with `key`, `x-mock` knobs, and a JSON body.
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: &str,
    knobs: &str,
    body: &str,
) -> (StatusCode, HeaderMap, Bytes) {
    let mut req = request(method, path, knobs, body);
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    let r = h1(addr, req).await;
    (r.status, r.headers, r.body)
}

/// `POST /v1/responses` with `background: true` answers at once with an id; polling it ends
/// with the completed response; streaming it gives every event, and from `starting_after`
/// the ones after; another key gets 404; a cancel stops the upstream generation.
#[tokio::test]
async fn background_responses_are_polled_streamed_and_cancelled() {
    let mock = mock("").await;
    let gw = start(&mock, "30s", "").await;
    let addr = gw.addr();
    let body = r#"{"model":"r1","input":"hi","background":true}"#;
    let t0 = tokio::time::Instant::now();
    let (status, _, b) = call(
        addr,
        "POST",
        "/v1/responses",
        KEY_A,
        "tokens=30, interval_ms=10",
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{b:?}");
    // At once: well before the 300 ms the generation takes.
    assert!(
        t0.elapsed() < Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    let id = v["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("resp_"), "{v}");
    assert_eq!(v["status"], "queued");

    let path = format!("/v1/responses/{id}");
    let (s, _, _) = call(addr, "GET", &path, KEY_B, "", "").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "a foreign key");
    let mut polls = 0;
    let done = loop {
        let (s, _, b) = call(addr, "GET", &path, KEY_A, "", "").await;
        assert_eq!(s, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        polls += 1;
        match v["status"].as_str().unwrap() {
            "completed" => break v,
            "queued" | "in_progress" => {}
            other => panic!("status {other}: {v}"),
        }
        assert!(polls < 500, "not done after 5 s: {v}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(polls > 1, "the first poll came before the end");
    assert_eq!(done["id"], id.as_str());
    assert!(!done["output"].as_array().unwrap().is_empty(), "{done}");

    // The whole stream, then the events after sequence number 5.
    let (s, h, b) = call(addr, "GET", &format!("{path}?stream=true"), KEY_A, "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h["content-type"], "text/event-stream");
    let all = sse(&b);
    assert_eq!(all.first().unwrap().0.as_deref(), Some("response.created"));
    assert_eq!(all.last().unwrap().0.as_deref(), Some("response.completed"));
    let (_, _, b) = call(
        addr,
        "GET",
        &format!("{path}?stream=true&starting_after=5"),
        KEY_A,
        "",
        "",
    )
    .await;
    let rest = sse(&b);
    assert_eq!(rest.len(), all.len() - 6);
    let first: serde_json::Value = serde_json::from_str(&rest[0].1).unwrap();
    assert_eq!(first["sequence_number"], 6);
    assert_eq!(rest, all[6..].to_vec());
    assert_eq!(mock.stats().snapshot().requests.len(), 1);

    // Cancelled mid-generation: the upstream sees the cancel.
    let (_, _, b) = call(
        addr,
        "POST",
        "/v1/responses",
        KEY_A,
        "tokens=500, interval_ms=20",
        body,
    )
    .await;
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    let id = v["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (s, _, _) = call(
        addr,
        "POST",
        &format!("/v1/responses/{id}/cancel"),
        KEY_B,
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "a foreign key cannot cancel");
    let (s, _, b) = call(
        addr,
        "POST",
        &format!("/v1/responses/{id}/cancel"),
        KEY_A,
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["status"], "cancelled", "{v}");
    wait_for(mock.stats(), "the cancel upstream", |s| {
        s.requests
            .last()
            .is_some_and(|r| matches!(r.outcome, Outcome::Cancelled(_)))
    })
    .await;
    let (_, _, b) = call(addr, "GET", &format!("/v1/responses/{id}"), KEY_A, "", "").await;
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["status"], "cancelled", "{v}");
}

/// VmRSS of this process, in KiB.
fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The memory benchmark of docs/BENCHMARKS.md: 1,000 detached streams, each log at its
/// `max_bytes` (256 KiB) bound. Run with
/// `cargo test -p sluice --test gateway resumable::thousand -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: 1,000 streams, about 30 s"]
async fn thousand_detached_streams_at_their_bound() {
    const STREAMS: usize = 1000;
    const MAX: u64 = 256 << 10;
    let mock = mock("").await;
    let text = config_text(
        &mock.url(),
        "10m",
        "resumable_log_bytes = \"1GiB\"\nclient_resets = { per_ip = 100000 }",
        "",
    )
    .replace("max_bytes = \"4MiB\"", "max_bytes = \"256KiB\"");
    let cfg = Config::from_toml(&text, &|_| None).unwrap();
    let gw = Server::start(cfg).await.unwrap();
    let addr = gw.addr();
    // Warm up the allocator and the connection paths with one stream.
    let r = open(addr, KEY_A, "r1", "tokens=10", None).await;
    read_events(r, None).await;
    let before = rss_kib();
    // In waves of 50 (the upstream lane's streams are the limit, not the logs).
    for _ in 0..STREAMS / 50 {
        let mut tasks = Vec::new();
        for _ in 0..50 {
            tasks.push(tokio::spawn(async move {
                // About 300 KB of events: past the bound, so each log holds its 256 KiB.
                let r = open(addr, KEY_A, "r1", "tokens=200, token_bytes=1400", None).await;
                read_events(r, Some(1)).await;
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }
    // Every generation has run to its end into its log.
    for i in 0.. {
        let s = mock.stats().snapshot();
        let done = s
            .requests
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Completed))
            .count();
        if done == STREAMS + 1 {
            break;
        }
        assert!(i < 600, "{done} of {} streams done after 60 s", STREAMS + 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib();
    let grew = after.saturating_sub(before);
    let logs = STREAMS as u64 * MAX / 1024;
    println!(
        "1000 detached streams at 256 KiB: RSS {before} -> {after} KiB (+{grew} KiB; logs hold \
         {logs} KiB; {:.2} KiB per stream beyond its log)",
        (grew as f64 - logs as f64) / STREAMS as f64
    );
    // The budget stated in docs/BENCHMARKS.md: the logs plus 25 %.
    assert!(grew < logs * 5 / 4, "+{grew} KiB for {logs} KiB of logs");
}

/// A cut and resumed stream is on the books once with its tokens: the generation's request
/// carries the usage, the reconnect's own line none.
#[tokio::test]
async fn a_resumed_streams_usage_is_recorded_once() {
    let dir = std::env::temp_dir().join(format!("sluice-resume-ledger-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("ledger.db");
    let _ = std::fs::remove_file(&db);
    let mock = mock("").await;
    let ledger = format!(
        "[ledger]\nflush_interval = \"100ms\"\nsink = {{ kind = \"sqlite\", path = \"{}\" }}",
        db.display()
    );
    let text = config_text(&mock.url(), "30s", "", &ledger);
    let cfg = Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let gw = Server::start(cfg).await.unwrap();
    let addr = gw.addr();
    let resp = open(addr, KEY_A, "r1", "tokens=40, interval_ms=2", None).await;
    let first_id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    let got = read_events(resp, Some(5)).await;
    let resp = open(addr, KEY_A, "r1", "", Some(&event_id(&got[4]))).await;
    let resume_id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    let rest = read_events(resp, None).await;
    assert!(rest.last().unwrap().ends_with(b"data: [DONE]\n\n"));
    gw.shutdown().await;
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut q = conn
        .prepare(
            "SELECT request_id, input_tokens, output_tokens, cost_micros, end_reason \
             FROM sluice_requests ORDER BY ts_us",
        )
        .unwrap();
    let rows: Vec<(String, i64, i64, Option<i64>, String)> = q
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let generation = rows.iter().find(|r| r.0 == first_id).expect("its line");
    let resumed = rows.iter().find(|r| r.0 == resume_id).expect("its line");
    assert!(generation.2 >= 40, "{generation:?}");
    assert_eq!(generation.4, "completed", "{generation:?}");
    assert_eq!((resumed.1, resumed.2), (0, 0), "{resumed:?}");
    assert!(resumed.3.unwrap_or(0) == 0, "{resumed:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

use crate::cache::redis_support;

/// Two instances on one real `redis-server`, 100 trials (half at full speed, half paced): a
/// client cut at a random event on the first reconnects to the
/// second with `Last-Event-ID` and gets the rest, each event once, byte for byte an uncut
/// run's, from the one upstream generation the first instance runs; another key gets 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server on this machine (see crates/sluice/build.rs)"
)]
async fn a_reconnect_to_another_instance_is_served_from_redis() {
    let redis = redis_support::RedisServer::start().await;
    let mock = mock("").await;
    let state = format!("[state]\nredis = \"{}\"\n", redis.url());
    let start_one = || async {
        let text = config_text(&mock.url(), "30s", "", &state);
        let cfg = Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"));
        Server::start(cfg).await.unwrap()
    };
    let one = start_one().await;
    let two = start_one().await;
    for (knobs, trials) in [("tokens=60", 50), ("tokens=30, interval_ms=3", 50)] {
        let resp = open(one.addr(), KEY_A, "r1", knobs, None).await;
        let sid = stream_id(resp.headers());
        let whole = read_events(resp, None).await;
        let expected = normalized(&whole, &sid);
        for trial in 0..trials {
            let before = mock.stats().snapshot().requests.len();
            let cut_at = fastrand::usize(1..whole.len());
            let resp = open(one.addr(), KEY_A, "r1", knobs, None).await;
            let sid = stream_id(resp.headers());
            let mut got = read_events(resp, Some(cut_at)).await;
            let last = event_id(got.last().unwrap());
            if trial == 0 {
                let foreign = open(two.addr(), KEY_B, "r1", "", Some(&last)).await;
                assert_eq!(foreign.status(), StatusCode::NOT_FOUND, "a foreign key");
            }
            let resp = open(two.addr(), KEY_A, "r1", knobs, Some(&last)).await;
            assert_eq!(resp.status(), StatusCode::OK, "trial {trial} ({knobs})");
            assert_eq!(stream_id(resp.headers()), sid);
            got.extend(read_events(resp, None).await);
            assert_eq!(
                normalized(&got, &sid),
                expected,
                "trial {trial} ({knobs}): cut after {cut_at} events, resumed on the other instance"
            );
            assert_eq!(
                mock.stats().snapshot().requests.len(),
                before + 1,
                "one upstream generation"
            );
        }
    }
}

/// A detached generation keeps its key's concurrency place until it ends: a key allowed one
/// stream at a time is refused while its cut stream runs on, and served once it ended.
#[tokio::test]
async fn a_detached_generation_holds_its_keys_concurrency() {
    let mock = mock("").await;
    let extra = format!(
        "\n[[key]]\nid = \"c\"\nhash = \"{}\"\nconcurrency = 1\n",
        hash("sk-resume-c")
    );
    let text = config_text(&mock.url(), "30s", "", &extra);
    let cfg = Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let gw = Server::start(cfg).await.unwrap();
    let addr = gw.addr();
    // About 600 ms of generation; the client leaves after two events.
    let resp = open(addr, "sk-resume-c", "r1", "tokens=30, interval_ms=20", None).await;
    let evs = read_events(resp, Some(2)).await;
    let last = event_id(&evs[1]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = open(addr, "sk-resume-c", "r1", "tokens=2", None).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // The reconnect is not a new request: it is served while the place is held.
    let resumed = open(addr, "sk-resume-c", "r1", "", Some(&last)).await;
    assert_eq!(resumed.status(), StatusCode::OK);
    let rest = read_events(resumed, None).await;
    assert!(rest.last().unwrap().ends_with(b"data: [DONE]\n\n"));
    // Ended: the place is free again.
    let mut served = false;
    for _ in 0..50 {
        let r = open(addr, "sk-resume-c", "r1", "tokens=2", None).await;
        if r.status() == StatusCode::OK {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        served,
        "the key's place came back when the generation ended"
    );
}

/// A `Last-Event-ID` on a route whose streams are not resumable (and no `x-sluice-resumable:
/// on`) is an ordinary header: the request gets its generation, not a 404 for a stream.
#[tokio::test]
async fn a_stray_last_event_id_on_a_plain_route_is_an_ordinary_header() {
    let mock = mock("").await;
    let gw = start(&mock, "30s", "").await;
    let r = open(gw.addr(), KEY_A, "plain1", "tokens=3", Some("0123-4")).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers().get("x-sluice-resumable").is_none());
    let evs = read_events(r, None).await;
    assert!(
        evs.iter().any(|e| e.starts_with(b"data: [DONE]")),
        "{evs:?}"
    );
    assert_eq!(mock.stats().snapshot().requests.len(), 1);
}

/// A request with `key`, or none.
async fn call_as(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    knobs: &str,
    body: &str,
) -> (StatusCode, Bytes) {
    let mut req = request(method, path, knobs, body);
    if let Some(key) = key {
        req.headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
    }
    let r = h1(addr, req).await;
    (r.status, r.body)
}

const KEY_REVOKED: &str = "sk-resume-revoked";

/// The test config plus routes that do not check keys: `od*` (drains on a client's
/// disconnect), `or*` (resumable); and a revoked key.
async fn start_open(mock: &MockServer) -> Server {
    let extra = format!(
        r#"
[[key]]
id = "c"
hash = "{c}"
revoked = true

[[route]]
name = "open"
models = ["od*"]
upstream = "mock"
keys = "off"
on_client_disconnect = "drain"

[[route]]
name = "open-resumable"
models = ["or*"]
upstream = "mock"
keys = "off"
resumable = {{ keep = "30s" }}
"#,
        c = hash(KEY_REVOKED)
    );
    let text = config_text(&mock.url(), "30s", "", &extra);
    let cfg = Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Server::start(cfg).await.unwrap()
}

/// On a route that does not check keys, a resumable stream made with a key is that key's (as
/// a background response is): another key's reconnect gets 404. One made with no key is
/// anyone's without a key, and not a revoked key's (401).
#[tokio::test]
async fn a_keys_off_routes_streams_belong_to_the_key_presented() {
    let mock = mock("").await;
    let gw = start_open(&mock).await;
    let addr = gw.addr();
    let resp = open(addr, KEY_A, "or1", "tokens=20", None).await;
    assert_eq!(resp.headers()["x-sluice-resumable"], "on");
    let evs = read_events(resp, Some(3)).await;
    let last = event_id(&evs[2]);
    let foreign = open(addr, KEY_B, "or1", "", Some(&last)).await;
    assert_eq!(foreign.status(), StatusCode::NOT_FOUND);
    let own = open(addr, KEY_A, "or1", "", Some(&last)).await;
    assert_eq!(own.status(), StatusCode::OK);
    assert!(!read_events(own, None).await.is_empty());

    let body = r#"{"model":"od1","input":"hi","background":true}"#;
    let (s, b) = call_as(addr, "POST", "/v1/responses", None, "tokens=3", body).await;
    assert_eq!(s, StatusCode::OK, "{b:?}");
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    let path = format!("/v1/responses/{}", v["id"].as_str().unwrap());
    let (s, _) = call_as(addr, "GET", &path, None, "", "").await;
    assert_eq!(s, StatusCode::OK, "no key reads what no key made");
    let (s, b) = call_as(addr, "GET", &path, Some(KEY_REVOKED), "", "").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{b:?}");
    let (s, _) = call_as(addr, "GET", &path, Some(KEY_A), "", "").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// On a route that does not check keys (`keys = "off"`) of a gateway with keys, a background
/// response made with a key is that key's: no key and another key get 404. On a `drain`
/// route, its cancel still cancels the upstream (nobody wants the rest), and its stream ends
/// as any failed Responses stream does: `error`, then `response.failed`, numbered on.
#[tokio::test]
async fn a_keys_off_drain_routes_background_response_is_its_keys_and_cancels_upstream() {
    let mock = mock("").await;
    let gw = start_open(&mock).await;
    let addr = gw.addr();
    let body = r#"{"model":"od1","input":"hi","background":true}"#;
    let (s, b) = call_as(
        addr,
        "POST",
        "/v1/responses",
        Some(KEY_A),
        "tokens=500, interval_ms=20",
        body,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b:?}");
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    let id = v["id"].as_str().unwrap().to_string();
    let path = format!("/v1/responses/{id}");
    let (s, b) = call_as(addr, "GET", &path, Some(KEY_A), "", "").await;
    assert_eq!(s, StatusCode::OK, "its own key reads it: {b:?}");
    for key in [None, Some(KEY_B)] {
        let (s, _) = call_as(addr, "GET", &path, key, "", "").await;
        assert_eq!(s, StatusCode::NOT_FOUND, "read by {key:?}");
        let (s, _) = call_as(addr, "POST", &format!("{path}/cancel"), key, "", "").await;
        assert_eq!(s, StatusCode::NOT_FOUND, "cancelled by {key:?}");
    }
    // Some events first, so the failure goes on from them.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (s, b) = call_as(addr, "POST", &format!("{path}/cancel"), Some(KEY_A), "", "").await;
    assert_eq!(s, StatusCode::OK, "{b:?}");
    wait_for(mock.stats(), "the cancel upstream, not a drain", |s| {
        s.requests
            .last()
            .is_some_and(|r| matches!(r.outcome, Outcome::Cancelled(_)))
    })
    .await;
    let (s, b) = call_as(
        addr,
        "GET",
        &format!("{path}?stream=true"),
        Some(KEY_A),
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let all = sse(&b);
    assert!(all.len() > 3, "{all:?}");
    let n = all.len();
    assert_eq!(all[n - 2].0.as_deref(), Some("error"), "{all:?}");
    assert_eq!(all[n - 1].0.as_deref(), Some("response.failed"), "{all:?}");
    for (i, (name, data)) in all.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["type"].as_str(), name.as_deref(), "{data}");
        assert_eq!(v["sequence_number"], i as u64, "{data}");
    }
    let failed: serde_json::Value = serde_json::from_str(&all[n - 1].1).unwrap();
    assert_eq!(failed["response"]["status"], "failed", "{failed}");
    assert_eq!(failed["response"]["error"]["code"], "cancelled", "{failed}");
}
