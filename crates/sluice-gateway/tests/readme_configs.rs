//! Every TOML example in the README's gateway section is a config Sluice accepts: loaded as
//! `serve` loads it (with its `env` variables set to stand-in keys), and the routes it shows
//! resolve to the upstreams it names.

use sluice_gateway::config::{Config, EnvMode};

fn readme_gateway_section() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let start = readme
        .find("## `sluice serve`")
        .expect("the gateway section");
    let end = readme[start..]
        .find("\n## `sluice mock`")
        .map_or(readme.len(), |e| start + e);
    readme[start..end].to_string()
}

fn toml_blocks(text: &str) -> Vec<String> {
    text.split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn every_readme_config_example_loads() {
    let blocks = toml_blocks(&readme_gateway_section());
    assert!(blocks.len() >= 7, "found {} examples", blocks.len());
    for block in blocks {
        // A key for every variable the example reads: the config must load as `serve` would.
        // Variables that have a default in the example are left unset, so the default
        // applies (`${SLUICE_ON_FAILURE:-fail_open}` must name a valid value).
        let env = |name: &str| {
            let defaulted = block.contains(&format!("${{{name}:-"));
            // Long enough for a secret with a minimum length (`mcp.session_secret`: 32 bytes).
            (!defaulted).then(|| "sk-readme-example-0123456789abcdef-0123456789".to_string())
        };
        let checked = Config::check_toml(&block, &env, EnvMode::Required)
            .unwrap_or_else(|e| panic!("{e}\n--- in ---\n{block}"));
        let c = checked.config;
        assert!(!c.routes.is_empty() && !c.upstreams.is_empty(), "{block}");
        for r in &c.routes {
            for t in r.targets.iter().chain(&r.fallbacks) {
                assert!(t.upstream.index() < c.upstreams.len());
            }
        }
    }
}
