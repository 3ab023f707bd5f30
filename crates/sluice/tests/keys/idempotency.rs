//! `Idempotency-Key`: a duplicate of a non-streaming request in flight waits for it and gets
//! its response; a streaming duplicate gets 409; a completed response is replayed; another
//! body with the same key gets 422; a failure is not stored, so a retry runs again.

use crate::support::*;
use crate::{bearer, gateway, hash, post, CHAT};

const ROUTES: &str = "[[route]]\nname = \"chat\"\nmodels = [\"*\"]\nupstream = \"mock\"\n";

fn keys() -> String {
    format!(
        "[[key]]\nid = \"a\"\nhash = \"{}\"\n\n[[key]]\nid = \"b\"\nhash = \"{}\"\n",
        hash("sk-alpha"),
        hash("sk-beta")
    )
}

fn with(
    mut req: http::Request<bytes::Bytes>,
    idem: &str,
    xmock: &str,
) -> http::Request<bytes::Bytes> {
    req.headers_mut()
        .insert("idempotency-key", idem.parse().unwrap());
    if !xmock.is_empty() {
        req.headers_mut().insert("x-mock", xmock.parse().unwrap());
    }
    req
}

#[tokio::test]
async fn a_duplicate_in_flight_waits_and_gets_the_same_response_then_replays() {
    let mock = mock("").await;
    let gw = gateway(&mock, ROUTES, &keys()).await;
    let send = |idem: &'static str| {
        let addr = gw.addr();
        async move {
            let req = with(
                post("/v1/chat/completions", bearer("sk-alpha"), CHAT),
                idem,
                "ttft_ms=300",
            );
            h1(addr, req).await
        }
    };
    let (a, b) = tokio::join!(send("order-1"), send("order-1"));
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 200));
    assert_eq!(a.body, b.body, "one answer for both");
    let replayed = |r: &Resp| r.headers.get("idempotent-replayed").is_some();
    assert!(replayed(&a) != replayed(&b), "exactly one was replayed");
    assert_ne!(a.headers["x-request-id"], b.headers["x-request-id"]);
    assert_eq!(
        mock.stats().snapshot().requests.len(),
        1,
        "the upstream ran it once"
    );
    // Completed: replayed for the TTL.
    let c = send("order-1").await;
    assert_eq!(c.body, a.body);
    assert_eq!(c.headers["idempotent-replayed"], "true");
    assert_eq!(c.headers["content-type"], "application/json");
    assert_eq!(mock.stats().snapshot().requests.len(), 1);
    // Another key's records are its own.
    let req = with(
        post("/v1/chat/completions", bearer("sk-beta"), CHAT),
        "order-1",
        "",
    );
    let d = h1(gw.addr(), req).await;
    assert_eq!(d.status, 200);
    assert!(d.headers.get("idempotent-replayed").is_none());
    assert_eq!(mock.stats().snapshot().requests.len(), 2);
    let metrics = gw.telemetry().encode();
    for (outcome, n) in [("fresh", 2), ("waited", 1), ("replayed", 1)] {
        assert!(
            metrics.contains(&format!(
                "sluice_idempotency_total{{outcome=\"{outcome}\"}} {n}"
            )),
            "{outcome}: {metrics}"
        );
    }
}

#[tokio::test]
async fn another_body_is_422_a_streaming_duplicate_409_and_a_failure_runs_again() {
    let mock = mock("").await;
    let gw = gateway(&mock, ROUTES, &keys()).await;
    let r = h1(
        gw.addr(),
        with(
            post("/v1/chat/completions", bearer("sk-alpha"), CHAT),
            "k1",
            "",
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    let other = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"bye"}]}"#;
    let r = h1(
        gw.addr(),
        with(
            post("/v1/chat/completions", bearer("sk-alpha"), other),
            "k1",
            "",
        ),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["error"]["code"], "idempotency_key_reused");

    // A stream in flight: its duplicate is refused at once.
    let stream = r#"{"model":"gpt-4o","stream":true,"messages":[]}"#;
    let h2c = h2_connect(gw.addr()).await;
    let first = h2_send(
        &h2c,
        with(
            post("/v1/chat/completions", bearer("sk-alpha"), stream),
            "s1",
            "tokens=100, interval_ms=10",
        ),
    )
    .await
    .unwrap();
    assert_eq!(first.status(), 200);
    let r = h1(
        gw.addr(),
        with(
            post("/v1/chat/completions", bearer("sk-alpha"), stream),
            "s1",
            "",
        ),
    )
    .await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["error"]["code"], "idempotency_key_in_use");
    drop(first);

    // An upstream failure is not stored: the retry runs.
    for _ in 0..2 {
        let r = h1(
            gw.addr(),
            with(
                post("/v1/chat/completions", bearer("sk-alpha"), CHAT),
                "f1",
                "status=400",
            ),
        )
        .await;
        assert_eq!(r.status, 400);
        assert!(r.headers.get("idempotent-replayed").is_none());
    }
    let snap = mock.stats().snapshot();
    assert_eq!(snap.requests.iter().filter(|r| r.status == 400).count(), 2);
    // A bad header is the client's error.
    let r = h1(
        gw.addr(),
        with(
            post("/v1/chat/completions", bearer("sk-alpha"), CHAT),
            &"x".repeat(300),
            "",
        ),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], "invalid_idempotency_key");
}

#[tokio::test]
async fn requests_without_keys_are_deduplicated_too() {
    let mock = mock("").await;
    let gw = gateway(&mock, ROUTES.replace("\"mock\"", "\"open\"").as_str(), "").await;
    let send = || {
        let addr = gw.addr();
        async move {
            h1(
                addr,
                with(
                    post("/v1/chat/completions", None, CHAT),
                    "anon-1",
                    "ttft_ms=200",
                ),
            )
            .await
        }
    };
    let (a, b) = tokio::join!(send(), send());
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 200));
    assert_eq!(a.body, b.body);
    assert_eq!(mock.stats().snapshot().requests.len(), 1);
}
