//! The HTTP/1.1 client codec against a raw TCP server, for wire forms the mock never sends:
//! chunk extensions and trailers, a body delimited by the close, `Connection: close`, interim
//! responses, a head split byte by byte, oversized and garbage heads, a body cut short or
//! followed by stray bytes, a chunked stream that must be passed on chunk by chunk, and a
//! server closing an idle kept-alive connection.
//!
//! Each connection runs a script: per request (read whole), what to write, and then whether to
//! keep the connection open, close it at once, or close it a little later.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use sluice_upstream::{BodyError, Protocol, Upstream, UpstreamConfig, UpstreamError};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::support::{read_all, read_request, secs};

/// What a connection does after writing an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Keep,
    Close,
    /// Close 50 ms later, while the connection sits idle in the client's pool.
    CloseSoon,
}

/// One answer: written piece by piece (each piece flushed on its own), then `after`.
struct Answer {
    pieces: Vec<Vec<u8>>,
    /// Waited for before each piece after the first (set for a streamed answer).
    gate: Option<Arc<Notify>>,
    after: After,
}

impl Answer {
    fn whole(bytes: &[u8], after: After) -> Answer {
        Answer {
            pieces: vec![bytes.to_vec()],
            gate: None,
            after,
        }
    }
}

type Script = Arc<dyn Fn(usize, usize) -> Answer + Send + Sync>;

struct Server {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(script: impl Fn(usize, usize) -> Answer + Send + Sync + 'static) -> Server {
    let script: Script = Arc::new(script);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((tcp, _)) = listener.accept().await {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            conns.spawn(serve(tcp, n, script.clone()));
        }
    });
    Server {
        addr,
        connections,
        task,
    }
}

async fn serve(mut tcp: TcpStream, conn: usize, script: Script) {
    // Each piece leaves in its own segment.
    tcp.set_nodelay(true).unwrap();
    for n in 0.. {
        if !read_request(&mut tcp).await {
            return;
        }
        let answer = script(conn, n);
        for (i, piece) in answer.pieces.iter().enumerate() {
            if i > 0 {
                match &answer.gate {
                    Some(gate) => gate.notified().await,
                    None => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            }
            if tcp.write_all(piece).await.is_err() || tcp.flush().await.is_err() {
                return;
            }
        }
        match answer.after {
            After::Keep => {}
            After::Close => return,
            After::CloseSoon => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                return;
            }
        }
    }
}

fn upstream(server: &Server) -> Upstream {
    Upstream::new(UpstreamConfig {
        name: "raw".into(),
        base_url: format!("http://{}/v1", server.addr).parse().unwrap(),
        protocol: Protocol::Http1,
        ..UpstreamConfig::default()
    })
    .unwrap()
}

fn get() -> Request<Bytes> {
    Request::get("/models").body(Bytes::new()).unwrap()
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// Sends a GET and reads the body whole.
async fn fetch(up: &Upstream) -> Result<(http::response::Parts, Bytes), UpstreamError> {
    let resp = up.send(get(), secs(5)).await?;
    let (parts, mut body) = resp.into_parts();
    Ok((parts, read_all(&mut body).await.unwrap()))
}

#[tokio::test]
async fn chunk_extensions_are_ignored_and_trailers_come_as_the_last_frame() {
    let server = start(|_, _| {
        Answer::whole(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
              5;name=value\r\nhello\r\n6 ; a=\"b\"\r\n world\r\n\
              0\r\nx-checksum: abc\r\nx-other: 1\r\n\r\n",
            After::Keep,
        )
    })
    .await;
    let up = upstream(&server);
    for _ in 0..2 {
        let resp = up.send(get(), secs(5)).await.unwrap();
        assert_eq!(resp.headers()["transfer-encoding"], "chunked");
        let collected = resp.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned().expect("trailers");
        assert_eq!(trailers["x-checksum"], "abc");
        assert_eq!(trailers["x-other"], "1");
        assert_eq!(&collected.to_bytes()[..], b"hello world");
    }
    assert_eq!(
        server.connections.load(Ordering::SeqCst),
        1,
        "a chunked response read to its end leaves the connection reusable"
    );
}

#[tokio::test]
async fn a_body_delimited_by_the_close_is_read_to_eof_and_not_reused() {
    let server = start(|_, _| {
        Answer::whole(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it",
            After::Close,
        )
    })
    .await;
    let up = upstream(&server);
    for _ in 0..2 {
        let (parts, body) = fetch(&up).await.unwrap();
        assert_eq!(parts.status, 200);
        assert_eq!(&body[..], b"all of it");
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
    assert_eq!(up.stats().idle_http1_connections, 0);
}

#[tokio::test]
async fn connection_close_in_the_response_is_honoured_though_the_server_keeps_it_open() {
    let server = start(|_, _| {
        Answer::whole(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
            After::Keep,
        )
    })
    .await;
    let up = upstream(&server);
    for _ in 0..2 {
        assert_eq!(&fetch(&up).await.unwrap().1[..], b"ok");
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
    // An HTTP/1.0 answer without keep-alive is not reused either.
    let old = server_10().await;
    let up = upstream(&old);
    for _ in 0..2 {
        let (parts, body) = fetch(&up).await.unwrap();
        assert_eq!(parts.version, http::Version::HTTP_10);
        assert_eq!(&body[..], b"ok");
    }
    assert_eq!(old.connections.load(Ordering::SeqCst), 2);
}

async fn server_10() -> Server {
    start(|_, _| {
        Answer::whole(
            b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
            After::Keep,
        )
    })
    .await
}

#[tokio::test]
async fn interim_responses_before_the_answer_are_skipped() {
    let server = start(|_, _| Answer {
        pieces: vec![
            b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(),
            b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n".to_vec(),
            OK.to_vec(),
        ],
        gate: None,
        after: After::Keep,
    })
    .await;
    let up = upstream(&server);
    for _ in 0..2 {
        let (parts, body) = fetch(&up).await.unwrap();
        assert_eq!(parts.status, 200);
        assert!(
            !parts.headers.contains_key("link"),
            "hints are not the answer"
        );
        assert_eq!(&body[..], b"ok");
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_response_split_byte_by_byte_is_reassembled() {
    let whole: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-long-header: abcdefgh\r\n\
                         transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    let server = start(move |_, _| Answer {
        pieces: whole.iter().map(|b| vec![*b]).collect(),
        gate: None,
        after: After::Keep,
    })
    .await;
    let up = upstream(&server);
    let (parts, body) = fetch(&up).await.unwrap();
    assert_eq!(parts.headers["x-long-header"], "abcdefgh");
    assert_eq!(&body[..], b"abcde");
    // And the connection is reused afterwards.
    fetch(&up).await.unwrap();
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_head_over_the_limit_is_a_protocol_error() {
    let mut big = b"HTTP/1.1 200 OK\r\nx-big: ".to_vec();
    big.resize(70 * 1024, b'a');
    big.extend_from_slice(b"\r\ncontent-length: 0\r\n\r\n");
    let server = start(move |_, _| Answer::whole(&big, After::Keep)).await;
    let up = upstream(&server);
    let err = fetch(&up).await.unwrap_err();
    match &err {
        UpstreamError::Protocol(msg) => {
            assert!(
                msg.contains("response head larger than 65536 bytes"),
                "{msg}"
            )
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert_eq!(err.metric_label(), "protocol");
    assert!(!err.is_retry_safe());
}

#[tokio::test]
async fn a_garbage_status_line_is_a_protocol_error() {
    let server = start(|_, _| Answer::whole(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", After::Keep)).await;
    let up = upstream(&server);
    let err = fetch(&up).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Protocol(_)), "{err:?}");
    assert!(err.to_string().contains("malformed response head"), "{err}");
    // So is a 101 to a request that asked for no upgrade.
    let upgrading = start(|_, _| {
        Answer::whole(
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n",
            After::Keep,
        )
    })
    .await;
    let err = fetch(&upstream(&upgrading)).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Protocol(_)), "{err:?}");
}

#[tokio::test]
async fn a_body_cut_short_is_incomplete_and_bytes_past_its_end_discard_the_connection() {
    let server = start(|conn, _| {
        if conn == 0 {
            Answer::whole(
                b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
                After::Close,
            )
        } else {
            Answer::whole(
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n",
                After::Keep,
            )
        }
    })
    .await;
    let up = upstream(&server);
    let resp = up.send(get(), secs(5)).await.unwrap();
    let err = read_all(&mut resp.into_body()).await.unwrap_err();
    assert!(matches!(err, BodyError::Incomplete), "{err:?}");
    assert_eq!(err.metric_label(), "incomplete");
    // A response followed by bytes nobody asked for: the body is fine, the connection is not
    // kept (the stray bytes would be read as the next answer).
    for _ in 0..2 {
        assert_eq!(&fetch(&up).await.unwrap().1[..], b"ok");
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 3);
    assert_eq!(up.stats().idle_http1_connections, 0);
}

#[tokio::test]
async fn each_chunk_of_a_stream_is_passed_on_as_it_arrives() {
    // The server sends the next chunk only once the client has seen the previous one: a
    // client waiting to fill a buffer would never see the first.
    let gate = Arc::new(Notify::new());
    let server_gate = gate.clone();
    let server = start(move |_, _| Answer {
        pieces: vec![
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
              transfer-encoding: chunked\r\n\r\n"
                .to_vec(),
            b"d\r\ndata: first\n\n\r\n".to_vec(),
            b"e\r\ndata: second\n\n\r\n".to_vec(),
            b"0\r\n\r\n".to_vec(),
        ],
        gate: Some(server_gate.clone()),
        after: After::Keep,
    })
    .await;
    let up = upstream(&server);
    let resp = up.send(get(), secs(5)).await.unwrap();
    let mut body = resp.into_body();
    gate.notify_one();
    let mut events = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("a chunk in time");
        let Some(frame) = next else { break };
        let data = frame.unwrap().into_data().unwrap();
        events.push(String::from_utf8(data.to_vec()).unwrap());
        gate.notify_one();
    }
    assert_eq!(events, ["data: first\n\n", "data: second\n\n"]);
    assert!(http_body::Body::is_end_stream(&body));
}

#[tokio::test]
async fn a_head_request_has_no_body_whatever_its_length_says() {
    let server = start(|_, _| {
        Answer::whole(
            b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n",
            After::Keep,
        )
    })
    .await;
    let up = upstream(&server);
    for _ in 0..2 {
        let req = Request::head("/models").body(Bytes::new()).unwrap();
        let resp = up.send(req, secs(5)).await.unwrap();
        assert_eq!(resp.headers()["content-length"], "1000");
        let body = resp.into_body();
        assert!(http_body::Body::is_end_stream(&body));
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(0));
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_whole_small_response_needs_no_read_after_its_head() {
    let server = start(|_, _| Answer::whole(OK, After::Keep)).await;
    let up = upstream(&server);
    let resp = up.send(get(), secs(5)).await.unwrap();
    let mut body = resp.into_body();
    assert_eq!(http_body::Body::size_hint(&body).exact(), Some(2));
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "ok");
    // The frame that completed the body ended it: nothing more to poll, and the connection is
    // already back in the pool.
    assert!(http_body::Body::is_end_stream(&body));
    assert_eq!(up.stats().idle_http1_connections, 1);
}

#[tokio::test]
async fn an_idle_connection_the_server_closed_is_replaced_without_a_retry() {
    let server = start(|_, _| Answer::whole(OK, After::CloseSoon)).await;
    let up = upstream(&server);
    assert_eq!(&fetch(&up).await.unwrap().1[..], b"ok");
    assert_eq!(up.stats().idle_http1_connections, 1);
    // The server's FIN reaches the idle connection.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(&fetch(&up).await.unwrap().1[..], b"ok");
    let snap = up.pool_snapshot();
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
    assert_eq!(
        snap.counters.stale_retries, 0,
        "seen closed before use, not by a failed request"
    );
    assert_eq!(snap.counters.connects, 2);
}
