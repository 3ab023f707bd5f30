//! The targets of each route's first tier, as balancers: load by latency and in-flight,
//! outlier ejection, and the active health checks that feed them.

use sluice_upstream::{
    BalanceConfigError, BalanceTarget, Balancer, BalancerConfig, HealthChecker, Upstream,
};

use crate::config::{Config, RouteConfig, TargetConfig, UpstreamAuth, UpstreamId};

/// One route's balancer and the health checks that run for it (stopped when dropped).
pub(crate) struct RouteTargets {
    pub(crate) balancer: Balancer,
    _health: Option<HealthChecker>,
}

/// A balancer for one route over its tier-0 targets, with the health checks of the targets
/// whose upstream has `health_check`. `upstreams` parallels `config.upstreams`.
///
/// # Errors
/// A balancer setting out of range (the config validator checks them first).
///
/// # Panics
/// Outside a Tokio runtime (health checks are tasks).
pub(crate) fn build_route(
    config: &Config,
    route: &RouteConfig,
    upstreams: &[Upstream],
) -> Result<RouteTargets, BalanceConfigError> {
    let targets: Vec<BalanceTarget> = route
        .targets
        .iter()
        .enumerate()
        .map(|(i, t)| balance_target(config, route.targets.as_slice(), i, t))
        .collect();
    let balancer = Balancer::new(BalancerConfig {
        name: route.name.clone(),
        targets,
        policy: route.balance,
        outlier: route.outlier.clone(),
        ..BalancerConfig::default()
    })?;
    let checked: Vec<Upstream> = route
        .targets
        .iter()
        .map(|t| upstreams[t.upstream.index()].clone())
        .collect();
    let health = if route
        .targets
        .iter()
        .any(|t| config.upstream(t.upstream).health_check.is_some())
    {
        Some(HealthChecker::spawn(&balancer, &checked)?)
    } else {
        None
    };
    Ok(RouteTargets {
        balancer,
        _health: health,
    })
}

/// Whether route `new` of config `b` would get the same balancer and health checks as route
/// `old` of config `a`: same name, policy and outlier settings, and target by target the
/// same upstream (by name, its pool kept: `kept(i)` for `b`'s upstream `i`), weight,
/// credential and health check. Then a reload keeps the route's balancer state (EWMA,
/// ejections) and its health-check tasks.
pub(crate) fn same_balancer(
    a: &Config,
    old: &RouteConfig,
    b: &Config,
    new: &RouteConfig,
    kept: &dyn Fn(UpstreamId) -> bool,
) -> bool {
    old.name == new.name
        && old.balance == new.balance
        && old.outlier == new.outlier
        && old.targets.len() == new.targets.len()
        && old.targets.iter().zip(&new.targets).all(|(x, y)| {
            let (ux, uy) = (a.upstream(x.upstream), b.upstream(y.upstream));
            kept(y.upstream)
                && ux.name == uy.name
                && x.weight == y.weight
                && x.auth == y.auth
                && ux.auth == uy.auth
                && ux.provider == uy.provider
                && ux.health_check == uy.health_check
                // Targets naming one upstream twice get `#i` names.
                && old.targets.iter().filter(|o| o.upstream == x.upstream).count()
                    == new.targets.iter().filter(|o| o.upstream == y.upstream).count()
        })
}

/// A target as its balancer sees it: its upstream's name (with `#n` when the route names
/// the same upstream twice, e.g. with two keys), its weight, and its upstream's health check
/// carrying its credential.
fn balance_target(
    config: &Config,
    tier: &[TargetConfig],
    i: usize,
    t: &TargetConfig,
) -> BalanceTarget {
    let ucfg = config.upstream(t.upstream);
    let mut name = ucfg.name.clone();
    if tier.iter().filter(|o| o.upstream == t.upstream).count() > 1 {
        name = format!("{name}#{i}");
    }
    let mut target = BalanceTarget::new(name).weight(t.weight);
    if let Some(check) = &ucfg.health_check {
        let mut check = check.clone();
        let auth = t.auth.as_ref().unwrap_or(&ucfg.auth);
        let provider = ucfg
            .provider
            .clone()
            .unwrap_or(sluice_providers::ProviderKind::OpenAi);
        let secret = match auth {
            UpstreamAuth::Passthrough => None,
            UpstreamAuth::Bearer { secret } | UpstreamAuth::ApiKey { secret } => {
                Some((None, secret))
            }
            UpstreamAuth::Header { name, secret } => Some((Some(name.clone()), secret)),
        };
        match secret {
            Some((Some(name), secret)) => {
                if let Ok(mut v) = http::HeaderValue::from_str(secret) {
                    v.set_sensitive(true);
                    check.headers.insert(name, v);
                }
            }
            Some((None, secret)) => {
                let headers = match auth {
                    UpstreamAuth::Bearer { .. } => sluice_providers::ProviderKind::OpenAi
                        .auth_headers(secret)
                        .unwrap_or_default(),
                    _ => provider.auth_headers(secret).unwrap_or_default(),
                };
                for (k, v) in headers {
                    check.headers.insert(k, v);
                }
            }
            None => {}
        }
        for (k, v) in provider.required_headers() {
            check.headers.entry(k).or_insert(v);
        }
        target = target.health_check(check);
    }
    target
}
