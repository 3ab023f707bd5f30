//! Connectors: DNS + TCP (`TCP_NODELAY`, keepalive) and TLS with ALPN, all bounded by
//! `connect_timeout` and by the request's deadline, whichever comes first. Each connect
//! reports how long its phases took ([`ConnectPhases`]).

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::dns::{self, Resolver};
use crate::error::UpstreamError;
use crate::timing::ConnectPhases;

/// TCP keepalive idle time: a long SSE stream can be silent for minutes (first-token wait,
/// stalled generation), and a peer that vanished without a FIN must still be noticed.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// Which application protocols to offer in the TLS handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// `h2` only: the upstream must speak HTTP/2.
    H2,
    /// `h2`, then `http/1.1`.
    H2OrHttp1,
    /// `http/1.1` only.
    Http1,
}

/// A connected byte stream: plain TCP or TLS over TCP.
pub(crate) enum Io {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Result of a connect: the stream, whether ALPN chose h2, and how long it took.
pub(crate) struct Connected {
    pub(crate) io: Io,
    pub(crate) alpn_h2: bool,
    pub(crate) phases: ConnectPhases,
}

/// Everything needed to open a connection to one upstream; built once in `Upstream::new`.
#[derive(Clone)]
pub(crate) struct Connector {
    pub(crate) upstream: String,
    host: String,
    port: u16,
    resolver: Arc<Resolver>,
    connect_timeout: Duration,
    /// `None` for plain TCP (http://).
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl Connector {
    /// `host` without IPv6 brackets. `ca_file` adds trust roots to the webpki roots.
    /// `dns_refresh`: how long resolved addresses are used before resolving again.
    pub(crate) fn new(
        upstream: &str,
        host: &str,
        port: u16,
        dns_refresh: Duration,
        connect_timeout: Duration,
        tls: Option<(Alpn, &[CertificateDer<'static>])>,
    ) -> Result<Connector, String> {
        let tls = match tls {
            None => None,
            Some((alpn, extra_roots)) => {
                let cfg = client_config(alpn, extra_roots)?;
                let name = ServerName::try_from(host.to_string())
                    .map_err(|e| format!("`{host}` is not a valid TLS server name: {e}"))?;
                Some((TlsConnector::from(Arc::new(cfg)), name))
            }
        };
        Ok(Connector {
            upstream: upstream.to_string(),
            host: host.to_string(),
            port,
            resolver: Arc::new(Resolver::new(host, port, dns_refresh)),
            connect_timeout,
            tls,
        })
    }

    /// The same connector, resolving with `resolver` instead.
    pub(crate) fn with_resolver(mut self, resolver: Resolver) -> Connector {
        self.resolver = Arc::new(resolver);
        self
    }

    /// The configured bound on TCP connect + TLS handshake.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Opens a connection. Bounded by `connect_timeout` (→ `ConnectTimeout`) and by
    /// `deadline` (→ `Deadline`), whichever is earlier.
    ///
    /// `turn` picks the first address to try (see [`dns::rotation`]): a lane passes the
    /// count of its connects, so its connections spread over every address of the host.
    ///
    /// Cancel safety: dropping the future drops any half-open socket; nothing leaks.
    pub(crate) async fn connect(
        &self,
        deadline: Instant,
        turn: usize,
    ) -> Result<Connected, UpstreamError> {
        let connect_deadline = Instant::now() + self.connect_timeout;
        let (limit, on_elapsed) = if deadline < connect_deadline {
            (deadline, UpstreamError::Deadline)
        } else {
            (
                connect_deadline,
                UpstreamError::ConnectTimeout(self.connect_timeout),
            )
        };
        match tokio::time::timeout_at(limit, self.connect_inner(turn)).await {
            Ok(r) => r,
            Err(_) => Err(on_elapsed),
        }
    }

    async fn connect_inner(&self, turn: usize) -> Result<Connected, UpstreamError> {
        let started = Instant::now();
        let unresolved = SocketAddr::from(([0, 0, 0, 0], self.port));
        let resolved = self
            .resolver
            .resolve()
            .await
            .map_err(|source| UpstreamError::Connect {
                upstream: self.upstream.clone(),
                addr: unresolved,
                source,
            })?;
        let tcp_start = Instant::now();
        let tcp = self.tcp(&resolved.addrs, turn).await?;
        let tcp_done = Instant::now();
        let mut phases = ConnectPhases {
            started,
            ready: tcp_done,
            dns: resolved.took,
            connect: tcp_done - tcp_start,
            tls: None,
        };
        let Some((connector, name)) = &self.tls else {
            return Ok(Connected {
                io: Io::Tcp(tcp),
                alpn_h2: false,
                phases,
            });
        };
        let tls = connector
            .connect(name.clone(), tcp)
            .await
            .map_err(|e| UpstreamError::Tls(self.tls_message(&e)))?;
        phases.ready = Instant::now();
        phases.tls = Some(phases.ready - tcp_done);
        let alpn_h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        Ok(Connected {
            io: Io::Tls(Box::new(tls)),
            alpn_h2,
            phases,
        })
    }

    async fn tcp(&self, addrs: &[SocketAddr], turn: usize) -> Result<TcpStream, UpstreamError> {
        // Try each address in turn (IPv6 and IPv4 of a name); report the last failure.
        let mut last = UpstreamError::Connect {
            upstream: self.upstream.clone(),
            addr: SocketAddr::from(([0, 0, 0, 0], self.port)),
            source: io::Error::new(io::ErrorKind::NotFound, "the name resolved to no address"),
        };
        for addr in dns::rotation(addrs, turn) {
            match TcpStream::connect(addr).await {
                Ok(tcp) => {
                    // Small SSE events and request headers must not wait for Nagle.
                    let _ = tcp.set_nodelay(true);
                    let ka = socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE);
                    let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&ka);
                    return Ok(tcp);
                }
                Err(source) => {
                    last = UpstreamError::Connect {
                        upstream: self.upstream.clone(),
                        addr,
                        source,
                    }
                }
            }
        }
        Err(last)
    }

    /// A message the operator can act on, naming the upstream and the likely fix.
    fn tls_message(&self, e: &io::Error) -> String {
        let at = format!(
            "TLS handshake with upstream `{}` at {}:{} failed",
            self.upstream, self.host, self.port
        );
        let rustls_err = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        match rustls_err {
            Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => format!(
                "{at}: the upstream's certificate is not trusted (unknown issuer); \
                 add its CA to ca_file"
            ),
            Some(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => format!(
                "{at}: the upstream's certificate is not valid for `{}`; check base_url's host",
                self.host
            ),
            Some(rustls::Error::InvalidCertificate(c)) => {
                format!("{at}: the upstream's certificate is not trusted: {c:?}")
            }
            Some(other) => format!("{at}: {other}"),
            None => format!("{at}: {e}"),
        }
    }
}

fn client_config(
    alpn: Alpn,
    extra_roots: &[CertificateDer<'static>],
) -> Result<ClientConfig, String> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for cert in extra_roots {
        roots
            .add(cert.clone())
            .map_err(|e| format!("a certificate in ca_file is not a usable CA: {e}"))?;
    }
    // An explicit provider: the process may not have installed a default one, and we do not
    // want a different provider picked by feature unification.
    let mut cfg =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
    cfg.alpn_protocols = match alpn {
        Alpn::H2 => vec![b"h2".to_vec()],
        Alpn::H2OrHttp1 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        Alpn::Http1 => vec![b"http/1.1".to_vec()],
    };
    Ok(cfg)
}

/// Reads every certificate in a PEM file (the extra trust roots of `ca_file`).
pub(crate) fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| e.to_string())?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not valid PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no CERTIFICATE block found".into());
    }
    Ok(certs)
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Tcp(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn plain(resolver: Resolver) -> Connector {
        let secs = Duration::from_secs(5);
        Connector::new("t", "fixed.invalid", 0, secs, secs, None)
            .unwrap()
            .with_resolver(resolver)
    }

    /// Which of `listeners` the connection with `turn` reached.
    async fn reached(c: &Connector, turn: usize, listeners: &[SocketAddr]) -> usize {
        let conn = c
            .connect(Instant::now() + Duration::from_secs(5), turn)
            .await;
        let Io::Tcp(tcp) = conn.unwrap().io else {
            unreachable!("no TLS configured")
        };
        let peer = tcp.peer_addr().unwrap();
        listeners.iter().position(|a| *a == peer).unwrap()
    }

    #[tokio::test]
    async fn consecutive_connections_go_to_consecutive_addresses() {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addrs = vec![a.local_addr().unwrap(), b.local_addr().unwrap()];
        let c = plain(Resolver::fixed(addrs.clone()));
        let mut got = Vec::new();
        for turn in 0..4 {
            got.push(reached(&c, turn, &addrs).await);
        }
        assert_eq!(got, [0, 1, 0, 1]);
    }

    #[tokio::test]
    async fn an_address_that_refuses_falls_back_to_the_next() {
        let live = TcpListener::bind("127.0.0.1:0").await.unwrap();
        // Bound then closed: connecting to it is refused.
        let dead = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let addrs = vec![dead, live.local_addr().unwrap()];
        let c = plain(Resolver::fixed(addrs.clone()));
        assert_eq!(reached(&c, 0, &addrs).await, 1);
        assert_eq!(reached(&c, 1, &addrs).await, 1);
    }
}
