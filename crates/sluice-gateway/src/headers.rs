//! Header policy: end-to-end headers pass both ways untouched (Authorization in passthrough
//! mode, Cookie, X-Session-Id, any `X-*` and vendor header); hop-by-hop headers stop here.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use sluice_providers::{Family, ProviderKind};

use crate::config::{SessionHeaderToBody, UpstreamAuth};

/// The request id header: taken from the client when present, else generated; sent upstream and
/// returned to the client.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Headers that describe one hop, never the message (RFC 9110 §7.6.1), plus `host` and
/// `content-length`, which the next hop sets for itself.
static HOP_BY_HOP: [HeaderName; 11] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HOST,
    header::CONTENT_LENGTH,
];

/// The longest `X-Request-Id` kept from a client.
pub const MAX_REQUEST_ID: usize = 128;

/// Removes the client's `X-Request-Id` unless it is one short token (1 to
/// [`MAX_REQUEST_ID`] bytes of ASCII letters, digits and `-._:/+=@`), so that one is generated
/// instead. A request id goes into every log line of its request, upstream and back to the
/// client: spaces, quotes and control characters in it could forge log fields or lines.
pub fn drop_invalid_request_id(h: &mut HeaderMap) {
    let valid = |v: &HeaderValue| {
        let b = v.as_bytes();
        (1..=MAX_REQUEST_ID).contains(&b.len())
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"-._:/+=@".contains(c))
    };
    // A look at the few names present is cheaper than a hashed lookup of a header most
    // clients do not send.
    if !h.keys().any(|n| *n == REQUEST_ID) {
        return;
    }
    let mut all = h.get_all(REQUEST_ID).iter();
    let keep = match (all.next(), all.next()) {
        (None, _) => return,
        (Some(v), None) => valid(v),
        (Some(_), Some(_)) => false,
    };
    if !keep {
        h.remove(REQUEST_ID);
    }
}

/// The most names [`get`] and [`find`] compare one by one; past it a hashed lookup is cheaper.
const SCAN_UP_TO: usize = 12;

/// `h.get(name)` for a header most messages lack: a look at the few names present rules it
/// out for ~30 instructions where hashing the name cost 0.1-0.2 K.
pub(crate) fn get<'a>(h: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if h.keys_len() <= SCAN_UP_TO && !h.keys().any(|n| n == name) {
        return None;
    }
    h.get(name)
}

/// `h.get(name)` for a header most messages carry: found among the few names present
/// without hashing it (a found one would cost the look and the hashed lookup with [`get`]).
pub(crate) fn find<'a>(h: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if h.keys_len() > SCAN_UP_TO {
        return h.get(name);
    }
    // The first value of a name comes first in iteration, as `get` answers.
    h.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
}

/// Asks the upstream for an uncompressed body (`Accept-Encoding: identity`): the SSE relay
/// reads events from the bytes, so a stream must arrive as text. (A non-streaming body is
/// passed through untouched, compressed or not, with its `Content-Encoding`.)
pub fn request_identity(h: &mut HeaderMap) {
    h.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
}

/// The response's content coding, if it is not `identity`: such a body cannot be read as an
/// event stream.
pub fn content_coding(h: &HeaderMap) -> Option<&str> {
    h.get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim())
        .filter(|v| !v.is_empty() && !v.eq_ignore_ascii_case("identity"))
}

/// Headers whose names mark a session, for the "upstream 4xx mentions a session" log.
pub fn session_header_names(h: &HeaderMap) -> Vec<&str> {
    h.keys()
        .map(HeaderName::as_str)
        .filter(|n| {
            *n == "authorization" || *n == "cookie" || *n == "x-api-key" || n.contains("session")
        })
        .collect()
}

/// Removes hop-by-hop headers, including every header the `Connection` header names.
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    // One pass over the names present (a handful) instead of a hashed removal per listed
    // name: most messages carry only `host` and `content-length` of the list.
    let mut present = [false; HOP_BY_HOP.len()];
    let mut any = false;
    for name in h.keys() {
        if let Some(i) = hop_index(name) {
            present[i] = true;
            any = true;
        }
    }
    if !any {
        return;
    }
    // Only a `Connection` header names more (reading the names costs a lookup and a list).
    if present[CONNECTION_AT] {
        for n in connection_named(h) {
            h.remove(n);
        }
    }
    for (n, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, p)| *p) {
        h.remove(n);
    }
}

/// The position of `name` in [`HOP_BY_HOP`]: a match on the name's text, where comparing it
/// with each entry in turn cost ~1 K instructions per message.
fn hop_index(name: &HeaderName) -> Option<usize> {
    Some(match name.as_str() {
        "connection" => CONNECTION_AT,
        "keep-alive" => 1,
        "proxy-connection" => 2,
        "proxy-authenticate" => 3,
        "proxy-authorization" => 4,
        "te" => 5,
        "trailer" => 6,
        "transfer-encoding" => 7,
        "upgrade" => 8,
        "host" => 9,
        "content-length" => 10,
        _ => return None,
    })
}

/// Where `Connection` is in [`HOP_BY_HOP`].
const CONNECTION_AT: usize = 0;

/// The headers `h`'s `Connection` header names (hop-by-hop by the sender's word).
fn connection_named(h: &HeaderMap) -> Vec<HeaderName> {
    h.get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect()
}

/// Headers an upstream request may carry beyond the client's: see `upstream_request_headers`.
const EXTRA_HEADERS: usize = 4;

/// Headers that carry an API key, in any provider's spelling.
const KEY_HEADERS: &[&str] = &["authorization", "x-api-key", "api-key", "x-goog-api-key"];

/// Who the upstream is, for its credentials and required headers.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// How to authenticate.
    pub auth: &'a UpstreamAuth,
    /// The upstream's wire format.
    pub provider: &'a ProviderKind,
    /// The body was translated from another family: the client's key (passthrough) moves to
    /// the provider's header, and the client family's version headers are dropped.
    pub translated: bool,
}

/// The headers sent upstream: the client's end-to-end headers, the upstream's credentials, the
/// headers its provider requires, and the request id.
pub fn upstream_request_headers(
    client: &HeaderMap,
    target: Target<'_>,
    request_id: &HeaderValue,
) -> HeaderMap {
    // Built with room for what is added here and by the caller (a key, the request id,
    // `accept-encoding`, `content-length`): a clone has none, and the first insert past it
    // doubles the map, whose empty half a request waiting on its upstream then holds.
    let mut h = HeaderMap::with_capacity(client.len() + EXTRA_HEADERS);
    // Copied without the hop-by-hop headers, rather than copied and then stripped.
    let mut connection = false;
    for (name, value) in client {
        match hop_index(name) {
            None => {
                h.append(name.clone(), value.clone());
            }
            Some(i) => connection |= i == CONNECTION_AT,
        }
    }
    // Only a `Connection` header names more (reading the names costs a lookup and a list).
    if connection {
        for n in connection_named(client) {
            h.remove(n);
        }
    }
    let provider_key = |h: &mut HeaderMap, secret: &str| {
        for n in KEY_HEADERS {
            h.remove(*n);
        }
        // A key a header cannot carry is refused by config checking; nothing to send then.
        for (name, value) in target.provider.auth_headers(secret).unwrap_or_default() {
            h.insert(name, value);
        }
    };
    match target.auth {
        UpstreamAuth::Passthrough if target.translated => {
            if let Some(key) = client_key(client) {
                provider_key(&mut h, &key);
            }
        }
        UpstreamAuth::Passthrough => {}
        UpstreamAuth::Bearer { secret } => {
            h.remove("x-api-key");
            if let Ok(v) = HeaderValue::from_str(&format!("Bearer {secret}")) {
                h.insert(header::AUTHORIZATION, sensitive(v));
            }
        }
        UpstreamAuth::Header { name, secret } => {
            h.remove(header::AUTHORIZATION);
            h.remove("x-api-key");
            if let Ok(v) = HeaderValue::from_str(secret) {
                h.insert(name.clone(), sensitive(v));
            }
        }
        UpstreamAuth::ApiKey { secret } => provider_key(&mut h, secret),
    }
    if target.translated && target.provider.family() != Family::Anthropic {
        h.remove("anthropic-version");
        h.remove("anthropic-beta");
    }
    for (name, value) in target.provider.required_headers() {
        if !h.contains_key(&name) {
            h.insert(name, value);
        }
    }
    h.insert(REQUEST_ID, request_id.clone());
    h
}

/// The API key a client sent, in whichever spelling its SDK uses.
fn client_key(h: &HeaderMap) -> Option<String> {
    if let Some(v) = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        if let Some(k) = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
        {
            return Some(k.trim().to_string());
        }
    }
    KEY_HEADERS[1..]
        .iter()
        .find_map(|n| h.get(*n).and_then(|v| v.to_str().ok()))
        .map(|k| k.trim().to_string())
}

fn sensitive(mut v: HeaderValue) -> HeaderValue {
    // hpack will not index it, and `Debug` prints it as "Sensitive".
    v.set_sensitive(true);
    v
}

/// The headers sent to the client: the upstream's end-to-end headers and the request id.
pub fn client_response_headers(upstream: HeaderMap, request_id: &HeaderValue) -> HeaderMap {
    // By value: a response's own headers are reused, not copied.
    let mut h = upstream;
    strip_hop_by_hop(&mut h);
    h.insert(REQUEST_ID, request_id.clone());
    h
}

/// Marks the values of headers that differ from one response to the next (ids, trace and
/// rate-limit counters) never to be indexed, so that an HTTP/2 client's HPACK encoder does
/// not add each to the connection's table, where it would be evicted unused after being
/// compared with the values of its name still there (~3.5 K instructions a small call, 5 %).
/// For HTTP/2 clients only: HTTP/1.1 has no table.
pub(crate) fn never_index(h: &mut HeaderMap) {
    for (name, value) in h.iter_mut() {
        if changes_per_response(name.as_str()) {
            value.set_sensitive(true);
        }
    }
}

/// Header names whose values are, by convention, new in every response. Byte comparisons
/// after a look at the first letter: `str::contains` here cost ~170 instructions a header.
fn changes_per_response(name: &str) -> bool {
    let n = name.as_bytes();
    n.ends_with(b"request-id")
        || n.ends_with(b"requestid")
        || match n.first() {
            // OpenAI's `x-ratelimit-remaining-tokens` and `x-ratelimit-reset-tokens`.
            Some(b'x') => n.starts_with(b"x-ratelimit-r") || n == b"x-amz-cf-id",
            // Anthropic's `anthropic-ratelimit-tokens-remaining` and `…-tokens-reset`.
            Some(b'a') => {
                n.starts_with(b"anthropic-ratelimit-")
                    && (n.ends_with(b"-remaining") || n.ends_with(b"-reset"))
            }
            Some(b'c') => n == b"cf-ray",
            Some(b'o') => n == b"openai-processing-ms",
            Some(b's') => n == b"set-cookie",
            Some(b't') => n == b"traceparent",
            _ => false,
        }
}

/// Why `session_header_to_body` could not be applied.
#[derive(Debug, thiserror::Error)]
#[error("cannot put header `{header}` at `{pointer}`: {reason}")]
pub struct SessionToBodyError {
    header: String,
    pointer: String,
    reason: &'static str,
}

/// Copies the configured header's value into the JSON body at the pointer, creating objects
/// on the way. A missing header leaves the body as it is.
pub fn session_header_to_body(
    rule: &SessionHeaderToBody,
    headers: &HeaderMap,
    body: &mut Value,
) -> Result<bool, SessionToBodyError> {
    let Some(value) = headers.get(&rule.header).and_then(|v| v.to_str().ok()) else {
        return Ok(false);
    };
    let err = |reason| SessionToBodyError {
        header: rule.header.to_string(),
        pointer: rule.json_pointer.clone(),
        reason,
    };
    let mut parts: Vec<String> = rule
        .json_pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    let last = parts.pop().ok_or_else(|| err("the pointer is empty"))?;
    let mut cur = body;
    for p in parts {
        let obj = cur
            .as_object_mut()
            .ok_or_else(|| err("a step on the way is not a JSON object"))?;
        cur = obj
            .entry(p)
            .or_insert_with(|| Value::Object(Default::default()));
    }
    cur.as_object_mut()
        .ok_or_else(|| err("the parent is not a JSON object"))?
        .insert(last, Value::String(value.to_string()));
    Ok(true)
}

// The gateway's own header names, as constants: a `&str` name is parsed and validated on every
// use.
/// The client's own deadline for the request (`30s`).
pub(crate) const X_SLUICE_TIMEOUT: HeaderName = HeaderName::from_static("x-sluice-timeout");
/// The OpenAI and Anthropic SDKs' timeout, in seconds.
pub(crate) const X_STAINLESS_TIMEOUT: HeaderName = HeaderName::from_static("x-stainless-timeout");
/// The upstream phases, when asked for (`server.server_timing`, `x-sluice-timing: 1`).
pub(crate) const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");
/// Tells a buffering proxy in front (nginx) to pass a stream on as it comes.
pub(crate) const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
/// The request parameters a translation dropped.
pub(crate) const X_SLUICE_DROPPED_PARAMS: HeaderName =
    HeaderName::from_static("x-sluice-dropped-params");
/// A client's ask for `Server-Timing` on its response.
pub(crate) const X_SLUICE_TIMING: HeaderName = HeaderName::from_static("x-sluice-timing");
/// Which upstream answered.
pub(crate) const X_SLUICE_UPSTREAM: HeaderName = HeaderName::from_static("x-sluice-upstream");
/// How many attempts the answer took.
pub(crate) const X_SLUICE_ATTEMPTS: HeaderName = HeaderName::from_static("x-sluice-attempts");

/// Whether a response is an SSE stream.
pub(crate) fn is_event_stream(h: &HeaderMap) -> bool {
    find(h, &header::CONTENT_TYPE).is_some_and(|v| {
        // The prefix on the bytes first: checking a whole JSON type is text cost more.
        let b = v.as_bytes();
        let start = b.iter().position(|c| !matches!(c, b' ' | b'\t'));
        start.is_some_and(|i| b[i..].starts_with(b"text/event-stream")) && v.to_str().is_ok()
    })
}

/// Whole seconds to wait, rounded up (a client told 0.2 s must not come back at once), and
/// at least 1: the one rounding of `Retry-After` for every refusal and passed-on upstream
/// error.
pub(crate) fn retry_after_secs(d: std::time::Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

/// `Retry-After` for a wait of `d` (see [`retry_after_secs`]).
pub(crate) fn retry_after(d: std::time::Duration) -> HeaderValue {
    HeaderValue::from(retry_after_secs(d))
}

#[cfg(test)]
mod tests {

    #[test]
    fn hop_index_names_every_hop_by_hop_header_at_its_place() {
        for (i, n) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_index(n), Some(i), "{n}");
        }
        assert_eq!(hop_index(&header::AUTHORIZATION), None);
        assert_eq!(hop_index(&HeaderName::from_static("x-session-id")), None);
    }

    use super::*;

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_at_least_one() {
        use std::time::Duration;
        for (d, s) in [
            (Duration::ZERO, 1),
            (Duration::from_millis(200), 1),
            (Duration::from_secs(1), 1),
            (Duration::from_millis(1001), 2),
            (Duration::from_secs(20), 20),
        ] {
            assert_eq!(retry_after_secs(d), s, "{d:?}");
            assert_eq!(retry_after(d), HeaderValue::from(s), "{d:?}");
        }
    }

    #[test]
    fn a_stream_is_told_by_its_type_as_the_text_reading_told_it() {
        let was = |h: &HeaderMap| {
            h.get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
        };
        let types: [&[u8]; 12] = [
            b"text/event-stream",
            b"text/event-stream; charset=utf-8",
            b"  \t text/event-stream",
            b"application/json",
            b"",
            b" ",
            b"text/event-strea",
            b"TEXT/EVENT-STREAM",
            b"text/event-stream\x80",
            b"\x80text/event-stream",
            b"text/event-streamy",
            b"x text/event-stream",
        ];
        for t in types {
            for other in [None, Some("x-a"), Some("content-length")] {
                let mut h = HeaderMap::new();
                if let Some(n) = other {
                    h.insert(HeaderName::from_static(n), HeaderValue::from_static("1"));
                }
                h.insert(header::CONTENT_TYPE, HeaderValue::from_bytes(t).unwrap());
                // A second value is not read, by either.
                h.append(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                );
                assert_eq!(is_event_stream(&h), was(&h), "{t:?}");
                h.remove(header::CONTENT_TYPE);
                h.insert(header::CONTENT_TYPE, HeaderValue::from_bytes(t).unwrap());
                assert_eq!(is_event_stream(&h), was(&h), "{t:?} alone");
            }
        }
        assert!(!is_event_stream(&HeaderMap::new()));
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    const OPENAI: ProviderKind = ProviderKind::OpenAi;

    fn target(auth: &UpstreamAuth) -> Target<'_> {
        Target {
            auth,
            provider: &OPENAI,
            translated: false,
        }
    }

    #[test]
    fn a_translated_request_carries_the_clients_key_in_the_providers_header() {
        let client = map(&[
            ("x-api-key", "sk-client"),
            ("anthropic-version", "2023-06-01"),
        ]);
        let rid = HeaderValue::from_static("r");
        let gemini = ProviderKind::Gemini;
        let h = upstream_request_headers(
            &client,
            Target {
                auth: &UpstreamAuth::Passthrough,
                provider: &gemini,
                translated: true,
            },
            &rid,
        );
        assert_eq!(h["x-goog-api-key"], "sk-client");
        assert!(h["x-goog-api-key"].is_sensitive());
        assert!(!h.contains_key("x-api-key"));
        assert!(!h.contains_key("anthropic-version"));
        let anthropic = ProviderKind::anthropic();
        let h = upstream_request_headers(
            &map(&[("authorization", "Bearer sk-openai-client")]),
            Target {
                auth: &UpstreamAuth::ApiKey {
                    secret: "sk-ant-gw".into(),
                },
                provider: &anthropic,
                translated: true,
            },
            &rid,
        );
        assert_eq!(h["x-api-key"], "sk-ant-gw");
        assert!(!h.contains_key("authorization"));
        assert_eq!(h["anthropic-version"], "2023-06-01");
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_go() {
        let client = map(&[
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic x"),
            ("host", "gateway"),
            ("authorization", "Bearer client"),
            ("cookie", "a=b"),
            ("x-session-id", "s1"),
            ("openai-organization", "org"),
        ]);
        let rid = HeaderValue::from_static("r-1");
        let h = upstream_request_headers(&client, target(&UpstreamAuth::Passthrough), &rid);
        for gone in [
            "connection",
            "x-hop",
            "keep-alive",
            "te",
            "transfer-encoding",
            "upgrade",
            "proxy-authorization",
            "host",
        ] {
            assert!(!h.contains_key(gone), "{gone}");
        }
        for kept in [
            "authorization",
            "cookie",
            "x-session-id",
            "openai-organization",
        ] {
            assert_eq!(h[kept], client[kept], "{kept}");
        }
        assert_eq!(h["x-request-id"], "r-1");
    }

    #[test]
    fn a_responses_hop_by_hop_and_connection_named_headers_go() {
        let rid = HeaderValue::from_static("r-2");
        let named = map(&[
            ("connection", "close, x-hop"),
            ("x-hop", "1"),
            ("content-length", "2"),
            ("x-kept", "k"),
        ]);
        let h = client_response_headers(named, &rid);
        for gone in ["connection", "x-hop", "content-length"] {
            assert!(!h.contains_key(gone), "{gone}");
        }
        assert_eq!(h["x-kept"], "k");
        assert_eq!(h["x-request-id"], "r-2");
        // Without a `Connection` header, nothing else is hop-by-hop.
        let unnamed = map(&[("x-hop", "1"), ("content-length", "2")]);
        let h = client_response_headers(unnamed, &rid);
        assert_eq!(h["x-hop"], "1");
        assert!(!h.contains_key("content-length"));
    }

    #[test]
    fn configured_auth_replaces_the_clients() {
        let client = map(&[("authorization", "Bearer client"), ("x-api-key", "k")]);
        let rid = HeaderValue::from_static("r");
        let h = upstream_request_headers(
            &client,
            target(&UpstreamAuth::Bearer {
                secret: "sk-up".into(),
            }),
            &rid,
        );
        assert_eq!(h["authorization"], "Bearer sk-up");
        assert!(!h.contains_key("x-api-key"));
        assert!(h["authorization"].is_sensitive());
        let h = upstream_request_headers(
            &client,
            target(&UpstreamAuth::Header {
                name: HeaderName::from_static("x-api-key"),
                secret: "sk-ant".into(),
            }),
            &rid,
        );
        assert_eq!(h["x-api-key"], "sk-ant");
        assert!(!h.contains_key("authorization"));
    }

    #[test]
    fn a_lookup_by_names_finds_what_a_hashed_one_finds() {
        let names: Vec<HeaderName> = [
            "content-type",
            "content-length",
            "host",
            "authorization",
            "accept",
            "x-request-id",
            "x-sluice-timing",
            "x-sluice-timeout",
            "x-stainless-timeout",
            // Same length as each other: compared byte by byte.
            "x-aa",
            "x-bb",
            "X-Sluice-Timing",
            "Content-Type",
        ]
        .iter()
        .map(|n| HeaderName::from_bytes(n.as_bytes()).unwrap())
        .collect();
        let values = [
            HeaderValue::from_static("1"),
            HeaderValue::from_static(""),
            HeaderValue::from_static("text/event-stream"),
            // Not UTF-8: a valid header value all the same.
            HeaderValue::from_bytes(b"\x80\xff").unwrap(),
        ];
        let mut seed = 0x2545_f491_u32;
        let mut next = |n: usize| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (seed >> 16) as usize % n
        };
        for round in 0..2_000 {
            let mut h = HeaderMap::new();
            // Past `SCAN_UP_TO` distinct names too, where the hashed lookup answers.
            for _ in 0..round % 24 {
                let name = names[next(names.len())].clone();
                let value = values[next(values.len())].clone();
                if next(3) == 0 {
                    h.insert(name, value);
                } else {
                    h.append(name, value);
                }
            }
            if round % 7 == 0 {
                for i in 0..SCAN_UP_TO + 2 {
                    h.insert(
                        HeaderName::from_bytes(format!("x-filler-{i}").as_bytes()).unwrap(),
                        values[0].clone(),
                    );
                }
            }
            for name in names.iter().chain([&REQUEST_ID, &header::TE]) {
                let hashed = h.get(name);
                for scanned in [get(&h, name), find(&h, name)] {
                    assert!(
                        match (scanned, hashed) {
                            (Some(a), Some(b)) => std::ptr::eq(a, b),
                            (None, None) => true,
                            _ => false,
                        },
                        "{name} in {h:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn only_short_token_request_ids_are_kept() {
        for ok in ["client-7", "req_01HZX", "a1b2:c3/d4+e5=@x.y"] {
            let mut h = map(&[("x-request-id", ok)]);
            drop_invalid_request_id(&mut h);
            assert_eq!(h["x-request-id"], ok);
        }
        let long = "x".repeat(MAX_REQUEST_ID + 1);
        for bad in ["a status=999", "a\"b", "", long.as_str()] {
            let mut h = map(&[("x-request-id", bad)]);
            drop_invalid_request_id(&mut h);
            assert!(!h.contains_key("x-request-id"), "{bad:?}");
        }
        let mut h = map(&[("x-request-id", "a")]);
        h.append("x-request-id", HeaderValue::from_static("b"));
        drop_invalid_request_id(&mut h);
        assert!(
            !h.contains_key("x-request-id"),
            "two ids: neither is the id"
        );
        let mut h = map(&[("x-request-ids", "a b"), ("content-type", "text/plain")]);
        drop_invalid_request_id(&mut h);
        assert_eq!(h.len(), 2, "no id: nothing else goes");
    }

    #[test]
    fn streams_ask_for_identity_and_codings_are_read() {
        let mut h = map(&[("accept-encoding", "gzip, br")]);
        request_identity(&mut h);
        assert_eq!(h["accept-encoding"], "identity");
        assert_eq!(
            content_coding(&map(&[("content-encoding", "gzip")])),
            Some("gzip")
        );
        assert_eq!(
            content_coding(&map(&[("content-encoding", "identity")])),
            None
        );
        assert_eq!(content_coding(&HeaderMap::new()), None);
    }

    #[test]
    fn session_header_goes_into_the_body() {
        let rule = SessionHeaderToBody {
            header: HeaderName::from_static("x-session-id"),
            json_pointer: "/metadata/session_id".into(),
        };
        let mut body = serde_json::json!({ "model": "m" });
        let done =
            session_header_to_body(&rule, &map(&[("x-session-id", "s-9")]), &mut body).unwrap();
        assert!(done);
        assert_eq!(body["metadata"]["session_id"], "s-9");
        let mut body = serde_json::json!({ "model": "m" });
        assert!(!session_header_to_body(&rule, &HeaderMap::new(), &mut body).unwrap());
        let mut body = serde_json::json!({ "model": "m", "metadata": 3 });
        assert!(session_header_to_body(&rule, &map(&[("x-session-id", "s")]), &mut body).is_err());
    }

    #[test]
    fn values_new_in_every_response_are_never_indexed_and_the_rest_may_be() {
        let mut h = map(&[
            ("x-request-id", "sl-1"),
            ("request-id", "req_01"),
            ("x-amzn-requestid", "abc"),
            ("apim-request-id", "def"),
            ("x-ratelimit-remaining-tokens", "999"),
            ("anthropic-ratelimit-tokens-remaining", "9"),
            ("anthropic-ratelimit-requests-reset", "2026-12-01T00:00:00Z"),
            ("cf-ray", "8f-LHR"),
            ("openai-processing-ms", "12"),
            ("set-cookie", "__cf_bm=x"),
            ("content-type", "application/json"),
            ("openai-organization", "org"),
            ("x-ratelimit-limit-tokens", "1000"),
            ("date", "Tue, 01 Dec 2026 00:00:00 GMT"),
        ]);
        never_index(&mut h);
        for (name, value) in &h {
            let per_response = !matches!(
                name.as_str(),
                "content-type" | "openai-organization" | "x-ratelimit-limit-tokens" | "date"
            );
            assert_eq!(value.is_sensitive(), per_response, "{name}");
        }
        // The values themselves are untouched.
        assert_eq!(h["x-request-id"], "sl-1");
        assert_eq!(h["set-cookie"], "__cf_bm=x");
    }
}
