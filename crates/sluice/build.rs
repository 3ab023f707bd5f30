//! Puts the git commit into `sluice --version` (`SLUICE_GIT_HASH`), when built from a git
//! checkout with git installed; `unknown` otherwise (e.g. a source tarball). And marks the
//! README's curl examples test ignored (`cfg(no_curl)`) on a machine without `curl`; never
//! under `CI=true` (see tests/build/test_env.rs), where a missing curl fails it. Likewise the
//! tests that need a `redis-server` (`cfg(no_redis)`).

use std::path::Path;
use std::process::Command;

#[path = "../../tests/build/test_env.rs"]
mod test_env;

/// Whether `curl` is on the PATH.
fn curl_on_path() -> bool {
    println!("cargo::rerun-if-env-changed=PATH");
    // Installing it changes /usr/bin: look again then.
    if Path::new("/usr/bin").is_dir() {
        println!("cargo::rerun-if-changed=/usr/bin");
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| dir.join("curl").is_file())
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
    // Rebuilt when HEAD moves: HEAD itself, the branch it points to, and packed refs.
    for p in ["HEAD", "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", p]) {
            println!("cargo::rerun-if-changed={path}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = git(&["rev-parse", "--git-path", &branch]) {
            println!("cargo::rerun-if-changed={path}");
        }
    }
    let hash = std::env::var("SLUICE_GIT_HASH")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo::rustc-env=SLUICE_GIT_HASH={hash}");
    test_env::cfg_when_missing("no_curl", !curl_on_path());
    test_env::cfg_when_missing("no_redis", !test_env::redis_server());
}
