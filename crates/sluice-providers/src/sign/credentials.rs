//! AWS credentials and region from the standard places that need no network, as pure
//! functions over the environment and the shared files' text.
//!
//! The chain, in the AWS SDKs' order:
//! 1. the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`;
//! 2. the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
//!    `~/.aws/credentials`), section `[name]`;
//! 3. the shared config file (`AWS_CONFIG_FILE`, else `~/.aws/config`), section
//!    `[profile name]` (`[default]` for the default profile), which may also hold static keys.
//!
//! The profile is `AWS_PROFILE` (else `AWS_DEFAULT_PROFILE`, else `default`) unless the caller
//! names one. The region is `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the profile's
//! `region` in the config file.
//!
//! NOTE: role assumption (`role_arn` with `source_profile` or `credential_source`, through
//! STS), web identity, SSO, `credential_process` and the EC2/ECS metadata endpoints are not
//! done yet: they need network calls and refreshing. A profile that only has those is
//! refused with [`CredentialsError::Unsupported`], naming the setting, rather than skipped,
//! so the operator learns why no credentials were found.
//!
//! The caller does the I/O: `env` looks a variable up, `read_file` returns a file's text
//! (`None` when it does not exist or cannot be read).

use std::fmt;

/// AWS credentials. `Debug` shows the access key id only (it identifies, it does not
/// authenticate); the secret key and session token are redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl Credentials {
    /// Static credentials (a session token for temporary ones).
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Credentials {
        Credentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: session_token.filter(|t| !t.is_empty()),
        }
    }

    /// The access key id (`AKIA...`, `ASIA...` for temporary credentials).
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// The secret access key. Only the signer should read it.
    pub fn secret_access_key(&self) -> &str {
        &self.secret_access_key
    }

    /// The session token of temporary credentials.
    pub fn session_token(&self) -> Option<&str> {
        self.session_token.as_deref()
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"** redacted **")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "** redacted **"),
            )
            .finish()
    }
}

/// Where resolved credentials came from, for a startup log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialSource {
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    Environment,
    /// The shared credentials file, this profile.
    CredentialsFile {
        /// The file.
        path: String,
        /// The profile.
        profile: String,
    },
    /// The shared config file, this profile.
    ConfigFile {
        /// The file.
        path: String,
        /// The profile.
        profile: String,
    },
}

/// What the chain found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The credentials.
    pub credentials: Credentials,
    /// Where they came from.
    pub source: CredentialSource,
    /// The region from the environment or the profile, if any (the gateway's config may set
    /// one instead).
    pub region: Option<String>,
}

/// Why no credentials could be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// Nothing in the chain had credentials.
    #[error("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put the keys of profile `{profile}` in {credentials_file} (searched: the environment, {credentials_file}, {config_file})")]
    NotFound {
        /// The profile looked for.
        profile: String,
        /// The credentials file looked in.
        credentials_file: String,
        /// The config file looked in.
        config_file: String,
    },
    /// A source had half of a key pair.
    #[error("{source_name} has `{present}` but not `{missing}`: set both")]
    Incomplete {
        /// The environment, or the file and profile.
        source_name: String,
        /// The setting that is there.
        present: &'static str,
        /// The setting that is missing.
        missing: &'static str,
    },
    /// The profile gets its credentials in a way not supported yet.
    #[error("profile `{profile}` gets its credentials through `{setting}`, which Sluice does not support yet (no role assumption, SSO, web identity or credential_process); give it static keys, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")]
    Unsupported {
        /// The profile.
        profile: String,
        /// The setting (`role_arn`, `sso_session`, `credential_process`, ...).
        setting: &'static str,
    },
    /// A profile was named (by the caller or `AWS_PROFILE`) that neither file has.
    #[error("AWS profile `{profile}` is in neither {credentials_file} nor {config_file}")]
    ProfileNotFound {
        /// The profile.
        profile: String,
        /// The credentials file looked in.
        credentials_file: String,
        /// The config file looked in.
        config_file: String,
    },
}

impl CredentialsError {
    /// A low-cardinality label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CredentialsError::NotFound { .. } => "not_found",
            CredentialsError::Incomplete { .. } => "incomplete",
            CredentialsError::Unsupported { .. } => "unsupported",
            CredentialsError::ProfileNotFound { .. } => "profile_not_found",
        }
    }
}

/// One section of an INI-style AWS file: its name and its `key = value` settings (keys
/// lower-cased; nested sub-settings, indented under a key, are left out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Section {
    /// The name between the brackets, trimmed (`default`, `profile work`).
    pub name: String,
    /// The settings in file order.
    pub settings: Vec<(String, String)>,
}

impl Section {
    /// A setting's value (the last one when repeated).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the shared credentials or config file format: `[section]` lines, `key = value`
/// lines, comments on lines starting with `#` or `;` (and after whitespace at the end of a
/// line), blank lines. Lines before any section and lines it cannot read are skipped, as the
/// AWS CLI skips them; a section that appears twice has its settings merged.
pub fn parse_ini(text: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    let mut current: Option<usize> = None;
    for raw in text.lines() {
        // Indented lines continue the previous key (nested settings such as `s3 =`): not a
        // credential, never read.
        if raw.starts_with([' ', '\t']) && !raw.trim().starts_with('[') {
            continue;
        }
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let Some(name) = rest.strip_suffix(']') else {
                current = None;
                continue;
            };
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            current = Some(match sections.iter().position(|s| s.name == name) {
                Some(i) => i,
                None => {
                    sections.push(Section {
                        name,
                        settings: Vec::new(),
                    });
                    sections.len() - 1
                }
            });
            continue;
        }
        let (Some(i), Some((k, v))) = (current, line.split_once('=')) else {
            continue;
        };
        let k = k.trim().to_ascii_lowercase();
        if !k.is_empty() {
            sections[i].settings.push((k, v.trim().to_string()));
        }
    }
    sections
}

/// The line without a comment: one starting the line, or one after whitespace.
fn strip_comment(line: &str) -> &str {
    let t = line.trim_start();
    if t.starts_with('#') || t.starts_with(';') {
        return "";
    }
    let b = line.as_bytes();
    for i in 1..b.len() {
        if (b[i] == b'#' || b[i] == b';') && b[i - 1].is_ascii_whitespace() {
            return &line[..i];
        }
    }
    line
}

/// The profile's section in a credentials file (`[name]`).
fn credentials_section<'a>(sections: &'a [Section], profile: &str) -> Option<&'a Section> {
    sections.iter().find(|s| s.name == profile)
}

/// The profile's section in a config file (`[profile name]`, or `[default]` /
/// `[profile default]` for the default profile).
fn config_section<'a>(sections: &'a [Section], profile: &str) -> Option<&'a Section> {
    let prefixed = format!("profile {profile}");
    sections.iter().find(|s| s.name == prefixed).or_else(|| {
        (profile == "default")
            .then(|| sections.iter().find(|s| s.name == "default"))
            .flatten()
    })
}

/// The settings that mean "credentials come from somewhere we cannot go yet".
const UNSUPPORTED: [&str; 6] = [
    "role_arn",
    "credential_process",
    "sso_session",
    "sso_start_url",
    "web_identity_token_file",
    "credential_source",
];

/// Static keys from a section, if it has any.
fn keys_from(
    section: &Section,
    profile: &str,
    source_name: impl Fn() -> String,
) -> Result<Option<Credentials>, CredentialsError> {
    let id = section.get("aws_access_key_id").filter(|v| !v.is_empty());
    let secret = section
        .get("aws_secret_access_key")
        .filter(|v| !v.is_empty());
    match (id, secret) {
        (Some(id), Some(secret)) => Ok(Some(Credentials::new(
            id,
            secret,
            section.get("aws_session_token").map(str::to_string),
        ))),
        (Some(_), None) => Err(CredentialsError::Incomplete {
            source_name: source_name(),
            present: "aws_access_key_id",
            missing: "aws_secret_access_key",
        }),
        (None, Some(_)) => Err(CredentialsError::Incomplete {
            source_name: source_name(),
            present: "aws_secret_access_key",
            missing: "aws_access_key_id",
        }),
        (None, None) => match UNSUPPORTED.iter().find(|k| section.get(k).is_some()) {
            Some(setting) => Err(CredentialsError::Unsupported {
                profile: profile.to_string(),
                setting,
            }),
            None => Ok(None),
        },
    }
}

/// The home directory the shared files are under: `HOME`, else `USERPROFILE` (Windows).
fn home(env: &impl Fn(&str) -> Option<String>) -> String {
    env("HOME")
        .or_else(|| env("USERPROFILE"))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "~".to_string())
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|v| !v.is_empty())
}

/// Expands a leading `~/` as the SDKs do.
fn expand(path: String, home: &str) -> String {
    match path.strip_prefix("~/") {
        Some(rest) => format!("{home}/{rest}"),
        None => path,
    }
}

/// Resolves credentials and region through the chain in the [module docs](self).
///
/// `profile` overrides `AWS_PROFILE` (e.g. the gateway's `upstream.aws_profile`); a profile
/// named this way (or by `AWS_PROFILE`) that neither file has is an error, while a missing
/// `default` profile only moves on. Environment keys win over any profile, as in the SDKs.
///
/// # Errors
/// [`CredentialsError`]: nothing found (the message says where it looked), half a key pair,
/// a profile that needs role assumption or SSO, a named profile that does not exist.
pub fn resolve(
    profile: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    read_file: impl Fn(&str) -> Option<String>,
) -> Result<Resolved, CredentialsError> {
    let home = home(&env);
    let credentials_file = expand(
        non_empty(env("AWS_SHARED_CREDENTIALS_FILE"))
            .unwrap_or_else(|| "~/.aws/credentials".to_string()),
        &home,
    );
    let config_file = expand(
        non_empty(env("AWS_CONFIG_FILE")).unwrap_or_else(|| "~/.aws/config".to_string()),
        &home,
    );
    let named = profile
        .map(str::to_string)
        .or_else(|| non_empty(env("AWS_PROFILE")))
        .or_else(|| non_empty(env("AWS_DEFAULT_PROFILE")));
    let profile = named.clone().unwrap_or_else(|| "default".to_string());

    let config = read_file(&config_file)
        .map(|t| parse_ini(&t))
        .unwrap_or_default();
    let config_profile = config_section(&config, &profile);
    let region = non_empty(env("AWS_REGION"))
        .or_else(|| non_empty(env("AWS_DEFAULT_REGION")))
        .or_else(|| {
            config_profile
                .and_then(|s| s.get("region"))
                .filter(|r| !r.is_empty())
                .map(str::to_string)
        });

    let env_id = non_empty(env("AWS_ACCESS_KEY_ID"));
    let env_secret = non_empty(env("AWS_SECRET_ACCESS_KEY"));
    match (env_id, env_secret) {
        (Some(id), Some(secret)) => {
            return Ok(Resolved {
                credentials: Credentials::new(id, secret, non_empty(env("AWS_SESSION_TOKEN"))),
                source: CredentialSource::Environment,
                region,
            })
        }
        (Some(_), None) => {
            return Err(CredentialsError::Incomplete {
                source_name: "the environment".to_string(),
                present: "AWS_ACCESS_KEY_ID",
                missing: "AWS_SECRET_ACCESS_KEY",
            })
        }
        (None, Some(_)) => {
            return Err(CredentialsError::Incomplete {
                source_name: "the environment".to_string(),
                present: "AWS_SECRET_ACCESS_KEY",
                missing: "AWS_ACCESS_KEY_ID",
            })
        }
        (None, None) => {}
    }

    let creds = read_file(&credentials_file)
        .map(|t| parse_ini(&t))
        .unwrap_or_default();
    let creds_profile = credentials_section(&creds, &profile);
    if let Some(section) = creds_profile {
        let name = || format!("{credentials_file} [{profile}]");
        if let Some(c) = keys_from(section, &profile, name)? {
            return Ok(Resolved {
                credentials: c,
                source: CredentialSource::CredentialsFile {
                    path: credentials_file,
                    profile,
                },
                region,
            });
        }
    }
    if let Some(section) = config_profile {
        let name = || format!("{config_file} [{}]", section.name);
        if let Some(c) = keys_from(section, &profile, name)? {
            return Ok(Resolved {
                credentials: c,
                source: CredentialSource::ConfigFile {
                    path: config_file,
                    profile,
                },
                region,
            });
        }
    }
    if named.is_some() && creds_profile.is_none() && config_profile.is_none() {
        return Err(CredentialsError::ProfileNotFound {
            profile,
            credentials_file,
            config_file,
        });
    }
    Err(CredentialsError::NotFound {
        profile,
        credentials_file,
        config_file,
    })
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

    fn files<'a>(fs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |p| fs.iter().find(|(n, _)| *n == p).map(|(_, v)| v.to_string())
    }

    const CREDENTIALS: &str = "\
# comment
[default]
aws_access_key_id = AKIDDEFAULT
aws_secret_access_key = secretdefault ; trailing comment

[work]
aws_access_key_id=ASIAWORK
aws_secret_access_key=secret/work+key=
aws_session_token = tokenwork
[half]
aws_access_key_id = AKIDHALF
";

    const CONFIG: &str = "\
[default]
region = eu-west-1

[profile work]
region = us-west-2
s3 =
  max_concurrent_requests = 20

[profile assumed]
role_arn = arn:aws:iam::123456789012:role/x
source_profile = default

[profile inconfig]
aws_access_key_id = AKIDCONFIG
aws_secret_access_key = secretconfig
region = ap-south-1
";

    fn fs() -> [(&'static str, &'static str); 2] {
        [
            ("/home/u/.aws/credentials", CREDENTIALS),
            ("/home/u/.aws/config", CONFIG),
        ]
    }

    #[test]
    fn parses_the_ini_format() {
        let s = parse_ini(CREDENTIALS);
        assert_eq!(
            s.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["default", "work", "half"]
        );
        assert_eq!(s[0].get("aws_secret_access_key"), Some("secretdefault"));
        assert_eq!(s[1].get("aws_secret_access_key"), Some("secret/work+key="));
        let c = parse_ini(CONFIG);
        assert_eq!(c[1].name, "profile work");
        // The nested `max_concurrent_requests` is not a setting of the profile.
        assert_eq!(c[1].get("max_concurrent_requests"), None);
        assert_eq!(c[1].get("region"), Some("us-west-2"));
    }

    #[test]
    fn the_environment_wins() {
        let r = resolve(
            None,
            env(&[
                ("HOME", "/home/u"),
                ("AWS_ACCESS_KEY_ID", "AKIDENV"),
                ("AWS_SECRET_ACCESS_KEY", "secretenv"),
                ("AWS_SESSION_TOKEN", "tok"),
                ("AWS_REGION", "us-east-1"),
            ]),
            files(&fs()),
        )
        .unwrap();
        assert_eq!(r.source, CredentialSource::Environment);
        assert_eq!(r.credentials.access_key_id(), "AKIDENV");
        assert_eq!(r.credentials.session_token(), Some("tok"));
        assert_eq!(r.region.as_deref(), Some("us-east-1"));
    }

    #[test]
    fn profiles_from_the_files() {
        let fs = fs();
        let d = resolve(None, env(&[("HOME", "/home/u")]), files(&fs)).unwrap();
        assert_eq!(d.credentials.access_key_id(), "AKIDDEFAULT");
        assert_eq!(d.credentials.secret_access_key(), "secretdefault");
        assert_eq!(d.region.as_deref(), Some("eu-west-1"));

        let w = resolve(
            None,
            env(&[("HOME", "/home/u"), ("AWS_PROFILE", "work")]),
            files(&fs),
        )
        .unwrap();
        assert_eq!(w.credentials.session_token(), Some("tokenwork"));
        assert_eq!(w.region.as_deref(), Some("us-west-2"));
        assert_eq!(
            w.source,
            CredentialSource::CredentialsFile {
                path: "/home/u/.aws/credentials".into(),
                profile: "work".into()
            }
        );

        let c = resolve(Some("inconfig"), env(&[("HOME", "/home/u")]), files(&fs)).unwrap();
        assert_eq!(c.credentials.access_key_id(), "AKIDCONFIG");
        assert_eq!(c.region.as_deref(), Some("ap-south-1"));
        assert!(matches!(c.source, CredentialSource::ConfigFile { .. }));
    }

    #[test]
    fn file_locations_from_the_environment() {
        let fs = [(
            "/etc/creds",
            "[default]\naws_access_key_id=A\naws_secret_access_key=B\n",
        )];
        let r = resolve(
            None,
            env(&[("AWS_SHARED_CREDENTIALS_FILE", "/etc/creds")]),
            files(&fs),
        )
        .unwrap();
        assert_eq!(r.credentials.access_key_id(), "A");
        assert_eq!(r.region, None);
    }

    #[test]
    fn refusals_say_what_to_do() {
        let fs = fs();
        let e = resolve(Some("half"), env(&[("HOME", "/home/u")]), files(&fs)).unwrap_err();
        assert_eq!(e.metric_label(), "incomplete");
        assert!(e.to_string().contains("aws_secret_access_key"), "{e}");

        let e = resolve(Some("assumed"), env(&[("HOME", "/home/u")]), files(&fs)).unwrap_err();
        assert_eq!(
            e,
            CredentialsError::Unsupported {
                profile: "assumed".into(),
                setting: "role_arn"
            }
        );

        let e = resolve(Some("nope"), env(&[("HOME", "/home/u")]), files(&fs)).unwrap_err();
        assert_eq!(e.metric_label(), "profile_not_found");

        let e = resolve(None, env(&[("HOME", "/h")]), files(&[])).unwrap_err();
        assert_eq!(e.metric_label(), "not_found");
        assert!(e.to_string().contains("/h/.aws/credentials"), "{e}");

        let e = resolve(None, env(&[("AWS_ACCESS_KEY_ID", "A")]), files(&[])).unwrap_err();
        assert!(e.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{e}");
    }

    #[test]
    fn debug_redacts_the_secrets() {
        let c = Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI", Some("tok123".into()));
        let d = format!("{c:?}");
        assert!(d.contains("AKIDEXAMPLE"));
        assert!(!d.contains("wJalrXUtnFEMI"), "{d}");
        assert!(!d.contains("tok123"), "{d}");
        let r = Resolved {
            credentials: c,
            source: CredentialSource::Environment,
            region: None,
        };
        assert!(!format!("{r:?}").contains("wJalrXUtnFEMI"));
    }
}
