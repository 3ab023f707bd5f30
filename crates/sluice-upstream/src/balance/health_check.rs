//! Active health checks: one task per checked target, owned by a handle, sending a cheap
//! request through the target's `Upstream` and reporting each verdict into the balancer.

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use super::{BalanceConfigError, Balancer, HealthCheckConfig};
use crate::{Lane, Upstream};

/// Body bytes a check reads before it stops (the verdict is the status; the body is read so
/// an HTTP/1.1 connection can be reused, bounded so a huge `/models` costs nothing).
const MAX_CHECK_BODY: usize = 64 * 1024;

/// The running health checks of one balancer's targets. Dropping it stops every check at
/// once (the tasks are aborted); nothing outlives it. The targets keep their last health.
#[derive(Debug)]
pub struct HealthChecker {
    tasks: JoinSet<()>,
}

impl HealthChecker {
    /// Starts checking every target of `balancer` that has a
    /// [`health_check`](super::TargetConfig::health_check), through `upstreams[index]`
    /// (the gateway's upstreams, in the balancer's target order). The first check of each
    /// runs at once, then one every `interval`.
    ///
    /// # Errors
    /// [`BalanceConfigError::UpstreamCount`] when `upstreams` and the targets differ in
    /// number.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the checks are tasks).
    pub fn spawn(
        balancer: &Balancer,
        upstreams: &[Upstream],
    ) -> Result<HealthChecker, BalanceConfigError> {
        let checks: Vec<Option<HealthCheckConfig>> = balancer
            .with_config(|cfg| cfg.targets.iter().map(|t| t.health_check.clone()).collect());
        if checks.len() != upstreams.len() {
            return Err(BalanceConfigError::UpstreamCount {
                balancer: balancer.name().to_string(),
                targets: checks.len(),
                upstreams: upstreams.len(),
            });
        }
        let mut tasks = JoinSet::new();
        for (index, (check, upstream)) in checks.into_iter().zip(upstreams).enumerate() {
            if let Some(check) = check {
                tasks.spawn(run(balancer.clone(), index, upstream.clone(), check));
            }
        }
        Ok(HealthChecker { tasks })
    }

    /// How many targets are being checked.
    pub fn checks(&self) -> usize {
        self.tasks.len()
    }
}

async fn run(balancer: Balancer, index: usize, upstream: Upstream, check: HealthCheckConfig) {
    let mut tick = tokio::time::interval(check.interval);
    // A check slower than the interval delays the next one instead of bunching them.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let pass = check_once(&upstream, &check).await;
        balancer.report_health(index, pass);
    }
}

/// One check: a 2xx within `timeout` (headers and up to 64 KiB of body) passes.
async fn check_once(upstream: &Upstream, check: &HealthCheckConfig) -> bool {
    let mut req = http::Request::new(check.body.clone());
    *req.method_mut() = check.method.clone();
    // Validated by `BalancerConfig::validate`; a bad one simply fails the check.
    let Ok(uri) = check.path.parse::<http::Uri>() else {
        return false;
    };
    *req.uri_mut() = uri;
    *req.headers_mut() = check.headers.clone();
    req.extensions_mut().insert(Lane::Short);
    let deadline = super::state::after(Instant::now(), check.timeout);
    let exchange = async {
        let resp = upstream.send(req, deadline).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let mut body = resp.into_body();
        let mut read = 0usize;
        while read < MAX_CHECK_BODY {
            match body.frame().await {
                None => break,
                Some(Ok(frame)) => {
                    read += frame.data_ref().map_or(0, Bytes::len);
                }
                Some(Err(_)) => return None,
            }
        }
        Some(())
    };
    matches!(
        tokio::time::timeout_at(deadline, exchange).await,
        Ok(Some(()))
    )
}
