//! `GET /admin/keys` and `GET /admin/keys/{id}`: the keys, their limits, what is left of them
//! and what they spent. Never a hash or a secret.

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};
use sluice_state::{Check, CheckKind, Quota};

use super::{Keys, ScopeRef, VirtualKey, TRACKING_PERIOD};
use crate::config::{Limits, RateLimit};

/// An admin answer: 200, 404 (no such key) or 503 (the state store failed), and a JSON body.
pub use sluice_telemetry::view::AdminReply;

/// Answers `GET /admin/keys/{rest}`: `rest` empty lists the keys (id, owner, team, revoked);
/// a key id shows that key with its limits, what is left of them now and its spend (read
/// from the state store without taking anything, so across every instance sharing it: one
/// round trip with Redis).
pub async fn admin_keys(keys: &Keys, rest: &str) -> AdminReply {
    let rest = rest.trim_matches('/');
    if rest.is_empty() {
        let mut list: Vec<&std::sync::Arc<VirtualKey>> = keys.inner.table.ids().collect();
        list.sort_by(|a, b| a.id().cmp(b.id()));
        let list: Vec<Value> = list
            .iter()
            .map(|k| {
                json!({
                    "id": k.id(),
                    "owner": k.owner(),
                    "team": k.team(),
                    "revoked": k.config.revoked,
                })
            })
            .collect();
        return reply(StatusCode::OK, &json!({ "keys": list }));
    }
    let Some(k) = keys.inner.table.by_id(rest) else {
        return reply(
            StatusCode::NOT_FOUND,
            &json!({ "error": format!("no key with id `{rest}`") }),
        );
    };
    match key_json(keys, k).await {
        Ok(v) => reply(StatusCode::OK, &v),
        Err(e) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "error": "the state store did not answer", "reason": e.metric_label() }),
        ),
    }
}

fn reply(status: StatusCode, v: &Value) -> AdminReply {
    AdminReply {
        status,
        body: Bytes::from(v.to_string()),
    }
}

async fn key_json(keys: &Keys, k: &VirtualKey) -> Result<Value, sluice_state::StateError> {
    let c = &k.config;
    // The key's own checks and those of each model entry, as admission builds them (route
    // limits belong to routes, not keys).
    let mut checks: Vec<Check> = Vec::new();
    let mut owners: Vec<ScopeRef> = Vec::new();
    let mut push = |l: &Limits, name: &std::sync::Arc<str>, scope: ScopeRef| {
        if let Some(r) = l.requests {
            checks.push(Check::Rate {
                key: name.clone(),
                limit: r.limit,
                period: r.per,
            });
            owners.push(scope);
        }
        if let Some(t) = l.tokens {
            checks.push(Check::Tokens {
                key: name.clone(),
                limit: t.limit,
                period: t.per,
                reserve: 0,
            });
            owners.push(scope);
        }
        if let Some(n) = l.concurrency {
            checks.push(Check::Concurrency {
                key: name.clone(),
                limit: n,
            });
            owners.push(scope);
        }
    };
    push(&c.limits, &k.counter, ScopeRef::Key);
    for (j, m) in c.model_limits.iter().enumerate() {
        push(&m.limits, &k.model_counters[j], ScopeRef::KeyModels(j));
    }
    let (budget_limit, budget_period) = match c.budget {
        Some(b) => (Some(b.limit_micros), b.per),
        None => (None, TRACKING_PERIOD),
    };
    checks.push(Check::Budget {
        key: k.counter.clone(),
        limit_micros: budget_limit.unwrap_or(super::TRACKING_LIMIT),
        period: budget_period,
    });
    owners.push(ScopeRef::Tracking);
    let quotas = keys.store().quotas(&checks).await?;
    let mut own = serde_json::Map::new();
    let mut per_model: Vec<serde_json::Map<String, Value>> =
        vec![serde_json::Map::new(); c.model_limits.len()];
    let mut spend = json!(null);
    for ((check, scope), q) in checks.iter().zip(&owners).zip(&quotas) {
        let target = match scope {
            ScopeRef::Key => &mut own,
            ScopeRef::KeyModels(j) => &mut per_model[*j],
            _ => {
                spend = json!({
                    "period": humantime::format_duration(budget_period).to_string(),
                    "spent": money(q.used),
                    "spent_micros": q.used,
                    "limit": budget_limit.map(money),
                    "remaining": budget_limit.map(|l| money(l.saturating_sub(q.used))),
                    "resets_in_ms": q.reset_after.as_millis() as u64,
                });
                continue;
            }
        };
        target.insert(q.kind.as_str().to_string(), quota_json(check, q));
    }
    Ok(json!({
        "id": c.id,
        "owner": c.owner,
        "team": c.team,
        "revoked": c.revoked,
        "routes": c.routes.as_ref().map(|r| r
            .iter()
            .filter_map(|i| keys.inner.routes.get(*i).map(|p| p.name.clone()))
            .collect::<Vec<_>>()),
        "models": c.models,
        "limits": limits_json(&c.limits),
        "budget": c.budget.map(|b| json!({ "limit": money(b.limit_micros), "per": period(b.per) })),
        "model_limits": c.model_limits.iter().zip(per_model).map(|(m, usage)| json!({
            "models": m.models,
            "limits": limits_json(&m.limits),
            "usage": usage,
        })).collect::<Vec<_>>(),
        "usage": own,
        "spend": spend,
        "state": keys.store().mode().as_str(),
    }))
}

fn money(micros: u64) -> f64 {
    micros as f64 / 1e6
}

fn quota_json(check: &Check, q: &Quota) -> Value {
    match check.kind() {
        CheckKind::Concurrency => json!({ "limit": q.limit, "in_flight": q.used }),
        _ => json!({
            "limit": q.limit,
            "remaining": q.remaining,
            "used": q.used,
            "resets_in_ms": q.reset_after.as_millis() as u64,
        }),
    }
}

fn limits_json(l: &Limits) -> Value {
    let rate = |r: Option<RateLimit>| r.map(|r| json!({ "limit": r.limit, "per": period(r.per) }));
    json!({
        "requests": rate(l.requests),
        "tokens": rate(l.tokens),
        "concurrency": l.concurrency,
    })
}

fn period(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
