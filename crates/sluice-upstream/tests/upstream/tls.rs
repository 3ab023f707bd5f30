//! TLS with ALPN against the mock's generated certificate (trusted through `ca_file`).

use sluice_mock::{MockConfig, MockServer, Protocol as Wire};
use sluice_upstream::{Protocol, Upstream, UpstreamConfig, UpstreamError};

use crate::support::*;

async fn tls_mock() -> MockServer {
    mock_with(MockConfig {
        tls: true,
        ..MockConfig::default()
    })
    .await
}

/// Sends one request with `protocol`, trusting the mock's certificate; returns what the mock
/// saw on the wire and what the upstream reports.
async fn negotiated(protocol: Protocol) -> (Wire, Protocol) {
    let mock = tls_mock().await;
    let ca = CaFile::new(&mock);
    let up = Upstream::new(UpstreamConfig {
        ca_file: Some(ca.0.clone()),
        ..config(&mock, protocol)
    })
    .unwrap();
    let rec = complete(&up, &mock, "").await;
    let snap = mock.stats().snapshot();
    let conn = snap.connection(rec.conn_id).unwrap();
    assert!(conn.tls);
    (conn.protocol, up.stats().protocol)
}

#[tokio::test]
async fn h2_negotiates_h2() {
    assert_eq!(negotiated(Protocol::H2).await, (Wire::H2, Protocol::H2));
}

#[tokio::test]
async fn auto_negotiates_h2() {
    assert_eq!(negotiated(Protocol::Auto).await, (Wire::H2, Protocol::H2));
}

#[tokio::test]
async fn http1_over_https_uses_http1() {
    assert_eq!(
        negotiated(Protocol::Http1).await,
        (Wire::Http1, Protocol::Http1)
    );
}

#[tokio::test]
async fn untrusted_certificate_fails_saying_so() {
    let mock = tls_mock().await;
    let up = upstream(&mock, Protocol::H2);
    let err = up.send(chat("", STREAM), secs(5)).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Tls(_)), "{err:?}");
    assert!(!err.is_retry_safe());
    let msg = err.to_string();
    assert!(msg.contains("certificate is not trusted"), "{msg}");
    assert!(msg.contains("upstream `local`"), "{msg}");
}
