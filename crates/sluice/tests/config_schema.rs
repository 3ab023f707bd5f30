//! The config's JSON Schema and reference as a user and an editor meet them: the committed
//! `sluice.schema.json` and `docs/guide/src/reference.md` are what `sluice config schema` /
//! `sluice config reference` print (so neither drifts from the config types); every example
//! config of the repository (README, guide, `sluice.example.toml`, `sluice init`'s starters)
//! is valid under the schema, as a JSON Schema validator (the one TOML language servers embed
//! works the same way) reads it; and configs that `sluice check-config` refuses for their
//! shape (a number for a duration, a misspelled enum value, an unknown key, a wrong type) are
//! refused by the schema too, while `${VAR}` strings the gateway takes stay valid.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sluice(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The committed file at `rel` is what `args` prints; else the message says how to regenerate it.
fn assert_committed(rel: &str, args: &[&str], regenerate: &str) {
    let generated = stdout(&sluice(args));
    let committed = std::fs::read_to_string(root().join(rel)).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || committed.lines().count().min(generated.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "{rel} differs from what `sluice {}` generates (first at line {line}); regenerate \
             it with `{regenerate}` and commit it",
            args.join(" ")
        );
    }
}

#[test]
fn committed_schema_is_the_generated_one() {
    assert_committed(
        "sluice.schema.json",
        &["config", "schema"],
        "cargo run -p sluice -- config schema --output sluice.schema.json",
    );
}

#[test]
fn committed_reference_is_the_generated_one() {
    assert_committed(
        "docs/guide/src/reference.md",
        &["config", "reference"],
        sluice_config::REFERENCE_COMMAND,
    );
}

fn validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(root().join("sluice.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        schema["$schema"], "http://json-schema.org/draft-07/schema#",
        "draft 7: the draft TOML language servers read"
    );
    // Compiling resolves every `$ref` (the ledger's units point at the file's definitions).
    jsonschema::validator_for(&schema).expect("the schema compiles")
}

/// A TOML document as the JSON value a language server validates.
fn json_of(toml_text: &str) -> Value {
    let table: toml::Table =
        toml::from_str(toml_text).unwrap_or_else(|e| panic!("{e}\n--- in ---\n{toml_text}"));
    serde_json::to_value(table).unwrap()
}

/// The schema's complaints about a config, one line each.
fn errors(v: &jsonschema::Validator, toml_text: &str) -> Vec<String> {
    let instance = json_of(toml_text);
    v.iter_errors(&instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn toml_blocks(text: &str) -> Vec<String> {
    text.split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or("").to_string())
        .collect()
}

/// Every example config of the repository: (where, text).
fn examples() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let read = |rel: &str| std::fs::read_to_string(root().join(rel)).unwrap();
    out.push((
        "sluice.example.toml".to_string(),
        read("sluice.example.toml"),
    ));
    for (i, block) in toml_blocks(&read("README.md")).into_iter().enumerate() {
        out.push((format!("README.md block {i}"), block));
    }
    let guide = root().join("docs/guide/src");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&guide)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    for page in pages {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        for (i, block) in toml_blocks(&std::fs::read_to_string(&page).unwrap())
            .into_iter()
            .enumerate()
        {
            out.push((format!("{name} block {i}"), block));
        }
    }
    for provider in ["openai", "anthropic", "gemini", "vllm"] {
        let text = stdout(&sluice(&["init", "--provider", provider, "--output", "-"]));
        out.push((format!("sluice init --provider {provider}"), text));
    }
    out
}

#[test]
fn every_example_config_is_valid_under_the_schema() {
    let v = validator();
    let examples = examples();
    assert!(examples.len() >= 20, "found {} examples", examples.len());
    let mut bad = Vec::new();
    for (at, text) in &examples {
        let errs = errors(&v, text);
        if !errs.is_empty() {
            bad.push(format!("{at}:\n  {}", errs.join("\n  ")));
        }
    }
    assert!(
        bad.is_empty(),
        "examples the schema refuses:\n{}",
        bad.join("\n")
    );
    // `sluice init` points editors at the schema.
    for (at, text) in examples
        .iter()
        .filter(|(at, _)| at.starts_with("sluice init"))
    {
        assert!(
            text.starts_with("#:schema ./sluice.schema.json\n"),
            "{at}: {}",
            text.lines().next().unwrap_or("")
        );
    }
}

const BASE: &str = "[[upstream]]\nname = \"local\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n\
                    [[route]]\nmodels = [\"*\"]\nupstream = \"local\"\n";

/// `sluice check-config` on `text`: Ok, or its message.
fn check_config(name: &str, text: &str, env: &[(&str, &str)]) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("sluice-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn configs_check_config_refuses_for_their_shape_the_schema_refuses_too() {
    let v = validator();
    assert_eq!(errors(&v, BASE), Vec::<String>::new());
    check_config("base", BASE, &[]).unwrap();
    let with_route = |line: &str| {
        BASE.replace(
            "upstream = \"local\"\n",
            &format!("upstream = \"local\"\n{line}\n"),
        )
    };
    let with_upstream =
        |line: &str| BASE.replace("name = \"local\"\n", &format!("name = \"local\"\n{line}\n"));
    let cases: Vec<(&str, String)> = vec![
        ("a number for a duration", with_upstream("timeouts = { idle = 30 }")),
        ("a misspelled enum value", with_route("on_client_disconnect = \"drian\"")),
        ("an unknown key", format!("[server]\nheartbeet = \"15s\"\n{BASE}")),
        ("an unknown table", format!("[sever]\nlisten = \"127.0.0.1:8080\"\n{BASE}")),
        ("a string for a number", with_route("retry = { attempts = \"3\" }")),
        ("a string for a boolean", with_route("idempotent = \"yes\"")),
        ("a duration without a unit", format!("[server]\nheartbeat = \"15\"\n{BASE}")),
        ("a size with an ambiguous unit", format!("[server]\nmax_request_body = \"16M\"\n{BASE}")),
        ("a fractional size", format!("[server]\nmax_request_body = 1.5\n{BASE}")),
        ("an unknown auth type", with_upstream("auth = { type = \"token\", env = \"K\" }")),
        ("a field another auth type takes", with_upstream("auth = { type = \"bearer\", env = \"K\", header = \"x\" }")),
        ("a route without models", BASE.replace("models = [\"*\"]\n", "")),
        ("a table for an array of tables", BASE.replace("[[route]]", "[route]")),
        ("a negative count", format!("[server]\nmax_concurrent_streams = -1\n{BASE}")),
        ("an unknown provider", with_upstream("provider = \"openia\"")),
        ("an unknown balance policy", with_route("balance = \"random\"")),
        ("an unknown ledger sink", format!("{BASE}\n[ledger]\nsink = {{ kind = \"mysql\" }}\n")),
        ("an unknown MCP protocol", format!("{BASE}\n[mcp]\nsession_secret = \"0123456789abcdef0123456789abcdef\"\n[[mcp.server]]\nname = \"s\"\nurl = \"http://127.0.0.1:9/mcp\"\nprotocol = \"2024-01-01\"\n")),
        ("an unknown cache replay", with_route("cache = { replay = \"fast\" }")),
        ("a number for a string", format!("[server]\nlisten = 8080\n{BASE}")),
        ("attempts past the most", with_route("retry = { attempts = 11 }")),
        ("a sampling ratio above 1", format!("{BASE}\n[telemetry]\nsampling_ratio = 1.5\n")),
        ("a weight of 0", BASE.replace("upstream = \"local\"\n", "targets = [{ upstream = \"local\", weight = 0 }]\n")),
        ("a rate limit of 0", with_route("limits = { requests = { limit = 0, per = \"1m\" } }")),
    ];
    let mut missed = Vec::new();
    for (what, text) in &cases {
        let gateway = check_config("wrong", text, &[("K", "sk-test")]);
        assert!(gateway.is_err(), "{what}: check-config accepts it:\n{text}");
        let errs = errors(&v, text);
        if errs.is_empty() {
            missed.push(format!(
                "{what} (check-config: {})",
                gateway.unwrap_err().trim()
            ));
        }
    }
    assert!(
        missed.is_empty(),
        "the schema accepts what check-config refuses:\n{}",
        missed.join("\n")
    );
}

#[test]
fn variables_stay_valid_where_the_gateway_takes_them() {
    let v = validator();
    let text = format!(
        "[server]\nlisten = \"${{SLUICE_SCHEMA_LISTEN:-127.0.0.1:8080}}\"\n\
         heartbeat = \"${{SLUICE_SCHEMA_BEAT}}\"\nmax_request_body = \"${{SLUICE_SCHEMA_BODY}}\"\n\
         log_format = \"${{SLUICE_SCHEMA_FORMAT}}\"\n\n{}",
        BASE.replace(
            "upstream = \"local\"\n",
            "upstream = \"local\"\non_client_disconnect = \"${SLUICE_SCHEMA_DISCONNECT:-drain}\"\n\
             balance = \"${SLUICE_SCHEMA_BALANCE}\"\ntimeout = \"${SLUICE_SCHEMA_SECS}s\"\n",
        )
    );
    assert_eq!(errors(&v, &text), Vec::<String>::new(), "{text}");
    let env = [
        ("SLUICE_SCHEMA_BEAT", "20s"),
        ("SLUICE_SCHEMA_BODY", "4MiB"),
        ("SLUICE_SCHEMA_FORMAT", "json"),
        ("SLUICE_SCHEMA_BALANCE", "least_in_flight"),
        ("SLUICE_SCHEMA_SECS", "90"),
    ];
    check_config("vars", &text, &env).unwrap();
    // The value a variable brings is still checked by the gateway.
    let mut wrong = env;
    wrong[2] = ("SLUICE_SCHEMA_FORMAT", "xml");
    assert!(check_config("vars-wrong", &text, &wrong).is_err());
}

/// The schema's duration and size patterns agree with the gateway's parsers on a spread of
/// spellings, right and wrong.
#[test]
fn duration_and_size_patterns_agree_with_the_parsers() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("sluice.schema.json")).unwrap())
            .unwrap();
    let defs = &schema["definitions"];
    let check = |def: &str, value: Value| {
        let one = serde_json::json!({ "$schema": schema["$schema"], "definitions": defs, "$ref": format!("#/definitions/{def}") });
        jsonschema::is_valid(&one, &value)
    };
    for s in [
        "500ms", "30s", "1m30s", "1.5s", "2h 30min", "1d", "10m", "90 s", "1h30m15s", "2weeks",
        "30", "", "s", "1.s", "-1s", "1 second", "3M", "5x", "1m 30", ".5s", "1,5s", "PT30S",
    ] {
        assert_eq!(
            check("Duration", Value::from(s)),
            sluice_config::parse_duration(s).is_ok(),
            "duration {s:?}"
        );
    }
    for s in [
        "512", "16MiB", "16 MiB", "16mib", "16MB", "1GiB", "1TiB", "4096B", "16M", "16k", "1.5MiB",
        "", "MiB", "16 Mi B", "16TB", "-1",
    ] {
        assert_eq!(
            check("Size", Value::from(s)),
            sluice_config::parse_size(s).is_ok(),
            "size {s:?}"
        );
    }
    assert!(check("Size", Value::from(1024)));
    assert!(!check("Size", Value::from(-1)));
    assert!(!check("Duration", Value::from(30)));
}
