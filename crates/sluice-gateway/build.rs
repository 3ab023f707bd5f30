//! Marks tests ignored (with the reason) when a tool they need is missing on this machine:
//! `cfg(no_python)` for the SDK tests (no Python with the official SDKs; see
//! tests/build/test_env.rs). Under `CI=true` it is never set: there a missing tool fails the
//! test.

#[path = "../../tests/build/test_env.rs"]
mod test_env;

fn main() {
    let python = test_env::python();
    let has = python
        .as_deref()
        .is_some_and(|p| test_env::python_has(p, &["openai", "anthropic"]));
    test_env::cfg_when_missing("no_python", !has);
}
