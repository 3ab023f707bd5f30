//! Keys, limits, prices and `[state]` as a user writes them: defaults, and the exact message for
//! each kind of mistake (line, field path, fix).

use std::time::Duration;

use super::*;

fn env(k: &str) -> Option<String> {
    (k == "KEY").then(|| "sk-up".to_string())
}

/// sha256 of "test".
const HASH: &str = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

const BASE: &str = r#"
[[upstream]]
name = "local"
base_url = "http://127.0.0.1:9090/v1"
auth = { type = "bearer", env = "KEY" }

[[route]]
name = "chat"
models = ["*"]
upstream = "local"
"#;

fn err(text: &str) -> String {
    Config::from_toml(text, &env).unwrap_err().to_string()
}

#[test]
fn keys_limits_prices_and_state_get_their_values_and_defaults() {
    let text = format!(
        r#"{BASE}limits = {{ concurrency = 64 }}

[[key]]
id = "team-a"
hash = "{HASH}"
team = "search"
routes = ["chat"]
requests = {{ limit = 600, per = "1m" }}
budget = {{ limit = 20.5, per = "1d" }}

[[key.model_limits]]
models = ["gpt-4o"]
tokens = {{ limit = 1000, per = "1h" }}

[[price]]
models = ["gpt-4o*"]
input = 2.5
output = 10.0
"#
    );
    let c = Config::from_toml(&text, &env).unwrap();
    let k = &c.keys[0];
    assert_eq!(k.id, "team-a");
    assert_eq!(k.hash[0], 0x9f);
    assert_eq!(k.routes, Some(vec![0]));
    assert_eq!(
        k.limits.requests,
        Some(RateLimit {
            limit: 600,
            per: Duration::from_secs(60),
            cut_streams: false,
        })
    );
    assert_eq!(k.budget.unwrap().limit_micros, 20_500_000);
    assert_eq!(k.model_limits[0].limits.tokens.unwrap().limit, 1000);
    assert_eq!(c.routes[0].keys, KeyMode::Required, "keys exist: required");
    assert_eq!(c.routes[0].limits.concurrency, Some(64));
    assert_eq!(
        c.prices[0].cached_input, 2.5,
        "cached input defaults to input"
    );
    assert!(matches!(
        c.state.store.backend,
        sluice_state::BackendConfig::Memory
    ));
    assert_eq!(c.state.replay_ttl, Duration::from_secs(86_400));
    // Without keys, routes check none.
    let c = Config::from_toml(BASE, &env).unwrap();
    assert_eq!(c.routes[0].keys, KeyMode::Off);
    assert!(c.keys.is_empty());
    let redis = format!(
        "[state]\nredis = \"redis://:pw@10.0.0.5:6379/0\"\non_failure = \"fail_closed\"\ncall_timeout = \"20ms\"\n[state.idempotency]\nreplay_ttl = \"1h\"\nmax_response_bytes = \"64KiB\"\n{BASE}"
    );
    let c = Config::from_toml(&redis, &env).unwrap();
    let sluice_state::BackendConfig::Redis(r) = &c.state.store.backend else {
        panic!("redis backend");
    };
    assert_eq!(r.on_failure, sluice_state::FailureMode::FailClosed);
    assert_eq!(r.call_timeout, Duration::from_millis(20));
    assert_eq!(c.state.store.idempotency.max_response_bytes, 64 << 10);
    assert_eq!(c.state.replay_ttl, Duration::from_secs(3600));
    assert!(
        !format!("{c:?}").contains(":pw@"),
        "the URL's password is not shown"
    );
}

#[test]
fn broken_keys_limits_and_state_get_the_field_the_line_and_the_fix() {
    let key = |lines: &str| format!("{BASE}\n[[key]]\nid = \"a\"\nhash = \"{HASH}\"\n{lines}\n");
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{BASE}\n[[key]]\nid = \"a\"\nhash = \"abc\"\n"),
            "line 14: key[0].hash: must be the SHA-256 of the key as 64 hex digits, optionally \
             after `sha256:`; compute it with `printf %s \"$KEY\" | sha256sum` (the key itself \
             never goes in the config)",
        ),
        (
            format!("{BASE}\n[[key]]\nid = \"a b\"\nhash = \"{HASH}\"\n"),
            "line 13: key[0].id: must be 1 to 64 letters, digits, `-`, `_` or `.` (it names the \
             key in logs, metrics and /admin/keys/{id})",
        ),
        (
            key("routes = [\"chta\"]"),
            "line 15: key[0].routes[0]: no route named `chta` (routes are named by `name`, else \
             their first model glob); did you mean `chat`?",
        ),
        (
            key("requests = { limit = 0, per = \"1m\" }"),
            "line 15: key[0].requests.limit: must be 1 to 2^50 (remove the limit to allow any \
             number)",
        ),
        (
            key("tokens = { limit = 10, per = \"0s\" }"),
            "line 15: key[0].tokens.per: must be at least 1ms",
        ),
        (
            key("requests = { limit = 10, every = \"1m\" }"),
            "line 15: key[0].requests.every: unknown field; expected one of `limit`, `per`, \
             `cut_streams`",
        ),
        (
            key("concurrency = 0"),
            "line 15: key[0].concurrency: must be at least 1 (remove it to allow any number in \
             flight)",
        ),
        (
            key("budget = { limit = -1.0, per = \"1d\" }"),
            "line 15: key[0].budget.limit: must be a positive amount of currency (at least \
             0.000001), e.g. 20.0",
        ),
        (
            key("[[key.model_limits]]\nmodels = [\"gpt-4o\"]"),
            "line 15: key[0].model_limits[0]: sets no limit; give `requests`, `tokens` or \
             `concurrency`, or remove it",
        ),
        (
            key("reqests = { limit = 1, per = \"1s\" }"),
            "line 15: key[0].reqests: unknown field; did you mean `requests`?",
        ),
        (
            format!("{}\n[[key]]\nid = \"a\"\nhash = \"{}\"\n", key(""), HASH.replace("9f", "8f")),
            "line 18: key[1].id: `a` is already the id of another key",
        ),
        (
            format!("{}\n[[key]]\nid = \"b\"\nhash = \"{HASH}\"\n", key("")),
            "line 18: key[1].id: the same hash as key `a`: two ids cannot share one secret",
        ),
        (
            BASE.replace("upstream = \"local\"\n", "upstream = \"local\"\nkeys = \"requierd\"\n"),
            "line 11: route[0].keys: `requierd` is not one of `required`, `optional`, `off`; \
             did you mean `required`?",
        ),
        (
            BASE.replace(
                "upstream = \"local\"\n",
                "upstream = \"local\"\nlimits = { requests = { limit = 5 } }\n",
            ),
            "line 11: route[0].limits.requests.per: is required but missing",
        ),
        (
            format!("{BASE}\n[[price]]\nmodels = [\"x\"]\ninput = -2.0\noutput = 1.0\n"),
            "line 14: price[0].input: must be a price per million tokens from 0 up, e.g. 2.5",
        ),
        (
            format!("[state]\nprefix = \"x\"\n{BASE}"),
            "line 2: state.prefix: only applies with `redis = \"redis://...\"`; set it or remove \
             this",
        ),
        (
            format!("[state]\nredis = \"http://h:1\"\n{BASE}"),
            "line 2: state.redis: not a valid redis:// URL (redis://[user:password@]host:port[/db])",
        ),
        (
            format!("[state]\nredis = \"redis://h:1\"\non_failure = \"fail_opn\"\n{BASE}"),
            "line 3: state.on_failure: `fail_opn` is not one of `fail_open`, `fail_closed`; did \
             you mean `fail_open`?",
        ),
        (
            format!("[state]\nredis = \"redis://h:1\"\nlease_ttl = \"10ms\"\n{BASE}"),
            "line 3: state.lease_ttl: must be at least 30ms",
        ),
        (
            format!("[state.idempotency]\nreplay_ttl = \"0s\"\n{BASE}"),
            "line 2: state.idempotency.replay_ttl: must be at least 1ms",
        ),
        (
            format!("[keys]\nfile = \"/nonexistent/keys.toml\"\n{BASE}"),
            "line 2: keys.file: cannot read the key file /nonexistent/keys.toml: No such file \
             or directory (os error 2)",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(err(&text), want, "config:\n{text}");
    }
}

#[test]
fn a_key_file_error_names_the_file_its_line_and_field() {
    let dir = std::env::temp_dir().join(format!("sluice-keyfile-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys.toml");
    std::fs::write(
        &file,
        format!("[[key]]\nid = \"a\"\nhash = \"{HASH}\"\n\n[[key]]\nid = \"b\"\nhash = \"{HASH}\"\ncolor = 1\n"),
    )
    .unwrap();
    let text = format!("[keys]\nfile = \"{}\"\n{BASE}", file.display());
    assert_eq!(
        err(&text),
        format!(
            "line 2: keys.file: {}: line 8: key[1].color: unknown field; expected one of `id`, \
             `hash`, `owner`, `team`, `revoked`, `routes`, `models`, `requests`, `tokens`, \
             `concurrency`, `budget`, `model_limits`, `guardrails`",
            file.display()
        )
    );
    std::fs::write(
        &file,
        format!(
            "[[key]]\nid = \"a\"\nhash = \"{HASH}\"\n\n[[key]]\nid = \"b\"\nhash = \"{HASH}\"\n"
        ),
    )
    .unwrap();
    assert_eq!(
        err(&text),
        format!(
            "line 2: keys.file: {}: key[1].id: the same hash as key `a`: two ids cannot share one \
             secret",
            file.display()
        )
    );
    std::fs::write(&file, format!("[[key]]\nid = \"a\"\nhash = \"{HASH}\"\n")).unwrap();
    let c = Config::from_toml(&text, &env).unwrap();
    assert_eq!(c.keys[0].id, "a");
    assert_eq!(c.routes[0].keys, KeyMode::Required);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn warnings_for_keyed_routes_that_cannot_work_as_written() {
    let warnings = |mode: &str| {
        let text = BASE
            .replace("auth = { type = \"bearer\", env = \"KEY\" }\n", "")
            .replace(
                "upstream = \"local\"\n",
                &format!("upstream = \"local\"\nkeys = \"{mode}\"\n"),
            );
        let checked = Config::check_toml(&text, &env, EnvMode::Required).unwrap();
        checked
            .warnings
            .iter()
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
    };
    let none = "line 10: route[0].keys: `{}` but no key is defined: add [[key]] entries or \
                `keys.file`";
    assert_eq!(warnings("optional"), [none.replace("{}", "optional")]);
    assert_eq!(
        warnings("required"),
        [
            none.replace("{}", "required"),
            "line 10: route[0].keys: upstream `local` uses passthrough auth, but client keys are \
             not forwarded on a route with virtual keys: give it `auth` with its own key"
                .to_string(),
        ]
    );
    assert!(warnings("off").is_empty());
}

#[test]
fn a_cluster_refuses_route_limits_beside_keys_unless_the_prefix_pins_one_slot() {
    let with = |state: &str| {
        format!(
            "[state]\n{state}\n{BASE}limits = {{ concurrency = 64 }}\n\n[[key]]\nid = \"a\"\nhash = \"{HASH}\"\n"
        )
    };
    let e = err(&with(
        "redis = \"redis+cluster://10.0.0.5:6379,10.0.0.6:6379\"",
    ));
    assert!(
        e.contains("state.redis") && e.contains("route `chat`"),
        "{e}"
    );
    assert!(e.contains("prefix = \"{sluice}\""), "{e}");
    // Pinned to one slot, or not a cluster: accepted.
    let pinned = with("redis = \"redis+cluster://10.0.0.5:6379\"\nprefix = \"{sluice}\"");
    assert!(Config::from_toml(&pinned, &env).is_ok());
    let single = with("redis = \"redis://10.0.0.5:6379\"");
    assert!(Config::from_toml(&single, &env).is_ok());
    // Without route limits a key's counters share a slot by construction.
    let keys_only = format!(
        "[state]\nredis = \"redis+cluster://10.0.0.5:6379\"\n{BASE}\n[[key]]\nid = \"a\"\nhash = \"{HASH}\"\nrequests = {{ limit = 5, per = \"1m\" }}\n"
    );
    assert!(Config::from_toml(&keys_only, &env).is_ok());
}

#[test]
fn teams_get_their_limits_and_budget_and_bad_ones_are_named() {
    let text = format!(
        "{BASE}\n[[team]]\nid = \"search\"\nrequests = {{ limit = 100, per = \"1m\" }}\nbudget = {{ limit = 50.0, per = \"1d\" }}\n"
    );
    let c = Config::from_toml(&text, &env).unwrap();
    assert_eq!(c.teams.len(), 1);
    assert_eq!(c.teams[0].limits.requests.unwrap().limit, 100);
    assert_eq!(c.teams[0].budget.unwrap().limit_micros, 50_000_000);
    let twice = format!("{text}\n[[team]]\nid = \"search\"\nconcurrency = 3\n");
    let e = err(&twice);
    assert!(
        e.contains("team[1].id") && e.contains("defined twice"),
        "{e}"
    );
    let empty = format!("{BASE}\n[[team]]\nid = \"search\"\n");
    assert!(err(&empty).contains("sets nothing"), "{}", err(&empty));
    let braces = format!("{BASE}\n[[team]]\nid = \"{{x}}\"\nconcurrency = 3\n");
    assert!(err(&braces).contains("team[0].id"), "{}", err(&braces));
}
