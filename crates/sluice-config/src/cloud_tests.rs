//! Cloud upstreams in the config: Bedrock's credentials from the environment and the shared
//! files, Vertex AI's key file, Entra ID's variables, and the message each mistake gets.

use std::path::PathBuf;

use super::*;

fn fixture_key() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sluice-providers/tests/fixtures/google/service_account.json")
}

fn upstream(lines: &str) -> String {
    format!(
        "[[upstream]]\nname = \"cloud\"\nbase_url = \"https://example.test\"\n{lines}\n\
         [[route]]\nmodels = [\"*\"]\nupstream = \"cloud\"\n"
    )
}

fn aws_env(k: &str) -> Option<String> {
    match k {
        "AWS_ACCESS_KEY_ID" => Some("AKIDEXAMPLE".into()),
        "AWS_SECRET_ACCESS_KEY" => Some("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into()),
        "HOME" => Some("/nonexistent".into()),
        _ => None,
    }
}

fn no_env(k: &str) -> Option<String> {
    (k == "HOME").then(|| "/nonexistent".to_string())
}

/// A variable lookup, as `Config::from_toml` takes it.
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn err_with(text: &str, env: Env<'_>) -> String {
    Config::from_toml(text, env).unwrap_err().to_string()
}

#[test]
fn bedrock_signs_with_the_environment_keys_and_the_region() {
    let c = Config::from_toml(
        &upstream("provider = \"bedrock\"\nregion = \"eu-west-3\""),
        &aws_env,
    )
    .unwrap();
    let u = &c.upstreams[0];
    assert_eq!(u.provider, None);
    let Some(CloudAuth::Bedrock(b)) = &u.cloud else {
        panic!("{:?}", u.cloud)
    };
    assert_eq!(b.region, "eu-west-3");
    assert_eq!(b.source, "environment");
    assert_eq!(
        b.credentials.as_ref().unwrap().access_key_id(),
        "AKIDEXAMPLE"
    );
    // Neither the redacted view nor Debug holds the secret.
    let shown = format!("{} {:?}", c.redacted(), c);
    assert!(!shown.contains("wJalrXUtnFEMI"), "{shown}");
    assert!(shown.contains("AKIDEXAMPLE") && shown.contains("eu-west-3"));
}

#[test]
fn bedrock_reads_a_profile_of_the_shared_credentials_file() {
    let dir = std::env::temp_dir().join(format!("sluice-aws-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("credentials");
    std::fs::write(
        &file,
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s1\n\
         [team]\naws_access_key_id = AKIDTEAM\naws_secret_access_key = s2\n",
    )
    .unwrap();
    let path = file.display().to_string();
    let env = |k: &str| match k {
        "AWS_SHARED_CREDENTIALS_FILE" => Some(path.clone()),
        "AWS_PROFILE" => Some("team".to_string()),
        "AWS_REGION" => Some("us-west-2".to_string()),
        "HOME" => Some("/nonexistent".to_string()),
        _ => None,
    };
    let c = Config::from_toml(&upstream("provider = \"bedrock\""), &env).unwrap();
    let Some(CloudAuth::Bedrock(b)) = &c.upstreams[0].cloud else {
        panic!()
    };
    assert_eq!(b.credentials.as_ref().unwrap().access_key_id(), "AKIDTEAM");
    assert_eq!(b.region, "us-west-2");
    assert!(b.source.ends_with("credentials [team]"), "{}", b.source);
    // `aws_profile` names another profile than AWS_PROFILE.
    let c = Config::from_toml(
        &upstream("provider = \"bedrock\"\naws_profile = \"default\""),
        &env,
    )
    .unwrap();
    let Some(CloudAuth::Bedrock(b)) = &c.upstreams[0].cloud else {
        panic!()
    };
    assert_eq!(
        b.credentials.as_ref().unwrap().access_key_id(),
        "AKIDDEFAULT"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn cloud_mistakes_get_the_field_and_the_fix() {
    let key = fixture_key().display().to_string();
    let cases: Vec<(String, Env<'_>, &str)> = vec![
        (
            upstream("provider = \"bedrock\"\nregion = \"us-east-1\""),
            &no_env,
            "upstream[0].provider: Bedrock needs AWS credentials: no AWS credentials found",
        ),
        (
            upstream("provider = \"bedrock\""),
            &aws_env,
            "upstream[0].region: Bedrock needs the region",
        ),
        (
            upstream("provider = \"bedrock\"\nregion = \"us east\""),
            &aws_env,
            "is not an AWS region name",
        ),
        (
            upstream("provider = \"bedrock\"\nregion = \"us-east-1\"\nauth = { type = \"bearer\", env = \"X\" }"),
            &aws_env,
            "Bedrock requests are signed with AWS credentials",
        ),
        (
            upstream("provider = \"openai\"\nregion = \"us-east-1\""),
            &aws_env,
            "upstream[0].region: only applies to `provider = \"bedrock\"`",
        ),
        (
            upstream("provider = \"gemini\"\nlocation = \"us-central1\""),
            &no_env,
            "upstream[0].location: only applies to `provider = \"vertex\"`",
        ),
        (
            upstream(&format!("provider = \"vertex\"\ncredentials_file = \"{key}\"")),
            &no_env,
            "upstream[0].location: Vertex AI needs the location",
        ),
        (
            upstream("provider = \"vertex\"\nlocation = \"us-central1\""),
            &no_env,
            "upstream[0].credentials_file: Vertex AI needs a service-account key file",
        ),
        (
            upstream(
                "provider = \"vertex\"\nlocation = \"us-central1\"\ncredentials_file = \"/nonexistent/key.json\"",
            ),
            &no_env,
            "upstream[0].credentials_file: cannot read /nonexistent/key.json",
        ),
        (
            upstream("provider = \"bedrock\"\nregion = \"us-east-1\"\nhealth_check = {}"),
            &aws_env,
            "upstream[0].health_check: active health checks are sent without a signature",
        ),
        (
            upstream("provider = \"openai\"\nauth = { type = \"entra\" }"),
            &no_env,
            "upstream[0].auth: Entra ID tokens are for Azure OpenAI",
        ),
        (
            upstream("provider = \"azure\"\napi_version = \"2024-10-21\"\nauth = { type = \"entra\" }"),
            &no_env,
            "upstream[0].auth: Entra ID client credentials:",
        ),
    ];
    for (text, env, want) in cases {
        let got = err_with(&text, env);
        assert!(got.contains(want), "want {want:?}\ngot  {got}\nfor\n{text}");
    }
}

#[test]
fn vertex_takes_the_project_from_the_key_file() {
    let key = fixture_key().display().to_string();
    let c = Config::from_toml(
        &upstream(&format!(
            "provider = \"vertex\"\nlocation = \"global\"\ncredentials_file = \"{key}\""
        )),
        &no_env,
    )
    .unwrap();
    let Some(CloudAuth::Vertex(v)) = &c.upstreams[0].cloud else {
        panic!()
    };
    assert_eq!(
        (v.project.as_str(), v.location.as_str()),
        ("sluice-test", "global")
    );
    assert!(v.key.is_some());
    assert!(c.upstreams[0].cloud.as_ref().unwrap().uses_tokens());
    let shown = format!("{} {:?}", c.redacted(), c);
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    // GOOGLE_APPLICATION_CREDENTIALS stands in for `credentials_file`.
    let env = |k: &str| (k == "GOOGLE_APPLICATION_CREDENTIALS").then(|| key.clone());
    let c = Config::from_toml(
        &upstream("provider = \"vertex\"\nlocation = \"us-east5\"\nproject = \"p2\""),
        &env,
    )
    .unwrap();
    let Some(CloudAuth::Vertex(v)) = &c.upstreams[0].cloud else {
        panic!()
    };
    assert_eq!(v.project, "p2");
}

#[test]
fn entra_reads_the_azure_variables_and_skip_env_only_warns() {
    let env = |k: &str| {
        let v = match k {
            "AZURE_TENANT_ID" => "contoso.onmicrosoft.com",
            "AZURE_CLIENT_ID" => "00000000-0000-0000-0000-000000000001",
            "AZURE_CLIENT_SECRET" => "s3cr3t~value",
            _ => return None,
        };
        Some(v.to_string())
    };
    let text =
        upstream("provider = \"azure\"\napi_version = \"2024-10-21\"\nauth = { type = \"entra\" }");
    let c = Config::from_toml(&text, &env).unwrap();
    let Some(CloudAuth::Entra(e)) = &c.upstreams[0].cloud else {
        panic!()
    };
    assert_eq!(
        e.credentials.as_ref().unwrap().tenant_id(),
        "contoso.onmicrosoft.com"
    );
    let shown = format!("{} {:?}", c.redacted(), c);
    assert!(!shown.contains("s3cr3t"), "{shown}");
    // Without the variables, check-config --skip-env warns instead of failing.
    let checked = Config::check_toml(&text, &no_env, EnvMode::Skip).unwrap();
    assert!(
        checked
            .warnings
            .iter()
            .any(|w| w.path == "upstream[0].auth"),
        "{:?}",
        checked.warnings
    );
}

#[test]
fn skip_env_checks_cloud_upstreams_without_their_credentials() {
    let bedrock = upstream("provider = \"bedrock\"");
    let checked = Config::check_toml(&bedrock, &no_env, EnvMode::Skip).unwrap();
    let mut paths: Vec<&str> = checked.warnings.iter().map(|w| w.path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, ["upstream[0].provider", "upstream[0].region"]);
    let Some(CloudAuth::Bedrock(b)) = &checked.config.upstreams[0].cloud else {
        panic!()
    };
    assert!(b.credentials.is_none());
    let vertex = upstream("provider = \"vertex\"\nlocation = \"us-central1\"");
    let checked = Config::check_toml(&vertex, &no_env, EnvMode::Skip).unwrap();
    assert_eq!(checked.warnings[0].path, "upstream[0].credentials_file");
    // What is wrong in the file itself is still an error.
    let no_location = upstream("provider = \"vertex\"");
    assert!(Config::check_toml(&no_location, &no_env, EnvMode::Skip).is_err());
}

/// An upstream as `upstream` writes it, but with `base_url` as given (or none).
fn cloud_upstream(base_url: Option<&str>, lines: &str) -> String {
    let base = base_url.map_or(String::new(), |b| format!("base_url = \"{b}\"\n"));
    format!(
        "[[upstream]]\nname = \"cloud\"\n{base}{lines}\n\
         [[route]]\nmodels = [\"*\"]\nupstream = \"cloud\"\n"
    )
}

#[test]
fn cloud_base_urls_follow_the_region_and_location() {
    let key = fixture_key().display().to_string();
    let vertex = |location: &str| {
        format!("provider = \"vertex\"\nlocation = \"{location}\"\ncredentials_file = \"{key}\"")
    };
    let base = |text: String, env: Env<'_>| {
        Config::from_toml(&text, env).unwrap().upstreams[0]
            .base_url
            .to_string()
    };
    let bedrock = "provider = \"bedrock\"\nregion = \"eu-west-3\"";
    assert_eq!(
        base(cloud_upstream(None, bedrock), &aws_env),
        "https://bedrock-runtime.eu-west-3.amazonaws.com/"
    );
    // The region from the environment derives it too.
    let env = |k: &str| match k {
        "AWS_REGION" => Some("ap-northeast-1".to_string()),
        other => aws_env(other),
    };
    assert_eq!(
        base(cloud_upstream(None, "provider = \"bedrock\""), &env),
        "https://bedrock-runtime.ap-northeast-1.amazonaws.com/"
    );
    assert_eq!(
        base(cloud_upstream(None, &vertex("us-east5")), &no_env),
        "https://us-east5-aiplatform.googleapis.com/"
    );
    assert_eq!(
        base(cloud_upstream(None, &vertex("global")), &no_env),
        "https://aiplatform.googleapis.com/"
    );
    // Given and agreeing, or not the cloud's host (the mock, a proxy): kept as written.
    for (url, lines) in [
        (
            "https://bedrock-runtime.eu-west-3.amazonaws.com",
            bedrock.to_string(),
        ),
        ("http://127.0.0.1:9/bedrock", bedrock.to_string()),
        ("https://bedrock.proxy.example.com", bedrock.to_string()),
        (
            "https://europe-west4-aiplatform.googleapis.com",
            vertex("europe-west4"),
        ),
        ("https://aiplatform.googleapis.com", vertex("global")),
        ("http://127.0.0.1:9", vertex("us-central1")),
    ] {
        let got = base(cloud_upstream(Some(url), &lines), &aws_env);
        assert_eq!(got.trim_end_matches('/'), url, "{lines}");
    }
}

#[test]
fn a_cloud_host_of_another_region_is_refused() {
    let key = fixture_key().display().to_string();
    let vertex = |location: &str| {
        format!("provider = \"vertex\"\nlocation = \"{location}\"\ncredentials_file = \"{key}\"")
    };
    let cases = [
        (
            cloud_upstream(
                Some("https://bedrock-runtime.us-west-2.amazonaws.com"),
                "provider = \"bedrock\"\nregion = \"eu-west-3\"",
            ),
            "line 3: upstream[0].base_url: `https://bedrock-runtime.us-west-2.amazonaws.com` is \
             in region us-west-2 but requests are signed for region eu-west-3: set region = \
             \"us-west-2\", or remove base_url to use \
             https://bedrock-runtime.eu-west-3.amazonaws.com",
        ),
        (
            cloud_upstream(
                Some("https://us-central1-aiplatform.googleapis.com"),
                &vertex("europe-west4"),
            ),
            "line 3: upstream[0].base_url: `https://us-central1-aiplatform.googleapis.com` \
             serves location us-central1 but location is europe-west4: set location = \
             \"us-central1\", or remove base_url to use \
             https://europe-west4-aiplatform.googleapis.com",
        ),
        (
            cloud_upstream(
                Some("https://aiplatform.googleapis.com"),
                &vertex("us-east5"),
            ),
            "serves location global but location is us-east5",
        ),
        (
            cloud_upstream(
                Some("https://us-east5-aiplatform.googleapis.com"),
                &vertex("global"),
            ),
            "or remove base_url to use https://aiplatform.googleapis.com",
        ),
        (
            cloud_upstream(None, "provider = \"openai\""),
            "upstream[0].base_url: is required (only `provider = \"bedrock\"` and `\"vertex\"` \
             derive it",
        ),
    ];
    for (text, want) in cases {
        let got = err_with(&text, &aws_env);
        assert!(got.contains(want), "want {want:?}\ngot  {got}\nfor\n{text}");
    }
}
