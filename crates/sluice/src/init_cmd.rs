//! `sluice init --provider openai|anthropic|gemini|vllm`: a commented starter config that
//! `sluice check-config` accepts, and beside it the JSON Schema its `#:schema` line names.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

/// The providers `init` has a starter config for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Provider {
    /// OpenAI (api.openai.com), key in OPENAI_API_KEY.
    Openai,
    /// Anthropic (api.anthropic.com), key in ANTHROPIC_API_KEY.
    Anthropic,
    /// Google Gemini through its OpenAI-compatible API, key in GEMINI_API_KEY.
    Gemini,
    /// A self-hosted vLLM server (OpenAI-compatible, HTTP/1.1).
    Vllm,
}

impl Provider {
    /// The starter config's text.
    pub fn template(self) -> &'static str {
        match self {
            Provider::Openai => include_str!("init/openai.toml"),
            Provider::Anthropic => include_str!("init/anthropic.toml"),
            Provider::Gemini => include_str!("init/gemini.toml"),
            Provider::Vllm => include_str!("init/vllm.toml"),
        }
    }

    /// The variable holding the key, if the provider needs one.
    fn key_var(self) -> Option<&'static str> {
        match self {
            Provider::Openai => Some("OPENAI_API_KEY"),
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
            Provider::Gemini => Some("GEMINI_API_KEY"),
            Provider::Vllm => None,
        }
    }
}

/// Options of `sluice init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Which provider the config routes to.
    #[arg(long, value_enum)]
    provider: Provider,
    /// Where to write it (and `sluice.schema.json` beside it, which its first line names);
    /// `-` prints the config alone (`sluice config schema` prints the schema).
    #[arg(long, short = 'o', default_value = "sluice.toml", value_name = "FILE")]
    output: PathBuf,
    /// Replace the file if it exists.
    #[arg(long)]
    force: bool,
}

/// Writes the starter config and says what to do next.
pub fn run(args: InitArgs) -> anyhow::Result<()> {
    let text = args.provider.template();
    if args.output.as_os_str() == "-" {
        std::io::stdout()
            .write_all(text.as_bytes())
            .context("cannot write to stdout")?;
        return Ok(());
    }
    let path = &args.output;
    let mut open = std::fs::OpenOptions::new();
    open.write(true);
    if args.force {
        open.create(true).truncate(true);
    } else {
        open.create_new(true);
    }
    let mut f = open.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!("{} exists; pass --force to replace it", path.display())
        } else {
            anyhow::anyhow!("cannot write {}: {e}", path.display())
        }
    })?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}", path.display());
    // The `#:schema ./sluice.schema.json` line of the config points here. Generated, so it is
    // replaced by this binary's version.
    let schema = path
        .parent()
        .unwrap_or(std::path::Path::new(""))
        .join("sluice.schema.json");
    std::fs::write(&schema, sluice_config::json_schema_text())
        .with_context(|| format!("cannot write {}", schema.display()))?;
    println!(
        "wrote {} (editors complete and check the config with it)",
        schema.display()
    );
    if let Some(var) = args.provider.key_var() {
        println!("next: export {var}=...   (the gateway's key; never written in the file)");
    }
    println!(
        "then: sluice check-config {0} && sluice serve {0}",
        path.display()
    );
    println!("dashboard: http://127.0.0.1:9901/admin/");
    Ok(())
}
