//! Accepting clients: HTTP/1.1 and h2c prior knowledge on one port, or TLS with ALPN (h2,
//! http/1.1); and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use sluice_upstream::Upstream;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, TlsFiles};
use crate::proxy::{self, State};
use crate::telemetry::Telemetry;

/// Why the gateway could not start. Nothing is left half-started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The listener's TLS files are unusable.
    #[error("server.tls: {0}")]
    Tls(String),
    /// An upstream's settings were rejected.
    #[error("{0}")]
    Upstream(#[from] sluice_upstream::UpstreamConfigError),
    /// A route's balancer settings were rejected.
    #[error("{0}")]
    Balance(#[from] sluice_upstream::BalanceConfigError),
    /// The state store's settings were rejected.
    #[error("state: {0}")]
    State(#[from] sluice_state::ConfigError),
}

/// A running gateway.
#[derive(Debug)]
pub struct Gateway {
    addr: SocketAddr,
    telemetry: Arc<Telemetry>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Gateway {
    /// Builds the upstreams, binds the listener and starts serving on the current runtime.
    ///
    /// # Errors
    /// [`StartError`] if the address is taken, the TLS files do not load, or an upstream's
    /// settings are rejected.
    pub async fn start(config: Config) -> Result<Gateway, StartError> {
        let tls = config.server.tls.as_ref().map(tls_acceptor).transpose()?;
        let upstreams = config
            .upstreams
            .iter()
            .map(|u| Upstream::new(u.upstream_settings()))
            .collect::<Result<Vec<_>, _>>()?;
        let listen = config.server.listen;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: listen,
            source,
        })?;
        let mut telemetry = Telemetry::new();
        telemetry.register_pools(crate::pools::PoolCollector::new(
            config
                .upstreams
                .iter()
                .map(|u| u.name.clone())
                .zip(upstreams.iter().cloned())
                .collect(),
        ));
        let keys = crate::keys::Keys::start(&config).await?;
        keys.register_metrics(telemetry.registry_mut());
        let telemetry = Arc::new(telemetry);
        let grace = config.server.shutdown_grace;
        let targets = crate::targets::build(&config, &upstreams)?;
        let state = Arc::new(State::new(
            config,
            upstreams,
            targets,
            telemetry.clone(),
            keys,
        ));
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(listener, tls, state, stop.clone(), grace));
        Ok(Gateway {
            addr,
            telemetry,
            stop,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics registry.
    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    /// Graceful shutdown: stop accepting, GOAWAY to HTTP/2 clients, let streams run for up to
    /// `shutdown_grace`, then end the rest with an error event. Returns when every connection
    /// has closed.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }

    /// A handle that starts the graceful shutdown when cancelled (for signal handlers).
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Waits until the gateway has stopped.
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

fn tls_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, StartError> {
    // The same loading `check-config` runs, so a config that checks ok also starts.
    crate::config::tls::server_config(files)
        .map(|cfg| TlsAcceptor::from(Arc::new(cfg)))
        .map_err(|e| StartError::Tls(e.to_string()))
}

fn builder() -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    // half_close stays off: a client's EOF while we stream must end the response (and so
    // cancel the upstream), not be taken as "done sending".
    b.http1().timer(TokioTimer::new()).half_close(false);
    b.http2().timer(TokioTimer::new());
    b
}

async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    state: Arc<State>,
    stop: CancellationToken,
    grace: Duration,
) {
    let graceful = GracefulShutdown::new();
    // Connections are owned by the server: whatever is left when shutdown ends is aborted, so no
    // task outlives the gateway.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    let _ = tcp.set_nodelay(true);
                    let state = state.clone();
                    let watcher = graceful.watcher();
                    let tls = tls.clone();
                    conns.spawn(async move {
                        serve_conn(tcp, tls, state, watcher).await;
                    });
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
    state.draining.cancel();
    tracing::info!(grace = ?grace, "shutting down: no new connections; GOAWAY sent to HTTP/2 clients");
    let all_closed = graceful.shutdown();
    tokio::pin!(all_closed);
    if tokio::time::timeout(grace, &mut all_closed).await.is_err() {
        // Streams still running get their final error event now, then their connections close.
        state.streams_deadline.cancel();
        tracing::warn!("shutdown grace period over; ending the remaining streams");
        // Bounded: a client that never reads its last event must not hold the process.
        let _ = tokio::time::timeout(Duration::from_secs(5), all_closed).await;
    }
    conns.shutdown().await;
}

async fn serve_conn(
    tcp: TcpStream,
    tls: Option<TlsAcceptor>,
    state: Arc<State>,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let svc = service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, std::convert::Infallible>(proxy::handle(state, req).await) }
    });
    match tls {
        None => {
            let b = builder();
            let conn = b.serve_connection(TokioIo::new(tcp), svc).into_owned();
            let _ = watcher.watch(conn).await;
        }
        Some(acceptor) => {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            let b = if h2 {
                builder().http2_only()
            } else {
                builder().http1_only()
            };
            let conn = b.serve_connection(TokioIo::new(stream), svc).into_owned();
            let _ = watcher.watch(conn).await;
        }
    }
}
