//! One config generation: everything requests share for one config's worth. A reload
//! (`crate::control`) builds a new one and swaps it in for new requests; a request keeps the
//! one it started with to its end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::header::HeaderValue;
use sluice_upstream::Upstream;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::headers::{self, REQUEST_ID};
use crate::policy::RetryBudget;
use sluice_telemetry::Telemetry;

/// Everything requests share: one config's worth. A reload builds a new `State` and swaps it
/// in for new requests (`crate::reload`); a request keeps the one it started with to its end.
pub(crate) struct State {
    pub(crate) config: Config,
    /// Which config this is: its version (1 at start, +1 per reload), hash and load time.
    pub(crate) generation: crate::reload::Generation,
    /// Parallel to `config.upstreams`.
    pub(crate) upstreams: Vec<Upstream>,
    /// Parallel to `config.routes`: each route's tier-0 balancer (kept across a reload when
    /// the route's targets did not change).
    pub(crate) targets: Vec<Arc<crate::targets::RouteTargets>>,
    /// Parallel to `config.upstreams` (kept across a reload with their upstream).
    pub(crate) budgets: Vec<Arc<RetryBudget>>,
    pub(crate) telemetry: Arc<Telemetry>,
    /// Cancelled when the shutdown grace period is over: streams still running end with an
    /// error event. The same token in every generation.
    pub(crate) streams_deadline: CancellationToken,
    /// Set when shutdown begins: new model requests get 503. The same token in every
    /// generation.
    pub(crate) draining: CancellationToken,
    /// What an upstream without `provider` speaks: the client's own API.
    pub(crate) passthrough: crate::outbound::PassthroughProviders,
    /// The upstreams' own model lists, for `GET /v1/models`.
    pub(crate) models: crate::request::ModelCache,
    /// Virtual keys, limits, budgets and idempotency records.
    pub(crate) keys: crate::admit::Keys,
    /// Shared by every generation, so request ids stay unique across reloads.
    request_ids: Arc<AtomicU64>,
    id_prefix: Arc<str>,
    /// Parallel to `config.upstreams`: each name as a header value (`x-sluice-upstream`),
    /// made once instead of once a response.
    upstream_headers: Vec<Option<HeaderValue>>,
}

/// The parts of a [`State`] besides its config: built by `crate::reload::build`.
pub(crate) struct StateParts {
    pub(crate) generation: crate::reload::Generation,
    pub(crate) upstreams: Vec<Upstream>,
    pub(crate) targets: Vec<Arc<crate::targets::RouteTargets>>,
    pub(crate) budgets: Vec<Arc<RetryBudget>>,
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) keys: crate::admit::Keys,
}

impl State {
    /// A state for `config`; `prev` (the running generation, on a reload) hands over what
    /// outlives a config: the shutdown tokens and the request id sequence.
    pub(crate) fn new(config: Config, parts: StateParts, prev: Option<&State>) -> Self {
        let StateParts {
            generation,
            upstreams,
            targets,
            budgets,
            telemetry,
            keys,
        } = parts;
        let (streams_deadline, draining, request_ids, id_prefix) = match prev {
            Some(p) => (
                p.streams_deadline.clone(),
                p.draining.clone(),
                p.request_ids.clone(),
                p.id_prefix.clone(),
            ),
            None => {
                // A per-process prefix keeps generated ids unique across restarts without a
                // RNG crate.
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                (
                    CancellationToken::new(),
                    CancellationToken::new(),
                    Arc::new(AtomicU64::new(0)),
                    Arc::from(format!("sl-{:x}{:x}", nanos as u64, std::process::id())),
                )
            }
        };
        let upstream_headers = config
            .upstreams
            .iter()
            .map(|u| HeaderValue::from_str(&u.name).ok())
            .collect();
        State {
            upstream_headers,
            config,
            generation,
            upstreams,
            targets,
            budgets,
            telemetry,
            streams_deadline,
            draining,
            passthrough: Default::default(),
            models: Default::default(),
            keys,
            request_ids,
            id_prefix,
        }
    }

    /// Upstream `i`'s name as a header value; `None` if a name cannot be one.
    pub(crate) fn upstream_header(&self, i: usize) -> Option<HeaderValue> {
        self.upstream_headers.get(i).cloned().flatten()
    }

    /// The request's id, the client's or a new one. Marked never to be indexed: HPACK (an
    /// HTTP/2 client's response, an HTTP/2 upstream's request) would otherwise add each new id
    /// to the connection's table, to be evicted unused, after comparing it with every id
    /// still there (see `headers::never_index`).
    pub(crate) fn request_id(&self, req: &http::request::Parts) -> HeaderValue {
        let mut id = self.new_request_id(req);
        id.set_sensitive(true);
        id
    }

    fn new_request_id(&self, req: &http::request::Parts) -> HeaderValue {
        if let Some(v) = headers::get(&req.headers, &REQUEST_ID) {
            if !v.is_empty() && v.len() <= 200 {
                return v.clone();
            }
        }
        let n = self.request_ids.fetch_add(1, Ordering::Relaxed);
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n);
        let mut id = Vec::with_capacity(self.id_prefix.len() + 1 + digits.len());
        id.extend_from_slice(self.id_prefix.as_bytes());
        id.push(b'-');
        id.extend_from_slice(digits.as_bytes());
        // Built in place, not copied into the header value.
        HeaderValue::from_maybe_shared(Bytes::from(id))
            .unwrap_or_else(|_| HeaderValue::from_static("sl-unknown"))
    }
}
