//! `sluice demo --quick` through the library: it completes, and the shared connection is the
//! slow one.

mod report_check;

use std::sync::Arc;

use sluice::demo::{self, DemoPlan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_demo_shows_lanes_beating_the_shared_connection() {
    let r = demo::run(DemoPlan::quick(), &|_| {}, Arc::default())
        .await
        .unwrap();
    let table = demo::table(&r);
    // Every probe was located in the mock's records; sharing is all or nothing.
    assert_eq!(r.trap.shared_pct(), Some(100.0), "{table}");
    assert_eq!(
        r.trap.on_degraded_connection, r.trap.probes_located,
        "{table}"
    );
    assert_eq!(r.lanes.shared_pct(), Some(0.0), "{table}");
    assert_eq!(r.lanes.on_degraded_connection, 0, "{table}");
    assert_eq!(r.baseline.shared_pct(), Some(0.0), "{table}");
    assert!(
        r.trap.latency.count >= 1 && r.lanes.latency.count >= 3,
        "{table}"
    );
    assert!(
        r.lanes.latency.p95_ms * 10.0 < r.trap.latency.p95_ms,
        "lanes should be over 10x faster at p95:\n{table}"
    );
    assert_eq!(r.cancel_ms.len(), DemoPlan::quick().cancels);
    assert!(r.cancel_ms.iter().all(|c| *c < 1000.0), "{:?}", r.cancel_ms);
    assert!(r.verdict.starts_with("lanes: probe p95 "), "{}", r.verdict);
    assert!(
        r.verdict.contains("x); cancel reached the upstream in"),
        "{}",
        r.verdict
    );
    // `sluice demo --report`: one section per scenario, holding its probes.
    let (sections, json) = report_check::read(&r.page().html());
    let titles: Vec<&str> = sections.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        titles,
        [
            "baseline: no background streams",
            "trap: one shared HTTP/2 connection",
            "lanes: Sluice (stream / short)"
        ]
    );
    for ((_, charts), (_, p)) in sections.iter().zip(r.scenarios()) {
        assert_eq!(charts.ok_total(), p.successes as u64, "{table}");
        assert_eq!(charts.histogram_total(), p.successes as u64);
        // The slowest success drawn is at most the slowest probe (failures included).
        assert!(charts.max_latency() > 0.0 && charts.max_latency() <= p.latency.max_ms);
    }
    assert_eq!(json["verdict"], r.verdict);
}
