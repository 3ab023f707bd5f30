//! `sluice serve` and `sluice check-config`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sluice::Server;
use sluice_gateway::config::{Config, EnvMode};
use sluice_gateway::{ConfigSource, Overrides, ReloadHandle};

/// Log line format.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The config file, given either way: `sluice serve sluice.toml` or
/// `sluice serve --config sluice.toml` (the same for `check-config`).
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct ConfigFile {
    /// The TOML config file.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// The TOML config file (the same as giving it without the flag).
    #[arg(long = "config", short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
}

impl ConfigFile {
    fn path(&self) -> &Path {
        // clap's group makes exactly one of them present.
        self.file
            .as_deref()
            .or(self.config.as_deref())
            .unwrap_or(Path::new("sluice.toml"))
    }
}

/// Options of `sluice serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    config: ConfigFile,
    /// Listen here instead of `server.listen`. With port 0 the first stdout line,
    /// `listening on IP:PORT`, names the port chosen.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Serve the admin plane here instead of `server.admin_listen` (a non-loopback address
    /// needs `server.admin_token`). The second stdout line, `admin on IP:PORT`, names it.
    #[arg(long, value_name = "ADDR")]
    admin_listen: Option<SocketAddr>,
    /// Log format of the access log and the operational log, instead of `server.log_format`
    /// (default text). The operational log's filter is RUST_LOG, else `server.log_level`.
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// Reload the config when the file changes (polled every second; applied once the
    /// change has settled, refused and logged if invalid). SIGHUP and `POST /admin/reload`
    /// reload it with or without this.
    #[arg(long)]
    watch: bool,
}

/// Options of `sluice check-config`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    config: ConfigFile,
    /// Validate without the environment (e.g. in CI, without the secrets): an unset `${VAR}`
    /// or `auth.env` variable is a warning instead of an error.
    #[arg(long)]
    skip_env: bool,
}

/// Validates a config file exactly as `serve` loads it (TLS files included): exit 0 with
/// warnings on stderr, or the line, field path and reason on stderr and exit 1.
pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let file = args.config.path();
    let mode = if args.skip_env {
        EnvMode::Skip
    } else {
        EnvMode::Required
    };
    let checked = Config::check_file(file, mode)
        .with_context(|| format!("{} is not a valid config", file.display()))?;
    for w in &checked.warnings {
        eprintln!("warning: {}: {w}", file.display());
    }
    let cfg = &checked.config;
    println!(
        "{}: ok ({} upstream(s), {} route(s), listen {}{})",
        file.display(),
        cfg.upstreams.len(),
        cfg.routes.len(),
        cfg.server.listen,
        match checked.warnings.len() {
            0 => String::new(),
            1 => ", 1 warning".to_string(),
            n => format!(", {n} warnings"),
        }
    );
    Ok(())
}

/// The operational log (warnings, errors, lifecycle), on stderr; the access log is apart
/// (`server.access_log`). RUST_LOG overrides `server.log_level`.
fn init_logs(format: LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
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
    let file = args.config.path();
    // Read once: what runs is what `--watch` compares the file with.
    let text = Config::read_file(file)
        .and_then(|text| {
            let checked = Config::check_toml(&text, &|k| std::env::var(k).ok(), EnvMode::Required)?;
            Ok((text, checked))
        })
        .with_context(|| format!("{} is not a valid config", file.display()));
    let (text, checked) = text?;
    let format = args
        .log_format
        .unwrap_or(match checked.config.server.log_format {
            sluice_gateway::access_log::LogFormat::Text => LogFormat::Text,
            sluice_gateway::access_log::LogFormat::Json => LogFormat::Json,
        });
    init_logs(format, &checked.config.server.log_level);
    for w in &checked.warnings {
        tracing::warn!(config = %file.display(), "{w}");
    }
    let mut cfg = checked.config;
    // The command line wins over the file, at startup and at every reload.
    let overrides = Overrides {
        listen: args.listen,
        admin_listen: args.admin_listen,
        log_format: args.log_format.map(|f| match f {
            LogFormat::Text => sluice_gateway::access_log::LogFormat::Text,
            LogFormat::Json => sluice_gateway::access_log::LogFormat::Json,
        }),
    };
    overrides.apply(&mut cfg);
    let source = ConfigSource {
        path: file.to_path_buf(),
        overrides,
        text: Some(text),
    };
    // Client connections on threads of their own when `server.workers` asks for them;
    // otherwise everything on tokio's multi-threaded runtime.
    let workers = match cfg.server.workers {
        0 => None,
        n => {
            tracing::info!(
                workers = n,
                "client connections are served on {n} worker threads"
            );
            Some(std::sync::Arc::new(
                sluice_gateway::workers::Workers::start(n)
                    .context("cannot start the worker threads")?,
            ))
        }
    };
    let rt = if workers.is_some() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    }
    .context("cannot start the tokio runtime")?;
    let res = rt.block_on(async {
        // Installed before the first line is printed: whoever reads it may signal at once, and
        // an uninstalled SIGHUP would end the process.
        let signals = Signals::install();
        let mut gateway = match &workers {
            Some(w) => Server::start_on_workers(cfg, Some(source), w.clone()).await?,
            None => Server::start_with_source(cfg, source).await?,
        };
        if args.watch {
            gateway.watch_config(WATCH_EVERY);
        }
        println!("listening on {}", gateway.addr());
        // A reader that only wanted the first line may have gone: that is no reason to stop.
        {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "admin on {}", gateway.admin_addr()).and_then(|()| out.flush());
        }
        let stop = gateway.stop_token();
        let reload = gateway.reload_handle();
        tokio::spawn(async move {
            signals.wait(reload).await;
            stop.cancel();
        });
        gateway.wait().await;
        Ok(())
    });
    // The worker threads first: their connections are gone, and what they still hold (upstream
    // connections they opened) may be registered with the main runtime.
    drop(workers);
    drop(rt);
    res
}

/// How often `--watch` looks at the config file.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The signals `serve` handles: SIGTERM and SIGINT stop it gracefully; SIGHUP reloads the
/// config (`systemctl reload` sends it).
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                term: signal(SignalKind::terminate()).ok(),
                hup: signal(SignalKind::hangup()).ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// Until SIGTERM or SIGINT; each SIGHUP reloads the config (the outcome is logged).
    async fn wait(mut self, reload: ReloadHandle) {
        #[cfg(unix)]
        loop {
            tokio::select! {
                Some(()) = async { self.term.as_mut()?.recv().await } => break,
                _ = tokio::signal::ctrl_c() => break,
                Some(()) = async { self.hup.as_mut()?.recv().await } => {
                    // Logged and counted by the gateway, whatever the outcome.
                    let _ = reload.reload().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = reload;
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
