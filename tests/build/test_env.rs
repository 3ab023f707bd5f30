//! What the tests of a crate can use on this machine, decided when the crate is built: a
//! Python with the official SDKs, a `redis-server`. Included by the crates' `build.rs`, which
//! turn a missing tool into a cfg (`no_python`, `no_python_genai`, `no_redis`) that marks the
//! tests needing it `#[ignore = "why"]`, so `cargo test` lists them as ignored, with the
//! reason, instead of passing them silently.
//!
//! Under `CI=true` no such cfg is ever set: the tests run, and fail when the tool is missing.
//!
//! NOTE: Cargo re-runs a build script only when something it was told to watch changed, and a
//! watched path that does not exist counts as changed on every build, which would rebuild the
//! crate (and everything above it) every time. So only paths that exist are watched, plus
//! `tests/python/requirements.txt` and the environment variables. After creating the venv on
//! a machine that had none, `touch tests/python/requirements.txt` (or run the ignored tests
//! with `cargo test -- --include-ignored`).

#![allow(dead_code)] // each build script uses only part of it

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace root, from a crate's manifest directory (`crates/NAME`).
pub fn workspace_root() -> PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    Path::new(&dir).join("../..")
}

/// Under CI every test must run: no tool may be declared missing.
pub fn in_ci() -> bool {
    println!("cargo::rerun-if-env-changed=CI");
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Declares `cfg(name)` and sets it when `missing` (never under CI).
pub fn cfg_when_missing(name: &str, missing: bool) {
    println!("cargo::rustc-check-cfg=cfg({name})");
    if missing && !in_ci() {
        println!("cargo::rustc-cfg={name}");
    }
}

fn watch_if_exists(p: &Path) {
    if p.exists() {
        println!("cargo::rerun-if-changed={}", p.display());
    }
}

/// `$var` if it names a file, else the first of `names` found on the PATH. The file found is
/// watched, not the directories searched: a directory such as `/usr/bin` changes whenever any
/// package is installed, and watching it rebuilt the crate (and everything above it) then.
/// A tool installed later is noticed through `$var` or `PATH`, or `cargo clean -p`.
pub fn find_tool(names: &[&str], var: &str) -> Option<PathBuf> {
    println!("cargo::rerun-if-env-changed={var}");
    println!("cargo::rerun-if-env-changed=PATH");
    let found = match std::env::var_os(var) {
        Some(p) => Some(PathBuf::from(p)).filter(|p| p.is_file()),
        None => {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
                .find(|p| p.is_file())
        }
    };
    if let Some(p) = &found {
        watch_if_exists(p);
    }
    found
}

/// `$SLUICE_PYTHON`, else `.venv/bin/python` at the workspace root, when it exists.
pub fn python() -> Option<PathBuf> {
    println!("cargo::rerun-if-env-changed=SLUICE_PYTHON");
    let root = workspace_root();
    let requirements = root.join("tests/python/requirements.txt");
    watch_if_exists(&requirements);
    let py = match std::env::var_os("SLUICE_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = root.join(".venv");
            // The whole venv: installing a package into it changes it.
            watch_if_exists(&venv);
            venv.join("bin/python")
        }
    };
    watch_if_exists(&py);
    py.exists().then_some(py)
}

/// Whether `python` can import every module in `modules` (e.g. `["openai", "anthropic"]`).
pub fn python_has(python: &Path, modules: &[&str]) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {}", modules.join(", "))])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `$REDIS_SERVER`, else `redis-server` on the PATH, when it runs.
pub fn redis_server() -> bool {
    println!("cargo::rerun-if-env-changed=REDIS_SERVER");
    println!("cargo::rerun-if-env-changed=PATH");
    let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let found = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        // Its removal is noticed; its installation is noticed through PATH or a rebuild.
        let path = std::env::var_os("PATH").unwrap_or_default();
        for dir in std::env::split_paths(&path) {
            let p = dir.join(&bin);
            if p.is_file() {
                watch_if_exists(&p);
                break;
            }
        }
        watch_if_exists(Path::new(&bin));
    }
    found
}

/// `$PG_BIN`, else the directory of `initdb` on the PATH, else Debian's
/// `/usr/lib/postgresql/<version>/bin` (its binaries are not on the PATH), newest first.
/// Kept in step with `crates/sluice-ledger/tests/support/mod.rs`, which finds them the same way.
pub fn pg_bin() -> Option<PathBuf> {
    println!("cargo::rerun-if-env-changed=PG_BIN");
    println!("cargo::rerun-if-env-changed=PATH");
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(dir) = std::env::split_paths(&path).find(|d| d.join("initdb").is_file()) {
        return Some(dir);
    }
    let debian = Path::new("/usr/lib/postgresql");
    if debian.is_dir() {
        println!("cargo::rerun-if-changed=/usr/lib/postgresql");
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir(debian)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop()
}

/// Whether PostgreSQL's server binaries are installed (see [`pg_bin`]) and run.
pub fn postgres() -> bool {
    pg_bin().is_some_and(|dir| {
        Command::new(dir.join("postgres"))
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}
