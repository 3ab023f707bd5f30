//! A frame-level scripted HTTP/2 server, for what no real server does on cue: a GOAWAY whose
//! last-stream-id falls between two open streams while a long stream keeps the connection
//! alive, and a SETTINGS change of MAX_CONCURRENT_STREAMS mid-connection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use sluice_upstream::{Lane, LaneConfig, PoolConfig, Protocol, Upstream, UpstreamConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::support::{read_all, secs};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
/// HPACK: indexed field 8 of the static table, `:status: 200`.
const STATUS_200: &[u8] = &[0x88];

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn settings(max_concurrent_streams: Option<u32>) -> Vec<u8> {
    let mut p = Vec::new();
    if let Some(n) = max_concurrent_streams {
        p.extend_from_slice(&3u16.to_be_bytes());
        p.extend_from_slice(&n.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &p)
}

fn goaway(last_stream_id: u32) -> Vec<u8> {
    let mut p = last_stream_id.to_be_bytes().to_vec();
    p.extend_from_slice(&0u32.to_be_bytes()); // NO_ERROR
    frame(GOAWAY, 0, 0, &p)
}

/// What the script sees: a request's HEADERS on a stream.
struct Opened {
    stream: u32,
}

/// Reads frames, answers SETTINGS and PING as any server must, and reports each new stream.
/// The script writes its frames through `out`.
async fn run_connection(
    tcp: TcpStream,
    first_settings: Vec<u8>,
    opened: mpsc::UnboundedSender<(Opened, mpsc::UnboundedSender<Vec<u8>>)>,
    pong_delay: Arc<dyn Fn(usize) -> Duration + Send + Sync>,
) {
    let (mut rd, mut wr) = tcp.into_split();
    let (out, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        while let Some(f) = out_rx.recv().await {
            if wr.write_all(&f).await.is_err() {
                break;
            }
        }
    });
    let mut preface = [0u8; 24];
    if rd.read_exact(&mut preface).await.is_err() || preface != PREFACE {
        return;
    }
    let _ = out.send(first_settings);
    let mut head = [0u8; 9];
    let mut pings = 0usize;
    while rd.read_exact(&mut head).await.is_ok() {
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5] & 0x7f, head[6], head[7], head[8]]);
        let mut payload = vec![0u8; len];
        if rd.read_exact(&mut payload).await.is_err() {
            break;
        }
        match kind {
            SETTINGS if flags & ACK == 0 => {
                let _ = out.send(frame(SETTINGS, ACK, 0, &[]));
            }
            PING if flags & ACK == 0 => {
                let delay = pong_delay(pings);
                pings += 1;
                let pong = frame(PING, ACK, 0, &payload);
                if delay.is_zero() {
                    let _ = out.send(pong);
                } else {
                    let out = out.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = out.send(pong);
                    });
                }
            }
            HEADERS => {
                let _ = opened.send((Opened { stream }, out.clone()));
            }
            _ => {}
        }
    }
    writer.abort();
}

struct Scripted {
    addr: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
}

/// Accepts connections; connection `i` (0-based) announces `settings_for(i)` and hands its
/// streams to `script(i, ..)`. PINGs are answered at once.
async fn scripted<F>(settings_for: fn(usize) -> Vec<u8>, script: F) -> Scripted
where
    F: Fn(usize, Opened, mpsc::UnboundedSender<Vec<u8>>) + Send + Sync + 'static,
{
    scripted_with_pongs(settings_for, |_, _| Duration::ZERO, script).await
}

/// As [`scripted`], with the `n`-th PONG of connection `i` delayed by `pong_delay(i, n)`.
async fn scripted_with_pongs<F>(
    settings_for: fn(usize) -> Vec<u8>,
    pong_delay: fn(usize, usize) -> Duration,
    script: F,
) -> Scripted
where
    F: Fn(usize, Opened, mpsc::UnboundedSender<Vec<u8>>) + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let script = Arc::new(script);
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let i = count.fetch_add(1, Ordering::SeqCst);
            let (tx, mut rx) = mpsc::unbounded_channel();
            let delay: Arc<dyn Fn(usize) -> Duration + Send + Sync> =
                Arc::new(move |n| pong_delay(i, n));
            tokio::spawn(run_connection(tcp, settings_for(i), tx, delay));
            let script = script.clone();
            tokio::spawn(async move {
                while let Some((opened, out)) = rx.recv().await {
                    script(i, opened, out);
                }
            });
        }
    });
    Scripted { addr, accepted }
}

fn upstream(addr: std::net::SocketAddr, short: LaneConfig) -> Upstream {
    Upstream::new(UpstreamConfig {
        name: "scripted".into(),
        base_url: format!("http://{addr}/v1").parse().unwrap(),
        protocol: Protocol::H2c,
        pool: PoolConfig {
            short,
            ..PoolConfig::default()
        },
        ..UpstreamConfig::default()
    })
    .unwrap()
}

fn get() -> Request<Bytes> {
    let mut r = Request::post("/x").body(Bytes::from_static(b"{}")).unwrap();
    r.extensions_mut().insert(Lane::Short);
    r
}

/// GOAWAY(last_stream_id = 1) arrives while stream 1 streams and stream 3 is open: stream 1
/// finishes on the draining connection, stream 3 (never processed) is retried transparently on
/// a new connection.
#[tokio::test]
async fn goaway_between_open_streams_retries_only_the_unprocessed_one() {
    let server = scripted(
        |_| settings(None),
        |conn, opened, out| {
            match (conn, opened.stream) {
                (0, 1) => {
                    let _ = out.send(frame(HEADERS, END_HEADERS, 1, STATUS_200));
                    let _ = out.send(frame(DATA, 0, 1, b"long "));
                    // Finish the long stream later, after the GOAWAY.
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        let _ = out.send(frame(DATA, END_STREAM, 1, b"stream"));
                    });
                }
                (0, _) => {
                    // Stream 3 arrived: go away, processing nothing above stream 1.
                    let _ = out.send(goaway(1));
                }
                (_, s) => {
                    let _ = out.send(frame(HEADERS, END_HEADERS, s, STATUS_200));
                    let _ = out.send(frame(DATA, END_STREAM, s, b"retried"));
                }
            }
        },
    )
    .await;
    let up = upstream(
        server.addr,
        LaneConfig {
            min_connections: 1,
            max_connections: Some(4),
            max_streams_per_connection: 10,
            ..LaneConfig::default_for(Lane::Short)
        },
    );
    let mut long = up.send(get(), secs(5)).await.unwrap();
    assert_eq!(long.status(), 200);
    let second = up
        .send(get(), secs(5))
        .await
        .expect("retried on another connection");
    let mut second_body = second.into_body();
    assert_eq!(read_all(&mut second_body).await.unwrap(), "retried");
    assert_eq!(
        read_all(long.body_mut()).await.unwrap(),
        "long stream",
        "the stream below last-stream-id finished"
    );
    let snap = up.pool_snapshot();
    assert!(snap.counters.goaways >= 1, "{:?}", snap.counters);
    assert!(
        snap.counters.transparent_retries >= 1,
        "{:?}",
        snap.counters
    );
    assert!(server.accepted.load(Ordering::SeqCst) >= 2);
}

/// The server allows one stream, then raises its limit to two: a request waiting for a slot
/// starts on the same connection as soon as the new SETTINGS arrive.
#[tokio::test]
async fn a_raised_max_concurrent_streams_is_used_without_a_new_connection() {
    let server = scripted(
        |_| settings(Some(1)),
        |_, opened, out| {
            let s = opened.stream;
            let _ = out.send(frame(HEADERS, END_HEADERS, s, STATUS_200));
            if s == 1 {
                let _ = out.send(frame(DATA, 0, 1, b"first "));
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let _ = out.send(settings(Some(2)));
                    tokio::time::sleep(Duration::from_millis(800)).await;
                    let _ = out.send(frame(DATA, END_STREAM, 1, b"done"));
                });
            } else {
                let _ = out.send(frame(DATA, END_STREAM, s, b"second"));
            }
        },
    )
    .await;
    let up = upstream(
        server.addr,
        LaneConfig {
            min_connections: 1,
            max_connections: Some(1),
            max_streams_per_connection: 10,
            ..LaneConfig::default_for(Lane::Short)
        },
    );
    let mut first = up.send(get(), secs(5)).await.unwrap();
    let t0 = tokio::time::Instant::now();
    let second = up.send(get(), secs(5)).await.unwrap();
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(150),
        "it waited for the SETTINGS: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(900),
        "and did not wait for the first stream: {waited:?}"
    );
    let mut body = second.into_body();
    assert_eq!(read_all(&mut body).await.unwrap(), "second");
    assert_eq!(read_all(first.body_mut()).await.unwrap(), "first done");
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    let snap = up.pool_snapshot();
    assert_eq!(
        snap.lanes
            .iter()
            .find(|l| l.lane == Lane::Short)
            .unwrap()
            .connections[0]
            .server_max_streams,
        Some(2)
    );
}

/// Delayed PONGs degrade a connection (no new streams while a healthy one exists); once its
/// PONGs are prompt again it recovers after three good pings.
#[tokio::test]
async fn delayed_pongs_degrade_a_connection_and_prompt_ones_recover_it() {
    // Connection 0 answers its pings 2..=6 after 300 ms, then promptly again; connection 1
    // always promptly.
    let server = scripted_with_pongs(
        |_| settings(None),
        |conn, n| {
            if conn == 0 && (2..=6).contains(&n) {
                Duration::from_millis(300)
            } else {
                Duration::ZERO
            }
        },
        |_, opened, out| {
            let s = opened.stream;
            let _ = out.send(frame(HEADERS, END_HEADERS, s, STATUS_200));
            let _ = out.send(frame(DATA, END_STREAM, s, b"ok"));
        },
    )
    .await;
    let up = Upstream::new(UpstreamConfig {
        name: "scripted".into(),
        base_url: format!("http://{}/v1", server.addr).parse().unwrap(),
        protocol: Protocol::H2c,
        pool: PoolConfig {
            short: LaneConfig {
                min_connections: 2,
                max_connections: Some(2),
                max_streams_per_connection: 10,
                ..LaneConfig::default_for(Lane::Short)
            },
            ping_interval: Duration::from_millis(100),
            degraded_rtt_floor: Duration::from_millis(50),
            ..PoolConfig::default()
        },
        ..UpstreamConfig::default()
    })
    .unwrap();
    // Two requests open the lane's two connections.
    for _ in 0..2 {
        let r = up.send(get(), secs(5)).await.unwrap();
        read_all(&mut r.into_body()).await.unwrap();
    }
    let states = |up: &Upstream| -> Vec<sluice_upstream::ShardState> {
        let snap = up.pool_snapshot();
        let lane = snap.lanes.iter().find(|l| l.lane == Lane::Short).unwrap();
        let mut c: Vec<_> = lane.connections.iter().map(|c| (c.id, c.state)).collect();
        c.sort_by_key(|(id, _)| *id);
        c.into_iter().map(|(_, s)| s).collect()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let st = states(&up);
        if st.first() == Some(&sluice_upstream::ShardState::Degraded) {
            // While degraded, new streams go to the healthy connection only.
            let before = up.pool_snapshot().counters.connects;
            let r = up.send(get(), secs(5)).await.unwrap();
            read_all(&mut r.into_body()).await.unwrap();
            assert_eq!(
                up.pool_snapshot().counters.connects,
                before,
                "no new connection needed"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never degraded: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    loop {
        let st = states(&up);
        if st.first() == Some(&sluice_upstream::ShardState::Ready) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never recovered: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(up.pool_snapshot().counters.degradations >= 1);
}
