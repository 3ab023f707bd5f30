//! One request at the edge, before the request path proper: who the client is, the cheap
//! refusals (a blocked address, a connection over its request rate, a bad `Host`, a spent
//! memory budget) that cost no body read and no upstream work, the body's timeouts and memory
//! charge; and the response on its way out: sent in pieces so that a client that does not
//! take it is noticed, and counted as cancelled when the client drops it.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::body::IngressBody;
use super::metrics::RequestRefusal;
use super::watch::{CloseReason, ConnTracker};
use super::Ingress;
use crate::body_budget::BodyLease;
use crate::error::GatewayError;
use crate::headers;
use crate::request::{self, GatewayBody};

/// A non-streaming response goes to the connection in pieces of this size, so that a client
/// that stops taking it is seen within `client_timeouts.send` (hyper asks for the next piece
/// only when it could write the last).
const SEND_PIECE: usize = 64 * 1024;

/// A request past the edge's checks, ready for the request path.
pub(crate) struct Accepted {
    state: Arc<crate::generation::Generation>,
    req: Request<IngressBody<Incoming>>,
    guard: RequestGuard,
    lease: Arc<BodyLease>,
    conn: Arc<ConnTracker>,
}

/// What the edge made of a request.
pub(crate) enum Edge {
    /// Ready to be served.
    Accepted(Accepted),
    /// Refused: the answer.
    Refused(Response<ClientBody>),
}

/// The edge's checks on one request from a client connection. Reads nothing, waits for
/// nothing.
pub(crate) fn accept(ing: Arc<Ingress>, conn: Arc<ConnTracker>, req: Request<Incoming>) -> Edge {
    let started = Instant::now();
    let mut guard = RequestGuard::new(ing.clone(), conn.clone(), started);
    let (mut parts, body) = req.into_parts();
    let client = ing
        .trusted
        .resolve_with(conn.peer, conn.peer_header.as_ref(), &mut parts.headers);
    guard.client_ip = client.ip;
    headers::drop_invalid_request_id(&mut parts.headers);
    if let Some(refused) = precheck(&ing, &conn, &parts, client.ip) {
        return Edge::Refused(ClientBody::wrap(refused, guard, None, &conn));
    }
    let lease = BodyLease::new(ing.budget.clone());
    // The config generation this request runs on, to its end, whatever reloads meanwhile.
    let state = ing.state.load_full();
    let max = state.config.server.max_request_body;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n <= max);
    // A declared length is charged before a byte is read: over budget, the answer is
    // immediate and the body never read.
    let prepaid = match declared {
        Some(n) => lease.charge(n).map(|()| n),
        None if ing.budget.used() >= ing.budget.limit() => Err(crate::body_budget::OverBudget {
            limit: ing.budget.limit(),
        }),
        None => Ok(0),
    };
    let prepaid = match prepaid {
        Ok(n) => n,
        Err(o) => {
            ing.metrics.request_refused(RequestRefusal::MemoryBudget);
            let e = GatewayError::OverBudget { limit: o.limit };
            let r = refusal(&ing, &parts, &e, Some(Duration::from_secs(1)));
            return Edge::Refused(ClientBody::wrap(r, guard, None, &conn));
        }
    };
    let to = ing.timeouts;
    let body = IngressBody::new(body, lease.clone(), prepaid, started, to.body_idle, to.body);
    Edge::Accepted(Accepted {
        state,
        req: Request::from_parts(parts, body),
        guard,
        lease,
        conn,
    })
}

impl Accepted {
    /// Serves the request, its admission stage's future held inline (HTTP/1.1: the
    /// connection's one request slot, reused).
    pub(crate) fn serve(self) -> impl Future<Output = Response<ClientBody>> + Send + 'static {
        let Accepted {
            state,
            req,
            guard,
            lease,
            conn,
        } = self;
        async move {
            let edge = request::EdgeFacts {
                client_ip: guard.client_ip,
                started: guard.started,
                lease: lease.clone(),
            };
            let resp = match request::admission(state, req, edge).await {
                request::Admission::Answer(r) => r,
                request::Admission::Run(run) => run.serve().await,
            };
            ClientBody::wrap(resp, guard, Some(lease), &conn)
        }
    }

    /// Serves the request, its admission stage's future boxed (HTTP/2): that future is large
    /// and short-lived, and freed when the attempts start, so that a stream's future, held
    /// until its response head, keeps only the attempts' room.
    pub(crate) fn serve_boxed(self) -> impl Future<Output = Response<ClientBody>> + Send + 'static {
        let Accepted {
            state,
            req,
            guard,
            lease,
            conn,
        } = self;
        // Made here, not in the `async` block: captured there, the request would keep its
        // room in the stream's future.
        let edge = request::EdgeFacts {
            client_ip: guard.client_ip,
            started: guard.started,
            lease: lease.clone(),
        };
        let admission = Box::pin(request::admission(state, req, edge));
        async move {
            // Taken out of the admission's answer before the attempts' wait: held in it, the
            // answer's place would be held beside them.
            let run = match admission.await {
                request::Admission::Answer(r) => {
                    return ClientBody::wrap(r, guard, Some(lease), &conn)
                }
                request::Admission::Run(run) => run,
            };
            let mut resp = run.serve().await;
            // The upstream's headers, on their way into this connection's HPACK table.
            headers::never_index(resp.headers_mut());
            ClientBody::wrap(resp, guard, Some(lease), &conn)
        }
    }
}

/// The refusals that cost nothing: no body read, no routing, no upstream.
fn precheck(
    ing: &Ingress,
    conn: &ConnTracker,
    parts: &http::request::Parts,
    client_ip: IpAddr,
) -> Option<Response<GatewayBody>> {
    if let Some(left) = ing.resets.blocked(client_ip) {
        ing.metrics.request_refused(RequestRefusal::Blocked);
        let e = GatewayError::TooManyCancels { retry_after: left };
        return Some(refusal(ing, parts, &e, Some(left)));
    }
    if !conn.take_request_token() {
        ing.metrics.request_refused(RequestRefusal::RequestRate);
        let e = GatewayError::RequestRate {
            limit: ing.request_rate.unwrap_or(0),
        };
        return Some(refusal(ing, parts, &e, Some(Duration::from_secs(1))));
    }
    if let Err(why) = check_host(parts) {
        ing.metrics.request_refused(RequestRefusal::InvalidHost);
        return Some(refusal(ing, parts, &GatewayError::BadHost(why), None));
    }
    None
}

/// RFC 9112 §3.2: an HTTP/1.1 request carries exactly one `Host` header, and a server answers
/// 400 to one without, or with several. (HTTP/1.0 may omit it; HTTP/2 names the authority in
/// `:authority`, but several `Host` headers are still refused.)
fn check_host(parts: &http::request::Parts) -> Result<(), &'static str> {
    let hosts = parts.headers.get_all(header::HOST).iter().count();
    if hosts > 1 {
        return Err("the request has several Host headers; send exactly one (RFC 9112 §3.2)");
    }
    if hosts == 0 && parts.version == Version::HTTP_11 {
        return Err("an HTTP/1.1 request needs a Host header (RFC 9112 §3.2)");
    }
    Ok(())
}

/// A refusal in the client API's error format. The body was not read, so an HTTP/1.1
/// connection is closed after it.
fn refusal(
    ing: &Ingress,
    parts: &http::request::Parts,
    e: &GatewayError,
    retry_after: Option<Duration>,
) -> Response<GatewayBody> {
    let family = crate::route::family_of(parts.uri.path());
    let request_id = ing.state.load().request_id(parts);
    let mut r = crate::request::error_response(family, e, &request_id);
    let h = r.headers_mut();
    if let Some(d) = retry_after {
        h.insert(header::RETRY_AFTER, crate::headers::retry_after(d));
    }
    if parts.version < Version::HTTP_2 {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// One request in flight on its connection, from its head to the end of its response. Dropped
/// before the response ended (and not by the gateway), the request was cancelled by its client.
pub(crate) struct RequestGuard {
    ing: Arc<Ingress>,
    conn: Arc<ConnTracker>,
    client_ip: IpAddr,
    /// When the request arrived (its edge checks began): the whole request is timed from here.
    started: Instant,
    done: bool,
}

impl RequestGuard {
    fn new(ing: Arc<Ingress>, conn: Arc<ConnTracker>, started: Instant) -> Self {
        conn.request_started();
        let client_ip = conn.peer_ip();
        RequestGuard {
            ing,
            conn,
            client_ip,
            started,
            done: false,
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.conn.request_ended();
        // Ended by the gateway (a closing connection, a shutdown) is not the client's cancel.
        if !self.done && self.conn.closing().is_none() && !self.ing.draining.is_cancelled() {
            self.ing.cancelled(&self.conn, self.client_ip);
        }
    }
}

/// The response body on its way to the client.
pub(crate) struct ClientBody {
    inner: GatewayBody,
    /// What is left of a non-streaming body's buffer, handed out in pieces.
    rest: Bytes,
    /// A non-streaming body (its size is known): timed by `client_timeouts.send`.
    whole: bool,
    /// Registered with the connection as a response being sent.
    sending: bool,
    /// A piece was handed out: the next one stamps the send's progress (the first goes right
    /// after `send_started`'s stamp, and a small answer is one piece: no clock read for it).
    handed_one: bool,
    guard: Option<RequestGuard>,
    conn: Arc<ConnTracker>,
    /// Keeps the request's memory charge until the client has the body.
    _lease: Option<Arc<BodyLease>>,
}

impl ClientBody {
    fn wrap(
        resp: Response<GatewayBody>,
        guard: RequestGuard,
        lease: Option<Arc<BodyLease>>,
        conn: &Arc<ConnTracker>,
    ) -> Response<ClientBody> {
        resp.map(|inner| {
            let whole = inner.size_hint().exact().is_some();
            let sending = whole && !inner.is_end_stream();
            if sending {
                conn.send_started();
            }
            ClientBody {
                inner,
                rest: Bytes::new(),
                whole,
                sending,
                handed_one: false,
                guard: Some(guard),
                conn: conn.clone(),
                _lease: lease,
            }
        })
    }

    fn ended(&mut self) {
        if let Some(g) = &mut self.guard {
            g.done = true;
        }
        self.guard = None;
        if std::mem::take(&mut self.sending) {
            self.conn.send_ended();
        }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        loop {
            if !this.rest.is_empty() {
                let n = this.rest.len().min(SEND_PIECE);
                let piece = this.rest.split_to(n);
                if std::mem::replace(&mut this.handed_one, true) {
                    this.conn.send_progress();
                }
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) if this.whole => match frame.into_data() {
                    Ok(data) => this.rest = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(Some(Ok(frame))) => return Poll::Ready(Some(Ok(frame))),
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => {
                    this.ended();
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.inner.size_hint().exact() {
            Some(n) => SizeHint::with_exact(n + self.rest.len() as u64),
            None => self.inner.size_hint(),
        }
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        // A body hyper never had to poll (it was empty) ended all the same.
        if self.is_end_stream() {
            self.ended();
        }
        if std::mem::take(&mut self.sending) {
            self.conn.send_ended();
        }
    }
}

impl Ingress {
    /// A request was cancelled by its client: counted on its connection and its address; past
    /// either limit the connection closes with GOAWAY(ENHANCE_YOUR_CALM), and past the
    /// address's the address is blocked for a while.
    fn cancelled(&self, conn: &ConnTracker, client_ip: IpAddr) {
        let r = *self.resets.config();
        if conn.cancelled(r.window, r.per_connection) {
            tracing::warn!(
                peer = %conn.peer,
                limit = r.per_connection,
                window = ?r.window,
                "a client connection cancelled too many requests; closing it with GOAWAY(ENHANCE_YOUR_CALM)"
            );
            conn.close(CloseReason::Calm);
        }
        if self.resets.record(client_ip) {
            tracing::warn!(
                client_ip = %client_ip,
                limit = r.per_ip,
                window = ?r.window,
                block = ?r.block,
                "a client address cancelled too many requests; refusing its connections and requests for a while"
            );
            conn.close(CloseReason::Calm);
        }
    }
}
