//! Arbitrary text through the config loader (parse, `${VAR}` expansion, validation) with
//! `--skip-env`: it must not panic, and a refusal names a line within the text.
//!
//! Run: `cargo fuzz run config --sanitizer none` (see `fuzz/README.md`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_config::{Config, EnvMode};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = Config::check_toml(text, &|_| None, EnvMode::Skip) {
        if let Some(line) = e.line {
            assert!(line >= 1 && line <= text.lines().count().max(1) + 1, "{e}");
        }
    }
});
