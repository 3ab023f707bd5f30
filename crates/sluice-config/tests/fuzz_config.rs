//! Runs the config fuzz target's property (`fuzz/fuzz_targets/config.rs`) over a few thousand
//! deterministic mutations of the project's real configs (the example config and every TOML
//! block of the README), so `cargo test` exercises it without cargo-fuzz: loading any text
//! never panics, and a refusal names a line within the text.

use sluice_config::{Config, EnvMode};

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Pieces a mutation inserts: TOML syntax, the config's own words and odd values.
const PIECES: &[&str] = &[
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    "=",
    ",",
    "\"",
    "'",
    "\n",
    "#",
    ".",
    "${",
    "}",
    ":-",
    "${HOME}",
    "${NOPE:-x}",
    "upstream",
    "route",
    "server",
    "listen",
    "base_url",
    "models",
    "targets",
    "fallbacks",
    "timeouts",
    "pool",
    "retry",
    "key",
    "hash",
    "state",
    "price",
    "\"1m30s\"",
    "\"16MiB\"",
    "\"-1s\"",
    "0",
    "-1",
    "1e309",
    "true",
    "\"h2c\"",
    "\"http1\"",
    "\"*\"",
    "\"\"",
    "[]",
    "{}",
    "\u{0}",
    "é",
    "\u{202e}",
    "18446744073709551616",
];

fn corpus() -> Vec<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut texts = vec![
        std::fs::read_to_string(format!("{root}/sluice.example.toml"))
            .expect("sluice.example.toml"),
    ];
    let guide = format!("{root}/docs/guide/src");
    let mut pages: Vec<_> = std::fs::read_dir(&guide)
        .expect("docs/guide/src")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for block in text.split("```toml\n").skip(1) {
            texts.push(block.split("```").next().unwrap_or("").to_string());
        }
    }
    texts
}

fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut s: Vec<char> = text.chars().collect();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(s.len() + 1);
        match rng.below(4) {
            0 if !s.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(s.len());
                s.drain(at.min(s.len())..end);
            }
            1 => {
                let piece = PIECES[rng.below(PIECES.len())];
                s.splice(at..at, piece.chars());
            }
            2 if !s.is_empty() => {
                // Duplicate a stretch (repeated tables and keys).
                let start = rng.below(s.len());
                let end = (start + 1 + rng.below(64)).min(s.len());
                let copy: Vec<char> = s[start..end].to_vec();
                s.splice(at..at, copy);
            }
            _ => {
                let c = char::from_u32(rng.below(0x80) as u32).unwrap_or(' ');
                s.insert(at, c);
            }
        }
    }
    s.into_iter().collect()
}

#[test]
fn any_config_text_loads_or_is_refused_with_a_line_inside_it() {
    let corpus = corpus();
    assert!(corpus.len() >= 8, "corpus of {}", corpus.len());
    let mut rng = Rng(0x5eed_c0f1_9000_0001);
    let mut refused = 0;
    for i in 0..3000 {
        let text = mutate(&mut rng, &corpus[i % corpus.len()]);
        if let Err(e) = Config::check_toml(&text, &|_| None, EnvMode::Skip) {
            refused += 1;
            if let Some(line) = e.line {
                assert!(
                    line >= 1 && line <= text.lines().count().max(1) + 1,
                    "line {line} outside the text: {e}\n--- text ---\n{text}"
                );
            }
        }
    }
    // Mutations break most configs: the refusal path is what is exercised.
    assert!(
        refused > 1000,
        "only {refused} of 3000 mutated configs were refused"
    );
}
