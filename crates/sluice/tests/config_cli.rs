//! `sluice check-config` and `sluice serve` reading a config as a user runs them: both ways of
//! naming the file, the exact message for a broken config, `--skip-env`, and the listener's TLS
//! material checked exactly as startup loads it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

const MIN: &str = "[[upstream]]\nname = \"local\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n[[route]]\nmodels = [\"*\"]\nupstream = \"local\"\n";

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sluice-cfgcli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sluice(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        // The variables the configs below use are never taken from the test's environment.
        .env_remove("SLUICE_CFG_HOST")
        .env_remove("SLUICE_CFG_KEY")
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts `sluice serve ARGS --listen 127.0.0.1:0` and returns its first stdout line, or its
/// exit output if it refused to start.
fn serve(args: &[&str]) -> Result<String, Output> {
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.is_empty() {
        return Err(child.wait_with_output().unwrap());
    }
    drop(Proc(child));
    Ok(line)
}

#[test]
fn check_config_and_serve_take_the_file_both_ways() {
    let dir = TempDir::new("forms");
    let cfg = dir.write("sluice.toml", MIN);
    let cfg = cfg.to_str().unwrap();
    for args in [
        ["check-config", cfg, "", ""],
        ["check-config", "--config", cfg, ""],
    ] {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let out = sluice(&args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert_eq!(
            stdout(&out),
            format!("{cfg}: ok (1 upstream(s), 1 route(s), listen 127.0.0.1:8080)\n")
        );
        assert_eq!(stderr(&out), "");
    }
    for args in [vec![cfg], vec!["--config", cfg], vec!["-c", cfg]] {
        let line = serve(&args).unwrap_or_else(|out| panic!("{args:?}: {out:?}"));
        assert!(line.starts_with("listening on 127.0.0.1:"), "{line}");
    }
    // One file, not two.
    let out = sluice(&["check-config", cfg, "--config", cfg]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = sluice(&["check-config"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// Broken configs and the message each gets after `error: FILE is not a valid config: `.
fn broken_cases() -> Vec<(String, &'static str)> {
    vec![
        (
            MIN.replace("name = \"local\"", "name = \"local\"\ntimeouts = { idle = 30 }"),
            "line 3: upstream[0].timeouts.idle: expected a duration string such as \"30s\", \
             found the number 30: write \"30s\" for seconds or \"30ms\" for milliseconds",
        ),
        (
            format!("[server]\nlisten = \"127.0.0.1:8080\"\n\n# the next line has a typo\n\nheartbeet = \"15s\"\n\n{MIN}"),
            "line 6: server.heartbeet: unknown field; did you mean `heartbeat`?",
        ),
        (
            MIN.replace(
                "upstream = \"local\"\n",
                "upstream = \"local\"\non_client_disconnect = \"drian\"\n",
            ),
            "line 8: route[0].on_client_disconnect: `drian` is not one of `cancel`, `drain`; did \
             you mean `drain`?",
        ),
        (
            format!("[server]\nmax_request_body = \"16M\"\n{MIN}"),
            "line 2: server.max_request_body: `16M`: `M` is ambiguous; write 16MiB (powers of \
             1024) or 16MB (powers of 1000)",
        ),
        (
            MIN.replace("127.0.0.1:9", "${SLUICE_CFG_HOST}"),
            "line 3: upstream[0].base_url: the environment variable `SLUICE_CFG_HOST` is not \
             set; set it, or give a default with ${SLUICE_CFG_HOST:-value}",
        ),
    ]
}

#[test]
fn broken_configs_name_the_line_the_field_and_the_fix() {
    let dir = TempDir::new("broken");
    let cases = broken_cases();
    for (i, (text, want)) in cases.iter().enumerate() {
        let file = dir.write(&format!("bad{i}.toml"), text);
        let file = file.to_str().unwrap();
        let out = sluice(&["check-config", file]);
        assert_eq!(out.status.code(), Some(1), "{text}\n{out:?}");
        assert_eq!(
            stderr(&out),
            format!("error: {file} is not a valid config: {want}\n"),
            "{text}"
        );
        // serve refuses with the same words, and starts nothing.
        let out = serve(&[file]).unwrap_err();
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains(want), "{}", stderr(&out));
    }
}

#[test]
fn skip_env_checks_a_config_without_its_secrets() {
    let dir = TempDir::new("skipenv");
    let text = MIN.replace("127.0.0.1:9", "${SLUICE_CFG_HOST}").replace(
        "name = \"local\"",
        "name = \"local\"\nauth = { type = \"bearer\", env = \"SLUICE_CFG_KEY\" }",
    );
    let file = dir.write("ci.toml", &text);
    let file = file.to_str().unwrap();
    let out = sluice(&["check-config", file]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("SLUICE_CFG_HOST"), "{out:?}");

    let out = sluice(&["check-config", "--skip-env", file]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stderr(&out),
        format!(
            "warning: {file}: line 3: upstream[0].auth.env: the environment variable \
             `SLUICE_CFG_KEY` (the upstream's key) is not set; not checked (--skip-env)\n\
             warning: {file}: line 4: upstream[0].base_url: the environment variable \
             `SLUICE_CFG_HOST` is not set; `unset-sluice-cfg-host` stands in for it \
             (--skip-env)\n"
        )
    );
    assert!(
        stdout(&out).ends_with(", 2 warnings)\n"),
        "{}",
        stdout(&out)
    );

    // What does not need the environment is still checked.
    let broken = dir.write("ci-broken.toml", &text.replace("[\"*\"]", "[]"));
    let out = sluice(&["check-config", "--skip-env", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("route[0].models"), "{out:?}");
}

/// A self-signed certificate for localhost, valid from yesterday for `days`, and its key.
fn cert_pair(days: i64) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(days);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn tls_config(dir: &TempDir, name: &str, cert: &Path, key: &Path) -> PathBuf {
    dir.write(
        name,
        &format!(
            "[server]\ntls = {{ cert = \"{}\", key = \"{}\" }}\n\n{MIN}",
            cert.display(),
            key.display()
        ),
    )
}

#[test]
fn tls_material_is_checked_as_startup_loads_it() {
    let dir = TempDir::new("tls");
    let (cert_pem, key_pem) = cert_pair(365);
    let cert = dir.write("cert.pem", &cert_pem);
    let key = dir.write("key.pem", &key_pem);

    // A good pair: ok, nothing to say, and it serves.
    let good = tls_config(&dir, "good.toml", &cert, &key);
    let good = good.to_str().unwrap();
    let out = sluice(&["check-config", good]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stderr(&out), "");
    assert!(serve(&[good]).is_ok());

    // A key that is not the certificate's: refused by both, naming server.tls.
    let (_, other_pem) = cert_pair(365);
    let other = dir.write("other-key.pem", &other_pem);
    let mismatched = tls_config(&dir, "mismatched.toml", &cert, &other);
    let mismatched = mismatched.to_str().unwrap();
    let want = format!(
        "line 2: server.tls: the private key in {} does not match the certificate in {} (the \
         first certificate must be the server's own, and the key its private key)",
        other.display(),
        cert.display()
    );
    let out = sluice(&["check-config", mismatched]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        stderr(&out),
        format!("error: {mismatched} is not a valid config: {want}\n")
    );
    let out = serve(&[mismatched]).unwrap_err();
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));

    // A weak key (RSA 1024, a fixed test file: rcgen cannot make RSA keys) that the TLS stack
    // refuses: refused by both.
    let weak = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/weak-rsa-1024.key.pem");
    let weak_cfg = tls_config(&dir, "weak.toml", &cert, &weak);
    let weak_cfg = weak_cfg.to_str().unwrap();
    let want = format!(
        "line 2: server.tls.key: the private key in {} cannot be used: failed to parse private \
         key as RSA, ECDSA, or EdDSA; use RSA of 2048 bits or more, ECDSA P-256/P-384 or Ed25519",
        weak.display()
    );
    let out = sluice(&["check-config", weak_cfg]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        stderr(&out),
        format!("error: {weak_cfg} is not a valid config: {want}\n")
    );
    let out = serve(&[weak_cfg]).unwrap_err();
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));

    // A certificate that ends in 3 days: a warning, exit 0.
    let (soon_pem, soon_key_pem) = cert_pair(3);
    let soon = dir.write("soon.pem", &soon_pem);
    let soon_key = dir.write("soon-key.pem", &soon_key_pem);
    let soon_cfg = tls_config(&dir, "soon.toml", &soon, &soon_key);
    let soon_cfg = soon_cfg.to_str().unwrap();
    let out = sluice(&["check-config", soon_cfg]);
    assert!(out.status.success(), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "warning: {soon_cfg}: line 2: server.tls.cert: the certificate in {} \
             (CN=rcgen self signed cert) expires in 3 days (",
            soon.display()
        )),
        "{err}"
    );
    assert!(err.ends_with("); renew it\n"), "{err}");
    assert!(stdout(&out).ends_with(", 1 warning)\n"), "{}", stdout(&out));
}

/// The error examples of the guide's configuration page are the messages tested above.
#[test]
fn readme_error_examples_are_tested_messages() {
    let readme = include_str!("../../../docs/guide/src/configuration.md");
    let prefix = "error: sluice.toml is not a valid config: ";
    let examples: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .collect();
    assert!(examples.len() >= 4, "{examples:?}");
    let tested: Vec<&str> = broken_cases().iter().map(|(_, want)| *want).collect();
    for e in examples {
        assert!(tested.contains(&e), "guide example not tested: {e}");
    }
}
