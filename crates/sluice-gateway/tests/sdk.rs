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

#[path = "../../sluice-mock/tests/mock/checks.rs"]
mod checks;

use checks::run_checks;
use python::{sdk_python, workspace_root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn official_sdks_through_the_gateway() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    for protocol in ["h2c", "http1"] {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n[[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"{protocol}\"\n[[route]]\nmodels = [\"mock-gpt-4o\", \"*\"]\nupstream = \"mock\"\n",
            mock.url()
        );
        let gw = Gateway::start(Config::from_toml(&text, &|_| None).unwrap())
            .await
            .unwrap();
        // `upstream {protocol}` in the output says which pass failed.
        println!("upstream {protocol}:");
        run_checks(
            "tests/python/sdk_shapes.py",
            vec![format!("http://{}", gw.addr()), mock.url()],
        )
        .await;
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
    run_checks(
        "tests/python/translate_sdk.py",
        vec![format!("http://{}", gw.addr())],
    )
    .await;
}

/// The guide's SDK examples (the `python` blocks of `docs/guide/src/providers.md`) run as
/// written, with the gateway's and the mock's addresses put in: the OpenAI and Anthropic SDKs
/// reach a Gemini upstream through the gateway, and so does `google-genai` (as it came); and the
/// README's and the quick start's OpenAI snippet reach an OpenAI upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn readme_sdk_examples_run() {
    let py = sdk_python();
    let readme =
        std::fs::read_to_string(workspace_root().join("docs/guide/src/providers.md")).unwrap();
    let start = readme
        .find("From the official SDKs")
        .expect("the SDK examples");
    let end = start + readme[start..].find("These three run").expect("their end");
    let mut blocks: Vec<String> = readme[start..end]
        .split("```python\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or("").to_string())
        .collect();
    assert_eq!(blocks.len(), 3, "openai, anthropic, google-genai");
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"gemini\"\nbase_url = \"{}/v1beta\"\nprotocol = \"h2c\"\nprovider = \"gemini\"\n\
         [[route]]\nmodels = [\"gemini-*\"]\nupstream = \"gemini\"\n\
         [[upstream]]\nname = \"openai\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\nprovider = \"openai\"\n\
         [[route]]\nmodels = [\"gpt-*\"]\nupstream = \"openai\"\n",
        mock.url(),
        mock.url()
    );
    let gw = Gateway::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let before = mock.stats().snapshot().requests.len();
    // The README's and the quick start's OpenAI SDK snippet (`gpt-4o`, to an OpenAI upstream).
    for page in ["README.md", "docs/guide/src/quick-start.md"] {
        let text = std::fs::read_to_string(workspace_root().join(page)).unwrap();
        // The OpenAI SDK's examples (the README's MCP client snippet runs in
        // crates/sluice/tests/mcp.rs).
        let snippet: Vec<String> = text
            .split("```python\n")
            .skip(1)
            .map(|b| b.split("```").next().unwrap_or("").to_string())
            .filter(|b| b.contains("from openai import"))
            .collect();
        assert_eq!(snippet.len(), 1, "{page}: one OpenAI SDK example");
        assert!(snippet[0].contains("model=\"gpt-4o\""), "{page}");
        blocks.extend(snippet);
    }
    for block in blocks {
        let code = block
            .replace("http://127.0.0.1:8080", &format!("http://{}", gw.addr()))
            .replace("http://127.0.0.1:9090", &mock.url());
        let py = py.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(py)
                .arg("-c")
                .arg(&code)
                .output()
                .expect("cannot run python")
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && !stdout.trim().is_empty(),
            "{block}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // All three reached the mock as Gemini requests.
    let snap = mock.stats().snapshot();
    let gemini = snap.requests[before..]
        .iter()
        .filter(|r| r.path.starts_with("/v1beta/models/gemini-2.5-flash:"))
        .count();
    assert_eq!(
        gemini,
        3,
        "{:?}",
        snap.requests.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
}

/// Reasoning models through a translating gateway (tests/python/reasoning_sdk.py): the
/// `openai` SDK runs two-turn tool-using conversations with `reasoning_effort` against an
/// Anthropic-speaking and a Gemini 3-speaking upstream (the mock signs its thinking and
/// refuses a next turn whose signed thinking is missing or altered), reading
/// `reasoning_content` and `thinking_blocks`; the `anthropic` SDK with `thinking` against
/// OpenAI- and Gemini-speaking upstreams that reason, reading thinking blocks whole and
/// streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn official_sdks_with_reasoning() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let url = mock.url();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"oa\"\nbase_url = \"{url}/v1\"\nprotocol = \"h2c\"\nprovider = \"openai\"\n\
         [[upstream]]\nname = \"an\"\nbase_url = \"{url}/v1\"\nprotocol = \"h2c\"\nprovider = \"anthropic\"\n\
         [[upstream]]\nname = \"ge\"\nbase_url = \"{url}/v1beta\"\nprotocol = \"h2c\"\nprovider = \"gemini\"\n\
         [[route]]\nmodels = [\"via-openai\"]\nupstream = \"oa\"\nretry = {{ attempts = 1 }}\n\
         [[route]]\nmodels = [\"via-anthropic\"]\nupstream = \"an\"\nretry = {{ attempts = 1 }}\nreasoning_budgets = {{ low = 1500 }}\n\
         [[route]]\nmodels = [\"via-gemini3\"]\ntargets = [{{ upstream = \"ge\", model = \"gemini-3-pro-preview\" }}]\nretry = {{ attempts = 1 }}\n\
         [[route]]\nmodels = [\"via-gemini\"]\ntargets = [{{ upstream = \"ge\", model = \"gemini-2.5-flash\" }}]\nretry = {{ attempts = 1 }}\n"
    );
    let gw = Gateway::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    run_checks(
        "tests/python/reasoning_sdk.py",
        vec![format!("http://{}", gw.addr())],
    )
    .await;
    // The signed thinking reached Anthropic as blocks, the Gemini 3 call with its signature.
    let snap = mock.stats().snapshot();
    let refused = snap
        .requests
        .iter()
        .filter(|r| r.fault.as_deref() == Some("thinking_rejected"))
        .count();
    assert_eq!(
        refused, 6,
        "the three refusals asked for, twice (whole and streamed)"
    );
    // `reasoning_effort: low` reached Anthropic as the route's budget for `low`.
    let budgets: Vec<u64> = snap
        .requests
        .iter()
        .filter(|r| r.path == "/v1/messages")
        .filter_map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).ok())
        .filter_map(|v| {
            v.pointer("/thinking/budget_tokens")
                .and_then(|b| b.as_u64())
        })
        .collect();
    assert!(
        !budgets.is_empty() && budgets.iter().all(|&b| b == 1500),
        "{budgets:?}"
    );
}

/// The OpenAI Responses API to any provider (tests/python/responses_sdk.py): the `openai`
/// SDK's `responses.create` (whole and `stream=True`) and `responses.stream()` against an
/// Anthropic-speaking and Gemini-speaking upstreams through the gateway: text, a two-turn
/// tool call with reasoning on, whose signed thinking goes back to the upstream from the
/// reasoning item's `encrypted_content` (the mock refuses a missing or altered signature
/// with the real API's 400), cut answers and errors; background responses (`background=True`)
/// polled with `responses.retrieve` and streamed with `retrieve(stream=True, starting_after=)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn official_sdk_responses_api_to_any_provider() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let url = mock.url();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[upstream]]\nname = \"an\"\nbase_url = \"{url}/v1\"\nprotocol = \"h2c\"\nprovider = \"anthropic\"\n\
         [[upstream]]\nname = \"ge\"\nbase_url = \"{url}/v1beta\"\nprotocol = \"h2c\"\nprovider = \"gemini\"\n\
         [[route]]\nmodels = [\"via-anthropic\"]\nupstream = \"an\"\nretry = {{ attempts = 1 }}\nreasoning_budgets = {{ low = 1500 }}\n\
         [[route]]\nmodels = [\"via-gemini3\"]\ntargets = [{{ upstream = \"ge\", model = \"gemini-3-pro-preview\" }}]\nretry = {{ attempts = 1 }}\n\
         [[route]]\nmodels = [\"via-gemini\"]\ntargets = [{{ upstream = \"ge\", model = \"gemini-2.5-flash\" }}]\nretry = {{ attempts = 1 }}\n"
    );
    let gw = Gateway::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let stdout = run_checks(
        "tests/python/responses_sdk.py",
        vec![format!("http://{}", gw.addr())],
    )
    .await;
    assert!(stdout.contains("7 passed, 0 failed"), "{stdout}");
    let snap = mock.stats().snapshot();
    // Every request reached the upstreams in their own formats, none as `/responses`.
    assert!(snap
        .requests
        .iter()
        .all(|r| !r.path.ends_with("/responses")));
    // The refusals asked for: missing and altered thinking (Anthropic), a missing thought
    // signature (Gemini 3), each whole and streamed.
    let refused = snap
        .requests
        .iter()
        .filter(|r| r.fault.as_deref() == Some("thinking_rejected"))
        .count();
    assert_eq!(refused, 6, "the three refusals asked for, twice");
    // `reasoning.effort: low` reached Anthropic as the route's budget for `low`.
    let budgets: Vec<u64> = snap
        .requests
        .iter()
        .filter(|r| r.path == "/v1/messages")
        .filter_map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).ok())
        .filter_map(|v| {
            v.pointer("/thinking/budget_tokens")
                .and_then(|b| b.as_u64())
        })
        .collect();
    assert!(
        !budgets.is_empty() && budgets.iter().all(|&b| b == 1500),
        "{budgets:?}"
    );
}

/// Gemini-native clients to any provider (tests/python/genai_sdk.py): the `google-genai`
/// SDK's `generate_content` and `generate_content_stream` through the gateway to Anthropic-
/// and OpenAI-speaking upstreams, a two-turn function call with thinking whose signed
/// thinking goes back to Anthropic in a thought part's `thoughtSignature` (the mock refuses
/// it missing), errors as the SDK's exceptions, and the virtual key as `x-goog-api-key` or
/// `?key=`, which never reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn official_genai_sdk_to_any_provider() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let url = mock.url();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\
         [[key]]\nid = \"genai\"\nhash = \"sha256:0bc7bd12f150dce3eceabdeeab6ea7f4c22a0702c4609f09e23105948f4b3596\"\n\
         [[upstream]]\nname = \"oa\"\nbase_url = \"{url}/v1\"\nprotocol = \"h2c\"\nprovider = \"openai\"\n\
         [[upstream]]\nname = \"an\"\nbase_url = \"{url}/v1\"\nprotocol = \"h2c\"\nprovider = \"anthropic\"\n\
         [[route]]\nmodels = [\"via-openai\"]\nupstream = \"oa\"\nretry = {{ attempts = 1 }}\n\
         [[route]]\nmodels = [\"via-anthropic\"]\nupstream = \"an\"\nretry = {{ attempts = 1 }}\n"
    );
    let gw = Gateway::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let stdout = run_checks(
        "tests/python/genai_sdk.py",
        vec![format!("http://{}", gw.addr())],
    )
    .await;
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
    let snap = mock.stats().snapshot();
    // Translated: Anthropic and OpenAI requests, never Gemini's paths or the client's key.
    assert!(
        snap.requests
            .iter()
            .all(|r| r.path == "/v1/messages" || r.path == "/v1/chat/completions"),
        "{:?}",
        snap.requests.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    let refused = snap
        .requests
        .iter()
        .filter(|r| r.fault.as_deref() == Some("thinking_rejected"))
        .count();
    assert_eq!(
        refused, 2,
        "the missing signature refused, whole and streamed"
    );
}

/// The SDKs through a route with a response cache: a repeated stream (OpenAI chat with usage,
/// Anthropic messages) and a repeated whole answer come from the cache with the same chunks
/// or events and text, a stored stream is one body to a whole request, and a stored message
/// and a stored Responses answer events to a stream, all without an upstream request, per
/// the mock's counters (tests/python/cache_sdk.py).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
async fn official_sdks_replay_from_the_cache() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n[[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\ncache = {{ ttl = \"1h\" }}\n",
        mock.url()
    );
    let gw = Gateway::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let stdout = run_checks(
        "tests/python/cache_sdk.py",
        vec![format!("http://{}", gw.addr()), mock.url()],
    )
    .await;
    assert!(stdout.contains("7 passed, 0 failed"), "{stdout}");
}
