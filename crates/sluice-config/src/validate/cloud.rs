//! `provider = "bedrock"` / `"vertex"` and `auth = { type = "entra" }`: the cloud settings of
//! an upstream, with their credentials resolved now (the environment, the AWS shared files,
//! the service-account key file), so that a missing or unusable credential stops the config
//! here with the field and the reason, not the first request.

use std::path::PathBuf;
use std::sync::Arc;

use sluice_providers::sign::credentials::{self, CredentialSource};
use sluice_providers::sign::entra::ClientCredentials;
use sluice_providers::sign::google::ServiceAccountKey;

use super::*;
use crate::cloud::{BedrockAuth, CloudAuth, EntraAuth, VertexAuth};

/// The cloud fields of one `[[upstream]]`, as written.
pub(super) struct RawCloud {
    pub(super) provider: Option<ProviderName>,
    pub(super) entra: bool,
    pub(super) other_auth: bool,
    pub(super) region: Option<String>,
    pub(super) aws_profile: Option<String>,
    pub(super) project: Option<String>,
    pub(super) location: Option<String>,
    pub(super) credentials_file: Option<PathBuf>,
    pub(super) invoke_model: Option<bool>,
}

pub(super) fn cloud_auth(
    path: &str,
    raw: RawCloud,
    ctx: &mut Ctx<'_>,
) -> Result<Option<CloudAuth>, ConfigError> {
    let RawCloud {
        provider,
        entra,
        other_auth,
        region,
        aws_profile,
        project,
        location,
        credentials_file,
        invoke_model,
    } = raw;
    let at = |field: &str| format!("{path}.{field}");
    let stray = |field: &str, for_: &str| {
        ConfigError::new(
            at(field),
            format!("only applies to `provider = \"{for_}\"`; remove it"),
        )
    };
    let bedrock = provider == Some(ProviderName::Bedrock);
    let vertex = provider == Some(ProviderName::Vertex);
    if !bedrock {
        if region.is_some() {
            return Err(stray("region", "bedrock"));
        }
        if aws_profile.is_some() {
            return Err(stray("aws_profile", "bedrock"));
        }
        if invoke_model.is_some() {
            return Err(stray("invoke_model", "bedrock"));
        }
    }
    if !vertex {
        for (field, set) in [
            ("project", project.is_some()),
            ("location", location.is_some()),
            ("credentials_file", credentials_file.is_some()),
        ] {
            if set {
                return Err(stray(field, "vertex"));
            }
        }
    }
    if entra && provider != Some(ProviderName::Azure) {
        return Err(ConfigError::new(
            at("auth"),
            "Entra ID tokens are for Azure OpenAI: use it with `provider = \"azure\"`",
        ));
    }
    if (bedrock || vertex) && other_auth {
        let how = if bedrock {
            "Bedrock requests are signed with AWS credentials (the environment or the shared \
             files)"
        } else {
            "Vertex AI requests carry the service account's tokens (credentials_file)"
        };
        return Err(ConfigError::new(
            at("auth"),
            format!("{how}; remove `auth`"),
        ));
    }
    if bedrock {
        return bedrock_auth(path, region, aws_profile, ctx).map(|mut c| {
            if let CloudAuth::Bedrock(b) = &mut c {
                b.invoke_model = invoke_model.unwrap_or(false);
            }
            Some(c)
        });
    }
    if vertex {
        return vertex_auth(path, project, location, credentials_file, ctx).map(Some);
    }
    if entra {
        let credentials = match ClientCredentials::from_env(ctx.env) {
            Ok(c) => Some(c),
            Err(e) => match ctx.mode {
                EnvMode::Required => {
                    return Err(ConfigError::new(
                        at("auth"),
                        format!("Entra ID client credentials: {e}"),
                    ))
                }
                EnvMode::Skip => {
                    ctx.warn(at("auth"), format!("not checked (--skip-env): {e}"));
                    None
                }
            },
        };
        return Ok(Some(CloudAuth::Entra(EntraAuth { credentials })));
    }
    Ok(None)
}

fn bedrock_auth(
    path: &str,
    region: Option<String>,
    aws_profile: Option<String>,
    ctx: &mut Ctx<'_>,
) -> Result<CloudAuth, ConfigError> {
    let env = ctx.env;
    let resolved = credentials::resolve(
        aws_profile.as_deref().filter(|p| !p.is_empty()),
        env,
        |file| std::fs::read_to_string(file).ok(),
    );
    let (credentials, source, found_region) = match resolved {
        Ok(r) => {
            let source = match r.source {
                CredentialSource::Environment => "environment".to_string(),
                CredentialSource::CredentialsFile { path, profile }
                | CredentialSource::ConfigFile { path, profile } => {
                    format!("{path} [{profile}]")
                }
            };
            (Some(r.credentials), source, r.region)
        }
        Err(e) => match ctx.mode {
            EnvMode::Required => {
                return Err(ConfigError::new(
                    format!("{path}.provider"),
                    format!("Bedrock needs AWS credentials: {e}"),
                ))
            }
            EnvMode::Skip => {
                ctx.warn(
                    format!("{path}.provider"),
                    format!("AWS credentials not checked (--skip-env): {e}"),
                );
                (None, "unresolved".to_string(), None)
            }
        },
    };
    let region = match region.filter(|r| !r.is_empty()).or(found_region) {
        Some(r) => r,
        None if ctx.mode == EnvMode::Skip => {
            ctx.warn(
                format!("{path}.region"),
                "not set and not found in the environment; not checked (--skip-env)",
            );
            "us-east-1".to_string()
        }
        None => {
            return Err(ConfigError::new(
                format!("{path}.region"),
                "Bedrock needs the region requests are signed for: set region = \"us-east-1\" \
                 (or AWS_REGION)",
            ))
        }
    };
    if !region
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(ConfigError::new(
            format!("{path}.region"),
            format!("`{region}` is not an AWS region name (e.g. \"us-east-1\")"),
        ));
    }
    Ok(CloudAuth::Bedrock(BedrockAuth {
        region,
        credentials,
        source,
        invoke_model: false,
    }))
}

fn vertex_auth(
    path: &str,
    project: Option<String>,
    location: Option<String>,
    credentials_file: Option<PathBuf>,
    ctx: &mut Ctx<'_>,
) -> Result<CloudAuth, ConfigError> {
    let file_path = format!("{path}.credentials_file");
    let location = location.filter(|l| !l.is_empty()).ok_or_else(|| {
        ConfigError::new(
            format!("{path}.location"),
            "Vertex AI needs the location models are called in, e.g. location = \"us-central1\" \
             (or \"global\")",
        )
    })?;
    let key_file = credentials_file
        .or_else(|| (ctx.env)("GOOGLE_APPLICATION_CREDENTIALS").map(PathBuf::from))
        .filter(|p| !p.as_os_str().is_empty());
    let skip = |ctx: &mut Ctx<'_>, why: String| {
        ctx.warn(&file_path, format!("not checked (--skip-env): {why}"));
    };
    let key = match key_file.as_ref() {
        None if ctx.mode == EnvMode::Skip => {
            skip(ctx, "GOOGLE_APPLICATION_CREDENTIALS is not set".into());
            None
        }
        None => {
            return Err(ConfigError::new(
                file_path,
                "Vertex AI needs a service-account key file: set credentials_file = \
                 \"/path/key.json\" (or GOOGLE_APPLICATION_CREDENTIALS)",
            ))
        }
        Some(_) if ctx.unresolved_at(&file_path).is_some() => {
            skip(ctx, "its path needs a variable that is not set".into());
            None
        }
        Some(file) => {
            let bytes = std::fs::read(file).map_err(|e| {
                ConfigError::new(&file_path, format!("cannot read {}: {e}", file.display()))
            })?;
            let key = ServiceAccountKey::from_json(&bytes).map_err(|e| {
                ConfigError::new(
                    &file_path,
                    format!(
                        "{} is not a usable service-account key: {e}",
                        file.display()
                    ),
                )
            })?;
            Some(Arc::new(key))
        }
    };
    let project = project.filter(|p| !p.is_empty()).or_else(|| {
        key.as_ref()
            .and_then(|k| k.project_id().map(str::to_string))
    });
    let project = match project {
        Some(p) => p,
        None if key.is_none() => "unchecked".to_string(),
        None => {
            return Err(ConfigError::new(
                format!("{path}.project"),
                "Vertex AI needs the Google Cloud project: set project = \"my-project\" (the \
                 key file names none)",
            ))
        }
    };
    Ok(CloudAuth::Vertex(VertexAuth {
        project,
        location,
        key_file: key_file.unwrap_or_default(),
        key,
    }))
}
