//! Errors speak the client's API: before the response, the provider's JSON and status.

use crate::support::*;
use crate::{gateway, gateway_at, Setup, CHAT};

#[tokio::test]
async fn request_errors_in_openai_and_anthropic_shapes() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: "max_request_body = \"1KiB\"",
            ..Default::default()
        },
    )
    .await;
    let big = format!(r#"{{"model":"gpt-4o","pad":"{}"}}"#, "x".repeat(2000));
    let cases = [
        ("/v1/chat/completions", "{", 400, "invalid_json"),
        ("/v1/chat/completions", "[]", 400, "invalid_json"),
        (
            "/v1/chat/completions",
            r#"{"messages":[]}"#,
            400,
            "missing_model",
        ),
        ("/v1/chat/completions", big.as_str(), 413, "body_too_large"),
        ("/v1/nothing", CHAT, 404, "unknown_url"),
    ];
    for (path, body, status, code) in cases {
        for h2c in [false, true] {
            let req = request("POST", path, "", body);
            let r = if h2c {
                h2(&h2_connect(gw.addr()).await, req).await
            } else {
                h1(gw.addr(), req).await
            };
            assert_eq!(r.status.as_u16(), status, "{path} {body:.20}");
            assert_eq!(r.json()["error"]["code"], code, "{path}");
            assert!(r.headers.contains_key("x-request-id"));
        }
    }
    let r = h1(gw.addr(), request("POST", "/v1/messages", "", "{")).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = h1(gw.addr(), request("GET", "/v1/chat/completions", "", "")).await;
    assert_eq!(r.status, 405);
    assert!(
        mock.stats().snapshot().requests.is_empty(),
        "nothing bad reached the upstream"
    );
}

#[tokio::test]
async fn unknown_model_is_a_404_model_not_found() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            models: r#"["gpt-4o*", "claude-3"]"#,
            ..Default::default()
        },
    )
    .await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", r#"{"model":"llama"}"#),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/messages",
            "",
            r#"{"model":"claude-4","max_tokens":1}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    let models = h1(gw.addr(), request("GET", "/v1/models", "", ""))
        .await
        .json();
    assert_eq!(
        models["data"][0]["id"], "claude-3",
        "literal model names are listed, globs are not"
    );
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn upstream_errors_pass_through_in_their_own_format() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "status=429", CHAT),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.json()["error"]["code"], "mock_429");
}

#[tokio::test]
async fn unreachable_upstream_is_a_502() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let gw = gateway_at(&format!("http://127.0.0.1:{port}/v1"), Setup::default()).await;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 502);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("`mock`") && msg.contains("refused"), "{msg}");
}

#[tokio::test]
async fn non_streaming_body_over_the_limit_is_a_502() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: "max_response_body = \"64KiB\"",
            ..Default::default()
        },
    )
    .await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "body_bytes=200000", CHAT),
    )
    .await;
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["error"]["code"], "upstream_response_too_large");
}

/// End-to-end headers pass both ways; hop-by-hop ones stop at the gateway.
#[tokio::test]
async fn header_policy() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            upstream: "session_header_to_body = { header = \"x-session-id\", json_pointer = \"/metadata/session_id\" }",
            ..Default::default()
        },
    )
    .await;
    let mut req = request("POST", "/v1/chat/completions", "", CHAT);
    for (k, v) in [
        ("authorization", "Bearer client-key"),
        ("cookie", "sid=abc"),
        ("x-session-id", "sess-42"),
        ("openai-organization", "org-1"),
        ("connection", "x-private"),
        ("x-private", "hop"),
        ("keep-alive", "timeout=5"),
        ("te", "gzip"),
    ] {
        req.headers_mut().insert(k, v.parse().unwrap());
    }
    let r = h1(gw.addr(), req).await;
    assert_eq!(r.status, 200);
    let rid = r.headers["x-request-id"].to_str().unwrap().to_string();
    assert!(rid.starts_with("sl-"), "{rid}");
    let snap = mock.stats().snapshot();
    let seen: std::collections::HashMap<_, _> = snap.requests[0].headers.iter().cloned().collect();
    assert_eq!(seen["authorization"], "Bearer client-key");
    assert_eq!(seen["cookie"], "sid=abc");
    assert_eq!(seen["x-session-id"], "sess-42");
    assert_eq!(seen["openai-organization"], "org-1");
    assert_eq!(seen["x-request-id"], rid);
    for gone in ["x-private", "keep-alive", "te", "connection"] {
        assert!(
            !seen.contains_key(gone),
            "{gone} must not reach the upstream"
        );
    }
    // The client's own request id is kept.
    let mut req = request("POST", "/v1/chat/completions", "", CHAT);
    req.headers_mut()
        .insert("x-request-id", "client-7".parse().unwrap());
    let r = h1(gw.addr(), req).await;
    assert_eq!(r.headers["x-request-id"], "client-7");
    assert_eq!(
        mock.stats().snapshot().requests[1]
            .headers
            .iter()
            .find(|(k, _)| k == "x-request-id")
            .unwrap()
            .1,
        "client-7"
    );
}

#[tokio::test]
async fn session_header_is_copied_into_the_body() {
    let mock = mock("require_header=x-session-id").await;
    let gw = gateway(
        &mock,
        Setup {
            upstream: "session_header_to_body = { header = \"x-session-id\", json_pointer = \"/metadata/session_id\" }",
            ..Default::default()
        },
    )
    .await;
    // The mock's content is seeded by the body: the same request with the header copied in
    // gives different content than without.
    let mut req = request("POST", "/v1/chat/completions", "", CHAT);
    req.headers_mut()
        .insert("x-session-id", "s-1".parse().unwrap());
    let with = h1(gw.addr(), req).await;
    assert_eq!(with.status, 200);
    let direct = h1(mock.addr(), {
        let mut r = request(
            "POST",
            "/v1/chat/completions",
            "",
            r#"{"model":"gpt-4o","metadata":{"session_id":"s-1"}}"#,
        );
        r.headers_mut()
            .insert("x-session-id", "s-1".parse().unwrap());
        r
    })
    .await;
    assert_eq!(
        with.body, direct.body,
        "the upstream saw metadata.session_id"
    );
    // Without the header the mock's require_header rule answers 400 missing_session_id,
    // passed through unchanged.
    let without = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(without.status, 400);
    assert_eq!(without.json()["error"]["code"], "missing_session_id");
}

#[tokio::test]
async fn bearer_auth_replaces_the_client_key() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            upstream: "auth = { type = \"bearer\", env = \"TEST_KEY\" }",
            ..Default::default()
        },
    )
    .await;
    let mut req = request("POST", "/v1/chat/completions", "", CHAT);
    req.headers_mut()
        .insert("authorization", "Bearer client".parse().unwrap());
    assert_eq!(h1(gw.addr(), req).await.status, 200);
    let snap = mock.stats().snapshot();
    let auth = &snap.requests[0]
        .headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .unwrap()
        .1;
    assert_eq!(auth, "Bearer sk-test");
}
