//! Runs the request-head fuzz target's property over a few thousand pseudo-random,
//! JSON-flavoured inputs, so `cargo test` exercises it without cargo-fuzz.

mod fuzz_head_check;

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
        (self.next() % n as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\"model\"",
    "\"stream\"",
    "\"max_tokens\"",
    "\"max_completion_tokens\"",
    "true",
    "false",
    "null",
    "12",
    "-1",
    "1e400",
    "\"gpt-4o\"",
    "\"gpt-4o-mini\"",
    "\"claude-3-opus\"",
    "\"模型-x\"",
    "\"mini\"",
    "\"\\u0000\"",
    "\"\\n\"",
    "\"\\ud800\"",
    " ",
    "\n",
    "\u{1b}[31m",
    "é",
    "\"a status=999\"",
];

#[test]
fn routing_holds_on_pseudo_random_heads_and_bodies() {
    let config = fuzz_head_check::config();
    let mut rng = Rng(0x005E_ED0F_4EAD);
    for case in 0..6000 {
        let mut data = vec![rng.next() as u8, rng.next() as u8];
        if case % 3 == 0 {
            // Mostly well-formed: {"model": <piece>, "stream": <piece>}
            data.extend_from_slice(b"{\"model\":");
            data.extend_from_slice(PIECES[rng.below(PIECES.len())].as_bytes());
            data.extend_from_slice(b",\"stream\":");
            data.extend_from_slice(PIECES[rng.below(PIECES.len())].as_bytes());
            data.extend_from_slice(b"}");
        } else {
            for _ in 0..rng.below(40) {
                if rng.below(8) == 0 {
                    data.push(rng.next() as u8);
                } else {
                    data.extend_from_slice(PIECES[rng.below(PIECES.len())].as_bytes());
                }
            }
        }
        fuzz_head_check::check(&config, &data);
    }
    // A huge model: a bounded message, and a glob match that does not copy it.
    let mut big = vec![0u8, 0];
    big.extend_from_slice(format!("{{\"model\":\"x{}\"}}", "y".repeat(10 << 20)).as_bytes());
    fuzz_head_check::check(&config, &big);
}
