//! The clouds' authentication, checked for real: AWS SigV4 on the Bedrock paths (recomputed
//! with `sluice_providers::sign::sigv4` and compared), and OAuth bearer tokens the mock issues
//! itself from a Google service-account token endpoint (`POST /token`, RS256 assertions
//! verified against the accounts' public keys) and an Entra ID client-credentials endpoint
//! (`POST /{tenant}/oauth2/v2.0/token`), required on the Vertex AI paths and accepted on the
//! Azure OpenAI paths.
//!
//! ```text
//! cloud.rs         the configuration (CloudConfig) and the state every connection shares
//! cloud/tokens.rs  the tokens issued, until they expire (bounded)
//! cloud/oauth.rs   the two token endpoints, in Google's and Entra's shapes
//! cloud/sigv4.rs   verifying a Bedrock request's signature
//! ```
//!
//! The defaults are test credentials anyone may use against a mock: AWS key
//! [`TEST_AWS_ACCESS_KEY_ID`] / [`TEST_AWS_SECRET_ACCESS_KEY`], the service account of
//! [`test_service_account_json`], and the Entra client [`TEST_ENTRA_CLIENT_ID`] /
//! [`TEST_ENTRA_CLIENT_SECRET`].

mod oauth;
mod sigv4;
mod tokens;

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use sluice_providers::sign::google::{KeyError, ServiceAccountKey};

use crate::knobs::Behavior;

pub(crate) use oauth::{entra_token, fault_reply, google_token};
pub(crate) use sigv4::verify as verify_sigv4;
pub(crate) use tokens::{BearerCheck, Issuer, TokenStore};

/// The built-in test AWS access key id.
pub const TEST_AWS_ACCESS_KEY_ID: &str = "AKIDSLUICEMOCKTEST01";
/// The built-in test AWS secret access key.
pub const TEST_AWS_SECRET_ACCESS_KEY: &str = "sluice/mock/secret/key/for+tests+only0000";
/// The built-in test Entra ID application (client) id.
pub const TEST_ENTRA_CLIENT_ID: &str = "00000000-5111-4ce0-0000-00000000c11e";
/// The built-in test Entra ID client secret.
pub const TEST_ENTRA_CLIENT_SECRET: &str = "sluice~mock~client~secret";

/// The built-in test service account's key file (its private key is a test key no Google
/// account has; the same as `sluice-providers`' test fixture).
const TEST_SERVICE_ACCOUNT: &str = include_str!("cloud/test_service_account.json");

/// The built-in test service account's key file with `token_uri` pointing at `token_uri`
/// (e.g. `{mock.url()}/token`): what a client signs its assertions with.
pub fn test_service_account_json(token_uri: &str) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(TEST_SERVICE_ACCOUNT).expect("the built-in key file is JSON");
    v["token_uri"] = serde_json::Value::String(token_uri.to_string());
    serde_json::to_string_pretty(&v).expect("serialises")
}

/// Default of [`CloudConfig::token_ttl`].
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(3600);

/// Default of [`CloudConfig::max_live_tokens`].
pub const DEFAULT_MAX_LIVE_TOKENS: usize = 100_000;

// === impl CloudConfig ===

/// An AWS key pair the Bedrock paths accept. `Debug` redacts the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsKey {
    /// The access key id (`AKIA…`).
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// A session token the requests must carry (`x-amz-security-token`), for temporary
    /// credentials.
    pub session_token: Option<String>,
}

impl AwsKey {
    /// The built-in test key pair.
    pub fn test() -> AwsKey {
        AwsKey {
            access_key_id: TEST_AWS_ACCESS_KEY_ID.to_string(),
            secret_access_key: TEST_AWS_SECRET_ACCESS_KEY.to_string(),
            session_token: None,
        }
    }
}

impl fmt::Debug for AwsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsKey")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"** redacted **")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "** redacted **"),
            )
            .finish()
    }
}

/// A service account the Vertex token endpoint trusts: who it is and its public key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccount {
    /// The account (`name@project.iam.gserviceaccount.com`): the assertion's `iss`.
    pub client_email: String,
    /// The key's id (the assertion's `kid`); empty matches any.
    pub key_id: String,
    /// The public key, DER `RSAPublicKey` (PKCS#1).
    pub public_key_der: Vec<u8>,
}

impl ServiceAccount {
    /// The account and public key of a JSON key file (the same file the gateway is given).
    ///
    /// # Errors
    /// [`KeyError`] if it is not a service-account key file.
    pub fn from_key_json(json: &[u8]) -> Result<ServiceAccount, KeyError> {
        let key = ServiceAccountKey::from_json(json)?;
        Ok(ServiceAccount {
            client_email: key.client_email().to_string(),
            key_id: key.private_key_id().to_string(),
            public_key_der: key.public_key_der().to_vec(),
        })
    }

    /// The built-in test service account.
    pub fn test() -> ServiceAccount {
        ServiceAccount::from_key_json(TEST_SERVICE_ACCOUNT.as_bytes())
            .expect("the built-in key file parses")
    }
}

/// An Entra ID application the client-credentials endpoint accepts. `Debug` redacts the
/// secret.
#[derive(Clone, PartialEq, Eq)]
pub struct EntraClient {
    /// The application (client) id.
    pub client_id: String,
    /// Its client secret.
    pub client_secret: String,
}

impl EntraClient {
    /// The built-in test client.
    pub fn test() -> EntraClient {
        EntraClient {
            client_id: TEST_ENTRA_CLIENT_ID.to_string(),
            client_secret: TEST_ENTRA_CLIENT_SECRET.to_string(),
        }
    }
}

impl fmt::Debug for EntraClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntraClient")
            .field("client_id", &self.client_id)
            .field("client_secret", &"** redacted **")
            .finish()
    }
}

/// The clouds' credentials the mock accepts, and how long the tokens it issues live.
#[derive(Clone, Debug)]
pub struct CloudConfig {
    /// Key pairs whose SigV4 signatures the Bedrock paths accept. Default: [`AwsKey::test`].
    pub aws_keys: Vec<AwsKey>,
    /// The region signatures must be scoped to; `None` accepts any.
    pub aws_region: Option<String>,
    /// How far a request's `x-amz-date` may be from the mock's clock (AWS: 15 minutes).
    pub aws_max_skew: Duration,
    /// Service accounts whose assertions `POST /token` accepts. Default:
    /// [`ServiceAccount::test`].
    pub service_accounts: Vec<ServiceAccount>,
    /// Applications whose client credentials `POST /{tenant}/oauth2/v2.0/token` accepts.
    /// Default: [`EntraClient::test`].
    pub entra_clients: Vec<EntraClient>,
    /// How long issued tokens live (`expires_in`, rounded up to whole seconds, at least 1).
    /// Default one hour; tests of refreshing use a couple of seconds.
    pub token_ttl: Duration,
    /// Behaviour of the token endpoints (their faults: `fail_first`, `fail_for_ms`, `flap`,
    /// `status`, `ttft_ms`), instead of the server's defaults; the `x-mock` header still
    /// overrides it. `None`: the server's defaults.
    pub token_behavior: Option<Behavior>,
    /// The most live tokens kept; beyond it the oldest are forgotten (their requests get 401).
    pub max_live_tokens: usize,
}

impl Default for CloudConfig {
    fn default() -> Self {
        CloudConfig {
            aws_keys: vec![AwsKey::test()],
            aws_region: None,
            aws_max_skew: Duration::from_secs(15 * 60),
            service_accounts: vec![ServiceAccount::test()],
            entra_clients: vec![EntraClient::test()],
            token_ttl: DEFAULT_TOKEN_TTL,
            token_behavior: None,
            max_live_tokens: DEFAULT_MAX_LIVE_TOKENS,
        }
    }
}

/// The configuration and the issued tokens, shared by every connection.
#[derive(Debug)]
pub(crate) struct CloudState {
    pub(crate) cfg: CloudConfig,
    tokens: Mutex<TokenStore>,
}

impl CloudState {
    pub(crate) fn new(cfg: CloudConfig) -> CloudState {
        let tokens = Mutex::new(TokenStore::new(cfg.max_live_tokens));
        CloudState { cfg, tokens }
    }

    pub(crate) fn tokens(&self) -> std::sync::MutexGuard<'_, TokenStore> {
        // A poisoned lock only means a panic elsewhere already failed a test.
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }
}
