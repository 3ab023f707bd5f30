//! A real mock inference server with fault injection, for tests, benchmarks and the demo.
//!
//! It speaks OpenAI (Chat Completions, Completions, Embeddings, Models, Responses; also as Azure
//! OpenAI deployments), Anthropic (Messages, count_tokens), Google Gemini (generateContent,
//! streamGenerateContent, countTokens, models; also on Vertex AI's paths, with Claude's
//! rawPredict / streamRawPredict there) and AWS Bedrock (Converse, ConverseStream in
//! event-stream framing, InvokeModel) shapes, checking the clouds' credentials for real (see
//! [`CloudConfig`]: SigV4 signatures, bearer tokens from its own Google and Entra ID token
//! endpoints), over HTTP/1.1 and HTTP/2 (h2c prior knowledge on the same port,
//! or h2 and http/1.1 by ALPN with `tls`), and misbehaves on command through the `x-mock`
//! request header (see [`Behavior`]): typed provider errors, errors inside a stream, failures
//! for the first N requests or for a while, resets and silence after the request was
//! processed, continuation of an assistant prefill, and HTTP/1.1 keep-alive closes. Everything
//! it does is recorded in [`Stats`] as evidence for tests.
//!
//! Modules, in the order a request meets them:
//!
//! ```text
//! lib.rs       the listener; tls.rs (--tls), sniff.rs (HTTP/1.1 or h2c on one port),
//!              throttle.rs (the `degrade` knob's slow link)
//! serve_h1.rs  HTTP/1.1 on hyper, serve_h2.rs HTTP/2 on h2; conn.rs is what both share
//! knobs.rs     the `x-mock` header over the server's defaults: a Behavior
//! route.rs     the reply: a completion, a typed error or a fault (faults.rs keeps the
//!              server-wide fault state); cloud.rs checks SigV4 and bearer tokens first and
//!              runs the token endpoints
//! shapes/      each provider's bodies, streams and errors (errors.rs is their table)
//! emit.rs      the body written with the timing and faults asked for (SSE, or AWS
//!              event-stream messages)
//! stats.rs     the evidence of all of it, for tests
//! ```
//!
//! Imports point one way: serve_* → route → cloud, emit → stats → shapes → knobs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sluice_mock::MockError> {
//! let mock = sluice_mock::MockServer::start(sluice_mock::MockConfig::default()).await?;
//! println!("POST {}/v1/chat/completions", mock.url());
//! let snapshot = mock.stats().snapshot();
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod cloud;
mod conn;
mod emit;
mod faults;
mod knobs;
mod route;
mod serve_h1;
mod serve_h2;
mod shapes;
mod sniff;
mod stats;
mod throttle;
mod tls;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

pub use cloud::{
    test_service_account_json, AwsKey, CloudConfig, EntraClient, ServiceAccount,
    DEFAULT_MAX_LIVE_TOKENS, DEFAULT_TOKEN_TTL, TEST_AWS_ACCESS_KEY_ID, TEST_AWS_SECRET_ACCESS_KEY,
    TEST_ENTRA_CLIENT_ID, TEST_ENTRA_CLIENT_SECRET,
};
pub use knobs::{Behavior, ErrorKind, FailWith, KnobError, PrefillMode, SILENT_LIMIT};
pub use route::{MOCK_HEADER, REQUEST_ID_HEADER};
pub use shapes::gemini::THOUGHT_SIGNATURE;
pub use shapes::Api;
pub use stats::{
    AuthTotals, CloseReason, ConnRecord, Outcome, PrefillRecord, Protocol, ReqRecord, Snapshot,
    Stats, Totals, DEFAULT_MAX_RECORDS,
};

use cloud::CloudState;
use conn::{ConnCtx, ServerCfg};
use faults::FaultState;
use throttle::{Rate, Throttled};

/// Why the mock could not start.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TLS certificate or configuration could not be made.
    #[error("cannot set up TLS: {0}")]
    Tls(String),
}

/// How to run the mock.
#[derive(Clone, Debug)]
pub struct MockConfig {
    /// Where to listen; port 0 picks a free port (see [`MockServer::addr`]).
    pub listen: SocketAddr,
    /// Serve TLS with a certificate generated at start, h2 and http/1.1 by ALPN.
    pub tls: bool,
    /// SETTINGS_MAX_CONCURRENT_STREAMS sent to HTTP/2 clients (default: h2's, unlimited).
    pub h2_max_concurrent_streams: Option<u32>,
    /// Behaviour of requests that do not override it with `x-mock`.
    pub defaults: Behavior,
    /// How many connection and request records [`Stats`] keeps.
    pub max_records: usize,
    /// How many bytes of each request body [`ReqRecord::body`] keeps (default 64 KiB).
    pub max_recorded_body: usize,
    /// HTTP/1.1: the server closes (TCP FIN) a kept-alive connection that has had no request
    /// in flight for this long, like a real server's keep-alive timeout. Default: never.
    pub h1_idle_timeout: Option<Duration>,
    /// HTTP/1.1: when a request arrives on a kept-alive connection that was idle at least this
    /// long, the server closes the connection without reading further or answering — the
    /// deterministic form of the stale keep-alive race (the server closed just as the client
    /// reused the connection). The request is not processed, so a client may retry it.
    /// Default: never.
    pub h1_stale_close: Option<Duration>,
    /// Close stale connections (`h1_stale_close`) with TCP RST instead of FIN.
    pub h1_stale_close_rst: bool,
}

/// Default of [`MockConfig::max_recorded_body`].
pub const DEFAULT_MAX_RECORDED_BODY: usize = 64 * 1024;

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: false,
            h2_max_concurrent_streams: None,
            defaults: Behavior::default(),
            max_records: DEFAULT_MAX_RECORDS,
            max_recorded_body: DEFAULT_MAX_RECORDED_BODY,
            h1_idle_timeout: None,
            h1_stale_close: None,
            h1_stale_close_rst: false,
        }
    }
}

/// A running mock. Dropping it stops the server and every connection it owns.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    tls: bool,
    stats: Stats,
    cert_pem: Option<String>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl MockServer {
    /// Binds and starts serving in the background of the current tokio runtime, accepting the
    /// built-in test cloud credentials ([`CloudConfig::default`]).
    ///
    /// # Errors
    /// [`MockError::Bind`] if the address is taken or not local; [`MockError::Tls`] if the
    /// certificate cannot be generated.
    pub async fn start(cfg: MockConfig) -> Result<MockServer, MockError> {
        MockServer::start_with(cfg, CloudConfig::default()).await
    }

    /// [`MockServer::start`] with the cloud credentials and token lifetime of `cloud`.
    ///
    /// # Errors
    /// As [`MockServer::start`].
    pub async fn start_with(cfg: MockConfig, cloud: CloudConfig) -> Result<MockServer, MockError> {
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| MockError::Bind {
                addr: cfg.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| MockError::Bind {
            addr: cfg.listen,
            source,
        })?;
        let (tls, cert_pem) = if cfg.tls {
            let (server_cfg, pem) = tls::generate()?;
            (Some(TlsAcceptor::from(server_cfg)), Some(pem))
        } else {
            (None, None)
        };
        let stats = Stats::new(cfg.max_records);
        let server_cfg = Arc::new(ServerCfg {
            defaults: cfg.defaults,
            h2_max_concurrent_streams: cfg.h2_max_concurrent_streams,
            h1_idle_timeout: cfg.h1_idle_timeout,
            h1_stale_close: cfg.h1_stale_close,
            h1_stale_close_rst: cfg.h1_stale_close_rst,
            max_recorded_body: cfg.max_recorded_body,
            faults: FaultState::new(),
            cloud: CloudState::new(cloud),
        });
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(accept_loop(
            listener,
            tls,
            server_cfg,
            stats.clone(),
            stopped,
        ));
        Ok(MockServer {
            addr,
            tls: cfg.tls,
            stats,
            cert_pem,
            stop: Some(stop),
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://IP:PORT` or `https://IP:PORT`, without a path.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The built-in test service account's key file, its `token_uri` this server's `/token`:
    /// what a Vertex client (the gateway) is given to get tokens from the mock.
    pub fn service_account_json(&self) -> String {
        test_service_account_json(&format!("{}/token", self.url()))
    }

    /// The recorder.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The generated certificate (PEM) when serving TLS; clients trust it as a root.
    pub fn cert_pem(&self) -> Option<&str> {
        self.cert_pem.as_deref()
    }

    /// Stops accepting and ends every connection, then waits for the server task.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }

    /// Serves until the process is stopped.
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    cfg: Arc<ServerCfg>,
    stats: Stats,
    mut stopped: oneshot::Receiver<()>,
) {
    // Connections are owned by the server: stopping it ends them all.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    conns.spawn(serve_conn(tcp, tls.clone(), cfg.clone(), stats.clone()));
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "mock accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
    conns.shutdown().await;
}

async fn serve_conn(tcp: TcpStream, tls: Option<TlsAcceptor>, cfg: Arc<ServerCfg>, stats: Stats) {
    let _ = tcp.set_nodelay(true);
    let rate = Rate::default();
    let rst = Arc::new(AtomicBool::new(false));
    let io = Throttled::new(tcp, rate.clone(), rst.clone());
    let ctx = |protocol, is_tls| ConnCtx {
        cfg: cfg.clone(),
        stats: stats.clone(),
        conn: Arc::new(stats.open_conn(protocol, is_tls)),
        rate: rate.clone(),
        kill: Arc::new(Notify::new()),
        rst: rst.clone(),
    };
    match tls {
        Some(acceptor) => {
            let Ok(tls_io) = acceptor.accept(io).await else {
                return;
            };
            let h2 = tls_io.get_ref().1.alpn_protocol() == Some(b"h2");
            if h2 {
                serve_h2::serve(tls_io, ctx(Protocol::H2, true)).await
            } else {
                serve_h1::serve(tls_io, ctx(Protocol::Http1, true)).await
            }
        }
        None => {
            let Ok((h2, io)) = sniff::sniff(io).await else {
                return;
            };
            if h2 {
                serve_h2::serve(io, ctx(Protocol::H2c, false)).await
            } else {
                serve_h1::serve(io, ctx(Protocol::Http1, false)).await
            }
        }
    }
}
