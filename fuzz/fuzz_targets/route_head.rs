//! Arbitrary method, path and body through the gateway's request-head path (endpoint, body
//! probe, route globs): it must not panic, must route a model only to the first route that
//! matches it, and must refuse with a 4xx whose message quotes at most a short prefix.
//!
//! Run: `cargo fuzz run route_head --sanitizer none` (see `fuzz/README.md`).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/sluice-gateway/tests/fuzz_head_check/mod.rs"]
mod fuzz_head_check;

fuzz_target!(|data: &[u8]| {
    static CONFIG: OnceLock<sluice_gateway::config::Config> = OnceLock::new();
    fuzz_head_check::check(CONFIG.get_or_init(fuzz_head_check::config), data)
});
