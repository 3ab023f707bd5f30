//! Gemini (Developer API) shapes on both protocols.

use serde_json::{json, Value};

use crate::support::*;

const GEN: &str = "/v1beta/models/gemini-2.5-flash:generateContent";
const SSE: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
const BODY: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}"#;

/// The same request over HTTP/1.1 and h2c, which must agree byte for byte.
async fn both(
    mock: &sluice_mock::MockServer,
    req: impl Fn() -> http::Request<bytes::Bytes>,
) -> Resp {
    let r1 = h1(mock.addr(), req()).await;
    let send = h2_connect(mock.addr()).await;
    let r2 = h2(&send, req()).await;
    assert_eq!(r1.status, r2.status);
    assert_eq!(r1.body, r2.body);
    r1
}

fn parts_text(v: &Value) -> String {
    v["candidates"][0]["content"]["parts"]
        .as_array()
        .map(|p| p.iter().filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn generate_content_shape_and_usage() {
    let mock = mock("").await;
    let r = both(&mock, || request("POST", GEN, "tokens=5", BODY)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "application/json");
    let v = r.json();
    let cand = &v["candidates"][0];
    assert_eq!(cand["content"]["role"], "model");
    assert_eq!(cand["finishReason"], "STOP");
    assert!(!parts_text(&v).is_empty());
    let u = &v["usageMetadata"];
    assert_eq!(u["candidatesTokenCount"], 5);
    let p = u["promptTokenCount"].as_u64().unwrap();
    assert_eq!(u["totalTokenCount"], p + 5);
    assert!(u.get("thoughtsTokenCount").is_none());
    assert_eq!(v["modelVersion"], "gemini-2.5-flash");
    assert!(v["responseId"].is_string());
    let snap = mock.stats().snapshot();
    let rec = snap.request(r.request_id()).unwrap();
    assert_eq!(rec.api, Some(sluice_mock::Api::Gemini));
    assert_eq!(rec.model.as_deref(), Some("gemini-2.5-flash"));
    assert_eq!(
        &rec.body[..],
        BODY.as_bytes(),
        "the body is kept as evidence"
    );
}

#[tokio::test]
async fn stream_is_whole_responses_with_cumulative_usage_and_no_end_marker() {
    let mock = mock("").await;
    let r = both(&mock, || {
        request("POST", SSE, "tokens=4, reasoning_tokens=3", BODY)
    })
    .await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    assert!(
        !text.contains("event:"),
        "Gemini streams have no event names"
    );
    assert!(!text.contains("[DONE]"));
    let events = sse(&r.body);
    assert_eq!(events.len(), 5, "4 token chunks and the finishing chunk");
    let mut joined = String::new();
    for (i, (_, data)) in events.iter().enumerate() {
        let v: Value = serde_json::from_str(data).unwrap();
        joined += &parts_text(&v);
        let u = &v["usageMetadata"];
        assert_eq!(
            u["candidatesTokenCount"],
            (i as u64 + 1).min(4),
            "cumulative"
        );
        assert_eq!(u["thoughtsTokenCount"], 3);
        let p = u["promptTokenCount"].as_u64().unwrap();
        assert_eq!(u["totalTokenCount"], p + (i as u64 + 1).min(4) + 3);
        assert_eq!(v["candidates"][0].get("finishReason").is_some(), i == 4);
    }
    let whole = both(&mock, || {
        request("POST", GEN, "tokens=4, reasoning_tokens=3", BODY)
    })
    .await;
    assert_eq!(
        joined,
        parts_text(&whole.json()),
        "streamed or not, the same text"
    );
    // Without alt=sse the stream is a JSON array of the same chunks.
    let path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
    let arr = both(&mock, || {
        request("POST", path, "tokens=4, reasoning_tokens=3", BODY)
    })
    .await;
    let chunks = arr.json();
    assert_eq!(chunks.as_array().unwrap().len(), 5);
    let from_sse: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks, json!(from_sse));
}

#[tokio::test]
async fn function_call_arrives_whole_and_finishes_with_stop() {
    let mock = mock("").await;
    let body = json!({
        "contents": [{"role": "user", "parts": [{"text": "weather?"}]}],
        "tools": [{"functionDeclarations": [{"name": "get_weather", "parametersJsonSchema": {"type": "object"}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
    })
    .to_string();
    let r = both(&mock, || request("POST", SSE, "tools, tokens=3", &body)).await;
    let events = sse(&r.body);
    assert_eq!(events.len(), 2);
    let first: Value = serde_json::from_str(&events[0].1).unwrap();
    let call = &first["candidates"][0]["content"]["parts"][0]["functionCall"];
    assert_eq!(
        call["name"], "get_weather",
        "the declared function is called"
    );
    assert_eq!(
        call["args"]["query"].as_str().unwrap().split(' ').count(),
        3
    );
    assert!(first["candidates"][0].get("finishReason").is_none());
    let last: Value = serde_json::from_str(&events[1].1).unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    let whole = both(&mock, || request("POST", GEN, "tools, tokens=3", &body))
        .await
        .json();
    assert_eq!(
        whole["candidates"][0]["content"]["parts"][0]["functionCall"],
        *call
    );
    assert_eq!(whole["candidates"][0]["finishReason"], "STOP");
    // The round trip: the call and its response go back in the history.
    let round = json!({
        "contents": [
            {"role": "user", "parts": [{"text": "weather?"}]},
            {"role": "model", "parts": [{"functionCall": call}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "18C"}}}]},
        ],
        "systemInstruction": {"parts": [{"text": "be brief"}]},
    })
    .to_string();
    let r = both(&mock, || request("POST", GEN, "tokens=2", &round)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["usageMetadata"]["candidatesTokenCount"], 2);
}

#[tokio::test]
async fn max_output_tokens_and_stop_sequences() {
    let mock = mock("tokens=40").await;
    let capped =
        r#"{"contents":[{"parts":[{"text":"x"}]}],"generationConfig":{"maxOutputTokens":3}}"#;
    let v = both(&mock, || request("POST", GEN, "", capped))
        .await
        .json();
    assert_eq!(v["candidates"][0]["finishReason"], "MAX_TOKENS");
    assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 3);
    let full = parts_text(
        &both(&mock, || {
            request(
                "POST",
                GEN,
                "",
                r#"{"contents":[{"parts":[{"text":"x"}]}]}"#,
            )
        })
        .await
        .json(),
    );
    assert!(
        full.starts_with(&parts_text(&v)),
        "a cap only truncates the answer"
    );
    let stop = &full[full.len() / 2..full.len() / 2 + 4];
    let body =
        json!({"contents":[{"parts":[{"text":"x"}]}],"generationConfig":{"stopSequences":[stop]}})
            .to_string();
    let v = both(&mock, || request("POST", GEN, "", &body)).await.json();
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert_eq!(parts_text(&v), full[..full.find(stop).unwrap()]);
}

#[tokio::test]
async fn v1_spelling_api_key_models_and_count_tokens() {
    let mock = mock("require_header=x-goog-api-key").await;
    let mut req = request(
        "POST",
        "/v1/models/gemini-2.5-flash:generateContent?key=ignored",
        "",
        BODY,
    );
    req.headers_mut()
        .insert("x-goog-api-key", "k".parse().unwrap());
    let r = h1(mock.addr(), req).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = h1(mock.addr(), request("POST", GEN, "", BODY)).await;
    assert_eq!(r.status, 400);
    let e = &r.json()["error"];
    assert_eq!(e["status"], "INVALID_ARGUMENT");
    assert_eq!(e["details"][0]["reason"], "missing_goog_api_key");
    let mock = mock_default().await;
    let models = h1(mock.addr(), request("GET", "/v1beta/models", "", ""))
        .await
        .json();
    let first = &models["models"][0];
    assert!(first["name"].as_str().unwrap().starts_with("models/"));
    assert!(first["supportedGenerationMethods"]
        .as_array()
        .unwrap()
        .contains(&json!("generateContent")));
    let one = h1(
        mock.addr(),
        request("GET", "/v1beta/models/gemini-x", "", ""),
    )
    .await
    .json();
    assert_eq!(one["name"], "models/gemini-x");
    let gen = h1(mock.addr(), request("POST", GEN, "", BODY)).await.json();
    let count = h1(
        mock.addr(),
        request(
            "POST",
            "/v1beta/models/gemini-2.5-flash:countTokens",
            "",
            BODY,
        ),
    )
    .await
    .json();
    assert_eq!(
        count["totalTokens"],
        gen["usageMetadata"]["promptTokenCount"]
    );
    let wrapped = format!(r#"{{"generateContentRequest":{BODY}}}"#);
    let count = h1(
        mock.addr(),
        request(
            "POST",
            "/v1beta/models/gemini-2.5-flash:countTokens",
            "",
            &wrapped,
        ),
    )
    .await
    .json();
    assert_eq!(
        count["totalTokens"],
        gen["usageMetadata"]["promptTokenCount"]
    );
}

#[tokio::test]
async fn bad_requests_get_gemini_errors() {
    let mock = mock_default().await;
    for (body, says) in [
        (r#"{"messages":[]}"#, "Unknown name \"messages\""),
        (r#"{"contents":[]}"#, "contents is not specified"),
        (
            r#"{"contents":[{"role":"assistant","parts":[{"text":"x"}]}]}"#,
            "valid role",
        ),
        ("{", "not valid JSON"),
    ] {
        let r = h1(mock.addr(), request("POST", GEN, "", body)).await;
        assert_eq!(r.status, 400, "{body}");
        let e = &r.json()["error"];
        assert_eq!(e["code"], 400);
        assert_eq!(e["status"], "INVALID_ARGUMENT");
        assert!(e["message"].as_str().unwrap().contains(says), "{body}: {e}");
    }
    let r = h1(
        mock.addr(),
        request("POST", "/v1beta/models/g:explode", "", BODY),
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["error"]["status"]),
        (404, &json!("NOT_FOUND"))
    );
    let r = h1(mock.addr(), request("GET", GEN, "", "")).await;
    assert_eq!(r.status, 405);
    let r = h1(mock.addr(), request("POST", GEN, "status=503", BODY)).await;
    assert_eq!(r.json()["error"]["status"], "UNAVAILABLE");
    let r = h1(mock.addr(), request("POST", GEN, "tokens=x", BODY)).await;
    assert_eq!(r.json()["error"]["details"][0]["reason"], "invalid_x_mock");
}
