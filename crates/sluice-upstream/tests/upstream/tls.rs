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

/// A TLS server that offers only http/1.1 by ALPN (the mock always offers h2), answering
/// every request with `ok`. Returns its address and certificate.
async fn http1_only_tls_server() -> (std::net::SocketAddr, String, tokio::task::JoinHandle<()>) {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let pem = ck.cert.pem();
    let cert = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    let key = PrivateKeyDer::from_pem_slice(ck.signing_key.serialize_pem().as_bytes()).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            conns.spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"ok")),
                    ))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, pem, task)
}

#[tokio::test]
async fn auto_falls_back_to_http1_when_alpn_chooses_it() {
    let (addr, pem, server) = http1_only_tls_server().await;
    let ca = std::env::temp_dir().join(format!("sluice-upstream-h1ca-{}.pem", addr.port()));
    std::fs::write(&ca, pem).unwrap();
    let up = Upstream::new(UpstreamConfig {
        base_url: format!("https://{addr}/v1").parse().unwrap(),
        protocol: Protocol::Auto,
        ca_file: Some(ca.clone()),
        ..UpstreamConfig::default()
    })
    .unwrap();
    // Concurrent first requests: one TLS handshake decides, all go over HTTP/1.1.
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let up = up.clone();
            tokio::spawn(async move {
                let resp = up.send(chat("", STREAM), secs(5)).await.unwrap();
                read_all(&mut resp.into_body()).await.unwrap()
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(&t.await.unwrap()[..], b"ok");
    }
    let stats = up.stats();
    assert_eq!(stats.protocol, Protocol::Http1);
    assert!(stats.open_connections >= 1 && stats.open_connections <= 3);
    // A later request reuses an idle connection rather than handshaking again.
    let before = stats.open_connections;
    let resp = up.send(chat("", STREAM), secs(5)).await.unwrap();
    read_all(&mut resp.into_body()).await.unwrap();
    assert_eq!(up.stats().open_connections, before);
    // Once on HTTP/1.1, the HTTP/1.1 lanes' defaults apply, and their connections are listed.
    let h1_cap = sluice_upstream::DEFAULT_HTTP1_MAX_CONNECTIONS
        .min(sluice_upstream::fd_limit().lane_ceiling());
    let snap = up.pool_snapshot();
    assert!(
        snap.lanes.iter().all(|l| l.max_connections == h1_cap),
        "{snap:?}"
    );
    let conns: Vec<_> = snap.lanes.iter().flat_map(|l| &l.connections).collect();
    assert_eq!(conns.len(), before, "{conns:?}");
    assert!(conns.iter().all(|c| c.protocol == Protocol::Http1));
    let _ = std::fs::remove_file(ca);
    server.abort();
}
