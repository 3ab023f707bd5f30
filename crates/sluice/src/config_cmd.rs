//! `sluice config schema` and `sluice config reference`: the JSON Schema of sluice.toml and
//! the configuration reference, both generated from the config types (sluice-config's `raw`
//! types and their doc comments). The committed `sluice.schema.json` and
//! `docs/guide/src/reference.md` are their output; tests fail when they differ.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

/// `sluice config ...`.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Print the JSON Schema of sluice.toml (editors use it through `#:schema` on a config's
    /// first line).
    Schema(OutputArgs),
    /// Print the configuration reference (Markdown): every key, its type, default and meaning.
    Reference(OutputArgs),
}

/// Where the output goes.
#[derive(Debug, clap::Args)]
pub struct OutputArgs {
    /// Write to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Runs `sluice config ...`.
pub fn run(command: ConfigCommand) -> anyhow::Result<()> {
    let (text, output) = match command {
        ConfigCommand::Schema(args) => (sluice_config::json_schema_text(), args.output),
        ConfigCommand::Reference(args) => (sluice_config::reference_markdown(), args.output),
    };
    match output {
        Some(path) => {
            std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
        }
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(anyhow::anyhow!("cannot write to stdout: {e}"))
                }
                _ => Ok(()),
            }
        }
    }
}
