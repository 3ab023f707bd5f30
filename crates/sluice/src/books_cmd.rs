//! `sluice usage` and `sluice prices`: the books from the command line. `usage` runs the query
//! `GET /admin/usage` runs, on the ledger the config points at (the same sink, resolved the
//! same way: a relative SQLite path from the config file's directory); `prices` shows what
//! prices a model.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use sluice_config::{Config, EnvMode};

/// `sluice usage`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    /// The gateway's config file (its `[ledger]` says where the records are).
    #[arg(long, short)]
    config: PathBuf,
    /// Start: RFC 3339 (`2026-12-01T00:00:00Z`), a date (`2026-12-01`) or Unix seconds.
    /// Default: 24 hours before `--to`.
    #[arg(long)]
    from: Option<String>,
    /// End (exclusive). Default: now.
    #[arg(long)]
    to: Option<String>,
    /// Rows per key, team, model, route or upstream.
    #[arg(long, default_value = "model")]
    group_by: String,
    /// Rows per hour or day too.
    #[arg(long)]
    bucket: Option<String>,
    /// A table for a terminal, or JSON or CSV.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    format: Output,
}

/// How `sluice usage` prints.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Output {
    Table,
    Json,
    Csv,
}

/// `sluice prices`.
#[derive(Debug, Args)]
pub struct PricesArgs {
    /// Only the prices that apply to this model (per provider).
    model: Option<String>,
    /// A config whose `[[price]]` entries come first.
    #[arg(long, short)]
    config: Option<PathBuf>,
}

pub fn usage(args: UsageArgs) -> anyhow::Result<()> {
    let checked = Config::check_file(&args.config, EnvMode::Required)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))?;
    let ledger = checked.config.ledger.clone().unwrap_or_default();
    let dir = args
        .config
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let mut qs = vec![format!("group_by={}", args.group_by)];
    for (k, v) in [
        ("from", &args.from),
        ("to", &args.to),
        ("bucket", &args.bucket),
    ] {
        if let Some(v) = v {
            qs.push(format!("{k}={v}"));
        }
    }
    let (query, _) =
        sluice_ledger::UsageQuery::from_query_string(&qs.join("&"), sluice_ledger::now_us())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    let rows = rt.block_on(async {
        let sink = sluice_ledger::Sink::open(&ledger.sink, &dir, None)
            .await
            .map_err(|e| anyhow::anyhow!("the ledger cannot be opened: {e}"))?;
        sink.usage(&query)
            .await
            .map_err(|e| anyhow::anyhow!("the usage query failed: {e}"))
    })?;
    let text = match args.format {
        Output::Table => sluice_ledger::query::render_table(&query, &rows),
        Output::Json => sluice_ledger::query::render_json(&query, &rows),
        Output::Csv => sluice_ledger::query::render_csv(&rows),
    };
    print!("{text}");
    if !text.ends_with('\n') {
        println!();
    }
    Ok(())
}

pub fn prices(args: PricesArgs) -> anyhow::Result<()> {
    let catalog = sluice_ledger::Catalog::shipped();
    if let Some(path) = &args.config {
        let checked = Config::check_file(path, EnvMode::Skip)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let configured: Vec<_> = checked
            .config
            .prices
            .iter()
            .filter(|p| {
                args.model
                    .as_deref()
                    .is_none_or(|m| p.models.iter().any(|g| sluice_config::glob_match(g, m)))
            })
            .collect();
        if !configured.is_empty() {
            println!(
                "From {} ([[price]], first match wins, any provider):",
                path.display()
            );
            for p in configured {
                let r = &p.rates;
                let usd = |r: Option<sluice_ledger::Rate>| {
                    r.map_or("-".to_string(), |r| format!("{:.6}", r.0 as f64 / 1e6))
                };
                println!(
                    "  {:<40} input {} output {} cache_read {} cache_write {} reasoning {}",
                    p.models.join(","),
                    usd(r.input),
                    usd(r.output),
                    usd(r.cache_read),
                    usd(r.cache_write_5m),
                    usd(r.reasoning)
                );
            }
            println!();
        }
    }
    let entries = catalog.applicable(args.model.as_deref());
    if entries.is_empty() {
        if let Some(m) = &args.model {
            println!("No shipped price applies to `{m}`: its requests are recorded as unpriced, never as free; add a [[price]] for it.");
        }
        return Ok(());
    }
    print!("{}", sluice_ledger::render_prices(&entries));
    Ok(())
}
