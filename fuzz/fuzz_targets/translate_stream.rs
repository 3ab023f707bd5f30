//! Arbitrary upstream bytes, arbitrarily chunked, through every stream translator (each client
//! op against each upstream, with and without usage, text tracking and continuation): it must
//! not panic, a translating translator must emit complete events whose data is JSON (or
//! `[DONE]`) following the client's protocol, and a passthrough must emit the upstream's own
//! events.
//!
//! Run: `cargo fuzz run translate_stream --sanitizer none` (from the repository root; see
//! `fuzz/README.md`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/sluice-providers/tests/stream_fuzz_check/mod.rs"]
mod stream_fuzz_check;

fuzz_target!(|data: &[u8]| stream_fuzz_check::check(data));
