//! TLS with the generated certificate: h2 and http/1.1 by ALPN.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
use sluice_mock::{MockConfig, MockServer, Protocol};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::support::*;

async fn connect(mock: &MockServer, alpn: &[&[u8]]) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(mock.cert_pem().unwrap().as_bytes()).unwrap())
        .unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = TcpStream::connect(mock.addr()).await.unwrap();
    TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

#[tokio::test]
async fn alpn_selects_h2_or_http1() {
    let mock = MockServer::start(MockConfig {
        tls: true,
        ..MockConfig::default()
    })
    .await
    .unwrap();
    assert!(mock.url().starts_with("https://"));
    let body = r#"{"model":"m","stream":true}"#;

    let tls = connect(&mock, &[b"h2", b"http/1.1"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let r2 = h2(&send, request("POST", "/v1/chat/completions", "", body)).await;

    let tls = connect(&mock, &[b"http/1.1"]).await;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    send.ready().await.unwrap();
    let (parts, b) = request("POST", "/v1/chat/completions", "", body).into_parts();
    let mut req = http::Request::from_parts(parts, Full::<Bytes>::new(b));
    req.headers_mut()
        .insert("host", "localhost".parse().unwrap());
    let r1 = send
        .send_request(req)
        .await
        .unwrap()
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes();

    assert_eq!(r1, r2.body);
    assert_eq!(sse(&r1).last().unwrap().1, "[DONE]");
    let snap = mock.stats().snapshot();
    let protos: Vec<_> = snap
        .connections
        .iter()
        .map(|c| (c.protocol, c.tls))
        .collect();
    assert_eq!(protos, [(Protocol::H2, true), (Protocol::Http1, true)]);
}
