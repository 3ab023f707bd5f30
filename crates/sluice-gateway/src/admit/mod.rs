//! The admit stage: virtual keys, limits, budgets, idempotency and the response cache.
//!
//! Per request, in the order the request path calls it:
//! 1. [`Keys::identify`] and [`Keys::screen`], before the body is read: who the key headers
//!    say the client is (one SHA-256 of the presented key and one map probe), and a 401 at once
//!    when no route could take the request (an unknown key where every route requires one, a
//!    revoked key).
//! 2. [`Keys::authorize`], once the route is known: the route's key mode, the key's routes and
//!    models (403), and the client's key headers removed so they never reach the upstream.
//! 3. [`Keys::idempotency`] for a request with an `Idempotency-Key`: run it, wait for the same
//!    request in flight, replay its stored response, or refuse (409, 422).
//! 4. [`Keys::admit`]: the key's, the key's per-model and the route's limits and the key's
//!    budget in one call to the state store (one Redis round trip), all or nothing; a refusal
//!    is a 429 with `Retry-After`. The [`Ticket`] rides on the request's log record and is
//!    settled when it finishes, with the usage it carries (partial on cancel): tokens
//!    reconciled, concurrency released, spend added (a second round trip, off the request's
//!    path).
//!
//! 5. On a route with `cache`, after the limits (a hit counts as a request):
//!    [`Keys::cache_start`] (`cache.rs`): the lookup and the single flight, and the
//!    [`CacheRun`] that records the answer for the cache as it goes out.
//!
//! Routes without keys or limits skip all of it (one flag test per request); routes without a
//! cache never reach `cache.rs`.

mod admin;
mod cache;
mod idempotency;
mod metrics;
mod price;
mod quota_headers;
mod refusal;
mod table;

use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderMap;
use sluice_state::{Admission, Check, Decision, Quota, Store, MAX_CHECKS};

pub use admin::{admin_keys, AdminReply};
pub(crate) use cache::{admin_cache, saved_usage, CacheAsk, CacheRun, CacheStart};
pub(crate) use idempotency::{complete, replay, to_store, IdempotencyStart, IDEMPOTENCY_KEY};
pub use refusal::{KeyError, Limited};
use table::TeamPlan;
pub use table::{Identity, VirtualKey};

use crate::config::{Config, KeyMode, Limits};
use metrics::KeyMetrics;
pub(crate) use price::{price_list, tokens, Pricer};
use refusal::Scope;
use table::KeyTable;

/// A key with prices but no budget still has its spend counted, per UTC day, for
/// `GET /admin/keys/{id}` (a budget check that never refuses).
const TRACKING_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// The limit of that tracking check: the store's largest.
const TRACKING_LIMIT: u64 = 1 << 50;

/// Keys, limits, budgets and idempotency records of one gateway. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Keys {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    table: KeyTable,
    store: Store,
    routes: Vec<RoutePlan>,
    prices: Arc<Pricer>,
    metrics: KeyMetrics,
    limit_values: quota_headers::LimitValues,
    replay_ttl: Duration,
    /// The response cache: one per gateway (built from the store, so it shares its Redis),
    /// kept across reloads with its metric families.
    cache: sluice_state::ResponseCache,
    cache_metrics: cache::CacheMetrics,
    /// Some route looks at keys (or the config defines keys): key headers are read.
    uses_keys: bool,
    /// Every route requires a key: a request without a valid one is refused before its body.
    all_required: bool,
    /// Some route ignores keys: a revoked key may still pass there.
    any_off: bool,
}

/// What one route asks of its requests.
#[derive(Debug)]
struct RoutePlan {
    name: String,
    mode: KeyMode,
    /// The name of the route's counters: `r:<name>`.
    counter: Arc<str>,
    limits: Limits,
    /// The model names the route's targets send instead of the client's: a request's spend
    /// is priced by the one that served it.
    target_models: Vec<String>,
}

/// Which limit a check of an admission belongs to (kept on the stack, turned into a
/// [`Scope`] only for a refusal's message).
#[derive(Clone, Copy, Debug)]
enum ScopeRef {
    Key,
    KeyModels(usize),
    Team,
    Route,
    Tracking,
}

// === impl Keys ===

impl Keys {
    /// The prices in force (the key budgets' and the ledger's).
    pub(crate) fn pricer(&self) -> Arc<Pricer> {
        self.inner.prices.clone()
    }

    /// Builds the configured state store (in memory, or Redis: pinged within its connect
    /// timeout; an unreachable Redis starts in the configured failure mode) and the key table.
    ///
    /// # Errors
    /// The state settings are invalid (config validation already rejects them).
    pub async fn start(config: &Config) -> Result<Keys, sluice_state::ConfigError> {
        let store = Store::new(config.state.store.clone()).await?;
        Ok(Keys::with_store(config, store))
    }

    /// In this process's memory whatever `[state]` says: for tests and benchmarks.
    pub fn in_memory(config: &Config) -> Keys {
        let s = &config.state.store;
        Keys::with_store(config, Store::in_memory(&s.memory, &s.idempotency))
    }

    /// The keys of a reloaded `config` over this store and these metric families: counters,
    /// limits and idempotency records already in the store carry on (a reload changes the
    /// rules, not what was spent). `[state]` itself needs a restart.
    pub(crate) fn reconfigure(&self, config: &Config) -> Keys {
        let i = &self.inner;
        let cache = (i.cache.clone(), i.cache_metrics.clone());
        Keys::build(config, i.store.clone(), i.metrics.clone(), cache)
    }

    /// Must be called inside a tokio runtime when the store is in Redis (the cache starts
    /// its task that writes to Redis).
    fn with_store(config: &Config, store: Store) -> Keys {
        // Built whether or not a route caches: a reload may turn a route's cache on, and an
        // idle in-memory cache is two empty maps.
        let cache = sluice_state::ResponseCache::new(&store, &config.state.cache)
            .expect("config validation checked the cache's bounds");
        let cache = (cache, cache::CacheMetrics::default());
        Keys::build(config, store, KeyMetrics::default(), cache)
    }

    fn build(
        config: &Config,
        store: Store,
        metrics: KeyMetrics,
        (cache, cache_metrics): (sluice_state::ResponseCache, cache::CacheMetrics),
    ) -> Keys {
        let teams: Vec<Arc<TeamPlan>> = config
            .teams
            .iter()
            .map(|t| {
                Arc::new(TeamPlan {
                    counter: Arc::from(format!("{{{}}}t", t.id)),
                    config: t.clone(),
                })
            })
            .collect();
        let keys = config
            .keys
            .iter()
            .map(|k| {
                let team = k
                    .team
                    .as_deref()
                    .and_then(|name| teams.iter().find(|t| t.config.id == name))
                    .cloned();
                let tag = team
                    .as_ref()
                    .map_or(String::new(), |t| format!("{{{}}}", t.config.id));
                Arc::new(VirtualKey {
                    counter: Arc::from(format!("{tag}k:{}", k.id)),
                    model_counters: (0..k.model_limits.len())
                        .map(|j| Arc::from(format!("{tag}k:{}/m{j}", k.id)))
                        .collect(),
                    metrics: metrics.key_counters(k.team.as_deref(), k.owner.as_deref()),
                    config: k.clone(),
                    team,
                })
            })
            .collect();
        let routes: Vec<RoutePlan> = config
            .routes
            .iter()
            .map(|r| RoutePlan {
                name: r.name.clone(),
                mode: r.keys,
                counter: Arc::from(format!("r:{}", r.name)),
                limits: r.limits,
                target_models: r
                    .targets
                    .iter()
                    .chain(&r.fallbacks)
                    .filter_map(|t| t.model.clone())
                    .collect(),
            })
            .collect();
        let table = KeyTable::new(keys);
        Keys {
            inner: Arc::new(Inner {
                uses_keys: !table.is_empty() || routes.iter().any(|r| r.mode != KeyMode::Off),
                all_required: routes.iter().all(|r| r.mode == KeyMode::Required),
                any_off: routes.iter().any(|r| r.mode == KeyMode::Off),
                table,
                store,
                routes,
                prices: Arc::new(Pricer::new(&config.prices, price::shipped_catalog())),
                metrics,
                limit_values: quota_headers::LimitValues::new(config),
                replay_ttl: config.state.replay_ttl,
                cache,
                cache_metrics,
            }),
        }
    }

    /// Registers the keys' metrics and the state store's (`sluice_state_*`).
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.inner
            .metrics
            .register(registry, self.inner.store.clone());
        self.inner.cache_metrics.register(registry);
    }

    /// The state store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Who the request's key headers say it is. Without keys in the config, and no route
    /// asking for them, nothing is read.
    pub fn identify(&self, headers: &HeaderMap) -> Identity {
        if !self.inner.uses_keys {
            return Identity::Anonymous;
        }
        self.inner.table.identify(headers)
    }

    /// The owner of a resumable stream or background response a request makes, and the one
    /// a request reading or cancelling one must be: the presented key's id when it is one of
    /// the gateway's valid keys, whatever the route's key mode (a keys-off route does not
    /// make its key's streams everyone's); `None` for no key or a key the gateway does not
    /// know.
    ///
    /// # Errors
    /// A revoked key ([`KeyError::Revoked`]): it owns nothing, and is not taken for the
    /// anonymous owner either.
    pub fn stream_owner(identity: &Identity) -> Result<Option<Arc<VirtualKey>>, KeyError> {
        match identity {
            Identity::Key(k) => Ok(Some(k.clone())),
            Identity::Revoked(_) => Err(KeyError::Revoked),
            Identity::Anonymous | Identity::Unknown => Ok(None),
        }
    }

    /// Refuses at once what no route would take, before the body is read.
    ///
    /// # Errors
    /// 401: a revoked key (unless some route ignores keys), or a missing or unknown key when
    /// every route requires one.
    pub fn screen(&self, identity: &Identity) -> Result<(), KeyError> {
        let i = &self.inner;
        let e = match identity {
            Identity::Revoked(_) if !i.any_off => KeyError::Revoked,
            Identity::Unknown if i.all_required => KeyError::Unknown,
            Identity::Anonymous if i.all_required => KeyError::Missing,
            _ => return Ok(()),
        };
        self.refused(&e);
        Err(e)
    }

    /// The route's verdict on the key, and the client's key headers removed wherever they
    /// must not reach the upstream: on a route that requires keys, and whenever the key is
    /// one of the gateway's.
    ///
    /// # Errors
    /// 401 (missing, unknown, revoked), 403 (the key may not use this route or model).
    pub fn authorize(
        &self,
        route: usize,
        model: &str,
        identity: Identity,
        headers: &mut HeaderMap,
    ) -> Result<Option<Arc<VirtualKey>>, KeyError> {
        let Some(plan) = self.inner.routes.get(route) else {
            return Ok(None);
        };
        if !self.inner.uses_keys {
            return Ok(None);
        }
        let known = matches!(identity, Identity::Key(_) | Identity::Revoked(_));
        if known || plan.mode == KeyMode::Required {
            table::strip_keys(headers);
        }
        let verdict = match (plan.mode, identity) {
            (KeyMode::Off, _) => Ok(None),
            (_, Identity::Revoked(_)) => Err(KeyError::Revoked),
            (KeyMode::Required, Identity::Unknown) => Err(KeyError::Unknown),
            (KeyMode::Required, Identity::Anonymous) => Err(KeyError::Missing),
            (KeyMode::Optional, Identity::Unknown | Identity::Anonymous) => Ok(None),
            (_, Identity::Key(k)) => {
                let c = &k.config;
                if c.routes.as_ref().is_some_and(|r| !r.contains(&route)) {
                    Err(KeyError::RouteNotAllowed(plan.name.clone()))
                } else if c
                    .models
                    .as_ref()
                    .is_some_and(|m| !m.iter().any(|g| crate::config::glob_match(g, model)))
                {
                    Err(KeyError::ModelNotAllowed(model.to_string()))
                } else {
                    Ok(Some(k))
                }
            }
        };
        if let Err(e) = &verdict {
            self.refused(e);
        }
        verdict
    }

    /// Takes the request's limits: the key's, the key's on this model (its first matching
    /// `model_limits` entry), the route's, and the key's budget, in one call to the store.
    /// `reserve` is the request's token reservation ([`reservation`]); each token check reserves at most its own limit, so a large
    /// `max_tokens` waits for a full bucket instead of never passing. `None`: nothing to take
    /// (no key and no route limits).
    ///
    /// # Errors
    /// 429 when a limit or budget refuses; 503 when the store fails (`fail_closed`) or is
    /// full.
    ///
    /// # Cancel safety
    /// Dropped mid-call with Redis, the admission's tokens may stay taken and its lease
    /// expires by its TTL.
    pub async fn admit(
        &self,
        route: usize,
        key: Option<&Arc<VirtualKey>>,
        model: &str,
        reserve: u64,
    ) -> Result<Option<Ticket>, KeyError> {
        let i = &self.inner;
        let Some(plan) = i.routes.get(route) else {
            return Ok(None);
        };
        let track = i.prices.is_configured();
        if key.is_none() && plan.limits.is_empty() {
            return Ok(None);
        }
        let mut checks = Vec::with_capacity(8);
        let mut hidden = 0u32;
        let mut cuts = 0u32;
        let mut scopes = [ScopeRef::Key; MAX_CHECKS];
        self.plan(
            plan,
            key.map(|k| &**k),
            model,
            reserve,
            track,
            |c, s, cut| {
                if matches!(s, ScopeRef::Tracking) {
                    hidden |= 1 << checks.len();
                }
                if cut {
                    cuts |= 1 << checks.len();
                }
                if let Some(slot) = scopes.get_mut(checks.len()) {
                    *slot = s;
                }
                checks.push(c);
            },
        );
        let admission = if checks.is_empty() {
            None
        } else {
            match i.store.admit(checks).await {
                Ok(Decision::Admitted(a)) => Some(a),
                Ok(Decision::Refused(refusal)) => {
                    let at = refusal.index;
                    let scope = match scopes.get(at).copied().unwrap_or(ScopeRef::Key) {
                        ScopeRef::Key => {
                            Scope::Key(key.map(|k| k.id().to_string()).unwrap_or_default())
                        }
                        ScopeRef::KeyModels(j) => Scope::KeyModels(
                            key.map(|k| k.id().to_string()).unwrap_or_default(),
                            key.and_then(|k| k.config.model_limits.get(j))
                                .map(|m| m.models.clone())
                                .unwrap_or_default(),
                        ),
                        ScopeRef::Route => Scope::Route(plan.name.clone()),
                        ScopeRef::Team => Scope::Team(
                            key.and_then(|k| k.team.as_ref())
                                .map(|t| t.config.id.clone())
                                .unwrap_or_default(),
                        ),
                        ScopeRef::Tracking => Scope::Tracking,
                    };
                    let e = KeyError::Limited(Box::new(Limited {
                        period: self.period_of(plan, key.map(|k| &**k), model, at, track),
                        refusal,
                        scope,
                        reserve,
                        hidden,
                    }));
                    self.refused(&e);
                    return Err(e);
                }
                Err(e) => {
                    let e = KeyError::State(e);
                    self.refused(&e);
                    return Err(e);
                }
            }
        };
        if let Some(k) = key {
            k.metrics.requests.inc();
        }
        let stream_cap = admission
            .as_ref()
            .and_then(|a| stream_cap(a.checks(), a.quotas(), cuts));
        Ok(Some(Ticket {
            keys: self.clone(),
            key: key.cloned(),
            route,
            admission,
            hidden,
            idempotency: None,
            stream_cap,
        }))
    }

    /// The checks of one request, in a fixed order (key, key budget, key on this model,
    /// route), each with the scope it belongs to.
    fn plan(
        &self,
        plan: &RoutePlan,
        key: Option<&VirtualKey>,
        model: &str,
        reserve: u64,
        track: bool,
        mut push: impl FnMut(Check, ScopeRef, bool),
    ) {
        let limits = |name: &Arc<str>,
                      l: &Limits,
                      scope: ScopeRef,
                      push: &mut dyn FnMut(Check, ScopeRef, bool)| {
            if let Some(r) = l.requests {
                push(
                    Check::Rate {
                        key: name.clone(),
                        limit: r.limit,
                        period: r.per,
                    },
                    scope,
                    false,
                );
            }
            if let Some(t) = l.tokens {
                push(
                    Check::Tokens {
                        key: name.clone(),
                        limit: t.limit,
                        period: t.per,
                        reserve: reserve.min(t.limit),
                    },
                    scope,
                    t.cut_streams,
                );
            }
            if let Some(c) = l.concurrency {
                push(
                    Check::Concurrency {
                        key: name.clone(),
                        limit: c,
                    },
                    scope,
                    false,
                );
            }
        };
        if let Some(k) = key {
            let c = &k.config;
            limits(&k.counter, &c.limits, ScopeRef::Key, &mut push);
            match c.budget {
                Some(b) => push(
                    Check::Budget {
                        key: k.counter.clone(),
                        limit_micros: b.limit_micros,
                        period: b.per,
                    },
                    ScopeRef::Key,
                    false,
                ),
                None if track => push(
                    Check::Budget {
                        key: k.counter.clone(),
                        limit_micros: TRACKING_LIMIT,
                        period: TRACKING_PERIOD,
                    },
                    ScopeRef::Tracking,
                    false,
                ),
                None => {}
            }
            let entry = c
                .model_limits
                .iter()
                .position(|m| m.models.iter().any(|g| crate::config::glob_match(g, model)));
            if let Some(j) = entry {
                limits(
                    &k.model_counters[j],
                    &c.model_limits[j].limits,
                    ScopeRef::KeyModels(j),
                    &mut push,
                );
            }
            // The team's, in the same admission: one round trip, all or nothing.
            if let Some(t) = &k.team {
                limits(&t.counter, &t.config.limits, ScopeRef::Team, &mut push);
                if let Some(b) = t.config.budget {
                    push(
                        Check::Budget {
                            key: t.counter.clone(),
                            limit_micros: b.limit_micros,
                            period: b.per,
                        },
                        ScopeRef::Team,
                        false,
                    );
                }
            }
        }
        limits(&plan.counter, &plan.limits, ScopeRef::Route, &mut push);
    }

    /// The period of the `index`th check (for a refusal's message).
    fn period_of(
        &self,
        plan: &RoutePlan,
        key: Option<&VirtualKey>,
        model: &str,
        index: usize,
        track: bool,
    ) -> Option<Duration> {
        let mut n = 0;
        let mut found = None;
        self.plan(plan, key, model, 0, track, |c, _, _| {
            if n == index {
                found = match c {
                    Check::Rate { period, .. }
                    | Check::Tokens { period, .. }
                    | Check::Budget { period, .. } => Some(period),
                    Check::Concurrency { .. } => None,
                };
            }
            n += 1;
        });
        found
    }

    /// A ticket that holds only an idempotency record (a request without key or limits).
    pub(crate) fn bare_ticket(
        &self,
        route: usize,
        guard: sluice_state::IdempotencyGuard,
    ) -> Ticket {
        Ticket {
            keys: self.clone(),
            key: None,
            route,
            admission: None,
            hidden: 0,
            idempotency: Some(guard),
            stream_cap: None,
        }
    }

    fn refused(&self, e: &KeyError) {
        self.inner.metrics.refused(e.code());
    }
}

/// An admitted request's hold on its limits, settled when the request's log record
/// finishes; also its key (for the log line) and its idempotency record.
#[derive(Debug)]
pub struct Ticket {
    keys: Keys,
    key: Option<Arc<VirtualKey>>,
    route: usize,
    admission: Option<Admission>,
    /// Checks that make no header (spend tracking), as a bit set of indices.
    hidden: u32,
    idempotency: Option<sluice_state::IdempotencyGuard>,
    /// The most tokens a stream may use before it is cut (`cut_streams` limits only).
    stream_cap: Option<u64>,
}

/// How a request ended, as the settlement needs it.
#[derive(Clone, Copy, Debug)]
pub struct Outcome<'a> {
    /// The usage the upstream reported (partial for a cut stream).
    pub usage: Option<sluice_providers::Usage>,
    /// The status the client got.
    pub status: u16,
    /// The model the client asked for.
    pub model: &'a str,
    /// The model label of the target that served (its `model` when it renames it).
    pub served: &'a str,
    /// The price list of the upstream that served (`openai`, `anthropic`, ...; empty when
    /// none did).
    pub provider: &'a str,
    /// Answered from the response cache: nothing was spent upstream, so the tokens the
    /// admission reserved are given back (the request itself still counted).
    pub cached: bool,
}

// === impl Ticket ===

impl Ticket {
    /// The key, if the request had one.
    pub fn key(&self) -> Option<&Arc<VirtualKey>> {
        self.key.as_ref()
    }

    /// The `x-ratelimit-*` headers of the admission (the tightest check of each kind), for
    /// the response.
    pub fn headers(&self) -> Vec<(http::HeaderName, http::HeaderValue)> {
        let mut out = Vec::new();
        if let Some(a) = &self.admission {
            out.reserve(11);
            let values = &self.keys.inner.limit_values;
            quota_headers::collect(&mut out, a.quotas(), self.hidden, values);
        }
        out
    }

    /// The most tokens (input plus output) a stream of this request may use before it is
    /// cut: of the `cut_streams` token limits, the least of its reservation plus what the
    /// limit had left at admission. `None` when no such limit applies.
    pub fn stream_cap(&self) -> Option<u64> {
        self.stream_cap
    }

    pub(crate) fn set_idempotency(&mut self, guard: Option<sluice_state::IdempotencyGuard>) {
        self.idempotency = guard;
    }

    pub(crate) fn take_idempotency(&mut self) -> Option<sluice_state::IdempotencyGuard> {
        self.idempotency.take()
    }

    /// Settles the admission with what the request used: tokens (input plus output; none
    /// used when it failed without usage; unknown, so the reservation stands, when it
    /// succeeded without reporting any), spend from the price table. Returns the spend in
    /// micro-units. Never blocks: with Redis the settle is queued for the store's task.
    pub fn settle(mut self, end: Outcome<'_>) -> u64 {
        let inner = &self.keys.inner;
        let plan = inner.routes.get(self.route);
        let served = match plan {
            Some(p) if p.target_models.iter().any(|m| m == end.served) => end.served,
            _ => end.model,
        };
        let spend = end
            .usage
            .as_ref()
            .map_or(0, |u| inner.prices.spend_micros(end.provider, served, u));
        let tokens = match end.usage {
            Some(u) => Some(u.input + u.output),
            None if (200..300).contains(&end.status) && !end.cached => None,
            None => Some(0),
        };
        if let Some(k) = &self.key {
            if let Some(u) = &end.usage {
                k.metrics.input_tokens.inc_by(u.input);
                k.metrics.output_tokens.inc_by(u.output);
            }
            if spend > 0 {
                k.metrics.spend_micros.inc_by(spend);
            }
        }
        if let Some(a) = self.admission.take() {
            a.settle_detached(sluice_state::Usage {
                tokens,
                spend_micros: spend,
            });
        }
        spend
    }
}

/// The least, over the checks whose bit is set in `cuts` (token limits with `cut_streams`),
/// of the tokens the admission reserved plus those the limit still had.
fn stream_cap(checks: &[Check], quotas: &[Quota], cuts: u32) -> Option<u64> {
    if cuts == 0 {
        return None;
    }
    checks
        .iter()
        .zip(quotas)
        .enumerate()
        .filter(|(i, _)| cuts & (1 << i) != 0)
        .filter_map(|(_, (c, q))| match c {
            Check::Tokens { reserve, .. } => Some(reserve.saturating_add(q.remaining)),
            _ => None,
        })
        .min()
}

/// The token reservation of a request: an estimate of its input from its body size (about
/// four bytes per token, which JSON framing makes generous) plus its `max_tokens` (or alias),
/// the most it may generate; so the real usage rarely exceeds it. Without `max_tokens` the
/// output is unknown and counted when the request ends.
pub fn reservation(max_tokens: u64, body_len: usize) -> u64 {
    input_estimate(body_len).saturating_add(max_tokens)
}

/// A request's input tokens, estimated from its body size (about four bytes a token).
pub fn input_estimate(body_len: usize) -> u64 {
    (body_len as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks one admission of `key` on the only route makes.
    fn checks_of(config: &Config, key: &str) -> Vec<Check> {
        let keys = Keys::with_store(
            config,
            Store::in_memory(&Default::default(), &Default::default()),
        );
        let k = keys
            .inner
            .table
            .ids()
            .find(|k| k.id() == key)
            .unwrap()
            .clone();
        let mut checks = Vec::new();
        let plan = &keys.inner.routes[0];
        keys.plan(plan, Some(&k), "gpt-4o", 10, true, |c, _, _| checks.push(c));
        checks
    }

    #[test]
    fn a_key_its_model_limits_and_its_team_share_one_redis_cluster_slot() {
        let text = r#"
[[upstream]]
name = "u"
base_url = "http://127.0.0.1:9/v1"
[[route]]
name = "chat"
models = ["*"]
upstream = "u"
[[price]]
models = ["*"]
input = 1.0
output = 1.0
[[team]]
id = "search"
requests = { limit = 10, per = "1m" }
budget = { limit = 5.0, per = "1d" }
[[key]]
id = "k42"
hash = "0000000000000000000000000000000000000000000000000000000000000000"
team = "search"
requests = { limit = 5, per = "1m" }
budget = { limit = 1.0, per = "1d" }
model_limits = [{ models = ["gpt-4o*"], tokens = { limit = 1000, per = "1m" } }]
[[key]]
id = "solo"
hash = "1111111111111111111111111111111111111111111111111111111111111111"
requests = { limit = 5, per = "1m" }
model_limits = [{ models = ["gpt-4o*"], requests = { limit = 2, per = "1m" } }]
"#;
        let config = Config::from_toml(text, &|_| None).unwrap();
        let cluster = sluice_state::RedisConfig {
            url: "redis+cluster://127.0.0.1:7000".into(),
            ..Default::default()
        };
        for key in ["k42", "solo"] {
            let checks = checks_of(&config, key);
            assert!(checks.len() >= 3, "{key}: {checks:?}");
            assert!(cluster.shares_slot(&checks), "{key}: {checks:?}");
        }
        // The team's checks are in k42's admission.
        let team = checks_of(&config, "k42");
        assert!(
            team.iter()
                .filter(|c| c.key().starts_with("{search}t"))
                .count()
                == 2,
            "{team:?}"
        );
    }
}
