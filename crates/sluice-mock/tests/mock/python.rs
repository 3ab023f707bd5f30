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

/// `None` when the SDKs are missing outside CI (the caller skips, saying so); under CI a
/// missing SDK is a failure.
pub fn python_or_skip() -> Option<PathBuf> {
    let py = python();
    if py.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must provide the Python SDKs (SLUICE_PYTHON or .venv)"
        );
        eprintln!(
            "SKIPPED: no Python with the openai/anthropic SDKs; run \
             `python3 -m venv .venv && .venv/bin/pip install -r tests/python/requirements.txt`"
        );
    }
    py
}
