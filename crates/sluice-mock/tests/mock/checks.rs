//! Running a check script of tests/python from an async test; shared by the SDK fidelity
//! tests of the mock and of the gateway, beside `python.rs` (which it needs as `crate::python`).

/// Runs a check script of tests/python (`python SCRIPT ARGS...`, on tokio's blocking pool),
/// prints what it said, and asserts that it exited cleanly and every check passed (its last
/// line: `N passed, 0 failed`). Returns its standard output.
pub async fn run_checks(script: &str, args: Vec<String>) -> String {
    let py = crate::python::sdk_python();
    let path = crate::python::workspace_root().join(script);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(py)
            .arg(path)
            .args(args)
            .output()
            .expect("cannot run python")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{script}: failures:\n{stdout}");
    assert!(stdout.contains(" passed, 0 failed"), "{script}:\n{stdout}");
    stdout
}
