//! Building a generation: at startup from nothing, on a reload from the running one, whose
//! unchanged pools, budgets and balancers it takes over.

use std::sync::Arc;
use std::time::SystemTime;

use http::header::HeaderValue;
use serde_json::{json, Value};
use sluice_telemetry::Telemetry;
use sluice_upstream::Upstream;

use super::{Generation, GenerationInfo, ModelCache, RetryBudget, Shared, UpstreamRt};
use crate::config::{Config, UpstreamId};
use crate::route::targets::{build_route, same_balancer};

/// What a reload changed, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// New in this config.
    pub added: Vec<String>,
    /// Gone from it.
    pub removed: Vec<String>,
    /// In both, with different settings.
    pub changed: Vec<String>,
}

impl Changes {
    pub(crate) fn json(&self) -> Value {
        json!({ "added": self.added, "removed": self.removed, "changed": self.changed })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

impl std::fmt::Display for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let mut sep = "";
        for (sign, names) in [
            ('+', &self.added),
            ('-', &self.removed),
            ('~', &self.changed),
        ] {
            for n in names {
                write!(f, "{sep}{sign}{n}")?;
                sep = " ";
            }
        }
        Ok(())
    }
}

/// What [`build`] kept and replaced.
#[derive(Default)]
pub(crate) struct Report {
    pub(crate) upstreams: Changes,
    pub(crate) routes: Changes,
    pub(crate) draining: Vec<String>,
}

/// Why a generation could not be built (validation checks the settings first, so this is
/// rare: a setting only the connection code can judge).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// An upstream's settings were rejected.
    #[error("{0}")]
    Upstream(#[from] sluice_upstream::UpstreamConfigError),
    /// A route's balancer settings were rejected.
    #[error("{0}")]
    Balance(#[from] sluice_upstream::BalanceConfigError),
}

/// What a generation is made of besides its config.
pub(crate) struct Parts {
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) keys: crate::admit::Keys,
    pub(crate) shared: Arc<Shared>,
    pub(crate) version: u64,
}

/// Builds a generation for `config`: at startup from nothing, on a reload from `prev`, whose
/// unchanged pools, budgets and balancers it takes over.
///
/// # Errors
/// An upstream's or a balancer's settings are rejected (validation checks them first).
///
/// # Panics
/// Outside a Tokio runtime (health checks are tasks).
pub(crate) fn build(
    config: Config,
    prev: Option<&Generation>,
    parts: Parts,
) -> Result<(Generation, Report), BuildError> {
    let Parts {
        telemetry,
        keys,
        shared,
        version,
    } = parts;
    let mut report = Report::default();
    shared.resume.set_caps(
        config.server.resumable_streams,
        config.server.resumable_log_bytes,
    );
    shared
        .resume
        .set_logs(sluice_state::StreamLogs::new(keys.store()));
    let old_upstream = |name: &str| {
        prev.and_then(|p| {
            p.config
                .upstreams
                .iter()
                .position(|u| u.name == name)
                .map(|i| (p, UpstreamId::new(i)))
        })
    };
    let mut kept = Vec::with_capacity(config.upstreams.len());
    let mut upstreams = Vec::with_capacity(config.upstreams.len());
    for u in &config.upstreams {
        let settings = u.upstream_settings();
        let old = old_upstream(&u.name);
        let pool =
            old.filter(|(p, i)| same_pool(&p.upstream_config(*i).upstream_settings(), &settings));
        let handle = match pool {
            Some((p, i)) => p.upstream(i).handle.clone(),
            None => Upstream::new(settings)?,
        };
        kept.push(pool.is_some());
        let budget = old
            .map(|(p, i)| &p.upstream(i).budget)
            .filter(|b| b.config() == u.retry_budget);
        let budget = match budget {
            Some(b) => b.clone(),
            None => Arc::new(RetryBudget::new(u.retry_budget)),
        };
        let tokens = u.cloud.as_ref().filter(|c| c.uses_tokens()).and_then(|c| {
            // Kept across a reload while the credentials (and the trust roots their endpoint
            // is reached with) are the same: no new token, no wait.
            let kept = old
                .filter(|(p, i)| {
                    let o = p.upstream_config(*i);
                    o.cloud.as_ref() == Some(c) && o.ca_file == u.ca_file
                })
                .and_then(|(p, i)| p.upstream(i).tokens.clone());
            kept.or_else(|| super::TokenSource::start(&u.name, c, u.ca_file.clone()).map(Arc::new))
        });
        upstreams.push(UpstreamRt {
            tokens,
            handle,
            budget,
            header: HeaderValue::from_str(&u.name).ok(),
            price_list: crate::admit::price_list(u),
        });
        if let Some((p, i)) = old {
            let o = p.upstream_config(i);
            if pool.is_none() {
                report.draining.push(u.name.clone());
            }
            if pool.is_none() || o.auth != u.auth || o.redacted() != u.redacted() {
                report.upstreams.changed.push(u.name.clone());
            }
        } else if prev.is_some() {
            report.upstreams.added.push(u.name.clone());
        }
    }
    if let Some(p) = prev {
        for u in &p.config.upstreams {
            if !config.upstreams.iter().any(|n| n.name == u.name) {
                report.upstreams.removed.push(u.name.clone());
                report.draining.push(u.name.clone());
            }
        }
    }
    let handles: Vec<Upstream> = upstreams.iter().map(|u| u.handle.clone()).collect();
    let mut routes = Vec::with_capacity(config.routes.len());
    for route in &config.routes {
        let old = prev.and_then(|p| {
            p.config
                .routes
                .iter()
                .position(|r| r.name == route.name)
                .map(|i| (p, i))
        });
        let reuse = old.filter(|(p, i)| {
            same_balancer(&p.config, &p.config.routes[*i], &config, route, &|u| {
                kept[u.index()]
            })
        });
        match reuse {
            Some((p, i)) => routes.push(p.routes[i].clone()),
            None => routes.push(Arc::new(build_route(&config, route, &handles)?)),
        }
        match old {
            Some((p, i)) => {
                let o = &p.config.routes[i];
                if o.redacted(&p.config.upstreams) != route.redacted(&config.upstreams)
                    || reuse.is_none()
                {
                    report.routes.changed.push(route.name.clone());
                }
            }
            None if prev.is_some() => report.routes.added.push(route.name.clone()),
            None => {}
        }
    }
    if let Some(p) = prev {
        for r in &p.config.routes {
            if !config.routes.iter().any(|n| n.name == r.name) {
                report.routes.removed.push(r.name.clone());
            }
        }
    }
    let info = GenerationInfo {
        version,
        hash: config.fingerprint(),
        loaded_at: SystemTime::now(),
    };
    let books = shared.ledger.clone().map(|ledger| {
        Arc::new(crate::outcome::Books {
            ledger,
            pricer: keys.pricer(),
        })
    });
    let guards = Arc::new(crate::guard::Guards::new(&config));
    let generation = Generation {
        guards,
        config: Arc::new(config),
        info,
        upstreams,
        routes,
        telemetry,
        shared,
        models: ModelCache::default(),
        keys,
        books,
    };
    Ok((generation, report))
}

/// Whether two upstreams would get the same pool: every connection setting equal.
fn same_pool(a: &sluice_upstream::UpstreamConfig, b: &sluice_upstream::UpstreamConfig) -> bool {
    // Destructured so that a new connection setting cannot be forgotten here.
    let sluice_upstream::UpstreamConfig {
        name,
        base_url,
        protocol,
        ca_file,
        connect_timeout,
        h2_stream_window,
        h2_connection_window,
        pool,
    } = a;
    *name == b.name
        && *base_url == b.base_url
        && *protocol == b.protocol
        && *ca_file == b.ca_file
        && *connect_timeout == b.connect_timeout
        && *h2_stream_window == b.h2_stream_window
        && *h2_connection_window == b.h2_connection_window
        && *pool == b.pool
}
