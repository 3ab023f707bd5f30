//! The MCP revisions and the Streamable HTTP headers: which versions the gateway speaks, which
//! era a request belongs to, and the 2026-07-28 per-request envelope checks.

use http::HeaderMap;
use serde_json::{Map, Value};

use crate::jsonrpc::{Rejection, HEADER_MISMATCH, INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION};

/// `Mcp-Session-Id`.
pub const SESSION_ID: &str = "mcp-session-id";
/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// `Mcp-Method` (2026-07-28).
pub const METHOD: &str = "mcp-method";
/// `Mcp-Name` (2026-07-28): the tool, prompt or resource a request names.
pub const NAME: &str = "mcp-name";
/// `Mcp-Param-*` (2026-07-28): tool arguments a schema mirrors into headers.
pub const PARAM_PREFIX: &str = "mcp-param-";

/// `_meta` key of the protocol version (2026-07-28).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client's capabilities (2026-07-28).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of the client's name and version (2026-07-28).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of the server's name and version on results (2026-07-28).
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// A protocol revision. Clients may use 2025-06-18, 2025-11-25 (sessions) and 2026-07-28
/// (stateless); the older two appear only when an upstream negotiates down to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// `2024-11-05`.
    V2024_11_05,
    /// `2025-03-26`.
    V2025_03_26,
    /// `2025-06-18`.
    V2025_06_18,
    /// `2025-11-25`.
    V2025_11_25,
    /// `2026-07-28`: no `initialize`, no session; `_meta` envelope on every request.
    V2026_07_28,
}

/// The handshake-era versions a client may open a session with, oldest first.
pub const CLIENT_HANDSHAKE_VERSIONS: [Version; 2] = [Version::V2025_06_18, Version::V2025_11_25];

/// Every version a client may use with the gateway, for `server/discover` and -32022 data.
pub const CLIENT_VERSIONS: [Version; 3] = [
    Version::V2025_06_18,
    Version::V2025_11_25,
    Version::V2026_07_28,
];

impl Version {
    /// As on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V2024_11_05 => "2024-11-05",
            Version::V2025_03_26 => "2025-03-26",
            Version::V2025_06_18 => "2025-06-18",
            Version::V2025_11_25 => "2025-11-25",
            Version::V2026_07_28 => "2026-07-28",
        }
    }

    /// From the wire; `None` for a revision this gateway does not know.
    pub fn parse(s: &str) -> Option<Version> {
        Some(match s {
            "2024-11-05" => Version::V2024_11_05,
            "2025-03-26" => Version::V2025_03_26,
            "2025-06-18" => Version::V2025_06_18,
            "2025-11-25" => Version::V2025_11_25,
            "2026-07-28" => Version::V2026_07_28,
            _ => return None,
        })
    }

    /// The stateless revision (per-request envelope, no session).
    pub fn is_modern(self) -> bool {
        self == Version::V2026_07_28
    }

    /// A compact code for session ids.
    pub(crate) fn code(self) -> u8 {
        self as u8 + 1
    }

    /// The inverse of [`Version::code`].
    pub(crate) fn from_code(c: u8) -> Option<Version> {
        Some(match c {
            1 => Version::V2024_11_05,
            2 => Version::V2025_03_26,
            3 => Version::V2025_06_18,
            4 => Version::V2025_11_25,
            5 => Version::V2026_07_28,
            _ => return None,
        })
    }

    /// The version a handshake-era client asking for `requested` gets: the same when
    /// supported, else the newest handshake version (the client decides whether it can go on).
    pub fn negotiate(requested: Option<&str>) -> Version {
        match requested.and_then(Version::parse) {
            Some(v) if CLIENT_HANDSHAKE_VERSIONS.contains(&v) => v,
            _ => Version::V2025_11_25,
        }
    }
}

/// The supported versions as JSON strings (for -32022 data and `server/discover`).
pub fn supported_json() -> Value {
    Value::Array(
        CLIENT_VERSIONS
            .iter()
            .map(|v| Value::String(v.as_str().into()))
            .collect(),
    )
}

/// The methods whose `Mcp-Name` header mirrors a body field, and that field.
pub fn name_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// The 2026-07-28 envelope of one request, checked.
#[derive(Debug)]
pub struct Envelope {
    /// `params._meta` as the client sent it (passed upstream unchanged).
    pub meta: Map<String, Value>,
}

/// Runs the 2026-07-28 checks on a request, in the order the SDKs run them: the `_meta`
/// envelope is present (-32602), the routing headers agree with the body (-32020), the
/// version is one we serve (-32022).
///
/// # Errors
/// The JSON-RPC error to answer with.
pub fn check_envelope(
    method: &str,
    params: Option<&Value>,
    headers: &HeaderMap,
) -> Result<Envelope, Rejection> {
    let meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
        .ok_or_else(|| {
            Rejection::new(
                INVALID_PARAMS,
                format!(
                    "params._meta must be an object carrying {META_PROTOCOL_VERSION:?} and \
                     {META_CLIENT_CAPABILITIES:?}"
                ),
            )
        })?;
    let missing: Vec<&str> = [META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES]
        .into_iter()
        .filter(|k| !meta.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        return Err(Rejection::new(
            INVALID_PARAMS,
            format!(
                "params._meta is missing the required envelope key(s): {}",
                missing.join(", ")
            ),
        ));
    }
    let body_version = meta.get(META_PROTOCOL_VERSION);
    for h in [PROTOCOL_VERSION, METHOD, NAME] {
        if headers.get_all(h).iter().count() > 1 {
            return Err(Rejection::new(
                HEADER_MISMATCH,
                format!("{h} header appears more than once"),
            ));
        }
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if header(PROTOCOL_VERSION).is_none()
        || body_version.and_then(Value::as_str) != header(PROTOCOL_VERSION)
    {
        return Err(Rejection::new(
            HEADER_MISMATCH,
            "mcp-protocol-version header does not match the request envelope's protocol version",
        ));
    }
    if header(METHOD) != Some(method) {
        return Err(Rejection::new(
            HEADER_MISMATCH,
            "mcp-method header does not match the request body's method",
        ));
    }
    if let Some(field) = name_field(method) {
        if let Some(body_value) = params.and_then(|p| p.get(field)).and_then(Value::as_str) {
            let given = header(NAME).and_then(decode_header_value);
            if given.as_deref() != Some(body_value) {
                return Err(Rejection::new(
                    HEADER_MISMATCH,
                    format!(
                        "mcp-name header does not match the request body's {field:?} parameter"
                    ),
                ));
            }
        }
    }
    let version = body_version.and_then(Value::as_str).unwrap_or_default();
    if !Version::parse(version).is_some_and(Version::is_modern) {
        return Err(unsupported_version(version));
    }
    Ok(Envelope { meta: meta.clone() })
}

/// -32022 for a version we do not serve, with the versions we do.
pub fn unsupported_version(requested: &str) -> Rejection {
    Rejection::new(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version").with_data(
        serde_json::json!({
            "supported": supported_json(),
            "requested": sluice_telemetry::untrusted::echo(requested),
        }),
    )
}

/// Encodes a header value as the SDKs do: printable ASCII without edge whitespace as it is,
/// anything else as `=?base64?<standard base64 of the UTF-8>?=`.
pub fn encode_header_value(value: &str) -> String {
    let safe = value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && value.trim() == value
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    if safe {
        value.to_string()
    } else {
        use base64::Engine as _;
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
        )
    }
}

/// The inverse of [`encode_header_value`]; `None` for a malformed or non-canonical sentinel,
/// so a corrupt header never matches a body value.
pub fn decode_header_value(value: &str) -> Option<String> {
    let Some(payload) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Some(value.to_string());
    };
    use base64::Engine as _;
    let engine = &base64::engine::general_purpose::STANDARD;
    let bytes = engine.decode(payload).ok()?;
    if engine.encode(&bytes) != payload {
        return None;
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip() {
        for v in [
            Version::V2024_11_05,
            Version::V2025_03_26,
            Version::V2025_06_18,
            Version::V2025_11_25,
            Version::V2026_07_28,
        ] {
            assert_eq!(Version::parse(v.as_str()), Some(v));
            assert_eq!(Version::from_code(v.code()), Some(v));
        }
        assert_eq!(Version::negotiate(Some("2025-06-18")), Version::V2025_06_18);
        assert_eq!(Version::negotiate(Some("2024-11-05")), Version::V2025_11_25);
        assert_eq!(Version::negotiate(Some("nope")), Version::V2025_11_25);
        assert_eq!(Version::negotiate(None), Version::V2025_11_25);
    }

    #[test]
    fn header_values_round_trip() {
        for v in ["plain", " edge", "tool ünïcode", "=?base64?x?=", "a\nb", ""] {
            assert_eq!(
                decode_header_value(&encode_header_value(v)).as_deref(),
                Some(v)
            );
        }
        assert_eq!(encode_header_value("github__x"), "github__x");
        assert_eq!(decode_header_value("=?base64?###?="), None);
    }

    #[test]
    fn envelope_checks_in_order() {
        let mut h = HeaderMap::new();
        let params = serde_json::json!({
            "name": "a__b",
            "_meta": { META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {} }
        });
        assert_eq!(
            check_envelope("tools/call", None, &h).unwrap_err().code,
            INVALID_PARAMS
        );
        assert_eq!(
            check_envelope("tools/call", Some(&params), &h)
                .unwrap_err()
                .code,
            HEADER_MISMATCH
        );
        h.insert(PROTOCOL_VERSION, "2026-07-28".parse().unwrap());
        h.insert(METHOD, "tools/call".parse().unwrap());
        assert_eq!(
            check_envelope("tools/call", Some(&params), &h)
                .unwrap_err()
                .code,
            HEADER_MISMATCH
        );
        h.insert(NAME, "a__b".parse().unwrap());
        assert!(check_envelope("tools/call", Some(&params), &h).is_ok());
        let old = serde_json::json!({
            "_meta": { META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_CAPABILITIES: {} }
        });
        h.insert(PROTOCOL_VERSION, "2025-11-25".parse().unwrap());
        h.insert(METHOD, "tools/list".parse().unwrap());
        assert_eq!(
            check_envelope("tools/list", Some(&old), &h)
                .unwrap_err()
                .code,
            UNSUPPORTED_PROTOCOL_VERSION
        );
    }
}
