//! Aiming a request at the upstream: joining its path onto `base_url`'s path, setting the
//! authority, and dropping the headers a protocol rejects.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Uri};

use crate::error::UpstreamError;

/// Where requests go: fixed per upstream, derived from `base_url` in `Upstream::new`.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) scheme: Scheme,
    pub(crate) authority: Authority,
    /// `base_url`'s path without a trailing `/` (empty for `/`).
    base_path: String,
    host: HeaderValue,
}

impl Target {
    pub(crate) fn new(scheme: Scheme, authority: Authority, base_path: &str) -> Option<Target> {
        let host = HeaderValue::from_str(authority.as_str()).ok()?;
        Some(Target {
            scheme,
            authority,
            base_path: base_path.trim_end_matches('/').to_string(),
            host,
        })
    }

    /// `/chat/completions?x=1` under base path `/v1` → `/v1/chat/completions?x=1`.
    fn path(&self, uri: &Uri) -> Result<PathAndQuery, UpstreamError> {
        let rel = uri.path_and_query().map_or("/", |p| p.as_str());
        let joined = if rel.starts_with('/') {
            format!("{}{rel}", self.base_path)
        } else {
            format!("{}/{rel}", self.base_path)
        };
        joined.parse().map_err(|_| {
            UpstreamError::Protocol(format!("request path `{rel}` is not a valid URI path"))
        })
    }

    /// The request as HTTP/1.1 sends it: origin-form URI and our `Host`.
    pub(crate) fn for_h1(&self, req: Request<Bytes>) -> Result<Request<Bytes>, UpstreamError> {
        let (mut parts, body) = req.into_parts();
        parts.uri = Uri::from(self.path(&parts.uri)?);
        strip_connection_headers(&mut parts.headers);
        parts.headers.insert(header::HOST, self.host.clone());
        set_content_length(&mut parts.headers, &parts.method, &body);
        Ok(Request::from_parts(parts, body))
    }

    /// The request as HTTP/2 sends it: absolute URI (h2 derives `:scheme` and `:authority`
    /// from it), no `Host` (it would have to match `:authority`), and none of the
    /// connection-specific headers h2 rejects (RFC 9113 §8.2.2).
    pub(crate) fn for_h2(
        &self,
        req: &Request<Bytes>,
    ) -> Result<(Request<()>, Bytes), UpstreamError> {
        // Built from a borrow: under `Auto` the original may still go out over HTTP/1.1.
        let uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(self.path(req.uri())?)
            .build()
            .map_err(|e| UpstreamError::Protocol(e.to_string()))?;
        let mut head = Request::new(());
        *head.method_mut() = req.method().clone();
        *head.uri_mut() = uri;
        *head.version_mut() = http::Version::HTTP_2;
        *head.headers_mut() = req.headers().clone();
        let h = head.headers_mut();
        strip_connection_headers(h);
        h.remove(header::HOST);
        set_content_length(h, req.method(), req.body());
        Ok((head, req.body().clone()))
    }
}

/// Hop-by-hop headers: the caller strips them already, but h2 fails the whole request on any
/// of them, and on HTTP/1.1 a stray `transfer-encoding` would contradict our Content-Length.
fn strip_connection_headers(h: &mut HeaderMap) {
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::HeaderName::from_static("keep-alive"),
        header::HeaderName::from_static("proxy-connection"),
    ] {
        h.remove(name);
    }
    if h.get(header::TE).is_some_and(|v| v != "trailers") {
        h.remove(header::TE);
    }
}

/// The body is complete, so its length is known: say so, replacing whatever the client sent
/// (a mismatch would be a protocol error on either protocol).
fn set_content_length(h: &mut HeaderMap, method: &Method, body: &Bytes) {
    let carries_body =
        !body.is_empty() || matches!(*method, Method::POST | Method::PUT | Method::PATCH);
    if carries_body {
        let len = HeaderValue::from(body.len());
        // Most callers set it already; inserting the same value into a full map would grow it.
        if h.get(header::CONTENT_LENGTH) != Some(&len) {
            h.insert(header::CONTENT_LENGTH, len);
        }
    } else {
        h.remove(header::CONTENT_LENGTH);
    }
}
