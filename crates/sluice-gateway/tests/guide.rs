//! The user guide (`docs/guide/src`) as a test reads it: every TOML example is a config Sluice
//! accepts (loaded as `serve` loads it, with its `env` variables set to stand-in keys) whose
//! routes resolve to the upstreams it names; every error code the gateway's source can return
//! is on the troubleshooting page; every relative link of the guide and the README leads to a
//! file that exists, and every `#anchor` into a guide page to one of its headings.

use std::path::{Path, PathBuf};

use sluice_gateway::config::{Config, EnvMode};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn guide_dir() -> PathBuf {
    root().join("docs/guide/src")
}

/// Every page of the guide: (file name, text), sorted by name.
fn pages() -> Vec<(String, String)> {
    let mut pages: Vec<(String, String)> = std::fs::read_dir(guide_dir())
        .expect("docs/guide/src")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    pages.sort();
    pages
}

fn toml_blocks(text: &str) -> Vec<String> {
    text.split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn every_guide_config_example_loads() {
    let mut loaded = 0;
    let mut pages_with_examples = Vec::new();
    // The README's own examples (its MCP gateway section) are held to the same rule.
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    for (page, text) in pages()
        .into_iter()
        .chain([("README.md".to_string(), readme)])
    {
        let blocks = toml_blocks(&text);
        if !blocks.is_empty() {
            pages_with_examples.push(page.clone());
        }
        for block in blocks {
            // A key for every variable the example reads: the config must load as `serve`
            // would. Variables that have a default in the example are left unset, so the
            // default applies (`${SLUICE_ON_FAILURE:-fail_open}` must name a valid value).
            let env = |name: &str| {
                // The standard variables whose value is a file or a URL, not a secret: a
                // service-account key file (Vertex AI's examples rely on it); no sovereign
                // Entra authority.
                match name {
                    "GOOGLE_APPLICATION_CREDENTIALS" => {
                        return Some(
                            root()
                                .join("crates/sluice-providers/tests/fixtures/google/service_account.json")
                                .display()
                                .to_string(),
                        )
                    }
                    "AZURE_AUTHORITY_HOST" => return None,
                    _ => {}
                }
                let defaulted = block.contains(&format!("${{{name}:-"));
                // Long enough for a secret with a minimum length (`mcp.session_secret`: 32 bytes).
                (!defaulted).then(|| "sk-readme-example-0123456789abcdef-0123456789".to_string())
            };
            let checked = Config::check_toml(&block, &env, EnvMode::Required)
                .unwrap_or_else(|e| panic!("{page}: {e}\n--- in ---\n{block}"));
            let c = checked.config;
            assert!(
                !c.routes.is_empty() && !c.upstreams.is_empty(),
                "{page}: {block}"
            );
            for r in &c.routes {
                for t in r.targets.iter().chain(&r.fallbacks) {
                    assert!(t.upstream.index() < c.upstreams.len());
                }
            }
            loaded += 1;
        }
    }
    assert!(loaded >= 15, "found {loaded} examples");
    // Each capability page has a complete example.
    for page in [
        "quick-start.md",
        "configuration.md",
        "providers.md",
        "routing.md",
        "retries.md",
        "streams.md",
        "keys.md",
        "ledger.md",
        "mcp.md",
        "operations.md",
        "fleet.md",
    ] {
        assert!(
            pages_with_examples.iter().any(|p| p == page),
            "{page} has no ```toml example"
        );
    }
}

/// The `=> "code"` strings of the match arms in `fn name` of a source file.
fn codes_of(file: &str, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let start = text
        .find(&format!("fn {name}("))
        .unwrap_or_else(|| panic!("{file} has no fn {name}"));
    // The function's body: up to the first line that closes it at its own indentation.
    let body = &text[start..];
    let end = body.find("\n    }\n").unwrap_or(body.len());
    let body = &body[..end];
    let mut codes = Vec::new();
    for piece in body.split("=> \"").skip(1) {
        let code = piece.split('"').next().unwrap();
        codes.push(code.to_string());
    }
    assert!(!codes.is_empty(), "{file}: fn {name} has no codes");
    codes
}

#[test]
fn every_error_code_is_in_troubleshooting() {
    let page = std::fs::read_to_string(guide_dir().join("troubleshooting.md")).unwrap();
    let mut codes = Vec::new();
    codes.extend(codes_of("crates/sluice-gateway/src/error.rs", "code"));
    codes.extend(codes_of(
        "crates/sluice-gateway/src/admit/refusal.rs",
        "code",
    ));
    codes.extend(codes_of(
        "crates/sluice-upstream/src/error.rs",
        "metric_label",
    ));
    codes.extend(codes_of("crates/sluice-providers/src/request.rs", "code"));
    codes.extend(codes_of("crates/sluice-state/src/error.rs", "metric_label"));
    codes.extend(codes_of("crates/sluice-state/src/check.rs", "metric_label"));
    // `deadline` is reported as `first_byte_timeout` (error.rs maps it before metric_label).
    codes.retain(|c| c != "deadline");
    assert!(codes.len() >= 50, "{codes:?}");
    let missing: Vec<&String> = codes
        .iter()
        .filter(|c| !page.contains(&format!("`{c}`")))
        .collect();
    assert!(missing.is_empty(), "not in troubleshooting.md: {missing:?}");
}

/// GitHub's and mdBook's anchor of a heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut fence = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of the Markdown links `[text](target)` outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut fence = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        for piece in line.split("](").skip(1) {
            if let Some(target) = piece.split(')').next() {
                out.push(target.to_string());
            }
        }
    }
    out
}

#[test]
fn guide_and_readme_links_resolve() {
    let mut files: Vec<(PathBuf, String)> = pages()
        .into_iter()
        .map(|(name, text)| (guide_dir().join(name), text))
        .collect();
    let readme = root().join("README.md");
    files.push((readme.clone(), std::fs::read_to_string(&readme).unwrap()));
    let mut checked = 0;
    for (file, text) in &files {
        for target in links(text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            assert!(
                dest.exists(),
                "{}: link to {target}: no such file",
                file.display()
            );
            if let Some(f) = fragment {
                let text = std::fs::read_to_string(&dest).unwrap();
                assert!(
                    anchors(&text).iter().any(|a| a == f),
                    "{}: link to {target}: no heading with that anchor",
                    file.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "{checked} links");
    // Every page of the guide is in SUMMARY.md, so mdbook builds it.
    let summary = std::fs::read_to_string(guide_dir().join("SUMMARY.md")).unwrap();
    for (name, _) in pages() {
        if name != "SUMMARY.md" {
            assert!(
                summary.contains(&format!("]({name})")),
                "{name} not in SUMMARY.md"
            );
        }
    }
}

/// One HTTP/1.1 request to `addr`, the whole response as text.
async fn http1(addr: std::net::SocketAddr, path: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// The examples that route to `sluice mock` (every upstream at `127.0.0.1:9090`, no keys or
/// shared state) are served as written, with the mock's address and an ephemeral listener put
/// in: a call and a stream for the first route's model go through and come back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guide_examples_serve_against_the_mock() {
    use sluice_gateway::Gateway;
    use sluice_mock::{MockConfig, MockServer};
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let mut served = Vec::new();
    for (page, text) in pages() {
        for block in toml_blocks(&text) {
            let to_mock = block.contains("base_url = \"http://127.0.0.1:9090")
                && block.matches("base_url = ").count()
                    == block.matches("base_url = \"http://127.0.0.1:9090").count();
            if !to_mock || block.contains("[state]") || block.contains("[[key]]") {
                continue;
            }
            let config: String = block
                .replace("http://127.0.0.1:9090", &mock.url())
                .lines()
                .filter(|l| !l.trim_start().starts_with("admin_listen"))
                .map(|l| {
                    if l.trim_start().starts_with("listen") {
                        "listen = \"127.0.0.1:0\"\naccess_log = \"off\"".to_string()
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n");
            let config = if config.contains("listen = ") {
                config
            } else if config.contains("[server]\n") {
                config.replacen(
                    "[server]\n",
                    "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n",
                    1,
                )
            } else {
                format!("[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"off\"\n{config}")
            };
            let cfg = Config::from_toml(&config, &|_| None)
                .unwrap_or_else(|e| panic!("{page}: {e}\n{config}"));
            let model = cfg.routes[0]
                .models
                .first()
                .map(|g| g.replace('*', "gpt-4o").replace('?', "x"))
                .expect("a model glob");
            let gw = Gateway::start(cfg).await.unwrap();
            let call = http1(
                gw.addr(),
                "/v1/chat/completions",
                &format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#),
            )
            .await;
            assert!(call.starts_with("HTTP/1.1 200"), "{page}: {call}");
            assert!(call.contains("\"choices\""), "{page}: {call}");
            let stream = http1(
                gw.addr(),
                "/v1/chat/completions",
                &format!(
                    r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"hi"}}]}}"#
                ),
            )
            .await;
            assert!(stream.starts_with("HTTP/1.1 200"), "{page}: {stream}");
            assert!(stream.contains("data: [DONE]"), "{page}: {stream}");
            served.push(page.clone());
        }
    }
    for page in ["quick-start.md", "streams.md"] {
        assert!(
            served.iter().any(|p| p == page),
            "{page}: served {served:?}"
        );
    }
}
