//! The ledger over real sockets and a real SQLite file: every model call that reached
//! admission is on the books exactly once (a call, a stream, a refusal, a failure), with the
//! tokens the upstream reported and their cost to the micro-dollar.

use crate::support::*;
use crate::{gateway, Setup, CHAT, STREAM};

/// A ledger row, the columns the test reads.
#[derive(Debug)]
struct Row {
    request_id: String,
    status: i64,
    end_reason: String,
    stream: bool,
    input: i64,
    output: i64,
    cost: Option<i64>,
    price_entry: Option<String>,
    client_api: String,
    served_model: Option<String>,
    upstream: Option<String>,
    provider: Option<String>,
}

fn rows(db: &std::path::Path) -> Vec<Row> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut q = conn
        .prepare(
            "SELECT request_id, status, end_reason, stream, input_tokens, output_tokens, \
             cost_micros, price_entry, client_api, served_model, upstream, provider \
             FROM sluice_requests ORDER BY ts_us",
        )
        .unwrap();
    q.query_map([], |r| {
        Ok(Row {
            request_id: r.get(0)?,
            status: r.get(1)?,
            end_reason: r.get(2)?,
            stream: r.get(3)?,
            input: r.get(4)?,
            output: r.get(5)?,
            cost: r.get(6)?,
            price_entry: r.get(7)?,
            client_api: r.get(8)?,
            served_model: r.get(9)?,
            upstream: r.get(10)?,
            provider: r.get(11)?,
        })
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// The `books` of the first feed frame that has them.
async fn feed_books(admin: std::net::SocketAddr) -> serde_json::Value {
    use http_body_util::BodyExt;
    let mut send = h1_connect(admin).await;
    let resp = h1_send(&mut send, request("GET", "/admin/feed", "", "")).await;
    let mut body = resp.into_body();
    let mut buf = String::new();
    let marker = "event: tick\ndata: ";
    loop {
        while let Some(i) = buf.find(marker) {
            let rest = &buf[i + marker.len()..];
            let Some(end) = rest.find("\n\n") else { break };
            let frame: serde_json::Value = serde_json::from_str(&rest[..end]).unwrap();
            buf.drain(..i + marker.len() + end);
            if !frame["books"].is_null() {
                return frame["books"].clone();
            }
        }
        let frame = tokio::time::timeout(std::time::Duration::from_secs(5), body.frame())
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
async fn every_model_call_is_on_the_books_once_with_its_tokens_and_cost() {
    let dir = std::env::temp_dir().join(format!("sluice-ledger-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("ledger.db");
    let _ = std::fs::remove_file(&db);
    let mock = mock("").await;
    let server = format!(
        "[ledger]\nflush_interval = \"100ms\"\nsink = {{ kind = \"sqlite\", path = \"{}\" }}",
        db.display()
    );
    let gw = gateway(
        &mock,
        Setup {
            server: &server,
            ..Setup::default()
        },
    )
    .await;
    let addr = gw.addr();
    let ok = h1(addr, request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(ok.status, 200);
    let streamed = h1(addr, request("POST", "/v1/chat/completions", "", STREAM)).await;
    assert_eq!(streamed.status, 200);
    let failed = h1(
        addr,
        request(
            "POST",
            "/v1/chat/completions",
            "fail_first=1, fail_with=400",
            CHAT,
        ),
    )
    .await;
    assert_eq!(failed.status, 400);
    let unknown = h1(
        addr,
        request(
            "POST",
            "/v1/chat/completions",
            "",
            r#"{"model":"gpt-4o","messages":"#,
        ),
    )
    .await;
    assert_eq!(unknown.status, 400);
    // Not model calls: not on the books.
    assert_eq!(
        h1(addr, request("GET", "/healthz", "", "")).await.status,
        200
    );
    assert_eq!(
        h1(addr, request("GET", "/v1/models", "", "")).await.status,
        200
    );
    let ids: Vec<String> = [&ok, &streamed, &failed, &unknown]
        .iter()
        .map(|r| r.headers["x-request-id"].to_str().unwrap().to_string())
        .collect();
    let metrics = gw.telemetry().encode();
    assert!(
        metrics.contains("sluice_ledger_records_total{outcome=\"dropped_full\"} 0"),
        "{metrics}"
    );
    // `/admin/usage` once the writer has flushed (every 100 ms here): its totals are the
    // records' own, summed by SQL.
    let admin = gw.admin_addr();
    let usage = loop {
        let r = h1(admin, request("GET", "/admin/usage?group_by=route", "", "")).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        if r.json()["totals"]["requests"] == 4 {
            break r.json();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    // The dashboard's feed shows the books of the last hours, from the same queries.
    let books = feed_books(admin).await;
    let models = books["model"].as_array().unwrap();
    assert_eq!(models[0]["group"], "gpt-4o", "{books}");
    assert_eq!(models[0]["requests"], 3, "{books}");
    let csv = h1(admin, request("GET", "/admin/usage?format=csv", "", "")).await;
    assert_eq!(csv.headers["content-type"], "text/csv; charset=utf-8");
    assert!(String::from_utf8_lossy(&csv.body).starts_with("bucket_start,group,requests"));
    let bad = h1(admin, request("GET", "/admin/usage?group_by=color", "", "")).await;
    assert_eq!(bad.status, 400, "{}", String::from_utf8_lossy(&bad.body));
    // Shutdown flushes the queue within the grace.
    gw.shutdown().await;
    let rows = rows(&db);
    assert_eq!(rows.len(), 4, "{rows:#?}");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (input, output, cost): (i64, i64, i64) = conn
        .query_row(
            "SELECT SUM(input_tokens), SUM(output_tokens), SUM(cost_micros) FROM sluice_requests",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let t = &usage["totals"];
    assert_eq!(
        (
            t["input_tokens"].as_i64(),
            t["output_tokens"].as_i64(),
            t["cost_micros"].as_i64()
        ),
        (Some(input), Some(output), Some(cost)),
        "{usage}"
    );
    // The routed calls, and the bad request that never reached a route ("-").
    assert_eq!(usage["rows"].as_array().map(Vec::len), Some(2), "{usage}");
    for (row, id) in rows.iter().zip(&ids) {
        assert_eq!(&row.request_id, id, "{rows:#?}");
        assert_eq!(row.client_api, "openai.chat");
    }
    let (call, stream, fail, bad) = (&rows[0], &rows[1], &rows[2], &rows[3]);
    // The mock reports its usage; gpt-4o's list price ($2.50 in, $10 out per million) from
    // the shipped catalog: exact to the micro-dollar, rounded once (half up).
    let cost =
        |input: i64, output: i64| (input * 2_500_000 + output * 10_000_000 + 500_000) / 1_000_000;
    assert_eq!(
        (call.status, call.end_reason.as_str(), call.stream),
        (200, "completed", false)
    );
    assert!(call.input > 0 && call.output > 0, "{call:?}");
    assert_eq!(call.cost, Some(cost(call.input, call.output)), "{call:?}");
    assert_eq!(call.price_entry.as_deref(), Some("openai/gpt-4o"));
    assert_eq!(
        (
            call.served_model.as_deref(),
            call.upstream.as_deref(),
            call.provider.as_deref()
        ),
        (Some("gpt-4o"), Some("mock"), Some("openai"))
    );
    assert_eq!((stream.status, stream.stream), (200, true));
    assert_eq!(
        stream.cost,
        Some(cost(stream.input, stream.output)),
        "{stream:?}"
    );
    // Refused upstream and refused by the gateway: on the books, without tokens or cost.
    assert_eq!(
        (fail.status, fail.end_reason.as_str(), fail.input, fail.cost),
        (400, "upstream_error", 0, None)
    );
    assert_eq!(
        (bad.status, bad.end_reason.as_str(), bad.cost),
        (400, "bad_request", None)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_gateway_started_from_a_config_in_memory_keeps_no_books_unless_asked() {
    let mock = mock("").await;
    let gw = gateway(&mock, Setup::default()).await;
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    let metrics = gw.telemetry().encode();
    assert!(!metrics.contains("sluice_ledger_records"), "{metrics}");
}

/// A collector that keeps the raw bodies POSTed to `/v1/logs`.
async fn logs_collector() -> (
    std::net::SocketAddr,
    std::sync::Arc<parking_lot::Mutex<Vec<bytes::Bytes>>>,
) {
    use http_body_util::{BodyExt, Full};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let kept = bodies.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let kept = kept.clone();
                        async move {
                            let logs = req.uri().path() == "/v1/logs"
                                && req.headers()["content-type"] == "application/x-protobuf";
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            if logs {
                                kept.lock().push(body);
                            }
                            let mut resp = http::Response::new(Full::new(bytes::Bytes::new()));
                            *resp.status_mut() = if logs {
                                http::StatusCode::OK
                            } else {
                                http::StatusCode::NOT_FOUND
                            };
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                .await;
            });
        }
    });
    (addr, bodies)
}

#[tokio::test]
async fn the_otlp_sink_sends_records_as_logs_to_the_traces_collector() {
    let (collector, bodies) = logs_collector().await;
    let mock = mock("").await;
    let server = "[ledger]\nflush_interval = \"100ms\"\nsink = { kind = \"otlp\" }";
    let upstream = "";
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n{server}\n\n[telemetry]\nendpoint = \"http://{collector}/v1/traces\"\nsampling_ratio = 0.0\n\n[[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n{upstream}\n\n[[route]]\nmodels = [\"*\"]\nupstream = \"mock\"\n",
        mock.url()
    );
    let cfg = sluice_gateway::config::Config::from_toml(&text, &|_| None).unwrap();
    let gw = sluice::Server::start(cfg).await.unwrap();
    let r = h1(gw.addr(), request("POST", "/v1/chat/completions", "", CHAT)).await;
    assert_eq!(r.status, 200);
    let id = r.headers["x-request-id"].to_str().unwrap().to_string();
    gw.shutdown().await;
    let bodies = bodies.lock();
    assert!(
        bodies
            .iter()
            .any(|b| b.windows(id.len()).any(|w| w == id.as_bytes())),
        "a logs export carrying request {id}: {} bodies",
        bodies.len()
    );
}
