//! TLS on both sides: an https upstream trusted through `ca_file`, and a TLS listener that
//! offers h2 and http/1.1 by ALPN.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
use sluice_mock::{MockConfig, MockServer, Protocol};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::support::*;
use crate::{gateway_at, Setup, STREAM};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-gw-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test]
async fn https_upstream_with_a_generated_ca() {
    let mock = MockServer::start(MockConfig {
        tls: true,
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let dir = temp_dir("ca");
    let ca = dir.join("mock.pem");
    std::fs::write(&ca, mock.cert_pem().unwrap()).unwrap();
    for (protocol, expect) in [
        ("h2", Protocol::H2),
        ("http1", Protocol::Http1),
        ("auto", Protocol::H2),
    ] {
        mock.stats().reset();
        let ca_line = format!("ca_file = \"{}\"", ca.display());
        let gw = gateway_at(
            &format!("https://localhost:{}/v1", mock.addr().port()),
            Setup {
                protocol,
                upstream: &ca_line,
                ..Default::default()
            },
        )
        .await;
        let r = h1(
            gw.addr(),
            request("POST", "/v1/chat/completions", "tokens=3", STREAM),
        )
        .await;
        assert_eq!(r.status, 200, "{protocol}");
        assert_eq!(sse(&r.body).last().unwrap().1, "[DONE]");
        let snap = mock.stats().snapshot();
        assert_eq!(
            snap.connections.last().unwrap().protocol,
            expect,
            "{protocol}"
        );
        assert!(snap.connections.last().unwrap().tls);
    }
    // Without the CA the upstream's certificate is not trusted: a 502 naming the upstream by
    // its name (the reason, with the address, is in the gateway's log).
    let gw = gateway_at(
        &format!("https://localhost:{}/v1", mock.addr().port()),
        Setup {
            protocol: "h2",
            ..Default::default()
        },
    )
    .await;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/chat/completions", "", STREAM),
    )
    .await;
    assert_eq!(r.status, 502);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("TLS handshake with upstream `mock` failed"),
        "{msg}"
    );
    assert!(!msg.contains("localhost"), "no upstream address: {msg}");
    let _ = std::fs::remove_dir_all(dir);
}

/// On the shared runtime and with the handshake on a worker thread (`server.workers`).
#[tokio::test]
async fn tls_listener_serves_h2_and_http1_by_alpn() {
    for pinned in [false, true] {
        tls_listener_by_alpn(pinned).await;
    }
}

async fn tls_listener_by_alpn(pinned: bool) {
    let mock = mock("tokens=3").await;
    let dir = temp_dir(if pinned {
        "listener-pinned"
    } else {
        "listener"
    });
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let tls_line = format!(
        "tls = {{ cert = \"{}\", key = \"{}\" }}",
        cert.display(),
        key.display()
    );
    let gw = crate::gateway(
        &mock,
        Setup {
            server: &tls_line,
            workers: pinned.then(|| Arc::new(sluice_gateway::workers::Workers::start(2).unwrap())),
            ..Default::default()
        },
    )
    .await;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ck.cert.pem().as_bytes()).unwrap())
        .unwrap();
    let addr = gw.addr();
    let connect = |alpn: &'static [&'static [u8]]| {
        let roots = roots.clone();
        async move {
            let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
            cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            let tcp = TcpStream::connect(addr).await.unwrap();
            TlsConnector::from(Arc::new(cfg))
                .connect(ServerName::try_from("localhost").unwrap(), tcp)
                .await
                .unwrap()
        }
    };
    let tls = connect(&[b"h2", b"http/1.1"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let via_h2 = h2(&send, request("POST", "/v1/chat/completions", "", STREAM)).await;
    let tls = connect(&[b"http/1.1"]).await;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let (parts, b) = request("POST", "/v1/chat/completions", "", STREAM).into_parts();
    let mut req = http::Request::from_parts(parts, Full::<Bytes>::new(b));
    req.headers_mut()
        .insert("host", "localhost".parse().unwrap());
    let via_h1 = send
        .send_request(req)
        .await
        .unwrap()
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(via_h1, via_h2.body);
    assert_eq!(sse(&via_h1).last().unwrap().1, "[DONE]");
    let _ = std::fs::remove_dir_all(dir);
}
