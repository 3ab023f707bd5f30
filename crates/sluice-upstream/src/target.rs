//! Aiming a request at the upstream: joining its path onto `base_url`'s path, setting the
//! authority, and dropping the headers a protocol rejects.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
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
    /// Joined paths by the request's path and query: a gateway sends a handful (one per
    /// endpoint, and per model where the path names it), so each is formatted and parsed once
    /// instead of on every request (~1.4 K instructions). Bounded by [`MAX_JOINED`].
    joined: Arc<RwLock<HashMap<Box<str>, PathAndQuery>>>,
}

/// Paths kept in [`Target::joined`]; past it a path is joined per request, as before.
const MAX_JOINED: usize = 256;

/// The path a thread joined last: its target's map, the request's path and query, the result.
struct LastJoined {
    joined: Arc<RwLock<HashMap<Box<str>, PathAndQuery>>>,
    rel: Box<str>,
    path: PathAndQuery,
}

impl Target {
    pub(crate) fn new(scheme: Scheme, authority: Authority, base_path: &str) -> Option<Target> {
        let host = HeaderValue::from_str(authority.as_str()).ok()?;
        Some(Target {
            scheme,
            authority,
            base_path: base_path.trim_end_matches('/').to_string(),
            host,
            joined: Arc::default(),
        })
    }

    /// `/chat/completions?x=1` under base path `/v1` → `/v1/chat/completions?x=1`.
    fn path(&self, uri: &Uri) -> Result<PathAndQuery, UpstreamError> {
        let rel = uri.path_and_query().map_or("/", |p| p.as_str());
        // Each thread keeps the last path it joined, with this target's map (held, so the
        // pointer cannot name another target's): a hit skips the lock and the hashing of the
        // path (~0.25 K instructions).
        thread_local! {
            static LAST: RefCell<Option<LastJoined>> = const { RefCell::new(None) };
        }
        let hit = LAST.with(|last| {
            last.borrow()
                .as_ref()
                .filter(|l| Arc::ptr_eq(&l.joined, &self.joined) && *l.rel == *rel)
                .map(|l| l.path.clone())
        });
        if let Some(p) = hit {
            return Ok(p);
        }
        let p = self.join(rel)?;
        LAST.with(|last| {
            *last.borrow_mut() = Some(LastJoined {
                joined: self.joined.clone(),
                rel: rel.into(),
                path: p.clone(),
            });
        });
        Ok(p)
    }

    /// [`Target::path`] by the shared map of joined paths.
    fn join(&self, rel: &str) -> Result<PathAndQuery, UpstreamError> {
        // A poisoned lock only means a panic elsewhere; the map is valid after every insert.
        if let Some(p) = self
            .joined
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(rel)
        {
            return Ok(p.clone());
        }
        let joined = if rel.starts_with('/') {
            format!("{}{rel}", self.base_path)
        } else {
            format!("{}/{rel}", self.base_path)
        };
        let p: PathAndQuery = joined.parse().map_err(|_| {
            UpstreamError::Protocol(format!("request path `{rel}` is not a valid URI path"))
        })?;
        let mut cache = self.joined.write().unwrap_or_else(|e| e.into_inner());
        if cache.len() < MAX_JOINED {
            cache.insert(rel.into(), p.clone());
        }
        Ok(p)
    }

    /// Makes `req` the request HTTP/1.1 sends: origin-form URI and our `Host`. In place: taking
    /// the request apart and back together copied its head three times.
    pub(crate) fn for_h1(&self, req: &mut Request<Bytes>) -> Result<(), UpstreamError> {
        *req.uri_mut() = Uri::from(self.path(req.uri())?);
        let carries_body = carries_body(req.method(), req.body());
        let len = req.body().len();
        let h = req.headers_mut();
        strip_connection_headers(h);
        h.insert(header::HOST, self.host.clone());
        set_content_length(h, carries_body, len);
        Ok(())
    }

    /// The path `req` goes to (checked once per request; each HTTP/2 attempt's head reuses
    /// it).
    pub(crate) fn h2_path(&self, req: &Request<Bytes>) -> Result<PathAndQuery, UpstreamError> {
        self.path(req.uri())
    }

    /// `req`'s head as HTTP/2 sends it, to `path` (from [`Target::h2_path`]): absolute URI
    /// (h2 derives `:scheme` and `:authority` from it), no `Host` (it would have to match
    /// `:authority`), and none of the connection-specific headers h2 rejects (RFC 9113
    /// §8.2.2). Built from a borrow, for each attempt as it is made: under `Auto` the
    /// original may still go out over HTTP/1.1, and a refused stream is sent again.
    pub(crate) fn h2_head(
        &self,
        req: &Request<Bytes>,
        path: PathAndQuery,
    ) -> Result<Request<()>, UpstreamError> {
        let uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
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
        set_content_length(h, carries_body(req.method(), req.body()), req.body().len());
        Ok(head)
    }
}

/// Hop-by-hop headers: the caller strips them already, but h2 fails the whole request on any
/// of them, and on HTTP/1.1 a stray `transfer-encoding` would contradict our Content-Length.
fn strip_connection_headers(h: &mut HeaderMap) {
    const LISTED: [HeaderName; 5] = [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ];
    // One pass over the names present first: the caller has stripped them, so there is
    // usually nothing to remove, and a hashed removal per listed name cost more than the scan.
    if !h.keys().any(|n| LISTED.contains(n) || n == header::TE) {
        return;
    }
    for name in LISTED {
        h.remove(name);
    }
    if h.get(header::TE).is_some_and(|v| v != "trailers") {
        h.remove(header::TE);
    }
}

/// Whether a request says how long its body is: it has one, or its method expects one.
fn carries_body(method: &Method, body: &Bytes) -> bool {
    !body.is_empty() || matches!(*method, Method::POST | Method::PUT | Method::PATCH)
}

/// The body is complete, so its length is known: say so, replacing whatever the client sent
/// (a mismatch would be a protocol error on either protocol).
fn set_content_length(h: &mut HeaderMap, carries_body: bool, len: usize) {
    if carries_body {
        // Most callers set it already; inserting the same value into a full map would grow it.
        let set = h
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if set != Some(len) {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        }
    } else {
        h.remove(header::CONTENT_LENGTH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        let authority = Authority::from_static("upstream.test:8080");
        Target::new(Scheme::HTTP, authority, "/v1/").expect("valid target")
    }

    /// `req` as `for_h1` leaves it.
    fn aimed(t: &Target, mut req: Request<Bytes>) -> Result<Request<Bytes>, UpstreamError> {
        t.for_h1(&mut req).map(|()| req)
    }

    fn request(path: &str, headers: &[(&'static str, &'static str)]) -> Request<Bytes> {
        let mut r = Request::new(Bytes::from_static(b"{}"));
        *r.method_mut() = Method::POST;
        *r.uri_mut() = path.parse().unwrap();
        for (n, v) in headers {
            r.headers_mut().append(*n, HeaderValue::from_static(v));
        }
        r
    }

    #[test]
    fn paths_are_joined_onto_the_base_path_and_kept_apart() {
        let t = target();
        for _ in 0..2 {
            // The second round is served from the cache: the same answers.
            let r = aimed(&t, request("/chat/completions?x=1", &[])).unwrap();
            assert_eq!(r.uri(), "/v1/chat/completions?x=1");
            let r = aimed(&t, request("/chat/completions", &[])).unwrap();
            assert_eq!(r.uri(), "/v1/chat/completions");
            let req = request("/embeddings", &[]);
            let head = t.h2_head(&req, t.h2_path(&req).unwrap()).unwrap();
            assert_eq!(head.uri(), "http://upstream.test:8080/v1/embeddings");
        }
        assert_eq!(t.joined.read().unwrap().len(), 3);
    }

    #[test]
    fn a_path_kept_by_the_thread_is_its_own_targets() {
        // Two targets, same paths, different bases, taken in turns: each answer is its own
        // target's join, whether kept by the thread, by the map, or joined afresh.
        let a = target();
        let b = Target::new(Scheme::HTTP, Authority::from_static("b.test"), "/api/v2").unwrap();
        for _ in 0..3 {
            for p in ["/chat/completions", "/chat/completions", "/embeddings?x=1"] {
                for (t, base) in [(&a, "/v1"), (&a, "/v1"), (&b, "/api/v2"), (&a, "/v1")] {
                    let r = aimed(t, request(p, &[])).unwrap();
                    assert_eq!(r.uri().to_string(), format!("{base}{p}"));
                }
            }
        }
        // A clone shares its target's map, and so its joins.
        let c = a.clone();
        let r = aimed(&c, request("/models", &[])).unwrap();
        assert_eq!(r.uri(), "/v1/models");
        assert!(a.joined.read().unwrap().contains_key("/models"));
    }

    #[test]
    fn the_joined_paths_kept_are_bounded() {
        let t = target();
        for i in 0..MAX_JOINED + 10 {
            let r = aimed(&t, request(&format!("/models/m{i}"), &[])).unwrap();
            assert_eq!(r.uri().path(), format!("/v1/models/m{i}"));
        }
        assert_eq!(t.joined.read().unwrap().len(), MAX_JOINED);
    }

    #[test]
    fn connection_specific_headers_are_dropped_and_others_kept() {
        let t = target();
        let r = aimed(
            &t,
            request(
                "/chat/completions",
                &[
                    ("connection", "keep-alive"),
                    ("keep-alive", "timeout=5"),
                    ("proxy-connection", "keep-alive"),
                    ("upgrade", "h2c"),
                    ("transfer-encoding", "chunked"),
                    ("te", "gzip"),
                    ("x-session-id", "s1"),
                ],
            ),
        )
        .unwrap();
        let names: Vec<&str> = r.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x-session-id", "host", "content-length"]);
        let r = aimed(&t, request("/chat/completions", &[("te", "trailers")])).unwrap();
        assert_eq!(r.headers()["te"], "trailers");
        assert_eq!(r.headers()["content-length"], "2");
    }
}
