//! What each admin path answers, and who may ask.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};

use super::feed::{Feed, FeedBody};
use super::source::AdminSource;

/// The admin plane's shared state.
pub(crate) struct Admin {
    pub(super) source: Arc<dyn AdminSource>,
    pub(super) feed: Arc<Feed>,
}

/// An admin response body: a whole buffer, or the dashboard's feed.
pub(crate) enum AdminBody {
    Full(Option<Bytes>),
    Feed(Box<FeedBody>),
}

impl Body for AdminBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            AdminBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            AdminBody::Feed(f) => Pin::new(f.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, AdminBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            AdminBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            AdminBody::Full(None) => SizeHint::with_exact(0),
            AdminBody::Feed(_) => SizeHint::default(),
        }
    }
}

fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<AdminBody> {
    let mut r = Response::new(AdminBody::Full(Some(body.into())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn json(status: StatusCode, v: &serde_json::Value) -> Response<AdminBody> {
    full(status, "application/json", v.to_string())
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<AdminBody> {
    json(
        status,
        &serde_json::json!({ "error": { "code": code, "message": message } }),
    )
}

/// Who may see a path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Liveness, readiness and the dashboard's static files: nothing secret in them.
    Open,
    /// Everything else: the bearer token, when one is configured.
    Token,
}

impl Admin {
    /// Answers one admin request. Never fails.
    pub(crate) async fn handle<B>(&self, req: Request<B>) -> Response<AdminBody> {
        let path = req.uri().path();
        let access = match path {
            "/healthz" | "/readyz" => Access::Open,
            p if super::dashboard::asset(p).is_some() => Access::Open,
            "/" | "/admin" => Access::Open,
            _ => Access::Token,
        };
        // Reads only, but for the reload (it changes the gateway, so it takes POST alone) and
        // the cache's purge.
        let (allowed, allow) = if path == "/admin/reload" {
            (req.method() == Method::POST, "POST")
        } else if path == "/admin/cache" {
            // Reads, and purges (DELETE) what the cache holds.
            (
                matches!(*req.method(), Method::GET | Method::HEAD | Method::DELETE),
                "GET, HEAD, DELETE",
            )
        } else {
            (
                req.method() == Method::GET || req.method() == Method::HEAD,
                "GET, HEAD",
            )
        };
        if !allowed {
            let mut r = error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                &format!("{path} answers {allow}"),
            );
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
            return r;
        }
        // The config in force now: this request's answer is about it.
        let config = self.source.config();
        if access == Access::Token {
            if let Some(token) = &config.server.admin_token {
                let given = req.headers().get(header::AUTHORIZATION);
                if !given.is_some_and(|v| token.matches_header(v.as_bytes())) {
                    let mut r = error(
                        StatusCode::UNAUTHORIZED,
                        "unauthorized",
                        "send Authorization: Bearer <server.admin_token>",
                    );
                    r.headers_mut().insert(
                        header::WWW_AUTHENTICATE,
                        HeaderValue::from_static("Bearer realm=\"sluice-admin\""),
                    );
                    return r;
                }
            }
        }
        match path {
            "/healthz" => full(
                StatusCode::OK,
                "application/json",
                &b"{\"status\":\"ok\"}"[..],
            ),
            "/readyz" => {
                let r = self.source.readiness();
                let status = if r.ready {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                json(status, &r.json())
            }
            "/metrics" => full(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.source.telemetry().encode(),
            ),
            "/admin/pools" => json(StatusCode::OK, &self.source.pools()),
            "/admin/targets" => json(StatusCode::OK, &self.source.targets()),
            "/admin/config" => {
                let mut v = config.view();
                let g = self.source.generation();
                v["version"] = g.version.into();
                v["loaded_at"] = humantime::format_rfc3339_seconds(g.loaded_at)
                    .to_string()
                    .into();
                json(StatusCode::OK, &v)
            }
            "/admin/reload" => {
                let reply = self.source.reload().await;
                full(reply.status, "application/json", reply.body)
            }
            "/admin/usage" => {
                let reply = self.source.usage(req.uri().query().unwrap_or("")).await;
                let csv = reply.status.is_success() && !reply.body.starts_with(b"{");
                let kind = if csv {
                    "text/csv; charset=utf-8"
                } else {
                    "application/json"
                };
                full(reply.status, kind, reply.body)
            }
            "/admin/cache" => {
                let query = req.uri().query().unwrap_or("");
                let reply = self.source.cache(req.method(), query).await;
                full(reply.status, "application/json", reply.body)
            }
            "/admin/mcp" => match self.source.mcp() {
                Some(v) => json(StatusCode::OK, &v),
                None => error(
                    StatusCode::NOT_FOUND,
                    "mcp_disabled",
                    "no MCP gateway: add [[mcp.server]] entries to the config and restart",
                ),
            },
            p if p == "/admin/keys" || p.starts_with("/admin/keys/") => {
                // Reads the state store (Redis when shared), so across every instance.
                let reply = self.source.keys(&p["/admin/keys".len()..]).await;
                full(reply.status, "application/json", reply.body)
            }
            "/admin/feed" => match self.feed.subscribe() {
                Some(body) => {
                    let mut r = Response::new(AdminBody::Feed(Box::new(body)));
                    let h = r.headers_mut();
                    h.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/event-stream"),
                    );
                    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
                    r
                }
                None => error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too_many_viewers",
                    &format!(
                        "at most {} dashboards may watch at once",
                        super::feed::MAX_VIEWERS
                    ),
                ),
            },
            "/" | "/admin" => {
                let mut r = full(StatusCode::PERMANENT_REDIRECT, "text/plain", "/admin/");
                r.headers_mut()
                    .insert(header::LOCATION, HeaderValue::from_static("/admin/"));
                r
            }
            p => match super::dashboard::asset(p) {
                Some((content_type, body)) => full(StatusCode::OK, content_type, body),
                None => error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    "admin paths: /metrics, /healthz, /readyz, /admin/, /admin/feed, \
                     /admin/pools, /admin/targets, /admin/config, /admin/keys[/{id}], \
                     /admin/usage, /admin/cache, /admin/mcp, POST /admin/reload",
                ),
            },
        }
    }
}
