//! HTTP/1.1 on hyper's server connection API.

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, Notify};
use tokio::time::{sleep, sleep_until, Instant};

use crate::conn::ConnCtx;
use crate::emit::{self, Aborted, Gone, Sink};
use crate::knobs::{Behavior, SILENT_LIMIT};
use crate::route::{self, NoReply, Reply, REQUEST_ID_HEADER};
use crate::stats::{CloseReason, Outcome, ReqStats};

/// hyper's write buffer is kept small so that a client that stops reading blocks the mock's
/// writes soon, as a real server's would, instead of after hundreds of kilobytes.
const MAX_BUF: usize = 64 * 1024;

/// Serves one HTTP/1.1 connection.
pub(crate) async fn serve<IO>(io: IO, ctx: ConnCtx)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let seen = Arc::new(AtomicU32::new(0));
    let keep_alive = Arc::new(KeepAlive::new());
    let idle_timeout = ctx.cfg.h1_idle_timeout;
    let conn_stats = ctx.conn.clone();
    let ka = keep_alive.clone();
    let svc = service_fn(move |req| handle(req, ctx.clone(), seen.clone(), ka.clone()));
    // The connection's error (a client that left mid-response, an injected abort) is the
    // expected end of many tests; the stats record it per request.
    let conn = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_BUF)
        .serve_connection(TokioIo::new(io), svc);
    let Some(timeout) = idle_timeout else {
        let _ = conn.await;
        return;
    };
    tokio::pin!(conn);
    tokio::select! {
        _ = &mut conn => {}
        () = keep_alive.expired(timeout) => {
            // Dropping the connection closes the socket (FIN), as a server's keep-alive
            // timeout does; a request racing it in is lost, as it would be for real.
            conn_stats.closed_by_server(CloseReason::IdleTimeout);
        }
    }
}

/// When the connection last had nothing in flight: the clock of `h1_idle_timeout` and
/// `h1_stale_close`.
#[derive(Debug)]
struct KeepAlive {
    state: Mutex<KaState>,
    changed: Notify,
}

#[derive(Debug)]
struct KaState {
    /// Requests whose response has not ended.
    busy: u32,
    /// When the last response ended (or the connection opened).
    idle_since: Instant,
    /// Responses ended: a connection with one is a kept-alive connection.
    served: u64,
}

impl KeepAlive {
    fn new() -> Self {
        KeepAlive {
            state: Mutex::new(KaState {
                busy: 0,
                idle_since: Instant::now(),
                served: 0,
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, KaState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request arrived. Returns its guard and, on a kept-alive connection that had nothing
    /// in flight, how long it was idle.
    fn begin(self: &Arc<Self>) -> (Busy, Option<Duration>) {
        let mut st = self.lock();
        let idle = (st.served > 0 && st.busy == 0).then(|| st.idle_since.elapsed());
        st.busy += 1;
        (Busy(self.clone()), idle)
    }

    /// Resolves once nothing has been in flight for `timeout`.
    async fn expired(&self, timeout: Duration) {
        loop {
            let deadline = {
                let st = self.lock();
                (st.busy == 0).then_some(st.idle_since + timeout)
            };
            match deadline {
                Some(d) if Instant::now() >= d => return,
                Some(d) => tokio::select! {
                    () = sleep_until(d) => {}
                    () = self.changed.notified() => {}
                },
                None => self.changed.notified().await,
            }
        }
    }
}

/// A request in flight; dropped when its response body ends (or is abandoned).
#[derive(Debug)]
struct Busy(Arc<KeepAlive>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.busy = st.busy.saturating_sub(1);
        st.served += 1;
        st.idle_since = Instant::now();
        drop(st);
        self.0.changed.notify_one();
    }
}

/// Why the mock ends an HTTP/1.1 connection without a response; hyper closes it.
#[derive(Debug, thiserror::Error)]
enum NoResponse {
    /// The `refuse` fault.
    #[error("request refused by the mock's refuse fault")]
    Refused,
    /// A fault after the request was processed (`reset_before_headers`, `fail_with`,
    /// `silent` giving up).
    #[error("connection closed by a mock fault after processing the request")]
    Fault,
    /// `h1_stale_close`.
    #[error("stale keep-alive connection closed by the mock")]
    Stale,
    /// The client left while the body was read.
    #[error("the client left while the request body was read")]
    Gone,
}

/// A response body fed by the emitter through a one-chunk channel.
pub(crate) struct H1Body {
    rx: Option<mpsc::Receiver<Result<Bytes, Aborted>>>,
    once: Option<Bytes>,
    len: Option<u64>,
    /// For a `once` body: the request to mark completed when hyper takes the bytes.
    req: Option<ReqStats>,
    /// Keeps the connection busy until the body is done.
    _busy: Option<Busy>,
}

impl H1Body {
    fn once(b: Bytes, req: Option<ReqStats>, busy: Busy) -> Self {
        H1Body {
            rx: None,
            len: Some(b.len() as u64),
            once: Some(b),
            req,
            _busy: Some(busy),
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

fn json_response(status: StatusCode, body: Bytes, busy: Busy) -> Response<H1Body> {
    let mut resp = Response::new(H1Body::once(body, None, busy));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

async fn handle(
    req: Request<Incoming>,
    ctx: ConnCtx,
    seen: Arc<AtomicU32>,
    keep_alive: Arc<KeepAlive>,
) -> Result<Response<H1Body>, NoResponse> {
    let (busy, idle) = keep_alive.begin();
    let (parts, mut body) = req.into_parts();
    let path = parts.uri.path().to_string();
    if route::is_admin(&path) {
        let reply = route::admin(
            &parts.method,
            &parts.uri,
            &parts.headers,
            &ctx.stats,
            &ctx.cfg,
        );
        let Reply::Full { status, body, .. } = reply else {
            unreachable!("admin replies are full")
        };
        return Ok(json_response(status, body, busy));
    }
    if let (Some(limit), Some(idle)) = (ctx.cfg.h1_stale_close, idle) {
        if idle >= limit {
            // The server "closed" this connection before the request came: not processed.
            ctx.conn.closed_by_server(CloseReason::StaleClose);
            if ctx.cfg.h1_stale_close_rst {
                ctx.close_with_rst();
            }
            return Err(NoResponse::Stale);
        }
    }
    let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
    let behavior = route::behavior(&parts.headers, route::defaults_for(&path, &ctx.cfg));
    let mut goaway_after = ctx.cfg.defaults.goaway_after;
    if let Ok(b) = &behavior {
        if b.refuse {
            ctx.conn.refused_stream();
            return Err(NoResponse::Refused);
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
            return Err(NoResponse::Gone);
        }
        (Err(e), _) => (route::knob_error(&path, &e), Behavior::default()),
        (Ok(b), Err(None)) => (route::too_large(&path), b),
        (Ok(b), Ok(bytes)) => {
            req.set_body(&bytes, ctx.cfg.max_recorded_body);
            let r = route::Request {
                method: &parts.method,
                uri: &parts.uri,
                headers: &parts.headers,
                body: &bytes,
            };
            let routed = route::route(&r, &b, &ctx.cfg);
            req.set_routed(&routed.routing);
            (routed.reply, b)
        }
    };
    req.set_status(reply.status());
    let mut reply = reply;
    let extra = match &mut reply {
        Reply::Nothing(how) => return Err(no_reply(*how, &ctx, &req).await),
        Reply::Full { headers, .. } => std::mem::take(headers),
        Reply::Stream(..) => Vec::new(),
    };
    let mut resp = Response::new(H1Body {
        rx: None,
        once: None,
        len: None,
        req: None,
        _busy: None,
    });
    *resp.status_mut() = StatusCode::from_u16(reply.status()).unwrap_or(StatusCode::OK);
    let h = resp.headers_mut();
    h.insert(REQUEST_ID_HEADER, HeaderValue::from(req.id));
    if close {
        h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    for (name, value) in extra {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
    match reply {
        Reply::Full { status, body, .. } => {
            if status == StatusCode::OK && !b.ttft.is_zero() {
                // Generation time before the headers. If the client leaves meanwhile, hyper
                // drops this future and `req`'s drop records the cancel.
                sleep(b.ttft).await;
            }
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            // hyper takes the whole body at once and writes it under its own backpressure;
            // no task or channel is needed, which keeps small requests cheap.
            *resp.body_mut() = H1Body::once(body, Some(req), busy);
        }
        Reply::Stream(seq, framing) => {
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(framing.content_type()),
            );
            h.insert(
                http::header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache"),
            );
            let (tx, rx) = mpsc::channel(1);
            resp.body_mut().rx = Some(rx);
            resp.body_mut()._busy = Some(busy);
            // The task ends when the stream does or when hyper drops the body (client gone).
            tokio::spawn(async move { emit::stream(Sink::H1(tx), &*seq, &b, &req, framing).await });
        }
        Reply::Nothing(_) => unreachable!("handled above"),
    }
    Ok(resp)
}

/// A processed request that gets no response: hyper closes the connection when the handler
/// fails. `silent` first waits for the client to leave (hyper drops this future then, and the
/// request is recorded as cancelled), giving up after [`SILENT_LIMIT`].
async fn no_reply(how: NoReply, ctx: &ConnCtx, req: &ReqStats) -> NoResponse {
    match how {
        NoReply::Silent => sleep(SILENT_LIMIT).await,
        NoReply::Close => ctx.conn.closed_by_server(CloseReason::FaultClose),
        NoReply::Reset => {}
    }
    req.end(Outcome::Aborted);
    NoResponse::Fault
}
