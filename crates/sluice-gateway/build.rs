//! Marks tests ignored (with the reason) when a tool they need is missing on this machine:
//! `cfg(no_python)` for the SDK tests (no Python with the official SDKs; see
//! tests/build/test_env.rs) and `cfg(no_chromium)` for the dashboard's browser test (no
//! headless Chromium or chromedriver), and `cfg(no_open_files)` for the burst of a thousand
//! HTTP/1.1 streams (an open-file hard limit below what it holds at once). Under `CI=true`
//! none is ever set: there a missing tool, or a low limit, fails the test.

#[path = "../../tests/build/test_env.rs"]
mod test_env;

/// Open files the burst test holds at once: three per stream (the gateway's upstream socket,
/// the mock's, and slack for the client side and the runtime), for 1,024 streams.
const BURST_OPEN_FILES: u64 = 3 * 1024;

/// The open-file hard limit (the gateway raises its soft limit to it): `None` when unlimited
/// or unknown. Read from `/proc/self/limits`, else from the shell's `ulimit -Hn`, so that no
/// unsafe `getrlimit` is needed here; the build script inherits the limits `cargo test`
/// runs under.
fn open_files_hard_limit() -> Option<u64> {
    let parse = |v: &str| v.trim().parse::<u64>().ok();
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
        let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
        let fields: Vec<&str> = line["Max open files".len()..].split_whitespace().collect();
        return fields.get(1).and_then(|v| parse(v));
    }
    let out = std::process::Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .ok()?;
    parse(&String::from_utf8_lossy(&out.stdout))
}

fn main() {
    let python = test_env::python();
    let has = python
        .as_deref()
        .is_some_and(|p| test_env::python_has(p, &["openai", "anthropic"]));
    test_env::cfg_when_missing("no_python", !has);

    let browser = test_env::find_tool(
        &["chromium", "chromium-browser", "google-chrome"],
        "SLUICE_CHROMIUM",
    );
    let driver = test_env::find_tool(&["chromedriver"], "SLUICE_CHROMEDRIVER");
    test_env::cfg_when_missing("no_chromium", browser.is_none() || driver.is_none());

    // Limits are not files: cargo cannot watch them. A build on a machine with a higher
    // limit than the tests later run under fails the test with the limit it found.
    let low = open_files_hard_limit().is_some_and(|hard| hard < BURST_OPEN_FILES);
    test_env::cfg_when_missing("no_open_files", low);
}
