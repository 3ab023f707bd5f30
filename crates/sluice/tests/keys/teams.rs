//! Teams: a `[[team]]`'s limits and budget are shared by every key that names it, checked in
//! the same admission as the key's own (one round trip to the store); a refusal names the team.

use crate::support::*;
use crate::{bearer, gateway, hash, post, CHAT};

fn keys_of_a_team(team_limits: &str) -> String {
    format!(
        r#"
[[price]]
models = ["gpt-4o*"]
input = 1.0
output = 5.0

[[team]]
id = "search"
{team_limits}

[[key]]
id = "one"
hash = "{}"
team = "search"

[[key]]
id = "two"
hash = "{}"
team = "search"

[[key]]
id = "loner"
hash = "{}"
team = "elsewhere"
"#,
        hash("sk-one"),
        hash("sk-two"),
        hash("sk-loner")
    )
}

const ROUTE: &str = "[[route]]\nname = \"chat\"\nmodels = [\"*\"]\nupstream = \"mock\"\n";

#[tokio::test]
async fn a_team_limit_counts_all_its_keys_and_names_the_team() {
    let mock = mock("").await;
    let gw = gateway(
        &mock,
        ROUTE,
        &keys_of_a_team("requests = { limit = 3, per = \"1m\" }"),
    )
    .await;
    let chat = |key| post("/v1/chat/completions", bearer(key), CHAT);
    for key in ["sk-one", "sk-two", "sk-one"] {
        assert_eq!(h1(gw.addr(), chat(key)).await.status, 200, "{key}");
    }
    // The team's three are spent, whichever key asks.
    for key in ["sk-two", "sk-one"] {
        let r = h1(gw.addr(), chat(key)).await;
        assert_eq!(r.status, 429, "{key}");
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            msg.contains("team `search`") && msg.contains("3 requests per 1m"),
            "{msg}"
        );
        assert_eq!(r.headers["x-ratelimit-remaining-requests"], "0");
    }
    // A key of a team without a `[[team]]` entry is not limited by it.
    assert_eq!(h1(gw.addr(), chat("sk-loner")).await.status, 200);
}

#[tokio::test]
async fn a_team_budget_is_spent_by_all_its_keys() {
    let mock = mock("").await;
    // Each call spends its prompt tokens + 5 × its completion tokens in micro-units; the
    // team's budget runs out after a few calls, shared by both keys.
    let gw = gateway(
        &mock,
        ROUTE,
        &keys_of_a_team("budget = { limit = 0.0002, per = \"1d\" }"),
    )
    .await;
    let chat = |key| post("/v1/chat/completions", bearer(key), CHAT);
    let mut spent = 0u64;
    let mut admitted = 0;
    for i in 0.. {
        let key = if i % 2 == 0 { "sk-one" } else { "sk-two" };
        let r = h1(gw.addr(), chat(key)).await;
        if r.status == 429 {
            assert_eq!(r.json()["error"]["code"], "budget_exceeded");
            let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
            assert!(msg.contains("team `search`"), "{msg}");
            break;
        }
        assert_eq!(r.status, 200);
        let u = &r.json()["usage"];
        spent +=
            u["prompt_tokens"].as_u64().unwrap() + 5 * u["completion_tokens"].as_u64().unwrap();
        admitted += 1;
        assert!(
            admitted < 10,
            "the team's budget never ran out ({spent} spent)"
        );
    }
    // Admitted while the team's spend was under its 200 micro-units, by both keys together.
    assert!(
        admitted >= 2 && spent >= 200,
        "{admitted} admitted, {spent} spent"
    );
}
