//! Two `sluice serve` processes sharing one real `redis-server`, with the mock behind them, run
//! on the guide's keys + limits + Redis config (its ```toml block, as written): one rate limit
//! across both instances, one concurrency cap, an idempotent request sent to both at once run
//! upstream once, and Redis killed mid-run: `fail_open` keeps serving, `fail_closed` answers
//! 503 at once, and neither hangs a request. Without `redis-server` the tests are ignored (the
//! build says so), and fail under CI=true.

#[path = "../../sluice-state/tests/support/mod.rs"]
mod redis_support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redis_support::RedisServer;
use sluice_mock::{MockConfig, MockServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// The guide's key of the example (`sk-example-search`, 600 requests per minute).
const KEY: &str = "sk-example-search";

/// A key with a concurrency cap of 3, added to the guide's config for one test.
const CONC_KEY: &str = "sk-conc";

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The guide's keys + limits + Redis example (`docs/guide/src/keys.md`).
fn readme_config() -> String {
    let readme = include_str!("../../../docs/guide/src/keys.md");
    let start = readme
        .find("```toml\n# sluice-keys.toml")
        .expect("the guide has the keys example");
    let block = &readme[start + "```toml\n".len()..];
    block[..block.find("```").unwrap()].to_string()
}

/// The guide's config, and the deadline of Redis calls raised from 5 ms: this machine is
/// shared, and a late timer would make a fail_open instance count locally.
fn config_file(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let text = readme_config().replacen(
        "[state]",
        "[state]\ncall_timeout = \"150ms\"\nprobe_interval = \"100ms\"\n",
        1,
    );
    let conc_hash: String = sha256_hex(CONC_KEY);
    let text = format!(
        "{text}\n[[key]]\nid = \"conc\"\nhash = \"{conc_hash}\"\nconcurrency = 3\n{extra}\n"
    );
    let path = dir.join("sluice-keys.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `sha256sum` of a string, through the system tool (this crate does not depend on a hash
/// crate, and the guide tells users to make hashes this way).
fn sha256_hex(s: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", &format!("printf %s '{s}' | sha256sum")])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// Starts `sluice serve` on `config`; its data-plane and admin-plane addresses.
async fn serve(
    config: &std::path::Path,
    redis: &str,
    mock: &MockServer,
    on_failure: &str,
) -> (Proc, String, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .env("SLUICE_LISTEN", "127.0.0.1:0")
        .env("SLUICE_REDIS", redis)
        .env("SLUICE_UPSTREAM", format!("{}/v1", mock.url()))
        .env("SLUICE_ON_FAILURE", on_failure)
        .env("OPENAI_API_KEY", "sk-upstream")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let proc = Proc(child);
    // The first two lines name the addresses; the rest (the access log) is drained so that
    // the pipe never fills.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let lines = tokio::task::spawn_blocking(move || {
        let first = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
        let second = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
        (first, second)
    });
    let (first, second) = lines.await.unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();
    let admin = second
        .trim()
        .strip_prefix("admin on ")
        .unwrap_or_else(|| panic!("unexpected second line {second:?}"))
        .to_string();
    (proc, addr, admin)
}

struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

fn request_text(path: &str, key: &str, extra: &str, body: &str) -> String {
    let method = if body.is_empty() { "GET" } else { "POST" };
    format!(
        "{method} {path} HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\n{extra}connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// One HTTP/1.1 exchange on its own connection, bounded: a request that hangs fails the test.
async fn call(addr: &str, path: &str, key: &str, extra: &str, body: &str) -> Reply {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request_text(path, key, extra, body).as_bytes())
            .await
            .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        out
    };
    let out = timeout(Duration::from_secs(10), exchange)
        .await
        .expect("a request hung");
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Reply {
        status: head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        head: head.to_string(),
        body: body.to_string(),
    }
}

const CHAT: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;

/// The admin plane's `/metrics`.
async fn metrics(admin: &str) -> String {
    call(admin, "/metrics", "-", "", "").await.body
}

fn tmpdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn two_instances_keep_one_rate_limit_and_one_concurrency_cap() {
    let redis = RedisServer::start().await;
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let dir = tmpdir("shared-limits");
    let cfg = config_file(&dir, "");
    let (_a, a, a_admin) = serve(&cfg, &redis.url(), &mock, "fail_open").await;
    let (_b, b, b_admin) = serve(&cfg, &redis.url(), &mock, "fail_open").await;

    // 800 requests as fast as 16 clients can send them, alternating instances, against a key
    // of 600 per minute: a burst of 600, then one every 100 ms.
    let started = Instant::now();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let addr = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                let (mut ok, mut limited) = (0u32, 0u32);
                for _ in 0..50 {
                    let r = call(&addr, "/v1/chat/completions", KEY, "", CHAT).await;
                    match r.status {
                        200 => ok += 1,
                        429 => {
                            assert!(r.body.contains("\"rate_limited\""), "{}", r.body);
                            assert!(r.header("retry-after").is_some());
                            limited += 1;
                        }
                        s => panic!("status {s}: {}", r.body),
                    }
                }
                (ok, limited)
            })
        })
        .collect();
    let (mut ok, mut limited) = (0, 0);
    for t in tasks {
        let (o, l) = t.await.unwrap();
        ok += o;
        limited += l;
    }
    let elapsed = started.elapsed();
    let refills = (elapsed.as_millis() / 100) as u32;
    eprintln!("admitted {ok} of 800 ({limited} limited) across 2 instances in {elapsed:?}");
    assert!(
        (600..=600 + 2 + refills).contains(&ok),
        "admitted {ok} in {elapsed:?}"
    );
    assert_eq!(mock.stats().snapshot().requests.len() as u32, ok);
    for admin in [&a_admin, &b_admin] {
        let m = metrics(admin).await;
        assert!(m.contains("sluice_state_mode{mode=\"shared\"} 1"), "{m}");
        assert!(m.contains("sluice_state_fallbacks_total 0"), "{m}");
    }

    // Concurrency: 3 streams in flight across both instances; a 4th is refused on either.
    let body = r#"{"model":"gpt-4o-mini","stream":true,"messages":[]}"#;
    let slow = "x-mock: tokens=2000, interval_ms=10\r\n";
    let mut open = Vec::new();
    for i in 0..3 {
        let addr = if i % 2 == 0 { &a } else { &b };
        let mut s = TcpStream::connect(addr.as_str()).await.unwrap();
        s.write_all(request_text("/v1/chat/completions", CONC_KEY, slow, body).as_bytes())
            .await
            .unwrap();
        let mut head = [0u8; 12];
        timeout(Duration::from_secs(10), s.read_exact(&mut head))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "stream {i}");
        open.push(s);
    }
    for addr in [&a, &b] {
        let r = call(addr, "/v1/chat/completions", CONC_KEY, "", CHAT).await;
        assert_eq!(r.status, 429, "{}", r.body);
        assert!(r.body.contains("concurrency_limited"));
        assert_eq!(r.header("x-ratelimit-remaining-concurrency"), Some("0"));
    }
    // A stream that ends on instance a frees its slot for instance b.
    drop(open.remove(0));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = call(&b, "/v1/chat/completions", CONC_KEY, "", CHAT).await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 429);
        assert!(Instant::now() < deadline, "the slot was never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn an_idempotent_request_sent_to_both_instances_at_once_runs_upstream_once() {
    let redis = RedisServer::start().await;
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let dir = tmpdir("shared-idem");
    let cfg = config_file(&dir, "");
    let (_a, a, _) = serve(&cfg, &redis.url(), &mock, "fail_closed").await;
    let (_b, b, _) = serve(&cfg, &redis.url(), &mock, "fail_closed").await;
    for n in 0..5 {
        let extra = format!("idempotency-key: order-{n}\r\nx-mock: ttft_ms=300\r\n");
        let (x, y) = tokio::join!(
            call(&a, "/v1/chat/completions", KEY, &extra, CHAT),
            call(&b, "/v1/chat/completions", KEY, &extra, CHAT)
        );
        assert_eq!((x.status, y.status), (200, 200), "{} {}", x.body, y.body);
        assert_eq!(x.body, y.body);
        let replays = [&x, &y]
            .iter()
            .filter(|r| r.header("idempotent-replayed") == Some("true"))
            .count();
        assert_eq!(replays, 1, "one ran, the other got its response");
        assert_eq!(
            mock.stats().snapshot().requests.len(),
            n + 1,
            "order-{n} ran upstream once"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn a_stream_cut_by_its_token_limit_on_one_instance_is_charged_on_both() {
    let redis = RedisServer::start().await;
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let dir = tmpdir("shared-cut");
    let capped = format!(
        "\n[[key]]\nid = \"capped\"\nhash = \"{}\"\ntokens = {{ limit = 1000, per = \"1h\", cut_streams = true }}\n",
        sha256_hex("sk-capped")
    );
    let cfg = config_file(&dir, &capped);
    let (_a, a, _) = serve(&cfg, &redis.url(), &mock, "fail_closed").await;
    let (_b, b, _) = serve(&cfg, &redis.url(), &mock, "fail_closed").await;
    let stream =
        r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let knobs = "x-mock: tokens=2000, interval_ms=1, token_bytes=8\r\n";
    let r = call(&a, "/v1/chat/completions", "sk-capped", knobs, stream).await;
    assert_eq!(r.status, 200);
    let deltas = r.body.matches("\"content\":\"").count();
    assert!(
        r.body.contains("token_limit_exceeded"),
        "no cut after {deltas} deltas: {}",
        &r.body[r.body.len().saturating_sub(300)..]
    );
    assert!(
        (400..=520).contains(&deltas),
        "{deltas} deltas before the cut"
    );
    // The other instance sees the charge (settled through Redis): nothing is left.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let r = call(&b, "/v1/chat/completions", "sk-capped", "", CHAT).await;
        if r.status == 429 {
            assert!(r.body.contains("tokens_limited"), "{}", r.body);
            break;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            Instant::now() < deadline,
            "instance B still admits the capped key"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Sends requests to `addr` until `stop`, each bounded; returns (status, took) per request.
async fn load(addr: String, until: Instant) -> Vec<(u16, Duration, String)> {
    let mut out = Vec::new();
    while Instant::now() < until {
        let t = Instant::now();
        let r = call(&addr, "/v1/chat/completions", KEY, "", CHAT).await;
        out.push((r.status, t.elapsed(), r.body));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn killing_redis_mid_run_falls_to_the_configured_mode_without_hung_requests() {
    let mut redis = RedisServer::start().await;
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let dir = tmpdir("shared-kill");
    let cfg = config_file(&dir, "");
    let (_open, open, open_admin) = serve(&cfg, &redis.url(), &mock, "fail_open").await;
    let (_closed, closed, closed_admin) = serve(&cfg, &redis.url(), &mock, "fail_closed").await;
    let until = Instant::now() + Duration::from_millis(1500);
    let a = tokio::spawn(load(open.clone(), until));
    let b = tokio::spawn(load(closed.clone(), until));
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.kill();
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    // No request waited for the dead Redis longer than the call deadline allows.
    for (status, took, body) in a.iter().chain(&b) {
        assert!(*took < Duration::from_secs(2), "{status} took {took:?}");
        assert!(matches!(status, 200 | 503), "{status}: {body}");
    }
    assert!(a.iter().all(|(s, ..)| *s == 200), "fail_open keeps serving");
    let refused: Vec<_> = b.iter().filter(|(s, ..)| *s == 503).collect();
    assert!(
        !refused.is_empty(),
        "fail_closed refuses once Redis is gone"
    );
    assert!(
        refused.iter().all(|(_, _, body)| body.contains("state_")),
        "{refused:?}"
    );
    assert_eq!(b.last().unwrap().0, 503);
    let m = metrics(&open_admin).await;
    assert!(m.contains("sluice_state_mode{mode=\"fallback\"} 1"), "{m}");
    let m = metrics(&closed_admin).await;
    assert!(
        m.contains("sluice_state_mode{mode=\"unavailable\"} 1"),
        "{m}"
    );
    let r = call(&closed, "/v1/chat/completions", KEY, "", CHAT).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));

    // Redis back: both instances return to it.
    redis.restart().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = call(&closed, "/v1/chat/completions", KEY, "", CHAT).await;
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never recovered: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !metrics(&open_admin)
        .await
        .contains("sluice_state_mode{mode=\"shared\"} 1")
    {
        assert!(
            Instant::now() < deadline,
            "fail_open never went back to Redis"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}
