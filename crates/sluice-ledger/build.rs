//! Marks the tests that need a real PostgreSQL server ignored (with the reason) when its
//! binaries are not installed; see tests/build/test_env.rs. Under `CI=true` they always run
//! (and fail without the server).

#[path = "../../tests/build/test_env.rs"]
mod test_env;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `$PG_BIN`, else the directory of `initdb` on the PATH, else Debian's
/// `/usr/lib/postgresql/<version>/bin` (its binaries are not on the PATH), newest first.
/// Kept in step with `tests/support/mod.rs`, which finds them the same way.
fn pg_bin() -> Option<PathBuf> {
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

fn main() {
    let found = pg_bin().is_some_and(|dir| {
        Command::new(dir.join("postgres"))
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    test_env::cfg_when_missing("no_postgres", !found);
}
