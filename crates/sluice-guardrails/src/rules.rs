//! A set of rules (built-in detectors and user regexes, each with an action) compiled once
//! per config, and its application to a whole text.

use std::borrow::Cow;

use regex::Regex;

use crate::detect::Detector;
use crate::verdict::Verdict;

/// What a rule does with what it finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Refuse the request (or end the answer).
    Deny,
    /// Replace the match with `[REDACTED:<label>]`.
    Redact,
    /// Record it only.
    Flag,
}

impl Action {
    /// The verdict of a finding under this action.
    pub fn verdict(self) -> Verdict {
        match self {
            Action::Deny => Verdict::Deny,
            Action::Redact => Verdict::Redact,
            Action::Flag => Verdict::Flag,
        }
    }
}

/// What a rule matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Matcher {
    /// A built-in detector.
    Builtin(Detector),
    /// A user's regular expression (the `regex` crate's syntax).
    Pattern(String),
}

/// One rule: a matcher, its action, and the label its findings get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Shown in placeholders (`[REDACTED:<label>]`) and deny reasons.
    pub label: String,
    /// What it matches.
    pub matcher: Matcher,
    /// What it does with a match.
    pub action: Action,
}

impl Rule {
    /// A built-in detector, labelled by its name.
    pub fn builtin(d: Detector, action: Action) -> Rule {
        Rule {
            label: d.name().to_string(),
            matcher: Matcher::Builtin(d),
            action,
        }
    }
}

/// Why a rule set could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// A pattern is not a valid regular expression.
    #[error("pattern `{pattern}` is not a valid regular expression: {reason}")]
    Invalid {
        /// The pattern.
        pattern: String,
        /// The parser's words.
        reason: String,
    },
    /// A pattern can match the empty string: it would match everywhere.
    #[error("pattern `{0}` can match an empty text; give it at least one character to find")]
    Empty(String),
    /// A pattern has no bound on its match length, so no stream window can hold its match.
    #[error(
        "pattern `{pattern}` has no longest match (an unbounded `*`, `+` or `{{n,}}`); bound it \
         (`{{1,64}}`) so a stream's window of {window} bytes can hold a whole match"
    )]
    Unbounded {
        /// The pattern.
        pattern: String,
        /// The window it must fit.
        window: usize,
    },
    /// A pattern's longest match is over the stream window.
    #[error(
        "pattern `{pattern}` can match {max} bytes, more than the stream window of {window} \
         bytes; raise `window` or bound the pattern"
    )]
    TooLong {
        /// The pattern.
        pattern: String,
        /// Its longest match in bytes.
        max: usize,
        /// The window.
        window: usize,
    },
}

/// A text refused by a rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the text contains {label} (refused by a guardrail)")]
pub struct Denied {
    /// The label of the rule that refused it.
    pub label: String,
}

/// A rule compiled.
#[derive(Debug)]
struct Compiled {
    /// Its capture group in the combined pattern.
    group: usize,
    detector: Option<Detector>,
    pattern: String,
    action: Action,
    label: String,
    placeholder: String,
}

/// A match of one rule's pattern, valid or not (an invalid one still decides where its
/// pattern's next search starts, so a stream must not cut through it either).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) rule: usize,
    pub(crate) valid: bool,
}

/// Rules compiled once per config into one pattern, an alternation of the rules in priority
/// order with a group each: a text is scanned once by the lazy DFA whatever the number of
/// rules (separate patterns cost a pass each, and a `RegexSet` of bounded repetitions fell
/// off the DFA: 3x slower), and the capture engine runs only on the spans that matched. At a
/// position where several rules match, the earliest rule wins; a match that fails its
/// validation is skipped whole.
#[derive(Debug)]
pub struct RuleSet {
    rules: Vec<Compiled>,
    all: Regex,
    max_len: usize,
}

/// A whole text checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked<'a> {
    /// The text to send on: the same when nothing was redacted.
    pub text: Cow<'a, str>,
    /// The most severe action taken.
    pub verdict: Verdict,
}

/// The built-in detectors' longest match, in bytes (their patterns are bounded).
fn builtin_max_len(d: Detector) -> usize {
    max_len(d.pattern()).unwrap_or(usize::MAX)
}

/// A pattern's longest match in bytes, `None` when unbounded.
fn max_len(pattern: &str) -> Option<usize> {
    regex_syntax::Parser::new()
        .parse(pattern)
        .ok()
        .and_then(|h| h.properties().maximum_len())
}

impl RuleSet {
    /// Compiles `rules`, in priority order (an earlier rule wins an overlap at the same
    /// start). `window` is the stream window the patterns must fit (`None`: whole texts only).
    pub fn new(rules: &[Rule], window: Option<usize>) -> Result<RuleSet, RuleError> {
        let mut compiled = Vec::with_capacity(rules.len());
        let mut longest = 0;
        for r in rules {
            let (pattern, detector) = match &r.matcher {
                Matcher::Builtin(d) => (d.pattern().to_string(), Some(*d)),
                Matcher::Pattern(p) => (p.clone(), None),
            };
            // Alone first, so an error names the pattern.
            Regex::new(&pattern).map_err(|e| RuleError::Invalid {
                pattern: pattern.clone(),
                reason: e.to_string(),
            })?;
            let hir =
                regex_syntax::Parser::new()
                    .parse(&pattern)
                    .map_err(|e| RuleError::Invalid {
                        pattern: pattern.clone(),
                        reason: e.to_string(),
                    })?;
            if hir.properties().minimum_len().unwrap_or(0) == 0 {
                return Err(RuleError::Empty(pattern));
            }
            let max = match detector {
                Some(d) => builtin_max_len(d),
                None => hir.properties().maximum_len().unwrap_or(usize::MAX),
            };
            if let Some(window) = window {
                if max == usize::MAX {
                    return Err(RuleError::Unbounded { pattern, window });
                }
                // The match plus one character after it (a word boundary's look-ahead).
                if max + 4 > window {
                    return Err(RuleError::TooLong {
                        pattern,
                        max,
                        window,
                    });
                }
            }
            longest = longest.max(max);
            compiled.push(Compiled {
                group: 0,
                pattern,
                detector,
                action: r.action,
                placeholder: format!("[REDACTED:{}]", r.label),
                label: r.label.clone(),
            });
        }
        let alternation: Vec<String> = compiled
            .iter()
            .enumerate()
            .map(|(i, c)| format!("(?P<__rule{i}>{})", c.pattern))
            .collect();
        let all = regex::RegexBuilder::new(&alternation.join("|"))
            .size_limit(64 << 20)
            .build()
            .map_err(|e| RuleError::Invalid {
                pattern: "(the rules together)".into(),
                reason: e.to_string(),
            })?;
        for (i, c) in compiled.iter_mut().enumerate() {
            let name = format!("__rule{i}");
            c.group = all
                .capture_names()
                .position(|n| n == Some(name.as_str()))
                .unwrap_or(0);
        }
        Ok(RuleSet {
            rules: compiled,
            all,
            max_len: longest,
        })
    }

    /// The longest match of any rule, in bytes.
    pub fn max_match_len(&self) -> usize {
        self.max_len
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Checks a whole text: `Err` when a deny rule found something, the text with redacted
    /// matches replaced otherwise.
    pub fn apply<'a>(&self, text: &'a str) -> Result<Checked<'a>, Denied> {
        let mut cands = Vec::new();
        self.candidates(text, 0, &mut cands);
        if cands.is_empty() {
            return Ok(Checked {
                text: Cow::Borrowed(text),
                verdict: Verdict::Allow,
            });
        }
        let mut out = String::new();
        let verdict = self.rewrite(text, 0, text.len(), &mut cands, &mut out)?;
        Ok(Checked {
            text: if verdict == Verdict::Redact {
                Cow::Owned(out)
            } else {
                Cow::Borrowed(text)
            },
            verdict,
        })
    }

    /// Every rule's candidates in `hay` from `from` (the bytes before it are context only).
    pub(crate) fn candidates(&self, hay: &str, from: usize, out: &mut Vec<Candidate>) {
        if self.rules.is_empty() {
            return;
        }
        let mut at = from;
        while at <= hay.len() {
            // The DFA finds the span; only then does the capture engine say which rule.
            let Some(m) = self.all.find_at(hay, at) else {
                break;
            };
            let caps = self.all.captures_at(hay, m.start());
            let rule = caps
                .as_ref()
                .and_then(|c| self.rules.iter().position(|r| c.get(r.group).is_some()))
                .unwrap_or(0);
            let valid = self.rules[rule]
                .detector
                .is_none_or(|d| d.validate(m.as_str()));
            out.push(Candidate {
                start: m.start(),
                end: m.end(),
                rule,
                valid,
            });
            // Patterns match at least one byte (checked when built).
            at = m.end().max(m.start() + 1);
        }
    }

    /// Writes `hay[from..to]` into `out` with the findings among `cands` (all inside the
    /// range) acted on; the findings chosen left to right, an earlier rule first at a tie.
    pub(crate) fn rewrite(
        &self,
        hay: &str,
        from: usize,
        to: usize,
        cands: &mut [Candidate],
        out: &mut String,
    ) -> Result<Verdict, Denied> {
        cands.sort_unstable_by_key(|c| (c.start, c.rule));
        let mut verdict = Verdict::Allow;
        let mut pos = from;
        for c in cands.iter().filter(|c| c.valid) {
            if c.start < pos {
                // Overlaps a finding already taken.
                continue;
            }
            let rule = &self.rules[c.rule];
            match rule.action {
                Action::Deny => {
                    return Err(Denied {
                        label: rule.label.clone(),
                    })
                }
                Action::Flag => {
                    verdict = verdict.max(Verdict::Flag);
                }
                Action::Redact => {
                    verdict = verdict.max(Verdict::Redact);
                    out.push_str(&hay[pos..c.start]);
                    out.push_str(&rule.placeholder);
                    pos = c.end;
                }
            }
        }
        out.push_str(&hay[pos..to]);
        Ok(verdict)
    }

    /// The label of rule `i`.
    pub fn label(&self, i: usize) -> &str {
        &self.rules[i].label
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(action: Action) -> RuleSet {
        let rules: Vec<Rule> = Detector::ALL
            .into_iter()
            .map(|d| Rule::builtin(d, action))
            .collect();
        RuleSet::new(&rules, Some(256)).unwrap()
    }

    #[test]
    fn redacts_each_builtin_and_keeps_the_rest() {
        let set = all(Action::Redact);
        let cases = [
            (
                "pay with 4111 1111 1111 1111 now",
                "pay with [REDACTED:card] now",
            ),
            ("mail jane.doe@example.co.uk ok", "mail [REDACTED:email] ok"),
            ("call +1 415-555-0132 today", "call [REDACTED:phone] today"),
            ("iban DE89 3704 0044 0532 0130 00.", "iban [REDACTED:iban]."),
            ("ssn 123-45-6789!", "ssn [REDACTED:ssn]!"),
            (
                "key sk-proj-abcdefghijklmnopqrstuvwx1234 end",
                "key [REDACTED:api_key] end",
            ),
            ("aws AKIAIOSFODNN7EXAMPLE x", "aws [REDACTED:api_key] x"),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMII",
                "[REDACTED:private_key]\nMII",
            ),
        ];
        for (text, want) in cases {
            let c = set.apply(text).unwrap();
            assert_eq!(c.text, want, "{text}");
            assert_eq!(c.verdict, Verdict::Redact);
        }
    }

    #[test]
    fn shapes_that_fail_validation_are_not_findings() {
        let set = all(Action::Redact);
        for text in [
            "order 4111111111112",
            "ssn 000-12-3456",
            "GB82WEST12345698765433",
            "no digits here at all",
        ] {
            let c = set.apply(text).unwrap();
            assert_eq!(c.text, text);
            assert_eq!(c.verdict, Verdict::Allow);
        }
    }

    #[test]
    fn deny_names_the_rule() {
        let set = all(Action::Deny);
        let e = set.apply("my card 4111111111111111").unwrap_err();
        assert_eq!(e.label, "card");
    }

    #[test]
    fn user_patterns_are_checked_when_built() {
        let r = |p: &str| Rule {
            label: "x".into(),
            matcher: Matcher::Pattern(p.into()),
            action: Action::Deny,
        };
        assert!(matches!(
            RuleSet::new(&[r("(")], None),
            Err(RuleError::Invalid { .. })
        ));
        assert!(matches!(
            RuleSet::new(&[r("a*")], None),
            Err(RuleError::Empty(_))
        ));
        assert!(matches!(
            RuleSet::new(&[r("secret.+")], Some(64)),
            Err(RuleError::Unbounded { .. })
        ));
        assert!(matches!(
            RuleSet::new(&[r("a{100}")], Some(64)),
            Err(RuleError::TooLong { .. })
        ));
        let ok = RuleSet::new(&[r("(?i)project falcon")], Some(64)).unwrap();
        assert!(ok.apply("about Project Falcon").is_err());
    }
}
