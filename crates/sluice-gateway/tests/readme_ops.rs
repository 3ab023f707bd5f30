//! The guide's admin and telemetry example (`docs/guide/src/operations.md`) is a config that loads, with the values it
//! documents.

use std::time::Duration;

use sluice_gateway::config::Config;

fn readme_example() -> String {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/guide/src/operations.md"
    ))
    .expect("docs/guide/src/operations.md");
    let after = page
        .split_once("<!-- ops-example:")
        .expect("the ops-example marker")
        .1;
    let block = after.split_once("```toml\n").expect("a toml block").1;
    block.split_once("```").expect("its end").0.to_string()
}

#[test]
fn the_readme_admin_and_telemetry_example_loads() {
    let text = readme_example();
    let env = |k: &str| match k {
        "SLUICE_ADMIN_TOKEN" => Some("a-long-random-admin-token-0123456789".to_string()),
        "OPENAI_API_KEY" => Some("sk-test".to_string()),
        _ => None,
    };
    let cfg = Config::from_toml(&text, &env).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(cfg.server.admin_addr().to_string(), "127.0.0.1:9901");
    assert!(cfg.server.admin_token.is_some());
    let t = &cfg.telemetry;
    assert_eq!(
        t.endpoint.as_ref().map(|u| u.to_string()).as_deref(),
        Some("http://127.0.0.1:4318/v1/traces")
    );
    assert_eq!(t.sampling_ratio, 0.01);
    assert_eq!(t.service_name, "sluice");
    assert_eq!(t.headers.len(), 1);
    assert_eq!((t.batch_size, t.queue_size), (512, 2048));
    assert_eq!(t.batch_interval, Duration::from_secs(5));
    // The token comes from the environment; without it the config is refused.
    let e =
        Config::from_toml(&text, &|k| (k == "OPENAI_API_KEY").then(|| "sk".into())).unwrap_err();
    assert!(e.to_string().contains("SLUICE_ADMIN_TOKEN"), "{e}");
}

#[test]
fn telemetry_settings_are_checked() {
    let base = "[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"u\"\n";
    for (telemetry, path, words) in [
        ("endpoint = \"grpc://x:4317\"", "telemetry.endpoint", "http"),
        (
            "endpoint = \"http://x:4318\"\nsampling_ratio = 1.5",
            "telemetry.sampling_ratio",
            "0.0",
        ),
        ("batch_size = 0", "telemetry.batch_size", "from 1"),
        (
            "batch_size = 100\nqueue_size = 10",
            "telemetry.queue_size",
            "batch_size",
        ),
        (
            "batch_interval = \"0s\"",
            "telemetry.batch_interval",
            "greater than zero",
        ),
        (
            "headers = { \"bad header\" = \"v\" }",
            "telemetry.headers.bad header",
            "header name",
        ),
        (
            "endpoitn = \"http://x\"",
            "telemetry.endpoitn",
            "did you mean `endpoint`",
        ),
    ] {
        let text = format!("{base}[telemetry]\n{telemetry}\n");
        let e = Config::from_toml(&text, &|_| None).unwrap_err();
        assert_eq!(e.path, path, "{telemetry}: {e}");
        assert!(e.reason.contains(words), "{telemetry}: {e}");
    }
    // A full traces URL is kept as written; a base URL gets /v1/traces.
    let full = Config::from_toml(
        &format!("{base}[telemetry]\nendpoint = \"https://otel.example:443/otlp/v1/traces\"\n"),
        &|_| None,
    )
    .unwrap();
    assert_eq!(full.telemetry.endpoint.unwrap().path(), "/otlp/v1/traces");
    // Secrets stay out of Debug output.
    let h = Config::from_toml(
        &format!("{base}[telemetry]\nheaders = {{ \"x-key\" = \"hunter2\" }}\n"),
        &|_| None,
    )
    .unwrap();
    assert!(!format!("{:?}", h.telemetry).contains("hunter2"));
    // Admin settings.
    let e = Config::from_toml(
        &format!("[server]\nadmin_listen = \"localhost\"\n{base}"),
        &|_| None,
    )
    .unwrap_err();
    assert_eq!(e.path, "server.admin_listen");
    let e = Config::from_toml(
        &format!("[server]\nadmin_token = \"has space\"\n{base}"),
        &|_| None,
    )
    .unwrap_err();
    assert_eq!(e.path, "server.admin_token");
    let checked = Config::check_toml(
        &format!("[server]\nadmin_token = \"short\"\n{base}"),
        &|_| None,
        sluice_gateway::config::EnvMode::Required,
    )
    .unwrap();
    assert!(
        checked
            .warnings
            .iter()
            .any(|w| w.path == "server.admin_token"),
        "{:?}",
        checked.warnings
    );
}

#[test]
fn the_admin_plane_needs_its_own_port() {
    let text = "[server]\nlisten = \"127.0.0.1:8080\"\nadmin_listen = \"127.0.0.1:8080\"\n[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"u\"\n";
    let e = Config::from_toml(text, &|_| None).unwrap_err();
    assert_eq!(e.path, "server.admin_listen");
    assert!(e.reason.contains("own port"), "{e}");
}
