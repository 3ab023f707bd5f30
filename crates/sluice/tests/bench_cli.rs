//! `sluice bench` as a user runs it: the binary against the binary's mock, JSON, tables, HTML
//! reports, exit statuses and flag names.

mod report_check;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

struct Mock {
    child: Child,
    url: String,
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mock() -> Mock {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["mock", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    Mock {
        child,
        url: format!("http://{addr}"),
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs and expects success; returns stdout.
fn sluice(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs and expects exit status 3 (the run failed its checks); returns (stdout, stderr).
fn failing(args: &[&str]) -> (String, String) {
    let out = run(args);
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert_eq!(out.status.code(), Some(3), "{args:?}\n{stdout}\n{stderr}");
    (stdout, stderr)
}

fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
    // Dropped here: nothing listens on the port any more.
}

fn temp_html(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("sluice-{name}-{}.html", std::process::id()))
}

#[test]
fn rps_json_and_table() {
    let m = mock();
    let url = format!("{}/v1/chat/completions", m.url);
    let json: serde_json::Value = serde_json::from_str(&sluice(&[
        "bench", "rps", "--url", &url, "-n", "50", "-c", "5", "--json",
    ]))
    .unwrap();
    assert_eq!(json["sent"], 50);
    assert_eq!(json["successes"], 50);
    assert_eq!(json["latency"]["count"], 50);
    assert_eq!(json["failure_causes"], serde_json::json!({}));
    let table = sluice(&[
        "bench",
        "rps",
        "--url",
        &url,
        "--protocol",
        "h2c",
        "--rate",
        "100",
        "--duration",
        "500ms",
    ]);
    assert!(table.contains("open model at 100 req/s"), "{table}");
    assert!(
        table.contains("50 sent, 50 ok, 0 timeouts, 0 errors"),
        "{table}"
    );
    // Not a terminal: no progress line in the output.
    assert!(!table.contains('\r'), "{table:?}");
}

/// The report: `38195 sent, 0 ok … 38195 errors` and exit 0 against a dead port. Now:
/// exit 3, the cause, and a handful of connects instead of tens of thousands.
#[test]
fn rps_against_a_dead_port_fails_says_why_and_backs_off() {
    let url = format!("http://127.0.0.1:{}/v1/chat/completions", closed_port());
    let (stdout, stderr) = failing(&[
        "bench",
        "rps",
        "--url",
        &url,
        "-c",
        "50",
        "--duration",
        "2s",
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let sent = json["sent"].as_u64().unwrap();
    assert_eq!(json["successes"], 0);
    assert_eq!(
        json["failure_causes"]["connect_refused"].as_u64(),
        Some(sent)
    );
    // One round of 50 at once, then one try per pause (10 ms, doubling): well under 100,
    // where the loop without backoff sent thousands.
    assert!(sent < 100, "{sent} connects in 2 s");
    assert!(
        stderr.contains(&format!(
            "error: {sent} of {sent} requests failed (100.0%), more than --max-error-rate 0.5 allows: connect_refused {sent}"
        )),
        "{stderr}"
    );
    let (table, _) = failing(&["bench", "rps", "--url", &url, "--duration", "300ms"]);
    assert!(
        table.contains("failed by cause: connect_refused"),
        "{table}"
    );
    assert!(table.contains("e.g. connect_refused: "), "{table}");
}

#[test]
fn failures_by_status_and_the_threshold_flag() {
    let m = mock();
    let url = format!("{}/v1/chat/completions", m.url);
    // Half the requests fail with 503 (fail_first on a shared key, 10 of 20): at the
    // threshold passes, above it fails.
    let half = "x-mock: fail_first=10, fail_key=half";
    let out = sluice(&[
        "bench", "rps", "--url", &url, "-n", "20", "-c", "1", "-H", half, "--json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["failure_causes"]["status_503"], 10, "{json}");
    assert_eq!(json["errors"], 10);
    let (_, stderr) = failing(&[
        "bench",
        "rps",
        "--url",
        &url,
        "-n",
        "20",
        "-c",
        "1",
        "-H",
        "x-mock: status=429",
        "--max-error-rate",
        "0.2",
    ]);
    assert!(stderr.contains("status_429 20"), "{stderr}");
    sluice(&[
        "bench",
        "rps",
        "--url",
        &url,
        "-n",
        "5",
        "-H",
        "x-mock: status=429",
        "--max-error-rate",
        "1",
    ]);
    // Streams: a status and a cut each have their cause.
    let (stdout, stderr) = failing(&[
        "bench",
        "stream",
        "--url",
        &url,
        "-n",
        "6",
        "-c",
        "2",
        "-H",
        "x-mock: status=500",
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["failure_causes"]["status_500"], 6, "{json}");
    assert!(stderr.contains("6 of 6 streams failed"), "{stderr}");
    let bad = run(&["bench", "rps", "--max-error-rate", "5"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a share between 0 and 1"));
}

#[test]
fn probe_json_and_table_with_a_shared_client() {
    let m = mock();
    let url = format!("{}/v1/chat/completions", m.url);
    let stats = format!("{}/__mock/stats", m.url);
    let args = [
        "bench",
        "probe",
        "--url",
        &url,
        "--protocol",
        "h2c",
        "--shared-client",
        "-k",
        "3",
        "--duration",
        "1s",
        "--probe-interval",
        "100ms",
        "--mock-stats",
        &stats,
        "--stream-header",
        "x-mock: tokens=100000, interval_ms=20",
    ];
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let json: serde_json::Value = serde_json::from_str(&sluice(&with_json)).unwrap();
    let located = json["probes_located"].as_u64().unwrap();
    assert!(located >= 3, "{json}");
    assert_eq!(json["shared_with_long_stream"].as_u64(), Some(located));
    assert_eq!(json["long_streams_active_at_start"], 3);
    let table = sluice(&args);
    assert!(table.contains("shared with a long stream"), "{table}");
    assert!(table.contains("(100%)"), "{table}");
}

/// The report: with its defaults the long streams ended at once and were replaced
/// thousands of times. Now (only the duration shortened): 40 long streams open for the
/// whole run, one probe a second.
#[test]
fn probe_with_its_defaults_keeps_long_streams_open_and_probes_once_a_second() {
    let m = mock();
    let url = format!("{}/v1/chat/completions", m.url);
    let stats = format!("{}/__mock/stats", m.url);
    let out = sluice(&[
        "bench",
        "probe",
        "--url",
        &url,
        "--duration",
        "3s",
        "--mock-stats",
        &stats,
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["long_streams"], 40);
    assert_eq!(json["long_streams_started"], 40, "none replaced: {json}");
    assert_eq!(json["long_streams_ended"], 0);
    assert_eq!(json["long_streams_active_at_start"], 40);
    // Probes at about 0, 1, 2 s (each takes a millisecond, then a 1 s pause).
    let probes = json["requests"].as_u64().unwrap();
    assert!((3..=4).contains(&probes), "{probes} probes in 3 s");
    assert_eq!(
        json["successes"].as_u64(),
        Some(probes - json["cancelled_at_end"].as_u64().unwrap())
    );
    let sent: Vec<f64> = json["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sent_at_ms"].as_f64().unwrap())
        .collect();
    assert!(
        sent.windows(2)
            .all(|w| (950.0..1500.0).contains(&(w[1] - w[0]))),
        "{sent:?}"
    );
}

#[test]
fn probes_that_fail_fail_the_run() {
    let m = mock();
    let url = format!("{}/v1/chat/completions", m.url);
    let (stdout, stderr) = failing(&[
        "bench",
        "probe",
        "--url",
        &url,
        "-k",
        "1",
        "--duration",
        "500ms",
        "--probe-interval",
        "100ms",
        "--probe-header",
        "x-mock: error=overloaded",
    ]);
    assert!(stdout.contains("failed by cause: status_503"), "{stdout}");
    assert!(stderr.contains("probes failed (100.0%)"), "{stderr}");
}

/// One convention: humantime durations under the same names, `--json`, `--report` and
/// `--max-error-rate` everywhere; the old spellings still work but are not advertised.
#[test]
fn flag_names_agree_across_scenarios() {
    for cmd in [
        &["bench", "rps", "--help"][..],
        &["bench", "stream", "--help"],
        &["bench", "probe", "--help"],
        &["bench", "failover", "--help"],
        &["bench", "lb", "--help"],
        &["demo", "--help"],
    ] {
        let help = sluice(cmd);
        for flag in [
            "--duration <DURATION>",
            "--json",
            "--report <FILE.html>",
            "--max-error-rate <SHARE>",
        ] {
            assert!(help.contains(flag), "{cmd:?} lacks {flag}:\n{help}");
        }
        for old in [
            "--duration-s",
            "--max-duration-s",
            "--timeout-ms",
            "--timeout-s",
            "--ramp-ms",
        ] {
            assert!(!help.contains(old), "{cmd:?} still shows {old}");
        }
    }
    for cmd in [
        &["bench", "rps", "--help"][..],
        &["bench", "stream", "--help"],
    ] {
        assert!(sluice(cmd).contains("--timeout <TIMEOUT>"), "{cmd:?}");
    }
    // A bare number is refused with the fix.
    let out = run(&["bench", "rps", "--duration", "5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("`5` has no unit: write 5s for seconds or 5ms for milliseconds"),
        "{out:?}"
    );
    // The old spellings, in their old units.
    let m = mock();
    let url = format!("{}/v1/chat/completions", m.url);
    let table = sluice(&[
        "bench",
        "rps",
        "--url",
        &url,
        "--rate",
        "40",
        "--duration-s",
        "0.5",
        "--timeout-ms",
        "2000",
    ]);
    assert!(table.contains("20 sent, 20 ok"), "{table}");
    let json: serde_json::Value = serde_json::from_str(&sluice(&[
        "bench",
        "stream",
        "--url",
        &url,
        "-n",
        "3",
        "-c",
        "3",
        "--ramp-ms",
        "0",
        "--timeout-s",
        "5",
        "--max-duration-s",
        "5",
        "--json",
    ]))
    .unwrap();
    assert_eq!(json["completed"], 3);
    // New and old together: refused.
    let both = run(&["bench", "rps", "--duration", "1s", "--duration-s", "1"]);
    assert_eq!(both.status.code(), Some(2));
}

/// `--report FILE.html`: one self-contained page whose charts hold the run's numbers.
#[test]
fn rps_report_holds_the_three_charts_with_the_runs_numbers() {
    let m = mock();
    let url = format!("{}/v1/chat/completions", m.url);
    let path = temp_html("rps");
    let out = sluice(&[
        "bench",
        "rps",
        "--url",
        &url,
        "--rate",
        "200",
        "--duration",
        "1500ms",
        "-H",
        "x-mock: fail_first=30, fail_key=rps-report",
        "--json",
        "--report",
        path.to_str().unwrap(),
    ]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let html = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let (sections, embedded) = report_check::read(&html);
    assert_eq!(sections.len(), 1);
    let charts = &sections[0].1;
    let ok = json["successes"].as_u64().unwrap();
    assert_eq!(ok, 270, "{json}");
    assert_eq!(charts.histogram_total(), ok);
    assert_eq!(charts.ok_total(), ok);
    assert_eq!(charts.failed_total(), 30);
    // Two seconds of requests (the run lasts 1.5 s).
    assert!(
        (2..=3).contains(&charts.throughput.len()),
        "{:?}",
        charts.throughput
    );
    // The same number, read two ways: the page's attribute by Rust's exact parse, the JSON by
    // serde_json's default float parse, which may land one unit in the last place away.
    let (drawn, summed) = (
        charts.max_latency(),
        json["latency"]["max_ms"].as_f64().unwrap(),
    );
    assert!(
        (drawn - summed).abs() <= summed.abs() * 4.0 * f64::EPSILON,
        "{drawn} vs {summed}"
    );
    let fastest = charts.histogram.iter().find(|b| b.2 > 0).unwrap();
    assert!(fastest.0 <= json["latency"]["p50_ms"].as_f64().unwrap());
    assert_eq!(embedded["successes"], json["successes"]);
    assert!(html.contains("<title>sluice bench rps</title>"));
}

#[test]
fn stream_and_probe_reports_too() {
    let m = mock();
    let url = format!("{}/v1/chat/completions", m.url);
    let path = temp_html("stream");
    let json: serde_json::Value = serde_json::from_str(&sluice(&[
        "bench",
        "stream",
        "--url",
        &url,
        "-n",
        "20",
        "-c",
        "5",
        "-H",
        "x-mock: tokens=5, interval_ms=5",
        "--json",
        "--report",
        path.to_str().unwrap(),
    ]))
    .unwrap();
    let (sections, _) = report_check::read(&std::fs::read_to_string(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
    assert_eq!(sections[0].1.histogram_total(), 20);
    assert_eq!(
        sections[0].1.ok_total(),
        json["completed"].as_u64().unwrap()
    );
    let path = temp_html("probe");
    sluice(&[
        "bench",
        "probe",
        "--url",
        &url,
        "-k",
        "2",
        "--duration",
        "1s",
        "--probe-interval",
        "200ms",
        "--report",
        path.to_str().unwrap(),
    ]);
    let (sections, json) = report_check::read(&std::fs::read_to_string(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        sections[0].1.ok_total(),
        json["successes"].as_u64().unwrap()
    );
    assert!(sections[0].1.ok_total() >= 3);
}

/// `sluice bench failover --quick`: every fault class the policy can rescue is invisible to
/// the clients, each with the attempts it should take, and the report holds both kinds.
#[test]
fn failover_quick_rescues_every_fault_class() {
    let path = temp_html("failover");
    let out = sluice(&[
        "bench",
        "failover",
        "--quick",
        "--json",
        "--report",
        path.to_str().unwrap(),
    ]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["max_attempts"], 4);
    let phases = json["phases"].as_array().unwrap();
    let names: Vec<&str> = phases
        .iter()
        .map(|p| p["phase"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "healthy",
            "503",
            "reset",
            "silence",
            "slow-first-token",
            "cut-before-content",
            "flapping"
        ]
    );
    let mut successes = [0u64; 2];
    for p in phases {
        let name = p["phase"]["name"].as_str().unwrap();
        for (i, k) in p["kinds"].as_array().unwrap().iter().enumerate() {
            let kind = k["kind"].as_str().unwrap();
            let requests = k["requests"].as_u64().unwrap();
            assert!(requests > 0, "{name} {kind}: {k}");
            assert_eq!(k["errors"], 0, "{name} {kind}: {k}");
            assert_eq!(k["attempts_header_mismatches"], 0, "{name} {kind}: {k}");
            successes[i] += requests;
            let (lo, hi) = (
                k["attempts"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .next()
                    .unwrap()
                    .clone(),
                k["attempts_max"].as_u64().unwrap(),
            );
            // What each fault costs: the primary once (or twice when the failure is worth a
            // retry there: a reset, a cut), then the fallback.
            let want: (&str, u64) = match (name, kind) {
                ("healthy", _) | ("cut-before-content", "call") => ("1", 1),
                ("503" | "silence" | "slow-first-token", _) => ("2", 2),
                ("reset", _) | ("cut-before-content", "stream") => ("3", 3),
                ("flapping", _) => ("1", 2),
                other => panic!("unexpected row {other:?}"),
            };
            assert_eq!((lo.as_str(), hi), want, "{name} {kind}: {k}");
        }
    }
    let table =
        String::from_utf8(run(&["bench", "failover", "--quick", "--phase", "silence"]).stdout)
            .unwrap();
    assert!(table.contains("silence             silent"), "{table}");
    assert!(table.contains("0 client-visible errors"), "{table}");
    let html = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let (sections, _) = report_check::read(&html);
    let titles: Vec<&str> = sections.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(titles, ["streams", "calls"]);
    for (i, (_, charts)) in sections.iter().enumerate() {
        assert_eq!(charts.ok_total(), successes[i]);
        assert_eq!(charts.histogram_total(), successes[i]);
        assert_eq!(charts.failed_total(), 0);
        assert_eq!(charts.marks, names);
    }
    let bad = run(&["bench", "failover", "--phase", "nope"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown phase `nope`"));
}

/// `sluice bench lb --quick`: every phase in order with its replicas, shares that add up,
/// round robin's exact thirds, and a replica killed mid-run without a single failed
/// non-streaming call (streams may fail only if they were in flight on it), taken out of
/// rotation and serving again after its restart; the report holds both kinds.
#[test]
fn lb_quick_balances_and_a_killed_replica_costs_no_call() {
    let path = temp_html("lb");
    let out = sluice(&[
        "bench",
        "lb",
        "--quick",
        "--json",
        "--report",
        path.to_str().unwrap(),
    ]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["p99_goal_ratio"], 1.3);
    assert_eq!(json["back_goal_ms"], 5000.0);
    assert_eq!(
        json["plan"]["slow"]["spec"],
        "ttft_ms=210, tokens=8, interval_ms=5"
    );
    assert!(json["gateway_config"]
        .as_str()
        .unwrap()
        .contains("balance = \"p2c_ewma\""));
    let phases = json["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "baseline",
            "p2c_ewma",
            "least_in_flight",
            "weighted_round_robin",
            "kill"
        ]
    );
    let mut requests = [0u64; 2];
    for p in phases {
        let name = p["name"].as_str().unwrap();
        let replicas: Vec<&str> = p["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        let want: &[&str] = match name {
            "baseline" => &["a", "b"],
            "kill" => &["a", "b", "c (killed)"],
            _ => &["a", "b", "c (slow)"],
        };
        assert_eq!(replicas, want, "{name}");
        let kinds = p["kinds"].as_array().unwrap();
        assert_eq!(kinds.len(), 2);
        let mut upstream = [0u64; 3];
        for (i, k) in kinds.iter().enumerate() {
            let kind = k["kind"].as_str().unwrap();
            assert_eq!(kind, ["stream", "call"][i]);
            let n = k["requests"].as_u64().unwrap();
            assert!(n > 0, "{name} {kind}: {k}");
            requests[i] += n;
            let shares = k["replicas"].as_array().unwrap();
            assert_eq!(shares.len(), want.len(), "{name} {kind}: {k}");
            let sum: f64 = shares.iter().map(|r| r["share"].as_f64().unwrap()).sum();
            assert!((sum - 1.0).abs() < 1e-9, "{name} {kind}: {k}");
            for (j, r) in shares.iter().enumerate() {
                upstream[j] += r["requests"].as_u64().unwrap();
            }
            assert_eq!(
                k["p99_vs_baseline"].is_null(),
                name == "baseline" || name == "kill",
                "{name} {kind}: {k}"
            );
            if name != "kill" {
                // Nothing fails while balancing: the slow replica is slow, not broken.
                assert_eq!(k["errors"], 0, "{name} {kind}: {k}");
            }
        }
        if name == "weighted_round_robin" {
            // Exactly one in three picks, streams and calls together, whatever its speed.
            let all: u64 = upstream.iter().sum();
            assert!(
                upstream[2] * 3 + 3 >= all && upstream[2] * 3 <= all + 3,
                "{upstream:?}"
            );
        }
    }
    let kill = &phases[4];
    let k = &kill["kill"];
    assert_eq!(k["replica"], "c");
    let calls = &kill["kinds"][1];
    assert_eq!(calls["errors"], 0, "no call may fail: {calls}");
    let streams = &kill["kinds"][0];
    assert!(
        streams["errors"].as_u64().unwrap() <= k["streams_in_flight_at_kill"].as_u64().unwrap(),
        "{streams}\n{k}"
    );
    assert!(k["out_of_rotation_ms"].as_f64().is_some(), "{k}");
    assert!(k["back_ms"].as_f64().is_some(), "{k}");
    assert!(k["served_after_restart"].as_u64().unwrap() >= 1, "{k}");
    assert!(
        k["restarted_at_ms"].as_f64().unwrap() >= k["killed_at_ms"].as_f64().unwrap() + 1000.0,
        "{k}"
    );

    let html = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let (sections, embedded) = report_check::read(&html);
    assert_eq!(embedded["phases"].as_array().unwrap().len(), 5);
    let titles: Vec<&str> = sections.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(titles, ["streams", "calls"]);
    for (i, (_, charts)) in sections.iter().enumerate() {
        assert_eq!(charts.ok_total() + charts.failed_total(), requests[i]);
        for mark in [
            "baseline",
            "weighted_round_robin",
            "c stopped",
            "c restarted",
        ] {
            assert!(charts.marks.iter().any(|m| m == mark), "{:?}", charts.marks);
        }
    }

    // The table, the kill part alone.
    let table = sluice(&["bench", "lb", "--quick", "--only", "kill"]);
    assert!(
        table.contains("kill: p2c_ewma over a, b, c; c stopped at"),
        "{table}"
    );
    assert!(table.contains("back in rotation"), "{table}");
    assert!(!table.contains("baseline"), "{table}");
    let bad = run(&["bench", "lb", "--slow", "sideways"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// The guide's `demo` and `bench` commands (`docs/guide/src/demo-and-bench.md`) use only flags
/// the commands have.
#[test]
fn readme_commands_use_real_flags() {
    let page = include_str!("../../../docs/guide/src/demo-and-bench.md");
    let text = page.replace("\\\n", " ");
    let commands: Vec<Vec<&str>> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("cargo run --release -- "))
        .map(|l| l.split('#').next().unwrap().split_whitespace().collect())
        .collect();
    assert!(commands.len() >= 12, "{commands:?}");
    let mut helps = std::collections::HashMap::new();
    for c in &commands {
        let sub: Vec<&str> = if c[0] == "bench" {
            c[..2].to_vec()
        } else {
            c[..1].to_vec()
        };
        let help = helps.entry(sub.clone()).or_insert_with(|| {
            let mut args = sub.clone();
            args.push("--help");
            sluice(&args)
        });
        for flag in c.iter().filter(|a| a.starts_with('-')) {
            assert!(
                [" ", ",", "\n"]
                    .iter()
                    .any(|end| help.contains(&format!("{flag}{end}"))),
                "demo-and-bench.md: `{}` uses {flag}, which {sub:?} does not have",
                c.join(" ")
            );
        }
    }
}
