//! Short-lived OAuth access tokens of cloud upstreams (Vertex AI's service account, Azure
//! OpenAI's Entra ID client credentials): one refresh task per upstream keeps a token ready
//! and requests only read it.
//!
//! The schedule is `sluice_providers::sign::refresh::TokenCache`'s: refresh at 80 % of the
//! lifetime (or five minutes before expiry), one refresh in flight, the old token served until
//! it truly expires, failures backed off. So under load no request waits at expiry and the
//! token endpoint sees one request per token, not one per request. A request waits only for
//! the very first token (bounded by its first-byte deadline); when no live token is left and
//! the last refresh failed, it fails at once with [`GatewayError::UpstreamCredentials`] (503
//! in the client's format), which the policy treats as retryable elsewhere.
//!
//! The task is owned by the [`TokenSource`], which generations share while the upstream's
//! credentials are unchanged (a reload keeps the token), and is aborted when the last
//! generation holding it is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::uri::PathAndQuery;
use http::{Method, Request, Uri};
use parking_lot::Mutex;
use ring::rand::SystemRandom;
use sluice_providers::sign::oauth::{self, TokenError, TokenRequest, MAX_TOKEN_RESPONSE};
use sluice_providers::sign::refresh::{RefreshPolicy, TokenCache};
use sluice_upstream::{Lane, Upstream};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::CloudAuth;
use crate::error::GatewayError;

/// One token request's whole exchange (connect, answer, body).
const FETCH_TIMEOUT: Duration = Duration::from_secs(15);

/// How a token is asked for.
enum Minter {
    Google(Arc<sluice_providers::sign::google::ServiceAccountKey>),
    Entra(sluice_providers::sign::entra::ClientCredentials),
    /// The credential is unusable (not resolved, a token URL that is not a URL): every
    /// refresh fails with this.
    Broken(String),
}

impl Minter {
    /// Where its tokens come from (no token request is made, nor a JWT signed, to learn it).
    fn token_url(&self) -> Result<String, String> {
        match self {
            Minter::Google(key) => Ok(key.token_uri().to_string()),
            Minter::Entra(c) => Ok(c.token_url()),
            Minter::Broken(why) => Err(why.clone()),
        }
    }

    fn request(&self) -> Result<TokenRequest, TokenError> {
        match self {
            Minter::Google(key) => {
                key.token_request(crate::clock::now_unix(), &SystemRandom::new())
            }
            Minter::Entra(c) => Ok(c.token_request()),
            Minter::Broken(why) => Err(TokenError::Malformed {
                status: 0,
                reason: why.clone(),
            }),
        }
    }
}

struct Inner {
    upstream: String,
    /// The clock's origin: the cache counts time as a `Duration` since it.
    origin: Instant,
    cache: Mutex<TokenCache<HeaderValue, TokenError>>,
    /// The refresh task → requests waiting for a token: a refresh ended.
    refreshed: Notify,
    /// Requests → the refresh task: the token was refused, refresh now.
    wake: Notify,
    /// Token requests sent, for tests and logs.
    fetches: AtomicU64,
}

impl Inner {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// One upstream's token and the task that refreshes it.
pub(crate) struct TokenSource {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("upstream", &self.inner.upstream)
            .field("fetches", &self.inner.fetches.load(Ordering::Relaxed))
            .finish()
    }
}

// === impl TokenSource ===

impl TokenSource {
    /// Starts the refresh task of upstream `name` (its first token is asked for at once), or
    /// `None` when its credentials take no token.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub(crate) fn start(
        name: &str,
        cloud: &CloudAuth,
        ca_file: Option<std::path::PathBuf>,
    ) -> Option<TokenSource> {
        let minter = match cloud {
            CloudAuth::Vertex(v) => match &v.key {
                Some(k) => Minter::Google(k.clone()),
                None => Minter::Broken("the service-account key was not loaded".into()),
            },
            CloudAuth::Entra(e) => match &e.credentials {
                Some(c) => Minter::Entra(c.clone()),
                None => Minter::Broken("the Entra ID client credentials were not loaded".into()),
            },
            CloudAuth::Bedrock(_) => return None,
        };
        let inner = Arc::new(Inner {
            upstream: name.to_string(),
            origin: Instant::now(),
            cache: Mutex::new(TokenCache::new(RefreshPolicy::default())),
            refreshed: Notify::new(),
            wake: Notify::new(),
            fetches: AtomicU64::new(0),
        });
        let endpoint = minter
            .token_url()
            .and_then(|url| Endpoint::new(name, &url, ca_file));
        let (minter, endpoint) = match endpoint {
            Ok(ep) => (minter, Some(ep)),
            Err(why) => (Minter::Broken(why), None),
        };
        let task = tokio::spawn(refresh_loop(inner.clone(), minter, endpoint));
        Some(TokenSource { inner, task })
    }

    /// The `Authorization: Bearer` to send now: the live token, or (before the first one
    /// came) the first one, waited for until `by`.
    ///
    /// # Errors
    /// [`GatewayError::UpstreamCredentials`]: no live token and the last refresh failed (the
    /// token endpoint's error), or none came by `by`.
    ///
    /// # Cancel safety
    /// Dropping the future only stops the wait.
    pub(crate) async fn bearer(&self, by: Instant) -> Result<HeaderValue, GatewayError> {
        let inner = &*self.inner;
        // The common case, a live token, takes the cache's lock only.
        if let Some(t) = inner.cache.lock().token(inner.now()) {
            return Ok(t.clone());
        }
        loop {
            let refreshed = inner.refreshed.notified();
            tokio::pin!(refreshed);
            // Registered before the check: a refresh that ends between them still wakes us.
            refreshed.as_mut().enable();
            {
                let cache = inner.cache.lock();
                if let Some(t) = cache.token(inner.now()) {
                    return Ok(t.clone());
                }
                if !cache.is_refreshing() {
                    if let Some(e) = cache.last_error() {
                        return Err(self.error(e.to_string()));
                    }
                }
            }
            // No token and none failing: the first one is on its way (or due: wake the task).
            inner.wake.notify_one();
            if tokio::time::timeout_at(by, refreshed).await.is_err() {
                return Err(self.error(
                    "no access token came from the token endpoint within the first-byte timeout"
                        .into(),
                ));
            }
        }
    }

    /// The upstream refused `sent` (401): drop it unless a newer token replaced it already,
    /// and refresh at once.
    pub(crate) fn refused(&self, sent: &HeaderValue) {
        let mut cache = self.inner.cache.lock();
        let now = self.inner.now();
        if cache.token(now) == Some(sent) {
            cache.invalidate(now);
            drop(cache);
            tracing::warn!(
                upstream = %self.inner.upstream,
                "the upstream refused its access token; refreshing"
            );
            self.inner.wake.notify_one();
        }
    }

    fn error(&self, detail: String) -> GatewayError {
        GatewayError::UpstreamCredentials {
            upstream: self.inner.upstream.clone(),
            detail,
        }
    }
}

/// Where token requests go: a one-connection pool to the token URL's origin.
struct Endpoint {
    http: Upstream,
    path: PathAndQuery,
}

impl Endpoint {
    fn new(name: &str, url: &str, ca_file: Option<std::path::PathBuf>) -> Result<Endpoint, String> {
        let uri: Uri = url
            .parse()
            .map_err(|_| format!("the token URL `{url}` is not a URL"))?;
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(format!("the token URL `{url}` is not absolute"));
        };
        let base: Uri = format!("{scheme}://{authority}")
            .parse()
            .map_err(|_| format!("the token URL `{url}` is not a URL"))?;
        let path = uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let http = Upstream::new(sluice_upstream::UpstreamConfig {
            name: format!("{name}.token"),
            base_url: base,
            protocol: sluice_upstream::Protocol::Http1,
            ca_file,
            connect_timeout: Duration::from_secs(5),
            ..sluice_upstream::UpstreamConfig::default()
        })
        .map_err(|e| format!("the token endpoint: {e}"))?;
        Ok(Endpoint { http, path })
    }

    /// Sends one token request and reads its answer.
    async fn fetch(&self, req: TokenRequest) -> Result<oauth::AccessToken, TokenError> {
        let mut r = Request::new(Bytes::from(req.body.clone()));
        *r.method_mut() = Method::POST;
        *r.uri_mut() = Uri::from(self.path.clone());
        for (k, v) in req.headers() {
            r.headers_mut().insert(k, v);
        }
        let unreachable = |label: &str| TokenError::Status {
            // 503: retryable, like an overloaded endpoint.
            status: 503,
            snippet: format!("the token endpoint cannot be reached ({label})"),
        };
        // One deadline for the exchange: the send's (connect, write, headers), then the body's.
        let by = Instant::now() + FETCH_TIMEOUT;
        let resp = self
            .http
            .send_on(Lane::Short, r, by)
            .await
            .map_err(|e| unreachable(e.metric_label()))?;
        let status = resp.status().as_u16();
        let body = tokio::time::timeout_at(by, resp.into_body().read_capped(MAX_TOKEN_RESPONSE))
            .await
            .map_err(|_| unreachable("timeout"))?
            .map_err(|(_, e)| unreachable(e.metric_label()))?;
        oauth::parse_token_response(status, &body)
    }
}

/// The refresh task: fetch when due (at once for the first token), publish, sleep until the
/// next due time or a request's wake-up.
async fn refresh_loop(inner: Arc<Inner>, minter: Minter, endpoint: Option<Endpoint>) {
    loop {
        let began = inner.cache.lock().begin_refresh(inner.now());
        if began {
            inner.fetches.fetch_add(1, Ordering::Relaxed);
            let result = match (minter.request(), &endpoint) {
                (Ok(req), Some(ep)) => ep.fetch(req).await,
                (Err(e), _) => Err(e),
                (Ok(_), None) => Err(TokenError::Malformed {
                    status: 0,
                    reason: "no token endpoint".into(),
                }),
            }
            .and_then(|t| t.authorization().map(|(_, v)| (v, t.expires_in)));
            {
                let mut cache = inner.cache.lock();
                let now = inner.now();
                match result {
                    Ok((header, lifetime)) => {
                        tracing::debug!(
                            upstream = %inner.upstream,
                            ?lifetime,
                            fetches = inner.fetches.load(Ordering::Relaxed),
                            "access token refreshed"
                        );
                        cache.refresh_succeeded(now, header, lifetime);
                    }
                    Err(e) => {
                        tracing::warn!(
                            upstream = %inner.upstream,
                            error = %e,
                            "the upstream's access token could not be refreshed"
                        );
                        cache.refresh_failed(now, e);
                    }
                }
            }
            inner.refreshed.notify_waiters();
        }
        let due = inner.cache.lock().due_at();
        // `None` only while a refresh is in flight, which this task alone starts.
        let at = inner.origin + due.unwrap_or(Duration::from_secs(3600));
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = inner.wake.notified() => {}
        }
    }
}
