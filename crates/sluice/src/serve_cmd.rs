//! `sluice serve` and `sluice check-config`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use sluice_gateway::config::Config;
use sluice_gateway::Gateway;

/// Log line format.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Options of `sluice serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The TOML config file.
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
    /// Listen here instead of `server.listen`. With port 0 the first stdout line,
    /// `listening on IP:PORT`, names the port chosen.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Log format (the filter comes from RUST_LOG, default `info`).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// Options of `sluice check-config`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The TOML config file.
    file: PathBuf,
}

/// Validates a config file: exit 0, or the field path and the reason on stderr.
pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let cfg = Config::load(&args.file)
        .with_context(|| format!("{} is not a valid config", args.file.display()))?;
    println!(
        "{}: ok ({} upstream(s), {} route(s), listen {})",
        args.file.display(),
        cfg.upstreams.len(),
        cfg.routes.len(),
        cfg.server.listen
    );
    Ok(())
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => b.init(),
        LogFormat::Json => b.json().init(),
    }
}

/// Runs the gateway until SIGINT or SIGTERM, then shuts down gracefully.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logs(args.log_format);
    let mut cfg = Config::load(&args.config)
        .with_context(|| format!("{} is not a valid config", args.config.display()))?;
    if let Some(listen) = args.listen {
        cfg.server.listen = listen;
    }
    let rt = tokio::runtime::Runtime::new().context("cannot start the tokio runtime")?;
    rt.block_on(async {
        let gateway = Gateway::start(cfg).await?;
        println!("listening on {}", gateway.addr());
        let stop = gateway.stop_token();
        tokio::spawn(async move {
            wait_for_signal().await;
            stop.cancel();
        });
        gateway.wait().await;
        Ok(())
    })
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
