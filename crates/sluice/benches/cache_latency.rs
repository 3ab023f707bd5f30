//! A response-cache hit's latency through the whole gateway (`sluice::Server`), against the
//! gateway's own floor, in one run, alternating, over kept-alive HTTP/1.1 on loopback:
//! - floor: a chat request for a model no route takes (the edge, the body read and probed,
//!   the route lookup, a 404 in the client's format: everything of a hit but the cache);
//! - memory hit: the same size of request on a route with `cache = {}`, answered from memory;
//! - Redis hit (when `redis-server` is installed): the same from a Redis-backed cache;
//! - miss path for scale: the same request on a route without a cache, through to the mock.
//!
//! Targets (issue 29): a hit adds ≤ 0.2 ms p50 over the floor from memory, ≤ 0.5 ms from Redis.
//!
//! Run: `cargo bench -p sluice --bench cache_latency` (`SLUICE_BENCH_CALLS=N`, default 3000).

#[path = "../../sluice-state/tests/support/mod.rs"]
mod redis_support;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use sluice_gateway::config::Config;
use sluice_mock::{MockConfig, MockServer};
use tokio::time::Instant;

async fn client(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let io = tokio::net::TcpStream::connect(addr).await.unwrap();
    io.set_nodelay(true).unwrap();
    let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    s
}

async fn post(s: &mut SendRequest<Full<Bytes>>, body: &Bytes) -> (u16, Option<String>) {
    s.ready().await.unwrap();
    let req = Request::post("/v1/chat/completions")
        .header("host", "bench")
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .unwrap();
    let resp = s.send_request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let _ = body.collect().await.unwrap();
    let cache = parts
        .headers
        .get("x-sluice-cache")
        .map(|v| v.to_str().unwrap().to_string());
    (parts.status.as_u16(), cache)
}

/// A chat request of about 1 KiB (a system prompt and a question), for `model`.
fn body(model: &str) -> Bytes {
    let system = "You are a careful assistant. ".repeat(28);
    Bytes::from(format!(
        r#"{{"model":"{model}","temperature":0,"messages":[{{"role":"system","content":"{system}"}},{{"role":"user","content":"What is a sluice?"}}]}}"#
    ))
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn config(mock: &MockServer, state: &str) -> Config {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"http1\"\n\
         [[route]]\nname = \"cached\"\nmodels = [\"cached-*\"]\nupstream = \"mock\"\ncache = {{}}\n\
         [[route]]\nname = \"plain\"\nmodels = [\"plain-*\"]\nupstream = \"mock\"\n{state}",
        mock.url()
    );
    Config::from_toml(&text, &|_| None).unwrap()
}

/// One series: its name, its connection, its request, the status and `x-sluice-cache` it
/// must get.
type Case<'a> = (
    &'a str,
    SendRequest<Full<Bytes>>,
    Bytes,
    u16,
    Option<&'a str>,
);

/// `(name, p50, p90, p99)` of each series, measured alternately.
async fn measure(
    calls: usize,
    cases: &mut [Case<'_>],
) -> Vec<(String, Duration, Duration, Duration)> {
    let mut times: Vec<Vec<Duration>> = cases.iter().map(|_| Vec::with_capacity(calls)).collect();
    let mut missed = vec![0usize; cases.len()];
    for i in 0..calls + 300 {
        for k in 0..cases.len() {
            // Rotate which goes first, so none always follows another.
            let j = (i + k) % cases.len();
            let (name, s, body, status, cache) = &mut cases[j];
            let misses = &mut missed[j];
            let t = Instant::now();
            let (got, header) = post(s, body).await;
            let took = t.elapsed();
            assert_eq!(got, *status, "{name}");
            // A Redis call over its deadline is a miss (invariant 11): counted, not fatal.
            if header.as_deref() != *cache {
                assert!(name.starts_with("redis"), "{name}, call {i}: {header:?}");
                *misses += 1;
            }
            if i >= 300 {
                times[j].push(took);
            }
        }
    }
    cases
        .iter()
        .zip(&mut times)
        .zip(missed)
        .map(|(((name, ..), t), m)| {
            let name = if m > 0 {
                format!("{name} ({m} misses)")
            } else {
                name.to_string()
            };
            (name, pct(t, 0.5), pct(t, 0.9), pct(t, 0.99))
        })
        .collect()
}

fn main() {
    let calls: usize = std::env::var("SLUICE_BENCH_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mock = MockServer::start(MockConfig::default()).await.unwrap();
        let redis = if std::process::Command::new(redis_support::binary())
            .arg("--version")
            .output()
            .is_ok()
        {
            Some(redis_support::RedisServer::start().await)
        } else {
            None
        };
        let memory = sluice::Server::start(config(&mock, "")).await.unwrap();
        let shared = match &redis {
            Some(r) => Some(
                sluice::Server::start(config(
                    &mock,
                    // The default deadline (5 ms) on a shared 2-CPU machine makes a late
                    // timer a miss; the latency measured is the same.
                    &format!(
                        "[state]\nredis = \"{}\"\ncall_timeout = \"50ms\"\n",
                        r.url()
                    ),
                ))
                .await
                .unwrap(),
            ),
            None => None,
        };
        let cached = body("cached-gpt");
        // Store the answers first (in Redis, queued: give it a moment).
        let mut c = client(memory.addr()).await;
        assert_eq!(post(&mut c, &cached).await.1.as_deref(), Some("miss"));
        if let Some(s) = &shared {
            let mut c = client(s.addr()).await;
            assert_eq!(post(&mut c, &cached).await.1.as_deref(), Some("miss"));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut cases = vec![
            (
                "floor (404 model)",
                client(memory.addr()).await,
                body("nowhere"),
                404,
                None,
            ),
            (
                "memory hit",
                client(memory.addr()).await,
                cached.clone(),
                200,
                Some("hit"),
            ),
            (
                "no cache (to mock)",
                client(memory.addr()).await,
                body("plain-gpt"),
                200,
                None,
            ),
        ];
        if let Some(s) = &shared {
            cases.push((
                "redis hit",
                client(s.addr()).await,
                cached.clone(),
                200,
                Some("hit"),
            ));
        }
        let rows = measure(calls, &mut cases).await;
        println!(
            "response cache, {calls} each, alternating, sequential, loopback, kept-alive HTTP/1.1, \
             {} B request bodies:",
            cached.len()
        );
        for (name, p50, p90, p99) in &rows {
            println!(
                "  {name:<20} p50 {:>7.1} µs   p90 {:>7.1} µs   p99 {:>7.1} µs",
                us(*p50),
                us(*p90),
                us(*p99)
            );
        }
        let floor = us(rows[0].1);
        println!(
            "  memory hit over the floor, p50: {:+.1} µs (target ≤ 200 µs)",
            us(rows[1].1) - floor
        );
        if rows.len() > 3 {
            println!(
                "  redis hit over the floor, p50: {:+.1} µs (target ≤ 500 µs)",
                us(rows[3].1) - floor
            );
        }
        drop(redis);
    });
}
