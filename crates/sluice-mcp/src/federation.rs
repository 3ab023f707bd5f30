//! Federation: many servers behind one endpoint. Names the client sees are prefixed with the
//! server (`github__create_issue`), lists are the merge of every server the key may use
//! (filtered per tool by the grants), and a server that fails or is slow is left out of the
//! answer, which says so in `_meta` (`sluice/unavailable`), instead of failing it.

use serde_json::{json, Map, Value};

use crate::error::UpstreamError;
use crate::grants::KeyGrants;
use crate::protocol::{self, Version};
use crate::upstream::Listed;

/// The separator between a server's name and its tool's or prompt's name.
pub const SEPARATOR: &str = "__";

/// `_meta` key of the servers left out of an answer.
pub const UNAVAILABLE_META: &str = "sluice/unavailable";

/// Splits a prefixed name into the server and the server's own name.
pub fn split_name(prefixed: &str) -> Option<(&str, &str)> {
    let (server, name) = prefixed.split_once(SEPARATOR)?;
    (!server.is_empty() && !name.is_empty()).then_some((server, name))
}

/// The list kinds the gateway merges: the method, and the result field holding the items.
pub(crate) fn list_field(method: &str) -> Option<&'static str> {
    Some(match method {
        "tools/list" => "tools",
        "prompts/list" => "prompts",
        "resources/list" => "resources",
        "resources/templates/list" => "resourceTemplates",
        _ => return None,
    })
}

/// One server's part of a merged list: its items, or why it is missing.
pub(crate) struct Part<'a> {
    pub(crate) server: &'a str,
    pub(crate) outcome: Result<Listed, UpstreamError>,
}

/// Merges the servers' lists: tools and prompts renamed `server__name` (and tools kept only if
/// granted to `key`), resources and templates as they are (their URIs route them).
pub(crate) fn merge_lists(
    field: &str,
    parts: Vec<Part<'_>>,
    grants: &dyn KeyGrants,
    key: Option<&str>,
    modern: bool,
) -> Value {
    let mut items = Vec::new();
    let mut unavailable = Vec::new();
    let mut ttl: Option<u64> = None;
    for p in parts {
        let listed = match p.outcome {
            Ok(l) => l,
            Err(e) => {
                unavailable.push(json!({ "server": p.server, "reason": e.metric_label() }));
                continue;
            }
        };
        if let Some(t) = listed.ttl_ms {
            ttl = Some(ttl.map_or(t, |x| x.min(t)));
        }
        for mut item in listed.items {
            let Some(obj) = item.as_object_mut() else {
                continue;
            };
            if field == "tools" || field == "prompts" {
                let Some(name) = obj.get("name").and_then(Value::as_str) else {
                    continue;
                };
                if field == "tools" && !grants.may_use(key, p.server, name) {
                    continue;
                }
                let prefixed = format!("{}{SEPARATOR}{name}", p.server);
                obj.insert("name".into(), Value::String(prefixed));
            }
            items.push(item);
        }
    }
    let mut result = Map::new();
    result.insert(field.into(), Value::Array(items));
    if !unavailable.is_empty() {
        result.insert("_meta".into(), json!({ UNAVAILABLE_META: unavailable }));
    }
    if modern {
        add_modern_result_fields(&mut result);
        // Filtered by key: never cacheable across callers.
        result.insert("ttlMs".into(), ttl.unwrap_or(0).into());
        result.insert("cacheScope".into(), "private".into());
    }
    Value::Object(result)
}

/// `resultType` on a 2026-07-28 result the gateway makes itself, and its `serverInfo`.
pub(crate) fn add_modern_result_fields(result: &mut Map<String, Value>) {
    result.insert("resultType".into(), "complete".into());
    let meta = result
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(m) = meta.as_object_mut() {
        m.insert(protocol::META_SERVER_INFO.into(), server_info());
    }
}

/// The gateway's `serverInfo`.
pub(crate) fn server_info() -> Value {
    json!({ "name": "sluice", "version": env!("CARGO_PKG_VERSION") })
}

/// The capabilities of the merged server: tools always (the gateway exists for them); prompts,
/// resources, logging and completions when some server has them. `listChanged` because a
/// server's list changing changes ours; no resource subscriptions (not routed).
pub(crate) fn merged_capabilities<'a>(results: impl Iterator<Item = &'a Value>) -> Value {
    let (mut prompts, mut resources, mut logging, mut completions) = (false, false, false, false);
    for r in results {
        let caps = r.get("capabilities");
        let has = |k: &str| caps.and_then(|c| c.get(k)).is_some();
        prompts |= has("prompts");
        resources |= has("resources");
        logging |= has("logging");
        completions |= has("completions");
    }
    let mut caps = Map::new();
    caps.insert("tools".into(), json!({ "listChanged": true }));
    if prompts {
        caps.insert("prompts".into(), json!({ "listChanged": true }));
    }
    if resources {
        caps.insert(
            "resources".into(),
            json!({ "listChanged": true, "subscribe": false }),
        );
    }
    if logging {
        caps.insert("logging".into(), json!({}));
    }
    if completions {
        caps.insert("completions".into(), json!({}));
    }
    Value::Object(caps)
}

/// The `initialize` result of the merged server.
pub(crate) fn initialize_result(
    version: Version,
    capabilities: Value,
    unavailable: Vec<Value>,
) -> Value {
    let mut r = json!({
        "protocolVersion": version.as_str(),
        "capabilities": capabilities,
        "serverInfo": server_info(),
    });
    if !unavailable.is_empty() {
        r["_meta"] = json!({ UNAVAILABLE_META: unavailable });
    }
    r
}

/// The `server/discover` result (2026-07-28): every version a client may use with the
/// gateway, and the capabilities it routes without a stream to the client.
pub(crate) fn discover_result() -> Value {
    let mut r = Map::new();
    r.insert("supportedVersions".into(), protocol::supported_json());
    r.insert(
        "capabilities".into(),
        json!({ "tools": {}, "prompts": {}, "resources": {} }),
    );
    r.insert("ttlMs".into(), 0.into());
    r.insert("cacheScope".into(), "private".into());
    add_modern_result_fields(&mut r);
    Value::Object(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::ConfigGrants;
    use sluice_config::McpGrant;

    #[test]
    fn names_split_at_the_first_separator() {
        assert_eq!(
            split_name("github__create_issue"),
            Some(("github", "create_issue"))
        );
        assert_eq!(split_name("a__b__c"), Some(("a", "b__c")));
        assert_eq!(split_name("__x"), None);
        assert_eq!(split_name("x__"), None);
        assert_eq!(split_name("plain"), None);
    }

    #[test]
    fn merged_lists_are_prefixed_filtered_and_say_what_is_missing() {
        let grants = ConfigGrants::new(&[McpGrant {
            keys: vec!["k".into()],
            server: "*".into(),
            tools: vec!["echo".into(), "add".into()],
        }]);
        let tools = |names: &[&str]| Listed {
            items: names
                .iter()
                .map(|n| json!({ "name": n, "inputSchema": {} }))
                .collect(),
            ttl_ms: Some(5000),
        };
        let parts = vec![
            Part {
                server: "a",
                outcome: Ok(tools(&["echo", "secret"])),
            },
            Part {
                server: "b",
                outcome: Ok(tools(&["add"])),
            },
            Part {
                server: "c",
                outcome: Err(UpstreamError::Timeout(std::time::Duration::from_secs(1))),
            },
        ];
        let r = merge_lists("tools", parts, &grants, Some("k"), true);
        let names: Vec<&str> = r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a__echo", "b__add"]);
        assert_eq!(r["_meta"][UNAVAILABLE_META][0]["server"], "c");
        assert_eq!(r["_meta"][UNAVAILABLE_META][0]["reason"], "timeout");
        assert_eq!(r["cacheScope"], "private");
        assert_eq!(r["ttlMs"], 5000);
        assert_eq!(r["resultType"], "complete");
    }
}
