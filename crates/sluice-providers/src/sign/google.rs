//! Google service-account keys (Vertex AI's credential): the JSON key file, the RS256-signed
//! JWT assertion, and the token request that trades it for an access token (RFC 7523's JWT
//! bearer grant, as Google's "Using OAuth 2.0 for Server to Server Applications" describes).
//!
//! The assertion's claims are `iss` (the service account's email), `scope`
//! (`https://www.googleapis.com/auth/cloud-platform` for Vertex AI), `aud` (the key file's
//! `token_uri`), `iat` and `exp` (`iat` + 1 hour, the longest Google accepts); its header
//! names the key (`kid` = `private_key_id`). The endpoint answers a bearer token that lives
//! about an hour (`expires_in`), which [`super::refresh`] schedules.
//!
//! RSA PKCS#1 v1.5 signatures are deterministic: the same key, claims and time give the same
//! assertion byte for byte, so the tests compare it with a golden.
//!
//! NOTE: only `"type": "service_account"` keys. User credentials (`authorized_user`, from
//! `gcloud auth application-default login`), workload identity federation
//! (`external_account`) and the metadata server need other exchanges (or a network call to
//! find the credential) and are refused naming the type.

use std::fmt;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ring::rand::SecureRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use serde::{Deserialize, Serialize};

use super::oauth::{push_form_pair, TokenError, TokenRequest};

/// The scope Vertex AI needs.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// Google's token endpoint (a key file's usual `token_uri`).
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// The JWT bearer grant type (RFC 7523 §2.1).
pub const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// How long an assertion is valid: an hour, the longest Google accepts.
pub const ASSERTION_LIFETIME_SECS: u64 = 3600;

/// Why a key file cannot be used. Raised when the configuration is loaded, so the messages
/// say which file field is wrong; none repeats the private key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not JSON, or a field of the wrong type.
    #[error("the service-account key file is not valid JSON: {0}")]
    Json(String),
    /// A required field is missing or empty.
    #[error("the service-account key file has no `{0}`: download a new JSON key for the service account (IAM > Service accounts > Keys)")]
    MissingField(&'static str),
    /// Another kind of Google credential.
    #[error("the key file's `type` is `{0}`; only `service_account` keys are supported (not user credentials from `gcloud auth application-default login`, nor workload identity federation)")]
    NotServiceAccount(String),
    /// `private_key` is not a PEM block of a private key.
    #[error("the key file's `private_key` is not a PEM private key: {0}")]
    Pem(&'static str),
    /// The PEM block is not an RSA key ring accepts (Google's keys are 2048-bit RSA).
    #[error("the key file's `private_key` is not a usable RSA key: {0}")]
    Key(String),
}

impl KeyError {
    /// A low-cardinality label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            KeyError::Json(_) => "json",
            KeyError::MissingField(_) => "missing_field",
            KeyError::NotServiceAccount(_) => "not_service_account",
            KeyError::Pem(_) => "pem",
            KeyError::Key(_) => "key",
        }
    }
}

#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    project_id: Option<String>,
    private_key_id: Option<String>,
    private_key: Option<String>,
    client_email: Option<String>,
    token_uri: Option<String>,
}

/// A parsed service-account key. `Debug` shows who it is, never the private key.
pub struct ServiceAccountKey {
    client_email: String,
    private_key_id: String,
    token_uri: String,
    project_id: Option<String>,
    key: RsaKeyPair,
}

impl ServiceAccountKey {
    /// Parses a JSON key file (as downloaded from the Cloud console or `gcloud iam
    /// service-accounts keys create`). A missing `token_uri` means Google's; a missing
    /// `private_key_id` sends no `kid`.
    ///
    /// # Errors
    /// [`KeyError`]: not JSON, another credential type, a missing `client_email` or
    /// `private_key`, a private key that is not PEM PKCS#8 (or PKCS#1) RSA.
    pub fn from_json(json: &[u8]) -> Result<ServiceAccountKey, KeyError> {
        let f: KeyFile = serde_json::from_slice(json).map_err(|e| {
            // serde's message may quote the input: say where, not what.
            KeyError::Json(format!("line {} column {}", e.line(), e.column()))
        })?;
        match f.kind.as_deref() {
            Some("service_account") => {}
            Some(other) => return Err(KeyError::NotServiceAccount(other.to_string())),
            None => return Err(KeyError::MissingField("type")),
        }
        let non_empty = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        let client_email =
            non_empty(f.client_email).ok_or(KeyError::MissingField("client_email"))?;
        let pem = non_empty(f.private_key).ok_or(KeyError::MissingField("private_key"))?;
        let key = rsa_key_from_pem(&pem)?;
        Ok(ServiceAccountKey {
            client_email,
            private_key_id: non_empty(f.private_key_id).unwrap_or_default(),
            token_uri: non_empty(f.token_uri).unwrap_or_else(|| DEFAULT_TOKEN_URI.to_string()),
            project_id: non_empty(f.project_id),
            key,
        })
    }

    /// Sends the token request to another endpoint than the key file's (a private service
    /// connect endpoint, a mock). The assertion's `aud` follows.
    pub fn with_token_uri(mut self, token_uri: impl Into<String>) -> ServiceAccountKey {
        self.token_uri = token_uri.into();
        self
    }

    /// The service account (`name@project.iam.gserviceaccount.com`).
    pub fn client_email(&self) -> &str {
        &self.client_email
    }

    /// The key's id (the JWT's `kid`); empty when the file has none.
    pub fn private_key_id(&self) -> &str {
        &self.private_key_id
    }

    /// Where the assertion is exchanged.
    pub fn token_uri(&self) -> &str {
        &self.token_uri
    }

    /// The key file's project, if it names one (a default for Vertex's `project`).
    pub fn project_id(&self) -> Option<&str> {
        self.project_id.as_deref()
    }

    /// The public half as a DER `RSAPublicKey` (PKCS#1), what
    /// `ring::signature::UnparsedPublicKey` with `RSA_PKCS1_2048_8192_SHA256` verifies with.
    pub fn public_key_der(&self) -> &[u8] {
        self.key.public().as_ref()
    }

    /// The signed JWT assertion for `scope` at `now_unix` (seconds since the epoch):
    /// `base64url(header).base64url(claims).base64url(RS256 signature)`.
    ///
    /// # Errors
    /// [`TokenError::Signing`] if `rng` fails (ring's RSA signing blinds with random bytes).
    pub fn assertion(
        &self,
        scope: &str,
        now_unix: u64,
        rng: &dyn SecureRandom,
    ) -> Result<String, TokenError> {
        #[derive(Serialize)]
        struct Header<'a> {
            alg: &'static str,
            typ: &'static str,
            #[serde(skip_serializing_if = "str::is_empty")]
            kid: &'a str,
        }
        #[derive(Serialize)]
        struct Claims<'a> {
            iss: &'a str,
            scope: &'a str,
            aud: &'a str,
            iat: u64,
            exp: u64,
        }
        let header = serde_json::to_vec(&Header {
            alg: "RS256",
            typ: "JWT",
            kid: &self.private_key_id,
        })
        .map_err(|_| TokenError::Signing("cannot serialise the JWT header"))?;
        let claims = serde_json::to_vec(&Claims {
            iss: &self.client_email,
            scope,
            aud: &self.token_uri,
            iat: now_unix,
            exp: now_unix.saturating_add(ASSERTION_LIFETIME_SECS),
        })
        .map_err(|_| TokenError::Signing("cannot serialise the JWT claims"))?;
        let mut jwt = URL_SAFE_NO_PAD.encode(header);
        jwt.push('.');
        URL_SAFE_NO_PAD.encode_string(claims, &mut jwt);
        let mut sig = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(&RSA_PKCS1_SHA256, rng, jwt.as_bytes(), &mut sig)
            .map_err(|_| TokenError::Signing("the RSA signature failed (random source)"))?;
        jwt.push('.');
        URL_SAFE_NO_PAD.encode_string(sig, &mut jwt);
        Ok(jwt)
    }

    /// The token request for Vertex AI ([`CLOUD_PLATFORM_SCOPE`]) at `now_unix`: a POST of
    /// `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=…` to the
    /// `token_uri`.
    ///
    /// # Errors
    /// [`TokenError::Signing`], as [`ServiceAccountKey::assertion`].
    pub fn token_request(
        &self,
        now_unix: u64,
        rng: &dyn SecureRandom,
    ) -> Result<TokenRequest, TokenError> {
        self.token_request_for(CLOUD_PLATFORM_SCOPE, now_unix, rng)
    }

    /// [`ServiceAccountKey::token_request`] for another scope.
    ///
    /// # Errors
    /// [`TokenError::Signing`], as [`ServiceAccountKey::assertion`].
    pub fn token_request_for(
        &self,
        scope: &str,
        now_unix: u64,
        rng: &dyn SecureRandom,
    ) -> Result<TokenRequest, TokenError> {
        let assertion = self.assertion(scope, now_unix, rng)?;
        let mut body = String::with_capacity(assertion.len() + 80);
        push_form_pair(&mut body, "grant_type", JWT_BEARER_GRANT);
        push_form_pair(&mut body, "assertion", &assertion);
        Ok(TokenRequest {
            url: self.token_uri.clone(),
            body,
        })
    }
}

impl fmt::Debug for ServiceAccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccountKey")
            .field("client_email", &self.client_email)
            .field("private_key_id", &self.private_key_id)
            .field("token_uri", &self.token_uri)
            .field("project_id", &self.project_id)
            .field("private_key", &"** redacted **")
            .finish()
    }
}

/// The RSA key in a PEM block: `PRIVATE KEY` (PKCS#8, what Google issues) or
/// `RSA PRIVATE KEY` (PKCS#1).
fn rsa_key_from_pem(pem: &str) -> Result<RsaKeyPair, KeyError> {
    let (label, der) = pem_block(pem)?;
    let key = match label {
        "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
        "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
        "ENCRYPTED PRIVATE KEY" => {
            return Err(KeyError::Pem(
                "it is encrypted; Google's key files never are",
            ))
        }
        _ => return Err(KeyError::Pem("the block is not a private key")),
    };
    key.map_err(|e| KeyError::Key(e.to_string()))
}

/// The label and the decoded bytes of the first PEM block in `text` (RFC 7468; the key file
/// has it with `\n` line breaks, already unescaped by the JSON parser).
fn pem_block(text: &str) -> Result<(&str, Vec<u8>), KeyError> {
    let begin = text
        .find("-----BEGIN ")
        .ok_or(KeyError::Pem("no `-----BEGIN` line"))?;
    let rest = &text[begin + "-----BEGIN ".len()..];
    let label_end = rest
        .find("-----")
        .ok_or(KeyError::Pem("the `-----BEGIN` line is not closed"))?;
    let label = &rest[..label_end];
    let body = &rest[label_end + 5..];
    let end_marker = format!("-----END {label}-----");
    let end = body
        .find(&end_marker)
        .ok_or(KeyError::Pem("no matching `-----END` line"))?;
    let b64: String = body[..end]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let der = STANDARD
        .decode(b64)
        .map_err(|_| KeyError::Pem("the block is not base64"))?;
    Ok((label, der))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks() {
        let (label, der) =
            pem_block("junk\n-----BEGIN PRIVATE KEY-----\nAAEC\nAw==\n-----END PRIVATE KEY-----\n")
                .unwrap();
        assert_eq!((label, der), ("PRIVATE KEY", vec![0, 1, 2, 3]));
        assert_eq!(
            pem_block("-----BEGIN X-----\nAA==\n-----END Y-----"),
            Err(KeyError::Pem("no matching `-----END` line"))
        );
        assert_eq!(
            pem_block("-----BEGIN X-----\n!!\n-----END X-----"),
            Err(KeyError::Pem("the block is not base64"))
        );
        assert_eq!(
            rsa_key_from_pem("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----").err(),
            Some(KeyError::Pem("the block is not a private key"))
        );
        assert!(matches!(
            rsa_key_from_pem("-----BEGIN PRIVATE KEY-----\nAAEC\n-----END PRIVATE KEY-----"),
            Err(KeyError::Key(_))
        ));
    }

    #[test]
    fn key_file_refusals() {
        let e = |json: &str| ServiceAccountKey::from_json(json.as_bytes()).unwrap_err();
        assert_eq!(
            e(r#"{"type":"authorized_user","client_id":"x"}"#),
            KeyError::NotServiceAccount("authorized_user".into())
        );
        assert_eq!(e(r#"{"client_email":"a"}"#), KeyError::MissingField("type"));
        assert_eq!(
            e(r#"{"type":"service_account","private_key":"x"}"#),
            KeyError::MissingField("client_email")
        );
        assert_eq!(
            e(r#"{"type":"service_account","client_email":"a@b"}"#),
            KeyError::MissingField("private_key")
        );
        let secret = "-----BEGIN PRIVATE KEY-----\\nc2VjcmV0IGJ5dGVz\\n-----END PRIVATE KEY-----";
        let err = e(&format!(
            r#"{{"type":"service_account","client_email":"a@b","private_key":"{secret}"}}"#
        ));
        assert_eq!(err.metric_label(), "key");
        assert!(!err.to_string().contains("c2VjcmV0"), "{err}");
        let err =
            e(r#"{"type":"service_account","private_key":"-----BEGIN PRIVATE KEY-----\nMIIE"#);
        assert!(matches!(err, KeyError::Json(_)), "{err:?}");
        assert!(!err.to_string().contains("MIIE"), "{err}");
    }
}
