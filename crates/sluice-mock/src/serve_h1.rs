//! HTTP/1.1 on hyper's server connection API.

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::sleep;

use crate::conn::ConnCtx;
use crate::emit::{self, Aborted, Gone, Sink};
use crate::knobs::Behavior;
use crate::route::{self, Reply, REQUEST_ID_HEADER};
use crate::stats::{Outcome, ReqStats};

/// hyper's write buffer is kept small so that a client that stops reading blocks the mock's
/// writes soon, as a real server's would, instead of after hundreds of kilobytes.
const MAX_BUF: usize = 64 * 1024;

/// Serves one HTTP/1.1 connection.
pub(crate) async fn serve<IO>(io: IO, ctx: ConnCtx)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let seen = Arc::new(AtomicU32::new(0));
    let svc = service_fn(move |req| handle(req, ctx.clone(), seen.clone()));
    // The connection's error (a client that left mid-response, an injected abort) is the
    // expected end of many tests; the stats record it per request.
    let _ = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_BUF)
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

/// The `refuse` fault on HTTP/1.1: hyper closes the connection without a response.
#[derive(Debug, thiserror::Error)]
#[error("request refused by the mock's refuse fault")]
struct Refused;

/// A response body fed by the emitter through a one-chunk channel.
pub(crate) struct H1Body {
    rx: Option<mpsc::Receiver<Result<Bytes, Aborted>>>,
    once: Option<Bytes>,
    len: Option<u64>,
    /// For a `once` body: the request to mark completed when hyper takes the bytes.
    req: Option<ReqStats>,
}

impl H1Body {
    fn once(b: Bytes, req: Option<ReqStats>) -> Self {
        H1Body {
            rx: None,
            len: Some(b.len() as u64),
            once: Some(b),
            req,
        }
    }
}

impl Body for H1Body {
    type Data = Bytes;
    type Error = Aborted;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Aborted>>> {
        if let Some(b) = self.once.take() {
            if let Some(req) = self.req.take() {
                req.sent(b.len(), 0, Duration::ZERO);
                req.end(Outcome::Completed);
            }
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        match self.rx.as_mut() {
            None => Poll::Ready(None),
            Some(rx) => rx.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data))),
        }
    }

    fn size_hint(&self) -> SizeHint {
        self.len
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

async fn read_body(body: &mut Incoming, slow_read: Option<u64>) -> Result<Bytes, Option<Gone>> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| Some(Gone::ConnectionClosed))?;
        if let Ok(chunk) = frame.into_data() {
            if let Some(rate) = slow_read {
                sleep(Duration::from_secs_f64(chunk.len() as f64 / rate as f64)).await;
            }
            if buf.len() + chunk.len() > route::MAX_REQUEST_BODY {
                return Err(None);
            }
            buf.extend_from_slice(&chunk);
        }
    }
    Ok(buf.freeze())
}

async fn handle(
    req: Request<Incoming>,
    ctx: ConnCtx,
    seen: Arc<AtomicU32>,
) -> Result<Response<H1Body>, Refused> {
    let (parts, mut body) = req.into_parts();
    let path = parts.uri.path().to_string();
    if route::is_admin(&path) {
        let Reply::Full { status, body, .. } = route::admin(&parts.method, &parts.uri, &ctx.stats)
        else {
            unreachable!("admin replies are full")
        };
        let mut resp = Response::new(H1Body::once(body, None));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return Ok(resp);
    }
    let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
    let behavior = route::behavior(&parts.headers, &ctx.cfg.defaults);
    let mut goaway_after = ctx.cfg.defaults.goaway_after;
    if let Ok(b) = &behavior {
        if b.refuse {
            ctx.conn.refused_stream();
            return Err(Refused);
        }
        if let Some(rate) = b.degrade {
            ctx.rate.set(rate);
            ctx.conn.degrade(rate);
        }
        goaway_after = b.goaway_after.or(goaway_after);
    }
    // HTTP/1.1's GOAWAY: this response is the connection's last.
    let close = goaway_after.is_some_and(|g| n >= g);
    if close {
        ctx.conn.goaway();
    }
    let req = ctx.conn.open_request(0, &parts);
    let read = read_body(&mut body, behavior.as_ref().ok().and_then(|b| b.slow_read)).await;
    drop(body);
    let (reply, b) = match (behavior, read) {
        (_, Err(Some(gone))) => {
            req.end(gone.outcome());
            return Err(Refused);
        }
        (Err(e), _) => (route::knob_error(&path, &e), Behavior::default()),
        (Ok(b), Err(None)) => (route::too_large(&path), b),
        (Ok(b), Ok(bytes)) => {
            let routed = route::route(&parts.method, &path, &parts.headers, &bytes, &b);
            req.set_model(routed.model, routed.stream);
            (routed.reply, b)
        }
    };
    let status = reply.status();
    req.set_status(status.as_u16());
    let mut resp = Response::new(H1Body {
        rx: None,
        once: None,
        len: None,
        req: None,
    });
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(REQUEST_ID_HEADER, HeaderValue::from(req.id));
    if close {
        h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    match reply {
        Reply::Full {
            body, retry_after, ..
        } => {
            if status == StatusCode::OK && !b.ttft.is_zero() {
                // Generation time before the headers. If the client leaves meanwhile, hyper
                // drops this future and `req`'s drop records the cancel.
                sleep(b.ttft).await;
            }
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            if let Some(s) = retry_after {
                h.insert(http::header::RETRY_AFTER, HeaderValue::from(s));
            }
            // hyper takes the whole body at once and writes it under its own backpressure;
            // no task or channel is needed, which keeps small requests cheap.
            *resp.body_mut() = H1Body::once(body, Some(req));
        }
        Reply::Stream(seq) => {
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            h.insert(
                http::header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache"),
            );
            let (tx, rx) = mpsc::channel(1);
            resp.body_mut().rx = Some(rx);
            // The task ends when the stream does or when hyper drops the body (client gone).
            tokio::spawn(async move { emit::stream(Sink::H1(tx), &*seq, &b, &req).await });
        }
    }
    Ok(resp)
}
