//! The clouds' own ways to reach and authenticate to an upstream: AWS Bedrock (SigV4 with
//! credentials from the standard chain), Google Vertex AI (a service-account key's tokens) and
//! Azure OpenAI with Entra ID (client-credentials tokens). Resolved when the config is loaded:
//! the gateway signs and refreshes with what is here and reads no environment afterwards.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use sluice_providers::sign::credentials::Credentials;
use sluice_providers::sign::entra::ClientCredentials;
use sluice_providers::sign::google::ServiceAccountKey;

/// `[[upstream]]` of `provider = "bedrock"` or `"vertex"`, or with `auth = { type = "entra" }`.
#[derive(Clone, PartialEq)]
pub enum CloudAuth {
    /// AWS Bedrock Runtime: requests signed with SigV4 (service `bedrock`).
    Bedrock(BedrockAuth),
    /// Google Vertex AI: `Authorization: Bearer` with a service-account key's access token.
    Vertex(VertexAuth),
    /// Azure OpenAI: `Authorization: Bearer` with an Entra ID client-credentials token.
    Entra(EntraAuth),
}

impl CloudAuth {
    /// Whether requests carry a short-lived OAuth token (a refresh task per upstream).
    pub fn uses_tokens(&self) -> bool {
        matches!(self, CloudAuth::Vertex(_) | CloudAuth::Entra(_))
    }
}

impl fmt::Debug for CloudAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloudAuth::Bedrock(b) => b.fmt(f),
            CloudAuth::Vertex(v) => v.fmt(f),
            CloudAuth::Entra(e) => e.fmt(f),
        }
    }
}

/// Bedrock's region and the credentials requests are signed with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BedrockAuth {
    /// The region signatures are scoped to (`us-east-1`): `region`, else `AWS_REGION` /
    /// `AWS_DEFAULT_REGION` / the profile's.
    pub region: String,
    /// The key pair (and session token). `None` only when checked without the environment
    /// (`check-config --skip-env`). `Debug` redacts the secret.
    pub credentials: Option<Credentials>,
    /// Where they came from, for logs and the redacted view (`environment`, or the file and
    /// profile).
    pub source: String,
    /// Anthropic Messages clients go to InvokeModel with their own body (every Anthropic field
    /// kept) instead of Converse. Default false.
    pub invoke_model: bool,
}

/// Vertex AI's project and location, and the service account whose tokens it takes.
#[derive(Clone)]
pub struct VertexAuth {
    /// The Google Cloud project: `project`, else the key file's `project_id`.
    pub project: String,
    /// The location (`us-central1`, `global`, ...).
    pub location: String,
    /// The key file: `credentials_file`, else `GOOGLE_APPLICATION_CREDENTIALS`.
    pub key_file: PathBuf,
    /// The parsed key. `None` only when checked without the environment.
    pub key: Option<Arc<ServiceAccountKey>>,
}

impl PartialEq for VertexAuth {
    fn eq(&self, o: &Self) -> bool {
        // Keys compare by who they are: a key file rewritten with a new key changes its id.
        let who = |k: &Option<Arc<ServiceAccountKey>>| {
            k.as_ref().map(|k| {
                (
                    k.client_email().to_string(),
                    k.private_key_id().to_string(),
                    k.token_uri().to_string(),
                )
            })
        };
        self.project == o.project
            && self.location == o.location
            && self.key_file == o.key_file
            && who(&self.key) == who(&o.key)
    }
}

impl fmt::Debug for VertexAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VertexAuth")
            .field("project", &self.project)
            .field("location", &self.location)
            .field("key_file", &self.key_file)
            .field("key", &self.key)
            .finish()
    }
}

/// Entra ID client credentials. `Debug` redacts the secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntraAuth {
    /// `None` only when checked without the environment.
    pub credentials: Option<ClientCredentials>,
}
