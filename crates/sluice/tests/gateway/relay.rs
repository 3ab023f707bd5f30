//! Byte-exact passthrough, flushing per event, heartbeats, backpressure.

use std::time::Duration;

use http_body_util::BodyExt;
use sluice_mock::Outcome;
use tokio::time::{sleep, Instant};

use crate::support::*;
use crate::{gateway, gateway_at, Setup, CHAT, STREAM};

/// A stream request that asks for usage itself: the gateway forwards it unchanged. (Without
/// it the gateway asks the upstream for usage and removes the usage chunk again, so the
/// chunks then carry the `"usage": null` that OpenAI-shaped upstreams add.)
const STREAM_U: &str =
    r#"{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true}}"#;

/// The same request directly and through the gateway gives the same bytes, on every
/// combination of client and upstream protocol.
#[tokio::test]
async fn byte_exact_passthrough() {
    let mock = mock("").await;
    for (up, knobs) in [
        ("h2c", "tokens=5"),
        ("http1", "tokens=5, line_ending=crlf"),
        ("h2c", "tokens=5, line_ending=cr"),
        ("h2c", "tokens=20, split=7"),
        ("http1", "tokens=3, split=1, line_ending=cr"),
        ("h2c", "tokens=3, big_event=1048000"),
        ("http1", "tokens=4, interval_ms=30, heartbeat_ms=10"),
        ("h2c", "tokens=3, tools"),
    ] {
        let gw = gateway(
            &mock,
            Setup {
                protocol: up,
                ..Default::default()
            },
        )
        .await;
        let direct = h1(
            mock.addr(),
            request("POST", "/v1/chat/completions", knobs, STREAM_U),
        )
        .await;
        let via_h1 = h1(
            gw.addr(),
            request("POST", "/v1/chat/completions", knobs, STREAM_U),
        )
        .await;
        let send = h2_connect(gw.addr()).await;
        let via_h2 = h2(
            &send,
            request("POST", "/v1/chat/completions", knobs, STREAM_U),
        )
        .await;
        assert_eq!(via_h1.status, 200);
        assert_eq!(via_h1.headers["content-type"], "text/event-stream");
        assert_eq!(via_h1.headers["cache-control"], "no-cache");
        assert_eq!(via_h1.headers["x-accel-buffering"], "no");
        // How many heartbeat comments fall into a gap depends on timing, so with heartbeats
        // the events must be byte-exact and the comments present, not equal in number.
        let exact = |b: &[u8]| -> Vec<u8> {
            if !knobs.contains("heartbeat") {
                return b.to_vec();
            }
            assert!(
                b.windows(7).any(|w| w == b": ping\n"),
                "{knobs}: no heartbeat"
            );
            String::from_utf8_lossy(b)
                .split_inclusive('\n')
                .filter(|l| !l.starts_with(':'))
                .collect::<String>()
                .into_bytes()
        };
        assert!(
            exact(&via_h1.body) == exact(&direct.body),
            "{up} {knobs}: h1 client bytes differ"
        );
        assert!(
            exact(&via_h2.body) == exact(&direct.body),
            "{up} {knobs}: h2 client bytes differ"
        );
    }
}

#[tokio::test]
async fn anthropic_and_responses_streams_pass_through() {
    let mock = mock("tokens=4").await;
    let gw = gateway(&mock, Setup::default()).await;
    for (path, body) in [
        (
            "/v1/messages",
            r#"{"model":"claude","max_tokens":50,"stream":true}"#,
        ),
        (
            "/v1/responses",
            r#"{"model":"gpt-4o","input":"hi","stream":true}"#,
        ),
        (
            "/v1/completions",
            r#"{"model":"gpt-4o","prompt":"hi","stream":true,"stream_options":{"include_usage":true}}"#,
        ),
    ] {
        let direct = h1(mock.addr(), request("POST", path, "", body)).await;
        let via = h1(gw.addr(), request("POST", path, "", body)).await;
        assert_eq!(via.body, direct.body, "{path}");
    }
}

#[tokio::test]
async fn events_are_flushed_one_by_one() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    let mut send = h1_connect(gw.addr()).await;
    let resp = h1_send(
        &mut send,
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=3, interval_ms=150",
            STREAM,
        ),
    )
    .await;
    let mut body = resp.into_body();
    let t0 = Instant::now();
    let mut arrivals = Vec::new();
    while let Some(f) = body.frame().await {
        if let Some(d) = f.unwrap().data_ref() {
            arrivals.push((t0.elapsed(), sse(d).len()));
        }
    }
    // Six events, each in its own frame, about 150 ms apart.
    assert_eq!(
        arrivals.iter().map(|a| a.1).sum::<usize>(),
        6,
        "{arrivals:?}"
    );
    assert!(arrivals.len() >= 6, "{arrivals:?}");
    assert!(
        arrivals[5].0 - arrivals[1].0 >= Duration::from_millis(550),
        "{arrivals:?}"
    );
}

#[tokio::test]
async fn non_streaming_bodies_pass_through() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    for (path, body) in [
        ("/v1/chat/completions", CHAT),
        ("/v1/embeddings", r#"{"model":"e","input":"x"}"#),
        ("/v1/messages", r#"{"model":"c","max_tokens":3}"#),
    ] {
        let direct = h1(mock.addr(), request("POST", path, "", body)).await;
        let via = h1(gw.addr(), request("POST", path, "", body)).await;
        assert_eq!(via.status, 200);
        assert_eq!(via.body, direct.body, "{path}");
    }
    // A 5 MB response under the 8 MiB default limit.
    let big = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "body_bytes=5000000", CHAT),
    )
    .await;
    assert!(big.body.len() > 5_000_000);
    assert_eq!(
        big.headers["content-length"],
        big.body.len().to_string().as_str()
    );
}

#[tokio::test]
async fn gateway_heartbeats_while_the_upstream_is_silent() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        Setup {
            server: "heartbeat = \"100ms\"",
            ..Default::default()
        },
    )
    .await;
    let r = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "ttft_ms=550, tokens=2, interval_ms=350",
            STREAM,
        ),
    )
    .await;
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    let pings = text.matches(": ping\n\n").count();
    assert!(pings >= 6, "{pings} heartbeats in {text:?}");
    assert!(
        text.starts_with(": ping\n\n"),
        "heartbeats also during the first-token wait"
    );
    // Heartbeats sit only between events: every event still parses.
    assert_eq!(sse(&r.body).len(), 5);
    assert_eq!(sse(&r.body).last().unwrap().1, "[DONE]");
    let metrics = h1(gw.admin_addr(), request("GET", "/metrics", "", "")).await;
    let m = String::from_utf8(metrics.body.to_vec()).unwrap();
    assert!(m.contains("sluice_heartbeats_total"), "{m}");
}

/// A client reading 1 KB/s: the upstream is throttled through flow control, and the gateway
/// holds only a bounded amount for that stream.
#[tokio::test]
async fn slow_client_throttles_the_upstream() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    let mut send = h1_connect(gw.addr()).await;
    // 40 MB of events: far more than loopback socket buffers (several MB each way) can hide.
    let resp = h1_send(
        &mut send,
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=10000, token_bytes=4000",
            STREAM,
        ),
    )
    .await;
    let mut body = resp.into_body();
    let mut got = 0usize;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(2500) {
        if let Some(f) = body.frame().await {
            got += f.unwrap().data_ref().map_or(0, |d| d.len());
        }
        sleep(Duration::from_millis(250)).await;
    }
    let snap = mock.stats().snapshot();
    let rec = snap.requests.last().unwrap();
    assert_eq!(rec.outcome, Outcome::InProgress);
    // What the mock managed to send is what the client read plus bounded buffers: the
    // upstream stream window (256 KiB), one chunk in the relay, hyper's write buffer and the
    // kernel's socket buffers between gateway and client (loopback autotunes them to several
    // MB). Nowhere near the 40 MB the mock sends in well under a second when nothing stops it.
    let in_flight = rec.bytes_sent as usize - got;
    assert!(
        rec.bytes_sent < 20_000_000,
        "upstream not throttled: {} sent",
        rec.bytes_sent
    );
    assert!(
        in_flight < 20_000_000,
        "{in_flight} bytes between mock and client"
    );
    drop(body);
    let snap = wait_for(mock.stats(), "cancel", |s| {
        matches!(s.requests.last().unwrap().outcome, Outcome::Cancelled(_))
    })
    .await;
    // The mock's writes waited for the slow reader most of the time.
    let blocked = snap.requests.last().unwrap().write_blocked;
    assert!(blocked >= Duration::from_millis(500), "{blocked:?}");
    let m = String::from_utf8(
        h1(gw.admin_addr(), request("GET", "/metrics", "", ""))
            .await
            .body
            .to_vec(),
    )
    .unwrap();
    let value = |key: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{key}` in:\n{m}"))
    };
    assert!(
        value("sluice_backpressure_pauses_total ") >= 1,
        "the slow client's waits count as backpressure pauses:\n{m}"
    );
    // The relay itself held at most one upstream read plus one partial event: the stream's peak
    // is in the 256 KiB bucket or below, although 40 MB went through it.
    assert_eq!(value("sluice_relay_buffer_peak_bytes_count "), 1);
    assert_eq!(
        value("sluice_relay_buffer_peak_bytes_bucket{le=\"262144.0\"} "),
        1,
        "{m}"
    );
}

/// One stalled client must not stall another stream on the same upstream HTTP/2 connection.
#[tokio::test]
async fn slow_client_does_not_slow_its_neighbour() {
    let mock = mock("").await;
    // One connection in the stream lane, so both streams share it.
    let gw = gateway(
        &mock,
        Setup {
            upstream: "pool = { stream = { min_connections = 1, max_connections = 1 } }",
            ..Default::default()
        },
    )
    .await;
    let mut stalled_conn = h1_connect(gw.addr()).await;
    // 40 MB, more than socket buffers hold, so it really stalls.
    let stalled = h1_send(
        &mut stalled_conn,
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=10000, token_bytes=4000",
            STREAM,
        ),
    )
    .await;
    sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    let fast = h1(
        gw.addr(),
        request(
            "POST",
            "/v1/chat/completions",
            "tokens=2000, token_bytes=1000",
            STREAM,
        ),
    )
    .await;
    assert!(fast.body.len() > 2_000_000);
    assert!(t0.elapsed() < Duration::from_secs(10));
    let snap = mock.stats().snapshot();
    assert_eq!(
        snap.connections.len(),
        1,
        "both streams shared one upstream HTTP/2 connection"
    );
    assert_eq!(
        snap.requests[0].outcome,
        Outcome::InProgress,
        "the stalled stream is still stalled"
    );
    drop(stalled);
}

/// An HTTP/1.1 upstream that answers every request with `body` as an event stream, then
/// closes.
async fn raw_sse_upstream(body: &'static str) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = s.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                let _ = s.write_all(format!("{head}{body}").as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn blocks_without_an_event_before_the_first_content_reach_the_client_in_order() {
    // A lone `retry:` and a lone `id:` dispatch no event; before the commit they used to be
    // dropped while the preamble was held.
    let role = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n";
    let body: &'static str = Box::leak(
        format!(
            "retry: 3000\n\n{role}id: 7\n\ndata: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"hi\"}}}}]}}\n\nretry: 10\n\ndata: [DONE]\n\n"
        )
        .into_boxed_str(),
    );
    let addr = raw_sse_upstream(body).await;
    let gw = gateway_at(
        &format!("http://{addr}/v1"),
        Setup {
            protocol: "http1",
            ..Setup::default()
        },
    )
    .await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", STREAM),
    )
    .await;
    assert_eq!(r.status, 200);
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(text, body, "the client gets the upstream's bytes, in order");
}
