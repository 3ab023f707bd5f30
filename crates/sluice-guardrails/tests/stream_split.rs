//! Redaction over any split of a text into deltas equals redaction of the whole text (and a
//! deny is found either way), for the built-in detectors and a user pattern.

use std::sync::Arc;

use proptest::prelude::*;
use sluice_guardrails::rules::Matcher;
use sluice_guardrails::{Action, Detector, Rule, RuleSet, StreamRedactor};

const WINDOW: usize = 256;

fn rules(action: Action) -> Arc<RuleSet> {
    let mut rules: Vec<Rule> = Detector::ALL
        .into_iter()
        .map(|d| Rule::builtin(d, action))
        .collect();
    rules.push(Rule {
        label: "codename".into(),
        matcher: Matcher::Pattern("(?i)project[ _-]falcon".into()),
        action,
    });
    Arc::new(RuleSet::new(&rules, Some(WINDOW)).unwrap())
}

/// Pieces that make findings, near-findings and plain text, multi-byte characters included.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("4111 1111 1111 1111".to_string()),
        Just("4111-1111-1111-1112".to_string()),
        Just("jane.doe@example.com".to_string()),
        Just("+1 (415) 555-0132".to_string()),
        Just("DE89 3704 0044 0532 0130 00".to_string()),
        Just("123-45-6789".to_string()),
        Just("sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345".to_string()),
        Just("AKIAIOSFODNN7EXAMPLE".to_string()),
        Just("-----BEGIN PRIVATE KEY-----".to_string()),
        Just("Project Falcon".to_string()),
        Just("héllo wörld — ✓ 日本語 🦀".to_string()),
        "[0-9 @.a-zA-Z-]{0,12}",
        "[ \n]{0,3}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..40).prop_map(|v| v.concat())
}

/// Splits `s` at the given fractions, on character boundaries.
fn split(s: &str, cuts: &[f64]) -> Vec<String> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|f| {
            let mut i = (f * s.len() as f64) as usize;
            while !s.is_char_boundary(i) {
                i -= 1;
            }
            i
        })
        .collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for p in points {
        out.push(s[last..p].to_string());
        last = p;
    }
    out.push(s[last..].to_string());
    out
}

fn streamed(set: &Arc<RuleSet>, deltas: &[String]) -> Result<String, String> {
    let mut r = StreamRedactor::new(set.clone(), WINDOW);
    let mut out = String::new();
    for d in deltas {
        out.push_str(&r.push(d).map_err(|e| e.label)?);
        assert!(
            r.held() <= WINDOW + WINDOW / 4 + set.max_match_len(),
            "held {} bytes",
            r.held()
        );
    }
    out.push_str(&r.finish().map_err(|e| e.label)?);
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn redaction_over_any_split_equals_redaction_of_the_whole(
        s in text(),
        cuts in prop::collection::vec(0.0f64..1.0, 0..30),
    ) {
        let set = rules(Action::Redact);
        let whole = set.apply(&s).unwrap().text.into_owned();
        let deltas = split(&s, &cuts);
        prop_assert_eq!(streamed(&set, &deltas).unwrap(), whole);
    }

    #[test]
    fn a_deny_is_found_over_any_split(
        s in text(),
        cuts in prop::collection::vec(0.0f64..1.0, 0..30),
    ) {
        let set = rules(Action::Deny);
        let whole = set.apply(&s).map(|c| c.text.into_owned()).map_err(|e| e.label);
        let deltas = split(&s, &cuts);
        prop_assert_eq!(streamed(&set, &deltas), whole);
    }
}

#[test]
fn a_card_split_one_character_per_delta_is_redacted() {
    let set = rules(Action::Redact);
    let text = "here: 4111 1111 1111 1111, thanks";
    let deltas: Vec<String> = text.chars().map(String::from).collect();
    assert_eq!(
        streamed(&set, &deltas).unwrap(),
        "here: [REDACTED:card], thanks"
    );
}
