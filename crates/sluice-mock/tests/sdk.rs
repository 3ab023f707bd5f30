//! Fidelity: the official `openai`, `anthropic` and `google-genai` Python SDKs parse every
//! shape the mock produces (tests/python/sdk_shapes.py and tests/python/gemini_shapes.py, run
//! against an in-process mock), and AWS's `boto3` signs Bedrock requests the mock verifies and
//! parses what it answers (tests/python/bedrock_sigv4.py).
//!
//! Needs a Python with the SDKs: `$SLUICE_PYTHON`, else `.venv/bin/python` at the workspace
//! root (`.ci/run` creates it). Without one (when the crate was built; see build.rs) the tests
//! are ignored with the reason, except under `CI=true`, where they run and fail.

use sluice_mock::{MockConfig, MockServer};

#[path = "mock/python.rs"]
mod python;

#[path = "mock/checks.rs"]
mod checks;

use checks::run_checks;

/// Runs `script` against a fresh mock and asserts every check in it passed.
async fn run_script(script: &str) {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    run_checks(script, vec![mock.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn official_sdks_parse_every_shape() {
    run_script("tests/python/sdk_shapes.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python_boto3,
    ignore = "no Python with boto3: create .venv (see README)"
)]
async fn botocore_signs_what_the_mock_verifies() {
    run_script("tests/python/bedrock_sigv4.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python_genai,
    ignore = "no Python with the google-genai SDK: create .venv (see README)"
)]
async fn official_gemini_sdk_parses_every_shape() {
    run_script("tests/python/gemini_shapes.py").await;
}
