//! Prompt caching through the gateway over real sockets, against the mock's Bedrock, Vertex AI
//! Claude, Anthropic and OpenAI: the breakpoints `route.cache_breakpoints` adds (seen in the
//! body the mock recorded), a client's own marks left alone, `prompt_cache_key` kept for
//! OpenAI and dropped for Bedrock, and the cache reads and writes each provider reports (the
//! mock's `cache_read_tokens` / `cache_write_tokens`) in the client's usage, in its own API's
//! terms, and in the ledger's record, priced from the cloud's own price list.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use sluice_gateway::config::Config;
use sluice_gateway::Gateway;
use sluice_mock::{MockConfig, MockServer, TEST_AWS_ACCESS_KEY_ID, TEST_AWS_SECRET_ACCESS_KEY};

const BEDROCK_MODEL: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";
const VERTEX_MODEL: &str = "claude-sonnet-4@20250514";
const CACHE: &str = "cache_read_tokens=1000, cache_write_tokens=200";

fn env(k: &str) -> Option<String> {
    Some(match k {
        "AWS_ACCESS_KEY_ID" => TEST_AWS_ACCESS_KEY_ID.to_string(),
        "AWS_SECRET_ACCESS_KEY" => TEST_AWS_SECRET_ACCESS_KEY.to_string(),
        "HOME" => "/nonexistent-sluice-test-home".to_string(),
        _ => return None,
    })
}

fn config(mock: &MockServer, key: &Path, db: &Path) -> String {
    let url = mock.url();
    format!(
        r#"[server]
listen = "127.0.0.1:0"
access_log = "off"

[ledger]
flush_interval = "50ms"
sink = {{ kind = "sqlite", path = "{db}" }}

[[upstream]]
name = "bedrock"
base_url = "{url}"
provider = "bedrock"
region = "us-east-1"

[[upstream]]
name = "vertex"
base_url = "{url}"
provider = "vertex"
project = "sluice-test"
location = "us-east5"
credentials_file = "{key}"

[[upstream]]
name = "anthropic"
base_url = "{url}/v1"
provider = "anthropic"

[[upstream]]
name = "openai"
base_url = "{url}/v1"

[[route]]
models = ["bedrock-sonnet"]
targets = [{{ upstream = "bedrock", model = "{BEDROCK_MODEL}" }}]
cache_breakpoints = true
retry = {{ attempts = 1 }}

[[route]]
models = ["vertex-sonnet"]
targets = [{{ upstream = "vertex", model = "{VERTEX_MODEL}" }}]
cache_breakpoints = true
retry = {{ attempts = 1 }}

[[route]]
models = ["vertex-gemini"]
targets = [{{ upstream = "vertex", model = "gemini-2.5-flash" }}]
cache_breakpoints = true
retry = {{ attempts = 1 }}

[[route]]
models = ["claude-*"]
upstream = "anthropic"
cache_breakpoints = true
retry = {{ attempts = 1 }}

[[route]]
models = ["gpt-*"]
upstream = "openai"
cache_breakpoints = true
retry = {{ attempts = 1 }}
"#,
        key = key.display(),
        db = db.display(),
    )
}

async fn post(gw: &Gateway, path: &str, body: &Value) -> (u16, Value) {
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
    let h = req.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let resp = client.send(req, deadline).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    // A stream: its last usage chunk (OpenAI), as JSON.
    let v = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .rev()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|c| !c["usage"].is_null())
            .unwrap_or_else(|| panic!("no usage in {text}"))
    });
    (status, v)
}

/// The body the mock received last on a path containing `part`.
fn upstream_body(mock: &MockServer, part: &str) -> Value {
    let snap = mock.stats().snapshot();
    let r = snap
        .requests
        .iter()
        .rev()
        .find(|r| r.path.contains(part))
        .unwrap_or_else(|| panic!("no request to {part}"));
    assert!(!r.body_truncated);
    serde_json::from_slice(&r.body).unwrap()
}

/// A ledger row's usage and price, by served model, waited for (the writer flushes every
/// 50 ms).
#[derive(Debug, PartialEq, Eq)]
struct Booked {
    provider: String,
    input: i64,
    output: i64,
    cache_read: i64,
    cache_write: i64,
    /// 0 priced, 1 unpriced (a price the usage needs is unknown).
    pricing: i64,
    price_entry: Option<String>,
    cost: Option<i64>,
}

async fn booked(db: &Path, served_model: &str, n: usize) -> Vec<Booked> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let rows: Vec<Booked> = match rusqlite::Connection::open(db) {
            Ok(conn) => conn
                .prepare(
                    "SELECT provider, input_tokens, output_tokens, cache_read_tokens, \
                     cache_write_tokens, pricing, price_entry, cost_micros FROM sluice_requests \
                     WHERE served_model = ?1 ORDER BY ts_us",
                )
                .and_then(|mut q| {
                    q.query_map([served_model], |r| {
                        Ok(Booked {
                            provider: r.get(0)?,
                            input: r.get(1)?,
                            output: r.get(2)?,
                            cache_read: r.get(3)?,
                            cache_write: r.get(4)?,
                            pricing: r.get(5)?,
                            price_entry: r.get(6)?,
                            cost: r.get(7)?,
                        })
                    })?
                    .collect()
                })
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        if rows.len() >= n {
            return rows;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{served_model}: {} of {n} records",
            rows.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn count_marks(v: &Value, key: &str) -> usize {
    match v {
        Value::Object(o) => {
            usize::from(o.contains_key(key))
                + o.values().map(|v| count_marks(v, key)).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(|v| count_marks(v, key)).sum(),
        _ => 0,
    }
}

fn temp(tag: &str, mock: &MockServer) -> PathBuf {
    std::env::temp_dir().join(format!(
        "sluice-prompt-cache-{tag}-{}-{}",
        std::process::id(),
        mock.addr().port()
    ))
}

fn chat(model: &str) -> Value {
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": "You answer questions about the attached contract."},
            {"role": "user", "content": "When is rent due?"}
        ],
        "tools": [{"type": "function", "function": {"name": "lookup_clause",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}}],
        "prompt_cache_key": "contract-1234",
        "max_tokens": 16
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_breakpoints_and_cache_usage_reach_the_client_and_the_books() {
    // Every answer reports cache reads and writes (the gateway sends no client header to a
    // cloud, so the mock's defaults say it, not `x-mock`).
    let cached = MockConfig {
        defaults: sluice_mock::Behavior::default().with_spec(CACHE).unwrap(),
        ..MockConfig::default()
    };
    let mock = MockServer::start(cached).await.unwrap();
    let key = temp("key.json", &mock);
    std::fs::write(&key, mock.service_account_json()).unwrap();
    let db = temp("ledger.db", &mock);
    let _ = std::fs::remove_file(&db);
    let text = config(&mock, &key, &db);
    let gw = Gateway::start(Config::from_toml(&text, &env).unwrap_or_else(|e| panic!("{e}")))
        .await
        .unwrap();

    // OpenAI client → Bedrock Converse: a cachePoint after the system prompt and after the
    // tools; prompt_cache_key has no Converse field and is dropped, not refused.
    let (status, v) = post(&gw, "/v1/chat/completions", &chat("bedrock-sonnet")).await;
    assert_eq!(status, 200, "{v}");
    let up = upstream_body(&mock, "/converse");
    let point = json!({"cachePoint": {"type": "default"}});
    assert_eq!(
        up["system"].as_array().unwrap().last(),
        Some(&point),
        "{up}"
    );
    assert_eq!(
        up["toolConfig"]["tools"].as_array().unwrap().last(),
        Some(&point),
        "{up}"
    );
    assert_eq!(count_marks(&up, "cachePoint"), 2, "{up}");
    assert!(!up.to_string().contains("contract-1234"), "{up}");
    // OpenAI's usage: prompt_tokens includes the cache's reads and writes, cached_tokens the
    // reads.
    let u = &v["usage"];
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 1000, "{v}");
    let prompt = u["prompt_tokens"].as_i64().unwrap();
    let out = u["completion_tokens"].as_i64().unwrap();
    assert!(prompt > 1200, "{v}");
    // The books: all input, the reads and writes apart, priced from Bedrock's list (Sonnet 4:
    // $3 input, $0.30 cache reads, $3.75 cache writes, $15 output per million).
    let rows = booked(&db, BEDROCK_MODEL, 1).await;
    let uncached = prompt - 1200;
    assert_eq!(
        rows[0],
        Booked {
            provider: "bedrock".into(),
            input: prompt,
            output: out,
            cache_read: 1000,
            cache_write: 200,
            pricing: 0,
            price_entry: Some("bedrock/anthropic.claude-sonnet-4-2025*".into()),
            cost: Some(uncached * 3 + 300 + 750 + out * 15),
        }
    );

    // The same through ConverseStream: the reads come in the stream's `metadata` event.
    let mut streamed = chat("bedrock-sonnet");
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (status, v) = post(&gw, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"], 1000,
        "{v}"
    );
    assert_eq!(v["usage"]["prompt_tokens"], prompt, "{v}");
    let rows = booked(&db, BEDROCK_MODEL, 2).await;
    assert_eq!((rows[1].cache_read, rows[1].cache_write), (1000, 200));
    assert_eq!(rows[1].cost, rows[0].cost);

    // Anthropic client → Vertex AI Claude (rawPredict): a string system prompt becomes a
    // marked block, the last tool is marked; Anthropic's usage keeps the cache apart from
    // input_tokens.
    let messages = json!({
        "model": "vertex-sonnet",
        "max_tokens": 16,
        "system": "You answer questions about the attached contract.",
        "tools": [{"name": "lookup_clause", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "When is rent due?"}]
    });
    let (status, v) = post(&gw, "/v1/messages", &messages).await;
    assert_eq!(status, 200, "{v}");
    let up = upstream_body(&mock, ":rawPredict");
    let mark = json!({"type": "ephemeral"});
    assert_eq!(up["system"][0]["cache_control"], mark, "{up}");
    assert_eq!(up["tools"][0]["cache_control"], mark, "{up}");
    assert_eq!(count_marks(&up, "cache_control"), 2, "{up}");
    let u = &v["usage"];
    assert_eq!(
        (
            &u["cache_read_input_tokens"],
            &u["cache_creation_input_tokens"]
        ),
        (&json!(1000), &json!(200)),
        "{v}"
    );
    let input = u["input_tokens"].as_i64().unwrap();
    let out = u["output_tokens"].as_i64().unwrap();
    let rows = booked(&db, VERTEX_MODEL, 1).await;
    assert_eq!(
        rows[0],
        Booked {
            provider: "vertex".into(),
            input: input + 1200,
            output: out,
            cache_read: 1000,
            cache_write: 200,
            pricing: 0,
            price_entry: Some("vertex/claude-sonnet-4@*".into()),
            cost: Some(input * 3 + 300 + 750 + out * 15),
        }
    );

    // OpenAI client → Vertex AI Gemini: nothing added (Gemini caches prefixes by itself),
    // `cachedContentTokenCount` read as the cached part of the prompt. The shipped catalog has
    // no confirmed cache-read price for Gemini 2.5, so the record is unpriced, not free.
    let (status, v) = post(&gw, "/v1/chat/completions", &chat("vertex-gemini")).await;
    assert_eq!(status, 200, "{v}");
    let up = upstream_body(&mock, ":generateContent");
    assert!(!up.to_string().contains("cache_control"), "{up}");
    assert!(!up.to_string().contains("contract-1234"), "{up}");
    assert_eq!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"], 1000,
        "{v}"
    );
    let prompt = v["usage"]["prompt_tokens"].as_i64().unwrap();
    let rows = booked(&db, "gemini-2.5-flash", 1).await;
    assert_eq!(
        (rows[0].input, rows[0].cache_read, rows[0].cache_write),
        (prompt, 1000, 0)
    );
    assert_eq!((rows[0].pricing, rows[0].cost), (1, None));

    // A client that marks its own breakpoint is sent as it is: no mark added on its system
    // prompt or tools.
    let own = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 16,
        "system": "You answer questions about the attached contract.",
        "tools": [{"name": "lookup_clause", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Long context.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "When is rent due?"}
        ]}]
    });
    let (status, v) = post(&gw, "/v1/messages", &own).await;
    assert_eq!(status, 200, "{v}");
    let up = upstream_body(&mock, "/v1/messages");
    assert_eq!(count_marks(&up, "cache_control"), 1, "{up}");
    assert_eq!(up["system"], own["system"]);
    // Without marks, the Anthropic route gets the two.
    let mut none = own.clone();
    none["messages"] = json!([{"role": "user", "content": "When is rent due?"}]);
    let (status, _) = post(&gw, "/v1/messages", &none).await;
    assert_eq!(status, 200);
    let up = upstream_body(&mock, "/v1/messages");
    assert_eq!(count_marks(&up, "cache_control"), 2, "{up}");

    // OpenAI upstream: prompt_cache_key kept, nothing added (OpenAI caches by itself), its
    // cached_tokens read as they are.
    let (status, v) = post(&gw, "/v1/chat/completions", &chat("gpt-4.1")).await;
    assert_eq!(status, 200, "{v}");
    let up = upstream_body(&mock, "/v1/chat/completions");
    assert_eq!(up["prompt_cache_key"], "contract-1234", "{up}");
    assert_eq!(count_marks(&up, "cache_control"), 0, "{up}");
    assert_eq!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"], 1000,
        "{v}"
    );

    gw.shutdown().await;
    let _ = std::fs::remove_file(&key);
    let _ = std::fs::remove_file(&db);
}
