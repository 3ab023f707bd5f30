//! Issue 15, item 7: compression. The client's `Accept-Encoding: gzip` went upstream, so an
//! upstream that compresses its event stream broke the relay (`upstream_eof_mid_event`, zero
//! events). Streams are now asked for `identity`; an upstream that compresses one anyway is a
//! failed attempt that says why; non-streaming bodies pass compressed and untouched.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::support::*;
use crate::{gateway_at, Setup, CHAT, STREAM};

/// Bytes that are not an event stream, as a gzip body is to an SSE parser.
const GZIPPED: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xcb\x48\xcd\xc9\xc9\x07\x00";

/// An upstream that compresses whenever it is allowed to (or always, with `always`), and
/// records the `Accept-Encoding` it was sent.
async fn compressing_upstream(always: bool) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let seen = seen2.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let ae = req
                            .headers()
                            .get("accept-encoding")
                            .map(|v| v.to_str().unwrap().to_string())
                            .unwrap_or_default();
                        seen.lock().unwrap().push(ae.clone());
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let stream = body.windows(13).any(|w| w == b"\"stream\":true");
                        let gzip = always || ae.contains("gzip");
                        let ct = if stream {
                            "text/event-stream"
                        } else {
                            "application/json"
                        };
                        let mut b = Response::builder().header("content-type", ct);
                        let payload: Bytes = if gzip {
                            b = b.header("content-encoding", "gzip");
                            Bytes::from_static(GZIPPED)
                        } else if stream {
                            Bytes::from_static(b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
                        } else {
                            Bytes::from_static(b"{\"choices\":[]}")
                        };
                        Ok::<_, std::convert::Infallible>(b.body(Full::new(payload)).unwrap())
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

fn with_gzip(body: &str) -> http::Request<Bytes> {
    let mut r = request("POST", "/v1/chat/completions", "", body);
    r.headers_mut()
        .insert("accept-encoding", "gzip, br".parse().unwrap());
    r
}

#[tokio::test]
async fn streams_are_asked_uncompressed_and_other_bodies_pass_compressed() {
    let (up, seen) = compressing_upstream(false).await;
    let gw = gateway_at(
        &format!("http://{up}/v1"),
        Setup {
            protocol: "http1",
            ..Default::default()
        },
    )
    .await;
    let r = h1(gw.addr(), with_gzip(STREAM)).await;
    assert_eq!(r.status, 200);
    let events = sse(&r.body);
    assert_eq!(events.last().unwrap().1, "[DONE]", "{:?}", r.body);
    assert_eq!(seen.lock().unwrap()[0], "identity");
    // A non-streaming body passes as the upstream sent it, with its coding.
    let r = h1(gw.addr(), with_gzip(CHAT)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-encoding"], "gzip");
    assert_eq!(&r.body[..], GZIPPED);
    assert_eq!(seen.lock().unwrap()[1], "gzip, br");
}

#[tokio::test]
async fn a_stream_compressed_anyway_fails_saying_why() {
    let (up, _) = compressing_upstream(true).await;
    let gw = gateway_at(
        &format!("http://{up}/v1"),
        Setup {
            protocol: "http1",
            ..Default::default()
        },
    )
    .await;
    let r = h1(gw.addr(), with_gzip(STREAM)).await;
    let (_, data) = sse(&r.body).pop().expect("an error event");
    let err: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert_ne!(err["error"]["code"], "upstream_eof_mid_event");
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(msg.contains("Content-Encoding `gzip`"), "{msg}");
}
