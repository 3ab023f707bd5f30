//! Sets `cfg(no_chromium)` when headless Chromium or chromedriver is missing, so the
//! dashboard's browser test shows as ignored with the reason instead of failing on a machine
//! without a browser. Never under `CI=true`: there a missing browser fails the test.

use std::path::{Path, PathBuf};

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
    println!("cargo::rustc-check-cfg=cfg(no_chromium)");
    println!("cargo::rerun-if-env-changed=CI");
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
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if !ci && (browser.is_none() || driver.is_none()) {
        println!("cargo::rustc-cfg=no_chromium");
    }
}
