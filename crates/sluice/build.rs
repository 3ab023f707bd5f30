//! Puts the git commit into `sluice --version` (`SLUICE_GIT_HASH`), when built from a git
//! checkout with git installed; `unknown` otherwise (e.g. a source tarball).

use std::process::Command;

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
}
