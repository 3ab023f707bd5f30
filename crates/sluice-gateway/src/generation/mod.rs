//! One config generation: everything requests share for one config's worth. A reload
//! (`crate::control`) builds a new one ([`build`]) and swaps it in for new requests; a request
//! keeps the one it started with to its end. What outlives a config (the request-id sequence,
//! the shutdown tokens) is [`Shared`], owned by the gateway and handed to each generation.
//!
//! It sits below the stages that run a request against it (outbound, policy, relay, request)
//! and above those whose per-config state it holds (a route's balancer, the keys).

mod budget;
mod build;
mod tokens;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::HeaderValue;
use parking_lot::Mutex;
use sluice_telemetry::Telemetry;
use sluice_upstream::Upstream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, UpstreamConfig, UpstreamId};
use crate::headers::{self, REQUEST_ID};
use crate::route::targets::RouteTargets;

pub(crate) use budget::RetryBudget;
pub(crate) use build::{build, Parts};
pub use build::{BuildError, Changes};
pub(crate) use tokens::TokenSource;

/// The cell new requests load their generation from: one atomic load per request, no lock.
pub(crate) type GenerationCell = arc_swap::ArcSwap<Generation>;

/// What outlives a config: one per gateway, the same in every generation.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Cancelled when the shutdown grace period is over: streams still running end with an
    /// error event.
    pub(crate) streams_deadline: CancellationToken,
    /// Set when shutdown begins: new model requests get 503.
    pub(crate) draining: CancellationToken,
    /// The ledger's queue, when the ledger is on (its sink is held for the process).
    pub(crate) ledger: Option<sluice_ledger::LedgerHandle>,
    /// Services on the listener beside the model API, fixed at start.
    pub(crate) mounts: crate::mount::Mounts,
    /// Resumable streams outlive the generation that started them (and their clients).
    pub(crate) resume: Arc<crate::resume::Registry>,
    /// Request ids stay unique across reloads.
    request_ids: AtomicU64,
    id_prefix: Box<str>,
}

impl Shared {
    pub(crate) fn new(
        ledger: Option<sluice_ledger::LedgerHandle>,
        mounts: crate::mount::Mounts,
    ) -> Self {
        // A per-process prefix keeps generated ids unique across restarts without a RNG crate.
        let nanos = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        Shared {
            streams_deadline: CancellationToken::new(),
            draining: CancellationToken::new(),
            ledger,
            mounts,
            resume: Arc::default(),
            request_ids: AtomicU64::new(0),
            id_prefix: format!("sl-{:x}{:x}", nanos as u64, std::process::id()).into(),
        }
    }
}

/// Which config a generation runs.
#[derive(Clone, Debug)]
pub(crate) struct GenerationInfo {
    /// 1 at start, +1 per successful reload.
    pub(crate) version: u64,
    /// The config's fingerprint (`/admin/config` shows it as `hash`).
    pub(crate) hash: String,
    /// When it was swapped in.
    pub(crate) loaded_at: SystemTime,
}

/// One upstream's runtime in a generation; kept across a reload with its pool when its
/// connection settings did not change.
pub(crate) struct UpstreamRt {
    /// Its pools.
    pub(crate) handle: Upstream,
    /// Its retry budget (kept across a reload while its settings are unchanged).
    pub(crate) budget: Arc<RetryBudget>,
    /// Its name as a header value (`x-sluice-upstream`), made once instead of once a
    /// response; `None` if a name cannot be one.
    pub(crate) header: Option<HeaderValue>,
    /// The price list its models are priced by (`crate::admit::price_list`).
    pub(crate) price_list: &'static str,
    /// Its access token and refresh task (Vertex AI, Entra ID), shared with the generations
    /// before and after while its credentials are unchanged.
    pub(crate) tokens: Option<Arc<TokenSource>>,
}

/// Everything requests share: one config's worth.
pub(crate) struct Generation {
    pub(crate) config: Arc<Config>,
    /// Which config this is.
    pub(crate) info: GenerationInfo,
    /// Indexed by [`UpstreamId`], as `config.upstreams`.
    upstreams: Vec<UpstreamRt>,
    /// Indexed as `config.routes`: each route's tier-0 balancer (kept across a reload when
    /// the route's targets did not change).
    pub(crate) routes: Vec<Arc<RouteTargets>>,
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) shared: Arc<Shared>,
    /// The upstreams' own model lists, for `GET /v1/models`.
    pub(crate) models: ModelCache,
    /// Virtual keys, limits, budgets and idempotency records.
    pub(crate) keys: crate::admit::Keys,
    /// Where requests are booked, when the ledger is on.
    pub(crate) books: Option<Arc<crate::outcome::Books>>,
    /// The config's guardrails, referenced by index from routes.
    pub(crate) guards: Arc<crate::guard::Guards>,
}

impl Generation {
    /// Upstream `id`'s runtime.
    pub(crate) fn upstream(&self, id: UpstreamId) -> &UpstreamRt {
        &self.upstreams[id.index()]
    }

    /// Upstream `id`'s settings.
    pub(crate) fn upstream_config(&self, id: UpstreamId) -> &UpstreamConfig {
        self.config.upstream(id)
    }

    /// Every upstream's runtime, in `config.upstreams`' order.
    pub(crate) fn upstreams(&self) -> impl Iterator<Item = &UpstreamRt> {
        self.upstreams.iter()
    }

    /// `(name, upstream)` pairs, for the pool metrics and `/admin/pools`.
    pub(crate) fn pool_list(&self) -> Vec<(String, Upstream)> {
        self.config
            .upstreams
            .iter()
            .zip(&self.upstreams)
            .map(|(c, rt)| (c.name.clone(), rt.handle.clone()))
            .collect()
    }

    /// Whether shutdown has begun.
    pub(crate) fn draining(&self) -> bool {
        self.shared.draining.is_cancelled()
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
        let n = self.shared.request_ids.fetch_add(1, Ordering::Relaxed);
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n);
        let mut id = Vec::with_capacity(self.shared.id_prefix.len() + 1 + digits.len());
        id.extend_from_slice(self.shared.id_prefix.as_bytes());
        id.push(b'-');
        id.extend_from_slice(digits.as_bytes());
        // Built in place, not copied into the header value.
        HeaderValue::from_maybe_shared(Bytes::from(id))
            .unwrap_or_else(|_| HeaderValue::from_static("sl-unknown"))
    }
}

/// When a list was fetched, and what it held (`None`: the fetch failed).
type Fetched = (Instant, Option<Vec<String>>);

/// Per upstream, its last fetched model list (`GET /v1/models`).
#[derive(Default)]
pub(crate) struct ModelCache {
    lists: Mutex<Vec<Option<Fetched>>>,
}

impl ModelCache {
    /// Upstream `id`'s list, if fetched within `fresh`.
    pub(crate) fn get(
        &self,
        id: UpstreamId,
        fresh: std::time::Duration,
    ) -> Option<Option<Vec<String>>> {
        let lists = self.lists.lock();
        match lists.get(id.index()) {
            Some(Some((at, list))) if at.elapsed() < fresh => Some(list.clone()),
            _ => None,
        }
    }

    pub(crate) fn put(&self, id: UpstreamId, list: Option<Vec<String>>) {
        let mut lists = self.lists.lock();
        let i = id.index();
        if lists.len() <= i {
            lists.resize(i + 1, None);
        }
        lists[i] = Some((Instant::now(), list));
    }
}
