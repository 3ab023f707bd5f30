//! `sluice demo`: the probe experiment of seed 000 against in-process gateways, in about a
//! minute (`--quick`: about 15 s).

use std::io::IsTerminal as _;
use std::sync::Arc;

use std::time::Duration;

use sluice::demo::{self, DemoPlan};
use sluice_bench::{check_error_rate, Causes, Progress, DEFAULT_MAX_ERROR_RATE};

use crate::bench_cmd::{duration, runtime, Output, RunFailed, Ticker};

/// Options of `sluice demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Fewer background streams and shorter phases (about 15 s instead of about a minute).
    #[arg(long)]
    quick: bool,
    /// How long the trap and lanes scenarios probe, e.g. 10s (default 25s, --quick 6s).
    #[arg(long, value_parser = duration)]
    duration: Option<Duration>,
    #[command(flatten)]
    out: Output,
}

/// Runs the demo and prints its table and verdict (or JSON).
///
/// # Errors
/// A mock or gateway did not start, or [`RunFailed`] (after the report) when a scenario's
/// probes failed more than `--max-error-rate` allows.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let mut plan = if args.quick {
        DemoPlan::quick()
    } else {
        DemoPlan::full()
    };
    if let Some(d) = args.duration {
        plan.duration = d;
    }
    let rt = runtime()?;
    let progress = Arc::new(Progress::default());
    let human = !args.out.json();
    let report = rt.block_on(async {
        let ticker = Ticker::start(progress.clone(), "probes");
        let phase = |p: &str| {
            ticker.clear();
            if human {
                eprintln!("{p} ...");
            }
        };
        let r = demo::run(plan, &phase, progress.clone()).await;
        ticker.stop();
        r
    })?;
    if args.out.json() {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        if std::io::stdout().is_terminal() {
            println!();
        }
        print!("{}", demo::table(&report));
        println!();
        println!("{}", report.verdict);
    }
    args.out.write_report(|| report.page())?;
    let max = args.out.max_error_rate_or(DEFAULT_MAX_ERROR_RATE);
    for (name, p) in report.scenarios() {
        let causes = Causes {
            counts: p.failure_causes.clone(),
            samples: Vec::new(),
        };
        check_error_rate(
            &format!("probes of `{name}`"),
            p.failed() as u64,
            p.ended() as u64,
            max,
            &causes,
        )
        .map_err(|e| RunFailed(e.to_string()))?;
    }
    Ok(())
}
