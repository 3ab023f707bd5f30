//! Fidelity: the official `openai` and `anthropic` Python SDKs parse every shape the mock
//! produces (tests/python/sdk_shapes.py, run against an in-process mock).
//!
//! Needs a Python with both SDKs: `$SLUICE_PYTHON`, else `.venv/bin/python` at the workspace
//! root (`.ci/run` creates it). Without one the test is skipped with a message, except under CI
//! (`CI` set), where a missing SDK is a failure.

use std::process::Command;

use sluice_mock::{MockConfig, MockServer};

#[path = "mock/python.rs"]
mod python;

use python::{python_or_skip, workspace_root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_parse_every_shape() {
    let Some(py) = python_or_skip() else {
        return;
    };
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let script = workspace_root().join("tests/python/sdk_shapes.py");
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
