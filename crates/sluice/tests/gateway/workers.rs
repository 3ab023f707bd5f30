//! Client connections pinned to worker threads (`server.workers`): each connection is served
//! on one thread from accept to close, and the upstream connections a thread opened are
//! reused by that thread. (Cancellation and shutdown on worker threads: `cancel.rs`,
//! `shutdown.rs`.)

use std::sync::Arc;
use std::time::Duration;

use sluice_gateway::workers::Workers;
use tokio::time::{sleep, Instant};

use crate::support::*;
use crate::{gateway, Setup, CHAT, STREAM};

fn workers(n: usize) -> Arc<Workers> {
    Arc::new(Workers::start(n).unwrap())
}

async fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < Duration::from_secs(5), "timed out: {what}");
        sleep(Duration::from_millis(10)).await;
    }
}

/// New connections go to the thread with the fewest; HTTP/1.1 and HTTP/2 clients, streaming
/// and not, over both upstream protocols, all answered in full; a closed connection leaves
/// its thread's count.
#[tokio::test]
async fn connections_spread_over_the_threads_and_every_call_is_answered() {
    for upstream in ["http1", "h2c"] {
        let mock = mock("tokens=5, interval_ms=2").await;
        let w = workers(2);
        let gw = gateway(
            &mock,
            Setup {
                protocol: upstream,
                workers: Some(w.clone()),
                ..Default::default()
            },
        )
        .await;
        let mut h1s = Vec::new();
        for _ in 0..6 {
            h1s.push(h1_connect(gw.addr()).await);
        }
        let h2s = [h2_connect(gw.addr()).await, h2_connect(gw.addr()).await];
        until("8 connections on the threads", || {
            w.connections().iter().sum::<usize>() == 8
        })
        .await;
        assert_eq!(w.connections(), [4, 4], "{upstream}: the fewest first");

        let mut calls = tokio::task::JoinSet::new();
        for mut send in h1s {
            calls.spawn(async move {
                for i in 0..10 {
                    let body = if i % 2 == 0 { CHAT } else { STREAM };
                    let r =
                        h1_send(&mut send, request("POST", "/v1/chat/completions", "", body)).await;
                    assert_eq!(r.status(), 200);
                    let b = http_body_util::BodyExt::collect(r.into_body())
                        .await
                        .unwrap()
                        .to_bytes();
                    if body == STREAM {
                        assert_eq!(sse(&b).last().unwrap().1, "[DONE]");
                    } else {
                        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
                        assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
                    }
                }
            });
        }
        for send in &h2s {
            for _ in 0..10 {
                let send = send.clone();
                calls.spawn(async move {
                    let r = h2(&send, request("POST", "/v1/chat/completions", "", STREAM)).await;
                    assert_eq!(r.status, 200);
                    assert_eq!(sse(&r.body).last().unwrap().1, "[DONE]");
                });
            }
        }
        while let Some(r) = calls.join_next().await {
            r.unwrap();
        }
        assert_eq!(mock.stats().snapshot().totals.requests, 80, "{upstream}");
        drop(h2s);
        until("the closed connections leave their threads", || {
            w.connections() == [0, 0]
        })
        .await;
        gw.shutdown().await;
    }
}

/// Each thread reuses the HTTP/1.1 upstream connection it opened: two client connections on
/// two threads, one call each at once (two upstream connections), then calls taking turns —
/// every call of a client goes over its own thread's upstream connection, where the idle
/// list alone (a stack) would hand each the other's.
#[tokio::test]
async fn a_thread_reuses_the_upstream_connections_it_opened() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            protocol: "http1",
            workers: Some(workers(2)),
            ..Default::default()
        },
    )
    .await;
    let mut a = h1_connect(gw.addr()).await;
    let mut b = h1_connect(gw.addr()).await;
    let call = |who: &str, knobs: &str| {
        let mut r = request("POST", "/v1/chat/completions", knobs, CHAT);
        r.headers_mut().insert("x-client", who.parse().unwrap());
        r
    };
    let (ra, rb) = tokio::join!(
        h1_send(&mut a, call("a", "ttft_ms=200")),
        h1_send(&mut b, call("b", "ttft_ms=200"))
    );
    assert_eq!((ra.status().as_u16(), rb.status().as_u16()), (200, 200));
    for _ in 0..5 {
        assert_eq!(h1_send(&mut a, call("a", "")).await.status(), 200);
        assert_eq!(h1_send(&mut b, call("b", "")).await.status(), 200);
    }
    let snap = mock.stats().snapshot();
    let conns_of = |who: &str| {
        let mut ids: Vec<u64> = snap
            .requests
            .iter()
            .filter(|r| r.headers.iter().any(|(k, v)| k == "x-client" && v == who))
            .map(|r| r.conn_id)
            .collect();
        ids.dedup();
        ids
    };
    let (ca, cb) = (conns_of("a"), conns_of("b"));
    assert_eq!(snap.requests.len(), 12);
    assert_eq!(ca.len(), 1, "client a's calls went over {ca:?}");
    assert_eq!(cb.len(), 1, "client b's calls went over {cb:?}");
    assert_ne!(ca, cb);
}
