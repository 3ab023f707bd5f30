//! Active health checks over real sockets: a stopped replica turns unhealthy and gets no
//! traffic, the same replica restarted on its port turns healthy again, and dropping the
//! checker stops the checks.

use std::time::Duration;

use sluice_upstream::{
    BalanceTarget as TargetConfig, Balancer, BalancerConfig, Health, HealthCheckConfig,
    HealthChecker, Lane,
};
use tokio::time::Instant;

use crate::balance::{received, replica, replica_at, request, upstreams};

async fn wait_for_health(b: &Balancer, target: usize, want: Health) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let health = b.snapshot().targets[target].health;
        if health == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "target {target} stayed {health}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn active_checks_mark_a_stopped_replica_unhealthy_and_a_restarted_one_healthy() {
    let steady = replica("tokens=2").await;
    let flaky = replica("tokens=2").await;
    let flaky_addr = flaky.addr();
    let ups = upstreams(&[&steady, &flaky]);
    let check = HealthCheckConfig {
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(500),
        healthy_threshold: 2,
        unhealthy_threshold: 2,
        ..HealthCheckConfig::default()
    };
    let bal = Balancer::with_seed(
        BalancerConfig {
            name: "checked".into(),
            targets: vec![
                TargetConfig::new("steady"),
                TargetConfig::new("flaky").health_check(check),
            ],
            ..BalancerConfig::default()
        },
        1,
    )
    .unwrap();
    let checker = HealthChecker::spawn(&bal, &ups).unwrap();
    assert_eq!(checker.checks(), 1);

    wait_for_health(&bal, 1, Health::Healthy).await;
    assert_eq!(bal.snapshot().targets[0].health, Health::Unchecked);
    // The check is a GET of base_url + /models.
    let snap = flaky.stats().snapshot();
    let first = &snap.requests[0];
    assert_eq!(
        (first.method.as_str(), first.path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(received(&steady), 0, "only checked targets are checked");

    flaky.shutdown().await;
    wait_for_health(&bal, 1, Health::Unhealthy).await;
    assert!(!bal.snapshot().targets[1].usable);
    // No traffic to an unhealthy target while a healthy one exists.
    for lane in [Lane::Short, Lane::Stream, Lane::Short] {
        for _ in 0..5 {
            let tries = request(&bal, &ups, lane, 1, |_, _| String::new()).await;
            assert!(tries[0].target == 0 && tries[0].status == 200, "{tries:?}");
        }
    }

    // The same replica back on its port: healthy after two passes in a row.
    let back = replica_at(flaky_addr, "tokens=2").await;
    wait_for_health(&bal, 1, Health::Healthy).await;
    let snap = bal.snapshot();
    assert!(snap.targets[1].usable);
    // unchecked → healthy → unhealthy → healthy.
    assert_eq!(snap.counters.health_flips, 3);
    assert!(received(&back) >= 2);

    // Dropping the checker stops its task: no more checks arrive.
    drop(checker);
    // (A check written just before the drop may still be on its way to the mock.)
    tokio::time::sleep(Duration::from_millis(50)).await;
    let seen = received(&back);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        received(&back),
        seen,
        "a check ran after the checker was dropped"
    );
    assert_eq!(
        received(&steady),
        15,
        "the requests went to the steady replica"
    );
}
