//! Key flood: 100,000 requests with random invalid keys at full speed against a gateway whose
//! routes require keys, while one valid key streams. Checks that every flood request gets 401,
//! that none reaches the upstream (the mock's request count), and compares the valid stream's
//! event gaps with its gaps when unloaded (goal: within 1.2×).
//!
//! Everything runs in this process, each part on its own runtime (gateway: 2 threads, mock: 1,
//! clients: 2), on one machine: the flood competes with the stream for the same cores, as it
//! would on a real host.
//!
//! Run: `cargo run --release -p sluice-gateway --example key_flood [-- REQUESTS [CONCURRENCY]]`

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use sluice_gateway::config::Config;
use sluice_gateway::Gateway;
use sluice_mock::{MockConfig, MockServer};
use tokio::net::TcpStream;
use tokio::time::Instant;

const VALID: &str = "sk-flood-valid";

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime")
}

fn sha256_hex(s: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

async fn connect(addr: std::net::SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let _ = tcp.set_nodelay(true);
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    send
}

fn post(key: &str, xmock: Option<&str>) -> Request<()> {
    let mut b = Request::builder()
        .method("POST")
        .uri("http://gw/v1/chat/completions")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"));
    if let Some(x) = xmock {
        b = b.header("x-mock", x);
    }
    b.body(()).expect("request")
}

/// One stream of the valid key: the gaps between its data frames (events are flushed one by
/// one), after the first.
async fn stream_gaps(addr: std::net::SocketAddr) -> Vec<Duration> {
    let send = connect(addr).await;
    let mut send = send.ready().await.expect("ready");
    let body = r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let (resp, mut out) = send
        .send_request(post(VALID, Some("tokens=150, interval_ms=20")), false)
        .expect("send");
    out.send_data(Bytes::from_static(body.as_bytes()), true)
        .expect("body");
    let resp = resp.await.expect("response");
    assert_eq!(resp.status(), 200, "the valid key streams");
    let mut body = resp.into_body();
    let mut last: Option<Instant> = None;
    let mut gaps = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("stream");
        let _ = body.flow_control().release_capacity(chunk.len());
        let now = Instant::now();
        if let Some(t) = last {
            gaps.push(now - t);
        }
        last = Some(now);
    }
    gaps
}

fn summary(gaps: &mut [Duration]) -> (f64, f64, f64, f64) {
    gaps.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| ms(gaps[((gaps.len() - 1) as f64 * q) as usize]);
    let mean = gaps.iter().map(|d| ms(*d)).sum::<f64>() / gaps.len() as f64;
    (mean, at(0.5), at(0.99), ms(*gaps.last().expect("gaps")))
}

/// The flood: `total` requests with random keys over `conns` HTTP/2 connections, `per_conn`
/// in flight on each. Returns (401s, other statuses, elapsed).
async fn flood(
    addr: std::net::SocketAddr,
    total: usize,
    conns: usize,
    per_conn: usize,
) -> (usize, usize, Duration) {
    let started = Instant::now();
    let left = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(total));
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let send = connect(addr).await;
        for _ in 0..per_conn {
            let send = send.clone();
            let left = left.clone();
            tasks.push(tokio::spawn(async move {
                let (mut unauthorized, mut other) = (0usize, 0usize);
                let body = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
                while left
                    .fetch_update(
                        std::sync::atomic::Ordering::Relaxed,
                        std::sync::atomic::Ordering::Relaxed,
                        |n| n.checked_sub(1),
                    )
                    .is_ok()
                {
                    let key = format!("sk-{:032x}", fastrand::u128(..));
                    let mut s = send.clone().ready().await.expect("ready");
                    let (resp, mut out) = s.send_request(post(&key, None), false).expect("send");
                    // The gateway may answer (401) and close the stream before taking the
                    // body: it refuses a bad key before reading one.
                    let _ = out.send_data(Bytes::from_static(body.as_bytes()), true);
                    let resp = resp.await.expect("response");
                    let status = resp.status();
                    let mut b = resp.into_body();
                    while let Some(Ok(c)) = b.data().await {
                        let _ = b.flow_control().release_capacity(c.len());
                    }
                    if status == 401 {
                        unauthorized += 1;
                    } else {
                        other += 1;
                    }
                }
                (unauthorized, other)
            }));
        }
    }
    let (mut unauthorized, mut other) = (0, 0);
    for t in tasks {
        let (u, o) = t.await.expect("flood task");
        unauthorized += u;
        other += o;
    }
    (unauthorized, other, started.elapsed())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let total: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let concurrency: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let mock_rt = runtime(1);
    let gw_rt = runtime(2);
    let client_rt = runtime(2);
    let mock = mock_rt.block_on(async {
        MockServer::start(MockConfig::default())
            .await
            .expect("mock")
    });
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
# 100,000 lines of 401s would measure the terminal, not the gateway.
access_log = "off"

[[upstream]]
name = "mock"
base_url = "{}/v1"
protocol = "h2c"

[[route]]
models = ["*"]
upstream = "mock"

[[key]]
id = "valid"
hash = "{}"
requests = {{ limit = 1000, per = "1m" }}
concurrency = 4
"#,
        mock.url(),
        sha256_hex(VALID)
    );
    let config = Config::from_toml(&text, &|_| None).expect("config");
    let gateway = gw_rt.block_on(async { Gateway::start(config).await.expect("gateway") });
    let addr = gateway.addr();

    let mut alone = client_rt.block_on(stream_gaps(addr));
    let (flood_result, mut loaded) = client_rt.block_on(async {
        let flood = tokio::spawn(flood(addr, total, 8, concurrency.div_ceil(8)));
        // Let the flood reach full speed, then stream through it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let gaps = stream_gaps(addr).await;
        (flood.await.expect("flood"), gaps)
    });
    let (unauthorized, other, elapsed) = flood_result;
    let upstream = mock.stats().snapshot().requests.len();
    let (a_mean, a_p50, a_p99, a_max) = summary(&mut alone);
    let (l_mean, l_p50, l_p99, l_max) = summary(&mut loaded);
    println!(
        "flood: {total} requests with random keys, {concurrency} in flight, in {:.2} s ({:.0} req/s): {unauthorized} got 401, {other} other",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    println!("upstream requests (the mock's count): {upstream} (the two valid streams)");
    println!("valid stream event gaps, ms     mean    p50    p99    max");
    println!("  unloaded                   {a_mean:>6.2} {a_p50:>6.2} {a_p99:>6.2} {a_max:>6.2}");
    println!("  during the flood           {l_mean:>6.2} {l_p50:>6.2} {l_p99:>6.2} {l_max:>6.2}");
    println!(
        "  ratio                       {:>5.2}x {:>5.2}x {:>5.2}x {:>5.2}x",
        l_mean / a_mean,
        l_p50 / a_p50,
        l_p99 / a_p99,
        l_max / a_max
    );
    let metrics = gateway.telemetry().encode();
    let refusals = metrics
        .lines()
        .find(|l| l.starts_with("sluice_key_refusals_total{reason=\"invalid_api_key\"}"))
        .unwrap_or("(no refusals counted)");
    println!("{refusals}");
    assert_eq!(unauthorized, total, "every flood request got 401");
    assert_eq!(upstream, 2, "no flood request reached the upstream");
    gw_rt.block_on(gateway.shutdown());
}
