//! `GET /admin/keys`, `GET /admin/keys/{id}` and the state store's metrics.

use crate::support::*;
use crate::{bearer, gateway, hash, post, CHAT};

#[tokio::test]
async fn admin_lists_keys_shows_one_and_never_a_hash() {
    let mock = mock("").await;
    let routes = "[[route]]\nname = \"chat\"\nmodels = [\"*\"]\nupstream = \"mock\"\n";
    let rest = format!(
        r#"
[[key]]
id = "zeta"
hash = "{}"
owner = "zoe"
requests = {{ limit = 100, per = "1m" }}
concurrency = 4

[[key.model_limits]]
models = ["gpt-4o"]
tokens = {{ limit = 50000, per = "1h" }}

[[key]]
id = "alpha"
hash = "{}"
revoked = true
"#,
        hash("sk-alpha"),
        hash("sk-revoked")
    );
    let gw = gateway(&mock, routes, &rest).await;
    let r = h1(
        gw.addr(),
        post("/v1/chat/completions", bearer("sk-alpha"), CHAT),
    )
    .await;
    assert_eq!(r.status, 200);
    let r = h1(gw.admin_addr(), request("GET", "/admin/keys", "", "")).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["keys"][0]["id"], "alpha");
    assert_eq!(v["keys"][0]["revoked"], true);
    assert_eq!(v["keys"][1]["id"], "zeta");
    assert_eq!(v["keys"][1]["owner"], "zoe");
    let r = h1(gw.admin_addr(), request("GET", "/admin/keys/zeta", "", "")).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["limits"]["requests"]["limit"], 100);
    assert_eq!(v["limits"]["requests"]["per"], "1m");
    assert_eq!(v["usage"]["requests"]["remaining"], 99);
    assert_eq!(v["usage"]["concurrency"]["in_flight"], 0);
    assert_eq!(v["model_limits"][0]["models"][0], "gpt-4o");
    let used = v["model_limits"][0]["usage"]["tokens"]["used"]
        .as_u64()
        .unwrap();
    assert!(used > 0, "the request's tokens on gpt-4o: {v}");
    assert_eq!(v["usage"]["requests"]["used"], 1);
    assert_eq!(v["state"], "memory");
    let text = String::from_utf8_lossy(&r.body);
    assert!(
        !text.contains(&hash("sk-alpha")[7..]) && !text.contains("sha256"),
        "{text}"
    );
    let r = h1(
        gw.admin_addr(),
        request("GET", "/admin/keys/nobody", "", ""),
    )
    .await;
    assert_eq!(r.status, 404);
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains("sluice_state_mode{mode=\"memory\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("sluice_state_mode{mode=\"shared\"} 0"));
    assert!(metrics.contains("sluice_state_round_trips_total 0"));
}
