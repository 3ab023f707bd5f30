//! `sluice demo`: the probe experiment of seed 000 against in-process gateways, in about a
//! minute (`--quick`: about 15 s).

use std::io::IsTerminal as _;
use std::sync::Arc;

use anyhow::Context as _;
use sluice::demo::{self, DemoPlan};
use sluice_bench::Progress;

use crate::bench_cmd::Ticker;

/// Options of `sluice demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Fewer background streams and shorter phases (about 15 s instead of about a minute).
    #[arg(long)]
    quick: bool,
    /// Print the whole report as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs the demo and prints its table and verdict (or JSON).
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let plan = if args.quick {
        DemoPlan::quick()
    } else {
        DemoPlan::full()
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the tokio runtime")?;
    let progress = Arc::new(Progress::default());
    let human = !args.json;
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
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    if std::io::stdout().is_terminal() {
        println!();
    }
    print!("{}", demo::table(&report));
    println!();
    println!("{}", report.verdict);
    Ok(())
}
