//! `${VAR}` and `${VAR:-default}` in string values, expanded once, at load.
//!
//! Expansion runs on the parsed document, before the typed structs see it, so every string value
//! (URLs, header values, file paths, …) takes variables and a new field needs nothing to take
//! them too. Keys are never expanded. `$$` is a literal `$`; a `$` followed by anything other
//! than `{` or `$` is left as it is.

use std::borrow::Cow;

use toml::de::{DeTable, DeValue};

use super::{ConfigError, EnvMode};

/// A variable that was not set while checking with [`EnvMode::Skip`]: where, and which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unresolved {
    /// The field path, e.g. `upstream[0].base_url`.
    pub(super) path: String,
    /// The variable's name.
    pub(super) var: String,
}

/// Expands every string value in `table`. In [`EnvMode::Skip`] an unset variable without a
/// default is replaced by [`placeholder`] and reported in the returned list.
///
/// # Errors
/// The field and the variable, for an unset variable in [`EnvMode::Required`] or a malformed
/// `${...}`.
pub(super) fn expand_document(
    table: &mut DeTable<'_>,
    env: &dyn Fn(&str) -> Option<String>,
    mode: EnvMode,
) -> Result<Vec<Unresolved>, ConfigError> {
    let mut unresolved = Vec::new();
    let mut walk = Walk {
        env,
        mode,
        unresolved: &mut unresolved,
    };
    walk.table(table, "")?;
    Ok(unresolved)
}

/// What stands in for an unset variable under `--skip-env`: usable as a host name, a path
/// segment and a header value, so the rest of the value can still be checked.
pub(super) fn placeholder(var: &str) -> String {
    format!("unset-{}", var.to_ascii_lowercase().replace('_', "-"))
}

struct Walk<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    mode: EnvMode,
    unresolved: &'a mut Vec<Unresolved>,
}

impl Walk<'_> {
    fn table(&mut self, table: &mut DeTable<'_>, path: &str) -> Result<(), ConfigError> {
        for (key, value) in table.iter_mut() {
            let path = if path.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{path}.{}", key.get_ref())
            };
            self.value(value.get_mut(), &path)?;
        }
        Ok(())
    }

    fn value(&mut self, value: &mut DeValue<'_>, path: &str) -> Result<(), ConfigError> {
        match value {
            DeValue::String(s) => {
                if s.contains('$') {
                    let expanded = self.expand(s, path)?;
                    *s = Cow::Owned(expanded);
                }
            }
            DeValue::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.value(item.get_mut(), &format!("{path}[{i}]"))?;
                }
            }
            DeValue::Table(t) => self.table(t, path)?,
            DeValue::Integer(_)
            | DeValue::Float(_)
            | DeValue::Boolean(_)
            | DeValue::Datetime(_) => {}
        }
        Ok(())
    }

    fn expand(&mut self, s: &str, path: &str) -> Result<String, ConfigError> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                out.push('$');
                rest = tail;
            } else if let Some(body) = after.strip_prefix('{') {
                let end = body.find('}').ok_or_else(|| {
                    ConfigError::new(
                        path,
                        format!(
                            "`${{` without its closing `}}` in \"{s}\"; write ${{VAR}}, or $$ for \
                             a literal $"
                        ),
                    )
                })?;
                out.push_str(&self.reference(&body[..end], path)?);
                rest = &body[end + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The value of one `${...}`: `inner` is what stands between the braces.
    fn reference(&mut self, inner: &str, path: &str) -> Result<String, ConfigError> {
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(ConfigError::new(
                path,
                format!(
                    "`${{{inner}}}` is not a variable reference; write ${{VAR}} or \
                     ${{VAR:-default}} (names: letters, digits, _), or $$ for a literal $"
                ),
            ));
        }
        // As in the shell, `:-` also covers a variable that is set but empty.
        match ((self.env)(name), default) {
            (Some(v), None) => Ok(v),
            (Some(v), Some(_)) if !v.is_empty() => Ok(v),
            (_, Some(default)) => Ok(default.to_string()),
            (None, None) => match self.mode {
                EnvMode::Required => Err(ConfigError::new(
                    path,
                    format!(
                        "the environment variable `{name}` is not set; set it, or give a default \
                         with ${{{name}:-value}}"
                    ),
                )),
                EnvMode::Skip => {
                    self.unresolved.push(Unresolved {
                        path: path.to_string(),
                        var: name.to_string(),
                    });
                    Ok(placeholder(name))
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "HOST" => Some("api.example.com".into()),
            "EMPTY" => Some(String::new()),
            "NESTED" => Some("${HOST}".into()),
            _ => None,
        }
    }

    fn expand(text: &str, mode: EnvMode) -> Result<(String, Vec<Unresolved>), ConfigError> {
        let mut doc = DeTable::parse(text).unwrap();
        let unresolved = expand_document(doc.get_mut(), &env, mode)?;
        let value = doc.get_ref().iter().next().unwrap().1.get_ref().clone();
        Ok((value.as_str().unwrap().to_string(), unresolved))
    }

    #[test]
    fn expansion() {
        let ok = [
            (r#"v = "https://${HOST}/v1""#, "https://api.example.com/v1"),
            (r#"v = "${HOST}${HOST}""#, "api.example.comapi.example.com"),
            (r#"v = "${PORT:-8080}""#, "8080"),
            (r#"v = "${HOST:-other}""#, "api.example.com"),
            (r#"v = "${EMPTY:-fallback}""#, "fallback"),
            (r#"v = "[${EMPTY}]""#, "[]"),
            (r#"v = "${PORT:-}""#, ""),
            (r#"v = "$${HOST}""#, "${HOST}"),
            (r#"v = "cost: $5, $$5""#, "cost: $5, $5"),
            (r#"v = "end$""#, "end$"),
            // Expanded once: a value is not expanded again.
            (r#"v = "${NESTED}""#, "${HOST}"),
        ];
        for (text, want) in ok {
            let (got, unresolved) = expand(text, EnvMode::Required).unwrap();
            assert_eq!(got, want, "{text}");
            assert!(unresolved.is_empty());
        }
    }

    #[test]
    fn errors_name_the_field_and_the_variable() {
        let cases = [
            (
                "[server]\ntls = { cert = \"${CERT_DIR}/c.pem\", key = \"k\" }",
                "server.tls.cert: the environment variable `CERT_DIR` is not set; set it, or give \
                 a default with ${CERT_DIR:-value}",
            ),
            (
                "[[route]]\nmodels = [\"a\", \"${MODEL}\"]",
                "route[0].models[1]: the environment variable `MODEL` is not set; set it, or give \
                 a default with ${MODEL:-value}",
            ),
            (
                "v = \"${HOST\"",
                "v: `${` without its closing `}` in \"${HOST\"; write ${VAR}, or $$ for a literal $",
            ),
            (
                "v = \"${1X}\"",
                "v: `${1X}` is not a variable reference; write ${VAR} or ${VAR:-default} (names: \
                 letters, digits, _), or $$ for a literal $",
            ),
            (
                "v = \"${HOST:default}\"",
                "v: `${HOST:default}` is not a variable reference; write ${VAR} or \
                 ${VAR:-default} (names: letters, digits, _), or $$ for a literal $",
            ),
        ];
        for (text, want) in cases {
            let mut doc = DeTable::parse(text).unwrap();
            let e = expand_document(doc.get_mut(), &env, EnvMode::Required).unwrap_err();
            assert_eq!(e.to_string(), want, "{text}");
        }
    }

    #[test]
    fn skip_env_puts_a_placeholder_and_reports_it() {
        let (got, unresolved) = expand(r#"v = "https://${API_HOST}/v1""#, EnvMode::Skip).unwrap();
        assert_eq!(got, "https://unset-api-host/v1");
        assert_eq!(
            unresolved,
            vec![Unresolved {
                path: "v".into(),
                var: "API_HOST".into()
            }]
        );
    }
}
