//! Microsoft Entra ID (Azure AD) client credentials for Azure OpenAI, as an alternative to the
//! `api-key` header: the app registration's tenant, client id and secret, and the token
//! request (OAuth 2.0 client credentials, RFC 6749 §4.4, on the Microsoft identity platform's
//! v2.0 endpoint) whose bearer token is sent as `Authorization: Bearer`.
//!
//! The request is a form POST to `{authority}/{tenant}/oauth2/v2.0/token` with `client_id`,
//! `client_secret`, `scope=https://cognitiveservices.azure.com/.default` and
//! `grant_type=client_credentials`; the answer (`token_type`, `expires_in`, `access_token`)
//! is read by [`super::oauth::parse_token_response`] and refreshed on
//! [`super::refresh`]'s schedule. Entra's errors (`invalid_client` with an `AADSTS…`
//! description for a wrong secret, `unauthorized_client` for an unknown app) come back as
//! [`super::oauth::TokenError::Refused`].
//!
//! The environment variables are those of the Azure SDKs' `EnvironmentCredential`:
//! `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`, and `AZURE_AUTHORITY_HOST` for
//! sovereign clouds (`https://login.microsoftonline.us`, `https://login.chinacloudapi.cn`).
//!
//! NOTE: certificate credentials (`AZURE_CLIENT_CERTIFICATE_PATH`), managed identity and
//! workload identity federation are not done: they need another assertion or the instance
//! metadata endpoint.

use std::fmt;

use super::oauth::{push_form_pair, TokenRequest};

/// The scope of Azure OpenAI (Cognitive Services) tokens.
pub const COGNITIVE_SERVICES_SCOPE: &str = "https://cognitiveservices.azure.com/.default";

/// The public cloud's authority.
pub const DEFAULT_AUTHORITY: &str = "https://login.microsoftonline.com";

/// Why client credentials cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntraError {
    /// A variable is missing or empty.
    #[error("`{0}` is not set: Entra ID authentication needs AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET (an app registration's client secret)")]
    Missing(&'static str),
    /// The tenant is neither a GUID nor a domain name, so it cannot be a path segment.
    #[error(
        "the tenant `{0}` is not a tenant id (a GUID) or a domain name (contoso.onmicrosoft.com)"
    )]
    InvalidTenant(String),
    /// The authority is not an `https://` (or, for tests, `http://`) URL.
    #[error(
        "the authority host `{0}` is not an http(s) URL such as https://login.microsoftonline.com"
    )]
    InvalidAuthority(String),
}

impl EntraError {
    /// A low-cardinality label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            EntraError::Missing(_) => "missing",
            EntraError::InvalidTenant(_) => "invalid_tenant",
            EntraError::InvalidAuthority(_) => "invalid_authority",
        }
    }
}

/// An app registration's client credentials. `Debug` redacts the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    tenant_id: String,
    client_id: String,
    client_secret: String,
    authority: String,
    scope: String,
}

impl ClientCredentials {
    /// Credentials for the public cloud and Azure OpenAI's scope.
    ///
    /// # Errors
    /// [`EntraError::InvalidTenant`] for a tenant that is not a GUID or a domain name;
    /// [`EntraError::Missing`] for an empty client id or secret.
    pub fn new(
        tenant_id: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Result<ClientCredentials, EntraError> {
        let tenant_id = tenant_id.into();
        let valid = !tenant_id.is_empty()
            && tenant_id.len() <= 256
            && tenant_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'));
        if !valid {
            return Err(EntraError::InvalidTenant(tenant_id));
        }
        let client_id = client_id.into();
        if client_id.is_empty() {
            return Err(EntraError::Missing("AZURE_CLIENT_ID"));
        }
        let client_secret = client_secret.into();
        if client_secret.is_empty() {
            return Err(EntraError::Missing("AZURE_CLIENT_SECRET"));
        }
        Ok(ClientCredentials {
            tenant_id,
            client_id,
            client_secret,
            authority: DEFAULT_AUTHORITY.to_string(),
            scope: COGNITIVE_SERVICES_SCOPE.to_string(),
        })
    }

    /// Credentials from the environment (`env` looks a variable up), as the Azure SDKs'
    /// `EnvironmentCredential` reads them.
    ///
    /// # Errors
    /// [`EntraError`]: a variable missing, a bad tenant or authority.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<ClientCredentials, EntraError> {
        let get = |name: &'static str| {
            env(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or(EntraError::Missing(name))
        };
        let creds = ClientCredentials::new(
            get("AZURE_TENANT_ID")?.trim(),
            get("AZURE_CLIENT_ID")?.trim(),
            get("AZURE_CLIENT_SECRET")?,
        )?;
        match env("AZURE_AUTHORITY_HOST").filter(|v| !v.trim().is_empty()) {
            Some(a) => creds.with_authority(a.trim()),
            None => Ok(creds),
        }
    }

    /// Another authority (a sovereign cloud, a mock): `https://host[:port][/path]`.
    ///
    /// # Errors
    /// [`EntraError::InvalidAuthority`] unless it starts with `https://` or `http://`.
    pub fn with_authority(mut self, authority: &str) -> Result<ClientCredentials, EntraError> {
        if !(authority.starts_with("https://") || authority.starts_with("http://"))
            || authority.contains(['?', '#'])
        {
            return Err(EntraError::InvalidAuthority(authority.to_string()));
        }
        self.authority = authority.trim_end_matches('/').to_string();
        Ok(self)
    }

    /// Another scope than [`COGNITIVE_SERVICES_SCOPE`] (e.g. `api://…/.default`).
    pub fn with_scope(mut self, scope: impl Into<String>) -> ClientCredentials {
        self.scope = scope.into();
        self
    }

    /// The tenant.
    pub fn tenant_id(&self) -> &str {
        &self.tenant_id
    }

    /// The application (client) id.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// `{authority}/{tenant}/oauth2/v2.0/token`.
    pub fn token_url(&self) -> String {
        format!("{}/{}/oauth2/v2.0/token", self.authority, self.tenant_id)
    }

    /// The client-credentials token request.
    pub fn token_request(&self) -> TokenRequest {
        let mut body = String::with_capacity(160 + self.client_secret.len());
        push_form_pair(&mut body, "client_id", &self.client_id);
        push_form_pair(&mut body, "client_secret", &self.client_secret);
        push_form_pair(&mut body, "scope", &self.scope);
        push_form_pair(&mut body, "grant_type", "client_credentials");
        TokenRequest {
            url: self.token_url(),
            body,
        }
    }
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("tenant_id", &self.tenant_id)
            .field("client_id", &self.client_id)
            .field("client_secret", &"** redacted **")
            .field("authority", &self.authority)
            .field("scope", &self.scope)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_request() {
        let c = ClientCredentials::from_env(env(&[
            ("AZURE_TENANT_ID", "72f988bf-86f1-41af-91ab-2d7cd011db47"),
            ("AZURE_CLIENT_ID", "0b4a5e3c-1111-2222-3333-444455556666"),
            ("AZURE_CLIENT_SECRET", "abc~DEF+ghi/jkl="),
        ]))
        .unwrap();
        let r = c.token_request();
        assert_eq!(
            r.url,
            "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/oauth2/v2.0/token"
        );
        assert_eq!(
            r.body,
            "client_id=0b4a5e3c-1111-2222-3333-444455556666&client_secret=abc~DEF%2Bghi%2Fjkl%3D\
             &scope=https%3A%2F%2Fcognitiveservices.azure.com%2F.default&grant_type=client_credentials"
        );
        let d = format!("{c:?}");
        assert!(!d.contains("ghi"), "{d}");
        assert!(d.contains("0b4a5e3c"));
    }

    #[test]
    fn authority_and_refusals() {
        let c = ClientCredentials::from_env(env(&[
            ("AZURE_TENANT_ID", "contoso.onmicrosoft.com"),
            ("AZURE_CLIENT_ID", "app"),
            ("AZURE_CLIENT_SECRET", "s"),
            ("AZURE_AUTHORITY_HOST", "https://login.microsoftonline.us/"),
        ]))
        .unwrap();
        assert_eq!(
            c.token_url(),
            "https://login.microsoftonline.us/contoso.onmicrosoft.com/oauth2/v2.0/token"
        );
        let e = ClientCredentials::from_env(env(&[("AZURE_TENANT_ID", "t")])).unwrap_err();
        assert_eq!(e, EntraError::Missing("AZURE_CLIENT_ID"));
        assert!(e.to_string().contains("AZURE_CLIENT_SECRET"));
        assert_eq!(
            ClientCredentials::new("../x", "a", "s").unwrap_err(),
            EntraError::InvalidTenant("../x".into())
        );
        assert_eq!(
            ClientCredentials::new("t", "a", "s")
                .unwrap()
                .with_authority("login.microsoftonline.com")
                .unwrap_err()
                .metric_label(),
            "invalid_authority"
        );
    }
}
