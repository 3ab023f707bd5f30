//! Bedrock over real sockets: SigV4 verified (signed requests accepted, tampered and unsigned
//! ones refused with AWS's exceptions), Converse answered, ConverseStream framed as
//! event-stream messages that `sluice_providers`' decoder and `BedrockStream` read back into
//! OpenAI chunks, InvokeModel with Anthropic bodies, and the fault knobs in Bedrock's shapes.

use bytes::{Bytes, BytesMut};
use http::Request;
use serde_json::{json, Value};
use sluice_mock::{AwsKey, CloudConfig, MockConfig, MockServer};
use sluice_providers::bedrock::{self, BedrockRequestOptions, BedrockStream, BedrockStreamOptions};
use sluice_providers::eventstream::{Decoder, Message};
use sluice_providers::sign::credentials::Credentials;
use sluice_providers::sign::sigv4::{self, SignableBody, SignableRequest, SigningParams};
use sluice_providers::stream::Emitted;
use sluice_providers::{ErrorClass, Operation};

use crate::support::*;

const MODEL: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";
const CONVERSE: &str = r#"{"messages":[{"role":"user","content":[{"text":"hello"}]}],"inferenceConfig":{"maxTokens":64}}"#;

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A request to `path` signed by `key` over `signed_body`, carrying `body` (the same unless a
/// test tampers with it). `host` is what the helpers send: `mock`.
fn signed_with(
    path: &str,
    signed_body: &str,
    body: &str,
    key: &AwsKey,
    xmock: &str,
) -> Request<Bytes> {
    let creds = Credentials::new(
        key.access_key_id.clone(),
        key.secret_access_key.clone(),
        key.session_token.clone(),
    );
    let sig = sigv4::sign(
        &SignableRequest {
            method: "POST",
            uri: path,
            headers: &[("host", "mock"), ("content-type", "application/json")],
            body: SignableBody::Bytes(signed_body.as_bytes()),
        },
        &SigningParams {
            credentials: &creds,
            region: "us-east-1",
            service: bedrock::SIGNING_SERVICE,
            time_unix: now_unix(),
            settings: Default::default(),
        },
    )
    .unwrap();
    let mut req = request("POST", path, xmock, body);
    req.headers_mut().insert("host", "mock".parse().unwrap());
    for (k, v) in sig.headers {
        req.headers_mut().insert(k, v);
    }
    req
}

fn signed(path: &str, body: &str, xmock: &str) -> Request<Bytes> {
    signed_with(path, body, body, &AwsKey::test(), xmock)
}

fn decode_all(body: &[u8]) -> Vec<Message> {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    // Re-chunked at odd sizes, as a network delivers it.
    for chunk in body.chunks(7) {
        d.push(chunk);
        while let Some(m) = d.next_message().expect("valid frames and CRCs") {
            out.push(m);
        }
    }
    d.finish().expect("no partial message at the end");
    out
}

fn event_types(ms: &[Message]) -> Vec<String> {
    ms.iter()
        .map(|m| {
            m.header_str(":event-type")
                .or(m.header_str(":exception-type"))
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

/// The client-side SSE of a translated stream: each `data:` JSON.
fn chunks(emitted: &[Emitted]) -> Vec<Value> {
    let all: Vec<u8> = emitted.iter().flat_map(|e| e.bytes.to_vec()).collect();
    sse(&all)
        .into_iter()
        .filter(|(_, d)| d != "[DONE]")
        .map(|(_, d)| serde_json::from_str(&d).unwrap())
        .collect()
}

#[tokio::test]
async fn signed_requests_are_accepted_on_both_protocols() {
    let mock = mock_default().await;
    let path = bedrock::converse_path(MODEL, false);
    let r1 = h1(mock.addr(), signed(&path, CONVERSE, "tokens=5")).await;
    let send = h2_connect(mock.addr()).await;
    let r2 = h2(&send, signed(&path, CONVERSE, "tokens=5")).await;
    assert_eq!(
        (r1.status.as_u16(), r2.status.as_u16()),
        (200, 200),
        "{:?}",
        r1.body
    );
    assert_eq!(r1.body, r2.body);
    let v = r1.json();
    assert_eq!(v["stopReason"], "end_turn");
    assert_eq!(v["output"]["message"]["role"], "assistant");
    assert_eq!(v["usage"]["outputTokens"], 5);
    let snap = mock.stats().snapshot();
    let rec = snap.request(r1.request_id()).unwrap();
    assert_eq!(rec.api, Some(sluice_mock::Api::Bedrock));
    assert_eq!(rec.model.as_deref(), Some(MODEL), "the path's id, decoded");
    assert_eq!(rec.auth, Some("sigv4_accepted"));
    assert_eq!(snap.totals.auth.sigv4_accepted, 2);
}

#[tokio::test]
async fn tampered_unsigned_and_unknown_requests_are_refused() {
    let mock = mock_default().await;
    let path = bedrock::converse_path(MODEL, false);
    let exception = |r: &Resp| {
        let t = r.headers["x-amzn-errortype"].to_str().unwrap().to_string();
        (
            r.status.as_u16(),
            t.split(':').next().unwrap().to_string(),
            r.json()["message"].as_str().unwrap().to_string(),
        )
    };
    // The body changed after signing.
    let tampered = CONVERSE.replace("hello", "HELLO");
    let r = h1(
        mock.addr(),
        signed_with(&path, CONVERSE, &tampered, &AwsKey::test(), ""),
    )
    .await;
    let (status, kind, message) = exception(&r);
    assert_eq!((status, kind.as_str()), (403, "InvalidSignatureException"));
    assert!(
        message.starts_with("The request signature we calculated does not match"),
        "{message}"
    );
    // Signed for another path.
    let other = bedrock::converse_path("amazon.nova-pro-v1:0", false);
    let mut req = signed(&other, CONVERSE, "");
    *req.uri_mut() = format!("http://mock{path}").parse().unwrap();
    assert_eq!(
        exception(&h1(mock.addr(), req).await).1,
        "InvalidSignatureException"
    );
    // The right key id with the wrong secret, an unknown key id, no signature at all.
    let wrong = AwsKey {
        secret_access_key: "not-the-secret".into(),
        ..AwsKey::test()
    };
    let r = h1(
        mock.addr(),
        signed_with(&path, CONVERSE, CONVERSE, &wrong, ""),
    )
    .await;
    assert_eq!(exception(&r).1, "InvalidSignatureException");
    let stranger = AwsKey {
        access_key_id: "AKIDNOBODY".into(),
        ..AwsKey::test()
    };
    let r = h1(
        mock.addr(),
        signed_with(&path, CONVERSE, CONVERSE, &stranger, ""),
    )
    .await;
    assert_eq!(exception(&r).1, "UnrecognizedClientException");
    let r = h1(mock.addr(), request("POST", &path, "", CONVERSE)).await;
    assert_eq!(
        exception(&r),
        (
            403,
            "MissingAuthenticationTokenException".into(),
            "Missing Authentication Token".into()
        )
    );
    // The gateway's classifier reads them as auth failures.
    let e = bedrock::classify(r.status, &r.headers, &r.body, now_unix());
    assert_eq!(e.class, ErrorClass::Auth);
    let totals = mock.stats().totals();
    assert_eq!(
        (totals.auth.sigv4_accepted, totals.auth.sigv4_rejected),
        (0, 5)
    );
}

#[tokio::test]
async fn a_configured_key_and_region_are_enforced() {
    let key = AwsKey {
        access_key_id: "AKIDCONFIGURED".into(),
        secret_access_key: "s3cr3t".into(),
        session_token: Some("session".into()),
    };
    let mock = MockServer::start_with(
        MockConfig::default(),
        CloudConfig {
            aws_keys: vec![key.clone()],
            aws_region: Some("us-east-1".into()),
            ..CloudConfig::default()
        },
    )
    .await
    .unwrap();
    let path = bedrock::converse_path(MODEL, false);
    let ok = h1(
        mock.addr(),
        signed_with(&path, CONVERSE, CONVERSE, &key, ""),
    )
    .await;
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    let test_key = h1(mock.addr(), signed(&path, CONVERSE, "")).await;
    assert_eq!(
        test_key.status, 403,
        "the built-in key is not configured here"
    );
}

#[tokio::test]
async fn converse_stream_is_event_stream_framed_and_translates_to_openai_chunks() {
    let mock = mock_default().await;
    let path = bedrock::converse_path(MODEL, true);
    for proto in ["h1", "h2"] {
        let req = signed(&path, CONVERSE, "tokens=6, interval_ms=1");
        let r = if proto == "h1" {
            h1(mock.addr(), req).await
        } else {
            h2(&h2_connect(mock.addr()).await, req).await
        };
        assert_eq!(r.status, 200);
        assert_eq!(
            r.headers["content-type"],
            "application/vnd.amazon.eventstream"
        );
        let messages = decode_all(&r.body);
        let types = event_types(&messages);
        assert_eq!(types.first().map(String::as_str), Some("messageStart"));
        assert_eq!(
            &types[types.len() - 3..],
            ["contentBlockStop", "messageStop", "metadata"]
        );
        assert_eq!(
            types.iter().filter(|t| *t == "contentBlockDelta").count(),
            6
        );
        let text: String = messages
            .iter()
            .filter(|m| m.header_str(":event-type") == Some("contentBlockDelta"))
            .map(|m| {
                serde_json::from_slice::<Value>(&m.payload).unwrap()["delta"]["text"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();

        // The gateway's translator reads the same bytes into OpenAI chunks.
        let mut opts = BedrockStreamOptions::new(Operation::ChatCompletions, MODEL);
        opts.client_wants_usage = true;
        let mut t = BedrockStream::new(&opts);
        let mut out = Vec::new();
        for c in r.body.chunks(5) {
            t.feed(c, &mut out);
        }
        t.end(&mut out);
        assert!(t.error().is_none(), "{:?}", t.error());
        let cs = chunks(&out);
        let joined: String = cs
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(joined, text, "{proto}");
        assert!(cs
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "stop"));
        let usage = cs
            .iter()
            .find_map(|c| c.get("usage").filter(|u| !u.is_null()))
            .unwrap();
        assert_eq!(usage["completion_tokens"], 6);
        assert_eq!(t.usage().unwrap().output, 6);
    }
}

#[tokio::test]
async fn stream_faults_are_bedrock_exceptions() {
    let mock = mock_default().await;
    let path = bedrock::converse_path(MODEL, true);
    // An exception after two deltas: an exception message, then the end.
    let r = h1(
        mock.addr(),
        signed(&path, CONVERSE, "tokens=6, stream_error_after=2:rate_limit"),
    )
    .await;
    let messages = decode_all(&r.body);
    let last = messages.last().unwrap();
    assert_eq!(last.header_str(":message-type"), Some("exception"));
    assert_eq!(
        last.header_str(":exception-type"),
        Some("throttlingException")
    );
    let mut t = BedrockStream::new(&BedrockStreamOptions::new(Operation::Messages, MODEL));
    let mut out = Vec::new();
    t.feed(&r.body, &mut out);
    t.end(&mut out);
    assert_eq!(t.error().map(|e| e.class), Some(ErrorClass::RateLimited));
    assert_eq!(t.text().len(), 0, "text is tracked only when asked");

    // Before the response: `status`, `error`, `fail_first` in Bedrock's shape.
    let r = h1(mock.addr(), signed(&path, CONVERSE, "status=429")).await;
    assert_eq!(r.status, 429);
    assert!(r.headers["x-amzn-errortype"]
        .to_str()
        .unwrap()
        .starts_with("ThrottlingException:"));
    assert!(r.headers.get("retry-after").is_none(), "Bedrock sends none");
    assert_eq!(
        bedrock::classify(r.status, &r.headers, &r.body, 0).class,
        ErrorClass::RateLimited
    );
    for (knob, class) in [
        ("error=overloaded", ErrorClass::Overloaded),
        ("error=server", ErrorClass::ServerError),
        ("error=context_length", ErrorClass::ContextLength),
        ("error=quota", ErrorClass::RateLimited),
        (
            "fail_first=1, fail_key=bedrock-k, fail_with=rate_limit",
            ErrorClass::RateLimited,
        ),
    ] {
        let r = h1(
            mock.addr(),
            signed(&bedrock::converse_path(MODEL, false), CONVERSE, knob),
        )
        .await;
        let e = bedrock::classify(r.status, &r.headers, &r.body, 0);
        assert_eq!(e.class, class, "{knob}: {:?}", r.body);
    }
    // The content filter is an answer: `content_filtered`, streamed or not.
    let r = h1(
        mock.addr(),
        signed(
            &bedrock::converse_path(MODEL, false),
            CONVERSE,
            "error=content_filter",
        ),
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["stopReason"].as_str()),
        (200, Some("content_filtered"))
    );
    let r = h1(
        mock.addr(),
        signed(&path, CONVERSE, "stream_error_after=2:content_filter"),
    )
    .await;
    let stop = decode_all(&r.body)
        .into_iter()
        .find(|m| m.header_str(":event-type") == Some("messageStop"))
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&stop.payload).unwrap()["stopReason"],
        "content_filtered"
    );
    // A prompt filtered before any content, streamed: the OpenAI client gets a
    // `content_filter` finish and no error.
    let r = h1(mock.addr(), signed(&path, CONVERSE, "error=content_filter")).await;
    let mut t = BedrockStream::new(&BedrockStreamOptions::new(
        Operation::ChatCompletions,
        MODEL,
    ));
    let mut out = Vec::new();
    t.feed(&r.body, &mut out);
    t.end(&mut out);
    assert!(t.error().is_none(), "{:?}", t.error());
    assert!(chunks(&out)
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "content_filter"));
}

#[tokio::test]
async fn invoke_model_takes_anthropic_bodies() {
    let mock = mock_default().await;
    let client = Bytes::from_static(br#"{"model":"claude","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#);
    let mut opts = BedrockRequestOptions::new(Operation::Messages);
    opts.model = Some(MODEL);
    let up = bedrock::invoke_request(&client, &opts).unwrap();
    assert!(up.stream);
    let body = std::str::from_utf8(&up.body).unwrap();
    let r = h1(mock.addr(), signed(&up.path, body, "tokens=3")).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let mut events = BytesMut::new();
    for m in decode_all(&r.body) {
        assert_eq!(m.header_str(":event-type"), Some("chunk"));
        events.extend_from_slice(&bedrock::invoke_stream_event(&m).unwrap().unwrap());
    }
    let names: Vec<_> = sse(&events).into_iter().map(|(e, _)| e.unwrap()).collect();
    assert_eq!(names.first().map(String::as_str), Some("message_start"));
    assert_eq!(names.last().map(String::as_str), Some("message_stop"));

    let whole = bedrock::invoke_path(MODEL, false);
    let plain = r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = h1(mock.addr(), signed(&whole, plain, "")).await;
    assert_eq!(r.json()["type"], "message");
    let with_model =
        r#"{"model":"x","anthropic_version":"bedrock-2023-05-31","max_tokens":20,"messages":[]}"#;
    let r = h1(mock.addr(), signed(&whole, with_model, "")).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("extraneous key [model]"));
}

#[tokio::test]
async fn a_translated_openai_request_round_trips() {
    let mock = mock_default().await;
    let client = Bytes::from(
        json!({"model": "gpt-4o", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"}], "max_tokens": 40, "stop": ["zzz"]})
        .to_string(),
    );
    let mut opts = BedrockRequestOptions::new(Operation::ChatCompletions);
    opts.model = Some(MODEL);
    let up = bedrock::translate_request(&client, &opts).unwrap();
    let r = h1(
        mock.addr(),
        signed(&up.path, std::str::from_utf8(&up.body).unwrap(), "tokens=4"),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let out = bedrock::translate_response(
        &r.body,
        &sluice_providers::bedrock::BedrockResponseOptions {
            op: Operation::ChatCompletions,
            model: MODEL,
            id: None,
            now_unix: 0,
        },
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(out.usage.unwrap().output, 4);
}
