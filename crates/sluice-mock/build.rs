//! Marks the SDK fidelity tests ignored (with the reason) when there is no Python with the
//! official SDKs; see tests/build/test_env.rs. Under `CI=true` they always run.

#[path = "../../tests/build/test_env.rs"]
mod test_env;

fn main() {
    let python = test_env::python();
    let has = |m: &[&str]| {
        python
            .as_deref()
            .is_some_and(|p| test_env::python_has(p, m))
    };
    test_env::cfg_when_missing("no_python", !has(&["openai", "anthropic"]));
    test_env::cfg_when_missing("no_python_genai", !has(&["google.genai"]));
    test_env::cfg_when_missing("no_python_boto3", !has(&["boto3"]));
}
