//! Fidelity: every translated fixture stream, read by the official `openai` and `anthropic`
//! Python SDKs' own stream accumulators (tests/stream_sdk.py, fed by an httpx mock transport),
//! gives the message our protocol-checking accumulator gives (content, tool calls and their
//! arguments, stop reason, usage, errors).
//!
//! Needs a Python with both SDKs: `$SLUICE_PYTHON`, else `.venv/bin/python` at the workspace
//! root. Without one (when the crate was built; see build.rs) the test is ignored with the
//! reason, except under `CI=true`, where it runs and fails.

mod stream_support;

use std::process::Command;

use serde_json::{json, Value};
use sluice_providers::Family;
use stream_support::*;

#[path = "../../sluice-mock/tests/mock/python.rs"]
mod python;

#[test]
#[cfg_attr(
    no_python,
    ignore = "no Python with the SDKs: create .venv (see README)"
)]
fn official_sdks_read_every_translated_stream() {
    let py = python::sdk_python();
    let dir = std::env::temp_dir().join(format!("sluice-stream-sdk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cases = Vec::new();
    for name in fixtures() {
        for op in OPS {
            let upstream = provider_of(&name).family();
            if upstream == op.family() {
                continue;
            }
            let r = run(&name, &Opts::new(op, &name).usage(true));
            let client = match op.family() {
                Family::OpenAi => "openai",
                _ => "anthropic",
            };
            let case = format!("{}.{client}", name.trim_end_matches(".sse"));
            std::fs::write(dir.join(format!("{case}.sse")), concat(&r.out)).unwrap();
            cases.push((case, op.family(), r));
        }
    }
    let out = Command::new(&py)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/stream_sdk.py"))
        .arg(&dir)
        .output()
        .expect("cannot run python");
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sdk: Value = serde_json::from_slice(&out.stdout).expect("JSON from stream_sdk.py");
    // 9 fixtures of text and tools (18 pairs) and the 3 with thinking (4 pairs).
    assert_eq!(cases.len(), 22, "every translated pair of every fixture");
    for (case, family, r) in &cases {
        let got = &sdk[case.as_str()];
        assert!(got.is_object(), "{case}: no SDK result");
        match family {
            Family::OpenAi => check_openai(case, got, &openai_message(&r.out)),
            _ => check_anthropic(case, got, &anthropic_message(&r.out)),
        }
    }
    println!(
        "{} translated streams read by the official SDKs",
        cases.len()
    );
}

use std::path::PathBuf;

fn check_openai(case: &str, got: &Value, m: &OpenAiMessage) {
    if let Some(err) = &m.error {
        assert_eq!(got["error"], err["message"], "{case}");
        return;
    }
    assert!(
        got.get("error").is_none(),
        "{case}: the SDK raised {}",
        got["error"]
    );
    assert_eq!(got["id"], m.id.as_str(), "{case}");
    // The role chunk says `"content":""` (whether text follows is not known yet): a tool-only
    // answer reads as "" rather than null.
    assert_eq!(got["content"].as_str().unwrap_or(""), m.content, "{case}");
    let calls: Vec<Value> = m
        .tool_calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "name": name, "arguments": args}))
        .collect();
    assert_eq!(got["tool_calls"], json!(calls), "{case}");
    assert_eq!(got["finish_reason"], json!(m.finish_reason), "{case}");
    let usage = m.usage.as_ref().expect("usage asked for");
    assert_eq!(
        got["usage"]["prompt_tokens"], usage["prompt_tokens"],
        "{case}"
    );
    assert_eq!(
        got["usage"]["completion_tokens"], usage["completion_tokens"],
        "{case}"
    );
}

fn check_anthropic(case: &str, got: &Value, m: &AnthropicMessage) {
    if let Some(err) = &m.error {
        let said = got["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{case}: the SDK did not raise"));
        assert!(
            said.contains(err["message"].as_str().unwrap()),
            "{case}: {said}"
        );
        return;
    }
    assert!(
        got.get("error").is_none(),
        "{case}: the SDK raised {}",
        got["error"]
    );
    assert_eq!(got["id"], m.id.as_str(), "{case}");
    let blocks = got["content"].as_array().unwrap();
    assert_eq!(blocks.len(), m.blocks.len(), "{case}");
    for (g, b) in blocks.iter().zip(&m.blocks) {
        assert_eq!(g["type"], b.kind.as_str(), "{case}");
        if b.kind == "text" {
            assert_eq!(g["text"], b.text.as_str(), "{case}");
        } else if b.kind == "thinking" {
            // The SDK assembles the thinking deltas and the signature as the relay sent them.
            assert_eq!(g["thinking"], b.text.as_str(), "{case}");
            assert_eq!(g["signature"], b.signature.as_str(), "{case}");
        } else if b.kind == "redacted_thinking" {
            assert_eq!(g["data"], b.signature.as_str(), "{case}");
        } else {
            assert_eq!(g["id"], b.id.as_str(), "{case}");
            assert_eq!(g["name"], b.name.as_str(), "{case}");
            if let Ok(input) = serde_json::from_str::<Value>(&b.input_json) {
                assert_eq!(g["input"], input, "{case}");
            }
        }
    }
    assert_eq!(got["stop_reason"], json!(m.stop_reason), "{case}");
    let usage = m.usage.as_ref().unwrap();
    assert_eq!(
        got["usage"]["input_tokens"], usage["input_tokens"],
        "{case}"
    );
    assert_eq!(
        got["usage"]["output_tokens"], usage["output_tokens"],
        "{case}"
    );
}
