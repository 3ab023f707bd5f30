//! `sluice mock`: the mock inference server as a command.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use sluice_mock::{Behavior, MockConfig, MockServer};

/// Options of `sluice mock`.
#[derive(Debug, clap::Args)]
pub struct MockArgs {
    /// Address to listen on. With port 0 the first stdout line, `listening on IP:PORT`, names
    /// the port chosen.
    #[arg(long, default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
    /// Serve TLS (h2 and http/1.1 by ALPN) with a certificate generated at start.
    #[arg(long)]
    tls: bool,
    /// Write the generated certificate (PEM) here, for clients to trust.
    #[arg(long, requires = "tls", value_name = "PATH")]
    tls_cert_out: Option<PathBuf>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS announced to HTTP/2 clients.
    #[arg(long, value_name = "N")]
    h2_max_concurrent_streams: Option<u32>,
    /// Default behaviour, in the `x-mock` header's syntax, e.g. `tokens=500, interval_ms=20`.
    #[arg(long, value_name = "SPEC", default_value = "")]
    defaults: String,
    /// Default time to first token, in milliseconds.
    #[arg(long, value_name = "MS")]
    ttft_ms: Option<u64>,
    /// Default number of tokens.
    #[arg(long, value_name = "N")]
    tokens: Option<u32>,
    /// Default gap between events, in milliseconds.
    #[arg(long, value_name = "MS")]
    interval_ms: Option<u64>,
    /// Default bytes per token.
    #[arg(long, value_name = "BYTES")]
    token_bytes: Option<u32>,
    /// How many connection and request records `/__mock/stats` keeps.
    #[arg(long, value_name = "N", default_value_t = sluice_mock::DEFAULT_MAX_RECORDS)]
    max_records: usize,
}

impl MockArgs {
    fn behavior(&self) -> anyhow::Result<Behavior> {
        let mut spec = self.defaults.clone();
        let mut add = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                spec.push_str(&format!(",{k}={v}"));
            }
        };
        add("ttft_ms", self.ttft_ms.map(|v| v.to_string()));
        add("tokens", self.tokens.map(|v| v.to_string()));
        add("interval_ms", self.interval_ms.map(|v| v.to_string()));
        add("token_bytes", self.token_bytes.map(|v| v.to_string()));
        Behavior::default()
            .with_spec(&spec)
            .context("invalid default behaviour (--defaults and the knob flags)")
    }
}

/// Runs the mock until the process is interrupted.
pub fn run(args: MockArgs) -> anyhow::Result<()> {
    let cfg = MockConfig {
        listen: args.listen,
        tls: args.tls,
        h2_max_concurrent_streams: args.h2_max_concurrent_streams,
        defaults: args.behavior()?,
        max_records: args.max_records,
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the tokio runtime")?;
    rt.block_on(async {
        let server = MockServer::start(cfg).await?;
        if let (Some(path), Some(pem)) = (&args.tls_cert_out, server.cert_pem()) {
            std::fs::write(path, pem)
                .with_context(|| format!("cannot write the certificate to {}", path.display()))?;
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", server.addr())?;
        out.flush()?;
        drop(out);
        tokio::select! {
            _ = server.wait() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(())
    })
}
