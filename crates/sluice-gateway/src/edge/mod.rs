//! Accepting clients: HTTP/1.1 and h2c prior knowledge on one port, or TLS with ALPN (h2,
//! http/1.1); and graceful shutdown.

mod body;
mod client_ip;
mod gate;
mod io;
mod limits;
mod metrics;
mod request;
mod resets;
mod watch;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{self, Either, FutureExt};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use io::{ConnIo, GOAWAY_ENHANCE_YOUR_CALM, H2_PREFACE_START};
use limits::{ConnLimits, ConnSlot, Refusal};
use metrics::{IngressMetrics, RequestRefusal};
use resets::ResetGuard;
use watch::{CloseReason, ConnTracker};

use crate::body_budget::BodyBudget;
use crate::config::{ClientTimeouts, ServerConfig, TlsFiles};
use crate::edge::client_ip::TrustedProxies;
use crate::generation::{GenerationCell, Shared};

/// What every connection of the ingress shares: the request path's state, and the edge's
/// limits and their accounting.
pub(crate) struct Ingress {
    /// The config's generation new requests get (swapped by a reload).
    pub(crate) state: Arc<GenerationCell>,
    /// Set when shutdown begins (the same token in every generation).
    draining: CancellationToken,
    /// Cancelled when the shutdown grace is over (the same token in every generation).
    streams_deadline: CancellationToken,
    budget: Arc<BodyBudget>,
    resets: ResetGuard,
    trusted: TrustedProxies,
    timeouts: ClientTimeouts,
    request_rate: Option<u32>,
    metrics: IngressMetrics,
    limits: Arc<ConnLimits>,
    /// `sluice_client_requests_refused_total{reason="malformed_head"}`, counted by the I/O.
    malformed: Counter,
    /// The clock the connections' times count from.
    epoch: Instant,
    last_refusal_log_ms: AtomicU64,
}

/// The edge's limits and their accounting, set up before the first generation (their
/// metrics go into the registry while it can still be changed).
pub(crate) struct EdgeSetup {
    budget: Arc<BodyBudget>,
    resets: ResetGuard,
    trusted: TrustedProxies,
    timeouts: ClientTimeouts,
    request_rate: Option<u32>,
    metrics: IngressMetrics,
    limits: Arc<ConnLimits>,
    epoch: Instant,
}

// === impl EdgeSetup ===

impl EdgeSetup {
    pub(crate) fn new(
        server: &ServerConfig,
        registry: &mut prometheus_client::registry::Registry,
    ) -> Self {
        let fds = sluice_upstream::fd_limit();
        let max_connections = server
            .max_connections
            .unwrap_or_else(|| limits::default_max_connections(&fds));
        tracing::info!(
            max_connections,
            memory_budget = server.memory_budget,
            "{fds}; client connections are capped at {max_connections}"
        );
        let limits = ConnLimits::new(max_connections, server.max_connections_per_ip);
        let budget = BodyBudget::new(server.memory_budget);
        let metrics = IngressMetrics::register(registry, limits.clone(), budget.clone());
        let epoch = Instant::now();
        EdgeSetup {
            budget,
            resets: ResetGuard::new(server.client_resets, epoch),
            trusted: TrustedProxies::new(server.trusted_proxies.clone()),
            timeouts: server.client_timeouts,
            request_rate: server.max_connection_request_rate,
            metrics,
            limits,
            epoch,
        }
    }

    /// The ingress every connection shares, serving the generations of `cell`.
    pub(crate) fn into_ingress(self, cell: Arc<GenerationCell>, shared: &Shared) -> Arc<Ingress> {
        Arc::new(Ingress {
            state: cell,
            draining: shared.draining.clone(),
            streams_deadline: shared.streams_deadline.clone(),
            budget: self.budget,
            resets: self.resets,
            trusted: self.trusted,
            timeouts: self.timeouts,
            request_rate: self.request_rate,
            malformed: self.metrics.requests_refused(RequestRefusal::MalformedHead),
            metrics: self.metrics,
            limits: self.limits,
            epoch: self.epoch,
            last_refusal_log_ms: AtomicU64::new(0),
        })
    }
}

pub(crate) fn tls_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    // The same loading `check-config` runs, so a config that checks ok also starts.
    crate::config::tls::server_config(files)
        .map(|cfg| TlsAcceptor::from(Arc::new(cfg)))
        .map_err(|e| e.to_string())
}

/// hyper's connection settings. HTTP/1.1's own header-read timeout is off: it starts when a
/// kept-alive connection becomes idle, so it would double as the keep-alive timeout; the
/// connection's watch times heads instead (`client_timeouts.header`).
fn builder(cfg: &ServerConfig) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    h1_settings(&mut b.http1(), cfg);
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(cfg.max_header_bytes)
        .max_concurrent_streams(cfg.max_concurrent_streams);
    b
}

/// hyper's HTTP/1.1 server for a connection known to speak HTTP/1.1 (its first bytes were
/// not HTTP/2's preface, or TLS chose it by ALPN): hyper's own connection, without the auto
/// builder's replay wrapper around the socket, which every read of every request went
/// through for nothing once the protocol is known.
fn h1_builder(cfg: &ServerConfig) -> hyper::server::conn::http1::Builder {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .half_close(false)
        .header_read_timeout(None)
        .max_buf_size(h1_buf_cap(cfg));
    b
}

/// The same settings on the auto builder, for a plaintext head too short to tell.
fn h1_settings(b: &mut auto::Http1Builder<'_, TokioExecutor>, cfg: &ServerConfig) {
    b.timer(TokioTimer::new())
        .half_close(false)
        .header_read_timeout(None)
        .max_buf_size(h1_buf_cap(cfg));
}

/// half_close stays off (in both builders above): a client's EOF while we stream must end the
/// response (and so cancel the upstream), not be taken as "done sending".
/// The read buffer's cap is the HTTP/1.1 head limit: a head that does not fit gets 431
/// (hyper-util's auto builder does not expose hyper's `max_header_size`, so both builders use
/// the buffer cap, for one behaviour). It also caps the write buffer, which keeps a response
/// that the client does not take in our hands, where the send timeout sees it.
fn h1_buf_cap(cfg: &ServerConfig) -> usize {
    (cfg.max_header_bytes as usize).max(MIN_BUF)
}

/// hyper's smallest HTTP/1.1 buffer cap.
const MIN_BUF: usize = 8192;

/// How long a connection closed for a timeout gets to say goodbye (HTTP/2 GOAWAY and its
/// PING round trip) before it is dropped.
const GOODBYE: Duration = Duration::from_secs(5);

/// At most one "connection refused" warning this often: under a flood the counter says how
/// many.
const REFUSAL_LOG_EVERY_MS: u64 = 10_000;

async fn all_closed(conns: &mut tokio::task::JoinSet<()>) {
    while conns.join_next().await.is_some() {}
}

pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    ing: Arc<Ingress>,
    workers: Option<Arc<crate::workers::Workers>>,
    stop: CancellationToken,
    grace: Duration,
) {
    // Connections are owned by the server: whatever is left when shutdown ends is aborted, so no
    // task outlives the gateway.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    if let Some((tracker, slot)) = ing.admit(peer) {
                        let _ = tcp.set_nodelay(true);
                        match &workers {
                            None => {
                                conns.spawn(serve_conn(ing.clone(), tcp, tls.clone(), tracker, slot));
                            }
                            Some(w) => hand_over(&mut conns, w, &ing, tcp, &tls, tracker, slot),
                        }
                    }
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    // Every connection watches this: HTTP/2 gets GOAWAY, HTTP/1.1 closes after its response.
    ing.draining.cancel();
    tracing::info!(grace = ?grace, "shutting down: no new connections; GOAWAY sent to HTTP/2 clients");
    if tokio::time::timeout(grace, all_closed(&mut conns))
        .await
        .is_err()
    {
        // Streams still running get their final error event now, then their connections close.
        ing.streams_deadline.cancel();
        tracing::warn!("shutdown grace period over; ending the remaining streams");
        // Bounded: a client that never reads its last event must not hold the process.
        let _ = tokio::time::timeout(Duration::from_secs(5), all_closed(&mut conns)).await;
    }
    conns.shutdown().await;
}

/// Moves an accepted connection to the worker thread with the fewest: its socket leaves the
/// accept loop's runtime and joins the worker's, so that every read and write of it wakes
/// that thread alone.
fn hand_over(
    conns: &mut tokio::task::JoinSet<()>,
    workers: &crate::workers::Workers,
    ing: &Arc<Ingress>,
    tcp: TcpStream,
    tls: &Option<TlsAcceptor>,
    tracker: Arc<ConnTracker>,
    slot: ConnSlot,
) {
    let std = match tcp.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot hand a connection to a worker thread; closed");
            return;
        }
    };
    let (handle, load) = workers.pick();
    let (ing, tls) = (ing.clone(), tls.clone());
    conns.spawn_on(
        async move {
            let _load = load;
            match TcpStream::from_std(std) {
                Ok(tcp) => serve_conn(ing, tcp, tls, tracker, slot).await,
                Err(e) => {
                    tracing::warn!(error = %e, "a worker thread cannot take a connection; closed")
                }
            }
        },
        handle,
    );
}

// === impl Ingress ===

impl Ingress {
    /// Admits a new connection or refuses it (blocked address, a cap), counted and logged.
    fn admit(&self, peer: SocketAddr) -> Option<(Arc<ConnTracker>, ConnSlot)> {
        let ip = crate::edge::client_ip::canonical(peer.ip());
        let trusted = self.trusted.trusts(ip);
        let refused = if !trusted && self.resets.blocked(ip).is_some() {
            Refusal::Blocked
        } else {
            let tracker = Arc::new(ConnTracker::new(
                self.epoch,
                peer,
                trusted,
                self.request_rate,
            ));
            match self.limits.admit(&tracker) {
                Ok(slot) => {
                    if let Some(evicted) = slot.evicted {
                        tracing::debug!(%evicted, "at max_connections: closed the longest-idle connection");
                    }
                    return Some((tracker, slot));
                }
                Err(r) => r,
            }
        };
        self.metrics.connection_refused(refused.as_str());
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.last_refusal_log_ms.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= REFUSAL_LOG_EVERY_MS)
            && self
                .last_refusal_log_ms
                .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                peer = %peer,
                reason = refused.as_str(),
                max_connections = self.limits.max(),
                "refusing client connections (sluice_client_connections_refused_total counts them; this is logged at most every 10 s)"
            );
        }
        None
    }
}

async fn serve_conn(
    ing: Arc<Ingress>,
    tcp: TcpStream,
    tls: Option<TlsAcceptor>,
    tracker: Arc<ConnTracker>,
    slot: ConnSlot,
) {
    // The place is held for as long as the connection lives.
    let _slot = slot;
    // Its settings need a restart to change: any generation's are the ones in force. Not
    // kept for the connection's life: that would hold a generation (and its pools) past a
    // reload.
    let (b, h1) = {
        let state = ing.state.load();
        let cfg = &state.config.server;
        (builder(cfg), h1_builder(cfg))
    };
    match tls {
        None => {
            // h2c prior knowledge or HTTP/1.1: the first bytes say which, so that each gets
            // its own service (see `run`).
            let h2 = tokio::select! {
                h2 = speaks_h2c(&tcp) => h2,
                reason = watch::watchdog(&tracker, &ing.timeouts) => {
                    ing.metrics.connection_closed(reason.as_str());
                    return;
                }
            };
            let proto = match h2 {
                Some(true) => Proto::H2(b.http2_only()),
                Some(false) => Proto::H1(h1),
                // A head split after its first byte or two (rare): hyper tells, as before.
                None => Proto::Sniff(b),
            };
            let (tx, rx) = oneshot::channel();
            let io = ConnIo::new(
                tcp,
                tracker.clone(),
                tx,
                h2 == Some(true),
                ing.malformed.clone(),
            );
            run(&ing, io, &tracker, proto, rx).await;
        }
        // Boxed: the TLS stream and its handshake make this future several KB larger, room
        // every plaintext connection's task would keep for nothing.
        Some(acceptor) => Box::pin(serve_tls(&ing, tcp, acceptor, &tracker, b, h1)).await,
    }
}

/// A TLS connection: the handshake, then HTTP/2 or HTTP/1.1 as ALPN chose.
async fn serve_tls(
    ing: &Arc<Ingress>,
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    tracker: &Arc<ConnTracker>,
    b: auto::Builder<TokioExecutor>,
    h1: hyper::server::conn::http1::Builder,
) {
    // The handshake is part of the first request's head: the watch's header timeout (or an
    // eviction) ends it.
    let stream = tokio::select! {
        r = acceptor.accept(tcp) => match r {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(peer = %tracker.peer, error = %e, "TLS handshake failed");
                return;
            }
        },
        reason = watch::watchdog(tracker, &ing.timeouts) => {
            ing.metrics.connection_closed(reason.as_str());
            return;
        }
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let proto = if h2 {
        Proto::H2(b.http2_only())
    } else {
        Proto::H1(h1)
    };
    let (tx, rx) = oneshot::channel();
    let io = ConnIo::new(stream, tracker.clone(), tx, h2, ing.malformed.clone());
    run(ing, io, tracker, proto, rx).await;
}

/// Whether a plaintext client opens with HTTP/2's preface (h2c prior knowledge), read without
/// consuming it: `None` while its first bytes are only "P" or "PR" (hyper's own detection
/// then decides, as it reads). EOF or an error: not h2 (hyper then sees it for itself).
async fn speaks_h2c(tcp: &TcpStream) -> Option<bool> {
    let mut buf = [0u8; H2_PREFACE_START.len()];
    let n = match tcp.peek(&mut buf).await {
        Ok(0) | Err(_) => return Some(false),
        Ok(n) => n,
    };
    if buf[..n] != H2_PREFACE_START[..n] {
        return Some(false);
    }
    // A peek now would answer at once with the same bytes: no waiting on a split head here.
    (n == H2_PREFACE_START.len()).then_some(true)
}

/// Serves one connection until it ends, the gateway drains, or its watch closes it.
///
/// On HTTP/2 the service future is boxed: hyper runs each stream in a task whose cell is as
/// large as the service future for the stream's whole life, so a long stream would hold all
/// of it; boxed, it is freed when the response head is out. Its admission stage (the
/// client's request, the body read) is boxed apart and freed when the attempts start, so
/// that a stream waiting for its upstream holds only the attempts' room. On HTTP/1.1 the
/// future lives in the connection's own (reused) slot, where a box would be an allocation
/// per request for nothing.
async fn run<T>(
    ing: &Arc<Ingress>,
    io: ConnIo<T>,
    tracker: &Arc<ConnTracker>,
    proto: Proto,
    give_back: oneshot::Receiver<T>,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    let (i, t) = (ing.clone(), tracker.clone());
    let closed_for = match proto {
        Proto::H2(builder) => {
            let svc = service_fn(move |req| {
                Box::pin(respond(&i, &t, req, request::Accepted::serve_boxed))
            });
            let conn = Box::pin(builder.serve_connection(io, svc).into_owned());
            drive(ing, tracker, conn).await
        }
        Proto::H1(builder) => {
            let svc = service_fn(move |req| respond(&i, &t, req, request::Accepted::serve));
            let conn = Box::pin(H1Served(builder.serve_connection(io, svc)));
            drive(ing, tracker, conn).await
        }
        Proto::Sniff(builder) => {
            let svc = service_fn(move |req| respond(&i, &t, req, request::Accepted::serve));
            let conn = Box::pin(builder.serve_connection(io, svc).into_owned());
            drive(ing, tracker, conn).await
        }
    };
    closed(ing, tracker, closed_for, give_back).await;
}

/// How a connection is served, once its protocol is known (or not).
enum Proto {
    /// HTTP/1.1: hyper's own connection.
    H1(hyper::server::conn::http1::Builder),
    /// HTTP/2 (h2c prior knowledge, or ALPN `h2`): each stream's service future boxed.
    H2(auto::Builder<TokioExecutor>),
    /// A plaintext head too short to tell: hyper-util reads the first bytes and picks; served
    /// as HTTP/1.1 (an h2c client that splits its preface this early is rare, and its streams
    /// are served unboxed).
    Sniff(auto::Builder<TokioExecutor>),
}

/// One request's response, as the connection's service gives it: refused at the edge, or
/// served by `serve`.
fn respond<F>(
    ing: &Arc<Ingress>,
    tracker: &Arc<ConnTracker>,
    req: http::Request<hyper::body::Incoming>,
    serve: impl FnOnce(request::Accepted) -> F,
) -> impl Future<Output = Result<http::Response<request::ClientBody>, std::convert::Infallible>>
       + Send
       + 'static
where
    F: Future<Output = http::Response<request::ClientBody>> + Send + 'static,
{
    match request::accept(ing.clone(), tracker.clone(), req) {
        request::Edge::Accepted(accepted) => Either::Left(serve(accepted)),
        request::Edge::Refused(refused) => Either::Right(future::ready(refused)),
    }
    .map(Ok)
}

/// hyper's connection, whichever service it runs.
trait Served: Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>> {
    fn shut_down(self: Pin<&mut Self>);
}

/// hyper's own HTTP/1.1 connection, its error boxed as the auto connection's is.
struct H1Served<I, S>(hyper::server::conn::http1::Connection<I, S>)
where
    S: hyper::service::HttpService<hyper::body::Incoming>;

impl<I, S, B> Future for H1Served<I, S>
where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    type Output = Result<(), Box<dyn std::error::Error + Send + Sync>>;

    fn poll(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // Every field is Unpin (hyper's connection over an Unpin socket).
        Pin::new(&mut self.get_mut().0).poll(cx).map_err(Into::into)
    }
}

impl<I, S, B> Served for H1Served<I, S>
where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    fn shut_down(self: Pin<&mut Self>) {
        Pin::new(&mut self.get_mut().0).graceful_shutdown();
    }
}

impl<I, S, B> Served for auto::Connection<'static, I, S, TokioExecutor>
where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>,
    S::Future: 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    TokioExecutor: auto::HttpServerConnExec<S::Future, B>,
{
    fn shut_down(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Runs `conn` until it ends, the gateway drains, or the watch closes it; why the watch
/// closed it, if it did.
async fn drive(
    ing: &Arc<Ingress>,
    tracker: &Arc<ConnTracker>,
    // Boxed by the caller, not pinned here: it is dropped below, before this function ends,
    // and a connection moved in would keep its room in this future besides.
    mut conn: Pin<Box<impl Served>>,
) -> Option<CloseReason> {
    let draining = ing.draining.clone();
    let mut graceful = false;
    let mut watching = true;
    let goodbye = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(goodbye);
    let mut closed_for = None;
    loop {
        // The watch, the drain signal and the goodbye timer, gated: the connection's task
        // wakes for every read and write, and these would otherwise be polled each time.
        let event = {
            let side = async {
                tokio::select! {
                    _ = draining.cancelled(), if !graceful => Side::Drain,
                    reason = watch::watchdog(tracker, &ing.timeouts), if watching => Side::Watch(reason),
                    _ = &mut goodbye => Side::Goodbye,
                }
            };
            tokio::pin!(side);
            let mut side = gate::Gated::new(side);
            std::future::poll_fn(|cx| {
                if conn.as_mut().poll(cx).is_ready() {
                    return std::task::Poll::Ready(None);
                }
                side.poll_gated(cx).map(Some)
            })
            .await
        };
        match event {
            None | Some(Side::Goodbye) => break,
            Some(Side::Drain) => {
                conn.as_mut().shut_down();
                graceful = true;
            }
            Some(Side::Watch(reason)) => {
                watching = false;
                closed_for = Some(reason);
                match reason {
                    // Nothing in flight: a polite close (HTTP/2 GOAWAY), bounded.
                    CloseReason::KeepAliveTimeout | CloseReason::Evicted => {
                        if !graceful {
                            conn.as_mut().shut_down();
                            graceful = true;
                        }
                        goodbye.as_mut().reset(Instant::now() + GOODBYE);
                    }
                    // A head that did not come (nothing to be polite about: half a head
                    // would keep an HTTP/1.1 graceful close waiting), a client that does not
                    // read, or one that abuses resets: cut now.
                    CloseReason::HeaderTimeout | CloseReason::SendTimeout | CloseReason::Calm => {
                        break
                    }
                }
            }
        }
    }
    // Dropping hyper's connection drops the I/O, which hands the socket back for a GOAWAY if
    // the connection is cut for abuse.
    drop(conn);
    closed_for
}

/// What woke a connection's side watch.
enum Side {
    /// The gateway drains.
    Drain,
    /// The watchdog closed the connection.
    Watch(CloseReason),
    /// The graceful close ran out of time.
    Goodbye,
}

/// After the connection: the metric and, for abuse on HTTP/2, the GOAWAY on the socket
/// hyper gave back.
async fn closed<T>(
    ing: &Arc<Ingress>,
    tracker: &Arc<ConnTracker>,
    closed_for: Option<CloseReason>,
    give_back: oneshot::Receiver<T>,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(reason) = closed_for else {
        return;
    };
    ing.metrics.connection_closed(reason.as_str());
    match reason {
        CloseReason::SendTimeout => tracing::warn!(
            peer = %tracker.peer,
            timeout = ?ing.timeouts.send,
            "a client did not take its response; connection closed (server.client_timeouts.send)"
        ),
        CloseReason::Calm => {
            if let Ok(mut io) = give_back.await {
                if tracker.is_h2() {
                    // Bounded: a peer that does not read gets no more of our time.
                    let _ = tokio::time::timeout(Duration::from_secs(1), async {
                        io.write_all(&GOAWAY_ENHANCE_YOUR_CALM).await?;
                        io.flush().await?;
                        io.shutdown().await?;
                        // A lingering close: what the peer still sends is read and dropped,
                        // so that closing with unread data does not turn into a TCP reset,
                        // which would destroy the GOAWAY before the peer reads it. On the
                        // heap: in the future, it would be room in every connection's task.
                        let mut sink = vec![0u8; 16 * 1024];
                        while io.read(&mut sink).await? > 0 {}
                        Ok::<_, std::io::Error>(())
                    })
                    .await;
                }
            }
        }
        _ => {
            tracing::debug!(peer = %tracker.peer, reason = reason.as_str(), "client connection closed")
        }
    }
}
