//! `sluice bench`: load scenarios against a gateway or the mock.

use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use sluice_bench::{stream, StreamOpts, StreamReport, Summary};
use sluice_upstream::Protocol;

/// `sluice bench` scenarios.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// N concurrent streaming requests: time to first byte and first event, event gaps,
    /// completions, and (with --close-after-events and --mock-stats) disconnect → cancel latency.
    Stream(StreamArgs),
}

/// Options of `sluice bench stream`.
#[derive(Debug, clap::Args)]
pub struct StreamArgs {
    /// Full URL of the streaming endpoint.
    #[arg(long, default_value = "http://127.0.0.1:8080/v1/chat/completions")]
    url: http::Uri,
    /// Protocol to the target: http1, h2c, h2, auto.
    #[arg(long, default_value = "http1")]
    protocol: String,
    /// Streams open at once (HTTP/1.1: one connection each).
    #[arg(long, short = 'c', default_value_t = 100)]
    concurrency: usize,
    /// Streams in all.
    #[arg(long, short = 'n', default_value_t = 1000)]
    requests: usize,
    /// Spread the first streams' starts over this many milliseconds.
    #[arg(long, default_value_t = 1000)]
    ramp_ms: u64,
    /// Request body.
    #[arg(
        long,
        default_value = r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#
    )]
    body: String,
    /// Extra header, `name: value` (repeatable), e.g. `x-mock: tokens=20, interval_ms=50`.
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// Close each stream after this many events.
    #[arg(long)]
    close_after_events: Option<u64>,
    /// The mock's stats URL (e.g. http://127.0.0.1:9090/__mock/stats) for cancel latency.
    #[arg(long)]
    mock_stats: Option<http::Uri>,
    /// Per-stream budget in seconds.
    #[arg(long, default_value_t = 60)]
    timeout_s: u64,
    /// Stop starting streams after this many seconds.
    #[arg(long, default_value_t = 120)]
    max_duration_s: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn protocol(s: &str) -> anyhow::Result<Protocol> {
    Ok(match s {
        "http1" => Protocol::Http1,
        "h2c" => Protocol::H2c,
        "h2" => Protocol::H2,
        "auto" => Protocol::Auto,
        other => anyhow::bail!("--protocol `{other}` is not one of http1, h2c, h2, auto"),
    })
}

/// Runs a scenario and prints its report.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    let BenchCommand::Stream(a) = cmd;
    let headers = a
        .headers
        .iter()
        .map(|h| {
            let (k, v) = h
                .split_once(':')
                .with_context(|| format!("--header `{h}` is not `name: value`"))?;
            Ok((
                HeaderName::from_bytes(k.trim().as_bytes())
                    .with_context(|| format!("bad header name in `{h}`"))?,
                HeaderValue::from_str(v.trim())
                    .with_context(|| format!("bad header value in `{h}`"))?,
            ))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let opts = StreamOpts {
        url: a.url,
        protocol: protocol(&a.protocol)?,
        concurrency: a.concurrency,
        requests: a.requests,
        ramp: Duration::from_millis(a.ramp_ms),
        body: Bytes::from(a.body),
        headers,
        close_after_events: a.close_after_events,
        timeout: Duration::from_secs(a.timeout_s),
        mock_stats: a.mock_stats,
        max_duration: Duration::from_secs(a.max_duration_s),
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the tokio runtime")?;
    let report = rt.block_on(stream::run(opts))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

fn row(name: &str, s: &Summary) {
    println!(
        "{name:<16} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        s.count, s.p50_ms, s.p90_ms, s.p99_ms, s.p999_ms, s.max_ms
    );
}

fn print_table(r: &StreamReport) {
    println!(
        "streams: {} started, {} completed, {} closed early, {} errors, {} timeouts; {} events ({:.0}/s) in {:.1} s",
        r.started, r.completed, r.closed_early, r.errors, r.timeouts, r.events, r.events_per_s, r.wall_ms / 1000.0
    );
    for e in &r.error_samples {
        println!("  error: {e}");
    }
    println!(
        "{:<16} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "ms", "count", "p50", "p90", "p99", "p99.9", "max"
    );
    row("ttfb", &r.ttfb);
    row("first event", &r.first_event);
    row("event gap", &r.event_gaps);
    if let Some(c) = &r.cancel_latency {
        row("cancel latency", c);
    }
}
