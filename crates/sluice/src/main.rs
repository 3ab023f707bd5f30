//! The `sluice` command line.
#![forbid(unsafe_code)]

use clap::Parser;

/// Sluice: an LLM inference gateway.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
