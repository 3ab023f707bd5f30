//! The layering written down in `docs/layers.toml` holds: every crate depends only on the
//! crates it may, and inside a layered crate no module uses a module of a layer above its own.
//! An import that points up fails here, naming the file, the line and the two layers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn layers() -> toml::Table {
    let text = std::fs::read_to_string(root().join("docs/layers.toml")).expect("docs/layers.toml");
    text.parse().expect("docs/layers.toml is TOML")
}

/// Our crates each crate's manifest depends on (normal and target-specific dependencies; dev-
/// and build-dependencies are free).
fn sluice_deps(manifest: &Path) -> BTreeSet<String> {
    let m: toml::Table = std::fs::read_to_string(manifest).unwrap().parse().unwrap();
    let mut tables = vec![m.get("dependencies")];
    if let Some(t) = m.get("target").and_then(|t| t.as_table()) {
        tables.extend(t.values().map(|v| v.get("dependencies")));
    }
    tables
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_table())
        .flat_map(|t| t.keys())
        .filter(|k| k.starts_with("sluice"))
        .cloned()
        .collect()
}

#[test]
fn each_crate_depends_only_on_the_crates_below_it() {
    let spec = layers();
    let allowed = spec["crates"].as_table().expect("[crates]");
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let manifest = dir.join("Cargo.toml");
        if !manifest.exists() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let Some(may) = allowed.get(&name).and_then(|v| v.as_array()) else {
            problems.push(format!(
                "{name}: not in docs/layers.toml [crates]; place it"
            ));
            continue;
        };
        let may: BTreeSet<&str> = may.iter().filter_map(|v| v.as_str()).collect();
        for dep in sluice_deps(&manifest) {
            if !may.contains(dep.as_str()) {
                problems.push(format!(
                    "{name} depends on {dep}, which docs/layers.toml does not allow"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `text` without comments and without the contents of string and char literals, so that
/// a path in a doc comment or a message is not taken for an import. Lines are kept.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                if b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else if c == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) {
            // A raw string: r"...", r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c as char);
                i += 1;
                continue;
            }
            j += 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                if b[j] == b'\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j + close.len();
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if i < b.len() && b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == b'\'' && b.get(i + 2) == Some(&b'\'') {
            out.push_str("' '");
            i += 3;
        } else if c == b'\'' && b.get(i + 1) == Some(&b'\\') {
            let end = b[i + 2..]
                .iter()
                .position(|&x| x == b'\'')
                .map_or(b.len(), |p| i + 3 + p);
            out.push_str("' '");
            i = end;
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

/// The top-level modules `crate::` paths in `code` name, with their 1-based lines: plain
/// paths (`crate::relay::SseRelay`) and groups (`use crate::{relay::X, policy}`).
fn crate_refs(code: &str) -> Vec<(String, usize)> {
    let mut refs = Vec::new();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut from = 0;
    while let Some(p) = code[from..].find("crate::") {
        let at = from + p;
        from = at + "crate::".len();
        // `sluice_crate::x` or `mycrate::x` are other paths.
        if at > 0 {
            let prev = code.as_bytes()[at - 1];
            if prev.is_ascii_alphanumeric() || prev == b'_' {
                continue;
            }
        }
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: split at depth 0.
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        let name = ident(group[start..i].trim());
                        if !name.is_empty() {
                            refs.push((name, line_of(at)));
                        }
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let name = ident(group[start..i].trim());
                        if !name.is_empty() {
                            refs.push((name, line_of(at)));
                        }
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                refs.push((name, line_of(at)));
            }
        }
    }
    refs
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file of `src` belongs to (`lib` for lib.rs).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let spec = layers();
    let modules = spec["modules"].as_table().expect("[modules]");
    let mut problems = Vec::new();
    for (krate, v) in modules {
        let layers: Vec<Vec<String>> = v["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                l.as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m.as_str().unwrap().to_string())
                    .collect()
            })
            .collect();
        let layer_of: BTreeMap<&str, usize> = layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.iter().map(move |m| (m.as_str(), i)))
            .collect();
        let src = root().join("crates").join(krate).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        files.sort();
        let present: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
        for m in &present {
            if !layer_of.contains_key(m.as_str()) {
                problems.push(format!(
                    "{krate}: module `{m}` is in no layer of docs/layers.toml; place it"
                ));
            }
        }
        for m in layer_of.keys() {
            if !present.contains(*m) {
                problems.push(format!(
                    "{krate}: docs/layers.toml lists `{m}`, which is gone"
                ));
            }
        }
        for file in &files {
            let own = module_of(&src, file);
            let Some(&own_layer) = layer_of.get(own.as_str()) else {
                continue;
            };
            let code = code_only(&std::fs::read_to_string(file).unwrap());
            for (used, line) in crate_refs(&code) {
                let Some(&used_layer) = layer_of.get(used.as_str()) else {
                    // A crate-root item (re-export, macro), not a module.
                    continue;
                };
                if used_layer < own_layer {
                    problems.push(format!(
                        "{}:{line}: `{own}` (layer {own_layer}) uses `{used}` (layer {used_layer}), above it",
                        file.strip_prefix(root()).unwrap_or(file).display()
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "imports that point up:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_sees_paths_groups_and_ignores_comments_and_strings() {
    let code = code_only(
        "use crate::relay::X;\n// crate::edge::Y\nlet s = \"crate::policy\";\nuse crate::{a::B, c, d::{e, f}};\nsluice_crate::g();\n",
    );
    let refs: Vec<(String, usize)> = crate_refs(&code);
    assert_eq!(
        refs,
        vec![
            ("relay".to_string(), 1),
            ("a".to_string(), 4),
            ("c".to_string(), 4),
            ("d".to_string(), 4)
        ]
    );
}
