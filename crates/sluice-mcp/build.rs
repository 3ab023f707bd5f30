//! Marks the tests that need the official MCP Python SDK ignored (with the reason) when there
//! is no Python with it; see tests/build/test_env.rs. Under `CI=true` they always run.

#[path = "../../tests/build/test_env.rs"]
mod test_env;

fn main() {
    let python = test_env::python();
    let has = python
        .as_deref()
        .is_some_and(|p| test_env::python_has(p, &["mcp"]));
    test_env::cfg_when_missing("no_python_mcp", !has);
}
