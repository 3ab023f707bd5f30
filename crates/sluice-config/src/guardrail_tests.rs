//! `[[guardrail]]` and `route[].guardrails` as a user meets them: every mistake names the
//! entry and the field.

use super::*;

fn with(guardrails: &str, route: &str) -> String {
    format!(
        "[[upstream]]\nname = \"local\"\nbase_url = \"http://127.0.0.1:9090/v1\"\n{guardrails}\n\
         [[route]]\nmodels = [\"*\"]\nupstream = \"local\"\n{route}\n"
    )
}

fn err(text: &str) -> ConfigError {
    Config::from_toml(text, &|v| (v == "TOKEN").then(|| "t0k".to_string())).unwrap_err()
}

const RULES: &str = "[[guardrail]]\nname = \"pii\"\nkind = \"builtin\"\n\
    detectors = { card = \"redact\", private_key = \"deny\" }\n";

#[test]
fn guardrails_load_and_routes_name_them() {
    let text = with(
        &format!(
            "{RULES}[[guardrail]]\nname = \"policy\"\nkind = \"http\"\nstage = \"input\"\n\
             url = \"http://127.0.0.1:9000/check\"\nheaders = {{ authorization = \"Bearer ${{TOKEN}}\" }}\n\
             timeout = \"200ms\"\non_error = \"allow\"\n"
        ),
        "guardrails = [\"policy\", \"pii\"]",
    );
    let c = Config::from_toml(&text, &|v| (v == "TOKEN").then(|| "t0k".to_string())).unwrap();
    assert_eq!(c.routes[0].guardrails, vec![1, 0]);
    assert!(c.guardrails[0].input && c.guardrails[0].output);
    let GuardrailKind::Http(h) = &c.guardrails[1].kind else {
        panic!("not http")
    };
    assert!(c.guardrails[1].input && !c.guardrails[1].output);
    assert_eq!(h.timeout, std::time::Duration::from_millis(200));
    assert_eq!(h.on_error, OnError::Allow);
    assert_eq!(h.headers[0].1, "Bearer t0k");
    // The credential is never in the redacted view.
    let shown = c.redacted().to_string();
    assert!(!shown.contains("t0k"), "{shown}");
    assert!(
        shown.contains("\"guardrails\":[\"policy\",\"pii\"]"),
        "{shown}"
    );
    // A config without guardrails keeps its fingerprint's shape: no `guardrail` key.
    let plain = Config::from_toml(&with("", ""), &|_| None).unwrap();
    assert!(plain.redacted().get("guardrail").is_none());
}

#[test]
fn mistakes_name_the_entry_and_the_field() {
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "[[guardrail]]\nname = \"x\"\nkind = \"builtin\"\ndetectors = { cc = \"redact\" }\n",
            "",
            "guardrail[0].detectors",
            "no detector `cc`",
        ),
        (
            "[[guardrail]]\nname = \"x\"\nkind = \"regex\"\npatterns = [\"(\"]\n",
            "",
            "guardrail[0].patterns",
            "not a valid regular expression",
        ),
        (
            "[[guardrail]]\nname = \"x\"\nkind = \"regex\"\npatterns = [\"secret.+\"]\n",
            "",
            "guardrail[0].patterns",
            "no longest match",
        ),
        (
            "[[guardrail]]\nname = \"x\"\nkind = \"regex\"\nstage = \"input\"\npatterns = [\"a*\"]\n",
            "",
            "guardrail[0].patterns",
            "empty text",
        ),
        (
            "[[guardrail]]\nname = \"x\"\nkind = \"http\"\nurl = \"https://policy/check\"\n",
            "",
            "guardrail[0].url",
            "plain http://",
        ),
        (
            "[[guardrail]]\nname = \"x\"\nkind = \"http\"\nurl = \"http://p/c\"\npatterns = [\"a\"]\n",
            "",
            "guardrail[0].patterns",
            "not a setting of kind = \"http\"",
        ),
        (
            "[[guardrail]]\nname = \"x\"\nkind = \"builtin\"\n",
            "",
            "guardrail[0].detectors",
            "checks nothing",
        ),
        (
            "[[guardrail]]\nname = \"x\"\nkind = \"builtin\"\ndetectors = { card = \"redact\" }\nwindow = 8\n",
            "",
            "guardrail[0].window",
            "16 to",
        ),
        (RULES, "guardrails = [\"pi\"]", "route[0].guardrails", "no [[guardrail]] named `pi`"),
    ];
    for (guardrails, route, path, reason) in cases {
        let e = err(&with(guardrails, route));
        assert_eq!(e.path, *path, "{e}");
        assert!(e.reason.contains(reason), "{e}");
        if path.starts_with("guardrail[") {
            assert!(e.reason.contains("guardrail `x`"), "{e}");
        }
    }
    let dup = err(&with(&format!("{RULES}{RULES}"), ""));
    assert_eq!(dup.path, "guardrail[1].name");
}
