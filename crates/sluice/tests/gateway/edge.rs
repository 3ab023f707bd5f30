//! Issue 15, item 6: HTTP semantics at the edge. HTTP/1.1 requests without exactly one Host get
//! 400 (RFC 9112 §3.2); one header limit (`server.max_header_bytes`) holds for HTTP/1.1 and
//! HTTP/2; heads hyper cannot parse get a short body in the API's error format; forwarded
//! headers are believed only from `server.trusted_proxies`, and the gateway appends the peer.

use crate::raw::*;
use crate::support::*;
use crate::{gateway, Setup, CHAT};

#[tokio::test]
async fn http1_requests_without_exactly_one_host_get_400() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    let no_host = format!(
        "POST /v1/chat/completions HTTP/1.1\r\ncontent-length: {}\r\n\r\n{CHAT}",
        CHAT.len()
    );
    let two_hosts = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: a\r\nhost: b\r\ncontent-length: {}\r\n\r\n{CHAT}",
        CHAT.len()
    );
    let (status, _, body) = split_response(&exchange(gw.addr(), no_host.as_bytes()).await);
    assert_eq!(status, 400);
    assert!(
        body.contains("\"invalid_host\"") && body.contains("needs a Host"),
        "{body}"
    );
    let (status, _, body) = split_response(&exchange(gw.addr(), two_hosts.as_bytes()).await);
    assert_eq!(status, 400);
    assert!(
        body.contains("\"type\":\"error\""),
        "Anthropic's shape: {body}"
    );
    // HTTP/1.0 may omit it.
    let old = format!(
        "POST /v1/chat/completions HTTP/1.0\r\ncontent-length: {}\r\n\r\n{CHAT}",
        CHAT.len()
    );
    assert_eq!(
        split_response(&exchange(gw.addr(), old.as_bytes()).await).0,
        200
    );
    assert_eq!(mock.stats().snapshot().totals.requests, 1);
}

#[tokio::test]
async fn one_header_limit_for_http1_and_http2_and_malformed_heads_get_a_json_body() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    let big = "v".repeat(100 * 1024);
    let fits = "v".repeat(20 * 1024);
    // HTTP/1.1: a 100 KB header is refused with 431 and a JSON body.
    let raw = exchange(
        gw.addr(),
        &post("/v1/chat/completions", &format!("x-big: {big}\r\n"), CHAT),
    )
    .await;
    let (status, head, body) = split_response(&raw);
    assert_eq!(status, 431, "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    assert!(body.contains("\"request_header_too_large\""), "{body}");
    assert!(body.contains("max_header_bytes"), "{body}");
    let raw = exchange(
        gw.addr(),
        &post("/v1/chat/completions", &format!("x-big: {fits}\r\n"), CHAT),
    )
    .await;
    assert_eq!(split_response(&raw).0, 200, "20 KB fits the 32 KiB limit");
    // HTTP/2: the same limit.
    let send = h2_connect(gw.addr()).await;
    let mut req = request("POST", "/v1/chat/completions", "", CHAT);
    req.headers_mut().insert("x-big", big.parse().unwrap());
    match h2_send(&send, req).await {
        Ok(r) => assert_eq!(r.status(), 431),
        Err(e) => assert!(e.is_reset() || e.is_go_away(), "{e:?}"),
    }
    let send = h2_connect(gw.addr()).await;
    let mut req = request("POST", "/v1/chat/completions", "", CHAT);
    req.headers_mut().insert("x-big", fits.parse().unwrap());
    assert_eq!(h2_send(&send, req).await.unwrap().status(), 200);
    // Garbage: 400 with a body, not an empty 400.
    let (status, _, body) = split_response(&exchange(gw.addr(), b"GARBAGE GARBAGE\r\n\r\n").await);
    assert_eq!(status, 400);
    assert!(body.contains("\"malformed_request\""), "{body}");
    assert_eq!(
        metric(
            &gw,
            "sluice_client_requests_refused_total{reason=\"malformed_head\"}"
        ),
        2.0
    );
}

fn upstream_header(mock: &sluice_mock::MockServer, i: usize, name: &str) -> Option<String> {
    mock.stats().snapshot().requests[i]
        .headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

#[tokio::test]
async fn forwarded_headers_are_believed_only_from_trusted_proxies() {
    let mock = mock("").await;
    let forged = "x-forwarded-for: 6.6.6.6\r\nx-real-ip: 6.6.6.6\r\nforwarded: for=6.6.6.6\r\n";
    // By default the peer is the client: the forged chain is replaced.
    let gw = gateway(&mock, Setup::default()).await;
    assert_eq!(
        split_response(&exchange(gw.addr(), &post("/v1/chat/completions", forged, CHAT)).await).0,
        200
    );
    assert_eq!(
        upstream_header(&mock, 0, "x-forwarded-for").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(upstream_header(&mock, 0, "x-real-ip"), None);
    assert_eq!(upstream_header(&mock, 0, "forwarded"), None);
    // Behind a trusted proxy the chain is kept and the peer appended.
    let gw = gateway(
        &mock,
        Setup {
            server: "trusted_proxies = [\"127.0.0.0/8\"]",
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        split_response(&exchange(gw.addr(), &post("/v1/chat/completions", forged, CHAT)).await).0,
        200
    );
    assert_eq!(
        upstream_header(&mock, 1, "x-forwarded-for").as_deref(),
        Some("6.6.6.6, 127.0.0.1")
    );
    assert_eq!(
        upstream_header(&mock, 1, "x-real-ip").as_deref(),
        Some("6.6.6.6")
    );
}

/// Plaintext connections are told apart (HTTP/1.1 or h2c prior knowledge) by their first
/// bytes before hyper starts; a head split after "P" or "PR" is left to hyper's own
/// detection. Both protocols still work when the first bytes come alone.
#[tokio::test]
async fn heads_split_after_their_first_bytes_are_served_on_both_protocols() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;

    // HTTP/1.1: "P", a pause, then the rest of the POST.
    let req = post("/v1/chat/completions", "", CHAT);
    let mut s = TcpStream::connect(gw.addr()).await.unwrap();
    s.write_all(&req[..1]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    s.write_all(&req[1..]).await.unwrap();
    let out = read_to_close(&mut s, std::time::Duration::from_secs(5))
        .await
        .expect("the gateway answers and closes");
    let (status, _, body) = split_response(&String::from_utf8_lossy(&out));
    assert_eq!(status, 200, "{body}");

    // h2c prior knowledge: "PR", a pause, the rest of the preface and an empty SETTINGS; the
    // gateway answers with its own SETTINGS frame (type 4 on stream 0).
    let mut s = TcpStream::connect(gw.addr()).await.unwrap();
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    s.write_all(&preface[..2]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    s.write_all(&preface[2..]).await.unwrap();
    s.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
    let mut head = [0u8; 9];
    tokio::time::timeout(std::time::Duration::from_secs(5), s.read_exact(&mut head))
        .await
        .expect("a frame within 5 s")
        .unwrap();
    assert_eq!(head[3], 4, "the first frame is SETTINGS: {head:?}");
    assert_eq!(&head[5..9], &[0, 0, 0, 0], "on stream 0");
}
