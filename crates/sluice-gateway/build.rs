//! Marks tests ignored (with the reason) when a tool they need is missing on this machine:
//! `cfg(no_python)` for the SDK tests (no Python with the official SDKs; see
//! tests/build/test_env.rs) and `cfg(no_chromium)` for the dashboard's browser test (no
//! headless Chromium or chromedriver). Under `CI=true` neither is ever set: there a missing
//! tool fails the test.

use std::path::{Path, PathBuf};

#[path = "../../tests/build/test_env.rs"]
mod test_env;

fn find(names: &[&str], var: &str) -> Option<PathBuf> {
    println!("cargo::rerun-if-env-changed={var}");
    if let Some(p) = std::env::var_os(var) {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

fn main() {
    let python = test_env::python();
    let has = python
        .as_deref()
        .is_some_and(|p| test_env::python_has(p, &["openai", "anthropic"]));
    test_env::cfg_when_missing("no_python", !has);

    println!("cargo::rerun-if-env-changed=PATH");
    // Installing the packages changes /usr/bin: look again then.
    if Path::new("/usr/bin").is_dir() {
        println!("cargo::rerun-if-changed=/usr/bin");
    }
    let browser = find(
        &["chromium", "chromium-browser", "google-chrome"],
        "SLUICE_CHROMIUM",
    );
    let driver = find(&["chromedriver"], "SLUICE_CHROMEDRIVER");
    test_env::cfg_when_missing("no_chromium", browser.is_none() || driver.is_none());
}
