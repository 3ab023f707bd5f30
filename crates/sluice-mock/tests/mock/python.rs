//! Finding the Python that has the official SDKs, shared by the SDK fidelity tests of the mock
//! and of the gateway.

use std::path::PathBuf;

/// The workspace root (two levels above a crate's manifest).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `$SLUICE_PYTHON`, else `.venv/bin/python` at the workspace root.
pub fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = workspace_root().join(".venv/bin/python");
    venv.exists().then_some(venv)
}

/// The Python with the SDKs. The tests that call this are `#[ignore]`d when the crate was
/// built without one (see tests/build/test_env.rs): getting here without one means it was
/// removed since, or the ignored tests were asked for, so the test fails, saying what to do.
pub fn sdk_python() -> PathBuf {
    python().unwrap_or_else(|| {
        panic!(
            "no Python with the openai/anthropic SDKs: run `python3 -m venv .venv && \
             .venv/bin/pip install -r tests/python/requirements.txt`, or set SLUICE_PYTHON"
        )
    })
}
