//! A certificate generated at start, so `--tls` needs no files and no network.

use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};

use crate::MockError;

/// A self-signed certificate for `localhost`, `127.0.0.1` and `::1`, and a server config that
/// offers h2 and http/1.1 by ALPN.
pub(crate) fn generate() -> Result<(Arc<ServerConfig>, String), MockError> {
    let names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let ck =
        rcgen::generate_simple_self_signed(names).map_err(|e| MockError::Tls(e.to_string()))?;
    let cert_pem = ck.cert.pem();
    let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes())
        .map_err(|e| MockError::Tls(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(ck.signing_key.serialize_pem().as_bytes())
        .map_err(|e| MockError::Tls(e.to_string()))?;
    let mut cfg =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| MockError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .map_err(|e| MockError::Tls(e.to_string()))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((Arc::new(cfg), cert_pem))
}
