//! The HTTP client of Streamable HTTP servers: hyper's HTTP/1.1 client connections over tokio
//! TCP (rustls for https), a few idle connections kept for reuse, and a response body that
//! gives its connection back only when read to the end.
//!
//! NOTE: HTTP/1.1 only. MCP servers in the field are mostly Python and Node behind uvicorn or
//! express, without h2c; one request per connection at a time is what they serve. Dropping a
//! body mid-way discards its connection, which is how a cancelled call is cut upstream.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::error::UpstreamError;

/// Idle connections older than this are not reused: servers close idle keep-alive
/// connections (uvicorn after 5 s), and one closed just as a request goes out fails it.
const MAX_IDLE_AGE: Duration = Duration::from_secs(4);

/// One Streamable HTTP endpoint and its idle connections.
pub(crate) struct HttpClient {
    url: Uri,
    host: String,
    port: u16,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    connect_timeout: Duration,
    pool: Arc<Pool>,
}

struct Pool {
    idle: Mutex<Vec<(SendRequest<Full<Bytes>>, Instant)>>,
    max_idle: usize,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client of `url`.
    ///
    /// # Errors
    /// A `ca_file` that cannot be read, or a host that is no TLS server name.
    pub(crate) fn new(
        url: &Uri,
        ca_file: Option<&std::path::Path>,
        connect_timeout: Duration,
        max_idle: usize,
    ) -> Result<HttpClient, String> {
        let https = url.scheme_str() == Some("https");
        let host = url
            .host()
            .ok_or("the URL has no host")?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            let mut roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            if let Some(path) = ca_file {
                let pem =
                    std::fs::read(path).map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                use rustls_pki_types::pem::PemObject as _;
                let certs = CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("ca_file {}: not valid PEM: {e}", path.display()))?;
                for c in certs {
                    roots
                        .add(c)
                        .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                }
            }
            // An explicit provider: the process may not have installed a default one.
            let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            let name = ServerName::try_from(host.clone())
                .map_err(|_| format!("`{host}` is not a valid TLS server name"))?;
            Some((TlsConnector::from(Arc::new(cfg)), name))
        } else {
            None
        };
        Ok(HttpClient {
            url: url.clone(),
            host,
            port,
            tls,
            connect_timeout,
            pool: Arc::new(Pool {
                idle: Mutex::new(Vec::new()),
                max_idle,
            }),
        })
    }

    /// A POST/GET/DELETE to the endpoint with `headers` (the caller's) and `body`.
    pub(crate) fn request(
        &self,
        method: http::Method,
        headers: HeaderMap,
        body: Bytes,
    ) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method;
        *req.uri_mut() = self.url.clone();
        *req.headers_mut() = headers;
        if let Some(a) = self.url.authority() {
            if let Ok(v) = HeaderValue::from_str(a.as_str()) {
                req.headers_mut().insert(http::header::HOST, v);
            }
        }
        req
    }

    /// Sends `req` and waits for the response head (the caller bounds the wait). A request
    /// that a reused connection did not take (it had just closed) goes out on a new one.
    ///
    /// Cancel safety: dropping the future drops the request (and its connection).
    pub(crate) async fn send(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<PooledBody>, UpstreamError> {
        // hyper's client wants origin-form for HTTP/1.1.
        let mut req = req;
        let path = self
            .url
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse::<Uri>()
            .unwrap_or_else(|_| Uri::from_static("/"));
        *req.uri_mut() = path;
        if let Some(mut sender) = self.take_idle() {
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok(self.wrap(resp, sender)),
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(UpstreamError::Broken(e.into_error().to_string())),
                },
            }
        }
        let mut sender = self.connect().await?;
        match sender.send_request(req).await {
            Ok(resp) => Ok(self.wrap(resp, sender)),
            Err(e) => Err(UpstreamError::Broken(e.to_string())),
        }
    }

    fn wrap(
        &self,
        resp: Response<Incoming>,
        sender: SendRequest<Full<Bytes>>,
    ) -> Response<PooledBody> {
        let done = resp.body().is_end_stream();
        let (parts, body) = resp.into_parts();
        let mut pooled = PooledBody {
            inner: body,
            lease: Some((sender, self.pool.clone())),
        };
        if done {
            pooled.give_back();
        }
        Response::from_parts(parts, pooled)
    }

    fn take_idle(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.pool.idle.lock();
        while let Some((s, at)) = idle.pop() {
            if !s.is_closed() && s.is_ready() && at.elapsed() < MAX_IDLE_AGE {
                return Some(s);
            }
        }
        None
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, UpstreamError> {
        let deadline = self.connect_timeout;
        let fut = async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(|e| UpstreamError::Connect(e.kind().to_string()))?;
            let _ = tcp.set_nodelay(true);
            match &self.tls {
                None => handshake(TokioIo::new(tcp)).await,
                Some((connector, name)) => {
                    let tls = connector
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(|e| UpstreamError::Connect(format!("TLS: {e}")))?;
                    handshake(TokioIo::new(tls)).await
                }
            }
        };
        tokio::time::timeout(deadline, fut)
            .await
            .map_err(|_| UpstreamError::Timeout(deadline))?
    }
}

async fn handshake<I>(io: I) -> Result<SendRequest<Full<Bytes>>, UpstreamError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| UpstreamError::Connect(e.to_string()))?;
    // Owned by the connection: it ends when the sender and the last body are dropped, or the
    // server closes.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// A response body that returns its connection to the pool once read to the end; dropped
/// before that, it closes the connection (HTTP/1.1 has no other way to cancel).
pub(crate) struct PooledBody {
    inner: Incoming,
    lease: Option<(SendRequest<Full<Bytes>>, Arc<Pool>)>,
}

impl std::fmt::Debug for PooledBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBody").finish_non_exhaustive()
    }
}

impl PooledBody {
    fn give_back(&mut self) {
        if let Some((sender, pool)) = self.lease.take() {
            let mut idle = pool.idle.lock();
            if idle.len() < pool.max_idle {
                idle.push((sender, Instant::now()));
            }
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match &r {
            Poll::Ready(None) => self.give_back(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.give_back(),
            Poll::Ready(Some(Err(_))) => self.lease = None,
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Reads a whole body, at most `max` bytes.
///
/// # Errors
/// [`UpstreamError::TooLarge`] past `max`; [`UpstreamError::Broken`] when the body fails.
pub(crate) async fn read_body(body: &mut PooledBody, max: usize) -> Result<Bytes, UpstreamError> {
    use http_body_util::BodyExt as _;
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| UpstreamError::Broken(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(UpstreamError::TooLarge(max));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

/// Whether a response is an SSE stream.
pub(crate) fn is_sse(headers: &HeaderMap) -> bool {
    content_type_is(headers, "text/event-stream")
}

/// Whether a response is JSON.
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    content_type_is(headers, "application/json")
}

fn content_type_is(headers: &HeaderMap, want: &str) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(want))
}

/// A status worth naming in errors.
pub(crate) fn status_error(status: StatusCode) -> UpstreamError {
    UpstreamError::Status(status.as_u16())
}
