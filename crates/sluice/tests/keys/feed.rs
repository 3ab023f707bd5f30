//! The dashboard's feed counts every end reason: refusals for a key (401), a limit (429) and a
//! failed state store (503) show in its end-reason table and in its error total.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;

use crate::support::*;
use crate::{bearer, config, hash, post, CHAT};

/// The feed's first `tick` frame.
async fn tick(admin: std::net::SocketAddr) -> serde_json::Value {
    let mut send = h1_connect(admin).await;
    let get = Request::get("http://gw/admin/feed")
        .body(Bytes::new())
        .unwrap();
    let resp = h1_send(&mut send, get).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut buf = String::new();
    let marker = "event: tick\ndata: ";
    loop {
        if let Some(i) = buf.find(marker) {
            if let Some(end) = buf[i + marker.len()..].find("\n\n") {
                let data = &buf[i + marker.len()..i + marker.len() + end];
                return serde_json::from_str(data).unwrap();
            }
        }
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("a feed frame within 5 s")
            .expect("the feed ended")
            .unwrap();
        if let Ok(d) = frame.into_data() {
            buf.push_str(std::str::from_utf8(&d).unwrap());
        }
    }
}

#[tokio::test]
async fn refusals_for_keys_limits_and_the_state_store_count_as_errors_on_the_dashboard() {
    let mock = mock("").await;
    let route = "[[route]]\nname = \"chat\"\nmodels = [\"*\"]\nupstream = \"mock\"\n";
    let key = format!(
        "[[key]]\nid = \"k\"\nhash = \"{}\"\nrequests = {{ limit = 1, per = \"1m\" }}\n",
        hash("sk-k")
    );
    let gw = sluice::Server::start(config(&mock, route, &key))
        .await
        .unwrap();
    let chat = |key| post("/v1/chat/completions", key, CHAT);
    assert_eq!(h1(gw.addr(), chat(None)).await.status, 401);
    assert_eq!(h1(gw.addr(), chat(bearer("sk-k"))).await.status, 200);
    assert_eq!(h1(gw.addr(), chat(bearer("sk-k"))).await.status, 429);
    let frame = tick(gw.admin_addr()).await;
    let reasons = &frame["totals"]["end_reasons"];
    assert_eq!(reasons["unauthorized"], 1, "{frame}");
    assert_eq!(reasons["limited"], 1, "{frame}");
    assert_eq!(reasons["completed"], 1, "{frame}");
    assert_eq!(frame["totals"]["errors"], 2, "{frame}");

    // A store that cannot be reached, with `fail_closed`: every keyed request is a 503.
    let dead = format!(
        "{key}\n[state]\nredis = \"redis://127.0.0.1:1/0\"\non_failure = \"fail_closed\"\ncall_timeout = \"100ms\"\n"
    );
    let gw = sluice::Server::start(config(&mock, route, &dead))
        .await
        .unwrap();
    let r = h1(gw.addr(), chat(bearer("sk-k"))).await;
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    let frame = tick(gw.admin_addr()).await;
    assert_eq!(
        frame["totals"]["end_reasons"]["state_unavailable"], 1,
        "{frame}"
    );
    assert_eq!(frame["totals"]["errors"], 1, "{frame}");
}
