//! The access log never holds up requests: a sink that stops taking lines (a pipe nobody reads)
//! costs dropped lines, counted, and nothing else.

use std::time::Duration;

use tokio::time::Instant;

use crate::support::*;
use crate::{gateway, Setup, CHAT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_log_sink_drops_lines_and_never_blocks_requests() {
    let dir = std::env::temp_dir().join(format!("sluice-access-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("blocked.fifo");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // A reader that opens the pipe and never reads: once its buffer is full, every write
    // to it blocks.
    let (hold, held) = std::sync::mpsc::channel::<()>();
    let reader_path = fifo.clone();
    let reader = std::thread::spawn(move || {
        let f = std::fs::File::open(reader_path).unwrap();
        let _ = held.recv();
        drop(f);
    });
    let m = mock("").await;
    let server = format!("access_log = \"{}\"\naccess_log_queue = 64", fifo.display());
    let gw = gateway(
        &m,
        Setup {
            server: &server,
            ..Setup::default()
        },
    )
    .await;
    let t0 = Instant::now();
    let n = 1500;
    let addr = gw.addr();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(tokio::spawn(async move {
            let mut send = h1_connect(addr).await;
            for _ in 0..n / 4 {
                let r = h1_send(&mut send, request("POST", "/v1/chat/completions", "", CHAT)).await;
                assert_eq!(r.status(), 200);
                let _ = http_body_util::BodyExt::collect(r.into_body()).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "requests went on while the sink was blocked"
    );
    let metrics = h1(gw.admin_addr(), request("GET", "/metrics", "", ""))
        .await
        .body;
    let metrics = String::from_utf8_lossy(&metrics);
    let dropped: u64 = metrics
        .lines()
        .find(|l| l.starts_with("sluice_access_log_lines_total{outcome=\"dropped\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no dropped counter:\n{metrics}"));
    assert!(dropped > 0, "lines were dropped, and counted: {dropped}");
    drop(hold);
    reader.join().unwrap();
    // The writer thread, blocked on the pipe, ends with the gateway.
    drop(gw);
    let _ = std::fs::remove_dir_all(dir);
}
