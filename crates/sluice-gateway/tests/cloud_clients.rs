//! The OpenAI Responses API and Gemini-native clients to the cloud upstreams, end to end over
//! real sockets: the gateway in front of the mock's AWS Bedrock (Converse and ConverseStream,
//! SigV4 checked by the mock) and Google Vertex AI (Gemini and Claude, tokens from the mock's
//! token endpoint). Text, tool calls and usage, streamed and not, read back as each client
//! API has them (a Responses stream's sequence numbers, Gemini's chunks); and the gateway's
//! own mid-stream errors (a stall past `idle`) in each client's API.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use sluice_gateway::config::Config;
use sluice_gateway::Gateway;
use sluice_mock::{MockConfig, MockServer, TEST_AWS_ACCESS_KEY_ID, TEST_AWS_SECRET_ACCESS_KEY};

const BEDROCK_MODEL: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";

/// The routes: one per cloud model family.
const MODELS: [&str; 3] = ["bedrock-claude", "vertex-gemini", "vertex-claude"];

fn env(k: &str) -> Option<String> {
    Some(match k {
        "AWS_ACCESS_KEY_ID" => TEST_AWS_ACCESS_KEY_ID.to_string(),
        "AWS_SECRET_ACCESS_KEY" => TEST_AWS_SECRET_ACCESS_KEY.to_string(),
        "HOME" => "/nonexistent-sluice-test-home".to_string(),
        _ => return None,
    })
}

/// A mock whose every answer behaves as `spec`, its service-account key in a file, and a
/// gateway with Bedrock (over HTTP/2) and Vertex upstreams in front of it (`upstream`: more
/// lines for each upstream).
struct Cloud {
    mock: MockServer,
    key: PathBuf,
    gw: Gateway,
}

impl Drop for Cloud {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.key);
    }
}

async fn cloud(spec: &str, upstream: &str) -> Cloud {
    let mock = MockServer::start(MockConfig {
        defaults: sluice_mock::Behavior::default().with_spec(spec).unwrap(),
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let key = std::env::temp_dir().join(format!(
        "sluice-cloud-clients-{}-{}.json",
        std::process::id(),
        mock.addr().port()
    ));
    std::fs::write(&key, mock.service_account_json()).unwrap();
    let url = mock.url();
    let text = format!(
        r#"[server]
listen = "127.0.0.1:0"
access_log = "off"

[[upstream]]
name = "bedrock"
base_url = "{url}"
provider = "bedrock"
region = "us-east-1"
protocol = "h2c"
{upstream}

[[upstream]]
name = "vertex"
base_url = "{url}"
provider = "vertex"
project = "sluice-test"
location = "us-east5"
credentials_file = "{key}"
{upstream}

[[route]]
models = ["bedrock-claude"]
targets = [{{ upstream = "bedrock", model = "{BEDROCK_MODEL}" }}]
retry = {{ attempts = 1 }}

[[route]]
models = ["vertex-gemini"]
targets = [{{ upstream = "vertex", model = "gemini-2.5-flash" }}]
retry = {{ attempts = 1 }}

[[route]]
models = ["vertex-claude"]
targets = [{{ upstream = "vertex", model = "claude-sonnet-4-5@20250929" }}]
retry = {{ attempts = 1 }}
"#,
        key = key.display()
    );
    let config = Config::from_toml(&text, &env).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let gw = Gateway::start(config).await.unwrap();
    Cloud { mock, key, gw }
}

/// A client of the gateway (our own upstream client, pointed at it): the status and body.
async fn post(gw: &Gateway, path: &str, body: &Value) -> (u16, String) {
    use http_body_util::BodyExt;
    let client = sluice_upstream::Upstream::new(sluice_upstream::UpstreamConfig {
        name: "client".into(),
        base_url: format!("http://{}", gw.addr()).parse().unwrap(),
        protocol: sluice_upstream::Protocol::Http1,
        ..sluice_upstream::UpstreamConfig::default()
    })
    .unwrap();
    let mut req = http::Request::new(bytes::Bytes::from(body.to_string()));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = path.parse().unwrap();
    req.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let resp = client.send(req, deadline).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// An SSE body's events: name (if any) and data, as JSON.
fn events(body: &str) -> Vec<(Option<String>, Value)> {
    body.split("\n\n")
        .filter(|b| !b.trim().is_empty() && !b.starts_with(':'))
        .map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            let v = serde_json::from_str(&data).unwrap_or_else(|_| panic!("{data}\n{body}"));
            (name, v)
        })
        .collect()
}

/// A Responses stream as the SDK reads it, its protocol checked: every event named as its
/// `type`, numbered from 0; the deltas of each item equal to its `.done` text; the final
/// event's name and response.
struct ResponsesStream {
    text: String,
    arguments: String,
    call_name: Option<String>,
    last: (String, Value),
    error: Option<Value>,
}

fn read_responses(body: &str) -> ResponsesStream {
    let mut s = ResponsesStream {
        text: String::new(),
        arguments: String::new(),
        call_name: None,
        last: (String::new(), Value::Null),
        error: None,
    };
    let evs = events(body);
    assert!(!evs.is_empty(), "{body}");
    for (i, (name, v)) in evs.iter().enumerate() {
        let name = name.as_deref().unwrap_or_else(|| panic!("unnamed: {v}"));
        assert_eq!(v["type"], name, "{v}");
        assert_eq!(v["sequence_number"], i as u64, "numbered from 0: {v}");
        match name {
            "response.output_text.delta" => s.text.push_str(v["delta"].as_str().unwrap()),
            "response.output_text.done" => assert_eq!(v["text"], s.text.as_str(), "{v}"),
            "response.function_call_arguments.delta" => {
                s.arguments.push_str(v["delta"].as_str().unwrap())
            }
            "response.function_call_arguments.done" => {
                assert_eq!(v["arguments"], s.arguments.as_str(), "{v}")
            }
            "response.output_item.added" if v["item"]["type"] == "function_call" => {
                s.call_name = v["item"]["name"].as_str().map(str::to_string);
            }
            "error" => s.error = Some(v.clone()),
            _ => {}
        }
        if i + 1 == evs.len() {
            s.last = (name.to_string(), v["response"].clone());
        }
    }
    s
}

/// A Gemini stream as the SDK reads it: unnamed chunks, their text parts and function calls
/// concatenated, the finish reason and usage of the last; or an error chunk.
struct GeminiStream {
    text: String,
    calls: Vec<Value>,
    finish: Option<String>,
    usage: Option<Value>,
    error: Option<Value>,
}

fn read_gemini(body: &str) -> GeminiStream {
    let mut s = GeminiStream {
        text: String::new(),
        calls: Vec::new(),
        finish: None,
        usage: None,
        error: None,
    };
    let evs = events(body);
    assert!(!evs.is_empty(), "{body}");
    for (name, v) in evs {
        assert_eq!(name, None, "Gemini chunks are unnamed: {v}");
        assert!(
            s.finish.is_none() && s.error.is_none(),
            "nothing after the end: {v}"
        );
        if let Some(e) = v.get("error") {
            s.error = Some(e.clone());
            continue;
        }
        let c = &v["candidates"][0];
        for p in c["content"]["parts"].as_array().into_iter().flatten() {
            if let Some(f) = p.get("functionCall") {
                s.calls.push(f.clone());
            } else if p["thought"] != true {
                s.text.push_str(p["text"].as_str().unwrap_or_default());
            }
        }
        if let Some(f) = c["finishReason"].as_str() {
            s.finish = Some(f.to_string());
            s.usage = Some(v["usageMetadata"].clone());
        }
    }
    s
}

fn weather_tool_responses() -> Value {
    json!([{
        "type": "function",
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }])
}

fn weather_tool_gemini() -> Value {
    json!([{"functionDeclarations": [{
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }]}])
}

/// Every cloud model through the Responses API and Gemini's own, streamed and not: the
/// answer's text and usage as each API gives them; with the mock calling tools, the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_and_gemini_clients_reach_bedrock_and_vertex() {
    let c = cloud("tokens=6", "").await;
    for model in MODELS {
        // The Responses API, whole.
        let (status, body) = post(
            &c.gw,
            "/v1/responses",
            &json!({"model": model, "input": "hi"}),
        )
        .await;
        assert_eq!(status, 200, "{model}: {body}");
        let r: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(r["object"], "response", "{model}: {r}");
        assert_eq!(r["status"], "completed", "{model}: {r}");
        let message = r["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "message")
            .unwrap_or_else(|| panic!("{model}: no message: {r}"));
        let text = message["content"][0]["text"].as_str().unwrap();
        assert!(!text.is_empty(), "{model}: {r}");
        assert!(
            r["usage"]["input_tokens"].as_u64().unwrap() > 0,
            "{model}: {r}"
        );
        assert!(
            r["usage"]["output_tokens"].as_u64().unwrap() > 0,
            "{model}: {r}"
        );

        // Streamed.
        let (status, body) = post(
            &c.gw,
            "/v1/responses",
            &json!({"model": model, "input": "hi", "stream": true}),
        )
        .await;
        assert_eq!(status, 200, "{model}: {body}");
        let s = read_responses(&body);
        assert_eq!(s.last.0, "response.completed", "{model}: {body}");
        assert!(!s.text.is_empty(), "{model}: {body}");
        let out = &s.last.1["output"];
        let final_text = out
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "message")
            .map(|m| m["content"][0]["text"].clone());
        assert_eq!(final_text, Some(Value::String(s.text.clone())), "{model}");
        assert!(
            s.last.1["usage"]["output_tokens"].as_u64().unwrap() > 0,
            "{model}: {body}"
        );

        // Gemini's own API, whole and streamed (the model in the path).
        let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        let (status, body) = post(
            &c.gw,
            &format!("/v1beta/models/{model}:generateContent"),
            &gemini,
        )
        .await;
        assert_eq!(status, 200, "{model}: {body}");
        let g: Value = serde_json::from_str(&body).unwrap();
        let parts = g["candidates"][0]["content"]["parts"].as_array().unwrap();
        assert!(
            parts
                .iter()
                .any(|p| p["text"].as_str().is_some_and(|t| !t.is_empty())),
            "{model}: {g}"
        );
        assert!(
            g["candidates"][0]["finishReason"].is_string(),
            "{model}: {g}"
        );
        assert!(
            g["usageMetadata"]["totalTokenCount"].as_u64().unwrap() > 0,
            "{model}: {g}"
        );
        let (status, body) = post(
            &c.gw,
            &format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            &gemini,
        )
        .await;
        assert_eq!(status, 200, "{model}: {body}");
        let s = read_gemini(&body);
        assert!(s.error.is_none(), "{model}: {body}");
        assert_eq!(s.finish.as_deref(), Some("STOP"), "{model}: {body}");
        assert!(!s.text.is_empty(), "{model}: {body}");
        assert!(
            s.usage.unwrap()["candidatesTokenCount"].as_u64().unwrap() > 0,
            "{model}: {body}"
        );
    }
    let auth = c.mock.stats().totals().auth;
    assert!(auth.sigv4_accepted >= 4, "{auth:?}");
    assert_eq!(auth.sigv4_rejected, 0, "{auth:?}");
    assert_eq!(auth.bearer_expired + auth.bearer_rejected, 0, "{auth:?}");
    let paths: Vec<String> = c
        .mock
        .stats()
        .snapshot()
        .requests
        .iter()
        .map(|r| r.path.clone())
        .collect();
    for want in [
        "/converse",
        "/converse-stream",
        "gemini-2.5-flash:generateContent",
        "gemini-2.5-flash:streamGenerateContent",
        "claude-sonnet-4-5%4020250929:rawPredict",
        "claude-sonnet-4-5%4020250929:streamRawPredict",
    ] {
        assert!(paths.iter().any(|p| p.contains(want)), "{want}: {paths:?}");
    }

    // The mock calls the declared tool: a function call item / part, arguments as JSON.
    let t = cloud("tokens=6, tools", "").await;
    for model in MODELS {
        let ask = json!({"model": model, "input": "weather in Paris?", "tools": weather_tool_responses()});
        let (status, body) = post(&t.gw, "/v1/responses", &ask).await;
        assert_eq!(status, 200, "{model}: {body}");
        let r: Value = serde_json::from_str(&body).unwrap();
        let call = r["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "function_call")
            .unwrap_or_else(|| panic!("{model}: no call: {r}"));
        assert_eq!(call["name"], "get_weather", "{model}: {r}");
        assert!(
            call["call_id"].as_str().is_some_and(|id| !id.is_empty()),
            "{r}"
        );
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert!(args.is_object(), "{model}: {r}");

        let mut ask = ask.clone();
        ask["stream"] = json!(true);
        let (status, body) = post(&t.gw, "/v1/responses", &ask).await;
        assert_eq!(status, 200, "{model}: {body}");
        let s = read_responses(&body);
        assert_eq!(s.last.0, "response.completed", "{model}: {body}");
        assert_eq!(
            s.call_name.as_deref(),
            Some("get_weather"),
            "{model}: {body}"
        );
        assert!(
            serde_json::from_str::<Value>(&s.arguments)
                .unwrap()
                .is_object(),
            "{body}"
        );

        let gemini = json!({
            "contents": [{"role": "user", "parts": [{"text": "weather in Paris?"}]}],
            "tools": weather_tool_gemini()
        });
        let (status, body) = post(
            &t.gw,
            &format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            &gemini,
        )
        .await;
        assert_eq!(status, 200, "{model}: {body}");
        let s = read_gemini(&body);
        assert_eq!(s.calls.len(), 1, "{model}: {body}");
        assert_eq!(s.calls[0]["name"], "get_weather", "{model}: {body}");
        assert!(s.calls[0]["args"].is_object(), "{model}: {body}");
    }
}

/// A cloud stream that stalls past the upstream's `idle` after its first content: a
/// Responses client gets `error` and `response.failed` numbered on from its stream, a Gemini
/// client a Gemini error chunk, never a chat-completions error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_cloud_stream_ends_in_the_clients_api() {
    let c = cloud(
        "tokens=8, stall_after=4:5000",
        "timeouts = { idle = \"300ms\" }",
    )
    .await;
    for model in MODELS {
        let (status, body) = post(
            &c.gw,
            "/v1/responses",
            &json!({"model": model, "input": "hi", "stream": true}),
        )
        .await;
        assert_eq!(status, 200, "{model}: {body}");
        let s = read_responses(&body);
        assert!(!s.text.is_empty(), "{model}: some text first: {body}");
        assert_eq!(s.last.0, "response.failed", "{model}: {body}");
        assert_eq!(s.last.1["status"], "failed", "{model}: {body}");
        assert_eq!(s.last.1["error"]["code"], "idle_timeout", "{model}: {body}");
        assert_eq!(s.error.unwrap()["code"], "idle_timeout", "{model}: {body}");
        assert!(!body.contains("\"choices\""), "{model}: {body}");

        let (status, body) = post(
            &c.gw,
            &format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            &json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
        )
        .await;
        assert_eq!(status, 200, "{model}: {body}");
        let s = read_gemini(&body);
        assert!(!s.text.is_empty(), "{model}: some text first: {body}");
        let e = s
            .error
            .unwrap_or_else(|| panic!("{model}: no error chunk: {body}"));
        assert_eq!(e["code"], 504, "{model}: {e}");
        assert_eq!(e["status"], "DEADLINE_EXCEEDED", "{model}: {e}");
    }
}
