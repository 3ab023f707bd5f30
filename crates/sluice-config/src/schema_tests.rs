//! The schema against the code it describes: every `default` it states is the value
//! validation applies (writing the default changes nothing in the loaded config), and its
//! shape follows the raw types' serde attributes.

use serde_json::Value;

use super::schema::json_schema;
use super::Config;

/// A config where every table that holds defaults exists (so that writing one key of it does
/// not turn on what the table's presence turns on: a health check, a cache, Redis, a ledger).
const BASE: &str = r#"
[state]
redis = "redis://127.0.0.1:6379"
idempotency = {}
cache = {}

[[upstream]]
name = "a"
base_url = "http://127.0.0.1:9/v1"
health_check = {}

[[route]]
models = ["*"]
targets = [{ upstream = "a" }]
fallbacks = [{ upstream = "a" }]
cache = {}
resumable = {}

[[key]]
id = "k"
hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
model_limits = [{ models = ["*"], concurrency = 5 }]

[[team]]
id = "t"
concurrency = 5

[ledger]

[mcp]
session_secret = "0123456789abcdef0123456789abcdef"

[[mcp.server]]
name = "s"
command = ["true"]
"#;

/// One step of a key's path: a table key, or the first entry of an array of tables.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    First,
}

fn resolve<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    let reference = schema["$ref"]
        .as_str()
        .or_else(|| schema["allOf"][0]["$ref"].as_str());
    match reference.and_then(|r| r.strip_prefix("#/definitions/")) {
        Some(name) => &root["definitions"][name],
        None => schema,
    }
}

/// Every key below `schema` that a config can hold on its own (in a table of `BASE`, or one
/// that may be created for it), with its schema.
fn keys<'a>(
    schema: &'a Value,
    root: &'a Value,
    path: &[Step],
    out: &mut Vec<(Vec<Step>, &'a Value)>,
) {
    let Some(props) = resolve(schema, root)["properties"].as_object() else {
        return; // a scalar, or a tagged union (`ledger.sink`), whose variants are not walked
    };
    for (key, prop) in props {
        let mut here = path.to_vec();
        here.push(Step::Key(key.clone()));
        out.push((here.clone(), prop));
        let target = resolve(prop, root);
        if target["type"] == "array" {
            here.push(Step::First);
            keys(&target["items"], root, &here, out);
        } else if target.get("required").is_none() {
            // A table with required keys (a rate's `limit`) cannot be written one key at a
            // time; its defaults are serde's (`#[serde(default)]`), which cannot drift.
            keys(prop, root, &here, out);
        }
    }
}

/// Every (path, default) below `schema`.
fn defaults(schema: &Value, root: &Value, path: &[Step], out: &mut Vec<(Vec<Step>, Value)>) {
    let mut all = Vec::new();
    keys(schema, root, path, &mut all);
    for (path, prop) in all {
        if let Some(d) = prop.get("default") {
            out.push((path, d.clone()));
        }
    }
}

fn toml_value(v: &Value) -> toml::Value {
    match v {
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) if n.is_i64() => toml::Value::Integer(n.as_i64().unwrap()),
        Value::Number(n) => toml::Value::Float(n.as_f64().unwrap()),
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(items) => toml::Value::Array(items.iter().map(toml_value).collect()),
        other => panic!("no TOML for the default {other}"),
    }
}

/// Sets `path` in `doc`, creating the tables on the way; `None` if an array it goes through
/// is not in `BASE`.
fn set(doc: &mut toml::Table, path: &[Step], value: toml::Value) -> Option<()> {
    let (Step::Key(last), init) = path.split_last()? else {
        return None;
    };
    let mut table = doc;
    let mut steps = init.iter().peekable();
    while let Some(step) = steps.next() {
        let Step::Key(k) = step else { return None };
        let entry = table
            .entry(k.clone())
            .or_insert_with(|| toml::Value::Table(Default::default()));
        table = match entry {
            toml::Value::Table(t) => t,
            toml::Value::Array(items) => {
                let Some(Step::First) = steps.next() else {
                    return None;
                };
                items.first_mut()?.as_table_mut()?
            }
            _ => return None,
        };
    }
    table.insert(last.clone(), value);
    Some(())
}

fn load(doc: &toml::Table) -> String {
    let text = toml::to_string(doc).unwrap();
    let config = Config::from_toml(&text, &|_| Some("sk-test".to_string()))
        .unwrap_or_else(|e| panic!("{e}\n--- in ---\n{text}"));
    format!("{config:?}")
}

fn show(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Key(k) if s.is_empty() => s.push_str(k),
            Step::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Step::First => s.push_str("[0]"),
        }
    }
    s
}

#[test]
fn every_default_in_the_schema_is_the_one_validation_applies() {
    let schema = json_schema();
    let mut found = Vec::new();
    defaults(&schema, &schema, &[], &mut found);
    let base: toml::Table = toml::from_str(BASE).unwrap();
    let baseline = load(&base);
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (path, default) in &found {
        let mut doc = base.clone();
        if set(&mut doc, path, toml_value(default)).is_none() {
            panic!("{}: BASE has no entry to set it in", show(path));
        }
        let text = toml::to_string(&doc).unwrap();
        match Config::from_toml(&text, &|_| Some("sk-test".to_string())) {
            Ok(c) if format!("{c:?}") == baseline => checked += 1,
            Ok(_) => wrong.push(format!("{} = {default}: changes the config", show(path))),
            Err(e) => wrong.push(format!("{} = {default}: refused: {e}", show(path))),
        }
    }
    assert!(
        wrong.is_empty(),
        "defaults the schema states wrongly:\n{}",
        wrong.join("\n")
    );
    assert!(checked >= 90, "{checked} defaults checked");
}

/// The bounds the schema states are no stricter than the gateway's: a value just past one is
/// refused by the gateway too (so an editor never flags what the gateway would take).
#[test]
fn every_bound_in_the_schema_is_one_the_gateway_keeps() {
    let schema = json_schema();
    let mut all = Vec::new();
    keys(&schema, &schema, &[], &mut all);
    let base: toml::Table = toml::from_str(BASE).unwrap();
    let mut checked = 0;
    let mut loose = Vec::new();
    for (path, prop) in all {
        let format = prop["format"].as_str().unwrap_or("");
        // The bounds of the Rust type itself (`u32`: 0 to 2^32 - 1) are not the gateway's.
        let type_max = match format {
            "uint8" => Some(255.0),
            "uint16" => Some(65_535.0),
            "uint32" => Some(4_294_967_295.0),
            _ => None,
        };
        let integer = prop["type"] == "integer";
        let step = if integer { 1.0 } else { 0.5 };
        let mut beyond = Vec::new();
        if let Some(min) = prop["minimum"].as_f64() {
            if !(min == 0.0 && format.starts_with("uint")) {
                beyond.push(min - step);
            }
        }
        if let Some(max) = prop["maximum"].as_f64() {
            if Some(max) != type_max {
                beyond.push(max + step);
            }
        }
        for v in beyond {
            let value = if integer {
                toml::Value::Integer(v as i64)
            } else {
                toml::Value::Float(v)
            };
            let mut doc = base.clone();
            set(&mut doc, &path, value.clone())
                .unwrap_or_else(|| panic!("{}: BASE has no entry to set it in", show(&path)));
            let text = toml::to_string(&doc).unwrap();
            if Config::from_toml(&text, &|_| Some("sk-test".to_string())).is_ok() {
                loose.push(format!("{} = {value}", show(&path)));
            }
            checked += 1;
        }
    }
    assert!(
        loose.is_empty(),
        "the gateway takes values the schema refuses:\n{}",
        loose.join("\n")
    );
    assert!(checked >= 25, "{checked} bounds checked");
}

/// A different value does change the config: the comparison above can see a difference.
#[test]
fn a_value_other_than_the_default_is_seen() {
    let base: toml::Table = toml::from_str(BASE).unwrap();
    let mut doc = base.clone();
    let path = [Step::Key("server".into()), Step::Key("heartbeat".into())];
    set(&mut doc, &path, toml::Value::String("16s".into())).unwrap();
    assert_ne!(load(&doc), load(&base));
}

#[test]
fn serde_attributes_come_out_in_the_schema() {
    let schema = json_schema();
    let defs = &schema["definitions"];
    // deny_unknown_fields: additionalProperties false, on the root and every table.
    assert_eq!(schema["additionalProperties"], false);
    for (name, def) in defs.as_object().unwrap() {
        if def["type"] == "object" && def.get("properties").is_some() {
            assert_eq!(def["additionalProperties"], false, "{name}");
        }
    }
    // Renames: the file's spellings.
    let root = schema["properties"].as_object().unwrap();
    for key in [
        "upstream",
        "route",
        "key",
        "keys",
        "price",
        "team",
        "server",
        "state",
        "ledger",
        "mcp",
        "telemetry",
    ] {
        assert!(root.contains_key(key), "{key}");
    }
    assert_eq!(root["upstream"]["type"], "array");
    assert!(defs["RawMcp"]["properties"].get("server").is_some());
    // Required fields are those without a default or an Option.
    assert_eq!(defs["RawUpstream"]["required"], serde_json::json!(["name"]));
    assert_eq!(
        defs["RawRate"]["required"],
        serde_json::json!(["limit", "per"])
    );
    // Tagged unions: one variant per `type`, each closed.
    let auth: Vec<&str> = defs["RawAuth"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["properties"]["type"]["const"].as_str().unwrap())
        .collect();
    assert_eq!(
        auth,
        ["passthrough", "bearer", "header", "api_key", "entra"]
    );
    // No null alternative: TOML has none.
    assert!(!serde_json::to_string(&schema).unwrap().contains("\"null\""));
}
