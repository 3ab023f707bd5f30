//! The response cache's key: a SHA-256 over everything that changes the answer (DESIGN.md
//! invariant 14), computed here because only this crate knows which request fields are
//! answer-neutral. Pure: bytes in, bytes out.
//!
//! The gateway calls [`canonical_body`] on the client's body, then [`cache_key`] with the
//! endpoint, the model as served (after aliasing), the canonical body and the namespace (the
//! virtual key's id, or the route's name when the route shares its answers), and hands the
//! digest to `sluice_state::CacheKey`.
//!
//! Canonical form: the JSON parsed and written again with every object's keys sorted (by
//! their UTF-8 bytes, at every depth), no insignificant whitespace, strings escaped as
//! serde_json writes them (so `"\u00e9"` and `"é"` are one string) and numbers as serde_json
//! prints them (`1.0` and `1.00` are one number, `1` and `1.0` are two), with the top-level
//! fields of [`IGNORED`] left out. Sorting is explicit, so the result does not depend on
//! whether serde_json's `preserve_order` feature is on in the build.

use std::io::Write;

use serde_json::{Map, Number, Value};

/// The request fields left out of the key because they cannot change the answer, as paths
/// from the top of the body (`a.b`: field `b` of the object under `a`).
///
/// | field | why it is left out |
/// |---|---|
/// | `stream` | transport only: a stored answer is replayed as a stream or as one body, whichever the client asks for |
/// | `stream_options` | transport only (OpenAI `include_usage`, `include_obfuscation`): how the stream is framed, not what it says |
/// | `user` | OpenAI's end-user id, for the provider's abuse monitoring; never seen by the model |
/// | `metadata.user_id` | Anthropic's end-user id, the same thing; `metadata` is then left out too if nothing else is in it |
///
/// Everything else counts, `model` included (the served model is keyed separately, so two
/// aliases of one model merely miss each other's entries: the safe direction).
pub const IGNORED: &[&str] = &[
    // Transport only: the cache replays a stored answer as the client asks.
    "stream",
    // Transport only: stream framing (usage chunk, obfuscation padding).
    "stream_options",
    // OpenAI's end-user id, for abuse monitoring; the model never sees it.
    "user",
    // Anthropic's end-user id, for abuse monitoring; the model never sees it.
    "metadata.user_id",
];

/// Largest magnitude a number may have and still be told apart from its neighbours: serde_json
/// reads integers beyond `u64`/`i64` as doubles, which merge distinct integers above 2^53.
const MAX_EXACT_FLOAT: f64 = 9_007_199_254_740_992.0; // 2^53

/// Why a body has no canonical form (the request is then not cached: a miss, never an error
/// for the client).
#[derive(Debug, thiserror::Error)]
pub enum CanonicalError {
    /// The body is not JSON.
    #[error("the body is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A whole number too large for a double to keep apart from its neighbours
    /// (`18446744073709551617` and `18446744073709551616` read as one value).
    #[error("a number too large to key exactly")]
    ImpreciseNumber,
}

impl CanonicalError {
    /// A low-cardinality label for metrics: `not_json`, `imprecise_number`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CanonicalError::Json(_) => "not_json",
            CanonicalError::ImpreciseNumber => "imprecise_number",
        }
    }
}

/// The canonical form of a request body: sorted keys at every depth, no insignificant
/// whitespace, the fields of [`IGNORED`] left out (see the module's doc).
///
/// # Errors
/// The body is not one JSON value, or holds a whole number beyond 2^53 written as a float
/// or beyond 64 bits ([`CanonicalError::ImpreciseNumber`]).
pub fn canonical_body(body: &[u8]) -> Result<Vec<u8>, CanonicalError> {
    let mut value: Value = serde_json::from_slice(body)?;
    if let Value::Object(top) = &mut value {
        drop_ignored(top);
    }
    let mut out = Vec::with_capacity(body.len());
    write_canonical(&mut out, &value)?;
    Ok(out)
}

fn drop_ignored(top: &mut Map<String, Value>) {
    for path in IGNORED {
        match path.split_once('.') {
            None => {
                top.remove(*path);
            }
            Some((outer, inner)) => {
                let Some(Value::Object(nested)) = top.get_mut(outer) else {
                    continue;
                };
                if nested.remove(inner).is_some() && nested.is_empty() {
                    // `{"metadata":{"user_id":"u1"}}` keys like no metadata at all.
                    top.remove(outer);
                }
            }
        }
    }
}

fn write_canonical(out: &mut Vec<u8>, value: &Value) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => serde_json::to_writer(&mut *out, s)?,
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(out, item)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, key)?;
                out.push(b':');
                write_canonical(out, item)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn write_number(out: &mut Vec<u8>, n: &Number) -> Result<(), CanonicalError> {
    if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
        if f.fract() == 0.0 && f.abs() >= MAX_EXACT_FLOAT {
            return Err(CanonicalError::ImpreciseNumber);
        }
    }
    // `Number`'s Display is serde_json's own output: ryu for doubles, itoa for integers.
    write!(out, "{n}").map_err(serde_json::Error::io)?;
    Ok(())
}

/// The cache key of a request: SHA-256 over a version tag and the four fields, each prefixed
/// with its length (so `("ab", "c")` and `("a", "bc")` differ).
///
/// - `endpoint`: what the client called, e.g. `Operation::as_str()` (`chat_completions`);
/// - `served_model`: the model after aliasing, the one the upstream is asked for;
/// - `canonical`: [`canonical_body`] of the body;
/// - `namespace`: whose answers these are: the virtual key's id (the default), or the
///   route's name on a route that shares answers between keys on purpose. The caller keeps
///   the two apart (e.g. `key:k42`, `route:chat`) so a key named like a route sees nothing.
pub fn cache_key(
    endpoint: &str,
    served_model: &str,
    canonical: &[u8],
    namespace: &str,
) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    // Changing the canonical form changes this tag, so old entries are never misread.
    for field in [
        b"sluice-cache-v1".as_slice(),
        endpoint.as_bytes(),
        served_model.as_bytes(),
        canonical,
        namespace.as_bytes(),
    ] {
        ctx.update(&(field.len() as u64).to_be_bytes());
        ctx.update(field);
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(ctx.finish().as_ref());
    key
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn canon(s: &str) -> String {
        String::from_utf8(canonical_body(s.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn keys_are_sorted_at_every_depth_and_whitespace_goes() {
        assert_eq!(
            canon(r#" { "b" : [ {"y":1, "x": "é\u00e9"} ], "a": {"d": null, "c": true} } "#),
            r#"{"a":{"c":true,"d":null},"b":[{"x":"éé","y":1}]}"#
        );
        // Escapes are serde_json's: control characters and quotes only.
        assert_eq!(canon(r#"{"k":"\"\n\u0001\/"}"#), r#"{"k":"\"\n\u0001/"}"#);
    }

    #[test]
    fn numbers_are_written_as_serde_json_prints_them() {
        assert_eq!(
            canon(r#"{"t":1.00,"u":1e2,"v":-0,"w":7}"#),
            r#"{"t":1.0,"u":100.0,"v":-0.0,"w":7}"#
        );
        assert_eq!(canon("[0.1, 1.5e-7]"), "[0.1,1.5e-7]");
        // Distinct whole numbers a double cannot keep apart are refused, not merged.
        for body in ["[18446744073709551617]", "[1e300]", "[-9007199254740992.0]"] {
            assert!(matches!(
                canonical_body(body.as_bytes()),
                Err(CanonicalError::ImpreciseNumber)
            ));
        }
        assert_eq!(
            canon("[18446744073709551615, -9223372036854775808]"),
            "[18446744073709551615,-9223372036854775808]"
        );
    }

    #[test]
    fn ignored_fields_go_only_where_they_are_named() {
        assert_eq!(
            canon(
                r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"user":"u"}"#
            ),
            r#"{"model":"m"}"#
        );
        assert_eq!(canon(r#"{"metadata":{"user_id":"u"}}"#), "{}");
        assert_eq!(
            canon(r#"{"metadata":{"user_id":"u","tag":"x"}}"#),
            r#"{"metadata":{"tag":"x"}}"#
        );
        // Below the top, the same names are content.
        assert_eq!(
            canon(r#"{"messages":[{"user":"u","stream":1}]}"#),
            r#"{"messages":[{"stream":1,"user":"u"}]}"#
        );
        assert!(canonical_body(b"{").is_err());
        assert!(canonical_body(b"{} x").is_err());
        assert_eq!(canon(r#""text""#), r#""text""#);
    }

    #[test]
    fn fields_are_length_prefixed() {
        let k = |e: &str, m: &str, b: &[u8], n: &str| cache_key(e, m, b, n);
        assert_ne!(k("ab", "c", b"{}", "n"), k("a", "bc", b"{}", "n"));
        assert_ne!(k("e", "m", b"{}x", "n"), k("e", "m", b"{}", "xn"));
        assert_eq!(k("e", "m", b"{}", "n"), k("e", "m", b"{}", "n"));
    }

    /// A JSON value whose objects keep the order they were generated in, so tests can write
    /// the same object with its keys in several orders (serde_json's `Value` may sort them).
    #[derive(Clone, Debug)]
    enum J {
        Null,
        Bool(bool),
        Int(i64),
        Float(f64),
        Str(String),
        Arr(Vec<J>),
        Obj(Vec<(String, J)>),
    }

    /// How to write a [`J`]: keys in order or reversed, and with whitespace or not.
    #[derive(Clone, Copy)]
    struct Style {
        reversed: bool,
        spaced: bool,
    }

    impl J {
        fn write(&self, out: &mut String, style: Style) {
            let gap = if style.spaced { " \n\t " } else { "" };
            match self {
                J::Null => out.push_str("null"),
                J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                J::Int(i) => out.push_str(&i.to_string()),
                J::Float(f) => out.push_str(&serde_json::to_string(f).unwrap()),
                J::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
                J::Arr(items) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(gap);
                        item.write(out, style);
                    }
                    out.push_str(gap);
                    out.push(']');
                }
                J::Obj(entries) => {
                    out.push('{');
                    let mut order: Vec<&(String, J)> = entries.iter().collect();
                    if style.reversed {
                        order.reverse();
                    }
                    for (i, (k, v)) in order.into_iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(gap);
                        out.push_str(&serde_json::to_string(k).unwrap());
                        out.push_str(gap);
                        out.push(':');
                        v.write(out, style);
                    }
                    out.push_str(gap);
                    out.push('}');
                }
            }
        }

        fn text(&self, style: Style) -> String {
            let mut out = String::new();
            self.write(&mut out, style);
            out
        }
    }

    fn json() -> impl Strategy<Value = J> {
        let leaf = prop_oneof![
            Just(J::Null),
            any::<bool>().prop_map(J::Bool),
            any::<i64>().prop_map(J::Int),
            (-1e9f64..1e9).prop_map(J::Float),
            "[a-z\"\\\\é\n ]{0,8}".prop_map(J::Str),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(J::Arr),
                prop::collection::btree_map("[a-z_]{1,6}", inner, 0..6)
                    .prop_map(|m| J::Obj(m.into_iter().collect())),
            ]
        })
    }

    /// A request body: an object with generated fields, none of them an ignored one.
    fn body() -> impl Strategy<Value = Vec<(String, J)>> {
        prop::collection::btree_map("[a-z]{1,8}", json(), 1..8).prop_map(|m| {
            m.into_iter()
                .filter(|(k, _)| !IGNORED.contains(&k.as_str()) && k != "metadata")
                .collect()
        })
    }

    fn key_of(text: &str, namespace: &str) -> [u8; 32] {
        let canonical = canonical_body(text.as_bytes()).expect("canonical");
        cache_key("chat_completions", "gpt-4o", &canonical, namespace)
    }

    const PLAIN: Style = Style {
        reversed: false,
        spaced: false,
    };

    proptest! {
        #[test]
        fn key_order_and_whitespace_do_not_change_the_key(fields in body()) {
            let body = J::Obj(fields);
            let plain = key_of(&body.text(PLAIN), "k1");
            for reversed in [false, true] {
                for spaced in [false, true] {
                    let text = body.text(Style { reversed, spaced });
                    prop_assert_eq!(key_of(&text, "k1"), plain, "{}", text);
                }
            }
            // Canonical is a fixed point.
            let once = canonical_body(body.text(PLAIN).as_bytes()).unwrap();
            prop_assert_eq!(canonical_body(&once).unwrap(), once);
        }

        #[test]
        fn ignored_fields_do_not_change_the_key(
            fields in body(),
            stream in any::<bool>(),
            usage in any::<bool>(),
            user in "[a-z0-9-]{0,12}",
            at in 0usize..8,
        ) {
            let plain = key_of(&J::Obj(fields.clone()).text(PLAIN), "k1");
            let mut with = fields;
            let extra = [
                ("stream".to_string(), J::Bool(stream)),
                ("stream_options".to_string(), J::Obj(vec![("include_usage".into(), J::Bool(usage))])),
                ("user".to_string(), J::Str(user.clone())),
                ("metadata".to_string(), J::Obj(vec![("user_id".into(), J::Str(user))])),
            ];
            for (i, field) in extra.into_iter().enumerate() {
                let pos = (at + i).min(with.len());
                with.insert(pos, field);
            }
            prop_assert_eq!(key_of(&J::Obj(with).text(Style { reversed: true, spaced: true }), "k1"), plain);
        }

        #[test]
        fn any_other_field_changes_the_key(
            fields in body(),
            name in "[a-z]{1,8}",
            value in json(),
            namespace in "[a-z0-9]{1,8}",
        ) {
            let plain = key_of(&J::Obj(fields.clone()).text(PLAIN), "k1");
            // A new field.
            prop_assume!(!IGNORED.contains(&name.as_str()) && name != "metadata");
            prop_assume!(fields.iter().all(|(k, _)| *k != name));
            let mut with = fields.clone();
            with.push((name, value.clone()));
            prop_assert_ne!(key_of(&J::Obj(with).text(PLAIN), "k1"), plain);
            // A changed value: wrapped in an array, it is another value.
            let mut changed = fields;
            let old = std::mem::replace(&mut changed[0].1, J::Null);
            changed[0].1 = J::Arr(vec![old]);
            prop_assert_ne!(key_of(&J::Obj(changed).text(PLAIN), "k1"), plain);
            // Another namespace.
            prop_assume!(namespace != "k1");
            prop_assert_ne!(key_of(&J::Obj(vec![]).text(PLAIN), &namespace), key_of("{}", "k1"));
        }
    }
}
