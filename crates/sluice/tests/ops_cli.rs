//! `sluice --version`, `sluice completions` and `sluice init` as a user runs them; every
//! starter config passes `sluice check-config`.

use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn sluice(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args);
    for var in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "VLLM_URL",
    ] {
        c.env_remove(var);
    }
    c.envs(env.iter().copied());
    c.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn version_names_the_release_and_the_commit() {
    let out = sluice(&["--version"], &[]);
    assert!(out.status.success());
    let v = text(&out.stdout);
    let rest = v
        .strip_prefix(&format!("sluice {} (git ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{v}"));
    let hash = rest.trim_end().strip_suffix(')').unwrap();
    // A checkout with git gives the short hash; a tarball without it says so.
    assert!(
        hash == "unknown" || (hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit())),
        "{v}"
    );
}

#[test]
fn completions_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _sluice"),
        ("zsh", "#compdef sluice"),
        ("fish", "complete -c sluice"),
    ] {
        let out = sluice(&["completions", shell], &[]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains("check-config") && script.contains("init"),
            "{shell}"
        );
    }
    let bad = sluice(&["completions", "cmd"], &[]);
    assert_eq!(bad.status.code(), Some(2));
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn every_starter_config_passes_check_config() {
    let dir = TempDir(std::env::temp_dir().join(format!("sluice-init-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    for (provider, key) in [
        ("openai", Some("OPENAI_API_KEY")),
        ("anthropic", Some("ANTHROPIC_API_KEY")),
        ("gemini", Some("GEMINI_API_KEY")),
        ("vllm", None),
    ] {
        let file = dir.0.join(format!("{provider}.toml"));
        let f = file.to_str().unwrap();
        let out = sluice(&["init", "--provider", provider, "--output", f], &[]);
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        assert!(text(&out.stdout).starts_with(&format!("wrote {f}")));
        let written = std::fs::read_to_string(&file).unwrap();
        // The first line points editors at the schema, written beside the config.
        assert!(
            written.starts_with("#:schema ./sluice.schema.json\n# Sluice starter config"),
            "commented"
        );
        let schema = std::fs::read_to_string(dir.0.join("sluice.schema.json")).unwrap();
        assert_eq!(schema, text(&sluice(&["config", "schema"], &[]).stdout));
        // With the key in the environment: exactly what `serve` loads.
        let env: Vec<(&str, &str)> = key.map(|k| (k, "sk-test")).into_iter().collect();
        let check = sluice(&["check-config", f], &env);
        assert!(
            check.status.success(),
            "{provider}: {}{}",
            text(&check.stdout),
            text(&check.stderr)
        );
        assert!(text(&check.stdout).contains(": ok ("), "{provider}");
        // Without it: an error naming the variable, and a warning under --skip-env.
        if let Some(k) = key {
            let missing = sluice(&["check-config", f], &[]);
            assert_eq!(missing.status.code(), Some(1));
            assert!(
                text(&missing.stderr).contains(k),
                "{}",
                text(&missing.stderr)
            );
            let skip = sluice(&["check-config", "--skip-env", f], &[]);
            assert!(skip.status.success(), "{}", text(&skip.stderr));
        }
        // An existing file is kept unless --force.
        let again = sluice(&["init", "--provider", provider, "--output", f], &[]);
        assert_eq!(again.status.code(), Some(1));
        assert!(
            text(&again.stderr).contains("--force"),
            "{}",
            text(&again.stderr)
        );
        let forced = sluice(
            &["init", "--provider", provider, "--output", f, "--force"],
            &[],
        );
        assert!(forced.status.success());
    }
    let printed = sluice(&["init", "--provider", "vllm", "--output", "-"], &[]);
    assert!(text(&printed.stdout).contains("protocol = \"http1\""));
}

#[test]
fn the_container_config_checks_with_its_environment() {
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/container.toml");
    let ok = sluice(
        &["check-config", cfg],
        &[
            ("OPENAI_API_KEY", "sk-test"),
            ("SLUICE_ADMIN_TOKEN", "0123456789abcdef0123456789abcdef"),
        ],
    );
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    // Without the admin token the admin plane would be open on 0.0.0.0: refused.
    let open = sluice(&["check-config", cfg], &[("OPENAI_API_KEY", "sk-test")]);
    assert_eq!(open.status.code(), Some(1));
    assert!(
        text(&open.stderr).contains("SLUICE_ADMIN_TOKEN"),
        "{}",
        text(&open.stderr)
    );
}

/// `systemctl reload` sends SIGHUP: the gateway must keep serving.
#[cfg(unix)]
#[tokio::test]
async fn sighup_does_not_stop_the_gateway() {
    use std::io::{BufRead, BufReader, Read, Write};
    let dir = TempDir(std::env::temp_dir().join(format!("sluice-hup-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let cfg = dir.0.join("s.toml");
    std::fs::write(
        &cfg,
        "[[upstream]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[[route]]\nmodels = [\"*\"]\nupstream = \"u\"\n",
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args([
            "serve",
            cfg.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = lines
        .next()
        .unwrap()
        .unwrap()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let admin = lines.next().unwrap().unwrap();
    assert!(admin.starts_with("admin on 127.0.0.1:"), "{admin}");
    let healthz = || {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(healthz().starts_with("HTTP/1.1 200"));
    let pid = child.id().to_string();
    let kill = |sig: &str| {
        let st = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(st.success());
    };
    kill("-HUP");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "still running after SIGHUP"
    );
    assert!(healthz().starts_with("HTTP/1.1 200"));
    kill("-TERM");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}
