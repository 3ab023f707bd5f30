//! Session ids: mint and verify (placeholder, filled in below).
fn main() {}
