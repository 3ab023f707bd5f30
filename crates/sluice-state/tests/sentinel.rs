//! Stores following a primary through three real sentinels: one limit between two stores, and
//! the primary killed, frozen or failed over under load. No admission outlives the call
//! deadline while the sentinels fail over, the configured failure mode holds meanwhile, and
//! once the replica is promoted both stores find it and share limits again, without being
//! rebuilt.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_state::{Check, Decision, FailureMode, RedisConfig, Store, StoreMode, Usage};
use support::topology::{connect, try_connect, SentinelSet, MASTER};
use support::{eventually, redis_config, redis_store};
use tokio::time::Instant;

fn key(s: &str) -> Arc<str> {
    Arc::from(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn two_stores_keep_one_rate_limit_through_sentinels() {
    let set = SentinelSet::start().await;
    let a = redis_store(redis_config(&set.url())).await;
    let b = redis_store(redis_config(&set.url())).await;
    support::two_stores_keep_one_rate_limit(&a, &b, "k").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn a_hung_sentinel_is_skipped_and_an_unknown_master_is_a_failure_mode() {
    let set = SentinelSet::start().await;
    // The first sentinel listed answers nothing; the others do.
    set.sentinels[0].freeze();
    let config = RedisConfig {
        connect_timeout: Duration::from_millis(400),
        on_failure: FailureMode::FailClosed,
        ..redis_config(&set.url())
    };
    let started = Instant::now();
    let store = redis_store(config.clone()).await;
    assert!(
        started.elapsed() < config.connect_timeout,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(store.mode(), StoreMode::Shared);
    assert!(matches!(
        store.admit(load_checks()).await,
        Ok(Decision::Admitted(a)) if a.is_shared()
    ));
    set.sentinels[0].thaw();

    let unknown = RedisConfig {
        url: set.url().replace("/mymaster", "/nosuchmaster"),
        ..config
    };
    let store = redis_store(unknown).await;
    assert_eq!(store.mode(), StoreMode::Unavailable);
    let err = store.admit(load_checks()).await.unwrap_err();
    assert_eq!(err.metric_label(), "state_unavailable");
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Shared,
    /// Admitted from this instance's memory (`fail_open`).
    Local,
    /// Refused with a 503 error (`fail_closed`).
    Unavailable,
}

/// One admission (and its settle) of the load: when it started and ended (ms since the kill,
/// negative before), how long the admission and the settle took, what it got.
#[derive(Debug)]
struct Sample {
    at_ms: i64,
    end_ms: i64,
    admit: Duration,
    settle: Duration,
    outcome: Outcome,
}

fn load_checks() -> Vec<Check> {
    vec![
        Check::Rate {
            key: key("load"),
            limit: 1 << 40,
            period: Duration::from_secs(60),
        },
        Check::Concurrency {
            key: key("load"),
            limit: 1000,
        },
    ]
}

/// Admits and settles in a loop until `stop`, recording every sample.
async fn load(
    store: Store,
    stop: Arc<AtomicBool>,
    killed: Arc<Mutex<Option<Instant>>>,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let origin = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let result = store.admit(load_checks()).await;
        let admit = started.elapsed();
        let (outcome, settle) = match result {
            Ok(Decision::Admitted(a)) => {
                let outcome = if a.is_shared() {
                    Outcome::Shared
                } else {
                    Outcome::Local
                };
                let settling = Instant::now();
                // Fails during the failover (the spend is owed, the lease expires): fine here.
                let _ = a.settle(Usage::default()).await;
                (outcome, settling.elapsed())
            }
            Ok(Decision::Refused(r)) => panic!("the load's limits are never reached: {r:?}"),
            Err(e) => {
                assert!(e.is_unavailable(), "{e:?}");
                (Outcome::Unavailable, Duration::ZERO)
            }
        };
        let kill = killed
            .lock()
            .unwrap()
            .unwrap_or(origin + Duration::from_secs(3600));
        let since = |t: Instant| {
            if t >= kill {
                (t - kill).as_millis() as i64
            } else {
                -((kill - t).as_millis() as i64)
            }
        };
        samples.push(Sample {
            at_ms: since(started),
            end_ms: since(Instant::now()),
            admit,
            settle,
            outcome,
        });
        // A failing store answers in microseconds; the pause keeps the load from spinning.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    samples
}

/// Slack over the call deadline for a loaded, shared test machine.
const MARGIN: Duration = Duration::from_millis(250);

/// What happens to the primary mid-run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// SIGKILL: connections break at once.
    Kill,
    /// SIGSTOP: connections stay open and nothing answers, so calls wait out their deadline.
    Freeze,
    /// `SENTINEL FAILOVER`: the primary lives on, demoted to a replica.
    Failover,
}

async fn a_primary_lost(fault: Fault, on_failure: FailureMode) {
    let mut set = SentinelSet::start().await;
    let config = RedisConfig {
        call_timeout: Duration::from_millis(100),
        connect_timeout: Duration::from_millis(250),
        trip_after: 2,
        probe_interval: Duration::from_millis(100),
        on_failure,
        ..redis_config(&set.url())
    };
    let a = redis_store(config.clone()).await;
    let b = redis_store(config.clone()).await;
    for i in 0..3 {
        assert_eq!(set.primary_port(i).await, Some(set.primary.port()));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(Mutex::new(None));
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(load(store, stop.clone(), killed.clone()))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let kill = Instant::now();
    *killed.lock().unwrap() = Some(kill);
    match fault {
        Fault::Kill => set.primary.kill(),
        Fault::Freeze => set.primary.freeze(),
        Fault::Failover => {
            let mut sentinel = connect(set.sentinels[0].port()).await;
            let () = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(MASTER)
                .query_async(&mut sentinel)
                .await
                .expect("SENTINEL FAILOVER");
        }
    }
    // The sentinel that led the failover names the promoted replica first, the others once
    // they hear of it (every 2 s): the stores ask them all and take the first primary.
    let replica = set.replica.port();
    assert!(
        eventually(Duration::from_secs(30), || async {
            for i in 0..3 {
                if set.primary_port(i).await == Some(replica) {
                    return true;
                }
            }
            false
        })
        .await,
        "the sentinels never promoted the replica"
    );
    // Both stores on the promoted replica, without being rebuilt: what they admit now is
    // written there (not on the old primary, which a planned failover leaves up and writable
    // until Sentinel demotes it, seconds later).
    let on_replica = connect(replica).await;
    let mut recovered = Vec::new();
    for (i, store) in [&a, &b].into_iter().enumerate() {
        let mut n = 0;
        assert!(
            eventually(Duration::from_secs(30), || {
                n += 1;
                let name = format!("moved-{i}-{n}");
                let mut on_replica = on_replica.clone();
                async move {
                    let tripped = fault == Fault::Failover || store.stats().recoveries >= 1;
                    let check = vec![Check::Rate {
                        key: key(&name),
                        limit: 10,
                        period: Duration::from_secs(60),
                    }];
                    let shared = matches!(
                        store.admit(check).await,
                        Ok(Decision::Admitted(a)) if a.is_shared()
                    );
                    let there: u64 = redis::cmd("EXISTS")
                        .arg(format!("sluice:r:{name}"))
                        .query_async(&mut on_replica)
                        .await
                        .unwrap_or(0);
                    store.mode() == StoreMode::Shared && tripped && shared && there == 1
                }
            })
            .await,
            "never moved to the promoted replica: {:?}",
            store.stats()
        );
        recovered.push(kill.elapsed());
    }
    let promoted = kill.elapsed();
    if fault == Fault::Freeze {
        // Back, it still believes it is the primary until the sentinels demote it.
        set.primary.thaw();
    }
    if fault != Fault::Kill {
        // Its demotion (Sentinel waits 8 s, then disconnects its clients) disturbs no store:
        // they left it already.
        let old = set.primary.port();
        assert!(
            eventually(Duration::from_secs(30), || async {
                // Sentinel drops the demoted server's clients: a refused connection is a retry.
                let Ok(mut conn) = try_connect(old).await else {
                    return false;
                };
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_default();
                info.contains("role:slave")
            })
            .await,
            "the old primary was never demoted"
        );
        eprintln!(
            "{fault:?}: the old primary demoted {:?} after the fault",
            kill.elapsed()
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.unwrap());
    }

    let max_admit = samples.iter().map(|s| s.admit).max().unwrap();
    let max_settle = samples.iter().map(|s| s.settle).max().unwrap();
    let count = |o: Outcome| samples.iter().filter(|s| s.outcome == o).count();
    let not_shared: Vec<i64> = samples
        .iter()
        .filter(|s| s.outcome != Outcome::Shared)
        .map(|s| s.at_ms)
        .collect();
    eprintln!(
        "{fault:?}, {}: {} admissions ({} shared, {} local, {} unavailable); the first not \
         shared {:?} ms after the fault, the last {:?} ms; stores shared again after \
         {recovered:?}; slowest admission {max_admit:?}, slowest settle {max_settle:?}; \
         {:?} / {:?}",
        on_failure.as_str(),
        samples.len(),
        count(Outcome::Shared),
        count(Outcome::Local),
        count(Outcome::Unavailable),
        not_shared.iter().min(),
        not_shared.iter().max(),
        a.stats(),
        b.stats(),
    );

    // No request waited longer than the call deadline, failover or not.
    assert!(max_admit <= config.call_timeout + MARGIN, "{max_admit:?}");
    assert!(max_settle <= config.call_timeout + MARGIN, "{max_settle:?}");
    // Before the fault, everything was shared.
    assert!(samples
        .iter()
        .filter(|s| s.end_ms < 0)
        .all(|s| s.outcome == Outcome::Shared));
    // During the failover the configured mode held: answers from local memory, or 503s.
    let (expected, other) = match on_failure {
        FailureMode::FailOpen => (Outcome::Local, Outcome::Unavailable),
        FailureMode::FailClosed => (Outcome::Unavailable, Outcome::Local),
    };
    assert_eq!(count(other), 0);
    // A planned failover may be quick enough for no request to notice.
    if fault != Fault::Failover {
        assert!(count(expected) > 0);
    }
    // After both stores recovered, they stayed shared.
    let settled_ms = promoted.as_millis() as i64;
    assert!(samples
        .iter()
        .filter(|s| s.at_ms > settled_ms)
        .all(|s| s.outcome == Outcome::Shared));

    // Limits are shared again: 20 per hour between the two stores.
    let limit = || {
        vec![Check::Rate {
            key: key("after"),
            limit: 20,
            period: Duration::from_secs(3600),
        }]
    };
    let mut admitted = 0;
    for i in 0..40 {
        let store = if i % 2 == 0 { &a } else { &b };
        if let Decision::Admitted(adm) = store.admit(limit()).await.unwrap() {
            assert!(adm.is_shared());
            admitted += 1;
        }
    }
    assert_eq!(admitted, 20);
    let cap = || {
        vec![Check::Concurrency {
            key: key("after"),
            limit: 1,
        }]
    };
    let held = a.admit(cap()).await.unwrap();
    assert!(matches!(held, Decision::Admitted(_)));
    assert!(matches!(
        b.admit(cap()).await.unwrap(),
        Decision::Refused(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn a_killed_primary_fails_open_within_the_deadline_then_limits_are_shared_again() {
    a_primary_lost(Fault::Kill, FailureMode::FailOpen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn a_killed_primary_fails_closed_within_the_deadline_then_limits_are_shared_again() {
    a_primary_lost(Fault::Kill, FailureMode::FailClosed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn a_frozen_primary_costs_each_call_its_deadline_until_the_replica_is_promoted() {
    a_primary_lost(Fault::Freeze, FailureMode::FailOpen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_redis,
    ignore = "no redis-server: install it (apt-get install redis-server) or set REDIS_SERVER"
)]
async fn a_planned_failover_is_followed_without_rebuilding_the_store() {
    a_primary_lost(Fault::Failover, FailureMode::FailClosed).await;
}
