//! The balancer over real sockets: several mock replicas, each behind its own `Upstream`,
//! driven the way the gateway's policy stage drives them (pick, send, report; retry on
//! another target with the failed ones excluded).

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::BodyExt;
use sluice_mock::{Behavior, MockConfig, MockServer};
use sluice_upstream::{
    BalanceFailure as Failure, BalancePolicy, BalanceTarget as TargetConfig, Balancer,
    BalancerConfig, Lane, Outcome, OutlierConfig, Pick, Protocol, Upstream,
};
use tokio::time::Instant;

use crate::support::*;

/// A mock replica whose default behaviour is `spec` (the `x-mock` syntax).
pub async fn replica(spec: &str) -> MockServer {
    replica_at(SocketAddr::from(([127, 0, 0, 1], 0)), spec).await
}

/// A replica on `addr`, e.g. a stopped one's address to restart it on the same port.
pub async fn replica_at(addr: SocketAddr, spec: &str) -> MockServer {
    MockServer::start(MockConfig {
        listen: addr,
        defaults: Behavior::default().with_spec(spec).unwrap(),
        ..MockConfig::default()
    })
    .await
    .unwrap()
}

/// One h2c upstream per replica, in the same order as the balancer's targets.
pub fn upstreams(mocks: &[&MockServer]) -> Vec<Upstream> {
    mocks.iter().map(|m| upstream(m, Protocol::H2c)).collect()
}

/// Targets `r0`, `r1`, ... with weight 1.
pub fn targets(n: usize) -> Vec<TargetConfig> {
    (0..n).map(|i| TargetConfig::new(format!("r{i}"))).collect()
}

/// Requests the mock `m` has received (health checks included).
pub fn received(m: &MockServer) -> u64 {
    m.stats().snapshot().totals.requests
}

/// What one attempt did.
#[derive(Clone, Copy, Debug)]
pub struct Tried {
    pub target: usize,
    pub status: u16,
    pub probe: bool,
}

/// One attempt as the policy stage makes it: send through the picked target's upstream, take
/// a stream's latency at its first body byte, read the body, report the outcome.
pub async fn attempt(ups: &[Upstream], mut pick: Pick, xmock: &str) -> Tried {
    let started = Instant::now();
    let lane = pick.lane();
    let target = pick.index();
    let probe = pick.is_probe();
    let mut req = chat(
        xmock,
        if lane == Lane::Stream {
            STREAM
        } else {
            NON_STREAM
        },
    );
    req.extensions_mut().insert(lane);
    let resp = match ups[target].send(req, secs(5)).await {
        Ok(resp) => resp,
        Err(e) => {
            pick.complete(Outcome::Failure(Failure::from_upstream_error(&e)));
            return Tried {
                target,
                status: 0,
                probe,
            };
        }
    };
    let status = resp.status().as_u16();
    let mut outcome = Outcome::from_status(resp.status(), resp.headers());
    let mut body = resp.into_body();
    let mut first = true;
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            outcome = Outcome::Failure(Failure::Retryable);
            break;
        }
        if first && lane == Lane::Stream {
            pick.record_latency(started.elapsed());
        }
        first = false;
    }
    pick.complete(outcome);
    Tried {
        target,
        status,
        probe,
    }
}

/// One request: attempts until a 2xx, each on a target that has not failed it yet (the
/// policy stage's loop), at most `max` attempts. `xmock(target, lane)` shapes each replica.
pub async fn request(
    b: &Balancer,
    ups: &[Upstream],
    lane: Lane,
    max: usize,
    xmock: impl Fn(usize, Lane) -> String,
) -> Vec<Tried> {
    let mut failed = Vec::new();
    let mut tries = Vec::new();
    for _ in 0..max {
        let pick = b.pick(lane, &failed);
        let xm = xmock(pick.index(), lane);
        let t = attempt(ups, pick, &xm).await;
        tries.push(t);
        if (200..300).contains(&t.status) {
            break;
        }
        failed.push(t.target);
    }
    tries
}

fn plain(_: usize, _: Lane) -> String {
    String::new()
}

#[tokio::test]
async fn p2c_steers_streams_away_from_a_replica_made_slow() {
    let fast0 = replica("tokens=3").await;
    let fast1 = replica("tokens=3").await;
    let slow = replica("tokens=3, ttft_ms=200").await;
    let ups = upstreams(&[&fast0, &fast1, &slow]);
    let b = Balancer::with_seed(
        BalancerConfig {
            name: "p2c".into(),
            targets: targets(3),
            ..BalancerConfig::default()
        },
        11,
    )
    .unwrap();
    // Four clients, fifteen streams each.
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (b, ups) = (b.clone(), ups.clone());
        clients.spawn(async move {
            for _ in 0..15 {
                let t = attempt(&ups, b.pick(Lane::Stream, &[]), "").await;
                assert_eq!(t.status, 200);
            }
        });
    }
    while let Some(r) = clients.join_next().await {
        r.unwrap();
    }
    let snap = b.snapshot();
    let [f0, f1, s] = [0, 1, 2].map(|i| snap.targets[i].clone());
    assert_eq!(f0.requests + f1.requests + s.requests, 60);
    // The slow replica is tried while nothing is known, then avoided: its first-byte
    // latency is far above the others'.
    assert!(
        s.requests <= 6,
        "slow replica got {} of 60: {snap:#?}",
        s.requests
    );
    assert!(
        s.stream.latency >= Duration::from_millis(150),
        "{:?}",
        s.stream
    );
    assert!(f0.stream.latency.max(f1.stream.latency) < Duration::from_millis(100));
    // The mocks agree with the balancer's count.
    assert_eq!(received(&slow), s.requests);
    assert_eq!(
        received(&fast0) + received(&fast1),
        f0.requests + f1.requests
    );
    assert!(snap.targets.iter().all(|t| t.in_flight == 0));
}

#[tokio::test]
async fn a_replica_answering_503_is_ejected_probed_once_and_comes_back_when_healthy() {
    let a = replica("tokens=2").await;
    let b0 = replica("tokens=2").await;
    let bad = replica("status=503").await;
    let bad_addr = bad.addr();
    let ups = upstreams(&[&a, &b0, &bad]);
    let base = Duration::from_millis(500);
    let bal = Balancer::with_seed(
        BalancerConfig {
            name: "eject".into(),
            targets: targets(3),
            // Round robin sends every third attempt to the bad replica until it is out.
            policy: BalancePolicy::WeightedRoundRobin,
            outlier: OutlierConfig {
                consecutive_failures: Some(3),
                success_rate: None,
                base_ejection_time: base,
                max_ejection_time: Duration::from_secs(5),
                max_ejection_percent: 50,
            },
            ..BalancerConfig::default()
        },
        3,
    )
    .unwrap();

    // Every request succeeds (the failed attempt is retried elsewhere) while the bad
    // replica collects its three failures in a row.
    let mut to_bad = 0;
    while bal.snapshot().targets[2].ejected_for.is_none() {
        let tries = request(&bal, &ups, Lane::Short, 3, plain).await;
        assert_eq!(tries.last().unwrap().status, 200, "{tries:?}");
        to_bad += tries.iter().filter(|t| t.target == 2).count();
        assert!(to_bad <= 3, "{to_bad} attempts reached the bad replica");
    }
    assert_eq!(received(&bad), 3);
    let ejected_at = Instant::now();

    // While it is ejected nothing reaches it.
    for _ in 0..10 {
        let tries = request(&bal, &ups, Lane::Short, 3, plain).await;
        assert_eq!(tries.len(), 1, "{tries:?}");
    }
    assert!(
        ejected_at.elapsed() < base,
        "the test ran slower than the ejection"
    );
    assert_eq!(received(&bad), 3);

    // Ejection over: of five concurrent requests exactly one probes it. It still fails, so it
    // is ejected again, for twice as long.
    tokio::time::sleep_until(ejected_at + base + Duration::from_millis(20)).await;
    let picks: Vec<Pick> = (0..5).map(|_| bal.pick(Lane::Short, &[])).collect();
    assert_eq!(picks.iter().filter(|p| p.index() == 2).count(), 1);
    assert!(picks.iter().all(|p| p.is_probe() == (p.index() == 2)));
    let mut sends = tokio::task::JoinSet::new();
    for p in picks {
        let ups = ups.clone();
        sends.spawn(async move { attempt(&ups, p, "").await });
    }
    let tried = sends.join_all().await;
    assert!(
        tried.iter().any(|t| t.probe && t.status == 503),
        "{tried:?}"
    );
    assert_eq!(received(&bad), 4, "exactly one probe");
    let t = bal.snapshot().targets[2].clone();
    assert_eq!((t.ejections, t.ejection_level), (2, 2));
    assert!(t.ejected_for.unwrap() > base, "{:?}", t.ejected_for);
    let reejected_at = Instant::now();

    // The replica is fixed (restarted healthy on the same port). After the longer ejection
    // its probe succeeds and it takes its share again.
    bad.shutdown().await;
    let fixed = replica_at(bad_addr, "tokens=2").await;
    tokio::time::sleep_until(reejected_at + 2 * base + Duration::from_millis(20)).await;
    let tries = request(&bal, &ups, Lane::Short, 3, plain).await;
    assert!(
        tries.len() == 1 && tries[0].probe && tries[0].target == 2 && tries[0].status == 200,
        "{tries:?}"
    );
    let t = bal.snapshot().targets[2].clone();
    assert!(t.usable && !t.half_open && t.ejected_for.is_none(), "{t:?}");
    for _ in 0..9 {
        assert_eq!(request(&bal, &ups, Lane::Short, 3, plain).await.len(), 1);
    }
    // The probe, then about a third of nine (round robin resumes where it left off).
    assert!((3..=5).contains(&received(&fixed)), "{}", received(&fixed));
    let c = bal.snapshot().counters;
    assert_eq!(
        (c.ejections, c.probes, c.probe_failures, c.probe_successes),
        (2, 2, 1, 1)
    );
}

#[tokio::test]
async fn a_429_with_retry_after_rests_that_target() {
    let limited = replica("status=429, retry_after=1").await;
    let ok = replica("tokens=2").await;
    let ups = upstreams(&[&limited, &ok]);
    let bal = Balancer::with_seed(
        BalancerConfig {
            name: "keys".into(),
            targets: vec![TargetConfig::new("key-1"), TargetConfig::new("key-2")],
            policy: BalancePolicy::WeightedRoundRobin,
            ..BalancerConfig::default()
        },
        5,
    )
    .unwrap();
    // Round robin starts with key-1: it answers 429, the request moves on to key-2.
    let tries = request(&bal, &ups, Lane::Short, 2, plain).await;
    let statuses: Vec<(usize, u16)> = tries.iter().map(|t| (t.target, t.status)).collect();
    assert_eq!(statuses, [(0, 429), (1, 200)]);
    let rested_at = Instant::now();
    let t = bal.snapshot().targets[0].clone();
    assert!(
        t.resting_for.is_some_and(|r| r <= Duration::from_secs(1)),
        "{t:?}"
    );
    // A 429 is not a failure of the target: nothing counts toward ejection.
    assert_eq!((t.consecutive_failures, t.ejections, t.failures), (0, 0, 0));
    assert_eq!(t.rate_limited, 1);
    // While it rests, round robin skips it.
    for _ in 0..6 {
        let tries = request(&bal, &ups, Lane::Short, 2, plain).await;
        assert!(tries.len() == 1 && tries[0].target == 1, "{tries:?}");
    }
    assert!(rested_at.elapsed() < Duration::from_secs(1));
    assert_eq!(received(&limited), 1);
    // After Retry-After it is tried again (and rests again).
    tokio::time::sleep_until(rested_at + Duration::from_millis(1050)).await;
    let mut reached = false;
    for _ in 0..2 {
        let tries = request(&bal, &ups, Lane::Short, 2, plain).await;
        reached |= tries.iter().any(|t| t.target == 0 && t.status == 429);
    }
    assert!(reached);
    assert_eq!(received(&limited), 2);
    let snap = bal.snapshot();
    assert_eq!((snap.counters.rests, snap.counters.ejections), (2, 0));
}

#[tokio::test]
async fn streams_and_short_calls_are_weighed_separately() {
    // r0 is slow to start streams, r1 is slow to answer short calls; both streams run for a
    // while after their first byte.
    let r0 = replica("tokens=4, interval_ms=40").await;
    let r1 = replica("tokens=4, interval_ms=40").await;
    let ups = upstreams(&[&r0, &r1]);
    let bal = Balancer::with_seed(
        BalancerConfig {
            name: "lanes".into(),
            targets: targets(2),
            ..BalancerConfig::default()
        },
        9,
    )
    .unwrap();
    let shape = |target: usize, lane: Lane| match (target, lane) {
        (0, Lane::Stream) | (1, Lane::Short) => "ttft_ms=150".to_string(),
        _ => String::new(),
    };
    // One measured attempt per target and lane (excluding the other target), then the
    // balancer chooses.
    for lane in Lane::ALL {
        for (target, other) in [(0, 1), (1, 0)] {
            let pick = bal.pick(lane, &[other]);
            assert_eq!(pick.index(), target);
            let t = attempt(&ups, pick, &shape(target, lane)).await;
            assert_eq!(t.status, 200);
        }
    }
    // Per lane, which target each of eight requests went to.
    let (mut streams, mut shorts) = ([0u32; 2], [0u32; 2]);
    for _ in 0..8 {
        for (lane, counts) in [(Lane::Stream, &mut streams), (Lane::Short, &mut shorts)] {
            let tries = request(&bal, &ups, lane, 1, shape).await;
            assert_eq!(tries[0].status, 200);
            counts[tries[0].target] += 1;
        }
    }
    assert_eq!(streams, [0, 8], "streams go to r1");
    assert_eq!(shorts, [8, 0], "short calls go to r0");
    let snap = bal.snapshot();
    let [t0, t1] = [0, 1].map(|i| snap.targets[i].clone());
    // The slow samples (≥ 150 ms) have decayed a little since (e^(−Δt/10 s)).
    let ms = Duration::from_millis;
    assert!(
        t0.stream.latency >= ms(90) && t1.stream.latency < ms(50),
        "{snap:#?}"
    );
    assert!(
        t1.short.latency >= ms(90) && t0.short.latency < ms(50),
        "{snap:#?}"
    );
    // r1's stream samples are first bytes: its streams last ≥ 120 ms (3 more tokens, 40 ms
    // apart), yet its stream latency stays below 50 ms.
    assert_eq!(t1.stream.samples, 9);
}
