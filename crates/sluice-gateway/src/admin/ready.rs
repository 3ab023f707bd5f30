//! `GET /readyz`: whether a load balancer should send this gateway new requests.

use serde_json::{json, Value};

use crate::generation::Generation;

/// The verdict and, when not ready, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Readiness {
    /// Every check passed.
    pub(crate) ready: bool,
    /// What failed, one line each (empty when ready).
    pub(crate) reasons: Vec<String>,
}

impl Readiness {
    pub(crate) fn json(&self) -> Value {
        json!({
            "status": if self.ready { "ready" } else { "not_ready" },
            "reasons": self.reasons,
        })
    }
}

/// Ready when: the config is loaded (a `Generation` exists only for a validated config), the
/// gateway is not draining, and every route has at least one usable target in some tier.
///
/// A target is usable today when its upstream was built (always, once started).
/// NOTE: the extension point for balancer health is [`target_usable`]: when it can say
/// "every endpoint of this upstream is ejected", a route with no usable target makes the
/// gateway not ready, so a load balancer stops sending what would only fail.
pub(crate) fn readiness(state: &Generation) -> Readiness {
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
pub(crate) fn target_usable(state: &Generation, upstream: crate::config::UpstreamId) -> bool {
    upstream.index() < state.config.upstreams.len()
}
