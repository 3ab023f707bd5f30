//! Continuation after a cut: a request ending with an assistant prefill gets the rest of the
//! answer the request without it gets, byte exact, streamed or not; and `count_tokens`.

use serde_json::{json, Value};
use sluice_mock::{MockServer, PrefillRecord};

use crate::support::*;

const KNOBS: &str = "tokens=12";

/// POSTs over HTTP/1.1 or h2c.
async fn post(mock: &MockServer, h2c: bool, path: &str, knobs: &str, body: &Value) -> Resp {
    let req = request("POST", path, knobs, &body.to_string());
    if h2c {
        h2(&h2_connect(mock.addr()).await, req).await
    } else {
        h1(mock.addr(), req).await
    }
}

/// The text and output-token count of a chat or messages answer, streamed or not.
fn answer(path: &str, r: &Resp) -> (String, u64) {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let anthropic = path == "/v1/messages";
    if r.headers["content-type"] == "application/json" {
        let v = r.json();
        return if anthropic {
            let text = v["content"][0]["text"].as_str().unwrap().to_string();
            (text, v["usage"]["output_tokens"].as_u64().unwrap())
        } else {
            let text = v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_string();
            (text, v["usage"]["completion_tokens"].as_u64().unwrap())
        };
    }
    let mut text = String::new();
    let mut tokens = 0;
    for (_, data) in sse(&r.body) {
        let Ok(v) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        let piece = if anthropic {
            v.pointer("/delta/text")
        } else {
            v.pointer("/choices/0/delta/content")
        };
        if let Some(t) = piece.and_then(Value::as_str) {
            text += t;
        }
        let usage = if anthropic {
            v.pointer("/usage/output_tokens")
        } else {
            v.pointer("/usage/completion_tokens")
        };
        if let Some(n) = usage.and_then(Value::as_u64) {
            tokens = n;
        }
    }
    (text, tokens)
}

fn with(base: &Value, f: impl FnOnce(&mut Value)) -> Value {
    let mut v = base.clone();
    f(&mut v);
    v
}

fn push_assistant(v: &mut Value, text: &str) {
    v["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "role": "assistant", "content": text }));
}

/// `full = A(request)`, then for cuts at a token boundary and inside a token: the
/// continuation request gets exactly `full[cut..]`, counting only the new tokens.
async fn check_continuation(path: &str, base: Value, prefill: impl Fn(&Value, &str) -> Value) {
    let mock = mock("").await;
    for h2c in [false, true] {
        for stream in [false, true] {
            let set_stream = |v: &Value| {
                with(v, |v| {
                    v["stream"] = json!(stream);
                    if stream && path == "/v1/chat/completions" {
                        v["stream_options"] = json!({ "include_usage": true });
                    }
                })
            };
            let (full, full_tokens) = answer(
                path,
                &post(&mock, h2c, path, KNOBS, &set_stream(&base)).await,
            );
            assert_eq!(full_tokens, 12);
            // Three whole tokens, then the same plus part of the fourth word.
            let boundary = full.match_indices(' ').nth(2).unwrap().0;
            for (cut, new_tokens) in [(boundary, 9), (boundary + 2, 9)] {
                let req = set_stream(&prefill(&base, &full[..cut]));
                let r = post(&mock, h2c, path, KNOBS, &req).await;
                let (rest, tokens) = answer(path, &r);
                assert_eq!(
                    format!("{}{rest}", &full[..cut]),
                    full,
                    "h2c={h2c} stream={stream} cut={cut}"
                );
                assert_eq!(tokens, new_tokens, "usage counts only the new tokens");
                let snap = mock.stats().snapshot();
                let rec = snap.request(r.request_id()).unwrap();
                assert_eq!(
                    rec.prefill,
                    Some(PrefillRecord {
                        bytes: cut,
                        continued: true
                    })
                );
            }
        }
    }
}

#[tokio::test]
async fn anthropic_prefill_continues_the_answer() {
    let base = json!({"model": "claude", "max_tokens": 100, "messages": [{"role": "user", "content": "tell me"}]});
    check_continuation("/v1/messages", base, |b, p| {
        // A continuation may lower max_tokens: the answer does not change.
        with(b, |v| {
            push_assistant(v, p);
            v["max_tokens"] = json!(50);
        })
    })
    .await;
}

#[tokio::test]
async fn vllm_continue_final_message_continues_the_answer() {
    let base = json!({"model": "m", "messages": [{"role": "user", "content": "tell me"}]});
    check_continuation("/v1/chat/completions", base, |b, p| {
        with(b, |v| {
            push_assistant(v, p);
            v["continue_final_message"] = json!(true);
            v["add_generation_prompt"] = json!(false);
        })
    })
    .await;
}

#[tokio::test]
async fn deepseek_prefix_continues_the_answer() {
    let base = json!({"model": "m", "messages": [{"role": "user", "content": "tell me"}]});
    check_continuation("/v1/chat/completions", base, |b, p| {
        with(b, |v| {
            v["messages"]
                .as_array_mut()
                .unwrap()
                .push(json!({"role": "assistant", "content": p, "prefix": true}));
        })
    })
    .await;
}

#[tokio::test]
async fn a_prefill_that_is_not_a_prefix_gets_the_whole_answer() {
    let mock = mock("").await;
    let base = json!({"model": "claude", "max_tokens": 100, "messages": [{"role": "user", "content": "x"}]});
    let (full, _) = answer(
        "/v1/messages",
        &post(&mock, false, "/v1/messages", KNOBS, &base).await,
    );
    let req = with(&base, |v| push_assistant(v, "Something else entirely"));
    let r = post(&mock, false, "/v1/messages", KNOBS, &req).await;
    assert_eq!(answer("/v1/messages", &r).0, full);
    let snap = mock.stats().snapshot();
    let rec = snap.request(r.request_id()).unwrap();
    assert_eq!(
        rec.prefill,
        Some(PrefillRecord {
            bytes: 23,
            continued: false
        })
    );
    assert_eq!(snap.totals.prefills, 1);
}

#[tokio::test]
async fn a_plain_trailing_assistant_message_in_openai_is_not_a_prefill() {
    let mock = mock("").await;
    let base = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
    let (full, _) = answer(
        "/v1/chat/completions",
        &post(&mock, false, "/v1/chat/completions", KNOBS, &base).await,
    );
    let req = with(&base, |v| push_assistant(v, &full[..10]));
    let r = post(&mock, false, "/v1/chat/completions", KNOBS, &req).await;
    assert_ne!(
        answer("/v1/chat/completions", &r).0,
        full[10..],
        "a finished turn, answered anew"
    );
    assert_eq!(
        mock.stats()
            .snapshot()
            .request(r.request_id())
            .unwrap()
            .prefill,
        None
    );
}

#[tokio::test]
async fn prefill_reject_and_trailing_whitespace() {
    let mock = mock("").await;
    let base = json!({"model": "claude", "max_tokens": 100, "messages": [{"role": "user", "content": "x"}]});
    let req = with(&base, |v| push_assistant(v, "the"));
    let r = post(&mock, true, "/v1/messages", "prefill=reject", &req).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    assert_eq!(
        r.json()["error"]["message"],
        "This model does not support assistant message prefill. The conversation must end with a user message."
    );
    let rec = mock
        .stats()
        .snapshot()
        .request(r.request_id())
        .unwrap()
        .clone();
    assert_eq!(
        (rec.fault.as_deref(), rec.prefill.map(|p| p.continued)),
        (Some("prefill_rejected"), Some(false))
    );
    // Without a prefill the knob changes nothing.
    assert_eq!(
        post(&mock, true, "/v1/messages", "prefill=reject", &base)
            .await
            .status,
        200
    );
    let openai = json!({"model": "m", "continue_final_message": true,
        "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "the"}]});
    let r = post(
        &mock,
        false,
        "/v1/chat/completions",
        "prefill=reject",
        &openai,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], "invalid_request_message_order");
    let req = with(&base, |v| push_assistant(v, "the "));
    let r = post(&mock, false, "/v1/messages", "", &req).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "messages: final assistant content cannot end with trailing whitespace"
    );
}

#[tokio::test]
async fn count_tokens_agrees_with_the_usage() {
    let mock = mock("").await;
    let conversation = json!({
        "model": "claude",
        "system": "be brief",
        "messages": [{"role": "user", "content": "how many tokens is this prompt, roughly?"}],
        "tools": [{"name": "search", "input_schema": {"type": "object"}}],
    });
    let count = post(&mock, false, "/v1/messages/count_tokens", "", &conversation).await;
    assert_eq!(count.status, 200);
    let n = count.json()["input_tokens"].as_u64().unwrap();
    assert!(n > 10, "{n}");
    for stream in [false, true] {
        let req = with(&conversation, |v| {
            v["max_tokens"] = json!(64);
            v["stream"] = json!(stream);
        });
        let r = post(&mock, true, "/v1/messages", "", &req).await;
        let usage = if stream {
            let start: Value = serde_json::from_str(&sse(&r.body)[0].1).unwrap();
            start["message"]["usage"]["input_tokens"].clone()
        } else {
            r.json()["usage"]["input_tokens"].clone()
        };
        assert_eq!(usage, n, "stream={stream}");
    }
    let r = post(
        &mock,
        false,
        "/v1/messages/count_tokens",
        "",
        &json!({"model": "c"}),
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["type"]),
        (400, &json!("error"))
    );
}
