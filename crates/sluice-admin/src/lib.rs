//! The admin plane, beside the data plane: its own listener (default `127.0.0.1:9901`), serving `/metrics`,
//! `/admin/*` (pools, config, reload, the dashboard and its feed), `/healthz` and `/readyz`. The
//! client listener serves only the APIs and `/healthz`, so a client can reach neither the
//! metrics nor the config.
//!
//! With `server.admin_token` every admin route but `/healthz`, `/readyz` and the dashboard's
//! static page asks for `Authorization: Bearer <token>`; a non-loopback admin address
//! requires the token (config validation and startup refuse otherwise).
//!
//! It reads the gateway only through an [`AdminSource`]: plain snapshots (the config in force,
//! readiness, pools, balancers, keys) and the reload, never the request path's types. The
//! `sluice` binary composes the two.
//!
//! Modules, in the order an admin request meets them: `routes` (who may ask, what each path
//! answers), `feed` (the dashboard's server-sent events, sampled once a tick), `dashboard`
//! (the static page); `source` is the seam to the gateway.
#![forbid(unsafe_code)]

mod dashboard;
mod feed;

mod routes;
mod source;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_util::sync::{CancellationToken, DropGuard};

pub use source::{AdminSource, Pending};

/// The running admin plane; dropping it stops the listener, its connections and the feed.
#[derive(Debug)]
pub struct AdminHandle {
    addr: SocketAddr,
    _stop: DropGuard,
}

impl AdminHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Binds the admin listener and serves it (and the dashboard's feed) until the handle drops.
///
/// # Errors
/// The OS error when `addr` cannot be bound.
pub async fn start(source: Arc<dyn AdminSource>, addr: SocketAddr) -> std::io::Result<AdminHandle> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    let feed = feed::Feed::new(source.clone());
    tokio::spawn(feed.clone().run(stop.clone()));
    let app = Arc::new(routes::Admin { source, feed });
    tokio::spawn(serve(listener, app, stop.clone()));
    Ok(AdminHandle {
        addr,
        _stop: stop.drop_guard(),
    })
}

async fn serve(listener: TcpListener, app: Arc<routes::Admin>, stop: CancellationToken) {
    // Connections are owned here: when the admin plane stops they are aborted with it.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    let _ = tcp.set_nodelay(true);
                    let app = app.clone();
                    conns.spawn(async move {
                        let svc = service_fn(move |req| {
                            let app = app.clone();
                            async move { Ok::<_, std::convert::Infallible>(app.handle(req).await) }
                        });
                        let mut b = auto::Builder::new(TokioExecutor::new());
                        b.http1().timer(TokioTimer::new());
                        b.http2().timer(TokioTimer::new());
                        let _ = b.serve_connection(TokioIo::new(tcp), svc).await;
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    conns.shutdown().await;
}
