//! Arbitrary bytes as what an MCP client sends the gateway: a JSON-RPC body, 2026-07-28
//! routing headers and envelope, or a session id (from nothing, or the gateway's own altered).
//! Parsing must never panic, and no session id but the one minted, unaltered, is accepted.
//!
//! Run: `cargo fuzz run mcp --sanitizer none` (from the repository root; see `fuzz/README.md`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/sluice-mcp/tests/fuzz_check/mod.rs"]
mod fuzz_check;

fuzz_target!(|data: &[u8]| fuzz_check::check(data));
