//! The stale keep-alive race: a request written to a reused HTTP/1.1 connection that the
//! server closes (EOF or reset) without a response byte is sent again, once, on a fresh
//! connection. Never when a response byte arrived, never from a fresh connection, never twice.
//!
//! The server is a few lines of raw TCP so that each connection's fate is scripted exactly: it
//! reads each request whole, then answers it, closes, resets, or sends half a status line and
//! closes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_upstream::{Protocol, Upstream, UpstreamConfig, UpstreamError};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;

/// What the server does once it has read a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    /// `200 OK`, `ok`, keep-alive.
    Answer,
    /// Close the connection (FIN) without a byte.
    Close,
    /// Close with a TCP reset (SO_LINGER 0) without a byte.
    Reset,
    /// Send `HTTP/1.1 200` and close: a response had started.
    Partial,
    /// Hold the request 1.5 s (as if generating), then close without a byte.
    SlowClose,
}

/// Which connection (0-based, in accept order) and which request on it (0-based).
type Script = fn(usize, usize) -> Then;

#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    requests: AtomicUsize,
}

async fn server(script: Script) -> (SocketAddr, Arc<Seen>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((tcp, _)) = listener.accept().await {
            let conn = counts.connections.fetch_add(1, Ordering::SeqCst);
            let counts = counts.clone();
            conns.spawn(serve(tcp, conn, script, counts));
        }
    });
    (addr, seen, task)
}

async fn serve(mut tcp: TcpStream, conn: usize, script: Script, seen: Arc<Seen>) {
    for n in 0.. {
        if !read_request(&mut tcp).await {
            return;
        }
        seen.requests.fetch_add(1, Ordering::SeqCst);
        match script(conn, n) {
            Then::Answer => {
                let ok =
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok";
                if tcp.write_all(ok).await.is_err() {
                    return;
                }
            }
            Then::Close => return,
            Then::Reset => {
                socket2::SockRef::from(&tcp)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
                return;
            }
            Then::Partial => {
                let _ = tcp.write_all(b"HTTP/1.1 200").await;
                let _ = tcp.flush().await;
                return;
            }
            Then::SlowClose => {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                return;
            }
        }
    }
}

fn upstream_at(addr: SocketAddr) -> Upstream {
    Upstream::new(UpstreamConfig {
        name: "raw".into(),
        base_url: format!("http://{addr}/v1").parse().unwrap(),
        protocol: Protocol::Http1,
        ..UpstreamConfig::default()
    })
    .unwrap()
}

/// Sends a (non-idempotent) POST and reads the body.
async fn post(up: &Upstream) -> Result<Bytes, UpstreamError> {
    let resp = up.send(chat("", NON_STREAM), secs(5)).await?;
    assert_eq!(resp.status(), 200);
    Ok(read_all(&mut resp.into_body()).await.unwrap())
}

async fn stale_close_is_retried_once_on_a_fresh_connection(then: Then) {
    // The first connection answers its first request and drops its second; later
    // connections answer.
    let script: Script = match then {
        Then::Close => |conn, n| {
            if conn == 0 && n == 1 {
                Then::Close
            } else {
                Then::Answer
            }
        },
        _ => |conn, n| {
            if conn == 0 && n == 1 {
                Then::Reset
            } else {
                Then::Answer
            }
        },
    };
    let (addr, seen, server) = server(script).await;
    let up = upstream_at(addr);
    assert_eq!(&post(&up).await.unwrap()[..], b"ok");
    assert_eq!(up.pool_snapshot().counters.stale_retries, 0);
    // Reuses the kept-alive connection, which the server drops with the request unanswered.
    assert_eq!(&post(&up).await.unwrap()[..], b"ok");
    let snap = up.pool_snapshot();
    assert_eq!(snap.counters.stale_retries, 1);
    assert_eq!(snap.counters.transparent_retries, 0);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 2);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);
    // The fresh connection is the one kept: it served the retried request.
    let conns = &snap.lanes[1].connections;
    assert_eq!(conns.len(), 1, "{conns:?}");
    assert_eq!(conns[0].requests_served, 1);
    server.abort();
}

#[tokio::test]
async fn a_reused_connection_closed_before_any_response_byte_is_retried_on_a_fresh_one() {
    stale_close_is_retried_once_on_a_fresh_connection(Then::Close).await;
}

#[tokio::test]
async fn a_reused_connection_reset_before_any_response_byte_is_retried_on_a_fresh_one() {
    stale_close_is_retried_once_on_a_fresh_connection(Then::Reset).await;
}

#[tokio::test]
async fn a_fresh_connection_closed_before_any_response_byte_is_not_retried() {
    let (addr, seen, server) = server(|_, _| Then::Close).await;
    let up = upstream_at(addr);
    let err = post(&up).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Closed), "{err:?}");
    assert!(!err.is_retry_safe());
    assert_eq!(up.pool_snapshot().counters.stale_retries, 0);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1, "sent once");
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    server.abort();
}

#[tokio::test]
async fn a_reused_connection_that_began_its_response_is_not_retried() {
    let (addr, seen, server) =
        server(|_, n| if n == 0 { Then::Answer } else { Then::Partial }).await;
    let up = upstream_at(addr);
    post(&up).await.unwrap();
    let err = post(&up).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Closed), "{err:?}");
    assert_eq!(up.pool_snapshot().counters.stale_retries, 0);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2, "never sent again");
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    server.abort();
}

#[tokio::test]
async fn a_reused_connection_that_held_the_request_before_closing_is_not_retried() {
    // Not the idle race: the server had the request for a while (a generation killed, a
    // load balancer's idle timeout), so it may have run it.
    let (addr, seen, server) = server(|_, n| {
        if n == 0 {
            Then::Answer
        } else {
            Then::SlowClose
        }
    })
    .await;
    let up = upstream_at(addr);
    post(&up).await.unwrap();
    let err = post(&up).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Closed), "{err:?}");
    assert_eq!(up.pool_snapshot().counters.stale_retries, 0);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2, "never sent again");
    server.abort();
}

#[tokio::test]
async fn the_stale_retry_happens_once_and_only_on_a_fresh_connection() {
    // The first connection: answered, then kept alive while a second connection is opened
    // and answered. Then a request reuses a connection that drops it, and its retry, on a new
    // connection, is dropped too: no second retry, and the other idle connection (as old) is
    // not tried.
    let (addr, seen, server) = server(|conn, n| match (conn, n) {
        (0 | 1, 0) => Then::Answer,
        _ => Then::Close,
    })
    .await;
    let up = upstream_at(addr);
    let (a, b) = tokio::join!(
        up.send(chat("", NON_STREAM), secs(5)),
        up.send(chat("", NON_STREAM), secs(5))
    );
    for resp in [a.unwrap(), b.unwrap()] {
        read_all(&mut resp.into_body()).await.unwrap();
    }
    assert_eq!(up.stats().idle_http1_connections, 2);
    let err = post(&up).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Closed), "{err:?}");
    assert_eq!(up.pool_snapshot().counters.stale_retries, 1);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 3);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 4);
    assert_eq!(
        up.stats().idle_http1_connections,
        1,
        "the other idle one is kept"
    );
    server.abort();
}
