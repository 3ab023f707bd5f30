//! Fidelity: the official `openai`, `anthropic` and `google-genai` Python SDKs parse every
//! shape the mock produces (tests/python/sdk_shapes.py and tests/python/gemini_shapes.py, run
//! against an in-process mock).
//!
//! Needs a Python with the SDKs: `$SLUICE_PYTHON`, else `.venv/bin/python` at the workspace
//! root (`.ci/run` creates it). Without one the tests are skipped with a message, except under
//! CI (`CI` set), where a missing SDK is a failure.

use std::path::PathBuf;
use std::process::Command;

use sluice_mock::{MockConfig, MockServer};

#[path = "mock/python.rs"]
mod python;

use python::{python_or_skip, workspace_root};

/// Runs `script` against a fresh mock and asserts every check in it passed.
async fn run_script(py: PathBuf, script: &str) {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let script = workspace_root().join(script);
    let url = mock.url();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py)
            .arg(script)
            .arg(url)
            .output()
            .expect("cannot run python")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "SDK fidelity failures:\n{stdout}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_parse_every_shape() {
    let Some(py) = python_or_skip() else {
        return;
    };
    run_script(py, "tests/python/sdk_shapes.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_gemini_sdk_parses_every_shape() {
    let Some(py) = python_or_skip() else {
        return;
    };
    // A venv made before google-genai joined the requirements lacks it: say so, not fail.
    let has_genai = Command::new(&py)
        .args(["-c", "import google.genai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_genai {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must provide google-genai (tests/python/requirements.txt)"
        );
        eprintln!(
            "SKIPPED: the Python at {} has no google-genai; run \
             `.venv/bin/pip install -r tests/python/requirements.txt`",
            py.display()
        );
        return;
    }
    run_script(py, "tests/python/gemini_shapes.py").await;
}
