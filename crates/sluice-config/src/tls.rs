//! The listener's TLS material, loaded one way for both `check-config` and startup, so a config
//! that checks ok also starts; and the certificate expiry warnings.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsFiles;

/// A certificate that ends within this long gets a warning.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// Why the listener's certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file cannot be read or is not PEM.
    #[error("cannot read the certificate file {path}: {reason}")]
    ReadCert {
        /// The file.
        path: String,
        /// The OS or PEM error.
        reason: String,
    },
    /// The certificate file holds no `CERTIFICATE` block.
    #[error("{path} holds no certificate (a PEM `BEGIN CERTIFICATE` block)")]
    NoCert {
        /// The file.
        path: String,
    },
    /// The key file cannot be read or holds no private key.
    #[error("cannot read a private key from {path}: {reason}")]
    ReadKey {
        /// The file.
        path: String,
        /// The OS or PEM error.
        reason: String,
    },
    /// The key is of a kind or size the TLS stack refuses (e.g. RSA below 2048 bits).
    #[error(
        "the private key in {path} cannot be used: {reason}; use RSA of 2048 bits or more, \
         ECDSA P-256/P-384 or Ed25519"
    )]
    UnusableKey {
        /// The file.
        path: String,
        /// What the TLS stack said.
        reason: String,
    },
    /// The key is not the private key of the (first) certificate.
    #[error(
        "the private key in {key} does not match the certificate in {cert} (the first \
         certificate must be the server's own, and the key its private key)"
    )]
    KeyMismatch {
        /// The certificate file.
        cert: String,
        /// The key file.
        key: String,
    },
    /// Any other refusal by the TLS stack.
    #[error("{0}")]
    Rustls(rustls::Error),
}

impl TlsError {
    /// The field at fault below `server.tls`: `cert`, `key`, or none (the pair).
    pub fn field(&self) -> Option<&'static str> {
        match self {
            TlsError::ReadCert { .. } | TlsError::NoCert { .. } => Some("cert"),
            TlsError::ReadKey { .. } | TlsError::UnusableKey { .. } => Some("key"),
            TlsError::KeyMismatch { .. } | TlsError::Rustls(_) => None,
        }
    }

    /// A low-cardinality label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            TlsError::ReadCert { .. } => "read_cert",
            TlsError::NoCert { .. } => "no_cert",
            TlsError::ReadKey { .. } => "read_key",
            TlsError::UnusableKey { .. } => "unusable_key",
            TlsError::KeyMismatch { .. } => "key_mismatch",
            TlsError::Rustls(_) => "tls",
        }
    }
}

/// The listener's TLS settings as the gateway serves them: the certificate chain and key from
/// `files`, ALPN `h2` then `http/1.1`.
///
/// # Errors
/// [`TlsError`] for an unreadable file, a file without a certificate or key, a key the TLS
/// stack refuses, or a key that is not the certificate's.
pub fn server_config(files: &TlsFiles) -> Result<rustls::ServerConfig, TlsError> {
    let certs = read_certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError::ReadKey {
        path: files.key.display().to_string(),
        reason: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let signing_key = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| TlsError::UnusableKey {
            path: files.key.display().to_string(),
            // rustls words its refusals as `unexpected error: ...`; the refusal is expected.
            reason: match e {
                rustls::Error::General(s) => s,
                other => other.to_string(),
            },
        })?;
    // rustls checks this too (when it can tell); checking first gives the message that says
    // which files to look at.
    let certified = rustls::sign::CertifiedKey::new(certs.clone(), signing_key);
    if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
        certified.keys_match()
    {
        return Err(TlsError::KeyMismatch {
            cert: files.cert.display().to_string(),
            key: files.key.display().to_string(),
        });
    }
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(TlsError::Rustls)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Every certificate in a PEM file, at least one.
///
/// # Errors
/// [`TlsError::ReadCert`] or [`TlsError::NoCert`].
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::ReadCert {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCert {
            path: path.display().to_string(),
        });
    }
    Ok(certs)
}

/// A sentence for each certificate that has expired or expires within [`EXPIRY_WARNING`] of
/// `now`. A certificate that cannot be parsed is left to the TLS stack to judge.
pub fn expiry_warnings(file: &Path, certs: &[CertificateDer<'_>], now: SystemTime) -> Vec<String> {
    let now = match now.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(_) => return Vec::new(),
    };
    let mut out = Vec::new();
    for (i, der) in certs.iter().enumerate() {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
            continue;
        };
        let not_after = cert.validity().not_after;
        let left = not_after.timestamp().saturating_sub(now);
        let which = if certs.len() == 1 {
            format!("the certificate in {} ({})", file.display(), cert.subject())
        } else {
            format!(
                "certificate {} of {} in {} ({})",
                i + 1,
                certs.len(),
                file.display(),
                cert.subject()
            )
        };
        let when = not_after
            .to_rfc2822()
            .unwrap_or_else(|_| not_after.timestamp().to_string());
        if left <= 0 {
            out.push(format!("{which} expired on {when}; clients will refuse it"));
        } else if u64::try_from(left).is_ok_and(|l| l < EXPIRY_WARNING.as_secs()) {
            // Rounded: a certificate made to last 3 days reads "in 3 days" a moment later.
            let days = (left + 43_200) / 86_400;
            let in_days = match days {
                0 => "in less than a day".to_string(),
                1 => "in 1 day".to_string(),
                n => format!("in {n} days"),
            };
            out.push(format!("{which} expires {in_days} ({when}); renew it"));
        }
    }
    out
}
