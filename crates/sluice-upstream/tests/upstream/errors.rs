//! Errors over real sockets: what each failure maps to, whether it is retry-safe, and what
//! its message says.

use std::time::Duration;

use http_body_util::BodyExt;
use sluice_mock::Outcome;
use sluice_upstream::{BodyError, Protocol, Upstream, UpstreamConfig, UpstreamError};
use tokio::time::Instant;

use crate::support::*;

#[tokio::test]
async fn refused_stream_is_retry_safe() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::H2c);
    let err = up.send(chat("refuse", STREAM), secs(5)).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Refused), "{err:?}");
    assert!(err.is_retry_safe());
    assert_eq!(err.metric_label(), "refused_stream");
    // The connection is still good.
    complete(&up, &mock, "").await;
    assert_eq!(mock.stats().snapshot().totals.connections, 1);
}

/// Reads frames until the body fails; returns how many data frames came first.
async fn frames_then_error(up: &Upstream) -> (usize, BodyError) {
    let resp = up
        .send(chat("abort_after=2, interval_ms=10", STREAM), secs(5))
        .await
        .unwrap();
    let mut body = resp.into_body();
    let mut frames = 0;
    loop {
        match body.frame().await {
            Some(Ok(_)) => frames += 1,
            Some(Err(e)) => return (frames, e),
            None => panic!("the body ended cleanly after {frames} frames"),
        }
    }
}

#[tokio::test]
async fn h2_abort_mid_body_is_reset_internal_error() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::H2c);
    let (frames, err) = frames_then_error(&up).await;
    assert!(frames >= 1, "the first events arrived before the reset");
    assert!(
        matches!(err, BodyError::Reset(h2::Reason::INTERNAL_ERROR)),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "reset");
    // A reset stream does not take the connection down.
    complete(&up, &mock, "").await;
    assert_eq!(mock.stats().snapshot().totals.connections, 1);
}

#[tokio::test]
async fn h1_abort_mid_body_is_incomplete_and_connection_discarded() {
    let mock = mock().await;
    let up = upstream(&mock, Protocol::Http1);
    let (frames, err) = frames_then_error(&up).await;
    assert!(frames >= 1, "the first events arrived before the cut");
    assert!(
        matches!(err, BodyError::Incomplete | BodyError::Closed),
        "{err:?}"
    );
    let next = complete(&up, &mock, "").await;
    assert_eq!(next.conn_id, 2, "a new connection after the cut");
}

#[tokio::test]
async fn closed_port_is_connect_error_naming_upstream_and_address() {
    // Bind then drop: a port on loopback that nobody listens on.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let up = Upstream::new(UpstreamConfig {
        name: "local".into(),
        base_url: format!("http://{addr}/v1").parse().unwrap(),
        protocol: Protocol::H2c,
        ..UpstreamConfig::default()
    })
    .unwrap();
    let err = up.send(chat("", STREAM), secs(5)).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Connect { .. }), "{err:?}");
    assert!(err.is_retry_safe());
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!(
            "upstream `local` refused the connection at {addr}: "
        )),
        "{msg}"
    );
}

#[tokio::test]
async fn tls_handshake_that_never_completes_is_connect_timeout() {
    // Accepts TCP, never answers the ClientHello.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    let up = Upstream::new(UpstreamConfig {
        base_url: format!("https://{addr}/v1").parse().unwrap(),
        protocol: Protocol::H2,
        connect_timeout: Duration::from_millis(200),
        ..UpstreamConfig::default()
    })
    .unwrap();
    let t0 = Instant::now();
    let err = up.send(chat("", STREAM), secs(5)).await.unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(err, UpstreamError::ConnectTimeout(_)), "{err:?}");
    assert!(err.is_retry_safe());
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_secs(1),
        "{took:?}"
    );
    hold.abort();
}

#[tokio::test]
async fn deadline_before_headers_is_deadline_and_cancels_upstream() {
    for protocol in [Protocol::H2c, Protocol::Http1] {
        let mock = mock().await;
        let up = upstream(&mock, protocol);
        let err = up
            .send(chat("ttft_ms=5000", NON_STREAM), ms(200))
            .await
            .unwrap_err();
        assert!(matches!(err, UpstreamError::Deadline), "{err:?}");
        assert!(!err.is_retry_safe());
        wait_for(mock.stats(), "cancel recorded", |s| {
            s.requests
                .iter()
                .all(|r| matches!(r.outcome, Outcome::Cancelled(_)))
        })
        .await;
        assert_eq!(up.stats().in_flight, 0);
    }
}

#[tokio::test]
async fn path_is_joined_to_base_path_and_connection_headers_dropped() {
    for protocol in [Protocol::H2c, Protocol::Http1] {
        let mock = mock().await;
        let up = upstream(&mock, protocol);
        let mut req = chat("", STREAM);
        *req.uri_mut() = "/chat/completions?trace=1".parse().unwrap();
        // h2 fails a request carrying any of these; they must not reach the wire.
        for (k, v) in [
            ("connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("te", "gzip"),
            ("transfer-encoding", "chunked"),
        ] {
            req.headers_mut().insert(k, v.parse().unwrap());
        }
        let resp = up.send(req, secs(5)).await.unwrap();
        let id = request_id(&resp);
        read_all(&mut resp.into_body()).await.unwrap();
        let snap = mock.stats().snapshot();
        let rec = snap.request(id).unwrap();
        assert_eq!(rec.path, "/v1/chat/completions?trace=1");
        for k in ["keep-alive", "te", "transfer-encoding"] {
            assert!(
                rec.headers.iter().all(|(n, _)| n != k),
                "{k} reached the mock"
            );
        }
        if protocol == Protocol::Http1 {
            let host = rec.headers.iter().find(|(n, _)| n == "host").unwrap();
            assert_eq!(host.1, mock.addr().to_string());
        }
    }
}

#[test]
fn config_is_validated_with_field_and_reason() {
    let base = UpstreamConfig::default();
    let err = Upstream::new(UpstreamConfig {
        h2_stream_window: 256 * 1024,
        h2_connection_window: 1024 * 1024,
        ..max_streams(base.clone(), 100)
    })
    .unwrap_err();
    assert!(err.to_string().contains("h2_connection_window"), "{err}");
    let err = Upstream::new(UpstreamConfig {
        protocol: Protocol::H2,
        ..base.clone()
    })
    .unwrap_err();
    assert!(err.to_string().contains("needs https"), "{err}");
    let err = Upstream::new(UpstreamConfig {
        ca_file: Some("/nonexistent/ca.pem".into()),
        ..base.clone()
    })
    .unwrap_err();
    assert!(err.to_string().contains("ca_file"), "{err}");
    assert!(Upstream::new(base).is_ok());
}
