//! Arbitrary bytes, arbitrarily chunked, through the SSE decoder: it must not panic, must not
//! hold more than `max_event_bytes` of copied bytes, must give the same result however the input
//! is chunked, and its raw spans must reproduce the input.
//!
//! Run: `cargo fuzz run decode --sanitizer none` (from the repository root; see
//! `fuzz/README.md` for the stable-toolchain variant).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/sluice-sse/tests/fuzz_check/mod.rs"]
mod fuzz_check;

fuzz_target!(|data: &[u8]| fuzz_check::check(data));
