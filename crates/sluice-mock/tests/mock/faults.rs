//! Injected faults and flow control, observed on the wire and in the stats.

use std::time::Duration;

use http_body_util::BodyExt;
use sluice_mock::{MockConfig, MockServer, Outcome};
use tokio::time::{sleep, Instant};

use crate::support::*;

const STREAM: &str = r#"{"model":"m","stream":true}"#;

#[tokio::test]
async fn abort_after_closes_http1_connection_mid_stream() {
    let mock = mock("tokens=5").await;
    let mut send = h1_connect(mock.addr()).await;
    let resp = h1_send(
        &mut send,
        request("POST", "/v1/chat/completions", "abort_after=3", STREAM),
    )
    .await;
    let id: u64 = resp.headers()["x-mock-request-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut body = resp.into_body();
    let mut got = Vec::new();
    let err = loop {
        match body.frame().await {
            Some(Ok(f)) => got.extend_from_slice(f.data_ref().unwrap()),
            Some(Err(e)) => break Some(e),
            None => break None,
        }
    };
    assert!(
        err.is_some(),
        "the body must end in an error, not a clean end"
    );
    assert_eq!(sse(&got).len(), 3);
    assert!(send.is_closed() || send.ready().await.is_err());
    let snap = wait_for(mock.stats(), "aborted", |s| {
        s.request(id).is_some_and(|r| r.outcome == Outcome::Aborted)
    })
    .await;
    assert_eq!(snap.request(id).unwrap().events_sent, 3);
}

#[tokio::test]
async fn abort_after_resets_http2_stream_with_internal_error() {
    // The gap lets the client take the headers before the reset arrives.
    let mock = mock("tokens=5, interval_ms=30").await;
    let send = h2_connect(mock.addr()).await;
    let resp = h2_send(
        &send,
        request("POST", "/v1/chat/completions", "abort_after=2", STREAM),
    )
    .await
    .unwrap();
    let mut body = resp.into_body();
    let mut events = 0;
    let err = loop {
        match body.data().await {
            Some(Ok(d)) => {
                events += sse(&d).len();
                let _ = body.flow_control().release_capacity(d.len());
            }
            Some(Err(e)) => break e,
            None => panic!("stream ended cleanly"),
        }
    };
    assert_eq!(err.reason(), Some(h2::Reason::INTERNAL_ERROR));
    assert_eq!(events, 2);
    // The connection itself survives an aborted stream.
    let r = h2(&send, request("POST", "/v1/chat/completions", "", STREAM)).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn stall_after_goes_silent() {
    let mock = mock("tokens=3").await;
    let send = h2_connect(mock.addr()).await;
    let resp = h2_send(
        &send,
        request("POST", "/v1/chat/completions", "stall_after=2:400", STREAM),
    )
    .await
    .unwrap();
    let mut body = resp.into_body();
    let mut arrivals = Vec::new();
    while let Some(d) = body.data().await {
        let d = d.unwrap();
        let _ = body.flow_control().release_capacity(d.len());
        for _ in 0..sse(&d).len() {
            arrivals.push(Instant::now());
        }
    }
    assert_eq!(arrivals.len(), 6);
    assert!(arrivals[2] - arrivals[1] >= Duration::from_millis(400));
}

#[tokio::test]
async fn refuse_on_http2_is_refused_stream_and_never_processed() {
    let mock = mock("").await;
    let send = h2_connect(mock.addr()).await;
    let err = h2_send(
        &send,
        request("POST", "/v1/chat/completions", "refuse", STREAM),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason(), Some(h2::Reason::REFUSED_STREAM));
    let snap = mock.stats().snapshot();
    assert!(
        snap.requests.is_empty(),
        "a refused stream is not a processed request"
    );
    assert_eq!(snap.totals.refused, 1);
    assert_eq!(snap.connections[0].refused_streams, 1);
}

#[tokio::test]
async fn refuse_on_http1_closes_without_a_response() {
    let mock = mock("").await;
    let mut send = h1_connect(mock.addr()).await;
    send.ready().await.unwrap();
    let (parts, body) = request("POST", "/v1/chat/completions", "refuse", STREAM).into_parts();
    let req = http::Request::from_parts(parts, http_body_util::Full::new(body));
    assert!(send.send_request(req).await.is_err());
    assert!(mock.stats().snapshot().requests.is_empty());
}

#[tokio::test]
async fn goaway_after_finishes_accepted_streams_and_takes_no_more() {
    let mock = mock("tokens=5, interval_ms=60").await;
    let send = h2_connect(mock.addr()).await;
    let a = tokio::spawn({
        let send = send.clone();
        async move {
            h2(
                &send,
                request("POST", "/v1/chat/completions", "goaway_after=2", STREAM),
            )
            .await
        }
    });
    let b = tokio::spawn({
        let send = send.clone();
        async move {
            sleep(Duration::from_millis(20)).await;
            h2(&send, request("POST", "/v1/chat/completions", "", STREAM)).await
        }
    });
    wait_for(mock.stats(), "goaway", |s| {
        s.connections.iter().any(|c| c.goaway_at.is_some())
    })
    .await;
    sleep(Duration::from_millis(50)).await;
    let late = h2_send(&send, request("POST", "/v1/chat/completions", "", STREAM)).await;
    let err = late.expect_err("no stream may start after GOAWAY");
    assert!(
        err.is_go_away() || err.reason() == Some(h2::Reason::REFUSED_STREAM),
        "{err:?}"
    );
    for r in [a.await.unwrap(), b.await.unwrap()] {
        assert_eq!(
            sse(&r.body).last().unwrap().1,
            "[DONE]",
            "accepted streams finish"
        );
    }
    let snap = wait_for(mock.stats(), "connection closed", |s| {
        s.connections[0].closed_at.is_some()
    })
    .await;
    assert_eq!(snap.totals.goaways, 1);
    assert_eq!(snap.totals.completed, 2);
}

#[tokio::test]
async fn goaway_refuses_streams_racing_it() {
    // Stream 3 is sent before the client can have seen the GOAWAY that stream 1 triggers:
    // it must come back as not processed (REFUSED_STREAM or above GOAWAY's last-stream-id).
    let mock = mock("tokens=3, interval_ms=50").await;
    let send = h2_connect(mock.addr()).await;
    let first = h2_send(
        &send,
        request("POST", "/v1/chat/completions", "goaway_after=1", STREAM),
    );
    let second = h2_send(&send, request("POST", "/v1/chat/completions", "", STREAM));
    let (first, second) = tokio::join!(first, second);
    let mut body = first.unwrap().into_body();
    let chunks = h2_chunks(&mut body).await.unwrap();
    assert_eq!(sse(&chunks.concat()).last().unwrap().1, "[DONE]");
    let err = second.expect_err("the racing stream is not processed");
    assert!(
        err.is_go_away() || err.reason() == Some(h2::Reason::REFUSED_STREAM),
        "{err:?}"
    );
    let snap = mock.stats().snapshot();
    assert_eq!(
        snap.requests.len(),
        1,
        "only the first stream was processed"
    );
}

#[tokio::test]
async fn max_concurrent_streams_setting_is_announced_and_held() {
    let mock = MockServer::start(MockConfig {
        h2_max_concurrent_streams: Some(1),
        defaults: sluice_mock::Behavior::default()
            .with_spec("tokens=3, interval_ms=30")
            .unwrap(),
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let send = h2_connect(mock.addr()).await;
    // One round trip first: a client may open streams before the server's SETTINGS arrive, and
    // h2 rightly refuses those.
    h2(
        &send,
        request("POST", "/v1/chat/completions", "tokens=1", STREAM),
    )
    .await;
    let (a, b) = tokio::join!(
        h2(&send, request("POST", "/v1/chat/completions", "", STREAM)),
        h2(&send, request("POST", "/v1/chat/completions", "", STREAM)),
    );
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 200));
    assert_eq!(send.current_max_send_streams(), 1);
    let snap = mock.stats().snapshot();
    assert_eq!(snap.connections[0].max_concurrent_streams, 1);
    assert_eq!(snap.connections[0].streams_total, 3);
}

#[tokio::test]
async fn degrade_throttles_every_stream_of_the_connection() {
    let mock = mock("").await;
    let send = h2_connect(mock.addr()).await;
    // The first request degrades its connection to 50 kB/s...
    let r = h2(
        &send,
        request(
            "POST",
            "/v1/chat/completions",
            "degrade=50000, tokens=1",
            STREAM,
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    // ...so a 100 kB response on the same connection takes at least ~2 s, while the same
    // response on another connection is not throttled at all.
    let t0 = Instant::now();
    let slow = h2(
        &send,
        request(
            "POST",
            "/v1/chat/completions",
            "body_bytes=100000",
            r#"{"model":"m"}"#,
        ),
    )
    .await;
    let slow_t = t0.elapsed();
    let other = h2_connect(mock.addr()).await;
    let t1 = Instant::now();
    let fast = h2(
        &other,
        request(
            "POST",
            "/v1/chat/completions",
            "body_bytes=100000",
            r#"{"model":"m"}"#,
        ),
    )
    .await;
    let fast_t = t1.elapsed();
    assert_eq!(slow.body, fast.body);
    assert!(slow_t >= Duration::from_millis(1800), "{slow_t:?}");
    assert!(fast_t < slow_t / 4, "fast {fast_t:?} vs slow {slow_t:?}");
    let snap = mock.stats().snapshot();
    assert_eq!(snap.connections[0].degrade_bytes_per_s, Some(50_000));
    assert_eq!(snap.connections[1].degrade_bytes_per_s, None);
}

#[tokio::test]
async fn writes_block_when_an_http2_client_does_not_read() {
    let mock = mock("").await;
    let send = h2_connect(mock.addr()).await;
    // 200 kB: well past the 64 KiB default stream window.
    let resp = h2_send(
        &send,
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=200, token_bytes=1000",
            STREAM,
        ),
    )
    .await
    .unwrap();
    let id: u64 = resp.headers()["x-mock-request-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    sleep(Duration::from_millis(500)).await;
    let snap = mock.stats().snapshot();
    let rec = snap.request(id).unwrap();
    assert!(
        rec.bytes_sent < 100_000,
        "the mock must not buffer past flow control: {}",
        rec.bytes_sent
    );
    assert_eq!(rec.outcome, Outcome::InProgress);
    let mut body = resp.into_body();
    h2_chunks(&mut body).await.unwrap();
    let snap = wait_for(mock.stats(), "completed", |s| {
        s.request(id).unwrap().outcome == Outcome::Completed
    })
    .await;
    let blocked = snap.request(id).unwrap().write_blocked;
    assert!(blocked >= Duration::from_millis(400), "{blocked:?}");
}

#[tokio::test]
async fn writes_block_when_an_http1_client_does_not_read() {
    let mock = mock("").await;
    let mut send = h1_connect(mock.addr()).await;
    // 16 MB: more than loopback socket buffers hold.
    let resp = h1_send(
        &mut send,
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=4000, token_bytes=4000",
            STREAM,
        ),
    )
    .await;
    let id: u64 = resp.headers()["x-mock-request-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // Wait until the writer stalls (the buffers are full), however slow the machine is...
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = 0;
    let sent = loop {
        sleep(Duration::from_millis(150)).await;
        let sent = mock.stats().snapshot().request(id).unwrap().bytes_sent;
        if sent > 0 && sent == last {
            break sent;
        }
        assert!(
            Instant::now() < deadline,
            "the writer never stalled: {sent} bytes"
        );
        last = sent;
    };
    assert!(
        sent < 12_000_000,
        "writes must block: {sent} bytes sent to a client that reads nothing"
    );
    // ...and keep it blocked a while longer before reading.
    sleep(Duration::from_millis(400)).await;
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(body.len() > 16_000_000);
    let snap = wait_for(mock.stats(), "completed", |s| {
        s.request(id).unwrap().outcome == Outcome::Completed
    })
    .await;
    assert!(snap.request(id).unwrap().write_blocked >= Duration::from_millis(300));
}
