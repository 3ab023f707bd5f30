//! Config loading as a user meets it: the exact message for each kind of mistake, units,
//! interpolation, `--skip-env`, and the listener's TLS material.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

fn env(k: &str) -> Option<String> {
    match k {
        "LOCAL_KEY" => Some("sk-local".to_string()),
        "MOCK_HOST" => Some("127.0.0.1:9090".to_string()),
        _ => None,
    }
}

const MIN: &str = r#"
[[upstream]]
name = "local"
base_url = "http://127.0.0.1:9090/v1"

[[route]]
models = ["*"]
upstream = "local"
"#;

fn err(text: &str) -> ConfigError {
    Config::from_toml(text, &env).unwrap_err()
}

/// `MIN` with `line` added to the upstream table (it lands on line 4).
fn with_upstream_line(line: &str) -> String {
    MIN.replace("name = \"local\"", &format!("name = \"local\"\n{line}"))
}

#[test]
fn minimal_config_gets_defaults() {
    let c = Config::from_toml(MIN, &env).unwrap();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.server.heartbeat, Duration::from_secs(15));
    assert_eq!(c.server.max_request_body, 16 << 20);
    assert_eq!(c.upstreams[0].protocol, UpstreamProtocol::Auto);
    assert_eq!(c.upstreams[0].auth, UpstreamAuth::Passthrough);
    assert_eq!(c.upstreams[0].timeouts.total, Duration::from_secs(600));
    assert_eq!(c.routes[0].on_client_disconnect, OnClientDisconnect::Cancel);
    assert_eq!(c.upstreams[0].pool, sluice_upstream::PoolConfig::default());
    assert_eq!(c.upstreams[0].long_max_tokens, 4096);
    assert_eq!(c.routes[0].lane, None);
}

/// Each broken config and the whole message it gets: line, field path, what is wrong, the fix.
#[test]
fn broken_configs_get_the_field_the_line_and_the_fix() {
    let cases: Vec<(String, &str)> = vec![
        // Type errors.
        (
            with_upstream_line("timeouts = { idle = 30 }"),
            "line 4: upstream[0].timeouts.idle: expected a duration string such as \"30s\", \
             found the number 30: write \"30s\" for seconds or \"30ms\" for milliseconds",
        ),
        (
            format!("[server]\nserver_timing = \"yes\"\n{MIN}"),
            "line 2: server.server_timing: expected a boolean, found string \"yes\"",
        ),
        (
            format!("[server]\nmax_request_body = 1.5\n{MIN}"),
            "line 2: server.max_request_body: expected a size such as \"16MiB\" or a whole \
             number of bytes, found the number 1.5: sizes are whole numbers",
        ),
        (
            MIN.replace("models = [\"*\"]", "models = \"*\""),
            "line 7: route[0].models: expected a sequence, found string \"*\"",
        ),
        // Unknown fields, with the closest known one.
        (
            format!("[server]\nlisten = \"127.0.0.1:8080\"\n\n\nheartbeet = \"15s\"\n{MIN}"),
            "line 5: server.heartbeet: unknown field; did you mean `heartbeat`?",
        ),
        (
            with_upstream_line("base_ulr = \"x\""),
            "line 4: upstream[0].base_ulr: unknown field; did you mean `base_url`?",
        ),
        (
            with_upstream_line("timeouts = { idel = \"3s\" }"),
            "line 4: upstream[0].timeouts.idel: unknown field; did you mean `idle`?",
        ),
        (
            with_upstream_line("colour = \"blue\""),
            "line 4: upstream[0].colour: unknown field; expected one of `name`, `base_url`, \
             `protocol`, `auth`, `ca_file`, `session_header_to_body`, `timeouts`, `pool`, `retry_budget`, `provider`, `api_version`, `anthropic_version`, `prefill`, `health_check`, `region`, \
             `aws_profile`, `project`, `location`, `credentials_file`, `invoke_model`",
        ),
        (
            format!("{MIN}\n[sever]\nlisten = \"x\"\n"),
            "line 10: sever: unknown field; did you mean `server`?",
        ),
        // Unknown values of enums, with the closest known one.
        (
            with_upstream_line("protocol = \"http2\""),
            "line 4: upstream[0].protocol: `http2` is not one of `http1`, `h2`, `h2c`, `auto`; \
             did you mean `http1`?",
        ),
        (
            MIN.replace(
                "upstream = \"local\"\n",
                "upstream = \"local\"\nlane = \"fast\"\n",
            ),
            "line 9: route[0].lane: `fast` is not one of `stream`, `short`",
        ),
        (
            MIN.replace(
                "upstream = \"local\"\n",
                "upstream = \"local\"\non_client_disconnect = \"drian\"\n",
            ),
            "line 9: route[0].on_client_disconnect: `drian` is not one of `cancel`, `drain`; did \
             you mean `drain`?",
        ),
        (
            with_upstream_line("auth = { type = \"bearr\", env = \"LOCAL_KEY\" }"),
            "line 4: upstream[0].auth.type: `bearr` is not one of `passthrough`, `bearer`, `header`, `api_key`, \
             `entra`; \
             did you mean `bearer`?",
        ),
        (
            with_upstream_line("auth = { type = \"bearer\" }"),
            "line 4: upstream[0].auth.env: is required but missing",
        ),
        (
            with_upstream_line("auth = { type = \"passthrough\", env = \"LOCAL_KEY\" }"),
            "line 4: upstream[0].auth.env: unknown field; this table takes no fields",
        ),
        (
            MIN.replace("base_url = \"http://127.0.0.1:9090/v1\"\n", ""),
            "line 2: upstream[0].base_url: is required (only `provider = \"bedrock\"` and \
             `\"vertex\"` derive it from their region or location); write e.g. base_url = \
             \"http://127.0.0.1:9090/v1\"",
        ),
        // Bad units.
        (
            with_upstream_line("timeouts = { idle = \"30\" }"),
            "line 4: upstream[0].timeouts.idle: `30` has no unit: write \"30s\" for seconds or \
             \"30ms\" for milliseconds",
        ),
        (
            with_upstream_line("timeouts = { idle = \"3x\" }"),
            "line 4: upstream[0].timeouts.idle: `3x`: unknown unit `x`; use ms, s, m, h or d, \
             combined like \"1m30s\"",
        ),
        (
            format!("[server]\nmax_request_body = \"16M\"\n{MIN}"),
            "line 2: server.max_request_body: `16M`: `M` is ambiguous; write 16MiB (powers of \
             1024) or 16MB (powers of 1000)",
        ),
        (
            format!("[server]\nheartbeat = \"0s\"\n{MIN}"),
            "line 2: server.heartbeat: must be greater than zero",
        ),
        // Validation across fields, the file system and the connection layer.
        (
            with_upstream_line("timeouts = { idle = \"20m\", total = \"10m\" }"),
            "line 4: upstream[0].timeouts.idle: 20m is longer than total (10m); it could never \
             fire",
        ),
        (
            MIN.replace("http://127", "ftp://127"),
            "line 4: upstream[0].base_url: `ftp://127.0.0.1:9090/v1`: the scheme must be http or \
             https; write e.g. \"http://127.0.0.1:9090/v1\"",
        ),
        (
            with_upstream_line("protocol = \"h2\""),
            "line 4: upstream[0].protocol: protocol h2 needs https (use h2c) (base_url is \
             `http://127.0.0.1:9090/v1`)",
        ),
        (
            MIN.replace("upstream = \"local\"", "upstream = \"locl\""),
            "line 8: route[0].upstream: no upstream named `locl` (defined: `local`); did you \
             mean `local`?",
        ),
        (
            MIN.replace("[\"*\"]", "[]"),
            "line 7: route[0].models: needs at least one non-empty model glob, e.g. [\"gpt-4o*\"]",
        ),
        (
            format!("[server]\nlisten = \"localhost\"\n{MIN}"),
            "line 2: server.listen: must be IP:PORT, e.g. \"127.0.0.1:8080\" or \"[::]:8443\"",
        ),
        (
            with_upstream_line("auth = { type = \"bearer\", env = \"MISSING\" }"),
            "line 4: upstream[0].auth.env: the environment variable `MISSING` (the upstream's \
             key) is not set or empty",
        ),
        (
            with_upstream_line("pool = { stream = { max_connections = 0 } }"),
            "line 4: upstream[0].pool.stream.max_connections: must be at least 1",
        ),
        (
            with_upstream_line("ca_file = \"/nonexistent/ca.pem\""),
            "line 4: upstream[0].ca_file: /nonexistent/ca.pem: No such file or directory (os \
             error 2)",
        ),
        (
            format!("{MIN}\n[[upstream]]\nname = \"local\"\nbase_url = \"http://x/v1\"\n"),
            "line 11: upstream[1].name: `local` is already the name of another upstream",
        ),
        (
            "[server]\n".to_string(),
            "route: no [[route]]: every request would be rejected; add one with `models` and \
             `upstream`",
        ),
        (
            MIN.replace("upstream = \"local\"\n", "upstream = \"local\"\nlane = 3\n"),
            "line 9: route[0].lane: expected a string",
        ),
        // TOML syntax.
        (
            format!("[server]\nlisten = \"127.0.0.1:8080\"\nlisten = \"[::]:8080\"\n{MIN}"),
            "line 3: duplicate key in `listen = \"[::]:8080\"`",
        ),
        (
            format!("[server]\nlisten = 127.0.0.1\n{MIN}"),
            "line 2: invalid float, expected nothing in `listen = 127.0.0.1`",
        ),
    ];
    let mut failures = Vec::new();
    for (text, want) in &cases {
        let got = err(text).to_string();
        if got != *want {
            failures.push(format!("config:\n{text}\n  want: {want}\n  got:  {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn units_in_the_file() {
    let c = Config::from_toml(
        &format!(
            "[server]\nheartbeat = \"1m30s\"\nmax_request_body = \"16MB\"\nmax_response_body = \
             \"16 MiB\"\nmax_event_bytes = 524288\n{}",
            with_upstream_line("timeouts = { idle = \"1.5s\", total = \"1h\" }")
        ),
        &env,
    )
    .unwrap();
    assert_eq!(c.server.heartbeat, Duration::from_secs(90));
    assert_eq!(c.server.max_request_body, 16_000_000);
    assert_eq!(c.server.max_response_body, 16 << 20);
    assert_eq!(c.server.max_event_bytes, 512 << 10);
    assert_eq!(c.upstreams[0].timeouts.idle, Duration::from_millis(1500));
    assert_eq!(c.upstreams[0].timeouts.total, Duration::from_secs(3600));
}

#[test]
fn interpolation_set_unset_default_and_escape() {
    let text = r#"
[[upstream]]
name = "local"
base_url = "http://${MOCK_HOST}/v1"
session_header_to_body = { header = "${SESSION_HEADER:-x-session-id}", json_pointer = "/$$ref" }

[[route]]
models = ["*"]
upstream = "local"
"#;
    let c = Config::from_toml(text, &env).unwrap();
    assert_eq!(c.upstreams[0].base_url, "http://127.0.0.1:9090/v1");
    let s = c.upstreams[0].session_header_to_body.as_ref().unwrap();
    assert_eq!(s.header, "x-session-id");
    assert_eq!(s.json_pointer, "/$ref");

    let e = err(&text.replace("MOCK_HOST", "UPSTREAM_HOST"));
    assert_eq!(
        e.to_string(),
        "line 4: upstream[0].base_url: the environment variable `UPSTREAM_HOST` is not set; set \
         it, or give a default with ${UPSTREAM_HOST:-value}"
    );
}

#[test]
fn skip_env_turns_missing_variables_and_secrets_into_warnings() {
    let text = r#"
[[upstream]]
name = "remote"
base_url = "https://${API_HOST}/v1"
auth = { type = "bearer", env = "REMOTE_KEY" }

[[route]]
models = ["*"]
upstream = "remote"
"#;
    // Without --skip-env both are errors; the first one stops the load.
    assert_eq!(err(text).path, "upstream[0].base_url");
    let checked = Config::check_toml(text, &env, EnvMode::Skip).unwrap();
    let warnings: Vec<String> = checked.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        warnings,
        [
            "line 4: upstream[0].base_url: the environment variable `API_HOST` is not set; \
             `unset-api-host` stands in for it (--skip-env)",
            "line 5: upstream[0].auth.env: the environment variable `REMOTE_KEY` (the upstream's \
             key) is not set; not checked (--skip-env)",
        ]
    );
    // Everything else is still checked.
    let e = Config::check_toml(
        &text.replace("models = [\"*\"]", "models = []"),
        &env,
        EnvMode::Skip,
    )
    .unwrap_err();
    assert_eq!(e.path, "route[0].models");
    // A value that fails only because of its placeholder says so, and how to check it anyway.
    let e = Config::check_toml(
        &text.replace("https://${API_HOST}/v1", "${API_URL}"),
        &env,
        EnvMode::Skip,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("line 4: upstream[0].base_url: `unset-api-url`: "),
        "{e}"
    );
    assert!(
        e.reason.ends_with(
            "(this value uses ${API_URL}, which is not set: --skip-env checked it with \
             `unset-api-url`; give it a default, ${API_URL:-...}, to check it without the \
             variable)"
        ),
        "{e}"
    );
    // Files whose path needs an unset variable are not read.
    let checked = Config::check_toml(
        &format!("[server]\ntls = {{ cert = \"${{CERT_DIR}}/cert.pem\", key = \"${{CERT_DIR}}/key.pem\" }}\n{text}"),
        &env,
        EnvMode::Skip,
    )
    .unwrap();
    let warnings: Vec<String> = checked.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        warnings.contains(
            &"line 2: server.tls.cert: not checked: the file's path needs `CERT_DIR`, which is \
              not set (--skip-env)"
                .to_string()
        ),
        "{warnings:?}"
    );
    assert!(Config::from_toml(
        &format!("[server]\ntls = {{ cert = \"${{CERT_DIR}}/cert.pem\", key = \"k\" }}\n{text}"),
        &env
    )
    .is_err());
}

#[test]
fn auth_reads_the_environment_and_never_prints_the_secret() {
    let c = Config::from_toml(
        &with_upstream_line("auth = { type = \"bearer\", env = \"LOCAL_KEY\" }"),
        &env,
    )
    .unwrap();
    assert_eq!(
        c.upstreams[0].auth,
        UpstreamAuth::Bearer {
            secret: "sk-local".into()
        }
    );
    assert!(!format!("{c:?}").contains("sk-local"));
    let c = Config::from_toml(
        &with_upstream_line(
            "auth = { type = \"header\", header = \"X-Api-Key\", env = \"LOCAL_KEY\" }",
        ),
        &env,
    )
    .unwrap();
    assert_eq!(
        c.upstreams[0].auth,
        UpstreamAuth::Header {
            name: http::HeaderName::from_static("x-api-key"),
            secret: "sk-local".into()
        }
    );
}

#[test]
fn routing_takes_the_first_match() {
    let text = format!("{MIN}\n[[upstream]]\nname = \"b\"\nbase_url = \"http://127.0.0.1:1/v1\"\n")
        .replace("models = [\"*\"]", "models = [\"gpt-4o*\", \"o1\"]")
        + "\n[[route]]\nmodels = [\"*\"]\nupstream = \"b\"\nlane = \"stream\"\n";
    let c = Config::from_toml(&text, &env).unwrap();
    assert_eq!(
        c.route_for("gpt-4o-mini")
            .unwrap()
            .primary_upstream()
            .index(),
        0
    );
    assert_eq!(c.route_for("o1").unwrap().primary_upstream().index(), 0);
    assert_eq!(c.route_for("claude").unwrap().primary_upstream().index(), 1);
    assert_eq!(c.routes[1].lane, Some(sluice_upstream::Lane::Stream));
}

#[test]
fn the_example_config_loads() {
    let text = include_str!("../../../sluice.example.toml");
    let c = Config::from_toml(text, &|_| None).unwrap();
    assert_eq!(c.upstreams[0].name, "local");
    // `${SLUICE_UPSTREAM:-127.0.0.1:9090}` with the variable unset.
    assert_eq!(c.upstreams[0].base_url, "http://127.0.0.1:9090/v1");
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sluice-config-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A self-signed certificate for localhost valid from yesterday for `days`, and its key.
fn cert_pair(days: i64) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(days);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn tls_config(cert: &Path, key: &Path) -> String {
    format!(
        "[server]\ntls = {{ cert = \"{}\", key = \"{}\" }}\n{MIN}",
        cert.display(),
        key.display()
    )
}

#[test]
fn tls_material_is_loaded_as_startup_loads_it() {
    let dir = TempDir::new("tls");
    let (cert_pem, key_pem) = cert_pair(365);
    let cert = dir.write("cert.pem", &cert_pem);
    let key = dir.write("key.pem", &key_pem);
    let checked = Config::check_toml(&tls_config(&cert, &key), &env, EnvMode::Required).unwrap();
    assert!(checked.warnings.is_empty(), "{:?}", checked.warnings);
    assert!(tls::server_config(checked.config.server.tls.as_ref().unwrap()).is_ok());

    // A key that is not the certificate's.
    let (_, other_key) = cert_pair(365);
    let other = dir.write("other.pem", &other_key);
    let e = err(&tls_config(&cert, &other));
    assert_eq!(e.path, "server.tls");
    assert_eq!(
        e.reason,
        format!(
            "the private key in {} does not match the certificate in {} (the first certificate \
             must be the server's own, and the key its private key)",
            other.display(),
            cert.display()
        )
    );
    // A key file given as the certificate.
    let e = err(&tls_config(&key, &key));
    assert_eq!(e.path, "server.tls.cert");
    assert!(e.reason.contains("holds no certificate"), "{e}");
    // A certificate given as the key.
    let e = err(&tls_config(&cert, &cert));
    assert_eq!(e.path, "server.tls.key");
    assert!(
        e.reason.starts_with("cannot read a private key from"),
        "{e}"
    );
    let e = err(&tls_config(&cert, Path::new("/nonexistent/key.pem")));
    assert_eq!(e.path, "server.tls.key");
    assert_eq!(e.line, Some(2));
}

#[test]
fn a_certificate_near_its_end_is_a_warning() {
    let dir = TempDir::new("expiry");
    let (cert_pem, key_pem) = cert_pair(3);
    let cert = dir.write("cert.pem", &cert_pem);
    let key = dir.write("key.pem", &key_pem);
    let checked = Config::check_toml(&tls_config(&cert, &key), &env, EnvMode::Required).unwrap();
    assert_eq!(checked.warnings.len(), 1, "{:?}", checked.warnings);
    let w = &checked.warnings[0];
    assert_eq!(w.path, "server.tls.cert");
    assert_eq!(w.line, Some(2));
    assert!(
        w.message.starts_with(&format!(
            "the certificate in {} (CN=rcgen self signed cert) expires in 3 days (",
            cert.display()
        )),
        "{w}"
    );
    assert!(w.message.ends_with("); renew it"), "{w}");

    // The same for a CA file.
    let ca = with_upstream_line(&format!("ca_file = \"{}\"", cert.display()));
    let checked = Config::check_toml(&ca, &env, EnvMode::Required).unwrap();
    assert_eq!(checked.warnings.len(), 1, "{:?}", checked.warnings);
    assert_eq!(checked.warnings[0].path, "upstream[0].ca_file");

    // An expired one.
    let (pem, _) = cert_pair(-2);
    let old = dir.write("old.pem", &pem);
    let checked = Config::check_toml(
        &with_upstream_line(&format!("ca_file = \"{}\"", old.display())),
        &env,
        EnvMode::Required,
    )
    .unwrap();
    assert!(
        checked.warnings[0].message.contains(" expired on "),
        "{:?}",
        checked.warnings
    );
}

#[test]
fn server_edge_limits_have_defaults_and_are_checked() {
    let c = Config::from_toml(MIN, &env).unwrap();
    let s = &c.server;
    assert_eq!(s.client_timeouts, ClientTimeouts::default());
    assert_eq!(s.client_timeouts.keep_alive, Duration::from_secs(75));
    assert_eq!(s.client_resets, ClientResets::default());
    assert_eq!(s.max_connections, None, "derived at startup");
    assert_eq!(s.workers, 0, "one shared runtime");
    assert_eq!(s.max_header_bytes, 32 << 10);
    assert_eq!(s.memory_budget, 512 << 20);
    assert!(s.trusted_proxies.is_empty());
    assert_eq!(c.upstreams[0].timeouts.idle, Duration::from_secs(300));
    let with = |line: &str| {
        MIN.replacen(
            "[[upstream]]",
            &format!("[server]\n{line}\n\n[[upstream]]"),
            1,
        )
    };
    let c = Config::from_toml(
        &with("trusted_proxies = [\"10.0.0.0/8\", \"::1\"]\nclient_timeouts = { header = \"2s\" }\nclient_resets = { per_ip = 5 }"),
        &env,
    )
    .unwrap();
    assert!(c.server.trusted_proxies[0].contains("10.9.9.9".parse().unwrap()));
    assert!(c.server.trusted_proxies[1].contains("::1".parse().unwrap()));
    assert_eq!(c.server.client_timeouts.header, Duration::from_secs(2));
    assert_eq!(c.server.client_timeouts.body, Duration::from_secs(60));
    assert_eq!(c.server.client_resets.per_ip, 5);
    for n in [0, 3] {
        let c = Config::from_toml(&with(&format!("workers = {n}")), &env).unwrap();
        assert_eq!(c.server.workers, n);
    }
    for (line, want) in [
        (
            "workers = 1025",
            "line 3: server.workers: 1025 threads is more than 1024 (about one per CPU given \
             to the gateway; 0, the default, for one shared runtime)",
        ),
        (
            "trusted_proxies = [\"10.0.0.0/33\"]",
            "line 3: server.trusted_proxies[0]: `10.0.0.0/33`: the prefix length must be 0 to 32",
        ),
        (
            "memory_budget = \"1MiB\"",
            "line 3: server.memory_budget: 1048576 bytes is less than one request or response \
             body may be (max_request_body 16777216, max_response_body 8388608); raise it or \
             lower those",
        ),
        (
            "client_timeouts = { keep_alive = \"0s\" }",
            "line 3: server.client_timeouts.keep_alive: must be greater than zero",
        ),
        (
            "client_resets = { per_connection = 0 }",
            "line 3: server.client_resets.per_connection: must be at least 1",
        ),
        (
            "max_header_bytes = \"4KiB\"",
            "line 3: server.max_header_bytes: must be from 8KiB to 1MiB",
        ),
    ] {
        assert_eq!(err(&with(line)).to_string(), want, "{line}");
    }
}

#[test]
fn a_route_cache_has_defaults_is_checked_and_is_shown() {
    let c = Config::from_toml(MIN, &env).unwrap();
    assert_eq!(c.routes[0].cache, None, "off unless asked for");
    let on = MIN.replace(
        "upstream = \"local\"\n",
        "upstream = \"local\"\ncache = { ttl = \"10m\", shared = true, max_bytes = \"64KiB\", replay = \"paced\" }\n",
    );
    let c = Config::from_toml(&on, &env).unwrap();
    let cache = c.routes[0].cache.as_ref().unwrap();
    assert_eq!(cache.ttl, Duration::from_secs(600));
    assert!(cache.shared);
    assert_eq!(cache.max_bytes, 64 * 1024);
    assert_eq!(cache.replay, sluice_state::Replay::Paced);
    assert_eq!(cache.wait, Duration::from_secs(30));
    let shown = c.redacted();
    assert_eq!(shown["route"][0]["cache"]["replay"], "paced");
    assert_eq!(shown["route"][0]["cache"]["max_bytes"], 65536);
    let bounded = format!("{on}\n[state.cache]\nmax_entries = 500\nmax_bytes = \"8MiB\"\n");
    let c = Config::from_toml(&bounded, &env).unwrap();
    assert_eq!(c.state.cache.max_entries, 500);
    assert_eq!(c.state.cache.max_bytes, 8 << 20);
    assert_eq!(c.redacted()["state"]["cache"]["max_entries"], 500);
    let e = err(&format!("{on}\n[state.cache]\nput_queue = 0\n")).to_string();
    assert!(
        e.contains("state.cache.put_queue: must be at least 1"),
        "{e}"
    );
    let defaults = MIN.replace(
        "upstream = \"local\"\n",
        "upstream = \"local\"\ncache = {}\n",
    );
    let c = Config::from_toml(&defaults, &env).unwrap();
    assert_eq!(
        c.routes[0].cache,
        Some(sluice_state::CacheConfig::default())
    );
    for (cache, message) in [
        (
            "{ replay = \"slow\" }",
            "route[0].cache.replay: `slow`: expected \"instant\"",
        ),
        (
            "{ ttl = \"0s\" }",
            "route[0].cache.ttl: must be greater than zero",
        ),
        (
            "{ max_bytes = \"1GiB\" }",
            "route[0].cache.max_bytes: must be from 1 byte to 256MiB",
        ),
        (
            "{ ttl = \"1h\", size = 3 }",
            "route[0].cache.size: unknown field",
        ),
    ] {
        let text = MIN.replace(
            "upstream = \"local\"\n",
            &format!("upstream = \"local\"\ncache = {cache}\n"),
        );
        let e = err(&text).to_string();
        assert!(e.contains(message), "{cache}: {e}");
    }
}

#[test]
fn reasoning_budgets_default_to_the_table_and_are_checked() {
    use sluice_providers::reasoning::BudgetTable;
    let c = Config::from_toml(MIN, &env).unwrap();
    assert_eq!(c.routes[0].reasoning_budgets, BudgetTable::DEFAULT);
    let text = format!("{MIN}reasoning_budgets = {{ low = 3000, high = 20000 }}\n");
    let c = Config::from_toml(&text, &env).unwrap();
    assert_eq!(
        c.routes[0].reasoning_budgets,
        BudgetTable {
            low: 3000,
            high: 20000,
            ..BudgetTable::DEFAULT
        }
    );
    let e = err(&format!("{MIN}reasoning_budgets = {{ medium = 1000 }}\n"));
    assert_eq!(e.path, "route[0].reasoning_budgets.medium");
    assert!(
        e.to_string()
            .contains("1000 is below low = 2048: a higher effort must not get a smaller budget"),
        "{e}"
    );
    let e = err(&format!("{MIN}reasoning_budgets = {{ minimal = 0 }}\n"));
    assert_eq!(e.path, "route[0].reasoning_budgets.minimal");
    let e = err(&format!("{MIN}reasoning_budgets = {{ huge = 1 }}\n"));
    assert!(e.to_string().contains("huge"), "{e}");
}
