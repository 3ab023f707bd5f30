//! `GET /v1/models` and `GET /v1/models/{id}`: what clients can call. Literal model names come
//! from the routes; for a route with globs (`gpt-4o*`), the models its upstreams report (their
//! own model list, fetched on demand, cached, filtered by the globs). No duplicates.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sluice_providers::Family;
use sluice_upstream::Lane;
use tokio::time::Instant;

use crate::config::{glob_match, UpstreamId};
use crate::generation::Generation;

/// How long an upstream's model list is reused.
const CACHE_FOR: Duration = Duration::from_secs(60);
/// Bound on fetching one upstream's list: the client waits for it.
const FETCH_TIMEOUT: Duration = Duration::from_secs(2);
/// The most of a model list read.
const MAX_LIST_BYTES: usize = 4 << 20;

/// Every model a client can call, sorted.
async fn model_ids(state: &Generation) -> Vec<String> {
    let mut ids = BTreeSet::new();
    for route in &state.config.routes {
        let (literal, globs): (Vec<&String>, Vec<&String>) =
            route.models.iter().partition(|m| !m.contains(['*', '?']));
        ids.extend(literal.into_iter().cloned());
        if globs.is_empty() {
            continue;
        }
        let mut upstreams: Vec<UpstreamId> = route
            .targets
            .iter()
            .chain(&route.fallbacks)
            .filter(|t| t.model.is_none())
            .map(|t| t.upstream)
            .collect();
        upstreams.dedup();
        for u in upstreams {
            for id in upstream_models(state, u).await {
                if globs.iter().any(|g| glob_match(g, &id)) {
                    ids.insert(id);
                }
            }
        }
    }
    ids.into_iter().collect()
}

/// An upstream's own model list (cached; empty when it cannot be fetched).
async fn upstream_models(state: &Generation, upstream: UpstreamId) -> Vec<String> {
    if let Some(cached) = state.models.get(upstream, CACHE_FOR) {
        return cached.unwrap_or_default();
    }
    let list = fetch(state, upstream).await;
    if list.is_none() {
        tracing::debug!(upstream = %state.config.upstream(upstream).name, "could not list the upstream's models");
    }
    state.models.put(upstream, list.clone());
    list.unwrap_or_default()
}

async fn fetch(state: &Generation, upstream: UpstreamId) -> Option<Vec<String>> {
    let ucfg = &state.config.upstream(upstream);
    if ucfg.cloud.is_some() {
        // A cloud lists its models elsewhere (Bedrock's control plane, Vertex's Model
        // Garden), signed: the routes' own names are what the gateway lists for them.
        return None;
    }
    let family = ucfg
        .provider
        .as_ref()
        .map_or(Family::OpenAi, |p| p.family());
    let mut req = http::Request::get("/models").body(Bytes::new()).ok()?;
    req.extensions_mut().insert(Lane::Short);
    let provider = crate::outbound::provider_of(state, upstream, family_op(family));
    let headers = crate::headers::upstream_request_headers(
        &http::HeaderMap::new(),
        crate::headers::Target {
            auth: &ucfg.auth,
            provider,
            translated: false,
        },
        &http::HeaderValue::from_static("sl-models"),
    );
    *req.headers_mut() = headers;
    let deadline = Instant::now() + FETCH_TIMEOUT;
    let resp = state
        .upstream(upstream)
        .handle
        .send(req, deadline)
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let body = tokio::time::timeout_at(
        deadline,
        http_body_util::Limited::new(resp.into_body(), MAX_LIST_BYTES).collect(),
    )
    .await
    .ok()?
    .ok()?
    .to_bytes();
    let v: Value = serde_json::from_slice(&body).ok()?;
    // OpenAI and Anthropic: `data[].id`; Gemini: `models[].name` = "models/<id>".
    let ids = if let Some(data) = v.get("data").and_then(Value::as_array) {
        data.iter()
            .filter_map(|m| m.get("id").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    } else {
        v.get("models")
            .and_then(Value::as_array)?
            .iter()
            .filter_map(|m| m.get("name").and_then(Value::as_str))
            .map(|n| n.strip_prefix("models/").unwrap_or(n).to_string())
            .collect()
    };
    Some(ids)
}

/// An operation of `family`, to pick the passthrough provider for an upstream without one.
fn family_op(f: Family) -> sluice_providers::Operation {
    match f {
        Family::Anthropic => sluice_providers::Operation::Messages,
        _ => sluice_providers::Operation::ChatCompletions,
    }
}

fn model_object(id: &str) -> Value {
    json!({ "id": id, "object": "model", "created": 0, "owned_by": "sluice" })
}

/// `GET /v1/models`: the OpenAI list shape.
pub(crate) async fn list(state: &Generation) -> Bytes {
    let data: Vec<Value> = model_ids(state)
        .await
        .iter()
        .map(|id| model_object(id))
        .collect();
    Bytes::from(json!({ "object": "list", "data": data }).to_string())
}

/// `GET /v1/models/{id}`: the model in OpenAI's shape, or `None` when no route takes it.
pub(crate) async fn one(state: &Generation, id: &str) -> Option<Bytes> {
    let routed = state.config.route_for(id).is_some();
    if !routed {
        return None;
    }
    Some(Bytes::from(model_object(id).to_string()))
}
