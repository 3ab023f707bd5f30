//! The `sluice` command line.
#![forbid(unsafe_code)]

mod mock_cmd;
mod sse_decode;

use clap::{Parser, Subcommand};

/// Sluice: an LLM inference gateway.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the mock inference server (OpenAI and Anthropic shapes, fault injection).
    Mock(mock_cmd::MockArgs),
    /// Server-sent events tools.
    Sse {
        #[command(subcommand)]
        command: sse_decode::SseCommand,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Mock(args) => mock_cmd::run(args),
        Command::Sse { command } => sse_decode::run(command),
    }
}
