//! The `sluice` command line.
#![forbid(unsafe_code)]

mod bench_cmd;
mod books_cmd;
mod config_cmd;
mod demo_cmd;
mod init_cmd;
mod mock_cmd;
mod serve_cmd;
mod sse_decode;

use clap::{CommandFactory, Parser, Subcommand};

/// `0.1.0 (git 1a2b3c4d5e6f)`: the release and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("SLUICE_GIT_HASH"),
    ")"
);

/// See the `jemalloc` feature in Cargo.toml: memory after a burst goes back to the OS.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc purges freed pages on allocation activity unless its background thread does it:
/// without it, a quiet gateway kept half a burst's memory (16x its baseline, against 1.5x with
/// it, in bench/burst_rss.sh). `MALLOC_CONF`-style settings in `_RJEM_MALLOC_CONF` still apply.
fn tune_allocator() {
    #[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!("warning: jemalloc's background thread could not be started: {e}");
    }
}

/// Sluice: an LLM inference gateway.
#[derive(Debug, Parser)]
#[command(name = "sluice", version = VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(serve_cmd::ServeArgs),
    /// Check a config file: exit 0, or the field path and the reason.
    CheckConfig(serve_cmd::CheckArgs),
    /// The config file's JSON Schema and reference, generated from the config types.
    Config {
        #[command(subcommand)]
        command: config_cmd::ConfigCommand,
    },
    /// Run the mock inference server (OpenAI and Anthropic shapes, fault injection).
    Mock(mock_cmd::MockArgs),
    /// Load scenarios against a gateway or the mock.
    Bench {
        #[command(subcommand)]
        command: bench_cmd::BenchCommand,
    },
    /// The incident in a minute: probes next to long streams on one shared upstream
    /// connection vs on Sluice's lanes, and how fast a client's cancel reaches the upstream.
    Demo(demo_cmd::DemoArgs),
    /// Server-sent events tools.
    Sse {
        #[command(subcommand)]
        command: sse_decode::SseCommand,
    },
    /// Write a commented starter config for a provider.
    Init(init_cmd::InitArgs),
    /// Who spent what: the ledger's totals by key, team, model, route or upstream.
    Usage(books_cmd::UsageArgs),
    /// The prices that apply (the shipped catalog, and a config's `[[price]]`).
    Prices(books_cmd::PricesArgs),
    /// Print a shell completion script: `sluice completions bash > /etc/bash_completion.d/sluice`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> std::process::ExitCode {
    tune_allocator();
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the cause chain on one line, without a backtrace: this is for users.
            eprintln!("error: {e:#}");
            // A bench or demo that ran but failed its checks is told apart from one that
            // could not run.
            if e.downcast_ref::<bench_cmd::RunFailed>().is_some() {
                std::process::ExitCode::from(bench_cmd::EXIT_RUN_FAILED)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve_cmd::serve(args),
        Command::CheckConfig(args) => serve_cmd::check(args),
        Command::Config { command } => config_cmd::run(command),
        Command::Mock(args) => mock_cmd::run(args),
        Command::Sse { command } => sse_decode::run(command),
        Command::Bench { command } => bench_cmd::run(command),
        Command::Demo(args) => demo_cmd::run(args),
        Command::Init(args) => init_cmd::run(args),
        Command::Usage(args) => books_cmd::usage(args),
        Command::Prices(args) => books_cmd::prices(args),
        Command::Completions { shell } => {
            // Into a buffer first: clap_complete panics on a write error (e.g. `| head`).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "sluice", &mut script);
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            match out.write_all(&script).and_then(|()| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(anyhow::anyhow!("cannot write the completion script: {e}"))
                }
                _ => Ok(()),
            }
        }
    }
}
