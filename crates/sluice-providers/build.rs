//! Marks the SDK stream test ignored (with the reason) when there is no Python with the official
//! SDKs; see tests/build/test_env.rs. Under `CI=true` it always runs.

#[path = "../../tests/build/test_env.rs"]
mod test_env;

fn main() {
    let python = test_env::python();
    let has = python
        .as_deref()
        .is_some_and(|p| test_env::python_has(p, &["openai", "anthropic"]));
    test_env::cfg_when_missing("no_python", !has);
}
