//! Budgets: spend per key from the usage and the price table; an over-budget key gets 429
//! `budget_exceeded` until its period resets; `GET /admin/keys/{id}` shows usage and spend.

use crate::support::*;
use crate::{bearer, gateway, hash, post};

#[tokio::test]
async fn spend_accumulates_from_usage_and_an_over_budget_key_gets_429() {
    let mock = mock("").await;
    let routes = "[[route]]\nname = \"chat\"\nmodels = [\"*\"]\nupstream = \"mock\"\n";
    // 1 per million input tokens, 5 per million output: micro-units per token.
    let rest = format!(
        r#"
[[price]]
models = ["gpt-4o*"]
input = 1.0
output = 5.0

[[key]]
id = "b"
hash = "{}"
team = "research"
budget = {{ limit = 0.0002, per = "1d" }}

[[key]]
id = "tracked"
hash = "{}"
"#,
        hash("sk-budget"),
        hash("sk-alpha")
    );
    let gw = gateway(&mock, routes, &rest).await;
    let body = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hello there"}]}"#;
    let mut spent = 0;
    let mut admitted = 0;
    loop {
        let r = h1(
            gw.addr(),
            post("/v1/chat/completions", bearer("sk-budget"), body),
        )
        .await;
        if r.status == 429 {
            assert_eq!(r.json()["error"]["code"], "budget_exceeded");
            let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
            assert!(
                msg.contains("budget of key `b` is spent: 0.0002 per 1day"),
                "{msg}"
            );
            let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
            assert!(retry <= 86_400, "{retry}");
            assert_eq!(r.headers["x-ratelimit-remaining-budget"], "0.00");
            break;
        }
        assert_eq!(r.status, 200);
        let u = &r.json()["usage"];
        spent +=
            u["prompt_tokens"].as_u64().unwrap() + 5 * u["completion_tokens"].as_u64().unwrap();
        admitted += 1;
        assert!(admitted < 10, "the budget never ran out ({spent} spent)");
    }
    // Admitted while the spend was below 200 micro-units: the last one may cross it.
    assert!(spent >= 200, "{spent}");
    let r = h1(gw.admin_addr(), request("GET", "/admin/keys/b", "", "")).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["spend"]["spent_micros"], spent);
    assert_eq!(v["spend"]["limit"], 0.0002);
    assert_eq!(v["spend"]["remaining"], 0.0);
    assert!(admitted >= 2, "{admitted}");
    assert_eq!(v["team"], "research");
    assert!(
        !r.body.windows(6).any(|w| w == b"sha256"),
        "no hash in admin output"
    );
    // A key without a budget has its spend tracked too, and never refused for it.
    for _ in 0..3 {
        let r = h1(
            gw.addr(),
            post("/v1/chat/completions", bearer("sk-alpha"), body),
        )
        .await;
        assert_eq!(r.status, 200);
        assert!(!r.headers.contains_key("x-ratelimit-limit-budget"));
    }
    let v = h1(
        gw.admin_addr(),
        request("GET", "/admin/keys/tracked", "", ""),
    )
    .await
    .json();
    assert!(v["spend"]["spent_micros"].as_u64().unwrap() > 0);
    assert_eq!(v["spend"]["limit"], serde_json::Value::Null);
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains(&format!(
            "sluice_key_spend_micros_total{{team=\"research\",owner=\"\"}} {spent}"
        )),
        "{metrics}"
    );
}
