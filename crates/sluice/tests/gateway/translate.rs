//! Provider translation through the whole gateway, over real sockets with the mock speaking
//! each provider's format: OpenAI clients reach Anthropic and Gemini upstreams, Anthropic
//! clients reach OpenAI and Gemini ones; usage for every request; errors re-expressed.

use sluice::Server;
use sluice_gateway::config::Config;
use sluice_mock::MockServer;

use crate::support::*;

/// A gateway whose one upstream is the mock speaking `provider` (`none`: passthrough).
async fn gateway_as(mock: &MockServer, provider: &str, route_extra: &str) -> Server {
    let (base, provider_line) = match provider {
        "gemini" => (format!("{}/v1beta", mock.url()), "provider = \"gemini\""),
        "none" => (format!("{}/v1", mock.url()), ""),
        p => (
            format!("{}/v1", mock.url()),
            match p {
                "anthropic" => "provider = \"anthropic\"",
                _ => "provider = \"openai\"",
            },
        ),
    };
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n[[upstream]]\nname = \"up\"\nbase_url = \"{base}\"\nprotocol = \"h2c\"\n{provider_line}\n[[route]]\nmodels = [\"*\"]\nupstream = \"up\"\n{route_extra}\n"
    );
    let cfg = Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Server::start(cfg).await.unwrap()
}

const OPENAI_CHAT: &str = r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":50}"#;
const OPENAI_STREAM: &str =
    r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":50,"stream":true}"#;
const ANTHROPIC_MSG: &str = r#"{"model":"m","max_tokens":50,"system":"be brief","messages":[{"role":"user","content":"hi"}]}"#;
const ANTHROPIC_STREAM: &str =
    r#"{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

fn text_of_openai_stream(body: &[u8]) -> String {
    sse(body)
        .iter()
        .filter(|(_, d)| d != "[DONE]")
        .filter_map(|(_, d)| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

fn text_of_anthropic_stream(body: &[u8]) -> String {
    sse(body)
        .iter()
        .filter(|(e, _)| e.as_deref() == Some("content_block_delta"))
        .filter_map(|(_, d)| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| v["delta"]["text"].as_str().map(String::from))
        .collect()
}

#[tokio::test]
async fn openai_clients_reach_anthropic_and_gemini_upstreams() {
    let mock = mock("tokens=5").await;
    for provider in ["anthropic", "gemini"] {
        let gw = gateway_as(&mock, provider, "").await;
        let r = h1(
            gw.addr(),
            request("POST", "/v1/chat/completions", "", OPENAI_CHAT),
        )
        .await;
        assert_eq!(
            r.status,
            200,
            "{provider}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let v = r.json();
        assert_eq!(v["object"], "chat.completion", "{provider}: {v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(text.split(' ').count(), 5, "{provider}: {text}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{v}");
        // Streaming: the same text, as OpenAI chunks, ending with [DONE].
        let s = h1(
            gw.addr(),
            request("POST", "/v1/chat/completions", "", OPENAI_STREAM),
        )
        .await;
        assert_eq!(s.status, 200);
        let events = sse(&s.body);
        assert_eq!(events.last().unwrap().1, "[DONE]", "{provider}: {events:?}");
        assert_eq!(text_of_openai_stream(&s.body).split(' ').count(), 5);
        // What the upstream received was its own format.
        let snap = mock.stats().snapshot();
        let last = snap.requests.last().unwrap();
        match provider {
            "anthropic" => assert_eq!(last.path, "/v1/messages"),
            _ => assert!(
                last.path.contains(":streamGenerateContent"),
                "{}",
                last.path
            ),
        }
    }
}

#[tokio::test]
async fn anthropic_clients_reach_openai_and_gemini_upstreams() {
    let mock = mock("tokens=4").await;
    for provider in ["openai", "gemini"] {
        let gw = gateway_as(&mock, provider, "").await;
        let r = h1(
            gw.addr(),
            request("POST", "/v1/messages", "", ANTHROPIC_MSG),
        )
        .await;
        assert_eq!(
            r.status,
            200,
            "{provider}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let v = r.json();
        assert_eq!(v["type"], "message", "{v}");
        assert_eq!(v["stop_reason"], "end_turn");
        assert_eq!(
            v["content"][0]["text"].as_str().unwrap().split(' ').count(),
            4
        );
        assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0);
        let s = h1(
            gw.addr(),
            request("POST", "/v1/messages", "", ANTHROPIC_STREAM),
        )
        .await;
        let events = sse(&s.body);
        assert_eq!(events[0].0.as_deref(), Some("message_start"), "{events:?}");
        assert_eq!(events.last().unwrap().0.as_deref(), Some("message_stop"));
        assert_eq!(text_of_anthropic_stream(&s.body).split(' ').count(), 4);
    }
}

#[tokio::test]
async fn tool_calls_translate_with_their_arguments_whole() {
    let mock = mock("tools, tokens=3").await;
    let gw = gateway_as(&mock, "anthropic", "").await;
    let body = r#"{"model":"m","messages":[{"role":"user","content":"find"}],"stream":true,"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}}]}"#;
    let s = h1(gw.addr(), request("POST", "/v1/chat/completions", "", body)).await;
    let mut args = String::new();
    let mut finish = None;
    for (_, d) in sse(&s.body) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&d) else {
            continue;
        };
        if let Some(a) = v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
        {
            args.push_str(a);
        }
        if let Some(f) = v["choices"][0]["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    let parsed: serde_json::Value =
        serde_json::from_str(&args).unwrap_or_else(|e| panic!("{e}: {args}"));
    assert_eq!(parsed["query"].as_str().unwrap().split(' ').count(), 3);
    assert_eq!(finish.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn errors_are_re_expressed_in_the_clients_format() {
    // Anthropic's 529 overloaded_error reaches an OpenAI client as a 503.
    let mock = mock("error=overloaded").await;
    let gw = gateway_as(&mock, "anthropic", "retry = { attempts = 1 }").await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", OPENAI_CHAT),
    )
    .await;
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["error"]["message"].is_string(), "{}", r.json());
    // A parameter the provider cannot honour is a 400 naming it...
    let mock = mock_plain().await;
    let gw = gateway_as(&mock, "anthropic", "").await;
    let n3 = r#"{"model":"m","n":3,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", n3)).await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`n`"),
        "{}",
        r.json()
    );
    assert_eq!(mock.stats().snapshot().totals.requests, 0);
    // ...unless the route drops it, and says so.
    let gw = gateway_as(&mock, "anthropic", "drop_unsupported_params = true").await;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", n3)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["x-sluice-dropped-params"], "n");
}

async fn mock_plain() -> MockServer {
    mock("").await
}

#[tokio::test]
async fn usage_is_recorded_for_every_request_and_the_unasked_usage_chunk_is_removed() {
    let mock = mock("tokens=6").await;
    let gw = gateway_as(&mock, "none", "").await;
    let s = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "",
            r#"{"model":"gpt-4o","stream":true}"#,
        ),
    )
    .await;
    assert!(
        sse(&s.body)
            .iter()
            .all(|(_, d)| !d.contains("\"choices\":[]")),
        "the client did not ask for the usage chunk"
    );
    // The gateway asked for it, and counted the tokens.
    let snap = mock.stats().snapshot();
    let sent = &snap.requests.last().unwrap();
    assert!(sent.stream);
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains("sluice_tokens_total{route=\"*\",model=\"*\",kind=\"output\"} 6"),
        "{metrics}"
    );
}

/// A Gemini 3 function call streamed to an OpenAI or Anthropic client comes back in the
/// client's next request (its tool result) with the `thoughtSignature` Gemini put on the
/// call's part, exactly: the id the client got carries it (Gemini refuses the turn without).
#[tokio::test]
async fn a_streamed_gemini_calls_thought_signature_makes_the_round_trip() {
    let mock = mock("").await;
    let gw = gateway_as(&mock, "gemini", "").await;
    let thinking_call = "tools, tokens=3, reasoning_tokens=4";
    let tools_openai = r#"[{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}}]"#;
    let tools_anthropic = r#"[{"name":"search","input_schema":{"type":"object","properties":{"query":{"type":"string"}}}}]"#;
    for (path, first) in [
        (
            "/v1/chat/completions",
            format!(
                r#"{{"model":"gemini-3-pro","stream":true,"messages":[{{"role":"user","content":"find"}}],"tools":{tools_openai}}}"#
            ),
        ),
        (
            "/v1/messages",
            format!(
                r#"{{"model":"gemini-3-pro","max_tokens":100,"stream":true,"messages":[{{"role":"user","content":"find"}}],"tools":{tools_anthropic}}}"#
            ),
        ),
    ] {
        let s = h1(gw.addr(), request("POST", path, thinking_call, &first)).await;
        assert_eq!(
            s.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&s.body)
        );
        // The call's id and arguments, as the client's SDK accumulates them.
        let (mut id, mut name, mut args) = (String::new(), String::new(), String::new());
        for (_, d) in sse(&s.body) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&d) else {
                continue;
            };
            let call = &v["choices"][0]["delta"]["tool_calls"][0];
            let block = &v["content_block"];
            if let Some(i) = call["id"].as_str().or(block["id"].as_str()) {
                id = i.to_string();
            }
            if let Some(n) = call["function"]["name"].as_str().or(block["name"].as_str()) {
                name = n.to_string();
            }
            if let Some(a) = call["function"]["arguments"]
                .as_str()
                .or(v["delta"]["partial_json"].as_str())
            {
                args.push_str(a);
            }
        }
        assert_eq!(
            name,
            "search",
            "{path}: {}",
            String::from_utf8_lossy(&s.body)
        );
        let input: serde_json::Value = serde_json::from_str(&args).unwrap();
        let next = if path == "/v1/messages" {
            serde_json::json!({
                "model": "gemini-3-pro", "max_tokens": 100,
                "messages": [
                    {"role": "user", "content": "find"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": name, "input": input}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "found it"}]},
                ],
                "tools": serde_json::from_str::<serde_json::Value>(tools_anthropic).unwrap(),
            })
        } else {
            serde_json::json!({
                "model": "gemini-3-pro",
                "messages": [
                    {"role": "user", "content": "find"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": args}}]},
                    {"role": "tool", "tool_call_id": id, "content": "found it"},
                ],
                "tools": serde_json::from_str::<serde_json::Value>(tools_openai).unwrap(),
            })
        };
        let r = h1(
            gw.addr(),
            request("POST", path, "tokens=2", &next.to_string()),
        )
        .await;
        assert_eq!(
            r.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        // What Gemini received: the call part with its signature, then the result.
        let snap = mock.stats().snapshot();
        let sent: serde_json::Value =
            serde_json::from_slice(&snap.requests.last().unwrap().body).unwrap();
        let call_part = &sent["contents"][1]["parts"][0];
        assert_eq!(
            call_part["thoughtSignature"],
            sluice_mock::THOUGHT_SIGNATURE,
            "{path}: {sent}"
        );
        assert_eq!(call_part["functionCall"]["name"], "search", "{sent}");
        assert_eq!(call_part["functionCall"]["args"], input, "{sent}");
        assert_eq!(
            sent["contents"][2]["parts"][0]["functionResponse"]["name"], "search",
            "{sent}"
        );
    }
}
