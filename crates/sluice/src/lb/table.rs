//! The report as a table, a verdict, the run's failures and an HTML page.

use sluice_bench::chat::Kind;
use sluice_bench::report::num;
use sluice_bench::{Causes, Page, Section};
use sluice_upstream::BalancePolicy;

use super::{ms, pct, KindReport, LbReport, PhaseReport, P99_GOAL_RATIO};

fn row_goal(p: &PhaseReport, k: &KindReport) -> String {
    match k.goal_met {
        Some(true) if p.name == BalancePolicy::P2cEwma.as_str() => {
            format!("met (≤ {P99_GOAL_RATIO}×)")
        }
        Some(true) if p.name == "baseline" || p.kill.is_some() => "met".into(),
        Some(true) => "- (contrast)".into(),
        Some(false) => format!("MISSED: {}", k.missed.join("; ")),
        None => "-".into(),
    }
}

impl LbReport {
    /// The results table: one row per phase and kind, then the kill phase's findings.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let balance: Vec<&PhaseReport> = self.phases.iter().filter(|p| p.kill.is_none()).collect();
        if !balance.is_empty() {
            t.push_str(&format!(
                "balancing: replica c is slow ({})\n",
                self.plan.slow.describe()
            ));
            t.push_str(&format!(
                "{:<21} {:<13} {:<6} {:>8} {:>6} {:>8} {:>8} {:>9}  {:<22} {}\n",
                "phase",
                "replicas",
                "kind",
                "requests",
                "errors",
                "p50 ms",
                "p99 ms",
                "p99/base",
                "share a / b / c",
                "goal"
            ));
            for p in &balance {
                for k in &p.kinds {
                    t.push_str(&format!(
                        "{:<21} {:<13} {:<6} {:>8} {:>6} {:>8} {:>8} {:>9}  {:<22} {}\n",
                        p.name,
                        p.replicas
                            .iter()
                            .map(|r| r.replace(" (slow)", "*"))
                            .collect::<Vec<_>>()
                            .join(","),
                        k.kind.name(),
                        k.requests,
                        k.errors,
                        num(k.latency.p50_ms),
                        num(k.latency.p99_ms),
                        k.p99_vs_baseline
                            .map_or_else(|| "-".into(), |r| format!("{r:.2}×")),
                        k.replicas
                            .iter()
                            .map(|r| pct(r.share))
                            .collect::<Vec<_>>()
                            .join(" / "),
                        row_goal(p, k)
                    ));
                }
            }
            t.push_str("(* the slow replica)\n");
        }
        for p in &self.phases {
            let Some(kill) = &p.kill else { continue };
            if !t.is_empty() {
                t.push('\n');
            }
            t.push_str(&format!(
                "kill: p2c_ewma over a, b, c; c stopped at {} s, started again at {} s; {}\n",
                secs(kill.killed_at_ms),
                secs(kill.restarted_at_ms),
                match self.plan.health_interval {
                    Some(i) => format!("health checks every {}", humantime::format_duration(i)),
                    None => "no health checks".into(),
                }
            ));
            t.push_str(&format!(
                "{:<6} {:>8} {:>6} {:>8} {:>8}  {:<22} {:>18}  {}\n",
                "kind",
                "requests",
                "errors",
                "p50 ms",
                "p99 ms",
                "share a / b / c",
                "in flight on c",
                "goal"
            ));
            for k in &p.kinds {
                let in_flight = match k.kind {
                    Kind::Stream => kill.streams_in_flight_at_kill,
                    Kind::Call => kill.calls_in_flight_at_kill,
                };
                t.push_str(&format!(
                    "{:<6} {:>8} {:>6} {:>8} {:>8}  {:<22} {:>18}  {}\n",
                    k.kind.name(),
                    k.requests,
                    k.errors,
                    num(k.latency.p50_ms),
                    num(k.latency.p99_ms),
                    k.replicas
                        .iter()
                        .map(|r| pct(r.share))
                        .collect::<Vec<_>>()
                        .join(" / "),
                    in_flight,
                    row_goal(p, k)
                ));
            }
            t.push_str(&format!("{}\n", kill.eject_line()));
            t.push_str(&format!("{}\n", kill.back_line()));
        }
        t
    }

    /// The one-line conclusion.
    pub fn verdict(&self) -> String {
        let mut parts = Vec::new();
        let find = |name: &str| self.phases.iter().find(|p| p.name == name);
        for name in [
            BalancePolicy::P2cEwma.as_str(),
            BalancePolicy::WeightedRoundRobin.as_str(),
        ] {
            if let Some(p) = find(name) {
                let ratios: Vec<String> = p
                    .kinds
                    .iter()
                    .map(|k| {
                        k.p99_vs_baseline.map_or_else(
                            || format!("{} -", k.kind.name()),
                            |r| format!("{} {r:.2}×", k.kind.name()),
                        )
                    })
                    .collect();
                parts.push(format!("{name} p99 {} the baseline's", ratios.join(", ")));
            }
        }
        if let Some(p) = find("kill") {
            if let Some(k) = &p.kill {
                let errors = |kind: Kind| {
                    p.kinds
                        .iter()
                        .find(|r| r.kind == kind)
                        .map_or(0, |r| r.errors)
                };
                parts.push(format!(
                    "killed replica: {} call errors, {} stream errors; back {}",
                    errors(Kind::Call),
                    errors(Kind::Stream),
                    k.back_ms.map_or_else(
                        || "never".to_string(),
                        |b| format!("{} s after its restart", secs(b))
                    )
                ));
            }
        }
        let rows: Vec<&KindReport> = self.phases.iter().flat_map(|p| &p.kinds).collect();
        let met = rows.iter().filter(|k| k.goal_met == Some(true)).count();
        let kill_met = self
            .phases
            .iter()
            .filter_map(|p| p.kill.as_ref())
            .all(|k| k.goal_met);
        parts.push(format!(
            "goals met in {met}/{} rows{}",
            rows.len(),
            if kill_met {
                ""
            } else {
                "; the kill goals MISSED"
            }
        ));
        parts.join("; ")
    }

    /// What fails the run, one line per row: more client-visible errors than
    /// `max_error_rate` allows (in the kill phase streams may also fail, up to the number in
    /// flight on the killed replica), no request at all, or a killed replica that never
    /// served again. (The p99 and the back-in-5-s goals are timing, and only reported.)
    pub fn failures(&self, max_error_rate: f64) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.phases {
            for k in &p.kinds {
                let allowed_cut = match (&p.kill, k.kind) {
                    (Some(kill), Kind::Stream) => kill.streams_in_flight_at_kill,
                    _ => 0,
                };
                let too_many =
                    k.errors as f64 > allowed_cut as f64 + max_error_rate * k.requests as f64;
                if too_many || k.requests == 0 {
                    out.push(format!(
                        "{} {}: {} of {} requests failed{} ({})",
                        p.name,
                        k.kind.name(),
                        k.errors,
                        k.requests,
                        if allowed_cut > 0 {
                            format!(" ({allowed_cut} were in flight on the killed replica)")
                        } else {
                            String::new()
                        },
                        Causes {
                            counts: k.error_causes.clone(),
                            samples: Vec::new()
                        }
                        .line()
                    ));
                }
            }
            if let Some(kill) = &p.kill {
                if kill.back_ms.is_none() {
                    out.push(format!(
                        "kill: replica {} served no request after its restart",
                        kill.replica
                    ));
                }
            }
        }
        out
    }

    /// The run as an HTML report: streams and calls, with the phases, the kill and the
    /// restart marked.
    pub fn page(&self) -> Page {
        let section = |kind: Kind, title: &str, latency: &str| Section {
            title: title.into(),
            latency: latency.into(),
            samples: self
                .samples
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, s)| *s)
                .collect(),
            marks: self.marks.clone(),
            facts: self
                .phases
                .iter()
                .flat_map(|p| {
                    p.kinds
                        .iter()
                        .filter(|k| k.kind == kind)
                        .map(move |k| (p, k))
                })
                .map(|(p, k)| {
                    (
                        p.name.clone(),
                        format!(
                            "{} requests, {} errors, p50 {} ms, p99 {} ms{}, shares {}{}",
                            k.requests,
                            k.errors,
                            num(k.latency.p50_ms),
                            num(k.latency.p99_ms),
                            k.p99_vs_baseline
                                .map_or_else(String::new, |r| format!(" ({r:.2}× baseline)")),
                            k.replicas
                                .iter()
                                .map(|r| format!("{} {}", r.name, pct(r.share)))
                                .collect::<Vec<_>>()
                                .join(", "),
                            if k.missed.is_empty() {
                                String::new()
                            } else {
                                format!("; MISSED: {}", k.missed.join("; "))
                            }
                        ),
                    )
                })
                .collect(),
        };
        let mut facts = vec![
            ("verdict".into(), self.verdict()),
            (
                "clients".into(),
                format!(
                    "{} (half streaming), {} ms per phase",
                    self.plan.clients,
                    num(ms(self.plan.duration))
                ),
            ),
            (
                "slow replica".into(),
                format!("c: {}", self.plan.slow.describe()),
            ),
        ];
        for kill in self.phases.iter().filter_map(|p| p.kill.as_ref()) {
            facts.push(("kill: eject".into(), kill.eject_line()));
            facts.push(("kill: back".into(), kill.back_line()));
        }
        Page {
            title: "sluice bench lb".into(),
            facts,
            sections: vec![
                section(Kind::Stream, "streams", "send to the first content"),
                section(Kind::Call, "calls", "send to the end of the body"),
            ],
            json: serde_json::to_value(self).ok(),
        }
    }
}

fn secs(ms: f64) -> String {
    format!("{:.2}", ms / 1000.0)
}
