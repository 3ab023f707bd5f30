//! The dashboard in a real browser: headless Chromium driven over WebDriver (chromedriver)
//! opens `/admin/` on a gateway in front of the mock, while streams run through it.
//!
//! Without Chromium or chromedriver the test is ignored, with the reason (`build.rs` sets
//! `cfg(no_chromium)`); under `CI=true` it always runs, and fails without them. Install
//! them with `apt-get install chromium chromium-driver`. The screenshot goes to
//! `target/tmp/dashboard.png`, or to `docs/dashboard.png` with `SLUICE_UPDATE_SCREENSHOT=1`.

#[path = "../../../sluice-mock/tests/mock/support.rs"]
#[allow(dead_code)]
mod support;
mod webdriver;

use std::time::Duration;

use sluice::Server;
use sluice_gateway::config::Config;
use tokio::time::Instant;

use support::*;

/// Polls the page until `script` returns `want`, for at most `within`.
async fn page_shows(
    s: &webdriver::Session<'_>,
    script: &str,
    want: &str,
    within: Duration,
) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut last = serde_json::Value::Null;
    while t0.elapsed() < within {
        last = s.eval(script).await;
        if last == want {
            return Ok(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "after {within:?} the page shows {last}, not {want}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_chromium,
    ignore = "needs chromium and chromedriver (apt-get install chromium chromium-driver)"
)]
async fn dashboard_shows_live_streams_in_chromium() {
    let (chromium, chromedriver) = webdriver::binaries();
    let mock = mock("").await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n\n[[upstream]]\nname = \"mock\"\nbase_url = \"{}/v1\"\nprotocol = \"h2c\"\n\n\
         [[route]]\nname = \"chat\"\nmodels = [\"gpt-*\"]\nupstream = \"mock\"\n\n[[route]]\nname = \"claude\"\nmodels = [\"claude-*\"]\nupstream = \"mock\"\n",
        mock.url()
    );
    let gw = Server::start(Config::from_toml(&text, &|_| None).unwrap())
        .await
        .unwrap();
    let (addr, admin) = (gw.addr(), gw.admin_addr());

    let driver = webdriver::Driver::start(&chromedriver).await;
    let profile = std::env::temp_dir().join(format!("sluice-chromium-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    let session = driver.session(&chromium, &profile).await;
    session.goto(&format!("http://{admin}/admin/")).await;
    page_shows(
        &session,
        "return document.getElementById('status').textContent",
        "live",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    page_shows(
        &session,
        "return document.getElementById('active-streams').textContent",
        "0",
        Duration::from_secs(3),
    )
    .await
    .unwrap();

    // Some short calls first, so the plots have a shape.
    for i in 0..30 {
        let model = if i % 3 == 0 { "claude-x" } else { "gpt-4o" };
        let body = format!("{{\"model\":\"{model}\",\"max_tokens\":20,\"messages\":[]}}");
        let path = if i % 3 == 0 {
            "/v1/messages"
        } else {
            "/v1/chat/completions"
        };
        h1(addr, request("POST", path, "tokens=3", &body)).await;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }

    // Five streams, open for about 4 s.
    let streams: Vec<_> = (0..5)
        .map(|_| {
            tokio::spawn(async move {
                h1(
                    addr,
                    request(
                        "POST",
                        "/v1/chat/completions",
                        "tokens=40, interval_ms=100",
                        r#"{"model":"gpt-4o","stream":true}"#,
                    ),
                )
                .await
            })
        })
        .collect();
    wait_for(mock.stats(), "5 streams at the mock", |s| {
        s.requests
            .iter()
            .filter(|r| r.stream && r.finished_at.is_none())
            .count()
            == 5
    })
    .await;
    let took = page_shows(
        &session,
        "return document.getElementById('active-streams').textContent",
        "5",
        Duration::from_secs(2),
    )
    .await
    .expect("5 active streams on the page within 2 s");
    eprintln!("the page showed 5 streams {took:?} after they opened");
    // The lane table shows them in flight, and the plots have points.
    let in_flight = session
        .eval("return document.getElementById('upstreams').textContent")
        .await;
    assert!(in_flight.as_str().unwrap().contains("mock"), "{in_flight}");
    let points = session
        .eval("return document.querySelector('#plot-active polyline').getAttribute('points').split(' ').length")
        .await;
    assert!(points.as_u64().unwrap() >= 2, "{points}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let png = session.screenshot().await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let out = if std::env::var_os("SLUICE_UPDATE_SCREENSHOT").is_some() {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/dashboard.png")
    } else {
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png")
    };
    std::fs::write(&out, &png).unwrap();
    eprintln!("screenshot: {}", out.display());

    for s in streams {
        assert_eq!(s.await.unwrap().status, 200);
    }
    page_shows(
        &session,
        "return document.getElementById('active-streams').textContent",
        "0",
        Duration::from_secs(3),
    )
    .await
    .expect("0 active streams once they ended");

    let errors: Vec<_> = session
        .console()
        .await
        .into_iter()
        .filter(|e| e["level"] == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    session.close().await;
    drop(driver);
    let _ = std::fs::remove_dir_all(&profile);
    gw.shutdown().await;
}
