//! `[[guardrail]]`: checks defined once and referenced by name from routes
//! (`guardrails = ["no-secrets", "policy-service"]`). Raw entries are validated here into
//! [`GuardrailConfig`]: rules compiled (a bad pattern, or one that cannot fit the stream
//! window, is an error naming the entry), an external checker's URL, headers and bounds
//! checked.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use sluice_guardrails::rules::Matcher;
use sluice_guardrails::{Action, Detector, Rule, RuleSet};

use super::units::DurationValue;
use super::ConfigError;

/// The default stream window, in bytes: above the built-in detectors' longest match (about
/// 210 bytes) plus a character, and small enough to delay a first token by a few tokens.
pub const DEFAULT_WINDOW: usize = 256;
/// The largest window accepted: a stream's hold-back must stay small.
pub const MAX_WINDOW: usize = 16 * 1024;

/// `[[guardrail]]`: a check defined once, named by routes and keys (`guardrails = [...]`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGuardrail {
    /// Its name: in routes' and keys' `guardrails`, the `x-sluice-guardrails` header, the access
    /// log and the metrics.
    name: String,
    /// `builtin` (the detectors below), `regex` (your `patterns`) or `http` (an external
    /// checker at `url`).
    kind: KindName,
    /// Where it checks: `input` (the request's messages, before any upstream attempt), `output`
    /// (the answer, a stream as it flows) or `both`. Default: `both`.
    stage: Option<StageName>,
    /// `kind = "builtin"`: detector → action (`deny`, `redact` or `flag`). Detectors: `card`
    /// (Luhn-checked), `iban` (mod-97), `ssn`, `email`, `phone`, `api_key` (sk-, AKIA, ghp_,
    /// xox, AIza, glpat- shapes), `private_key` (PEM headers).
    detectors: Option<BTreeMap<String, ActionName>>,
    /// `kind = "builtin"`: refuse prompts estimated over this many tokens (about four bytes of
    /// message text a token).
    max_prompt_tokens: Option<u64>,
    /// `kind = "builtin"`: globs of the models a request may name (default: any the route
    /// takes).
    models: Option<Vec<String>>,
    /// `kind = "regex"`: regular expressions (Rust `regex` syntax); one that can match empty
    /// text, or (for output) has no bounded longest match, is refused.
    patterns: Option<Vec<String>>,
    /// `kind = "regex"`: what a match does: `deny`, `redact` or `flag`. Default: `deny`.
    action: Option<ActionName>,
    /// `kind = "regex"`: the placeholder's label (`[REDACTED:label]`). Default: the name.
    label: Option<String>,
    /// The most text of a stream held back while it is checked, in bytes, 16 to 16384.
    /// Default: 256. For `http`, the size of the pieces of a streamed answer sent to the
    /// checker (each released to the client once it is answered).
    window: Option<usize>,
    /// `kind = "http"`: the checker, `http://host:port/path` (plain HTTP, beside the gateway).
    url: Option<String>,
    /// `kind = "http"`: headers sent with each check (values may be `${VAR}`; never shown).
    headers: Option<BTreeMap<String, String>>,
    /// `kind = "http"`: the deadline of one check (never past the request's own). Default:
    /// `500ms`.
    timeout: Option<DurationValue>,
    /// `kind = "http"`: checks in flight at once; one more fails at once (`on_error`
    /// decides). Default: 64.
    max_in_flight: Option<usize>,
    /// `kind = "http"`: a checker that is slow, down or answers nonsense: `allow` (fail open)
    /// or `deny` (fail closed). Default: `deny`.
    on_error: Option<OnError>,
}

/// `builtin`, `regex` or `http`.
#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = super::schema::interpolable)]
enum KindName {
    Builtin,
    Regex,
    Http,
}

/// `input`, `output` or `both`.
#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = super::schema::interpolable)]
enum StageName {
    Input,
    Output,
    Both,
}

/// `deny`, `redact` or `flag`.
#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = super::schema::interpolable)]
enum ActionName {
    Deny,
    Redact,
    Flag,
}

impl From<ActionName> for Action {
    fn from(a: ActionName) -> Action {
        match a {
            ActionName::Deny => Action::Deny,
            ActionName::Redact => Action::Redact,
            ActionName::Flag => Action::Flag,
        }
    }
}

/// What an external checker's failure (slow past its timeout, down, nonsense) means.
#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = super::schema::interpolable)]
pub enum OnError {
    /// Let the text through (fail open); the verdict is recorded as `error`.
    Allow,
    /// Refuse it (fail closed).
    Deny,
}

/// One guardrail.
#[derive(Clone, Debug)]
pub struct GuardrailConfig {
    /// Its name: in routes' `guardrails`, the `x-sluice-guardrails` header, logs, metrics.
    pub name: String,
    /// Checks the request's messages before any upstream attempt.
    pub input: bool,
    /// Checks the answer (a whole body, or a stream as it flows).
    pub output: bool,
    /// What it checks with.
    pub kind: GuardrailKind,
}

/// How a guardrail checks.
#[derive(Clone, Debug)]
pub enum GuardrailKind {
    /// Built-in detectors and user regexes, run in the gateway.
    Rules(RulesCheck),
    /// An external checker over HTTP.
    Http(HttpCheck),
}

/// A guardrail run in the gateway (`kind = "builtin"` or `"regex"`).
#[derive(Clone, Debug)]
pub struct RulesCheck {
    /// The rules, compiled once.
    pub rules: Arc<RuleSet>,
    /// A stream's hold-back window in bytes.
    pub window: usize,
    /// Refuse prompts estimated over this many tokens (about four bytes a token of message
    /// text).
    pub max_prompt_tokens: Option<u64>,
    /// Globs of the models a request may name (empty: any the route takes).
    pub models: Vec<String>,
}

/// An external checker (`kind = "http"`): POST JSON `{"stage", "model", "texts"}`, answered
/// `{"verdict": "allow" | "deny" | "modify", "reason", "texts"}`.
#[derive(Clone, Debug)]
pub struct HttpCheck {
    /// `http://host:port/path`.
    pub url: http::Uri,
    /// Headers sent with each check (values may come from `${VAR}`; never shown).
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Deadline of one check (never past the request's own deadline).
    pub timeout: Duration,
    /// Checks in flight at once; one more is an error (`on_error` decides).
    pub max_in_flight: usize,
    /// What a failed check means.
    pub on_error: OnError,
    /// A stream's text is sent to the checker in pieces of about this many bytes, each
    /// held until the checker answers.
    pub window: usize,
}

/// Validates `[[guardrail]]` entries; names unique.
pub(super) fn guardrails(raw: Vec<RawGuardrail>) -> Result<Vec<GuardrailConfig>, ConfigError> {
    let mut out: Vec<GuardrailConfig> = Vec::with_capacity(raw.len());
    for (i, g) in raw.into_iter().enumerate() {
        let path = format!("guardrail[{i}]");
        let g = guardrail(&path, g)?;
        if out.iter().any(|o| o.name == g.name) {
            return Err(ConfigError::new(
                format!("{path}.name"),
                format!("`{}` is already the name of another guardrail", g.name),
            ));
        }
        out.push(g);
    }
    Ok(out)
}

fn guardrail(path: &str, raw: RawGuardrail) -> Result<GuardrailConfig, ConfigError> {
    let RawGuardrail {
        name,
        kind,
        stage,
        detectors,
        max_prompt_tokens,
        models,
        patterns,
        action,
        label,
        window,
        url,
        headers,
        timeout,
        max_in_flight,
        on_error,
    } = raw;
    let at = |field: &str, reason: String| {
        ConfigError::new(
            format!("{path}.{field}"),
            format!("guardrail `{name}`: {reason}"),
        )
    };
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(at(
            "name",
            "needs a name of letters, digits, `-`, `_` and `.` (it is shown in a header)".into(),
        ));
    }
    // A field of another kind is a mistake worth saying, not ignoring.
    let foreign: &[(&str, bool)] = match kind {
        KindName::Builtin => &[
            ("patterns", patterns.is_some()),
            ("label", label.is_some()),
            ("action", action.is_some()),
            ("url", url.is_some()),
            ("headers", headers.is_some()),
            ("timeout", timeout.is_some()),
            ("max_in_flight", max_in_flight.is_some()),
            ("on_error", on_error.is_some()),
        ],
        KindName::Regex => &[
            ("detectors", detectors.is_some()),
            ("max_prompt_tokens", max_prompt_tokens.is_some()),
            ("models", models.is_some()),
            ("url", url.is_some()),
            ("headers", headers.is_some()),
            ("timeout", timeout.is_some()),
            ("max_in_flight", max_in_flight.is_some()),
            ("on_error", on_error.is_some()),
        ],
        KindName::Http => &[
            ("detectors", detectors.is_some()),
            ("max_prompt_tokens", max_prompt_tokens.is_some()),
            ("models", models.is_some()),
            ("patterns", patterns.is_some()),
            ("label", label.is_some()),
            ("action", action.is_some()),
        ],
    };
    if let Some((field, _)) = foreign.iter().find(|(_, set)| *set) {
        let kind = match kind {
            KindName::Builtin => "builtin",
            KindName::Regex => "regex",
            KindName::Http => "http",
        };
        return Err(at(
            field,
            format!("`{field}` is not a setting of kind = \"{kind}\""),
        ));
    }
    let (input, output) = match stage.unwrap_or(StageName::Both) {
        StageName::Input => (true, false),
        StageName::Output => (false, true),
        StageName::Both => (true, true),
    };
    let window = window.unwrap_or(DEFAULT_WINDOW);
    if !(16..=MAX_WINDOW).contains(&window) {
        return Err(at(
            "window",
            format!("{window} bytes; give 16 to {MAX_WINDOW} (default {DEFAULT_WINDOW})"),
        ));
    }
    let kind = match kind {
        KindName::Builtin | KindName::Regex => {
            let mut rules = Vec::new();
            if kind == KindName::Builtin {
                for (d, a) in detectors.unwrap_or_default() {
                    let Some(det) = Detector::from_name(&d) else {
                        let known: Vec<&str> = Detector::ALL.iter().map(|d| d.name()).collect();
                        return Err(at(
                            "detectors",
                            format!("no detector `{d}`; the detectors are {}", known.join(", ")),
                        ));
                    };
                    rules.push(Rule::builtin(det, a.into()));
                }
                // Detectors in their priority order, whatever the table's order.
                rules.sort_by_key(|r| {
                    Detector::ALL
                        .iter()
                        .position(|d| matches!(r.matcher, Matcher::Builtin(x) if x == *d))
                });
                if rules.is_empty() && max_prompt_tokens.is_none() && models.is_none() {
                    return Err(at(
                        "detectors",
                        "checks nothing: give `detectors = { card = \"redact\", ... }`, \
                         `max_prompt_tokens` or `models`"
                            .into(),
                    ));
                }
            } else {
                let patterns = patterns.unwrap_or_default();
                if patterns.is_empty() {
                    return Err(at(
                        "patterns",
                        "needs at least one pattern, e.g. [\"(?i)project falcon\"]".into(),
                    ));
                }
                let action = action.map(Action::from).unwrap_or(Action::Deny);
                let label = label.unwrap_or_else(|| name.clone());
                for p in patterns {
                    rules.push(Rule {
                        label: label.clone(),
                        matcher: Matcher::Pattern(p),
                        action,
                    });
                }
            }
            let compiled = RuleSet::new(&rules, output.then_some(window)).map_err(|e| {
                at(
                    if kind == KindName::Regex {
                        "patterns"
                    } else {
                        "detectors"
                    },
                    e.to_string(),
                )
            })?;
            let models = models.unwrap_or_default();
            if models.iter().any(|m| m.is_empty()) {
                return Err(at("models", "a model glob is empty".into()));
            }
            GuardrailKind::Rules(RulesCheck {
                rules: Arc::new(compiled),
                window,
                max_prompt_tokens,
                models,
            })
        }
        KindName::Http => {
            let Some(url) = url else {
                return Err(at(
                    "url",
                    "kind = \"http\" needs `url`, e.g. \"http://127.0.0.1:9000/check\"".into(),
                ));
            };
            let uri: http::Uri = url
                .parse()
                .map_err(|e| at("url", format!("`{url}` is not a URL: {e}")))?;
            if uri.scheme_str() != Some("http") || uri.host().is_none() {
                return Err(at(
                    "url",
                    format!("`{url}`: the checker is reached over plain http://host:port/path (put it beside the gateway)"),
                ));
            }
            let mut hs = Vec::new();
            for (k, v) in headers.unwrap_or_default() {
                let name = http::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|_| at("headers", format!("`{k}` is not a header name")))?;
                let mut value = http::HeaderValue::from_str(&v).map_err(|_| {
                    at(
                        "headers",
                        format!("the value of `{k}` is not a header value"),
                    )
                })?;
                value.set_sensitive(true);
                hs.push((name, value));
            }
            let timeout = timeout.map(|t| t.0).unwrap_or(Duration::from_millis(500));
            if timeout.is_zero() {
                return Err(at("timeout", "must be above zero, e.g. \"500ms\"".into()));
            }
            let max_in_flight = max_in_flight.unwrap_or(64);
            if max_in_flight == 0 {
                return Err(at("max_in_flight", "must be at least 1".into()));
            }
            GuardrailKind::Http(HttpCheck {
                url: uri,
                headers: hs,
                timeout,
                max_in_flight,
                on_error: on_error.unwrap_or(OnError::Deny),
                window,
            })
        }
    };
    Ok(GuardrailConfig {
        name,
        input,
        output,
        kind,
    })
}

/// A route's (or key's) `guardrails = [...]` as indexes into [`super::Config::guardrails`].
pub(super) fn references(
    path: &str,
    names: Option<Vec<String>>,
    defined: &[GuardrailConfig],
) -> Result<Vec<usize>, ConfigError> {
    let mut out = Vec::new();
    for n in names.unwrap_or_default() {
        let Some(i) = defined.iter().position(|g| g.name == n) else {
            let known: Vec<&str> = defined.iter().map(|g| g.name.as_str()).collect();
            return Err(ConfigError::new(
                format!("{path}.guardrails"),
                format!(
                    "no [[guardrail]] named `{n}`; the guardrails are [{}]",
                    known.join(", ")
                ),
            ));
        };
        if !out.contains(&i) {
            out.push(i);
        }
    }
    Ok(out)
}
