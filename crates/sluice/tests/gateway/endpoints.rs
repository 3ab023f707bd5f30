//! The endpoints SDKs and tools call besides completions: model lists, Anthropic's
//! count_tokens, paths without `/v1`, and clear errors for wrongly typed fields.

use sluice::Server;
use sluice_gateway::config::Config;

use crate::support::*;

#[tokio::test]
async fn models_lists_literal_routes_and_what_glob_routes_reach() {
    let m = mock("").await;
    // The mock reports its own models; the glob route lists those it matches.
    let direct = h1(m.addr(), request("GET", "/v1/models", "", ""))
        .await
        .json();
    let reported: Vec<String> = direct["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect();
    assert!(!reported.is_empty());
    let glob = format!("{}*", &reported[0][..3]);
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n[[upstream]]\nname = \"m\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\
         [[route]]\nmodels = [\"alias-1\", \"{glob}\"]\nupstream = \"m\"\n\
         [[route]]\nmodels = [\"alias-1\", \"alias-2\"]\nupstream = \"m\"\n",
        m.url()
    );
    let gw = Server::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let v = h1(gw.addr(), request("GET", "/v1/models", "", ""))
        .await
        .json();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids.iter().filter(|i| **i == "alias-1").count(),
        1,
        "no duplicates: {ids:?}"
    );
    assert!(ids.contains(&"alias-2"));
    assert!(
        ids.contains(&reported[0].as_str()),
        "{ids:?} vs {reported:?}"
    );
    assert!(
        ids.iter()
            .all(|i| i.starts_with(&glob[..3]) || i.starts_with("alias-")),
        "only what the globs match: {ids:?}"
    );
    // One model, in OpenAI's shape; an unrouted one is a 404 in OpenAI's error format.
    let one = h1(gw.addr(), request("GET", "/v1/models/alias-2", "", "")).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["id"], "alias-2");
    assert_eq!(one.json()["object"], "model");
    let none = h1(gw.addr(), request("GET", "/v1/models/nope", "", "")).await;
    assert_eq!(none.status, 404);
    assert_eq!(none.json()["error"]["code"], "model_not_found");
}

#[tokio::test]
async fn count_tokens_and_paths_without_v1_are_routed() {
    let m = mock("").await;
    let gw = crate::gateway(&m, crate::Setup::default()).await;
    let body = r#"{"model":"claude","messages":[{"role":"user","content":"how many tokens"}]}"#;
    let r = h1(
        gw.addr(),
        request("POST", "/v1/messages/count_tokens", "", body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["input_tokens"].as_u64().unwrap() > 0);
    // A base URL that already ends in /v1: the SDK sends /chat/completions.
    let r = h1(
        gw.addr(),
        request("POST", "/chat/completions", "", r#"{"model":"gpt-4o"}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["object"], "chat.completion");
}

#[tokio::test]
async fn a_wrongly_typed_field_is_named() {
    let m = mock("").await;
    let gw = crate::gateway(&m, crate::Setup::default()).await;
    for (body, msg) in [
        (r#"{"model": 5}"#, "`model` must be a string, not a number"),
        (
            r#"{"model": "m", "stream": "yes"}"#,
            "`stream` must be a boolean, not a string",
        ),
        (r#"[1, 2]"#, "the body must be a JSON object"),
    ] {
        let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", body)).await;
        assert_eq!(r.status, 400);
        let err = &r.json()["error"];
        assert!(err["message"].as_str().unwrap().contains(msg), "{err}");
    }
}
