//! The official `openai` and `anthropic` Python SDKs through the gateway: every shape streams
//! and parses, errors map to the SDKs' exceptions, and closing a stream early cancels the
//! upstream (tests/python/sdk_shapes.py, with the mock behind a real gateway).
//!
//! Needs a Python with both SDKs: `$SLUICE_PYTHON`, else `.venv/bin/python` at the workspace
//! root (`.ci/run` creates it). Without one (when the crate was built; see build.rs) the test
//! is ignored with the reason, except under `CI=true`, where it runs and fails.

use std::process::Command;

use sluice_gateway::config::Config;
use sluice_gateway::Gateway;
use sluice_mock::{MockConfig, MockServer};

#[path = "../../sluice-mock/tests/mock/python.rs"]
mod python;

use python::{sdk_python, workspace_root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn official_sdks_through_the_gateway() {
    let py = sdk_python();
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    for protocol in ["h2c", "http1"] {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n[[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"{protocol}\"\n[[route]]\nmodels = [\"mock-gpt-4o\", \"*\"]\nupstream = \"mock\"\n",
            mock.url()
        );
        let gw = Gateway::start(Config::from_toml(&text, &|_| None).unwrap())
            .await
            .unwrap();
        let script = workspace_root().join("tests/python/sdk_shapes.py");
        let (base, mock_url, py) = (format!("http://{}", gw.addr()), mock.url(), py.clone());
        let out = tokio::task::spawn_blocking(move || {
            Command::new(py)
                .arg(script)
                .arg(base)
                .arg(mock_url)
                .output()
                .expect("cannot run python")
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success(),
            "upstream {protocol}: SDK failures:\n{stdout}"
        );
        assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    }
}

/// The SDKs through a translating gateway: an OpenAI client reaches Anthropic- and
/// Gemini-speaking upstreams, an Anthropic client OpenAI- and Gemini-speaking ones (the mock
/// speaks each format), with tools, a tool-result round trip, usage and error classes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn official_sdks_through_translation() {
    let py = sdk_python();
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let url = mock.url();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"oa\"\nbase_url = \"{url}/v1\"\nprotocol = \"h2c\"\nprovider = \"openai\"\n\
         [[upstream]]\nname = \"an\"\nbase_url = \"{url}/v1\"\nprotocol = \"h2c\"\nprovider = \"anthropic\"\n\
         [[upstream]]\nname = \"ge\"\nbase_url = \"{url}/v1beta\"\nprotocol = \"h2c\"\nprovider = \"gemini\"\n\
         [[route]]\nmodels = [\"via-openai\"]\nupstream = \"oa\"\nretry = {{ attempts = 1 }}\n\
         [[route]]\nmodels = [\"via-anthropic\"]\nupstream = \"an\"\nretry = {{ attempts = 1 }}\n\
         [[route]]\nmodels = [\"via-gemini\"]\nupstream = \"ge\"\nretry = {{ attempts = 1 }}\n"
    );
    let gw = Gateway::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let script = workspace_root().join("tests/python/translate_sdk.py");
    let base = format!("http://{}", gw.addr());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py)
            .arg(script)
            .arg(base)
            .output()
            .expect("cannot run python")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "SDK failures:\n{stdout}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}
