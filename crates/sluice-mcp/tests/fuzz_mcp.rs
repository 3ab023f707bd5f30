//! Runs the MCP fuzz target's property (`fuzz/fuzz_targets/mcp.rs`, in `fuzz_check`) over
//! deterministic pseudo-random inputs, so `cargo test` exercises it without cargo-fuzz:
//! JSON-RPC framing, the 2026-07-28 envelope checks and session ids (forged, random, and the
//! minted one altered) never panic, and no id but the minted one is accepted. Then the whole
//! gateway, in process, takes mutated requests (bodies, routing headers, session ids) against a
//! mock server and always answers, with a JSON-RPC error body when it refuses.
//! `SLUICE_FUZZ_SCALE=20` runs twenty times as many cases.

mod fuzz_check;
mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use support::mock::{MockEra, MockMcp};
use support::{config, GatewayServer};

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn scale() -> usize {
    std::env::var("SLUICE_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

const SEEDS: &[&str] = &[
    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
    r#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{"cursor":"x"}}"#,
    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"hi"},"_meta":{"progressToken":5}}}"#,
    r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"alpha__slow","arguments":{"steps":2,"delay_ms":1},"_meta":{"progressToken":"t"}}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#,
    r#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
    r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"beta__add","arguments":{"a":1,"b":2}}}"#,
    r#"{"jsonrpc":"2.0","id":6,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#,
    r#"{"jsonrpc":"2.0","id":7,"method":"prompts/get","params":{"name":"alpha__greet"}}"#,
    r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
];

const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "null",
    "true",
    "1e999",
    "-0",
    "\"id\"",
    "\"method\"",
    "\"params\"",
    "\"jsonrpc\"",
    "\"2.0\"",
    "\"_meta\"",
    "__",
    "\\u0000",
    "\\ud800",
    "é",
    "\u{202e}",
    "18446744073709551616",
    "-32602",
    "\"result\"",
    "\"error\"",
    "{\"a\":",
    "[[[[",
];

fn mutate(rng: &mut Rng, seed: &str) -> Vec<u8> {
    let mut s = seed.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(s.len() + 1);
        match rng.below(4) {
            0 if !s.is_empty() => {
                let end = (at + 1 + rng.below(12)).min(s.len());
                s.drain(at.min(s.len())..end);
            }
            1 => {
                let p = PIECES[rng.below(PIECES.len())].as_bytes();
                s.splice(at..at, p.iter().copied());
            }
            2 if !s.is_empty() => {
                let i = rng.below(s.len());
                s[i] ^= 1 << rng.below(8);
            }
            _ => {
                let n = rng.below(8);
                let b = rng.bytes(n);
                s.splice(at..at, b);
            }
        }
    }
    s
}

#[test]
fn framing_envelopes_and_session_ids_never_panic_and_forgeries_fail() {
    let mut rng = Rng(0x6d63_705f_6675_7a7a);
    let mut parsed = 0;
    for i in 0..4000 * scale() {
        let seed = SEEDS[i % SEEDS.len()];
        // Framing: mutated seeds and raw bytes.
        let mut input = vec![0u8];
        input.extend(if i % 5 == 0 {
            let n = rng.below(64);
            rng.bytes(n)
        } else {
            mutate(&mut rng, seed)
        });
        if sluice_mcp::jsonrpc::parse(&input[1..]).is_ok() {
            parsed += 1;
        }
        fuzz_check::check(&input);
        // Session ids from nothing: random bytes, random base64url text.
        let mut input = vec![1u8];
        if i % 2 == 0 {
            let n = rng.below(400);
            input.extend(rng.bytes(n));
        } else {
            let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            let n = rng.below(fuzz_check::minted().len() + 8);
            input.extend((0..n).map(|_| alphabet[rng.below(64)]));
        }
        fuzz_check::check(&input);
        // The minted id, altered.
        let mut input = vec![2u8];
        let n = 1 + rng.below(6);
        input.extend(rng.bytes(n));
        fuzz_check::check(&input);
        // The 2026-07-28 envelope and routing headers.
        let mut input = vec![3u8];
        let methods = [
            "tools/call",
            "tools/list",
            "prompts/get",
            "resources/read",
            "x",
        ];
        let m = methods[rng.below(methods.len())];
        input.extend_from_slice(m.as_bytes());
        input.push(0);
        input.extend_from_slice(if rng.below(2) == 0 {
            m.as_bytes()
        } else {
            b"tools/call"
        });
        input.push(0);
        input.extend(mutate(&mut rng, "alpha__echo"));
        input.push(0);
        input.extend_from_slice(if rng.below(3) == 0 {
            b"2025-11-25"
        } else {
            b"2026-07-28"
        });
        input.push(0);
        let params = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"alpha__echo","uri":"x://y"}"#;
        input.extend(mutate(&mut rng, params));
        fuzz_check::check(&input);
    }
    // The mutations keep a share of valid messages, so the accepted path is exercised too.
    assert!(parsed > 300, "only {parsed} mutated bodies parsed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_answers_every_mutated_request() {
    let (a, b) = (
        MockMcp::start("alpha", MockEra::Both).await,
        MockMcp::start("beta", MockEra::HandshakeOnly).await,
    );
    let cfg = config(&format!(
        "[[mcp.server]]\nname = \"alpha\"\nurl = \"{}\"\n\n[[mcp.server]]\nname = \"beta\"\nurl = \"{}\"\n\
         [[mcp.grant]]\nkeys = [\"*\"]\nserver = \"*\"\ntools = [\"echo\", \"add\", \"slow\"]\n",
        a.url(),
        b.url()
    ));
    let gw = GatewayServer::start(&cfg).await;
    let gateway = gw.gateway.clone();
    // A real session to mutate.
    let init = http::Request::post("/mcp")
        .body(Full::new(Bytes::from_static(SEEDS[0].as_bytes())))
        .unwrap();
    let resp = gateway.handle(init, sluice_mcp::Caller::default()).await;
    let sid = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();

    let mut rng = Rng(0x9a7e_4a11_0000_0001);
    let versions = [
        "",
        "2025-06-18",
        "2025-11-25",
        "2026-07-28",
        "2099-01-01",
        "garbage",
    ];
    for i in 0..2000 * scale() {
        let body = if i % 7 == 0 {
            SEEDS[i % SEEDS.len()].as_bytes().to_vec()
        } else {
            mutate(&mut rng, SEEDS[i % SEEDS.len()])
        };
        let mut req = http::Request::builder()
            .method(["POST", "POST", "POST", "GET", "DELETE"][rng.below(5)])
            .uri("/mcp")
            .header(
                "accept",
                ["application/json, text/event-stream", "application/json"][rng.below(2)],
            );
        let v = versions[rng.below(versions.len())];
        if !v.is_empty() {
            req = req.header("mcp-protocol-version", v);
        }
        match rng.below(3) {
            0 => req = req.header("mcp-session-id", sid.as_str()),
            1 => {
                let altered = String::from_utf8_lossy(&mutate(&mut rng, &sid)).into_owned();
                if let Ok(h) = http::HeaderValue::from_str(&altered) {
                    req = req.header("mcp-session-id", h);
                }
            }
            _ => {}
        }
        if rng.below(2) == 0 {
            req = req.header(
                "mcp-method",
                ["tools/call", "tools/list", "server/discover"][rng.below(3)],
            );
            req = req.header(
                "mcp-name",
                ["alpha__echo", "beta__add", "=?base64?x?="][rng.below(3)],
            );
        }
        let req = req.body(Full::new(Bytes::from(body))).unwrap();
        let get = req.method() == http::Method::GET;
        let caller = sluice_mcp::Caller {
            key_id: [None, Some("k".to_string())][rng.below(2)].clone(),
            authorization: None,
            traceparent: None,
        };
        let resp = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            gateway.handle(req, caller),
        )
        .await
        .expect("answered within 10 s");
        let status = resp.status().as_u16();
        let json = resp
            .headers()
            .get("content-type")
            .is_some_and(|v| v == "application/json");
        if get && status == 200 {
            // The merged server stream of a valid session: open until the client leaves.
            continue;
        }
        let body = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            resp.into_body().collect(),
        )
        .await
        .expect("body within 10 s")
        .unwrap()
        .to_bytes();
        assert!(
            [200, 202, 400, 404, 405, 413, 429].contains(&status),
            "status {status}"
        );
        if json {
            let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON bodies are JSON");
            assert_eq!(v["jsonrpc"], "2.0");
            if status >= 400 {
                assert!(v["error"]["code"].is_i64(), "{v}");
            }
        }
    }
}
