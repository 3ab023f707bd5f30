//! Puts the git commit into `sluice --version` (`SLUICE_GIT_HASH`), when built from a git
//! checkout with git installed; `unknown` otherwise (e.g. a source tarball). And marks the
//! README's curl examples test ignored (`cfg(no_curl)`) on a machine without `curl`; never
//! under `CI=true` (see tests/build/test_env.rs), where a missing curl fails it. Likewise the
//! tests that need a `redis-server` (`cfg(no_redis)`), the fleet test (no `haproxy`:
//! `cfg(no_haproxy)`), the official MCP Python SDK
//! (`cfg(no_python_mcp)`), the dashboard's browser test (no
//! headless Chromium or chromedriver: `cfg(no_chromium)`) and the burst of a thousand HTTP/1.1
//! streams (an open-file hard limit below what it holds at once: `cfg(no_open_files)`).

use std::path::Path;
use std::process::Command;

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

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo::rerun-if-env-changed=SLUICE_GIT_HASH");
    // Rebuilt when HEAD moves: HEAD itself, the branch it points to, and packed refs. Only
    // paths that exist: a watched path that does not (a branch's loose ref after `git gc`
    // packed it) counts as changed on every build, and relinked the binary each time.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for p in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        if let Some(path) = git(&["rev-parse", "--git-path", p]) {
            if Path::new(&path).exists() {
                println!("cargo::rerun-if-changed={path}");
            }
        }
    }
    let hash = std::env::var("SLUICE_GIT_HASH")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo::rustc-env=SLUICE_GIT_HASH={hash}");
    test_env::cfg_when_missing("no_curl", test_env::find_tool(&["curl"], "CURL").is_none());
    test_env::cfg_when_missing("no_redis", !test_env::redis_server());
    // The fleet test (tests/fleet.rs) puts HAProxy in front of three instances.
    // Debian puts it in /usr/sbin, which a user's PATH may lack ($HAPROXY names another).
    let haproxy = test_env::find_tool(&["haproxy"], "HAPROXY").or_else(|| {
        let debian = Path::new("/usr/sbin/haproxy");
        (std::env::var_os("HAPROXY").is_none() && debian.is_file()).then(|| debian.to_path_buf())
    });
    test_env::cfg_when_missing("no_haproxy", haproxy.is_none());
    test_env::cfg_when_missing("no_postgres", !test_env::postgres());
    // The MCP gateway's whole-server test drives the official MCP Python SDK.
    let python = test_env::python();
    let has_mcp = python
        .as_deref()
        .is_some_and(|p| test_env::python_has(p, &["mcp"]));
    test_env::cfg_when_missing("no_python_mcp", !has_mcp);
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
