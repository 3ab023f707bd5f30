//! Arbitrary bytes, arbitrarily chunked, through the AWS event-stream decoder (Bedrock's stream
//! framing) and the Bedrock stream translator: neither may panic; the decoder must give the same
//! messages and error however the bytes are chunked, hold at most one capped message plus a
//! chunk, and return messages that re-encode to exactly their bytes.
//!
//! Run: `cargo fuzz run eventstream --sanitizer none` (from the repository root; see
//! `fuzz/README.md`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/sluice-providers/tests/eventstream_fuzz_check/mod.rs"]
mod eventstream_fuzz_check;

fuzz_target!(|data: &[u8]| eventstream_fuzz_check::check(data));
