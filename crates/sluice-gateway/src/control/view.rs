//! What the admin plane may see of the data plane: plain snapshots of the generation in force
//! (its config, readiness, pools, balancers, keys) and the reload, behind one handle. The
//! admin plane (`sluice-admin`) is composed beside the gateway by the `sluice` binary and
//! never sees a request-path type.

use std::future::Future;
use std::sync::Arc;

use http::StatusCode;
use serde_json::Value;
use sluice_telemetry::view::{AdminReply, GenerationView, Readiness};
use sluice_telemetry::Telemetry;

use super::{ReloadError, Reloader};
use crate::config::Config;
use crate::generation::Generation;

/// A handle on the running gateway for the admin plane: every call reads the generation in
/// force at that moment.
#[derive(Clone, Debug)]
pub struct AdminView {
    reloader: Arc<Reloader>,
    /// The ledger's sink for usage queries, when the ledger is on and can answer them.
    usage: Option<Arc<sluice_ledger::Sink>>,
}

impl AdminView {
    pub(crate) fn new(reloader: Arc<Reloader>, usage: Option<Arc<sluice_ledger::Sink>>) -> Self {
        AdminView { reloader, usage }
    }

    /// `GET /admin/usage?from=…&to=…&group_by=…&bucket=…&format=json|csv`: the ledger's
    /// totals, answered by its sink's SQL.
    pub fn usage(&self, query: &str) -> impl Future<Output = AdminReply> + Send + 'static {
        let sink = self.usage.clone();
        let query = query.to_string();
        async move {
            let error = |status: StatusCode, code: &str, message: String| AdminReply {
                status,
                body: serde_json::json!({ "error": { "code": code, "message": message } })
                    .to_string()
                    .into(),
            };
            let Some(sink) = sink else {
                return error(
                    StatusCode::NOT_FOUND,
                    "no_ledger",
                    "the ledger is off or its sink cannot answer queries (OTLP): see [ledger]"
                        .into(),
                );
            };
            let (q, format) =
                match sluice_ledger::UsageQuery::from_query_string(&query, sluice_ledger::now_us())
                {
                    Ok(parsed) => parsed,
                    Err(e) => return error(StatusCode::BAD_REQUEST, "bad_query", e.to_string()),
                };
            match sink.usage(&q).await {
                Ok(rows) => AdminReply {
                    status: StatusCode::OK,
                    body: sluice_ledger::query::render(format, &q, &rows).into(),
                },
                Err(e) => error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    e.metric_label(),
                    e.to_string(),
                ),
            }
        }
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        self.reloader.current().config.clone()
    }

    /// Which config runs, and whether shutdown has begun.
    pub fn generation(&self) -> GenerationView {
        let g = self.reloader.current();
        GenerationView {
            version: g.info.version,
            hash: g.info.hash.clone(),
            loaded_at: g.info.loaded_at,
            draining: g.draining(),
        }
    }

    /// The metrics registry and the dashboard's counters (the same in every generation).
    pub fn telemetry(&self) -> Arc<Telemetry> {
        self.reloader.current().telemetry.clone()
    }

    /// `GET /readyz`'s verdict.
    pub fn readiness(&self) -> Readiness {
        readiness(&self.reloader.current())
    }

    /// `GET /admin/pools`: every upstream's pools, lanes and connections.
    pub fn pools(&self) -> Value {
        sluice_telemetry::pools::snapshot_json(&self.reloader.current().pool_list())
    }

    /// `GET /admin/targets`: every route's balancer.
    pub fn targets(&self) -> Value {
        targets_json(&self.reloader.current())
    }

    /// Requests waiting for an upstream connection or stream slot, over every lane.
    pub fn pending(&self) -> usize {
        self.reloader
            .current()
            .upstreams()
            .map(|u| {
                u.handle
                    .pool_snapshot()
                    .lanes
                    .iter()
                    .map(|l| l.pending)
                    .sum::<usize>()
            })
            .sum()
    }

    /// `POST /admin/reload`: reads the config file again and applies it.
    pub fn reload(&self) -> impl Future<Output = AdminReply> + Send + 'static {
        let reloader = self.reloader.clone();
        async move {
            match reloader.reload().await {
                Ok(outcome) => AdminReply {
                    status: StatusCode::OK,
                    body: outcome.json().to_string().into(),
                },
                Err(e) => {
                    let status = match e {
                        ReloadError::Invalid(_) | ReloadError::NeedsRestart { .. } => {
                            StatusCode::BAD_REQUEST
                        }
                        ReloadError::NoSource => StatusCode::CONFLICT,
                        ReloadError::Build(_) => StatusCode::INTERNAL_SERVER_ERROR,
                    };
                    let body = serde_json::json!({
                        "error": { "code": e.code(), "message": e.to_string() }
                    });
                    AdminReply {
                        status,
                        body: body.to_string().into(),
                    }
                }
            }
        }
    }

    /// `GET /admin/keys[/{id}]` (`rest` is what follows `/admin/keys`): read from the state
    /// store, so across every instance sharing it.
    pub fn keys(&self, rest: &str) -> impl Future<Output = AdminReply> + Send + 'static {
        let generation = self.reloader.current();
        let rest = rest.to_string();
        async move { crate::admit::admin_keys(&generation.keys, &rest).await }
    }

    /// `/admin/cache`: `GET` the response cache's entries, bytes and hit rate (and each
    /// caching route's entries); `DELETE ?route=NAME` or `?key=ID` purges a route's answers
    /// or a key's namespace.
    pub fn cache(
        &self,
        method: &http::Method,
        query: &str,
    ) -> impl Future<Output = AdminReply> + Send + 'static {
        let generation = self.reloader.current();
        let method = method.clone();
        let query = query.to_string();
        async move {
            crate::admit::admin_cache(&generation.keys, &generation.config, &method, &query).await
        }
    }
}

/// Ready when: the config is loaded (a `Generation` exists only for a validated config), the
/// gateway is not draining, and every route has at least one usable target in some tier.
///
/// A target is usable today when its upstream was built (always, once started).
/// NOTE: the extension point for balancer health is [`target_usable`]: when it can say
/// "every endpoint of this upstream is ejected", a route with no usable target makes the
/// gateway not ready, so a load balancer stops sending what would only fail.
fn readiness(state: &Generation) -> Readiness {
    let mut reasons = Vec::new();
    if state.draining() {
        reasons.push("draining: shutting down".to_string());
    }
    for (i, route) in state.config.routes.iter().enumerate() {
        // Tier 0 as its balancer sees it (health checks, ejections, rests); fallbacks have no
        // balancer and count as usable when built.
        let tier0 = state
            .routes
            .get(i)
            .is_some_and(|t| t.balancer.snapshot().targets.iter().any(|t| t.usable));
        let usable = tier0
            || route
                .fallbacks
                .iter()
                .any(|t| target_usable(state, t.upstream));
        if !usable {
            reasons.push(format!("route `{}`: no usable target", route.name));
        }
    }
    Readiness {
        ready: reasons.is_empty(),
        reasons,
    }
}

/// Whether upstream `i` can take requests: it was built (the `upstreams` vector parallels
/// the config's).
fn target_usable(state: &Generation, upstream: crate::config::UpstreamId) -> bool {
    upstream.index() < state.config.upstreams.len()
}

/// `GET /admin/targets`: every route's balancer — per target its health, ejection, rest,
/// latency per lane, in-flight and outcome counts — and the balancer's counters.
fn targets_json(state: &Generation) -> serde_json::Value {
    use serde_json::json;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    let routes: Vec<serde_json::Value> = state
        .config
        .routes
        .iter()
        .zip(&state.routes)
        .map(|(route, t)| {
            let snap = t.balancer.snapshot();
            let targets: Vec<serde_json::Value> = snap
                .targets
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "weight": t.weight,
                        "health": t.health.as_str(),
                        "usable": t.usable,
                        "ejected_for_ms": t.ejected_for.map(ms),
                        "half_open": t.half_open,
                        "ejections": t.ejections,
                        "resting_for_ms": t.resting_for.map(ms),
                        "consecutive_failures": t.consecutive_failures,
                        "in_flight": t.in_flight,
                        "latency_ms": { "stream": ms(t.stream.latency), "short": ms(t.short.latency) },
                        "requests": t.requests,
                        "successes": t.successes,
                        "failures": t.failures,
                        "rate_limited": t.rate_limited,
                        "success_rate": t.success_rate,
                    })
                })
                .collect();
            let c = &snap.counters;
            json!({
                "route": route.name,
                "policy": route.balance.as_str(),
                "targets": targets,
                "counters": {
                    "picks": c.picks,
                    "fail_open_picks": c.fail_open_picks,
                    "ejections": c.ejections,
                    "probes": c.probes,
                    "probe_successes": c.probe_successes,
                },
            })
        })
        .collect();
    json!({ "routes": routes })
}
