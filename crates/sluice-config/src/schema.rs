//! The JSON Schema of `sluice.toml`, generated from the `raw` types: their doc comments are the
//! descriptions, their serde attributes the shape (`deny_unknown_fields` becomes
//! `additionalProperties: false`, renames and tags come out as the file spells them), and
//! `#[schemars(extend("default" = ...))]` the defaults. `reference` renders the same schema as
//! the configuration reference, so the two cannot disagree.
//!
//! What serde alone does not say is added here: durations and sizes are strings of a given
//! form (`units` gives their schemas), and every string value may instead hold a `${VAR}`
//! reference (`interpolate` expands every string before the types see it), so an enum is
//! "one of these, or a string with a `${VAR}`" ([`interpolable`]). Numbers and booleans are
//! never expanded, so a string there is refused, as the gateway refuses it.

use schemars::generate::SchemaSettings;
use schemars::{json_schema, Schema, SchemaGenerator};
use serde_json::{Map, Value};

/// A string holding a `${VAR}` or `${VAR:-default}` reference (see `interpolate`): its value
/// is only known at load, so the schema takes it wherever a string is taken.
pub(crate) const INTERPOLATED_PATTERN: &str = r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}";

/// The schema of a string that holds a `${VAR}` reference.
pub(crate) fn interpolated() -> Value {
    serde_json::json!({
        "type": "string",
        "pattern": INTERPOLATED_PATTERN,
        "description": "A value from the environment, expanded at load: ${VAR} or ${VAR:-default}."
    })
}

/// `#[schemars(transform = ...)]` of the enums spelled as strings: the enum's own schema, or a
/// `${VAR}` string (its value is checked at load, after expansion).
pub(crate) fn interpolable(schema: &mut Schema) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let mut outer = Map::new();
    for key in ["title", "description", "default"] {
        if let Some(v) = obj.remove(key) {
            outer.insert(key.to_string(), v);
        }
    }
    let inner = std::mem::take(obj);
    outer.insert(
        "anyOf".to_string(),
        Value::Array(vec![Value::Object(inner), interpolated()]),
    );
    *obj = outer;
}

/// A string that must be one of `values` (after `${VAR}` expansion).
fn one_of(values: &[&str]) -> Schema {
    let mut s = json_schema!({ "type": "string", "enum": values });
    interpolable(&mut s);
    s
}

/// `route.cache.replay`: checked by the state crate, spelled here.
pub(crate) fn cache_replay(_: &mut SchemaGenerator) -> Schema {
    one_of(&["instant", "paced"])
}

/// `mcp.server.protocol`: checked in `mcp`, spelled here.
pub(crate) fn mcp_protocol(_: &mut SchemaGenerator) -> Schema {
    one_of(&["auto", "2025-06-18", "2025-11-25", "2026-07-28"])
}

/// The JSON Schema (draft 7, which TOML language servers read) of a whole `sluice.toml`, its
/// object keys sorted so that the output is the same whatever order `serde_json` keeps.
pub fn json_schema() -> Value {
    let generator = SchemaSettings::draft07().into_generator();
    let schema = generator.into_root_schema_for::<super::raw::RawConfig>();
    let mut value = schema.to_value();
    drop_null(&mut value);
    sorted(value)
}

/// The schema as `sluice config schema` prints it (and `sluice.schema.json` holds it).
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).expect("a JSON value prints");
    text.push('\n');
    text
}

/// TOML has no null: `Option` fields are optional keys, not nullable ones. Removes the null
/// alternative schemars gives them.
fn drop_null(value: &mut Value) {
    match value {
        Value::Object(obj) => {
            if let Some(Value::Array(types)) = obj.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    obj.insert("type".to_string(), only);
                }
            }
            if let Some(Value::Array(values)) = obj.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            let is_null = |s: &Value| s.get("type").is_some_and(|t| t == "null");
            if let Some(Value::Array(alts)) = obj.get_mut("anyOf") {
                let before = alts.len();
                alts.retain(|s| !is_null(s));
                if alts.len() == 1 && before == 2 {
                    let only = alts.remove(0);
                    obj.remove("anyOf");
                    match only {
                        // Draft 7 ignores the siblings of a `$ref`: keep it in an `allOf`.
                        Value::Object(o) if o.contains_key("$ref") => {
                            obj.insert("allOf".to_string(), Value::Array(vec![Value::Object(o)]));
                        }
                        Value::Object(o) => {
                            for (k, v) in o {
                                obj.entry(k).or_insert(v);
                            }
                        }
                        other => {
                            obj.insert("anyOf".to_string(), Value::Array(vec![other]));
                        }
                    }
                }
            }
            for v in obj.values_mut() {
                drop_null(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null),
        _ => {}
    }
}

/// `value` with every object's keys in sorted order.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(obj) => {
            let mut entries: Vec<(String, Value)> = obj.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
