//! Puts the git commit into `sluice --version` (`SLUICE_GIT_HASH`), when built from a git
//! checkout with git installed; `unknown` otherwise (e.g. a source tarball). And marks the
//! README's curl examples test ignored (`cfg(no_curl)`) on a machine without `curl`; never
//! under `CI=true` (see tests/build/test_env.rs), where a missing curl fails it. Likewise the
//! tests that need a `redis-server` (`cfg(no_redis)`).

use std::path::Path;
use std::process::Command;

#[path = "../../tests/build/test_env.rs"]
mod test_env;

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
}
