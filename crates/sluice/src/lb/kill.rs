//! The kill phase: a replica stopped mid-run and started again on its port, watched from
//! `/admin/targets` and the mocks' records.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use sluice_bench::chat::{self, ChatResult, Kind};
use sluice_bench::report::num;
use sluice_bench::{Mark, Progress};
use sluice_mock::{MockServer, ReqRecord};
use sluice_upstream::{BalancePolicy, Upstream};
use tokio::time::{sleep, sleep_until, Instant};

use super::{
    any_port, chat_records, gateway, join_clients, kind_report, ms, pct, replica, shares,
    start_clients, KillReport, KindReport, LbError, LbPlan, PhaseReport, PhaseRun, BACK_GOAL,
    POLL_INTERVAL, SHAPE, TAIL,
};

/// One reading of `/admin/targets` for one target.
#[derive(Clone, Debug)]
struct TargetSample {
    at: Instant,
    usable: bool,
    health: String,
    requests: u64,
}

/// Reads target `name` of the first route from `/admin/targets`.
async fn read_target(admin: &Upstream, name: &str) -> Option<TargetSample> {
    let req = http::Request::get("/admin/targets")
        .body(Bytes::new())
        .expect("a valid request");
    let at = Instant::now();
    let resp = admin.send(req, at + Duration::from_secs(2)).await.ok()?;
    let body = tokio::time::timeout(Duration::from_secs(2), resp.into_body().collect())
        .await
        .ok()?
        .ok()?
        .to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let t = v["routes"][0]["targets"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == name)?;
    Some(TargetSample {
        at,
        usable: t["usable"].as_bool()?,
        health: t["health"].as_str()?.to_string(),
        requests: t["requests"].as_u64()?,
    })
}

/// Starts a mock on `addr` again, retrying while the port is still being released.
async fn restart(addr: SocketAddr, spec: &str) -> Result<MockServer, LbError> {
    let give_up = Instant::now() + Duration::from_secs(5);
    loop {
        match replica(addr, spec).await {
            Ok(m) => return Ok(m),
            Err(e) if Instant::now() >= give_up => return Err(e),
            Err(_) => sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Requests in `records` in flight at `at`, streams and calls.
fn in_flight_at(records: &[ReqRecord], at: Instant) -> (u64, u64) {
    let mut n = (0, 0);
    for r in records {
        let ended = r.finished_at.or(r.cancelled_at);
        if r.started <= at && ended.is_none_or(|e| e >= at) {
            if r.stream {
                n.0 += 1;
            } else {
                n.1 += 1;
            }
        }
    }
    n
}

/// The kill phase: three healthy replicas behind p2c_ewma; `c` stopped at `kill_at` and
/// started again `down_for` later on the same port.
pub(super) async fn kill_phase(
    plan: &LbPlan,
    progress: &Arc<Progress>,
    t0: Instant,
    announce: &(dyn Fn(&str) + Sync),
) -> Result<PhaseRun, LbError> {
    let a = replica(any_port(), SHAPE).await?;
    let b = replica(any_port(), SHAPE).await?;
    let c = replica(any_port(), SHAPE).await?;
    let c_addr = c.addr();
    let urls = [("a", a.url()), ("b", b.url()), ("c", c.url())];
    let (gw, config) = gateway(plan, &urls, BalancePolicy::P2cEwma).await?;
    let client =
        chat::client(gw.addr(), plan.clients).map_err(|e| LbError::Client(e.to_string()))?;
    let admin = chat::client(gw.admin_addr(), 1).map_err(|e| LbError::Client(e.to_string()))?;

    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = start_clients(&client, plan.clients, "kill", &stop, progress);
    let poller = {
        let (admin, stop) = (admin.clone(), stop.clone());
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(POLL_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                if let Some(s) = read_target(&admin, "c").await {
                    samples.push(s);
                }
            }
            samples
        })
    };

    sleep_until(start + plan.kill_at()).await;
    announce("stopping replica c");
    let old_stats = c.stats().clone();
    let killed = Instant::now();
    c.shutdown().await;
    sleep_until(killed + plan.down_for()).await;
    // The gateway's attempts on c up to now: the mock saw those made while it was up.
    let before_restart = read_target(&admin, "c").await;
    announce("starting replica c again on its port");
    let c2 = restart(c_addr, SHAPE).await?;
    let restarted = Instant::now();
    // Run to the planned end, and on (if c is not back by then) until it serves again or
    // the goal has passed; once it is back, a little longer, to see it take its share.
    let planned_end = start + plan.duration;
    let give_up = restarted + BACK_GOAL + Duration::from_secs(1);
    let mut back_seen: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if back_seen.is_none() && !chat_records(c2.stats()).is_empty() {
            back_seen = Some(now);
        }
        let end = match back_seen {
            Some(back) => planned_end.max(back + TAIL),
            None => planned_end.max(give_up),
        };
        if now >= end {
            break;
        }
        sleep(POLL_INTERVAL.min(end - now)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let done = join_clients(tasks).await;
    let duration = start.elapsed();
    let samples = poller.await.unwrap_or_default();
    gw.shutdown().await;

    let old = chat_records(&old_stats);
    let new = chat_records(c2.stats());
    let a_rec = chat_records(a.stats());
    let b_rec = chat_records(b.stats());
    let (streams_in_flight, calls_in_flight) = in_flight_at(&old, killed);

    let after = |t: Instant| samples.iter().filter(move |s| s.at >= t);
    let since = |from: Instant, s: &TargetSample| ms(s.at.saturating_duration_since(from));
    let down_samples: Vec<&TargetSample> = after(killed).filter(|s| s.at < restarted).collect();
    let final_count = before_restart
        .as_ref()
        .map(|s| s.requests)
        .or_else(|| down_samples.last().map(|s| s.requests));
    let attempts_lost = final_count.map_or(0, |n| n.saturating_sub(old.len() as u64));
    let no_more_attempts_ms = down_samples
        .iter()
        .find(|s| Some(s.requests) == final_count)
        .map(|s| since(killed, s));
    let first_new = new.iter().map(|r| r.started).min();
    let served_after_restart = new.len() as u64;
    let others_after: u64 = [&a_rec, &b_rec]
        .iter()
        .map(|rs| rs.iter().filter(|r| r.started >= restarted).count() as u64)
        .sum();
    let mut kill = KillReport {
        replica: "c".into(),
        killed_at_ms: ms(killed - start),
        restarted_at_ms: ms(restarted - start),
        calls_in_flight_at_kill: calls_in_flight,
        streams_in_flight_at_kill: streams_in_flight,
        out_of_rotation_ms: down_samples
            .iter()
            .find(|s| !s.usable)
            .map(|s| since(killed, s)),
        unhealthy_ms: down_samples
            .iter()
            .find(|s| s.health == "unhealthy")
            .map(|s| since(killed, s)),
        no_more_attempts_ms,
        attempts_lost,
        back_ms: first_new.map(|t| ms(t.saturating_duration_since(restarted))),
        healthy_again_ms: after(restarted)
            .find(|s| s.usable && s.health == "healthy")
            .map(|s| since(restarted, s)),
        served_after_restart,
        share_after_restart: served_after_restart as f64
            / (served_after_restart + others_after).max(1) as f64,
        poll_interval_ms: ms(POLL_INTERVAL),
        goal_met: true,
        missed: Vec::new(),
    };

    let mut kinds = Vec::new();
    for kind in [Kind::Stream, Kind::Call] {
        let mine: Vec<&ChatResult> = done.iter().filter(|d| d.kind == kind).collect();
        let is = |r: &&ReqRecord| r.stream == (kind == Kind::Stream);
        let counts = vec![
            (
                "a".to_string(),
                false,
                a_rec.iter().filter(is).count() as u64,
            ),
            (
                "b".to_string(),
                false,
                b_rec.iter().filter(is).count() as u64,
            ),
            (
                "c".to_string(),
                false,
                (old.iter().filter(is).count() + new.iter().filter(is).count()) as u64,
            ),
        ];
        kinds.push(kind_report(kind, &mine, shares(&counts)));
    }
    judge_kill(&mut kill, &mut kinds);
    let marks = vec![
        Mark {
            at_ms: ms(start - t0),
            label: "kill phase".into(),
        },
        Mark {
            at_ms: ms(killed - t0),
            label: "c stopped".into(),
        },
        Mark {
            at_ms: ms(restarted - t0),
            label: "c restarted".into(),
        },
    ];
    a.shutdown().await;
    b.shutdown().await;
    c2.shutdown().await;
    Ok(PhaseRun {
        report: PhaseReport {
            name: "kill".into(),
            policy: BalancePolicy::P2cEwma.as_str(),
            replicas: vec!["a".into(), "b".into(), "c (killed)".into()],
            start_ms: ms(start - t0),
            duration_ms: ms(duration),
            kinds,
            kill: Some(kill),
        },
        done,
        marks,
        config,
    })
}

fn judge_kill(kill: &mut KillReport, kinds: &mut [KindReport]) {
    for k in kinds.iter_mut() {
        let allowed = match k.kind {
            Kind::Call => 0,
            Kind::Stream => kill.streams_in_flight_at_kill,
        };
        if k.requests == 0 {
            k.missed.push("no request ended".into());
        }
        if k.errors > allowed {
            k.missed.push(match k.kind {
                Kind::Call => format!("{} client-visible errors", k.errors),
                Kind::Stream => format!(
                    "{} client-visible errors, more than the {allowed} streams in flight on c at the kill",
                    k.errors
                ),
            });
        }
        k.goal_met = Some(k.missed.is_empty());
    }
    match kill.back_ms {
        None => kill
            .missed
            .push("c served no request after its restart".into()),
        Some(b) if b > ms(BACK_GOAL) => kill.missed.push(format!(
            "back {} ms after the restart, over the goal of {} ms",
            num(b),
            num(ms(BACK_GOAL))
        )),
        Some(_) => {}
    }
    kill.goal_met = kill.missed.is_empty() && kinds.iter().all(|k| k.missed.is_empty());
}

impl KillReport {
    /// How fast the gateway stopped sending to the dead replica.
    pub fn eject_line(&self) -> String {
        let t =
            |v: Option<f64>| v.map_or_else(|| "never".to_string(), |v| format!("{} ms", num(v)));
        format!(
            "no more attempts {} after the kill; out of rotation after {} (unhealthy after {}); {} attempts never reached it (sent as it died or while down); /admin/targets read every {} ms",
            t(self.no_more_attempts_ms),
            t(self.out_of_rotation_ms),
            t(self.unhealthy_ms),
            self.attempts_lost,
            num(self.poll_interval_ms)
        )
    }

    /// How fast it came back.
    pub fn back_line(&self) -> String {
        format!(
            "back in rotation {} after the restart (healthy in /admin/targets after {}); it served {} requests ({} of all) after; goal ≤ {} s: {}",
            self.back_ms
                .map_or_else(|| "never".to_string(), |v| format!("{} ms", num(v))),
            self.healthy_again_ms
                .map_or_else(|| "never".to_string(), |v| format!("{} ms", num(v))),
            num(self.served_after_restart as f64),
            pct(self.share_after_restart),
            BACK_GOAL.as_secs(),
            if self.back_ms.is_some_and(|b| b <= ms(BACK_GOAL)) {
                "met"
            } else {
                "MISSED"
            }
        )
    }
}
