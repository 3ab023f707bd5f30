//! JSON-RPC 2.0 framing as MCP uses it: one message per POST body (batches were removed in
//! 2025-06-18), ids that are strings or integers, and the error codes both eras answer with.
//!
//! Client bodies are parsed once into a JSON object (the gateway rewrites `params.name` of the
//! calls it routes); upstream SSE events are only peeked at ([`peek`]), not parsed into values,
//! so relaying a large tool result costs one scan, not a tree.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Invalid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Not a single JSON-RPC request or notification.
pub const INVALID_REQUEST: i64 = -32600;
/// Unknown method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Bad parameters; also an unknown or refused tool (the two look the same on purpose).
pub const INVALID_PARAMS: i64 = -32602;
/// Something failed inside the gateway or an upstream.
pub const INTERNAL_ERROR: i64 = -32603;
/// The upstream went away before answering (the SDKs' `CONNECTION_CLOSED`).
pub const CONNECTION_CLOSED: i64 = -32000;
/// The per-server call timeout passed (the SDKs' `REQUEST_TIMEOUT`).
pub const REQUEST_TIMEOUT: i64 = -32001;
/// The request was cancelled (the LSP code servers answer a cancelled call with, e.g. the
/// Python SDK's handshake-era transport).
pub const REQUEST_CANCELLED: i64 = -32800;
/// 2026-07-28: a routing header disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: a protocol version the server does not serve.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// Sluice's own: the key's tool-call limit is reached (`data.retryAfterMs` says when to retry).
/// In the implementation-defined server-error range (-32000 to -32099).
pub const RATE_LIMITED: i64 = -32029;

/// A JSON-RPC error to answer with: code, message and optional data.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    /// The error code.
    pub code: i64,
    /// A short message (never a secret, never an internal address).
    pub message: String,
    /// Structured details.
    pub data: Option<Value>,
}

impl Rejection {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Rejection {
        Rejection {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The same with `data`.
    pub fn with_data(mut self, data: Value) -> Rejection {
        self.data = Some(data);
        self
    }

    /// The HTTP status a 2026-07-28 answer carries for this code (the SDKs' table); 200 for
    /// codes the table does not name. Handshake-era answers are always 200.
    pub fn modern_status(&self) -> http::StatusCode {
        match self.code {
            PARSE_ERROR
            | INVALID_REQUEST
            | INVALID_PARAMS
            | HEADER_MISMATCH
            | -32021
            | UNSUPPORTED_PROTOCOL_VERSION => http::StatusCode::BAD_REQUEST,
            METHOD_NOT_FOUND => http::StatusCode::NOT_FOUND,
            RATE_LIMITED => http::StatusCode::TOO_MANY_REQUESTS,
            _ => http::StatusCode::OK,
        }
    }

    /// The error object (`{"code", "message", "data"?}`).
    pub fn to_value(&self) -> Value {
        let mut e = Map::new();
        e.insert("code".into(), self.code.into());
        e.insert("message".into(), Value::String(self.message.clone()));
        if let Some(d) = &self.data {
            e.insert("data".into(), d.clone());
        }
        Value::Object(e)
    }
}

/// What one client message is.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// A request: it has an id and a method.
    Request {
        /// A string or an integer.
        id: Value,
        /// The method.
        method: String,
    },
    /// A notification: a method without an id.
    Notification {
        /// The method.
        method: String,
    },
    /// A response (the client answering a server's request): an id and a result or error.
    Response {
        /// The id of the server's request.
        id: Value,
    },
}

/// One parsed client message: its kind and the whole object (for rewriting and forwarding).
#[derive(Clone, Debug)]
pub struct Message {
    /// Request, notification or response.
    pub kind: Kind,
    /// The message as received.
    pub obj: Map<String, Value>,
}

impl Message {
    /// `params`, if any.
    pub fn params(&self) -> Option<&Value> {
        self.obj.get("params")
    }

    /// The message as compact JSON.
    pub fn to_bytes(&self) -> Bytes {
        // A map of values always serializes.
        Bytes::from(serde_json::to_vec(&self.obj).unwrap_or_default())
    }
}

/// Parses one client message.
///
/// # Errors
/// -32700 for invalid JSON, -32600 for anything that is not one JSON-RPC 2.0 request,
/// notification or response (a batch, a null or fractional id, a missing method); the id,
/// when one could be read, goes back with the error (boxed: the id and the rejection are
/// large beside a parsed message, and only the error path carries them).
pub fn parse(body: &[u8]) -> Result<Message, Box<(Option<Value>, Rejection)>> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|_| Box::new((None, Rejection::new(PARSE_ERROR, "Parse error"))))?;
    let invalid = |id: Option<Value>, why: &str| {
        Err(Box::new((
            id,
            Rejection::new(INVALID_REQUEST, format!("Invalid request: {why}")),
        )))
    };
    let Value::Object(obj) = v else {
        return invalid(
            None,
            if v.is_array() {
                "batches are not accepted (removed in 2025-06-18); send one message per POST"
            } else {
                "the body must be one JSON-RPC object"
            },
        );
    };
    let id = obj.get("id").cloned();
    let id_ok = |id: &Value| id.is_string() || id.is_i64() || id.is_u64();
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id.filter(id_ok), "`jsonrpc` must be \"2.0\"");
    }
    let method = obj.get("method");
    let kind = match (id, method) {
        (Some(id), Some(Value::String(m))) if id_ok(&id) => Kind::Request {
            id,
            method: m.clone(),
        },
        (None, Some(Value::String(m))) => Kind::Notification { method: m.clone() },
        (Some(id), None)
            if id_ok(&id) && (obj.contains_key("result") || obj.contains_key("error")) =>
        {
            Kind::Response { id }
        }
        (Some(id), Some(Value::String(_))) => {
            return invalid(
                None,
                if id.is_null() {
                    "a request id must not be null"
                } else {
                    "a request id must be a string or an integer"
                },
            )
        }
        (id, _) => return invalid(id.filter(id_ok), "`method` must be a string"),
    };
    if let Some(p) = obj.get("params") {
        if !p.is_object() {
            let id = match &kind {
                Kind::Request { id, .. } => Some(id.clone()),
                _ => None,
            };
            return Err(Box::new((
                id,
                Rejection::new(INVALID_PARAMS, "`params` must be an object"),
            )));
        }
    }
    Ok(Message { kind, obj })
}

/// `{"jsonrpc":"2.0","id":..,"result":..}`.
pub fn result_body(id: &Value, result: Value) -> Bytes {
    let mut m = Map::with_capacity(3);
    m.insert("jsonrpc".into(), "2.0".into());
    m.insert("id".into(), id.clone());
    m.insert("result".into(), result);
    Bytes::from(serde_json::to_vec(&m).unwrap_or_default())
}

/// `{"jsonrpc":"2.0","id":..,"error":{..}}`; `id` is `null` when unknown.
pub fn error_body(id: Option<&Value>, e: &Rejection) -> Bytes {
    let mut m = Map::with_capacity(3);
    m.insert("jsonrpc".into(), "2.0".into());
    m.insert("id".into(), id.cloned().unwrap_or(Value::Null));
    m.insert("error".into(), e.to_value());
    Bytes::from(serde_json::to_vec(&m).unwrap_or_default())
}

/// A request or notification the gateway itself sends upstream.
pub fn request_body(id: Option<&Value>, method: &str, params: Option<Value>) -> Bytes {
    let mut m = Map::with_capacity(4);
    m.insert("jsonrpc".into(), "2.0".into());
    if let Some(id) = id {
        m.insert("id".into(), id.clone());
    }
    m.insert("method".into(), method.into());
    if let Some(p) = params {
        m.insert("params".into(), p);
    }
    Bytes::from(serde_json::to_vec(&m).unwrap_or_default())
}

/// A response for a 2026-07-28 client, with the `resultType` that revision requires (a
/// handshake-era server, reached through a bridge, leaves it out). Untouched, without a parse,
/// when it is there already.
pub fn with_result_type(body: Bytes) -> Bytes {
    if body.windows(12).any(|w| w == b"\"resultType\"") {
        return body;
    }
    let Ok(Value::Object(mut m)) = serde_json::from_slice::<Value>(&body) else {
        return body;
    };
    match m.get_mut("result").and_then(Value::as_object_mut) {
        Some(r) => {
            r.insert("resultType".into(), "complete".into());
        }
        None => return body,
    }
    Bytes::from(serde_json::to_vec(&m).unwrap_or_default())
}

/// An answer collected from an exchange: the result, or the upstream's JSON-RPC error.
pub type Answer = Result<Value, Rejection>;

/// The answer in `body` if it is the response to `id`.
pub fn answer_of(body: &[u8], id: &Value) -> Option<Answer> {
    #[derive(serde::Deserialize)]
    struct Resp {
        #[serde(default)]
        id: Option<Value>,
        #[serde(default)]
        result: Option<Value>,
        #[serde(default)]
        error: Option<Value>,
    }
    let r: Resp = serde_json::from_slice(body).ok()?;
    // An error about an unreadable request comes back with a null id.
    if r.id.as_ref().is_some_and(|i| i != id && !i.is_null()) {
        return None;
    }
    if let Some(e) = r.error {
        let code = e
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(INTERNAL_ERROR);
        let message = e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("error")
            .to_string();
        return Some(Err(Rejection {
            code,
            message,
            data: e.get("data").cloned(),
        }));
    }
    r.id.as_ref()?;
    Some(Ok(r.result.unwrap_or(Value::Null)))
}

/// What an upstream message is, read without building it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peeked {
    /// A response. `error`: the JSON-RPC error code; `tool_error`: a result with
    /// `isError: true`.
    Response {
        /// The error code, for an error response.
        error: Option<i64>,
        /// A tool result that reports a failure of the tool.
        tool_error: bool,
    },
    /// A notification (`notifications/progress`, `.../list_changed`, ...).
    Notification,
    /// A request from the server (sampling, elicitation, roots, ping).
    Request,
    /// Not a JSON-RPC message.
    Invalid,
}

/// Classifies an upstream message.
pub fn peek(data: &[u8]) -> Peeked {
    #[derive(Deserialize)]
    struct ErrorPeek {
        code: i64,
    }
    #[derive(Deserialize)]
    struct ResultPeek {
        #[serde(default, rename = "isError")]
        is_error: Option<bool>,
    }
    #[derive(Deserialize)]
    struct Peek {
        #[serde(default)]
        method: Option<serde::de::IgnoredAny>,
        #[serde(default)]
        id: Option<serde::de::IgnoredAny>,
        #[serde(default)]
        result: Option<ResultPeek>,
        #[serde(default)]
        error: Option<ErrorPeek>,
    }
    let Ok(p) = serde_json::from_slice::<Peek>(data) else {
        return Peeked::Invalid;
    };
    match (p.method.is_some(), p.id.is_some()) {
        (true, true) => Peeked::Request,
        (true, false) => Peeked::Notification,
        (false, true) if p.error.is_some() || p.result.is_some() => Peeked::Response {
            error: p.error.map(|e| e.code),
            tool_error: p.result.and_then(|r| r.is_error).unwrap_or(false),
        },
        _ => Peeked::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_messages() {
        let m = parse(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        assert_eq!(
            m.kind,
            Kind::Request {
                id: 1.into(),
                method: "tools/list".into()
            }
        );
        let m = parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(matches!(m.kind, Kind::Notification { .. }));
        let m = parse(br#"{"jsonrpc":"2.0","id":"x","result":{}}"#).unwrap();
        assert!(matches!(m.kind, Kind::Response { .. }));
    }

    #[test]
    fn refuses_what_is_not_one_message() {
        let code = |b: &[u8]| parse(b).unwrap_err().1.code;
        assert_eq!(code(b"{"), PARSE_ERROR);
        assert_eq!(code(b"[]"), INVALID_REQUEST);
        assert_eq!(code(b"1"), INVALID_REQUEST);
        assert_eq!(code(br#"{"id":1,"method":"x"}"#), INVALID_REQUEST);
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":3}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
            INVALID_PARAMS
        );
        // The id comes back when it could be read.
        let (id, _) = *parse(br#"{"jsonrpc":"1.0","id":7,"method":"x"}"#).unwrap_err();
        assert_eq!(id, Some(7.into()));
    }

    #[test]
    fn results_for_modern_clients_get_their_result_type() {
        let b = with_result_type(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
        ));
        assert!(String::from_utf8_lossy(&b).contains(r#""resultType":"complete""#));
        let same = Bytes::from_static(br#"{"id":1,"result":{"resultType":"input_required"}}"#);
        assert_eq!(with_result_type(same.clone()), same);
        let err = Bytes::from_static(br#"{"id":1,"error":{"code":1,"message":"x"}}"#);
        assert_eq!(with_result_type(err.clone()), err);
    }

    #[test]
    fn peeks_without_building() {
        assert_eq!(
            peek(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#),
            Peeked::Response {
                error: None,
                tool_error: true
            }
        );
        assert_eq!(
            peek(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}}"#),
            Peeked::Response {
                error: Some(-32602),
                tool_error: false
            }
        );
        assert_eq!(
            peek(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#),
            Peeked::Notification
        );
        assert_eq!(
            peek(br#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage"}"#),
            Peeked::Request
        );
        assert_eq!(peek(b"garbage"), Peeked::Invalid);
    }
}
