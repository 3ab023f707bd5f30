//! `sluice mock`: the mock inference server as a command.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use sluice_mock::{Behavior, CloudConfig, MockConfig, MockServer};

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
    /// How many bytes of each request body `/__mock/stats` keeps.
    #[arg(long, value_name = "BYTES", default_value_t = sluice_mock::DEFAULT_MAX_RECORDED_BODY)]
    max_recorded_body: usize,
    /// HTTP/1.1: close a kept-alive connection idle this long (a server's keep-alive timeout).
    #[arg(long, value_name = "MS")]
    h1_idle_timeout_ms: Option<u64>,
    /// HTTP/1.1: when a request arrives on a kept-alive connection idle at least this long,
    /// close the connection without processing or answering it (the stale keep-alive race).
    #[arg(long, value_name = "MS")]
    h1_stale_close_ms: Option<u64>,
    /// Close those stale connections with TCP RST instead of FIN.
    #[arg(long, requires = "h1_stale_close_ms")]
    h1_stale_close_rst: bool,
    /// How long the Vertex AI and Entra ID access tokens it issues live, in milliseconds
    /// (rounded up to whole seconds; default one hour): a gateway's token refresh is seen in
    /// seconds with e.g. 2000.
    #[arg(long, value_name = "MS")]
    token_ttl_ms: Option<u64>,
    /// The only region Bedrock signatures may be scoped to (default: any).
    #[arg(long, value_name = "REGION")]
    aws_region: Option<String>,
}

impl MockArgs {
    fn config(&self) -> anyhow::Result<MockConfig> {
        Ok(MockConfig {
            listen: self.listen,
            tls: self.tls,
            h2_max_concurrent_streams: self.h2_max_concurrent_streams,
            defaults: self.behavior()?,
            max_records: self.max_records,
            max_recorded_body: self.max_recorded_body,
            h1_idle_timeout: self.h1_idle_timeout_ms.map(Duration::from_millis),
            h1_stale_close: self.h1_stale_close_ms.map(Duration::from_millis),
            h1_stale_close_rst: self.h1_stale_close_rst,
        })
    }

    /// The cloud side: the built-in test credentials, with the token lifetime and region
    /// asked for.
    fn cloud(&self) -> CloudConfig {
        let mut cloud = CloudConfig::default();
        if let Some(ms) = self.token_ttl_ms {
            cloud.token_ttl = Duration::from_millis(ms.max(1));
        }
        cloud.aws_region = self.aws_region.clone();
        cloud
    }

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
    let cfg = args.config()?;
    let rt = tokio::runtime::Runtime::new().context("cannot start the tokio runtime")?;
    rt.block_on(async {
        let server = MockServer::start_with(cfg, args.cloud()).await?;
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        mock: MockArgs,
    }

    fn config(args: &[&str]) -> MockConfig {
        let cli = Cli::try_parse_from(std::iter::once("mock").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{e}"));
        cli.mock.config().unwrap()
    }

    #[test]
    fn keep_alive_flags_reach_the_config() {
        let c = config(&[
            "--h1-idle-timeout-ms",
            "5000",
            "--h1-stale-close-ms",
            "2000",
            "--h1-stale-close-rst",
            "--max-recorded-body",
            "10",
        ]);
        assert_eq!(c.h1_idle_timeout, Some(Duration::from_millis(5000)));
        assert_eq!(c.h1_stale_close, Some(Duration::from_millis(2000)));
        assert!(c.h1_stale_close_rst);
        assert_eq!(c.max_recorded_body, 10);
        let d = config(&[]);
        assert_eq!((d.h1_idle_timeout, d.h1_stale_close), (None, None));
        assert!(Cli::try_parse_from(["mock", "--h1-stale-close-rst"]).is_err());
    }

    #[test]
    fn cloud_flags_reach_the_cloud_config() {
        let cli = Cli::try_parse_from([
            "mock",
            "--token-ttl-ms",
            "2000",
            "--aws-region",
            "eu-west-3",
        ])
        .unwrap();
        let c = cli.mock.cloud();
        assert_eq!(c.token_ttl, Duration::from_secs(2));
        assert_eq!(c.aws_region.as_deref(), Some("eu-west-3"));
        let d = Cli::try_parse_from(["mock"]).unwrap().mock.cloud();
        assert_eq!(d.token_ttl, sluice_mock::DEFAULT_TOKEN_TTL);
        assert_eq!(d.aws_region, None);
    }

    #[test]
    fn new_knobs_work_as_defaults() {
        let c = config(&[
            "--defaults",
            "fail_first=2, fail_with=overloaded, prefill=reject",
        ]);
        assert_eq!(c.defaults.fail_first, Some(2));
        assert_eq!(
            c.defaults.fail_with,
            sluice_mock::FailWith::Error(sluice_mock::ErrorKind::Overloaded)
        );
        assert_eq!(c.defaults.prefill, sluice_mock::PrefillMode::Reject);
    }
}
